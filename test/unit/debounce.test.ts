import { strict as assert } from 'node:assert';
import { AdaptiveDebounce } from '../../server/src/completion/debounce';

describe('adaptive debounce', () => {
  it('uses the base delay until it has measured typing and latency', () => {
    const d = new AdaptiveDebounce(20);
    assert.equal(d.delay(), 20);
    d.keystroke(1000);
    d.keystroke(1100);
    assert.equal(d.delay(), 20);
  });

  it('stays at the base when the engine answers well within a keystroke', () => {
    const d = new AdaptiveDebounce(20);
    for (let t = 0; t < 2000; t += 150) d.keystroke(t);
    d.latency(30);
    assert.equal(d.delay(), 20);
  });

  it('waits half the typing interval when the engine is slower than the typist, within the cap', () => {
    const d = new AdaptiveDebounce(20, 150);
    for (let t = 0; t < 2000; t += 120) d.keystroke(t);
    d.latency(400);
    assert.ok(Math.abs(d.delay() - 60) < 1, `delay ${d.delay()}`);
    const slow = new AdaptiveDebounce(20, 150);
    for (let t = 0; t < 10000; t += 1000) slow.keystroke(t);
    slow.latency(5000);
    assert.equal(slow.delay(), 150);
  });

  it('ignores pauses when measuring typing speed', () => {
    const d = new AdaptiveDebounce(20);
    d.keystroke(0);
    d.keystroke(100);
    d.keystroke(60_000);
    d.keystroke(60_100);
    assert.equal(d.typingMs, 100);
  });

  it('resolves false as soon as the request is cancelled, true after the delay otherwise', async () => {
    const d = new AdaptiveDebounce(20);
    const abort = new AbortController();
    const t0 = Date.now();
    const p = d.wait(abort.signal, 1000);
    setTimeout(() => abort.abort(), 20);
    assert.equal(await p, false);
    assert.ok(Date.now() - t0 < 500);
    const t1 = Date.now();
    assert.equal(await d.wait(new AbortController().signal, 30), true);
    assert.ok(Date.now() - t1 >= 25);
  });
});
