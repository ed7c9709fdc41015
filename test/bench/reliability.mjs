#!/usr/bin/env node
// Reliability under an editor's load and the engine's faults: N inline-completion
// requests over LSP to the real server and engine, each after an edit
// (didChange: a typed key, a backspace or a new line), half of them cancelled
// mid-stream (as a fast typist does). Halfway the engine is killed (SIGKILL);
// later it is stopped (SIGSTOP) for 3 s, then continued unless the server has
// replaced it. Reports, each beside its bound, and exits 1 past any bound:
//   stuck requests (no answer within 10 s)                 0
//   LSP errors                                             0
//   time until completions come back after each fault      kill 2 s, stop 3 s + 2 s
//   server RSS and heap growth, warm-up to end             < 5 %
//   engine RSS growth, each engine process from its own warm-up to its end  < 5 %
// Completions answered null while the engine is down are fine, and counted.
//
//   node esbuild.mjs && node test/bench/reliability.mjs [--requests 10000] [--model DIR] [--engine PATH]
//        [--max-tokens 64] [--cancel-within-ms 8] [--trigger invoked|typing] [--stop-ms 3000] [--speculation auto|off|lookup]
// A cancel comes 0..cancel-within-ms after its request.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { CancellationTokenSource, createProtocolConnection, InlineCompletionRequest, StreamMessageReader, StreamMessageWriter } from 'vscode-languageserver-protocol/node';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const total = Number(arg('requests', 10000));
// Absolute: the server refuses relative path settings.
const model = resolve(arg('model', join(root, 'test', 'fixtures', 'models', 'qwen2-tied-bf16')));
const engine = resolve(arg('engine', process.env.RUNAHEAD_ENGINE ?? join(root, 'engine', 'build', 'runahead-engine')));
const hangMs = 10_000;
const cancelWithinMs = Number(arg('cancel-within-ms', 8));
const stopMs = Number(arg('stop-ms', 3000));
// invoked (1) skips the debounce, so cancels reach the engine; typing (2) is the editor's automatic trigger.
const triggerKind = arg('trigger', 'invoked') === 'typing' ? 2 : 1;
const bounds = { growth: 0.05, killRecoveryMs: 2000, stopRecoveryMs: stopMs + 2000 };
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
let lastEngineCompletionAt = 0;
conn.onNotification('runahead/status', (s) => (status = s));
conn.onNotification('runahead/metrics', (m) => {
  if (m.source === 'engine' && m.tokens > 0) lastEngineCompletionAt = performance.now();
});
conn.onNotification('window/logMessage', () => undefined);
conn.listen();

const settings = { modelPath: model, enginePath: engine, maxTokens: Number(arg('max-tokens', 64)), deadlineMs: 2000, debounceMs: 0, speculation: arg('speculation', 'auto') };
await conn.sendRequest('initialize', { processId: process.pid, rootUri: pathToFileURL(root).href, capabilities: {}, initializationOptions: { settings } });
await conn.sendNotification('initialized', {});
const t0 = Date.now();
while (!['ready', 'degraded', 'error'].includes(status?.state)) {
  if (Date.now() - t0 > 60_000) throw new Error(`engine not ready: ${JSON.stringify(status)}`);
  await new Promise((r) => setTimeout(r, 20));
}
if (status.state === 'error') throw new Error(status.message);

// The document: a fixed head, then what the typist types; edits are incremental ranges at its end.
const uri = pathToFileURL(join(root, 'bench', 'typing.py')).href;
const head = 'import os\nimport sys\n\n\ndef main(argv):\n    paths = [p for p in argv if os.path.exists(p)]\n    ';
let text = head;
let version = 1;
await conn.sendNotification('textDocument/didOpen', { textDocument: { uri, languageId: 'python', version, text } });

const alphabet = 'abcdefghijklmnopqrstuvwxyz_ (.=,)';
let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);

function position(offset) {
  const before = text.slice(0, offset).split('\n');
  return { line: before.length - 1, character: before[before.length - 1].length };
}

