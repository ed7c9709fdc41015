// The local OpenAI-compatible API (server/src/api) driven by the official
// `openai` client, over the real engine and the chat fixture
// (test/fixtures/models/qwen2-chat-tiny: random weights, Qwen2.5's chat
// template): models, completions (plain and FIM), chat streamed and not,
// tool calls (rendered in, parsed out, forwarded to a remote server), 401,
// 413, 429 under a burst, a client abort that stops the engine within a
// step, inline completions pre-empting API work, loopback only, headless.
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import OpenAI from 'openai';
import { ApiServer } from '../../server/src/api/server';
import { loadChatTemplate } from '../../server/src/chat/template';
import { parseToolCalls, ToolCallStream } from '../../server/src/chat/toolCalls';
import { EngineSource } from '../../server/src/engine/engineSource';
import { Runahead } from '../../server/src/runahead';
import { defaultSettings, readSettings } from '../../server/src/settings';
import { engineBinary, repoRoot } from './remote/openaiServer';

const chatModel = join(repoRoot, 'test', 'fixtures', 'models', 'qwen2-chat-tiny');
const completionModel = join(repoRoot, 'test', 'fixtures', 'models', 'qwen2-tied-bf16');
const token = 'test-token-0123456789abcdef';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const tools: OpenAI.Chat.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'read_file', description: 'Read a file of the workspace', parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } },
];

async function startRunahead(settings: Record<string, unknown>): Promise<Runahead> {
  const r = new Runahead(() => undefined, () => undefined);
  r.configure(readSettings(settings));
  const t0 = Date.now();
  while (!['ready', 'degraded', 'error'].includes(r.status().state) && Date.now() - t0 < 30000) await sleep(20);
  assert.equal(r.status().state, 'ready', JSON.stringify(r.status()));
  return r;
}

