// The local OpenAI-compatible API: /v1/models, /v1/completions (plain, or
// FIM with `suffix`) and /v1/chat/completions (streamed by SSE or not, with
// tools), served from the language server (runahead.api.enabled) or headless
// (`node dist/server.js --api 127.0.0.1:PORT`). Loopback only, a bearer
// token on every request, bodies up to `maxBodyBytes` (413 beyond), the
// agent's one queue in front of the engine (429 with Retry-After when full),
// and a client that disconnects cancels its generation.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Agent } from '../chat/agent';
import type { GenerationResult } from '../chat/types';
import { ApiError, asApiError, sendError } from './errors';
import { messages, num, optNum, promptText, stops, tools } from './requests';

export const DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024;
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1']);

export interface ApiOptions {
  host: string;
  port: number;
  token: string;
  maxBodyBytes?: number;
}

/** Refuses any address but the loopback one: the API runs code-reading models on the user's machine. */
export function checkLoopback(host: string): void {
  if (!LOOPBACK.has(host)) throw new Error(`runahead API: refusing to listen on ${host}; only 127.0.0.1 (loopback) is allowed`);
}

/** `HOST:PORT` or `PORT` as given to --api. */
export function parseListen(text: string): { host: string; port: number } {
  const m = /^(?:\[?([^\]]*?)\]?:)?(\d{1,5})$/.exec(text.trim());
  const port = m ? Number(m[2]) : NaN;
  if (!m || !(port >= 0 && port <= 65535)) throw new Error(`--api ${text}: expected HOST:PORT such as 127.0.0.1:8012`);
  return { host: m[1] || '127.0.0.1', port };
}

const now = () => Math.floor(Date.now() / 1000);
const newId = (prefix: string) => `${prefix}-${randomBytes(12).toString('hex')}`;

export class ApiServer {
  private readonly http: Server;
  private readonly token: Buffer;
  private readonly maxBodyBytes: number;

  private constructor(
    private readonly agent: Agent,
    options: ApiOptions,
  ) {
    this.token = Buffer.from(options.token);
    this.maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
    this.http = createServer((req, res) => void this.serve(req, res));
  }

  static async listen(agent: Agent, options: ApiOptions): Promise<ApiServer> {
    checkLoopback(options.host);
    if (options.token.length < 16) throw new Error('runahead API: the token must be at least 16 characters');
    const s = new ApiServer(agent, options);
    s.http.listen(options.port, options.host === 'localhost' ? '127.0.0.1' : options.host);
    await Promise.race([once(s.http, 'listening'), once(s.http, 'error').then(([e]) => Promise.reject(e))]);
    return s;
  }

  get url(): string {
    const a = this.http.address() as AddressInfo;
    return `http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}/v1`;
  }

  async close(): Promise<void> {
    this.http.closeAllConnections();
    await new Promise<void>((resolve) => this.http.close(() => resolve()));
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const abort = new AbortController();
    // The client went away before the answer ended: its generation stops.
    res.on('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    try {
      if (!this.authorized(req.headers.authorization)) throw new ApiError(401, 'missing or wrong bearer token (Runahead: Copy API Token; headless: $RUNAHEAD_API_TOKEN)', 'invalid_api_key');
      const path = (req.url ?? '/').split('?')[0].replace(/\/+$/, '');
      if (path === '/v1/models') {
        if (req.method !== 'GET') throw new ApiError(405, `${req.method} ${path}: expected GET`, 'method_not_allowed');
        return this.models(res);
      }
      const route = path === '/v1/completions' ? 'text' : path === '/v1/chat/completions' ? 'chat' : undefined;
      if (!route) throw new ApiError(404, `${path}: no such endpoint; expected /v1/models, /v1/completions or /v1/chat/completions`, 'not_found');
      if (req.method !== 'POST') throw new ApiError(405, `${req.method} ${path}: expected POST`, 'method_not_allowed');
      const body = await this.body(req);
      await (route === 'chat' ? this.chat(body, res, abort.signal) : this.text(body, res, abort.signal));
    } catch (err) {
      sendError(res, asApiError(err));
    }
  }

  private authorized(header: string | undefined): boolean {
    const m = /^Bearer (.+)$/.exec(header ?? '');
    if (!m) return false;
    const given = Buffer.from(m[1]);
    return given.length === this.token.length && timingSafeEqual(given, this.token);
  }

