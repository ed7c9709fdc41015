// One completion from POST /v1/completions with `stream: true`: retries a busy
// server (429/503, Retry-After respected) while the deadline allows, reads the
// SSE chunks, and ends on the first of: the server's end, a stop string, the
// text being enough, the soft deadline at a line end, the hard deadline, the
// caller's abort, or no bytes for timeoutMs. Every end aborts the HTTP request,
// so the server stops generating. Never throws.
import type { SourceResult } from '../completion/source';
import { cutAtStop } from './fimTemplates';
import { endpoint, errorText, httpProblem, networkProblem, RemoteProblem, retryAfterMs, shown } from './problems';
import { sseEvents, textChunks } from './sse';

export interface StreamRequest {
  base: URL;
  headers: Record<string, string>;
  /** The JSON body; `stream: true` is added. */
  body: { model?: string; prompt: string; max_tokens: number; temperature: number; stop: string[] };
  stop: string[];
  timeoutMs: number;
  /** Soft deadline (0: none); the hard one is twice it. Counted from `started`. */
  deadlineMs: number;
  started: number;
  signal: AbortSignal;
  enough?: (text: string) => boolean;
  onText?: (text: string) => void;
  /** Most attempts for a busy server, and the first backoff when it gives no Retry-After. */
  attempts?: number;
  backoffMs?: number;
}

export type StreamResult = SourceResult & { problem?: RemoteProblem };

interface Chunk {
  model?: string;
  choices?: { text?: string; finish_reason?: string | null }[];
  usage?: { completion_tokens?: number; prompt_tokens?: number } | null;
  error?: unknown;
  object?: string;
  message?: string;
}

type Why = 'cancelled' | 'enough' | 'deadline' | 'hard' | 'timeout' | 'stop';

const PATH = '/v1/completions';

