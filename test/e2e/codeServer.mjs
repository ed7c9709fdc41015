// Starts code-server (VS Code in the browser) for one run, isolated from the
// machine's own VS Code state: its own HOME, TMPDIR, user-data and extensions
// folders under a fresh run folder, bound to 127.0.0.1 on a free port, no auth.
// Everything it starts is stopped by PID: its process group and every
// descendant, found through /proc, even ones that left the group.
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { alive } from './tools.mjs';

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const sampleWorkspace = join(repoRoot, 'test', 'e2e', 'workspace');
export const defaultModel = join(repoRoot, 'engine', 'models', 'runahead-coder');
export const fixtureModel = join(repoRoot, 'test', 'fixtures', 'models', 'qwen2-tied-bf16');

const log = (msg) => console.log(`[e2e] ${msg}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Settings that keep the workbench quiet and deterministic, and inline suggestions on. */
export const userSettings = {
  'workbench.startupEditor': 'none',
  'workbench.tips.enabled': false,
  'workbench.welcomePage.walkthroughs.openOnInstall': false,
  'workbench.enableExperiments': false,
  'workbench.secondarySideBar.defaultVisibility': 'hidden',
  'security.workspace.trust.enabled': false,
  'telemetry.telemetryLevel': 'off',
  'extensions.autoUpdate': false,
  'extensions.autoCheckUpdates': false,
  'extensions.ignoreRecommendations': true,
  'update.mode': 'none',
  'editor.inlineSuggest.enabled': true,
  // The suggest widget would take Tab from the ghost text.
  'editor.quickSuggestions': { other: 'off', comments: 'off', strings: 'off' },
  'editor.suggestOnTriggerCharacters': false,
  'editor.wordBasedSuggestions': 'off',
  'editor.parameterHints.enabled': false,
  'editor.minimap.enabled': false,
  'files.autoSave': 'off',
  'git.enabled': false,
  'chat.disableAIFeatures': true,
};

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** The model the editor will use: the embedded default, else a fixture (said loudly). */
export function chooseModel() {
  if (existsSync(join(defaultModel, 'config.json'))) return { path: defaultModel, isDefault: true };
  const banner = '!'.repeat(78);
  console.log(`${banner}\n[e2e] WARNING: the embedded default model ${defaultModel} is absent.\n` +
    `[e2e] WARNING: falling back to the random fixture ${fixtureModel} (runahead.modelPath);\n` +
    `[e2e] WARNING: completions will be gibberish and this run does not test the shipped model.\n${banner}`);
  return { path: fixtureModel, isDefault: false };
}

/** A fresh run folder: home/, tmp/, user-data/ (with User and Machine settings), extensions/, workspace/ (a copy). */
export function makeRunDir({ settings = {}, workspace = sampleWorkspace, copyWorkspace = true } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'runahead-e2e-'));
  const paths = {
    dir,
    home: join(dir, 'home'),
    tmp: join(dir, 'tmp'),
    userData: join(dir, 'user-data'),
    extensions: join(dir, 'extensions'),
    workspace: copyWorkspace ? join(dir, 'workspace') : workspace,
    log: join(dir, 'code-server.log'),
  };
  for (const p of [paths.home, paths.tmp, join(paths.userData, 'User'), join(paths.userData, 'Machine'), paths.extensions]) mkdirSync(p, { recursive: true });
  if (copyWorkspace) cpSync(workspace, paths.workspace, { recursive: true });
  writeFileSync(join(paths.userData, 'User', 'settings.json'), JSON.stringify({ ...userSettings, ...settings }, null, 2));
  // code-server's window is a remote one: it reads `machine` settings (runahead.modelPath …) from Machine/settings.json only.
  writeFileSync(join(paths.userData, 'Machine', 'settings.json'), JSON.stringify(settings, null, 2));
  return paths;
}

function isolatedEnv(tools, run) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    // The extension must find its engine and model as an installed user's would.
    if (k.startsWith('VSCODE_') || k.startsWith('RUNAHEAD_') || k.startsWith('npm_') || k === 'ELECTRON_RUN_AS_NODE') continue;
    env[k] = v;
  }
  return {
    ...env,
    HOME: run.home,
    TMPDIR: run.tmp,
    XDG_CONFIG_HOME: join(run.home, '.config'),
    XDG_DATA_HOME: join(run.home, '.local', 'share'),
    XDG_CACHE_HOME: join(run.home, '.cache'),
    PATH: `${tools.nodeBin}:${process.env.PATH}`,
  };
}

/** Installs a .vsix into the run's extensions folder with code-server's own CLI. */
export function installExtension(tools, run, vsix) {
  const r = spawnSync(tools.node, [tools.codeServer, '--user-data-dir', run.userData, '--extensions-dir', run.extensions, '--install-extension', vsix, '--force'],
    { encoding: 'utf8', env: isolatedEnv(tools, run), timeout: 120_000 });
  const out = `${r.stdout ?? ''}${r.stderr ?? ''}`;
  if (r.status !== 0 || !/successfully installed/i.test(out)) throw new Error(`installing ${vsix} into code-server failed (status ${r.status}):\n${out}`);
  const installed = readdirSync(run.extensions).filter((n) => !n.startsWith('.') && n !== 'extensions.json');
  log(`installed ${vsix} → ${installed.join(', ')}`);
  return installed;
}

/** Parent PID of every process, from /proc. */
function processTable() {
  const table = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // pid (comm) state ppid …; comm may hold spaces and parentheses.
      const close = stat.lastIndexOf(')');
      const comm = stat.slice(stat.indexOf('(') + 1, close);
      const ppid = Number(stat.slice(close + 2).split(' ')[1]);
      table.set(Number(name), { pid: Number(name), ppid, comm });
    } catch {
      // The process ended while we read.
    }
  }
  return table;
}

/** Every live descendant of pid (not pid itself), as { pid, ppid, comm }. */
export function descendants(pid) {
  const table = processTable();
  const out = [];
  const frontier = [pid];
  while (frontier.length) {
    const parent = frontier.pop();
    for (const p of table.values()) {
      if (p.ppid === parent) {
        out.push(p);
        frontier.push(p.pid);
      }
    }
  }
  return out;
}

/** The engine processes (named runahead-engine) whose parent chain leads to pid. */
export function enginePids(pid) {
  return descendants(pid).filter((p) => p.comm === 'runahead-engine').map((p) => p.pid);
}

function killQuietly(pid, signal) {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}

/**
 * Starts code-server and resolves once it answers /healthz; workspaceTrust: true keeps VS Code's
 * workspace trust on (also needs `security.workspace.trust.enabled` in the run's settings);
 * env: variables added to the isolated environment (e.g. a test hook's RUNAHEAD_E2E_*).
 * Returns { url, port, pid, stop() }; stop() is idempotent and also runs on process exit.
 */
export async function startCodeServer(tools, run, { port, host = '127.0.0.1', timeoutMs = 90_000, workspaceTrust = false, env = {} } = {}) {
  port ??= await freePort();
  const args = [
    tools.codeServer,
    '--bind-addr', `${host}:${port}`,
    '--auth', 'none',
    '--user-data-dir', run.userData,
    '--extensions-dir', run.extensions,
    '--disable-telemetry',
    '--disable-update-check',
    // Without the flag VS Code asks whether to trust each new folder (unless the settings turn trust off).
    ...(workspaceTrust ? [] : ['--disable-workspace-trust']),
    '--disable-getting-started-override',
    '--ignore-last-opened',
    run.workspace,
  ];
  const out = createWriteStream(run.log);
  const child = spawn(tools.node, args, { env: { ...isolatedEnv(tools, run), ...env }, cwd: run.dir, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.pipe(out);
  child.stderr.pipe(out);
  let exited = null;
  child.on('exit', (code, signal) => { exited = { code, signal }; });

  let stopped = false;
  const stopSync = () => {
    if (stopped) return;
    stopped = true;
    const family = [child.pid, ...descendants(child.pid).map((p) => p.pid)];
    killQuietly(-child.pid, 'SIGTERM');
    for (const pid of family) killQuietly(pid, 'SIGTERM');
    return family;
  };
  const onExit = () => {
    const family = stopSync() ?? [];
    for (const pid of family) killQuietly(pid, 'SIGKILL');
  };
  process.on('exit', onExit);

  const stop = async () => {
    const family = stopSync();
    if (!family) return;
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline && family.some(alive)) await sleep(100);
    const left = family.filter(alive);
    killQuietly(-child.pid, 'SIGKILL');
    for (const pid of left) killQuietly(pid, 'SIGKILL');
    if (left.length) log(`killed ${left.length} process(es) that ignored SIGTERM: ${left.join(' ')}`);
    process.off('exit', onExit);
  };

  const url = `http://${host}:${port}/`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited) throw new Error(`code-server exited (${JSON.stringify(exited)}) before it was ready; log: ${run.log}\n${readFileSync(run.log, 'utf8').slice(-3000)}`);
    try {
      const res = await fetch(`${url}healthz`, { signal: AbortSignal.timeout(2000) });
      if (res.ok) break;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`code-server did not answer ${url}healthz within ${timeoutMs / 1000}s; log: ${run.log}`);
    }
    await sleep(250);
  }
  log(`code-server pid ${child.pid} listening on ${url} (log: ${run.log})`);
  return { url, port, pid: child.pid, stop };
}

/** Ends a test's editor: the browser, code-server, then the run folder, keeping the editor's logs beside the screenshots. */
export async function stopRun({ wb, server, run, artifacts }) {
  await wb?.close();
  await server?.stop();
  if (!run) return;
  if (existsSync(join(run.userData, 'logs'))) cpSync(join(run.userData, 'logs'), join(artifacts, 'logs'), { recursive: true });
  if (existsSync(run.log)) cpSync(run.log, join(artifacts, 'code-server.log'));
  rmSync(run.dir, { recursive: true, force: true });
}