  private async body(req: IncomingMessage): Promise<Record<string, unknown>> {
    const tooLarge = () => new ApiError(413, `request body over ${this.maxBodyBytes} bytes`, 'request_too_large');
    if (Number(req.headers['content-length'] ?? 0) > this.maxBodyBytes) throw tooLarge();
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > this.maxBodyBytes) throw tooLarge();
      chunks.push(chunk as Buffer);
    }
    try {
      const v = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (v && typeof v === 'object' && !Array.isArray(v)) return v;
    } catch {
      // answered below
    }
    throw new ApiError(400, 'the body must be a JSON object', 'invalid_json');
  }

  private async models(res: ServerResponse): Promise<void> {
    const m = await this.agent.model();
    json(res, { object: 'list', data: [{ id: m.id, object: 'model', created: now(), owned_by: 'runahead', context_length: m.contextLength }] });
  }

  private async text(body: Record<string, unknown>, res: ServerResponse, signal: AbortSignal): Promise<void> {
    const model = await this.agent.model();
    const request = {
      prompt: promptText(body),
      suffix: typeof body.suffix === 'string' ? body.suffix : undefined,
      maxTokens: num(body, 'max_tokens', 16, 1, model.contextLength),
      temperature: num(body, 'temperature', 0, 0, 2),
      topP: optNum(body, 'top_p', 0, 1),
      seed: optNum(body, 'seed', 0, Number.MAX_SAFE_INTEGER),
      stop: stops(body),
      signal,
    };
    const id = newId('cmpl');
    const frame = (text: string, finish: string | null) => ({ id, object: 'text_completion', created: now(), model: model.id, choices: [{ index: 0, text, finish_reason: finish, logprobs: null }] });
    if (body.stream === true) {
      const sse = new Sse(res);
      const r = await this.agent.text(request, (delta) => sse.send(frame(delta, null)));
      return sse.end(r, frame('', r.finish), includeUsage(body));
    }
    const r = await this.agent.text(request, () => undefined);
    answer(res, r, { ...frame(r.text, r.finish), usage: usage(r) });
  }

  private async chat(body: Record<string, unknown>, res: ServerResponse, signal: AbortSignal): Promise<void> {
    const model = await this.agent.model();
    if (model.problem) throw new ApiError(400, model.problem, 'model_not_chat');
    const request = {
      messages: messages(body),
      tools: tools(body),
      maxTokens: num(body, 'max_completion_tokens', num(body, 'max_tokens', model.maxOutputTokens, 1, model.contextLength), 1, model.contextLength),
      temperature: num(body, 'temperature', 0, 0, 2),
      topP: optNum(body, 'top_p', 0, 1),
      seed: optNum(body, 'seed', 0, Number.MAX_SAFE_INTEGER),
      stop: stops(body),
      signal,
    };
    const id = newId('chatcmpl');
    const frame = (delta: Record<string, unknown>, finish: string | null) => ({ id, object: 'chat.completion.chunk', created: now(), model: model.id, choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }] });
    if (body.stream === true) {
      const sse = new Sse(res);
      sse.send(frame({ role: 'assistant', content: '' }, null));
      const r = await this.agent.chat(request, (d) => {
        if (d.text) sse.send(frame({ content: d.text }, null));
        if (d.toolCalls) sse.send(frame({ tool_calls: d.toolCalls.map((c, index) => ({ index, ...c })) }, null));
      });
      return sse.end(r, frame({}, r.finish), includeUsage(body));
    }
    const r = await this.agent.chat(request, () => undefined);
    const message = { role: 'assistant', content: r.toolCalls.length && !r.text ? null : r.text, ...(r.toolCalls.length ? { tool_calls: r.toolCalls } : {}) };
    answer(res, r, { id, object: 'chat.completion', created: now(), model: model.id, choices: [{ index: 0, message, finish_reason: r.finish, logprobs: null }], usage: usage(r) });
  }
}

function json(res: ServerResponse, body: unknown): void {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function usage(r: GenerationResult) {
  return { prompt_tokens: r.usage.promptTokens, completion_tokens: r.usage.completionTokens, total_tokens: r.usage.promptTokens + r.usage.completionTokens };
}

function includeUsage(body: Record<string, unknown>): boolean {
  return (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
}

/** A finished generation: the answer, or the error it ended with. */
function answer(res: ServerResponse, r: GenerationResult, body: unknown): void {
  if (r.finish === 'cancelled') return void res.destroy();
  if (r.finish === 'error') throw new ApiError(500, r.error ?? 'the generation failed', 'generation_failed');
  json(res, body);
}

/** Server-sent events as OpenAI streams them, ending with `data: [DONE]`. */
class Sse {
  constructor(private readonly res: ServerResponse) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    res.flushHeaders();
  }

  send(data: unknown): void {
    if (!this.res.writableEnded) this.res.write(`data: ${JSON.stringify(data)}\n\n`);
  }

  end(r: GenerationResult, last: Record<string, unknown>, withUsage: boolean): void {
    if (r.finish === 'cancelled') return void this.res.destroy();
    if (r.finish === 'error') this.send({ error: { message: r.error ?? 'the generation failed', type: 'server_error', param: null, code: 'generation_failed' } });
    else this.send(last);
    if (withUsage) this.send({ ...last, choices: [], usage: usage(r) });
    this.res.end('data: [DONE]\n\n');
  }
}
