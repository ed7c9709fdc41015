// The Completer with no LSP at all: document text and offsets in, a fake
// CompletionSource behind it (streams, waits for its signal, is not ready, or
// fails), so each stage shows in the result, the stream and the counters.
import { strict as assert } from 'node:assert';
import { Completer, type CompletionInput } from '../../server/src/completion/completer';
import type { CompletionSource, SourceRequest, SourceResult } from '../../server/src/completion/source';
import { notStarted } from '../../server/src/engine/supervisor';
import { settingsWith, sleep } from './helpers';

type Script = (request: SourceRequest, onText?: (text: string) => void) => Promise<SourceResult>;

class FakeSource implements CompletionSource {
  readonly kind = 'engine' as const;
  readonly status = { ...notStarted, state: 'ready' as const, message: 'fake' };
  readonly requests: SourceRequest[] = [];
  isReady = true;

  constructor(private readonly script: Script) {}

  async ready(): Promise<boolean> {
    return this.isReady;
  }

  complete(request: SourceRequest, onText?: (text: string) => void): Promise<SourceResult> {
    this.requests.push(request);
    return this.script(request, onText);
  }
}

/** Streams `text` a few characters at a time, stopping when the Completer says it is enough or the signal aborts. */
const streaming =
  (text: string, stepMs = 1): Script =>
  async (request, onText) => {
    let sent = '';
    for (let i = 0; i < text.length; i += 3) {
      if (request.signal.aborted) return { ok: false, text: sent, finish: 'cancelled', metrics: {} };
      sent = text.slice(0, i + 3);
      onText?.(sent);
      if (request.enough?.(sent)) return { ok: true, text: sent, finish: 'enough', metrics: { tokens: i / 3 + 1, backend: 'fake' } };
      await sleep(stepMs);
    }
    return { ok: true, text: sent, finish: 'length', metrics: { tokens: Math.ceil(text.length / 3), backend: 'fake' } };
  };

const doc = (body: string) => `import os\n\n\ndef f(x):\n    return ${body}\n\n\nprint(f(1))\n`;
const at = (body: string, patch: Partial<CompletionInput> = {}): CompletionInput => {
  const text = doc(body);
  return { uri: 'mem://f.py', text, offset: text.indexOf(`return ${body}`) + 'return '.length + body.length, languageId: 'python', path: 'f.py', trigger: 'invoked', ...patch };
};

