// RemoteSource against real HTTP: Runahead's own engine behind an
// OpenAI-compatible server (remote/openaiServer.ts), and recorded answers of
// SGLang, vLLM, llama-server and Ollama replayed (test/fixtures/remote/*.http).
// Every failure must end promptly, say what is wrong, and leave the next
// completion working.
import { strict as assert } from 'node:assert';
import { existsSync } from 'node:fs';
import { defaultSettings, readSettings, type RemoteSettings, type Settings } from '../../server/src/settings';
import type { SourceRequest } from '../../server/src/completion/source';
import { RemoteSource, type RemoteTiming } from '../../server/src/remote/remoteSource';
import { fimPrompt, resolveTemplate, templateForModel, windowByChars } from '../../server/src/remote/fimTemplates';
import { sseEvents } from '../../server/src/remote/sse';
import { Completer } from '../../server/src/completion/completer';
import { EngineOpenAIServer, engineBinary } from './remote/openaiServer';
import { ReplayServer } from './remote/replayServer';

const timing: RemoteTiming = { healthMs: 60_000, errorHealthMs: 60_000, recheckMs: 0 };
const sources: RemoteSource[] = [];

function settings(remote: Partial<RemoteSettings>, more: Partial<Settings> = {}): Settings {
  return readSettings({ ...more, backend: 'remote', remote: { ...defaultSettings.remote, ...remote } });
}

function source(remote: Partial<RemoteSettings>, more: Partial<Settings> = {}): RemoteSource {
  const s = new RemoteSource(settings(remote, more), () => undefined, { timing });
  sources.push(s);
  return s;
}

function request(over: Partial<SourceRequest> = {}): SourceRequest {
  return {
    prefix: 'def mean(xs):\n    return ',
    suffix: '\n\nprint(mean([1, 2, 3]))\n',
    path: 'stats.py',
    extra: [],
    maxTokens: 16,
    temperature: 0,
    deadlineMs: 5000,
    signal: new AbortController().signal,
    ...over,
  };
}

