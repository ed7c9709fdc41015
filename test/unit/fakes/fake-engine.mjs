#!/usr/bin/env node
// A stand-in for runahead-engine that speaks protocol v1 (engine/PROTOCOL.md)
// and misbehaves on request, for the supervisor's and request stage's unit
// tests. The integration tests use the real engine. Behaviour by environment:
//   FAKE_PROTOCOL=n       hello reports protocol n (default 1)
//   FAKE_HANG_AFTER_MS=n  stop reading stdin (no pongs, no tokens) n ms after start
//   FAKE_LOAD_ERROR=code  answer load with an error of that code
//   FAKE_REFUSE_OPTIONS=1 refuse load options it does not know (bad_request)
//   FAKE_TOKEN_MS=n       ms per generated token (default 2)
//   FAKE_TOKENS=a,b,c     the token ids generate emits in a loop (default 1,2,3)
//   FAKE_SPECULATION=a,b  hello.capabilities.speculation
//   FAKE_EXIT_AFTER_LOAD=1 exit with code 3 right after answering load (a crash loop)
//   FAKE_GENERATE_ERROR=code answer generate with an error of that code (model_error: weights broke under it)
import { createInterface } from 'node:readline';

const env = process.env;
const tokenMs = Number(env.FAKE_TOKEN_MS ?? 2);
const cycle = (env.FAKE_TOKENS ?? '1,2,3').split(',').map(Number);
const send = (m) => process.stdout.write(`${JSON.stringify(m)}\n`);
let loaded = false;
let hung = false;
const running = new Map();

if (env.FAKE_HANG_AFTER_MS) setTimeout(() => (hung = true), Number(env.FAKE_HANG_AFTER_MS));

function generate(msg) {
  const max = msg.params?.max_tokens ?? 16;
  let n = 0;
  const started = Date.now();
  const step = () => {
    if (hung) return;
    const job = running.get(msg.id);
    const stats = () => ({ prompt_tokens: msg.prompt.length, reused_tokens: 0, prefill_ms: 1, ttft_ms: 1, decode_ms_per_token: tokenMs, tokens: n, total_ms: Date.now() - started, steps: n, drafted: 0, accepted: 0, accepted_per_step: 1 });
    if (job.cancelled || n >= max) {
      running.delete(msg.id);
      send({ type: 'done', id: msg.id, finish_reason: job.cancelled ? 'cancelled' : 'length', stats: stats() });
      return;
    }
    send({ type: 'tokens', id: msg.id, tokens: [cycle[n % cycle.length]], ms: [tokenMs] });
    n++;
    setTimeout(step, tokenMs);
  };
  running.set(msg.id, { cancelled: false });
  setTimeout(step, tokenMs);
}

createInterface({ input: process.stdin }).on('line', (line) => {
  if (hung) return;
  const msg = JSON.parse(line);
  switch (msg.type) {
    case 'hello':
      send({ type: 'hello', protocol: Number(env.FAKE_PROTOCOL ?? 1), engine: 'fake-engine 0.0.0', capabilities: { backends: ['cpu'], speculation: env.FAKE_SPECULATION ? env.FAKE_SPECULATION.split(',') : [] } });
      break;
    case 'ping':
      send({ type: 'pong', id: msg.id });
      break;
    case 'load': {
      const unknown = Object.keys(msg.options ?? {}).filter((k) => !['backend', 'threads', 'context_length', 'newline_tokens'].includes(k));
      if (env.FAKE_LOAD_ERROR) send({ type: 'error', id: msg.id, code: env.FAKE_LOAD_ERROR, message: `${msg.model}: cannot load`, file: msg.model });
      else if (env.FAKE_REFUSE_OPTIONS && unknown.length) send({ type: 'error', id: msg.id, code: 'bad_request', message: `unknown option ${unknown[0]}`, field: `options.${unknown[0]}` });
      else {
        send({ type: 'load_progress', id: msg.id, stage: 'mapping', done: 1, total: 2 });
        send({ type: 'load_progress', id: msg.id, stage: 'binding', done: 2, total: 2 });
        loaded = true;
        send({ type: 'loaded', id: msg.id, report: { architecture: 'Qwen2ForCausalLM', model: msg.model, backend: 'cpu', optimizations: { prefix_reuse: true } } });
        if (env.FAKE_EXIT_AFTER_LOAD) process.exit(3);
      }
      break;
    }
    case 'generate':
      if (!loaded) send({ type: 'error', id: msg.id, code: 'not_loaded', message: 'no model loaded' });
      else if (env.FAKE_GENERATE_ERROR) send({ type: 'error', id: msg.id, code: env.FAKE_GENERATE_ERROR, message: 'model.safetensors: shorter than its header says', file: 'model.safetensors' });
      else generate(msg);
      break;
    case 'cancel':
      if (running.has(msg.id)) running.get(msg.id).cancelled = true;
      else send({ type: 'error', id: msg.id, code: 'unknown_request', message: `no request ${msg.id}` });
      break;
    case 'stats':
      send({ type: 'stats', loaded, rss_bytes: process.memoryUsage().rss, busy: running.size > 0 });
      break;
    case 'shutdown':
      send({ type: 'bye' });
      process.exit(0);
  }
});
process.stdin.on('end', () => process.exit(0));