export async function streamCompletion(r: StreamRequest): Promise<StreamResult> {
  const ctl = new AbortController();
  let why: Why | undefined;
  const end = (w: Why) => {
    why ??= w;
    ctl.abort();
  };
  const onAbort = () => end('cancelled');
  r.signal.addEventListener('abort', onAbort);
  if (r.signal.aborted) end('cancelled');
  const hardAt = r.deadlineMs > 0 ? r.started + 2 * r.deadlineMs : Infinity;
  const softAt = r.deadlineMs > 0 ? r.started + r.deadlineMs : Infinity;
  const hardTimer = Number.isFinite(hardAt) ? setTimeout(() => end('hard'), Math.max(0, hardAt - performance.now())) : undefined;
  let idle: NodeJS.Timeout | undefined;
  /** Restarts the clock of runahead.remote.timeoutMs (on = false stops it, while waiting to retry). */
  const quiet = (on = true) => {
    clearTimeout(idle);
    if (on) idle = setTimeout(() => end('timeout'), r.timeoutMs);
  };

  let raw = '';
  let text = '';
  let chunks = 0;
  let firstAt: number | undefined;
  let lastAt: number | undefined;
  let usage: Chunk['usage'];
  let model = r.body.model;
  let finishReason: string | undefined;
  const at = shown(r.base);
  const result = (ok: boolean, finish: string, problem?: RemoteProblem): StreamResult => {
    const tokens = usage?.completion_tokens ?? chunks;
    return {
      ok,
      text,
      finish,
      error: problem?.message,
      problem,
      metrics: {
        backend: 'remote',
        model,
        finishReason: finish,
        ttftMs: firstAt === undefined ? undefined : firstAt - r.started,
        decodeMsPerToken: firstAt !== undefined && lastAt !== undefined && tokens > 1 ? (lastAt - firstAt) / (tokens - 1) : undefined,
        tokens,
        promptTokens: usage?.prompt_tokens,
      },
    };
  };
  /** How the request ended once `why` is set (we aborted it). */
  const ended = (): StreamResult => {
    switch (why) {
      case 'cancelled':
        return result(false, 'cancelled');
      case 'enough':
        return result(true, 'enough');
      case 'stop':
        return result(true, 'stop');
      case 'deadline':
        return result(true, 'deadline');
      case 'hard':
        return text.length > 0
          ? result(true, 'deadline')
          : result(false, 'timeout', new RemoteProblem('timeout', `${at} sent no text within ${2 * r.deadlineMs} ms (twice runahead.deadlineMs)`));
      default:
        return result(false, 'timeout', new RemoteProblem('timeout', `${at} sent nothing for ${r.timeoutMs} ms (runahead.remote.timeoutMs)`));
    }
  };

  try {
    const res = await connect(r, ctl.signal, quiet, hardAt, () => why !== undefined);
    if (res instanceof RemoteProblem) return why ? ended() : result(false, res.kind === 'busy' ? 'busy' : 'error', res);
    if (!res) return ended();
    for await (const data of sseEvents(textChunks(res.body!))) {
      quiet();
      if (data.trim() === '[DONE]') break;
      let chunk: Chunk;
      try {
        chunk = JSON.parse(data) as Chunk;
      } catch {
        return result(false, 'error', new RemoteProblem('server', `${at} streamed a chunk that is not JSON: ${data.slice(0, 200)}`));
      }
      if (chunk.error !== undefined || chunk.object === 'error') {
        return result(false, 'error', new RemoteProblem('server', `${at} reported an error mid-stream: ${errorText(data)}`));
      }
      if (chunk.model) model = chunk.model;
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices?.[0];
      if (choice?.finish_reason) finishReason = choice.finish_reason;
      const piece = choice?.text ?? '';
      if (piece.length === 0) continue;
      const now = performance.now();
      firstAt ??= now;
      lastAt = now;
      chunks++;
      const before = raw.length;
      raw += piece;
      const cut = cutAtStop(raw, r.stop);
      text = cut.text;
      if (now >= softAt) {
        // Past the soft deadline: end at the first line end that arrived after it.
        const nl = text.indexOf('\n', Math.min(before, text.length));
        if (nl >= 0) {
          text = text.slice(0, nl);
          r.onText?.(text);
          end('deadline');
          break;
        }
      }
      r.onText?.(text);
      if (cut.stopped) {
        end('stop');
        break;
      }
      if (r.enough?.(text)) {
        end('enough');
        break;
      }
    }
    if (why) return ended();
    return result(true, finishReason ?? 'stop');
  } catch (err) {
    if (why) return ended();
    const p = networkProblem(err, r.base);
    const problem = p.kind === 'unreachable' || p.kind === 'dropped' ? new RemoteProblem('dropped', `${at} closed the connection mid-stream after ${text.length} characters`) : p;
    return result(false, 'error', problem);
  } finally {
    clearTimeout(hardTimer);
    clearTimeout(idle);
    r.signal.removeEventListener('abort', onAbort);
    // Whatever ended the stream, the request ends too: the server stops generating.
    ctl.abort();
  }
}

/** The streaming answer, retried while the server is busy and the deadline leaves time; a problem; or undefined once aborted. */
async function connect(r: StreamRequest, signal: AbortSignal, quiet: (on?: boolean) => void, hardAt: number, aborted: () => boolean): Promise<Response | RemoteProblem | undefined> {
  const attempts = r.attempts ?? 4;
  const body = JSON.stringify({ ...r.body, stream: true, stream_options: { include_usage: true } });
  for (let attempt = 1; ; attempt++) {
    quiet();
    let res: Response;
    try {
      res = await fetch(endpoint(r.base, PATH), { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...r.headers }, body, signal });
    } catch (err) {
      return aborted() ? undefined : networkProblem(err, r.base);
    }
    if (res.ok && res.body) return res;
    const text = await res.text().catch(() => '');
    const problem = httpProblem(res.status, text, r.base, PATH, r.body.model ?? '');
    if (problem.kind !== 'busy') return problem;
    const wait = retryAfterMs(res.headers.get('retry-after')) ?? (r.backoffMs ?? 100) * 2 ** (attempt - 1);
    // Past the deadline a retry could only show a completion too late.
    if (attempt >= attempts || performance.now() + wait >= hardAt) {
      return new RemoteProblem('busy', `${problem.message}; gave up after ${attempt} attempt${attempt > 1 ? 's' : ''}${performance.now() + wait >= hardAt ? ` (a retry in ${Math.round(wait)} ms would pass the deadline)` : ''}`, res.status);
    }
    quiet(false);
    if (!(await sleep(wait, signal))) return undefined;
  }
}

/** Waits `ms`; false when `signal` aborted first. */
function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(false);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