/** One edit at the end of the document; returns the cursor after it. */
function keystroke() {
  const r = rand();
  const end = position(text.length);
  let change;
  if (text.length - head.length > 400) {
    // Select what was typed and delete it (the file stays small).
    change = { range: { start: position(head.length), end }, text: '' };
    text = head;
  } else if (r < 0.1 && text.length > head.length) {
    change = { range: { start: position(text.length - 1), end }, text: '' };
    text = text.slice(0, -1);
  } else {
    const typed = r < 0.15 ? '\n    ' : alphabet[Math.floor(rand() * alphabet.length)];
    change = { range: { start: end, end }, text: typed };
    text += typed;
  }
  version++;
  void conn.sendNotification('textDocument/didChange', { textDocument: { uri, version }, contentChanges: [change] });
  return position(text.length);
}

// served: ghost text came back; empty: answered with nothing to show; down: answered null
// between a fault and the first engine completion after it; cancelled: cancelled by us and
// answered; errors: an LSP error; stuck: no answer within hangMs.
const outcome = { served: 0, empty: 0, down: 0, cancelled: 0, errors: 0, stuck: 0 };
const pending = new Set();
let faultAt; // while set, the engine is down or not yet serving again

async function one(i) {
  const pos = keystroke();
  const cancel = i % 2 === 1;
  const cts = new CancellationTokenSource();
  let timer;
  const settled = conn
    .sendRequest(InlineCompletionRequest.type, { textDocument: { uri }, position: pos, context: { triggerKind } }, cts.token)
    .then(
      (r) => (cancel ? 'cancelled' : r && r.items?.length ? 'served' : faultAt !== undefined ? 'down' : 'empty'),
      (e) => (cancel && e?.code === -32800 ? 'cancelled' : 'errors'),
    );
  const hang = new Promise((r) => (timer = setTimeout(() => r('stuck'), hangMs)));
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
    return undefined;
  }
  return p;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const mb = (b) => `${(b / 2 ** 20).toFixed(2)} MiB`;
const pct = (x) => `${(100 * x).toFixed(2)} %`;

function vmRss(pid) {
  try {
    return Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;
  } catch {
    return undefined;
  }
}

/** Server memory after a garbage collection, and the engine process now serving. */
async function sample() {
  await Promise.all(pending);
  await sleep(200);
  const { server: mem } = await conn.sendRequest('runahead/stats');
  const s = await conn.sendRequest('runahead/status');
  return { heap: mem.heapUsed, rss: mem.rss, external: mem.external, pid: s.pid, engineRss: s.pid ? vmRss(s.pid) : undefined };
}

// Each engine process is measured from its own warm-up to its last sample before a fault (or the end).
const engines = [];
function engineWindow(from, to, label) {
  const same = from.pid && from.pid === to.pid && from.engineRss && to.engineRss;
  engines.push({ label, pid: from.pid, from: from.engineRss, to: same ? to.engineRss : undefined, growth: same ? (to.engineRss - from.engineRss) / from.engineRss : NaN });
}

/** Runs requests until an engine completion comes after `since`; returns the ms from `since` to it. */
async function untilServed(since, i) {
  while (lastEngineCompletionAt < since) {
    await one(i.value++);
    if (performance.now() - since > 60_000) return Infinity;
  }
  faultAt = undefined;
  return lastEngineCompletionAt - since;
}

const faults = {};
async function kill(i) {
  const pid = status.pid;
  const inflight = one(i.value++);
  await sleep(2);
  faultAt = performance.now();
  process.kill(pid, 'SIGKILL');
  await inflight;
  faults.kill = { pid, recoveryMs: await untilServed(faultAt, i) };
}

async function stop(i) {
  const pid = status.pid;
  faultAt = performance.now();
  process.kill(pid, 'SIGSTOP');
  // Continued after stopMs unless the server has killed it by then; requests go on meanwhile.
  let replaced;
  const held = sleep(stopMs).then(() => {
    replaced = vmRss(pid) === undefined;
    if (!replaced) process.kill(pid, 'SIGCONT');
  });
  faults.stop = { pid, recoveryMs: await untilServed(faultAt, i) };
  await held;
  faults.stop.replaced = replaced;
}

