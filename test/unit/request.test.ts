// The request stage against the fake engine: streaming, early stop, LSP
// cancellation and a crash mid-request.
import { strict as assert } from 'node:assert';
import { EngineConnection } from '../../server/src/engine/connection';
import { runRequest } from '../../server/src/completion/request';
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
    const r = await runRequest(conn, { prompt: [1, 2], params: { max_tokens: 6 }, tokenizer, token: { isCancellationRequested: false } }).result;
    assert.equal(r.ok, true);
    assert.equal(r.text, 'abc\nab');
    assert.equal(r.finish, 'length');
    assert.equal(r.done?.stats.tokens, 6);
    assert.ok(r.firstTokenMs! > 0);
  });

  it('stops the engine once the text is enough', async () => {
    const r = await runRequest(conn, { prompt: [1], params: { max_tokens: 200 }, tokenizer, token: { isCancellationRequested: false }, enough: (t) => t.includes('\n') }).result;
    assert.equal(r.finish, 'enough');
    assert.ok(r.tokens < 20, `${r.tokens} tokens`);
    assert.ok(r.text.startsWith('abc\n'));
  });

  it('ends at once on LSP cancellation and cancels the engine request', async () => {
    const listeners: (() => void)[] = [];
    const token = { isCancellationRequested: false, onCancellationRequested: (l: () => void) => (listeners.push(l), { dispose() {} }) };
    const job = runRequest(conn, { prompt: [1], params: { max_tokens: 10000 }, tokenizer, token });
    await sleep(30);
    const t0 = Date.now();
    token.isCancellationRequested = true;
    listeners.forEach((l) => l());
    const r = await job.result;
    assert.equal(r.finish, 'cancelled');
    assert.ok(Date.now() - t0 < 50);
    const stats = await conn.stats();
    await sleep(30);
    assert.equal((await conn.stats()).busy, false, `engine still busy (${JSON.stringify(stats)})`);
  });

  it('settles quickly with no text when the engine dies mid-request', async () => {
    const job = runRequest(conn, { prompt: [1], params: { max_tokens: 10000 }, tokenizer, token: { isCancellationRequested: false } });
    await sleep(30);
    const t0 = Date.now();
    conn.kill('SIGKILL');
    const r = await job.result;
    assert.equal(r.ok, false);
    assert.equal(r.finish, 'error');
    assert.match(r.error!, /engine exited/);
    assert.ok(Date.now() - t0 < 500);
  });

  it('gives up on an engine that misses its hard deadline', async () => {
    process.env.FAKE_HANG_AFTER_MS = '0';
    const hung = new EngineConnection(fakeEngine, [], () => undefined);
    delete process.env.FAKE_HANG_AFTER_MS;
    const r = await runRequest(hung, { prompt: [1], params: { max_tokens: 10, deadline_ms: 50, hard_deadline_ms: 100 }, tokenizer, token: { isCancellationRequested: false }, graceMs: 50 }).result;
    hung.kill();
    assert.equal(r.finish, 'timeout');
  });
});
