#!/usr/bin/env node
// What a user sees while typing: replays real files of this repository
// keystroke by keystroke over LSP (dist/server.js + engine, the embedded model
// by default), asking for an inline completion after each key as VS Code does,
// and reports the time from request to answer (debounce included) for answers
// from the engine and from the type-through cache, the engine's TTFT and
// ms/token, and how much of each prompt the engine reused from its KV cache.
//
//   node esbuild.mjs && node test/bench/typing-latency.mjs [--model DIR] [--engine PATH] [--keys 300] [--interval-ms 120]
//        [--remote URL [--remote-model NAME]]   (an OpenAI-compatible server instead of the engine; key: $RUNAHEAD_REMOTE_API_KEY)
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createProtocolConnection, InlineCompletionRequest, StreamMessageReader, StreamMessageWriter } from 'vscode-languageserver-protocol/node';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const keys = Number(arg('keys', 300));
const intervalMs = Number(arg('interval-ms', 120));
const settings = { maxTokens: 64, deadlineMs: 1000 };
if (arg('model')) settings.modelPath = arg('model');
if (arg('engine') ?? process.env.RUNAHEAD_ENGINE) settings.enginePath = arg('engine') ?? process.env.RUNAHEAD_ENGINE;
if (arg('remote')) Object.assign(settings, { backend: 'remote', remote: { url: arg('remote'), model: arg('remote-model', '') } });

const child = spawn(process.execPath, [join(root, 'dist', 'server.js'), '--stdio'], { stdio: ['pipe', 'pipe', 'inherit'] });
const conn = createProtocolConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
let status;
const metrics = [];
conn.onNotification('runahead/status', (s) => (status = s));
conn.onNotification('runahead/metrics', (m) => metrics.push(m));
conn.onNotification('window/logMessage', () => undefined);
conn.listen();
await conn.sendRequest('initialize', { processId: process.pid, rootUri: pathToFileURL(root).href, capabilities: {}, initializationOptions: { settings } });
await conn.sendNotification('initialized', {});
if (process.env.RUNAHEAD_REMOTE_API_KEY) await conn.sendNotification('runahead/remoteApiKey', { apiKey: process.env.RUNAHEAD_REMOTE_API_KEY });
while (!['ready', 'degraded', 'error'].includes(status?.state)) await new Promise((r) => setTimeout(r, 20));
if (status.state === 'error') throw new Error(status.message);
console.log(`model ${status.model} on ${status.backend} (${status.engine}); ${keys} keys, one every ${intervalMs} ms`);

// Real code to type: the middle part of a few of the server's own source files.
const sources = ['server/src/completion/cache.ts', 'server/src/completion/debounce.ts', 'engine/train/data.py'].map((p) => [p, readFileSync(join(root, p), 'utf8')]);
let version = 0;
let sent = 0;
for (const [index, [path, text]] of sources.entries()) {
  if (sent >= keys) break;
  const uri = pathToFileURL(join(root, 'bench-typing', path)).href;
  const start = Math.floor(text.length * 0.4);
  const end = Math.min(text.length, start + Math.ceil((keys - sent) / (sources.length - index)));
  await conn.sendNotification('textDocument/didOpen', { textDocument: { uri, languageId: path.endsWith('.py') ? 'python' : 'typescript', version: ++version, text: text.slice(0, start) + text.slice(end) } });
  for (let at = start + 1; at <= end && sent < keys; at++, sent++) {
    const now = text.slice(0, at) + text.slice(end);
    await conn.sendNotification('textDocument/didChange', { textDocument: { uri, version: ++version }, contentChanges: [{ text: now }] });
    const before = text.slice(0, at).split('\n');
    const position = { line: before.length - 1, character: before[before.length - 1].length };
    const asked = Date.now();
    const answer = conn.sendRequest(InlineCompletionRequest.type, { textDocument: { uri }, position, context: { triggerKind: 2 } });
    await Promise.race([answer, new Promise((r) => setTimeout(r, intervalMs))]);
    const left = intervalMs - (Date.now() - asked);
    if (left > 0) await new Promise((r) => setTimeout(r, left));
  }
}
await new Promise((r) => setTimeout(r, 1500));

const pct = (xs, p) => (xs.length ? xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))] : NaN);
// A remote source reports no engine-only figures (accepted/step, KV reuse): those stay n = 0.
const line = (label, all, unit = 'ms', xs = all.filter((x) => typeof x === 'number')) => console.log(`  ${label.padEnd(34)} n=${String(xs.length).padStart(4)}  p50 ${pct(xs, 0.5).toFixed(2)} ${unit}  p90 ${pct(xs, 0.9).toFixed(2)} ${unit}`);
const engine = metrics.filter((m) => m.source === 'engine');
const cached = metrics.filter((m) => m.source !== 'engine');
line('served from the engine (request→answer)', engine.map((m) => m.servedMs));
line('  of which debounce', engine.map((m) => m.debounceMs));
line('  engine time to first token', engine.map((m) => m.ttftMs));
line('  engine decode', engine.map((m) => m.decodeMsPerToken), 'ms/tok');
line('  accepted tokens per step', engine.map((m) => m.acceptedPerStep), 'tok');
line('served from cache / prefetch', cached.map((m) => m.servedMs));
const reused = engine.reduce((n, m) => n + (m.reusedTokens ?? 0), 0);
const prompt = engine.reduce((n, m) => n + (m.promptTokens ?? 0), 0);
console.log(`  prompt tokens reused from the KV cache: ${reused}/${prompt} (${((100 * reused) / prompt).toFixed(1)} %)`);
const { completions } = await conn.sendRequest('runahead/stats');
console.log(`  ${sent} keys: ${JSON.stringify(completions)}`);
console.log('  (skipped: cursor inside a word; cancelled*: the next key came first)');
await conn.sendRequest('shutdown').catch(() => undefined);
void conn.sendNotification('exit');
setTimeout(() => process.exit(0), 300);
