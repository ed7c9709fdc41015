// Replays recorded HTTP answers of SGLang, vLLM, llama-server and Ollama
// (test/fixtures/remote/*.http: a status line, headers, a blank line, the body)
// on 127.0.0.1 (random port). A streamed body is written an SSE event at a
// time; a route may also hang, answer slowly, or drop the connection midway.
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Socket } from 'node:net';
import { join } from 'node:path';

export const transcripts = join(__dirname, '..', '..', 'fixtures', 'remote');

export interface Transcript {
  status: number;
  headers: Record<string, string>;
  /** The body, split into SSE events (each with its blank line) when it is a stream, else one piece. */
  pieces: string[];
}

/** A transcript file: `HTTP/1.1 200 OK`, `name: value` lines, a blank line, the body. */
export function readTranscript(name: string): Transcript {
  const text = readFileSync(join(transcripts, name), 'utf8');
  const split = text.indexOf('\n\n');
  const [statusLine, ...headerLines] = text.slice(0, split).split('\n');
  const body = text.slice(split + 2);
  const headers = Object.fromEntries(headerLines.map((l) => [l.slice(0, l.indexOf(':')).trim().toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
  const stream = headers['content-type']?.startsWith('text/event-stream');
  return { status: Number(statusLine.split(' ')[1]), headers, pieces: stream ? body.split(/(?<=\n\n)/) : [body] };
}

export interface Behaviour {
  /** Wait before each SSE event. */
  eventDelayMs?: number;
  /** Close the socket after this many events (a server that dies mid-stream). */
  dropAfter?: number;
  /** Never answer (no headers). */
  hang?: boolean;
}

/** What a route answers: one transcript, or one per request in turn (the last repeats). */
export interface Route extends Behaviour {
  files: string[];
}

export interface ReplayRequest {
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** The client closed the connection before the answer ended. */
  closedEarly: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class ReplayServer {
  readonly seen: ReplayRequest[] = [];
  private readonly served = new Map<string, number>();
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly http: Server,
    readonly url: string,
    /** `METHOD /path` → route; change it between requests as a test needs. */
    readonly routes: Map<string, Route>,
  ) {}

  static async start(routes: Record<string, Route | string>): Promise<ReplayServer> {
    const table = new Map(Object.entries(routes).map(([k, v]) => [k, typeof v === 'string' ? { files: [v] } : v]));
    let self: ReplayServer | undefined;
    const http = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => void self!.answer({ method: req.method ?? 'GET', path: req.url ?? '/', headers: req.headers, body, closedEarly: false }, res));
    });
    http.on('connection', (s) => {
      self?.sockets.add(s);
      s.on('close', () => self?.sockets.delete(s));
    });
    http.listen(0, '127.0.0.1');
    await once(http, 'listening');
    self = new ReplayServer(http, `http://127.0.0.1:${(http.address() as AddressInfo).port}`, table);
    return self;
  }

  /** A URL on which nothing listens (this server's port once closed). */
  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((r) => this.http.close(r));
  }

  private async answer(seen: ReplayRequest, res: import('node:http').ServerResponse): Promise<void> {
    this.seen.push(seen);
    res.on('close', () => {
      if (!res.writableFinished) seen.closedEarly = true;
    });
    const key = `${seen.method} ${seen.path}`;
    const route = this.routes.get(key);
    if (!route) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ detail: 'Not Found' }));
      return;
    }
    if (route.hang) return;
    const n = this.served.get(key) ?? 0;
    this.served.set(key, n + 1);
    const t = readTranscript(route.files[Math.min(n, route.files.length - 1)]);
    res.writeHead(t.status, t.headers);
    for (let i = 0; i < t.pieces.length; i++) {
      if (route.dropAfter !== undefined && i >= route.dropAfter) {
        res.socket?.destroy();
        return;
      }
      if (route.eventDelayMs) await sleep(route.eventDelayMs);
      if (res.destroyed) return;
      res.write(t.pieces[i]);
    }
    res.end();
  }
}
