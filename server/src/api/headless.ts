// `node dist/server.js --api 127.0.0.1:PORT`: the OpenAI-compatible API with
// no editor, for scripts, CI and agents. The token comes from
// $RUNAHEAD_API_TOKEN; the model from $RUNAHEAD_MODEL (else the embedded
// one), the engine from $RUNAHEAD_ENGINE (else the bundled one), or a
// remote server from $RUNAHEAD_REMOTE_URL.
import type { Log } from '../log';
import { Runahead } from '../runahead';
import { defaultSettings, readSettings } from '../settings';
import { checkLoopback, parseListen, ApiServer } from './server';

export async function serveHeadless(listen: string): Promise<void> {
  const log: Log = (level, line) => process.stderr.write(`[${level}] ${line}\n`);
  const { host, port } = parseListen(listen);
  checkLoopback(host);
  const token = process.env.RUNAHEAD_API_TOKEN ?? '';
  if (token.length < 16) throw new Error('set RUNAHEAD_API_TOKEN to a secret of at least 16 characters (e.g. `export RUNAHEAD_API_TOKEN=$(openssl rand -hex 32)`); clients send it as "Authorization: Bearer …"');
  const env = process.env;
  const runahead = new Runahead(log, (s) => log(s.state === 'error' ? 'error' : 'info', `status ${s.state}${s.message ? `: ${s.message}` : ''}`));
  runahead.configure(
    readSettings({
      ...defaultSettings,
      modelPath: env.RUNAHEAD_MODEL ?? '',
      enginePath: env.RUNAHEAD_ENGINE ?? '',
      ...(env.RUNAHEAD_REMOTE_URL ? { backend: 'remote', remote: { ...defaultSettings.remote, url: env.RUNAHEAD_REMOTE_URL, model: env.RUNAHEAD_REMOTE_MODEL ?? '' } } : {}),
    }),
  );
  if (env.RUNAHEAD_API_MAX_QUEUE) runahead.agent.maxQueue = Number(env.RUNAHEAD_API_MAX_QUEUE);
  const api = await ApiServer.listen(runahead.agent, { host, port, token });
  log('info', `OpenAI-compatible API on ${api.url}`);
  process.stdout.write(`listening ${api.url}\n`);
  const end = () => {
    runahead.killNow();
    process.exit(0);
  };
  process.on('exit', () => runahead.killNow());
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, end);
}
