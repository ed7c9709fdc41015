#!/usr/bin/env node
// Reliability under an editor's load: N inline-completion requests over LSP to
// the real server and engine, each after a keystroke, half of them cancelled
// mid-stream (as a fast typist does). Reports requests left hanging, engine
// RSS growth and server heap growth between warm-up and the end, and fails
// (exit 1) past the bounds: 0 hanging, RSS growth < 5 %, heap growth < 25 %.
//
//   node esbuild.mjs && node test/bench/reliability.mjs [--requests 10000] [--model DIR] [--engine PATH]
//        [--max-tokens 64] [--cancel-within-ms 8] [--trigger invoked|typing]
// A cancel comes 0..cancel-within-ms after its request.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { CancellationTokenSource, createProtocolConnection, InlineCompletionRequest, StreamMessageReader, StreamMessageWriter } from 'vscode-languageserver-protocol/node';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const total = Number(arg('requests', 10000));
const model = arg('model', join(root, 'test', 'fixtures', 'models', 'qwen2-tied-bf16'));
const engine = arg('engine', process.env.RUNAHEAD_ENGINE ?? join(root, 'engine', 'build', 'runahead-engine'));
const hangMs = 10_000;
const cancelWithinMs = Number(arg('cancel-within-ms', 8));
// invoked (1) skips the debounce, so cancels reach the engine; typing (2) is the editor's automatic trigger.
const triggerKind = arg('trigger', 'invoked') === 'typing' ? 2 : 1;
const server = join(root, 'dist', 'server.js');
for (const [what, p] of [['server bundle (node esbuild.mjs)', server], ['engine (node engine/setup.mjs)', engine], ['model', model]]) {
  if (!existsSync(p)) {
    console.error(`missing ${what}: ${p}`);
    process.exit(2);
  }
}

const child = spawn(process.execPath, ['--expose-gc', server, '--stdio'], { stdio: ['pipe', 'pipe', 'inherit'] });
const conn = createProtocolConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
let status;
conn.onNotification('runahead/status', (s) => (status = s));
conn.onNotification('runahead/metrics', () => undefined);
conn.onNotification('window/logMessage', () => undefined);
conn.listen();

const settings = { modelPath: model, enginePath: engine, maxTokens: Number(arg('max-tokens', 64)), deadlineMs: 2000, debounceMs: 0 };
await conn.sendRequest('initialize', { processId: process.pid, rootUri: pathToFileURL(root).href, capabilities: {}, initializationOptions: { settings } });
await conn.sendNotification('initialized', {});
const t0 = Date.now();
while (!['ready', 'degraded', 'error'].includes(status?.state)) {
  if (Date.now() - t0 > 60_000) throw new Error(`engine not ready: ${JSON.stringify(status)}`);
  await new Promise((r) => setTimeout(r, 20));
}
if (status.state === 'error') throw new Error(status.message);

const uri = pathToFileURL(join(root, 'bench', 'typing.py')).href;
const head = 'import os\nimport sys\n\n\ndef main(argv):\n    paths = [p for p in argv if os.path.exists(p)]\n    ';
let typed = '';
let version = 1;
await conn.sendNotification('textDocument/didOpen', { textDocument: { uri, languageId: 'python', version, text: head } });

const alphabet = 'abcdefghijklmnopqrstuvwxyz_ (.=,)';
let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);

function keystroke() {
  typed += rand() < 0.05 ? '\n    ' : alphabet[Math.floor(rand() * alphabet.length)];
  if (typed.length > 400) typed = '';
  version++;
  const text = head + typed;
  void conn.sendNotification('textDocument/didChange', { textDocument: { uri, version }, contentChanges: [{ text }] });
  const lines = text.split('\n');
  return { line: lines.length - 1, character: lines[lines.length - 1].length };
}

