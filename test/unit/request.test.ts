// The engine's request stage against the fake engine: streaming, early stop,
// cancellation by AbortSignal and a crash mid-request.
import { strict as assert } from 'node:assert';
import { EngineConnection } from '../../server/src/engine/connection';
import { runRequest } from '../../server/src/engine/request';
import { fakeEngine, sleep } from './helpers';

const tokenizer = { decode: (ids: number[]) => ids.map((i) => (i === 9 ? '\n' : String.fromCharCode(96 + i))).join('') };

describe('request stage', function () {
  this.timeout(10000);
  let conn: EngineConnection;

  beforeEach(async () => {
    process.env.FAKE_TOKEN_MS = '5';
    process.env.FAKE_TOKENS = '1,2,3,9';
    conn = new EngineConnection(fakeEngine, [], () => undefined);
    await conn.hello();
    await conn.load('m', {}, () => undefined);
  });
  afterEach(() => {
    conn.kill();
    delete process.env.FAKE_TOKEN_MS;
    delete process.env.FAKE_TOKENS;
  });

  it('streams tokens into text and ends with the engine stats', async () => {
    const r = await runRequest(conn, { prompt: [1, 2], params: { max_tokens: 6 }, tokenizer, signal: new AbortController().signal });
    assert.equal(r.ok, true);
    assert.equal(r.text, 'abc\nab');
    assert.equal(r.finish, 'length');
    assert.equal(r.done?.stats.tokens, 6);
    assert.ok(r.firstTokenMs! > 0);
  });

  it('stops the engine once the text is enough', async () => {
    const r = await runRequest(conn, { prompt: [1], params: { max_tokens: 200 }, tokenizer, signal: new AbortController().signal, enough: (t) => t.includes('\n') });
    assert.equal(r.finish, 'enough');
    assert.ok(r.tokens < 20, `${r.tokens} tokens`);
    assert.ok(r.text.startsWith('abc\n'));
  });

  it('ends at once when its signal is aborted and cancels the engine request', async () => {
    const abort = new AbortController();
    const job = runRequest(conn, { prompt: [1], params: { max_tokens: 10000 }, tokenizer, signal: abort.signal });
    await sleep(30);
    const t0 = Date.now();
    abort.abort();
    const r = await job;
    assert.equal(r.finish, 'cancelled');
    assert.ok(Date.now() - t0 < 50);
    const stats = await conn.stats();
    await sleep(30);
    assert.equal((await conn.stats()).busy, false, `engine still busy (${JSON.stringify(stats)})`);
  });

  it('settles quickly with no text when the engine dies mid-request', async () => {
    const job = runRequest(conn, { prompt: [1], params: { max_tokens: 10000 }, tokenizer, signal: new AbortController().signal });
    await sleep(30);
    const t0 = Date.now();
    conn.kill('SIGKILL');
    const r = await job;
    assert.equal(r.ok, false);
    assert.equal(r.finish, 'error');
    assert.match(r.error!, /engine exited/);
    assert.ok(Date.now() - t0 < 500);
  });

  it('gives up on an engine that misses its hard deadline', async () => {
    process.env.FAKE_HANG_AFTER_MS = '0';
    const hung = new EngineConnection(fakeEngine, [], () => undefined);
    delete process.env.FAKE_HANG_AFTER_MS;
    const r = await runRequest(hung, { prompt: [1], params: { max_tokens: 10, deadline_ms: 50, hard_deadline_ms: 100 }, tokenizer, signal: new AbortController().signal, graceMs: 50 });
    hung.kill();
    assert.equal(r.finish, 'timeout');
  });
});