describe('local API (openai client)', function () {
  let runahead: Runahead;
  let api: ApiServer;
  let client: OpenAI;

  before(async () => {
    runahead = await startRunahead({ modelPath: chatModel, enginePath: engineBinary });
    api = await ApiServer.listen(runahead.agent, { host: '127.0.0.1', port: 0, token, maxBodyBytes: 64 * 1024 });
    client = new OpenAI({ baseURL: api.url, apiKey: token, maxRetries: 0 });
  });
  after(async () => {
    await api?.close();
    await runahead?.stop();
  });

  it('lists the model', async () => {
    const list = await client.models.list();
    assert.deepEqual(list.data.map((m) => m.id), ['qwen2-chat-tiny']);
  });

  it('completes plain text and fill-in-the-middle (suffix)', async () => {
    const plain = await client.completions.create({ model: 'qwen2-chat-tiny', prompt: 'def add(a, b):\n', max_tokens: 8 });
    assert.equal(plain.choices[0].finish_reason, 'length');
    assert.ok(plain.choices[0].text.length > 0);
    assert.equal(plain.usage!.completion_tokens, 8);
    const fim = await client.completions.create({ model: 'qwen2-chat-tiny', prompt: 'def add(a, b):\n    return ', suffix: '\n\nprint(add(1, 2))\n', max_tokens: 6 });
    assert.equal(fim.usage!.completion_tokens, 6);
    assert.ok(fim.usage!.prompt_tokens > plain.usage!.prompt_tokens, 'the FIM prompt holds the suffix');
    const streamed: string[] = [];
    for await (const c of await client.completions.create({ model: 'qwen2-chat-tiny', prompt: 'def add(a, b):\n', max_tokens: 8, stream: true })) streamed.push(c.choices[0]?.text ?? '');
    assert.equal(streamed.join(''), plain.choices[0].text, 'greedy: streamed and not streamed agree');
  });

  it('chats, streamed and not, with the same greedy text', async () => {
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'system', content: 'You write Python.' }, { role: 'user', content: 'Write hello world.' }];
    const whole = await client.chat.completions.create({ model: 'qwen2-chat-tiny', messages, max_tokens: 12 });
    assert.equal(whole.choices[0].message.role, 'assistant');
    assert.equal(whole.usage!.completion_tokens, 12);
    const chunks: string[] = [];
    let finish: string | null = null;
    for await (const c of await client.chat.completions.create({ model: 'qwen2-chat-tiny', messages, max_tokens: 12, stream: true })) {
      chunks.push(c.choices[0]?.delta.content ?? '');
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    assert.ok(chunks.filter(Boolean).length > 1, 'several chunks');
    assert.equal(chunks.join(''), whole.choices[0].message.content);
    assert.equal(finish, 'length');
  });

  it('renders tools, tool calls and tool results in the template, and parses calls back', async () => {
    const template = await loadChatTemplate(chatModel);
    assert.equal(template.toolFormat, 'hermes');
    const prompt = template.render(
      [
        { role: 'user', content: 'What is in a.py?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'read_file', arguments: '{"path":"a.py"}' } }] },
        { role: 'tool', tool_call_id: 'c1', content: 'print(1)' },
      ],
      tools as never,
    );
    assert.match(prompt, /<tools>\n\{"type":\s*"function",\s*"function":\s*\{"name":\s*"read_file"/);
    assert.match(prompt, /<tool_call>\n\{"name": "read_file", "arguments": \{"path":\s*"a.py"\}\}\n<\/tool_call>/);
    assert.match(prompt, /<tool_response>\nprint\(1\)\n<\/tool_response><\|im_end\|>\n<\|im_start\|>assistant\n$/);

    const qwen = parseToolCalls('Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "b.py"}}\n</tool_call>', 'hermes');
    assert.equal(qwen.text, 'Let me look.');
    assert.deepEqual(qwen.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), [['read_file', { path: 'b.py' }]]);
    const llama = parseToolCalls('<|python_tag|>{"name": "read_file", "parameters": {"path": "c.py"}}', 'llama3');
    assert.deepEqual(llama.calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), [['read_file', { path: 'c.py' }]]);
    const stream = new ToolCallStream('hermes', true);
    const full = 'Sure. <tool_call>\n{"name": "read_file", "arguments": {"path": "d.py"}}\n</tool_call>';
    let shown = '';
    for (let i = 1; i <= full.length; i++) shown += stream.push(full.slice(0, i));
    assert.equal(shown, 'Sure. ', 'nothing of the call is shown as text');
    assert.equal(stream.finish().calls[0].function.name, 'read_file');

    // The whole round trip through the API: the conversation with the call and its result is served.
    const r = await client.chat.completions.create({
      model: 'qwen2-chat-tiny',
      tools,
      max_tokens: 4,
      messages: [
        { role: 'user', content: 'What is in a.py?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'read_file', arguments: '{"path":"a.py"}' } }] },
        { role: 'tool', tool_call_id: 'c1', content: 'print(1)' },
      ],
    });
    assert.ok(r.usage!.prompt_tokens > 100, 'the tools and the call are in the prompt');
  });

  it('says clearly that a completion model has no chat template', async () => {
    await assert.rejects(loadChatTemplate(completionModel), /tokenizer_config\.json: no "chat_template".*instruct model/);
  });

  it('401 without the token, 413 past the body limit, 404 elsewhere, in the OpenAI error shape', async () => {
    const anon = new OpenAI({ baseURL: api.url, apiKey: 'wrong-token-0123456789', maxRetries: 0 });
    await assert.rejects(anon.models.list(), (e: unknown) => e instanceof OpenAI.AuthenticationError && e.status === 401 && /bearer token/.test(e.message));
    await assert.rejects(
      client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'x'.repeat(100_000) }] }),
      (e: unknown) => e instanceof OpenAI.APIError && e.status === 413 && (e.error as { code?: string }).code === 'request_too_large',
    );
    const res = await fetch(`${api.url}/embeddings`, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: '{}' });
    assert.equal(res.status, 404);
    assert.equal(((await res.json()) as { error: { type: string } }).error.type, 'not_found_error');
  });

  it('429 with Retry-After beyond the queue bound under a burst', async () => {
    runahead.agent.maxQueue = 1;
    try {
      // Long enough that the first is still running when the last of the burst arrives on a busy machine.
      const burst = await Promise.allSettled(
        Array.from({ length: 5 }, () => client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1500 })),
      );
      const refused = burst.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason);
      assert.equal(burst.filter((r) => r.status === 'fulfilled').length, 2, 'one runs, one waits');
      assert.equal(refused.length, 3);
      for (const e of refused) {
        assert.ok(e instanceof OpenAI.RateLimitError, String(e));
        assert.ok(Number(e.headers?.get('retry-after')) >= 1);
      }
    } finally {
      runahead.agent.maxQueue = 4;
    }
  });

  it('an aborted request stops the engine within a step', async () => {
    const abort = new AbortController();
    const stream = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Write a long list.' }], max_tokens: 1900, stream: true }, { signal: abort.signal });
    let chunks = 0;
    let finish: string | null = null;
    try {
      for await (const c of stream) {
        finish = c.choices[0]?.finish_reason ?? finish;
        if (++chunks === 3) abort.abort();
      }
    } catch {
      // The client may end the iteration quietly or with an abort error.
    }
    assert.equal(chunks, 3, 'the stream ended at the abort');
    assert.equal(finish, null, 'not by itself');
    const stats = async () => (await runahead.stats()).engine as { busy: boolean; tokens_generated: number };
    const t0 = performance.now();
    while ((await stats()).busy && performance.now() - t0 < 2000) await sleep(2);
    assert.equal((await stats()).busy, false, 'the engine is idle after the abort');
    const generated = (await stats()).tokens_generated;
    await sleep(100);
    assert.equal((await stats()).tokens_generated, generated, 'and stays idle');
    assert.ok(performance.now() - t0 < 500, `idle after ${(performance.now() - t0).toFixed(0)} ms`);
  });

  it('inline completions pre-empt API work, which continues to the same greedy text', async () => {
    // 1200 tokens (~0.4 s of the embedded model): the inline requests, sent once 40 and 80
    // characters have streamed, must arrive while the chat still runs. With 400 a clean-clone CI
    // run once saw the chat finish first (pre-empted 0 times).
    const request = () => ({ messages: [{ role: 'user' as const, content: 'Write a long list.' }], maxTokens: 1200, temperature: 0, signal: new AbortController().signal });
    const alone = await runahead.agent.chat(request(), () => undefined);
    let seen = 0;
    const source = (runahead as unknown as { source: EngineSource }).source;
    const inline: Promise<unknown>[] = [];
    const interrupted = await runahead.agent.chat(request(), (d) => {
      seen += d.text?.length ?? 0;
      if (inline.length < 2 && seen > 40 * (inline.length + 1)) {
        inline.push(source.complete({ prefix: 'def f(x):\n    return ', suffix: '\n', path: 'f.py', extra: [], maxTokens: 8, temperature: 0, deadlineMs: 5000, signal: new AbortController().signal }));
      }
    });
    const inlineResults = (await Promise.all(inline)) as { ok: boolean }[];
    assert.ok(inlineResults.length > 0 && inlineResults.every((r) => r.ok), JSON.stringify(inlineResults));
    assert.ok(interrupted.stats!.preempted! >= 1, `pre-empted ${interrupted.stats!.preempted} times`);
    assert.equal(interrupted.text, alone.text, 'the continuation is lossless');
    assert.equal(interrupted.usage.completionTokens, alone.usage.completionTokens);
  });

  it('refuses a non-loopback address, in process and headless', async () => {
    await assert.rejects(ApiServer.listen(runahead.agent, { host: '0.0.0.0', port: 0, token }), /only 127\.0\.0\.1/);
    const child = spawn(process.execPath, [join(repoRoot, 'dist', 'server.js'), '--api', '0.0.0.0:0'], { env: { ...process.env, RUNAHEAD_API_TOKEN: token } });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const [code] = await once(child, 'exit');
    assert.equal(code, 2);
    assert.match(err, /refusing to listen on 0\.0\.0\.0/);
  });
});