const stats = async () => conn.sendRequest('runahead/stats');
// served: ghost text came back; empty: answered with nothing to show (post-processing left
// nothing, or the engine was busy); cancelled: cancelled by us and answered; errors: an LSP
// error; hanging: no answer within hangMs.
const outcome = { served: 0, empty: 0, cancelled: 0, errors: 0, hanging: 0 };
const pending = new Set();

async function one(i) {
  const pos = keystroke();
  const cancel = i % 2 === 1;
  const cts = new CancellationTokenSource();
  let timer;
  const settled = conn
    .sendRequest(InlineCompletionRequest.type, { textDocument: { uri }, position: pos, context: { triggerKind } }, cts.token)
    .then((r) => (cancel ? 'cancelled' : r && r.items?.length ? 'served' : 'empty'), (e) => (cancel && e?.code === -32800 ? 'cancelled' : 'errors'));
  const hang = new Promise((r) => (timer = setTimeout(() => r('hanging'), hangMs)));
  const p = Promise.race([settled, hang]).then((r) => {
    clearTimeout(timer);
    outcome[r]++;
  });
  pending.add(p);
  void p.finally(() => pending.delete(p));
  if (cancel) {
    // Cancel while the engine streams, then type the next key right away, as a fast typist does.
    await new Promise((r) => setTimeout(r, Math.floor(rand() * cancelWithinMs)));
    cts.cancel();
  } else {
    await p;
  }
}

const mb = (b) => `${(b / 2 ** 20).toFixed(2)} MiB`;
// Warm-up fills the bounded caches (tokenizer words, line token counts, completions).
const warmup = Math.min(2500, Math.floor(total / 4));
const started = Date.now();
let base;
for (let i = 0; i < total; i++) {
  if (i === warmup) {
    await Promise.all(pending);
    base = await stats();
  }
  await one(i);
  if ((i + 1) % 1000 === 0) {
    const s = await stats();
    console.log(`${i + 1}/${total} requests, ${((Date.now() - started) / 1000).toFixed(0)} s, ${JSON.stringify(outcome)}, server heap ${mb(s.server.heapUsed)}, engine RSS ${mb(s.engine?.rss_bytes ?? 0)}`);
  }
}
await Promise.all(pending);
await new Promise((r) => setTimeout(r, 500));
const end = await stats();
const seconds = (Date.now() - started) / 1000;

const rssGrowth = base.engine && end.engine ? (end.engine.rss_bytes - base.engine.rss_bytes) / base.engine.rss_bytes : NaN;
const heapGrowth = (end.server.heapUsed - base.server.heapUsed) / base.server.heapUsed;
console.log(`\nreliability: ${total} requests in ${seconds.toFixed(1)} s (${((1000 * seconds) / total).toFixed(1)} ms/request), half cancelled mid-stream`);
console.log(`  outcome: ${JSON.stringify(outcome)}; engine restarts: ${status.restarts}`);
console.log(`  server: ${JSON.stringify(end.completions)} (cancelledInEngine: the engine was streaming when the cancel came)`);
console.log(`  engine RSS after ${warmup} warm-up requests ${mb(base.engine?.rss_bytes ?? 0)} -> end ${mb(end.engine?.rss_bytes ?? 0)}: ${(100 * rssGrowth).toFixed(2)} % (bound 5 %)`);
console.log(`  server heap after warm-up ${mb(base.server.heapUsed)} -> end ${mb(end.server.heapUsed)}: ${(100 * heapGrowth).toFixed(2)} % (bound 25 %); server RSS ${mb(base.server.rss)} -> ${mb(end.server.rss)}`);
const ok = outcome.hanging === 0 && outcome.errors === 0 && rssGrowth < 0.05 && heapGrowth < 0.25;
console.log(ok ? 'PASS' : 'FAIL');
await conn.sendRequest('shutdown').catch(() => undefined);
void conn.sendNotification('exit');
setTimeout(() => process.exit(ok ? 0 : 1), 300);
