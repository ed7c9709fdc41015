// The real server (dist/server.js --stdio) with the real engine and a fixture
// model (random weights: the text is gibberish, the machinery is real).
import { strict as assert } from 'node:assert';
import { existsSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { CancellationTokenSource, engineBinary, fixtureModel, isAlive, repoRoot, TestClient } from './lspClient';
import type { CompletionInput } from '../../server/src/completion/completer';
import { EngineSource } from '../../server/src/engine/engineSource';
import { Runahead, type ServerStatus } from '../../server/src/runahead';
import { readSettings } from '../../server/src/settings';

const uri = pathToFileURL(join(repoRoot, 'example', 'stats.py')).href;
const text = ['import math', '', '', 'def mean(xs):', '    total = 0', '    for x in xs:', '        total += ', '', '', 'print(mean([1, 2, 3]))', ''].join('\n');
const line = 6;
const character = '        total += '.length;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('language server with the real engine', function () {
  this.timeout(60000);
  let client: TestClient;

  before(function () {
    if (!existsSync(engineBinary)) throw new Error(`no engine at ${engineBinary}: run node engine/setup.mjs`);
  });

  beforeEach(async () => {
    client = new TestClient({ modelPath: fixtureModel, enginePath: engineBinary, maxTokens: 48, deadlineMs: 5000 });
    await client.initialize();
    await client.waitReady();
    client.open(uri, text);
  });

  afterEach(async () => {
    await client.close();
  });

  it('serves an inline completion and sends metrics with real numbers', async () => {
    const result = await client.complete(uri, line, character);
    assert.ok(result === null || Array.isArray(result.items));
    await sleep(50);
    const m = client.metrics.find((x) => x.source === 'engine');
    assert.ok(m, `no engine metrics; got ${JSON.stringify(client.metrics)}`);
    assert.ok(m.tokens! > 0, `tokens ${m.tokens}`);
    assert.ok(m.ttftMs! > 0 && m.ttftMs! < 5000, `ttft ${m.ttftMs}`);
    assert.ok(m.decodeMsPerToken! >= 0, `decode ${m.decodeMsPerToken}`);
    assert.ok(m.promptTokens! > 20, `prompt tokens ${m.promptTokens}`);
    assert.equal(m.backend, 'cpu');
    assert.equal(m.model, fixtureModel);
    assert.ok(m.servedMs > 0);
    if (result?.items.length) assert.equal(typeof result.items[0].insertText, 'string');
  });

  it('reuses the prompt prefix of the previous request', async () => {
    await client.complete(uri, line, character);
    const typed = text.replace('        total += ', '        total += x');
    client.replace(uri, typed);
    await client.complete(uri, line, character + 1);
    await sleep(50);
    const engine = client.metrics.filter((x) => x.source === 'engine');
    assert.equal(engine.length, 2, JSON.stringify(client.metrics));
    assert.ok(engine[1].reusedTokens! > 0, `reused ${engine[1].reusedTokens} of ${engine[1].promptTokens}`);
  });

  it('cancels: the request ends at once and the engine is idle right after', async () => {
    client.replace(uri, text);
    const cts = new CancellationTokenSource();
    const p = client.complete(uri, line, character, cts);
    await sleep(5);
    const t0 = performance.now();
    cts.cancel();
    await p.catch(() => null);
    const ms = performance.now() - t0;
    assert.ok(ms < 500, `cancelled request answered after ${ms} ms`);
    await sleep(200);
    const stats = await client.engineStats();
    assert.equal(stats?.busy, false, JSON.stringify(stats));
  });

  it('engine killed with SIGKILL mid-request: that request ends, the next is served within 2 s', async () => {
    const pid = client.status!.pid!;
    assert.ok(pid && isAlive(pid));
    const inflight = client.complete(uri, line, character);
    await sleep(2);
    const killedAt = performance.now();
    process.kill(pid, 'SIGKILL');
    const first = await inflight;
    const endedMs = performance.now() - killedAt;
    assert.ok(endedMs < 1000, `the in-flight request took ${endedMs} ms to end`);
    assert.ok(first === null || Array.isArray(first.items));
    const before = client.metrics.length;
    // Another place, so the answer cannot come from the type-through cache.
    client.replace(uri, text.replace('total += ', 'total -= '));
    await client.complete(uri, line, character);
    const servedMs = performance.now() - killedAt;
    await sleep(20);
    assert.ok(client.metrics.slice(before).some((m) => m.source === 'engine' && m.tokens! > 0), `no engine completion after the kill: ${JSON.stringify(client.metrics.slice(before))}`);
    assert.ok(servedMs < 2000, `next completion served ${servedMs} ms after the kill`);
    assert.notEqual(client.status!.pid, pid);
    assert.ok(client.status!.restarts >= 1);
  });

  it('the engine stops with the server, even when the server is killed', async () => {
    const pid = client.status!.pid!;
    assert.ok(isAlive(pid));
    client.child.kill('SIGKILL');
    const t0 = Date.now();
    while (isAlive(pid) && Date.now() - t0 < 3000) await sleep(20);
    assert.equal(isAlive(pid), false, 'the engine outlived its server by 3 s');
  });

  it('a drafter the model lacks: loads without speculation and says so (degraded), completions still come', async () => {
    await client.close();
    client = new TestClient({ modelPath: fixtureModel, enginePath: engineBinary, maxTokens: 16, deadlineMs: 5000, speculation: 'mtp' });
    await client.initialize();
    const s = await client.waitReady();
    assert.equal(s.state, 'degraded', JSON.stringify(s));
    assert.match(s.message, /speculation "mtp" refused .*MTP head/);
    client.open(uri, text);
    await client.complete(uri, line, character);
    await sleep(50);
    assert.ok(client.metrics.some((m) => m.source === 'engine' && m.tokens! > 0), JSON.stringify(client.metrics));
  });

  it('fp8 weights asked of the CPU engine: loads the weights as stored and says so (degraded), completions still come', async () => {
    await client.close();
    client = new TestClient({ modelPath: fixtureModel, enginePath: engineBinary, maxTokens: 16, deadlineMs: 5000, backend: 'cpu', weights: 'fp8' });
    await client.initialize();
    const s = await client.waitReady();
    assert.equal(s.state, 'degraded', JSON.stringify(s));
    assert.match(s.message, /weights "fp8" refused .*CUDA backend only/);
    client.open(uri, text);
    await client.complete(uri, line, character);
    await sleep(50);
    assert.ok(client.metrics.some((m) => m.source === 'engine' && m.tokens! > 0), JSON.stringify(client.metrics));
  });

  it('an optimisation required that the CPU engine lacks: loads, and the status says which and why (degraded)', async () => {
    await client.close();
    client = new TestClient({ modelPath: fixtureModel, enginePath: engineBinary, maxTokens: 16, deadlineMs: 5000, backend: 'cpu', requireOptimizations: ['persistent_step', 'lookup'] });
    await client.initialize();
    const s = await client.waitReady();
    assert.equal(s.state, 'degraded', JSON.stringify(s));
    assert.match(s.message, /options\.require: persistent_step is not active: the cpu backend has no persistent_step/);
    assert.doesNotMatch(s.message, /lookup/);
    client.open(uri, text);
    await client.complete(uri, line, character);
    await sleep(50);
    assert.ok(client.metrics.some((m) => m.source === 'engine' && m.tokens! > 0), JSON.stringify(client.metrics));
  });
});

describe('language server with the real engine: huge files', function () {
  this.timeout(60000);
  let client: TestClient;

  beforeEach(async () => {
    client = new TestClient({ modelPath: fixtureModel, enginePath: engineBinary, maxTokens: 48, deadlineMs: 1000 });
    await client.initialize();
    await client.waitReady();
  });
  afterEach(() => client.close());

  /** Completes at the end of `text` while asking runahead/status every 10 ms; the completion's time and the slowest status answer. */
  async function completeAtEnd(name: string, text: string): Promise<{ completeMs: number; statusMs: number }> {
    const uri = pathToFileURL(join(repoRoot, 'example', name)).href;
    client.open(uri, text, 'javascript');
    const opened = performance.now();
    await client.conn.sendRequest('runahead/status'); // the server has taken in the document
    console.log(`      ${name}: didOpen taken in after ${(performance.now() - opened).toFixed(0)} ms`);
    const lines = text.split('\n');
    let statusMs = 0;
    let done = false;
    const poll = (async () => {
      while (!done) {
        const t = performance.now();
        await client.conn.sendRequest('runahead/status');
        statusMs = Math.max(statusMs, performance.now() - t);
        await sleep(10);
      }
    })();
    const t0 = performance.now();
    await client.complete(uri, lines.length - 1, lines[lines.length - 1].length);
    const completeMs = performance.now() - t0;
    done = true;
    await poll;
    return { completeMs, statusMs };
  }

  for (const [name, make] of [
    ['a 1 MB one-line file', () => Array.from({ length: 70_000 }, (_, i) => `var a${i}=f(${i});`).join('').slice(0, 1 << 20)],
    ['a 100k-line file', () => Array.from({ length: 100_000 }, (_, i) => `let value_${i} = compute(${i});`).join('\n') + '\nlet x = '],
  ] as const) {
    it(`completes at the end of ${name} within the 1 s deadline, runahead/status answered meanwhile`, async () => {
      const { completeMs, statusMs } = await completeAtEnd(name.replace(/\W+/g, '-') + '.js', make());
      await sleep(50);
      const m = client.metrics.find((x) => x.source === 'engine');
      assert.ok(m && m.tokens! > 0, `no engine completion: ${JSON.stringify(client.metrics)}`);
      assert.ok(completeMs < 2000, `completion took ${completeMs.toFixed(0)} ms`);
      // The aim is 50 ms; the bound leaves room for a loaded test machine. Measured on an idle
      // 2-core host: 9-16 ms for the 100k-line file with its line table built at open, 29-31 ms
      // when the first completion built it (130 ms once in a loaded full run, past the bound).
      // The 1 MB line: 13-23 ms.
      assert.ok(statusMs < 100, `runahead/status took ${statusMs.toFixed(0)} ms while completing`);
      console.log(`      ${name}: completion ${completeMs.toFixed(0)} ms (prompt ${m.promptTokens} tokens), slowest status ${statusMs.toFixed(1)} ms`);
    });
  }
});

describe('the Completer over the EngineSource, no LSP (as the benchmark or an HTTP API uses it)', function () {
  this.timeout(60000);
  let runahead: Runahead;
  const statuses: ServerStatus[] = [];
  const input = (patch: Partial<CompletionInput> = {}): CompletionInput => ({
    uri: 'mem://stats.py',
    text,
    offset: text.indexOf('        total += ') + character,
    languageId: 'python',
    path: 'stats.py',
    repoName: 'runahead',
    trigger: 'invoked',
    ...patch,
  });

  beforeEach(async () => {
    statuses.length = 0;
    runahead = new Runahead(() => undefined, (s) => void statuses.push(s));
    runahead.configure(readSettings({ modelPath: fixtureModel, enginePath: engineBinary, maxTokens: 48, deadlineMs: 5000 }));
    const t0 = Date.now();
    while (!['ready', 'degraded', 'error'].includes(runahead.status().state) && Date.now() - t0 < 30000) await sleep(20);
    assert.equal(runahead.status().state, 'ready', JSON.stringify(runahead.status()));
  });
  afterEach(() => runahead.stop());

  it('the EngineSource alone: ready, one generation with its prompt budget, early stop and metrics', async () => {
    const source = new EngineSource(readSettings({ modelPath: fixtureModel, enginePath: engineBinary }), () => undefined);
    try {
      assert.equal(await source.ready(30000), true, JSON.stringify(source.status));
      const at = text.indexOf('        total += ') + character;
      let streamed = '';
      const r = await source.complete(
        { prefix: text.slice(0, at), suffix: text.slice(at), path: 'stats.py', extra: [], maxTokens: 32, temperature: 0, deadlineMs: 5000, enough: (t) => t.length >= 4, signal: new AbortController().signal },
        (t) => (streamed = t),
      );
      assert.equal(r.ok, true, JSON.stringify(r));
      assert.equal(r.finish, 'enough');
      assert.equal(r.text, streamed);
      assert.ok(r.metrics.promptTokens! > 20 && r.metrics.tokens! > 0, JSON.stringify(r.metrics));
      assert.equal(r.metrics.backend, 'cpu');
    } finally {
      await source.stop();
    }
  });

  it('ends with the text, its offsets and real engine metrics', async () => {
    const r = await runahead.completer.complete(input());
    assert.equal(r.from, input().offset);
    assert.equal(r.to, r.from);
    const m = r.metrics!;
    assert.ok(m, `no metrics: ${JSON.stringify(r)}`);
    assert.equal(m.source, 'engine');
    assert.ok(m.tokens! > 0 && m.promptTokens! > 20, JSON.stringify(m));
    assert.equal(m.backend, 'cpu');
    assert.equal(m.model, fixtureModel);
    assert.ok(statuses.some((s) => s.state === 'ready' && s.enabled), 'status changes reached the owner');
  });

  it('an aborted completion ends at once and leaves the engine idle', async () => {
    const abort = new AbortController();
    const p = runahead.completer.complete(input({ signal: abort.signal }));
    await sleep(5);
    const t0 = performance.now();
    abort.abort();
    const r = await p;
    assert.ok(performance.now() - t0 < 500);
    assert.equal(r.text, '');
    await sleep(200);
    const { engine } = (await runahead.stats()) as { engine: { busy?: boolean } | null };
    assert.equal(engine?.busy, false, JSON.stringify(engine));
  });

  it('stop() ends the engine process (as a switch to another source does)', async () => {
    const pid = runahead.status().pid!;
    assert.ok(isAlive(pid));
    await runahead.stop();
    const t0 = Date.now();
    while (isAlive(pid) && Date.now() - t0 < 3000) await sleep(20);
    assert.equal(isAlive(pid), false);
  });
});