describe('local API headless and remote', function () {
  it('node dist/server.js --api serves the API with no editor', async () => {
    const child = spawn(process.execPath, [join(repoRoot, 'dist', 'server.js'), '--api', '127.0.0.1:0'], {
      env: { ...process.env, RUNAHEAD_API_TOKEN: token, RUNAHEAD_MODEL: chatModel, RUNAHEAD_ENGINE: engineBinary },
    });
    try {
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      const t0 = Date.now();
      while (!/listening (\S+)/.test(out) && Date.now() - t0 < 10000) await sleep(20);
      const url = /listening (\S+)/.exec(out)![1];
      const c = new OpenAI({ baseURL: url, apiKey: token, maxRetries: 2 });
      const r = await c.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
      assert.equal(r.usage!.completion_tokens, 5);
    } finally {
      child.kill();
    }
  });

  it('forwards chat with tool calls to a remote server', async () => {
    // An upstream that answers every chat with one streamed tool call, as vLLM does.
    const seen: Record<string, unknown>[] = [];
    const upstream: Server = createServer(async (req, res) => {
      if (req.url?.endsWith('/models')) return void res.end(JSON.stringify({ object: 'list', data: [{ id: 'coder-instruct', object: 'model' }] }));
      let body = '';
      for await (const c of req) body += c;
      seen.push(JSON.parse(body));
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const chunk = (delta: unknown, finish: string | null = null) => res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`);
      chunk({ role: 'assistant', content: '' });
      chunk({ tool_calls: [{ index: 0, id: 'call_up', type: 'function', function: { name: 'read_file', arguments: '{"path":' } }] });
      chunk({ tool_calls: [{ index: 0, function: { arguments: '"a.py"}' } }] });
      chunk({}, 'tool_calls');
      res.end('data: [DONE]\n\n');
    });
    upstream.listen(0, '127.0.0.1');
    await once(upstream, 'listening');
    const runahead = new Runahead(() => undefined, () => undefined);
    runahead.configure(readSettings({ backend: 'remote', remote: { ...defaultSettings.remote, url: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` } }));
    const api = await ApiServer.listen(runahead.agent, { host: '127.0.0.1', port: 0, token });
    try {
      const t0 = Date.now();
      while (runahead.status().state !== 'ready' && Date.now() - t0 < 5000) await sleep(20);
      const c = new OpenAI({ baseURL: api.url, apiKey: token, maxRetries: 0 });
      const r = await c.chat.completions.create({ model: 'coder-instruct', tools, messages: [{ role: 'user', content: 'read a.py' }] });
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      assert.deepEqual(r.choices[0].message.tool_calls!.map((t) => [t.id, (t as { function: { name: string; arguments: string } }).function.name, (t as { function: { arguments: string } }).function.arguments]), [['call_up', 'read_file', '{"path":"a.py"}']]);
      assert.deepEqual((seen[0].tools as { function: { name: string } }[]).map((t) => t.function.name), ['read_file']);
      assert.equal(seen[0].model, 'coder-instruct');
    } finally {
      await api.close();
      await runahead.stop();
      upstream.close();
    }
  });
});
