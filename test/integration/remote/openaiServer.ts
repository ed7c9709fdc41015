// An OpenAI-compatible server on 127.0.0.1 (random port) in front of
// Runahead's own engine, so RemoteSource is tested against real streaming:
// POST /v1/completions tokenizes the prompt text with the model's
// tokenizer.json, generates with the engine, and streams each token's text as
// an SSE chunk in vLLM's shape; GET /v1/models lists the one model. It notes
// every request and whether the client closed the connection before the end.
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { EngineConnection } from '../../../server/src/engine/connection';
import type { LoadOptions } from '../../../server/src/engine/protocol';
import { StreamDecoder, TextTokenizer } from '../../../server/src/model/tokenizer';

export const repoRoot = join(__dirname, '..', '..', '..');
export const engineBinary = process.env.RUNAHEAD_ENGINE ?? join(repoRoot, 'engine', 'build', 'runahead-engine');
export const embeddedModel = join(repoRoot, 'engine', 'models', 'runahead-coder');

export interface SeenRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body?: Record<string, unknown>;
  /** The client closed the connection before the answer ended (an abort). */
  closedEarly: boolean;
  /** Tokens the engine generated for it. */
  tokens: number;
}

export interface EngineServerOptions {
  modelDir?: string;
  /** The id /v1/models lists and /v1/completions accepts. */
  modelName?: string;
  /** When set, requests need `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  load?: LoadOptions;
}

const json = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

export class EngineOpenAIServer {
  readonly seen: SeenRequest[] = [];
  private readonly closeWaiters: (() => void)[] = [];

  private constructor(
    private readonly http: Server,
    readonly engine: EngineConnection,
    readonly tokenizer: TextTokenizer,
    readonly modelName: string,
    readonly url: string,
  ) {}

  static async start(opts: EngineServerOptions = {}): Promise<EngineOpenAIServer> {
    const modelDir = opts.modelDir ?? embeddedModel;
    const engine = new EngineConnection(engineBinary, [], () => undefined);
    await engine.hello();
    await engine.load(modelDir, { backend: 'cpu', ...opts.load }, () => undefined);
    const tokenizer = await TextTokenizer.load(modelDir);
    const modelName = opts.modelName ?? 'runahead/runahead-coder';
    let self: EngineOpenAIServer | undefined;
    const http = createServer((req, res) => void self!.handle(req.method ?? 'GET', req.url ?? '/', req.headers, req, res, opts.apiKey));
    http.listen(0, '127.0.0.1');
    await once(http, 'listening');
    const { port } = http.address() as AddressInfo;
    self = new EngineOpenAIServer(http, engine, tokenizer, modelName, `http://127.0.0.1:${port}`);
    return self;
  }

  /** Resolves when the next request the client abandons has been seen closing. */
  nextEarlyClose(): Promise<void> {
    return new Promise((resolve) => this.closeWaiters.push(resolve));
  }

  async close(): Promise<void> {
    this.http.closeAllConnections();
    await new Promise((r) => this.http.close(r));
    await this.engine.shutdown();
  }

  private async handle(method: string, path: string, headers: IncomingHttpHeaders, req: NodeJS.ReadableStream, res: ServerResponse, apiKey?: string): Promise<void> {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    const seen: SeenRequest = { method, path, headers, closedEarly: false, tokens: 0 };
    this.seen.push(seen);
    if (apiKey && headers.authorization !== `Bearer ${apiKey}`) {
      return json(res, 401, { error: { message: 'Invalid API Key', type: 'authentication_error', code: 401 } });
    }
    if (method === 'GET' && path === '/v1/models') {
      return json(res, 200, { object: 'list', data: [{ id: this.modelName, object: 'model', created: 1718000000, owned_by: 'vllm', max_model_len: 4096 }] });
    }
    if (method !== 'POST' || path !== '/v1/completions') return json(res, 404, { detail: 'Not Found' });
    const body = JSON.parse(raw) as { model?: string; prompt: string; max_tokens?: number; temperature?: number; stop?: string[]; stream?: boolean; stream_options?: { include_usage?: boolean } };
    seen.body = body;
    if (body.model !== undefined && body.model !== this.modelName) {
      return json(res, 404, { object: 'error', message: `The model \`${body.model}\` does not exist.`, type: 'NotFoundError', param: null, code: 404 });
    }
    await this.stream(body, seen, res);
  }

  /** Generates and writes SSE chunks, one per token, as vLLM does; stops the engine when the client goes away. */
  private async stream(
    body: { prompt: string; max_tokens?: number; temperature?: number; stop?: string[]; stream_options?: { include_usage?: boolean } },
    seen: SeenRequest,
    res: ServerResponse,
  ): Promise<void> {
    const id = `cmpl-${seen.tokens}${Date.now().toString(16)}`;
    const created = Math.floor(Date.now() / 1000);
    const chunk = (text: string, finish: string | null) =>
      `data: ${JSON.stringify({ id, object: 'text_completion', created, model: this.modelName, choices: [{ index: 0, text, logprobs: null, finish_reason: finish, stop_reason: null }], usage: null })}\n\n`;
    const prompt = this.tokenizer.encode(body.prompt);
    const decoder = new StreamDecoder(this.tokenizer);
    const stops = body.stop ?? [];
    let text = '';
    let ended = false;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const gen = this.engine.generate(prompt, { max_tokens: body.max_tokens ?? 16, temperature: body.temperature ?? 0 }, (m) => {
      for (const token of m.tokens) {
        if (ended) return;
        seen.tokens++;
        const piece = decoder.push([token]);
        const at = stops.map((s) => (text + piece).indexOf(s)).filter((i) => i >= 0);
        if (at.length > 0) {
          const cut = (text + piece).slice(0, Math.min(...at));
          if (cut.length > text.length) res.write(chunk(cut.slice(text.length), null));
          ended = true;
          gen.cancel();
          return;
        }
        text += piece;
        if (piece) res.write(chunk(piece, null));
      }
    });
    res.on('close', () => {
      if (res.writableFinished) return;
      seen.closedEarly = true;
      gen.cancel();
      this.closeWaiters.splice(0).forEach((w) => w());
    });
    const done = await gen.done;
    if (res.destroyed) return;
    const finish = ended ? 'stop' : done.finish_reason === 'length' ? 'length' : 'stop';
    res.write(chunk('', finish));
    if (body.stream_options?.include_usage) {
      res.write(`data: ${JSON.stringify({ id, object: 'text_completion', created, model: this.modelName, choices: [], usage: { prompt_tokens: prompt.length, completion_tokens: seen.tokens, total_tokens: prompt.length + seen.tokens } })}\n\n`);
    }
    res.end('data: [DONE]\n\n');
  }
}