// Checkpoints, as fractions of the run: warm-up fills the bounded caches (tokenizer words,
// line token counts, completions); each engine process gets a warm-up of its own after a fault.
const at = (f) => Math.floor(total * f);
const plan = [
  [at(0.25), 'warm'],
  [at(0.5), 'kill'],
  [at(0.6), 'warm-after-kill'],
  [at(0.7), 'stop'],
  [at(0.8), 'warm-after-stop'],
];
const started = Date.now();
const i = { value: 0 };
let base;
let engineBase;
let end;
let lastReport = 0;
for (const [until, step] of [...plan, [total, 'end']]) {
  while (i.value < until) {
    await one(i.value++);
    if (i.value - lastReport >= 1000) {
      lastReport = i.value;
      console.log(`${i.value}/${total} requests, ${((Date.now() - started) / 1000).toFixed(0)} s, ${JSON.stringify(outcome)}, engine pid ${status.pid ?? '-'} (${status.state})`);
    }
  }
  const s = await sample();
  console.log(`  ${step} at ${i.value}: server heap ${mb(s.heap)}, external ${mb(s.external)}, RSS ${mb(s.rss)}; engine pid ${s.pid ?? '-'} RSS ${s.engineRss ? mb(s.engineRss) : '-'}`);
  end = s;
  if (step === 'warm') base = s;
  if (step.startsWith('warm')) engineBase = s;
  if (step === 'kill' || step === 'stop' || step === 'end') engineWindow(engineBase, s, `${step === 'end' ? 'last' : `before ${step}`}`);
  if (step === 'kill') await kill(i);
  if (step === 'stop') await stop(i);
}
const seconds = (Date.now() - started) / 1000;

const heapGrowth = (end.heap - base.heap) / base.heap;
const rssGrowth = (end.rss - base.rss) / base.rss;
const ms = (x) => (Number.isFinite(x) ? `${x.toFixed(0)} ms` : 'never');
console.log(`\nreliability: ${i.value} requests in ${seconds.toFixed(1)} s (${((1000 * seconds) / i.value).toFixed(1)} ms/request), half cancelled mid-stream, an edit before each`);
console.log(`  outcome: ${JSON.stringify(outcome)}; engine restarts: ${status.restarts}`);
console.log(`  stuck requests: ${outcome.stuck} (bound 0); LSP errors: ${outcome.errors} (bound 0); answered null while the engine was down: ${outcome.down}`);
console.log(`  SIGKILL of engine pid ${faults.kill.pid}: completions back after ${ms(faults.kill.recoveryMs)} (bound ${bounds.killRecoveryMs} ms)`);
console.log(`  SIGSTOP of engine pid ${faults.stop.pid} for ${stopMs} ms (${faults.stop.replaced ? 'the server replaced it' : 'continued with SIGCONT'}): completions back after ${ms(faults.stop.recoveryMs)} (bound ${bounds.stopRecoveryMs} ms)`);
console.log(`  server heap after warm-up ${mb(base.heap)} -> end ${mb(end.heap)}: ${pct(heapGrowth)} (bound ${pct(bounds.growth)})`);
console.log(`  server RSS after warm-up ${mb(base.rss)} -> end ${mb(end.rss)}: ${pct(rssGrowth)} (bound ${pct(bounds.growth)})`);
for (const e of engines) console.log(`  engine pid ${e.pid} RSS from its warm-up ${mb(e.from ?? 0)} -> ${e.label} ${mb(e.to ?? 0)}: ${Number.isNaN(e.growth) ? 'not measured (the process changed without a fault: see restarts)' : pct(e.growth)} (bound ${pct(bounds.growth)})`);
const ok =
  outcome.stuck === 0 &&
  outcome.errors === 0 &&
  faults.kill.recoveryMs <= bounds.killRecoveryMs &&
  faults.stop.recoveryMs <= bounds.stopRecoveryMs &&
  heapGrowth < bounds.growth &&
  rssGrowth < bounds.growth &&
  engines.every((e) => Number.isNaN(e.growth) || e.growth < bounds.growth);
console.log(ok ? 'PASS' : 'FAIL');
await conn.sendRequest('shutdown').catch(() => undefined);
void conn.sendNotification('exit');
setTimeout(() => process.exit(ok ? 0 : 1), 300);