/** `p`, or a failure naming `what` if it takes longer than `ms`: nothing may hang. */
async function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const started = performance.now();
  try {
    return await Promise.race([p, new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
    void started;
  }
}

async function readyStatus(s: RemoteSource, ms = 3000) {
  await within(ms, 'ready', s.ready(ms));
  return s.status;
}

afterEach(() => {
  for (const s of sources.splice(0)) s.dispose();
});

describe('remote: Runahead engine behind an OpenAI-compatible server', function () {
  this.timeout(60000);
  let server: EngineOpenAIServer;

  before(async function () {
    if (!existsSync(engineBinary)) throw new Error(`no engine at ${engineBinary}: run node engine/setup.mjs`);
    server = await EngineOpenAIServer.start({ apiKey: 'sk-test-key' });
  });

  after(async () => {
    await server?.close();
  });

  function keyed(remote: Partial<RemoteSettings> = {}, more: Partial<Settings> = {}): RemoteSource {
    const s = source({ url: server.url, ...remote }, more);
    s.setApiKey('sk-test-key');
    return s;
  }

  it('streams a completion token by token, with the FIM prompt, the key, custom headers and real metrics', async () => {
    const s = keyed({ headers: { 'x-team': 'compilers' } });
    const status = await readyStatus(s);
    assert.equal(status.state, 'ready', status.message);
    assert.equal(status.backend, 'remote');
    assert.equal(status.model, server.modelName);
    assert.equal(status.engine, `vLLM at ${server.url}`);
    assert.equal(status.remote.template, 'qwen');
    const seen: string[] = [];
    const r = await within(10000, 'completion', s.complete(request({ maxTokens: 24 }), (t) => seen.push(t)));
    assert.ok(r.ok, r.error);
    const post = server.seen.at(-1)!;
    assert.equal(post.path, '/v1/completions');
    assert.equal(post.headers['x-team'], 'compilers');
    assert.equal(post.headers.authorization, 'Bearer sk-test-key');
    assert.equal(post.body!.prompt, '<|fim_prefix|>def mean(xs):\n    return <|fim_suffix|>\n\nprint(mean([1, 2, 3]))\n<|fim_middle|>');
    assert.equal(post.body!.stream, true);
    assert.equal(post.body!.max_tokens, 24);
    assert.ok((post.body!.stop as string[]).includes('<|endoftext|>'));
    assert.equal(r.metrics.tokens, post.tokens, 'tokens from usage.completion_tokens');
    if (r.text.length > 0) assert.ok(seen.length >= 1 && seen.at(-1) === r.text, `onText saw ${JSON.stringify(seen)}`);
    assert.ok(r.metrics.ttftMs! > 0 && r.metrics.ttftMs! < 5000, `ttft ${r.metrics.ttftMs}`);
    if (post.tokens > 1) assert.ok(r.metrics.decodeMsPerToken! > 0, `ms/token ${r.metrics.decodeMsPerToken}`);
    assert.equal(r.metrics.backend, 'remote');
    assert.equal(r.metrics.model, server.modelName);
    assert.ok(r.metrics.promptTokens! > 10);
  });

  it('through the Completer: a remote completion is served with its metrics (backend remote)', async () => {
    const s = keyed();
    await readyStatus(s);
    const cfg = settings({ url: server.url }, { maxTokens: 16, deadlineMs: 5000 });
    const completer = new Completer({ source: () => s, settings: () => cfg, log: () => undefined });
    const text = 'def mean(xs):\n    return \n\nprint(mean([1, 2, 3]))\n';
    const offset = 'def mean(xs):\n    return '.length;
    const r = await within(10000, 'Completer', completer.complete({ uri: 'file:///stats.py', text, offset, languageId: 'python', path: 'stats.py', trigger: 'invoked' }));
    assert.ok(r.metrics, `no metrics; finish ${r.finish}`);
    assert.equal(r.metrics.backend, 'remote');
    assert.equal(r.metrics.model, server.modelName);
    assert.ok(r.metrics.ttftMs! > 0);
    assert.ok(server.seen.at(-1)!.path === '/v1/completions');
  });

  it('cancel aborts the HTTP request: the server sees the connection close and stops the engine', async () => {
    const s = keyed();
    await readyStatus(s);
    const ctl = new AbortController();
    const closed = server.nextEarlyClose();
    const started = performance.now();
    // No suffix, so the model writes to max_tokens and the cancel always comes mid-stream.
    const pending = s.complete(request({ maxTokens: 2000, signal: ctl.signal, prefix: 'x = 1\n', suffix: '' }), () => ctl.abort());
    const r = await within(5000, 'cancelled completion', pending);
    await within(2000, 'server seeing the close', closed);
    assert.equal(r.finish, 'cancelled');
    assert.equal(r.ok, false);
    assert.ok(server.seen.at(-1)!.closedEarly);
    assert.ok(performance.now() - started < 3000);
    const next = await within(10000, 'next completion', s.complete(request()));
    assert.ok(next.ok, next.error);
  });

  it('stops the stream when the text is enough, and says so', async () => {
    const s = keyed();
    await readyStatus(s);
    const closed = server.nextEarlyClose();
    // No suffix: the embedded model then writes to max_tokens, so the client's close always comes
    // mid-stream (with the default suffix it answers 2 tokens, which a fast engine sent before it).
    const r = await within(10000, 'completion', s.complete(request({ suffix: '', maxTokens: 2000, enough: (t) => t.length > 0 })));
    assert.equal(r.finish, 'enough');
    assert.ok(r.ok);
    assert.ok(r.text.length > 0);
    await within(2000, 'server seeing the close', closed);
  });

  it('without the key: an error status that says to set it; with it the next completion works', async () => {
    const s = source({ url: server.url });
    const status = await readyStatus(s);
    assert.equal(status.state, 'error');
    assert.equal(status.remote.problem, 'auth');
    assert.match(status.message, /HTTP 401.*Runahead: Set Remote API Key/);
    assert.ok(status.message.includes(server.url));
    assert.ok(!JSON.stringify(status).includes('sk-test-key'));
    s.setApiKey('sk-test-key');
    assert.ok(await s.ready(3000));
    const r = await within(10000, 'completion', s.complete(request()));
    assert.ok(r.ok, r.error);
  });

  it('a model the server does not serve: the status names it and what is served; fixing the setting recovers', async () => {
    const s = keyed({ model: 'qwen-coder-7b' });
    const status = await readyStatus(s);
    assert.equal(status.state, 'error');
    assert.equal(status.remote.problem, 'model');
    assert.match(status.message, /does not serve model "qwen-coder-7b"; it serves "runahead\/runahead-coder": set runahead.remote.model/);
    assert.equal(await s.ready(500), false);
    s.configure(settings({ url: server.url, model: server.modelName }));
    assert.ok(await s.ready(3000));
    assert.ok((await s.complete(request())).ok);
  });

  it('measures loopback latency: TTFT and ms/token through RemoteSource vs the same engine over stdio', async () => {
    const s = keyed();
    await readyStatus(s);
    const prompt = request({ maxTokens: 64, prefix: 'import math\n\n\ndef mean(xs):\n    total = 0\n    for x in xs:\n        total += ', temperature: 0 });
    const text = fimPrompt(templateForModel(server.modelName), { prefix: prompt.prefix, suffix: prompt.suffix });
    const ids = server.tokenizer.encode(text);
    const remote: { ttft: number; tpot: number }[] = [];
    const local: { ttft: number; tpot: number }[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await s.complete(prompt);
      assert.ok(r.ok, r.error);
      if (i > 0) remote.push({ ttft: r.metrics.ttftMs!, tpot: r.metrics.decodeMsPerToken ?? NaN });
      const started = performance.now();
      let first: number | undefined;
      let last = 0;
      let n = 0;
      const gen = server.engine.generate(ids, { max_tokens: 64, temperature: 0 }, (m) => {
        first ??= performance.now() - started;
        last = performance.now() - started;
        n += m.tokens.length;
      });
      await gen.done;
      if (i > 0 && first !== undefined) local.push({ ttft: first, tpot: n > 1 ? (last - first) / (n - 1) : NaN });
    }
    const median = (xs: number[]) => xs.filter(Number.isFinite).sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    const line = (name: string, xs: { ttft: number; tpot: number }[]) =>
      `${name}: TTFT ${median(xs.map((x) => x.ttft)).toFixed(2)} ms, ${median(xs.map((x) => x.tpot)).toFixed(3)} ms/token (median of ${xs.length})`;
    console.log(`      loopback latency, engine/models/runahead-coder on CPU, 64 tokens:\n      ${line('stdio (engine)', local)}\n      ${line('HTTP+SSE (RemoteSource)', remote)}`);
  });
});

describe('remote: recorded SGLang, vLLM, llama-server and Ollama answers', function () {
  this.timeout(30000);
  const servers: ReplayServer[] = [];
  async function replay(routes: Parameters<typeof ReplayServer.start>[0]): Promise<ReplayServer> {
    const s = await ReplayServer.start(routes);
    servers.push(s);
    return s;
  }
  afterEach(async () => {
    for (const s of servers.splice(0)) await s.close();
  });

  for (const [name, serverName, model] of [
    ['vllm', 'vLLM', 'Qwen/Qwen2.5-Coder-1.5B'],
    ['sglang', 'SGLang', 'Qwen/Qwen2.5-Coder-1.5B'],
    ['llamacpp', 'llama-server', 'qwen2.5-coder-1.5b-q8_0.gguf'],
    ['ollama', 'Ollama', 'qwen2.5-coder:1.5b-base'],
  ]) {
    it(`${serverName}: the model list names server and model; the stream gives the text and usage`, async () => {
      const srv = await replay({ 'GET /v1/models': `${name}-models.http`, 'POST /v1/completions': { files: [`${name}-completion.http`], eventDelayMs: 5 } });
      const s = source({ url: `${srv.url}/v1/` });
      const status = await readyStatus(s);
      assert.equal(status.state, 'ready', status.message);
      assert.equal(status.engine, `${serverName} at ${srv.url}`);
      assert.equal(status.model, model);
      const r = await within(5000, 'completion', s.complete(request()));
      assert.ok(r.ok, r.error);
      assert.equal(r.text, 'sum(xs) / len(xs)');
      assert.equal(r.finish, 'stop');
      assert.equal(r.metrics.tokens, 6);
      assert.equal(r.metrics.promptTokens, 57);
      assert.equal(r.metrics.model, model);
      assert.ok(r.metrics.ttftMs! > 0 && r.metrics.decodeMsPerToken! > 0);
      assert.equal(JSON.parse(srv.seen.at(-1)!.body).model, model);
    });
  }

  it('a slow server: the soft deadline ends the text at the first line end after it, and the request is aborted', async () => {
    const srv = await replay({ 'GET /v1/models': 'vllm-models.http', 'POST /v1/completions': { files: ['vllm-multiline-completion.http'], eventDelayMs: 100 } });
    const s = source({ url: srv.url });
    await readyStatus(s);
    const started = performance.now();
    const r = await within(2000, 'completion', s.complete(request({ deadlineMs: 250 })));
    assert.equal(r.finish, 'deadline');
    assert.ok(r.ok);
    assert.equal(r.text, 'total = 0\n    for x in xs:');
    assert.ok(performance.now() - started < 500, `took ${performance.now() - started} ms`);
    await new Promise((r) => setTimeout(r, 50));
    assert.ok(srv.seen.at(-1)!.closedEarly);
  });

  it('a slower server: the hard deadline (twice) ends it with what came, or as a timeout when nothing did', async () => {
    const srv = await replay({ 'GET /v1/models': 'vllm-models.http', 'POST /v1/completions': { files: ['vllm-completion.http'], eventDelayMs: 150 } });
    const s = source({ url: srv.url });
    await readyStatus(s);
    let started = performance.now();
    const r = await within(2000, 'completion', s.complete(request({ deadlineMs: 200 })));
    assert.equal(r.finish, 'deadline');
    assert.equal(r.text, 'sum(xs)');
    assert.ok(performance.now() - started < 550, `took ${performance.now() - started} ms`);
    srv.routes.set('POST /v1/completions', { files: ['vllm-completion.http'], hang: true });
    started = performance.now();
    const none = await within(2000, 'completion', s.complete(request({ deadlineMs: 100 })));
    assert.equal(none.finish, 'timeout');
    assert.equal(none.ok, false);
    assert.ok(performance.now() - started < 350);
  });

  it('a server that never answers: runahead.remote.timeoutMs ends the request; the next completion works', async () => {
    const srv = await replay({ 'GET /v1/models': 'sglang-models.http', 'POST /v1/completions': { files: ['sglang-completion.http'], hang: true } });
    const s = source({ url: srv.url, timeoutMs: 300 });
    await readyStatus(s);
    const r = await within(1500, 'completion', s.complete(request({ deadlineMs: 10_000 })));
    assert.equal(r.finish, 'timeout');
    assert.match(r.error!, /sent nothing for 300 ms \(runahead.remote.timeoutMs\)/);
    srv.routes.set('POST /v1/completions', { files: ['sglang-completion.http'] });
    assert.equal((await s.complete(request())).text, 'sum(xs) / len(xs)');
  });

  it('a connection dropped mid-stream fails that completion only', async () => {
    const srv = await replay({ 'GET /v1/models': 'vllm-models.http', 'POST /v1/completions': { files: ['vllm-completion.http'], dropAfter: 2, eventDelayMs: 20 } });
    const s = source({ url: srv.url });
    await readyStatus(s);
    const r = await within(3000, 'completion', s.complete(request()));
    assert.equal(r.ok, false);
    assert.equal(r.finish, 'error');
    assert.match(r.error!, /closed the connection mid-stream after \d+ characters/);
    assert.equal(s.status.state, 'ready', 'a dropped connection is no lasting problem');
    srv.routes.set('POST /v1/completions', { files: ['vllm-completion.http'] });
    assert.ok((await within(3000, 'next completion', s.complete(request()))).ok);
  });

  it('an error event mid-stream ends the completion with the server\'s message', async () => {
    const srv = await replay({ 'GET /v1/models': 'sglang-models.http', 'POST /v1/completions': 'sglang-error-midstream.http' });
    const s = source({ url: srv.url });
    await readyStatus(s);
    const r = await within(3000, 'completion', s.complete(request()));
    assert.equal(r.ok, false);
    assert.match(r.error!, /longer than the model's context length/);
  });

  it('429 bursts: retried after Retry-After while the deadline allows', async () => {
    const srv = await replay({ 'GET /v1/models': 'vllm-models.http', 'POST /v1/completions': { files: ['rate-limited.http', 'rate-limited.http', 'vllm-completion.http'] } });
    const s = source({ url: srv.url });
    await readyStatus(s);
    const started = performance.now();
    const r = await within(5000, 'completion', s.complete(request({ deadlineMs: 2000 })));
    assert.ok(r.ok, r.error);
    assert.equal(r.text, 'sum(xs) / len(xs)');
    const elapsed = performance.now() - started;
    assert.ok(elapsed >= 1900 && elapsed < 3000, `Retry-After: 1 twice, took ${elapsed} ms`);
    assert.equal(srv.seen.filter((x) => x.method === 'POST').length, 3);
  });

  it('429 with a Retry-After past the deadline: gives up at once, the next completion works', async () => {
    const srv = await replay({ 'GET /v1/models': 'vllm-models.http', 'POST /v1/completions': { files: ['rate-limited.http', 'vllm-completion.http'] } });
    const s = source({ url: srv.url });
    await readyStatus(s);
    const started = performance.now();
    const r = await within(1000, 'completion', s.complete(request({ deadlineMs: 300 })));
    assert.equal(r.ok, false);
    assert.equal(r.finish, 'busy');
    assert.match(r.error!, /busy \(HTTP 429: Rate limit reached.*would pass the deadline/);
    assert.ok(performance.now() - started < 200);
    assert.equal(s.status.state, 'ready');
    assert.ok((await s.complete(request())).ok);
  });

  it('503 without Retry-After: retried with a growing backoff', async () => {
    const srv = await replay({ 'GET /v1/models': 'vllm-models.http', 'POST /v1/completions': { files: ['overloaded.http', 'overloaded.http', 'vllm-completion.http'] } });
    const s = source({ url: srv.url });
    await readyStatus(s);
    const started = performance.now();
    const r = await within(3000, 'completion', s.complete(request()));
    assert.ok(r.ok, r.error);
    assert.ok(performance.now() - started >= 280, 'backoff 100 + 200 ms');
  });

  for (const [file, where] of [
    ['vllm-unauthorized.http', 'GET /v1/models'],
    ['llamacpp-unauthorized.http', 'POST /v1/completions'],
  ]) {
    it(`401 (${file}, on ${where}): an error status that says to set the key`, async () => {
      const srv = await replay({ 'GET /v1/models': where.startsWith('GET') ? file : 'llamacpp-models.http', 'POST /v1/completions': file });
      const s = source({ url: srv.url });
      await s.ready(2000);
      if (where.startsWith('POST')) {
        assert.equal(s.status.state, 'ready');
        const r = await within(2000, 'completion', s.complete(request()));
        assert.equal(r.ok, false);
      }
      assert.equal(s.status.state, 'error');
      assert.equal(s.status.remote.problem, 'auth');
      assert.match(s.status.message, new RegExp(`^${srv.url} refused the request \\(HTTP 401: (Unauthorized|Invalid API Key)\\): set the key with "Runahead: Set Remote API Key"`));
    });
  }

  for (const file of ['vllm-unknown-model.http', 'ollama-unknown-model.http']) {
    it(`a model not served, told by /v1/completions (${file}): error status naming the model`, async () => {
      const srv = await replay({ 'GET /v1/models': 'ollama-models.http', 'POST /v1/completions': file });
      const s = source({ url: srv.url, model: 'qwen-coder-7b' });
      const status = await readyStatus(s);
      assert.equal(status.remote.problem, 'model', 'not in /v1/models');
      assert.match(status.message, /it serves "qwen2.5-coder:1.5b-base", "codellama:7b-code"/);
      srv.routes.set('GET /v1/models', { files: ['no-completions.http'] });
      s.configure(settings({ url: srv.url, model: 'qwen-coder-7b ' }, { contextBudget: 1024 }));
      assert.ok(await s.ready(2000), 'no /v1/models: the model cannot be checked before a completion');
      assert.equal(s.status.state, 'degraded');
      const r = await s.complete(request());
      assert.equal(r.ok, false);
      assert.equal(s.status.remote.problem, 'model');
      assert.match(s.status.message, /does not serve model "qwen-coder-7b" \(HTTP 404: .*qwen-coder-7b.*\): set runahead.remote.model/);
    });
  }

  for (const file of ['no-completions.http', 'method-not-allowed.http']) {
    it(`a server without /v1/completions (${file}): error status saying what Runahead needs`, async () => {
      const srv = await replay({ 'GET /v1/models': 'vllm-models.http', 'POST /v1/completions': file });
      const s = source({ url: srv.url });
      await readyStatus(s);
      const r = await within(2000, 'completion', s.complete(request()));
      assert.equal(r.ok, false);
      assert.equal(s.status.state, 'error');
      assert.equal(s.status.remote.problem, 'endpoint');
      assert.match(s.status.message, /has no \/v1\/completions \(HTTP 40[45].*\): Runahead needs an OpenAI-compatible server/);
      assert.ok(await s.ready(100), 'the next completion still tries');
      srv.routes.set('POST /v1/completions', { files: ['vllm-completion.http'] });
      assert.ok((await s.complete(request())).ok);
      assert.equal(s.status.state, 'ready');
    });
  }

  it('a refused connection: error status at once, ready() false without waiting; the server coming up recovers', async () => {
    const srv = await replay({});
    const url = srv.url;
    await srv.close();
    servers.splice(0);
    const s = source({ url });
    const started = performance.now();
    assert.equal(await s.ready(2000), false);
    assert.ok(performance.now() - started < 1000);
    assert.equal(s.status.remote.problem, 'refused');
    assert.match(s.status.message, new RegExp(`cannot connect to ${url}: connection refused.*runahead.remote.url`));
    const r = await within(1000, 'completion', s.complete(request()));
    assert.equal(r.ok, false);
    const up = await replay({ 'GET /v1/models': 'vllm-models.http', 'POST /v1/completions': 'vllm-completion.http' });
    s.configure(settings({ url: up.url }));
    assert.ok(await s.ready(2000));
    assert.ok((await s.complete(request())).ok);
  });

  for (const url of ['ftp://gpu-box:30000', 'localhost:8000', '', 'http://user:pw@gpu-box:8000']) {
    it(`a wrong URL (${JSON.stringify(url)}): error status naming runahead.remote.url, no request`, async () => {
      const s = source({ url });
      assert.equal(await s.ready(100), false);
      assert.equal(s.status.state, 'error');
      assert.equal(s.status.remote.problem, 'url');
      assert.match(s.status.message, /runahead\.remote\.url|Set Remote API Key/);
      const r = await s.complete(request());
      assert.equal(r.ok, false);
    });
  }
});

describe('remote: FIM templates, windows and the SSE parser', () => {
  it('auto picks the template by the model name', () => {
    const pick = (m: string) => resolveTemplate('auto', m, '', []).name;
    assert.equal(pick('Qwen/Qwen2.5-Coder-1.5B'), 'qwen');
    assert.equal(pick('qwen2.5-coder:1.5b-base'), 'qwen');
    assert.equal(pick('codellama:7b-code'), 'codellama');
    assert.equal(pick('deepseek-ai/deepseek-coder-1.3b-base'), 'deepseek');
    assert.equal(pick('bigcode/starcoder2-3b'), 'starcoder');
    assert.equal(fimPrompt(resolveTemplate('codellama', '', '', []), { prefix: 'a', suffix: 'b' }), '<PRE> a <SUF>b <MID>');
    assert.equal(fimPrompt(resolveTemplate('deepseek', '', '', []), { prefix: 'a', suffix: 'b' }), '<｜fim▁begin｜>a<｜fim▁hole｜>b<｜fim▁end｜>');
    assert.equal(fimPrompt(resolveTemplate('starcoder', '', '', []), { prefix: 'a', suffix: 'b' }), '<fim_prefix>a<fim_suffix>b<fim_middle>');
    const custom = resolveTemplate('custom', '', '<s>[SUFFIX]{suffix}[PREFIX]{prefix}', ['</s>']);
    assert.equal(fimPrompt(custom, { prefix: 'x = "{suffix}"', suffix: 'y' }), '<s>[SUFFIX]y[PREFIX]x = "{suffix}"');
    assert.deepEqual(custom.stop, ['</s>']);
    assert.throws(() => resolveTemplate('custom', '', '{prefix} only', []), /runahead.remote.fimCustom .*expected a prompt with \{prefix\} and \{suffix\}/);
  });

  it('windows by characters: budget × 4, three quarters before the cursor, cut at line ends', () => {
    const line = (i: number) => `line ${String(i).padStart(4, '0')}\n`;
    const prefix = Array.from({ length: 1000 }, (_, i) => line(i)).join('');
    const suffix = Array.from({ length: 1000 }, (_, i) => line(i + 1000)).join('');
    const w = windowByChars(prefix, suffix, 100);
    assert.ok(w.prefix.length <= 300 && w.prefix.length > 280 && w.prefix.startsWith('line') && prefix.endsWith(w.prefix));
    assert.ok(w.suffix.length <= 100 && w.suffix.length > 80 && w.suffix.endsWith('\n') && suffix.startsWith(w.suffix));
    const short = windowByChars(prefix, 'x', 100);
    assert.ok(short.prefix.length > 380, 'what the suffix does not use goes to the prefix');
  });

  it('parses SSE split anywhere, with CRLF, comments and multi-line data', async () => {
    const stream = ': ping\r\ndata: {"a":1}\r\n\r\ndata: one\ndata: two\n\nevent: x\ndata: [DONE]';
    for (const size of [1, 2, 3, 7, 100]) {
      async function* pieces() {
        for (let i = 0; i < stream.length; i += size) yield stream.slice(i, i + size);
      }
      const got: string[] = [];
      for await (const e of sseEvents(pieces())) got.push(e);
      assert.deepEqual(got, ['{"a":1}', 'one\ntwo', '[DONE]'], `pieces of ${size}`);
    }
  });

  it('settings: runahead.remote.* are read with their types; unknown templates and non-string headers are dropped', () => {
    const s = readSettings({ backend: 'remote', remote: { url: ' http://gpu:8000 ', fimTemplate: 'nope', headers: { a: 'b', n: 1 }, timeoutMs: -1, stop: ['</s>', 3] } });
    assert.equal(s.backend, 'remote');
    assert.equal(s.remote.url, 'http://gpu:8000');
    assert.equal(s.remote.fimTemplate, 'auto');
    assert.deepEqual(s.remote.headers, { a: 'b' });
    assert.equal(s.remote.timeoutMs, 5000);
    assert.deepEqual(s.remote.stop, ['</s>']);
  });
});