describe('Completer (no LSP, fake source)', () => {
  const logs: string[] = [];
  const completerWith = (source: CompletionSource | undefined, patch = {}) =>
    new Completer({ source: () => source, settings: () => settingsWith({ debounceMs: 0, ...patch }), log: (_, line) => void logs.push(line) });
  beforeEach(() => (logs.length = 0));

  it('streams the text, heals the trailing space, stops early and answers with offsets, finish and metrics', async () => {
    const source = new FakeSource(streaming(' foo(x)\n    y = 1\nz'));
    const completer = completerWith(source);
    const seen: string[] = [];
    const input = at('');
    const r = await completer.complete(input, (t) => seen.push(t));
    assert.ok(!source.requests[0].prefix.endsWith(' '), 'the source got the prefix without its trailing space');
    assert.equal(source.requests[0].path, 'f.py');
    assert.equal(r.text, 'foo(x)');
    assert.deepEqual([r.from, r.to], [input.offset, input.offset]);
    assert.equal(r.finish, 'enough');
    assert.equal(r.metrics?.source, 'engine');
    assert.equal(r.metrics?.finishReason, 'enough');
    assert.equal(r.metrics?.backend, 'fake');
    assert.ok(seen.length > 0 && seen.every((t) => !t.startsWith(' ')), JSON.stringify(seen));
    assert.equal(completer.counters.fromEngine, 1);
  });

  it('types through from its cache and extends a selected item over its range', async () => {
    const source = new FakeSource(streaming(' foo(x)\n'));
    const completer = completerWith(source);
    await completer.complete(at(''));
    await sleep(50); // the prefetch of what follows "foo(x)" runs meanwhile
    const asked = source.requests.length;
    const typed = await completer.complete(at('fo'));
    assert.equal(typed.text, 'o(x)');
    assert.equal(typed.finish, 'cache');
    assert.equal(typed.metrics?.source, 'cache');
    assert.equal(source.requests.length, asked, 'the source was not asked');

    const input = at('fo', { uri: 'mem://g.py' });
    const r = await completer.complete({ ...input, selected: { from: input.offset - 2, to: input.offset, text: 'foo_bar' } });
    assert.ok(r.text.startsWith('foo_bar'), r.text);
    assert.deepEqual([r.from, r.to], [input.offset - 2, input.offset]);
  });

  it('cancels by AbortSignal: during the debounce, and mid-stream (the source sees its signal aborted)', async () => {
    const source = new FakeSource(streaming(' a'.repeat(1000), 5));
    const completer = completerWith(source, { debounceMs: 200 });
    const waiting = new AbortController();
    const p = completer.complete(at('', { trigger: 'automatic', signal: waiting.signal }));
    waiting.abort();
    assert.equal((await p).finish, 'cancelled');
    assert.equal(completer.counters.cancelledWaiting, 1);
    assert.equal(source.requests.length, 0);

    const streamingAbort = new AbortController();
    const started = completer.complete(at('', { signal: streamingAbort.signal }));
    await sleep(30);
    const t0 = Date.now();
    streamingAbort.abort();
    const r = await started;
    assert.equal(r.finish, 'cancelled');
    assert.equal(r.text, '');
    assert.equal(r.metrics, undefined);
    assert.ok(Date.now() - t0 < 100);
    assert.equal(source.requests[0].signal.aborted, true);
    assert.equal(completer.counters.cancelledInEngine, 1);
  });

  it('a source that is not ready answers nothing at once, without asking it', async () => {
    const source = new FakeSource(streaming(' foo(x)\n'));
    source.isReady = false;
    const completer = completerWith(source);
    const r = await completer.complete(at(''));
    assert.deepEqual([r.text, r.finish], ['', 'unavailable']);
    assert.equal(source.requests.length, 0);
    assert.equal(completer.counters.noEngine, 1);
    const none = await completerWith(undefined).complete(at(''));
    assert.equal(none.finish, 'unavailable');
  });

  it('a source that fails costs this completion only: no text, a warning, counted', async () => {
    let fail = true;
    const source = new FakeSource((request, onText) =>
      fail ? Promise.resolve({ ok: false, text: '', finish: 'error', error: 'server said 500', metrics: {} }) : streaming(' foo(x)\n')(request, onText),
    );
    const completer = completerWith(source);
    const r = await completer.complete(at(''));
    assert.deepEqual([r.text, r.finish, r.metrics], ['', 'error', undefined]);
    assert.equal(completer.counters.failed, 1);
    assert.ok(logs.some((l) => /server said 500/.test(l)), logs.join('\n'));
    fail = false;
    assert.equal((await completer.complete(at(''))).text, 'foo(x)');
  });

  it('skips by the trigger rules: a disabled language while typing, with no source asked', async () => {
    const source = new FakeSource(streaming(' foo(x)\n'));
    const completer = completerWith(source, { disabledLanguages: ['python'] });
    const r = await completer.complete(at('', { trigger: 'automatic' }));
    assert.equal(r.finish, 'skipped');
    assert.equal(source.requests.length, 0);
    assert.equal(completer.counters.skipped, 1);
  });

  it('makes a second suggestion only when asked again where the first shows, at temperature > 0, cached, and never before the first', async () => {
    const source = new FakeSource(async (r) => ({ ok: true, text: r.temperature > 0 ? ` x * ${r.seed}` : ' x + 1', finish: 'stop', metrics: {} }));
    const completer = completerWith(source);
    const first = await completer.complete(at(''));
    assert.equal(first.text, 'x + 1');
    assert.ok(source.requests.every((r) => r.temperature === 0), 'the first answer (and its prefetch) ask for greedy text only');
    const again = await completer.complete(at(''));
    assert.equal(again.finish, 'cache');
    const second = await completer.alternative(at(''), again.text);
    assert.match(second ?? '', /^x \* \d+$/);
    const temps = source.requests.map((r) => r.temperature);
    assert.ok(temps.length >= 2 && temps.at(-1)! > 0, temps.join(' '));
    const before = source.requests.length;
    assert.equal(await completer.alternative(at(''), again.text), second, 'kept for the next Alt+]');
    assert.equal(source.requests.length, before);
  });

  it('drops a second suggestion that says the same as the first', async () => {
    const completer = completerWith(new FakeSource(async () => ({ ok: true, text: ' x + 1', finish: 'stop', metrics: {} })));
    const first = await completer.complete(at(''));
    assert.equal(await completer.alternative(at(''), first.text), undefined);
  });
});

