// One generation on the engine: streams tokens, detokenizes them, stops early
// when the text so far is already complete (`enough`), and ends when its
// signal is aborted (→ engine `cancel`) or at the deadline. Always settles: a crash
// or a hang of the engine gives `ok: false`, never an exception.
import type { EngineConnection } from './connection';
import type { DoneMessage, GenerateParams } from './protocol';
import { StreamDecoder, type TextTokenizer } from '../model/tokenizer';

export interface RequestOptions {
  prompt: number[];
  params: GenerateParams;
  tokenizer: Pick<TextTokenizer, 'decode'>;
  signal: AbortSignal;
  /** True when the text so far needs no more tokens (e.g. the block has ended). */
  enough?: (text: string) => boolean;
  /** Sees the text as it streams. */
  onText?: (text: string) => void;
  /** Extra time past the engine's hard deadline before giving up on it. */
  graceMs?: number;
}

export interface RequestResult {
  ok: boolean;
  text: string;
  tokens: number;
  /** Why it ended: the engine's finish reason, 'enough', 'cancelled', 'timeout' or 'error'. */
  finish: string;
  done?: DoneMessage;
  firstTokenMs?: number;
  elapsedMs: number;
  error?: string;
}

export function runRequest(conn: EngineConnection, opts: RequestOptions): Promise<RequestResult> {
  const started = performance.now();
  const decoder = new StreamDecoder(opts.tokenizer);
  let text = '';
  let tokens = 0;
  let firstTokenMs: number | undefined;
  let stoppedEarly = false;
  let settle!: (r: RequestResult) => void;
  const result = new Promise<RequestResult>((resolve) => (settle = resolve));
  let settled = false;
  const finish = (r: Omit<RequestResult, 'text' | 'tokens' | 'elapsedMs' | 'firstTokenMs'>) => {
    if (settled) return;
    settled = true;
    clearTimeout(guard);
    opts.signal.removeEventListener('abort', cancel);
    settle({ text, tokens, firstTokenMs, elapsedMs: performance.now() - started, ...r });
  };

  const gen = conn.generate(opts.prompt, opts.params, (m) => {
    if (settled) return;
    firstTokenMs ??= performance.now() - started;
    tokens += m.tokens.length;
    text += decoder.push(m.tokens);
    opts.onText?.(text);
    if (!stoppedEarly && opts.enough?.(text)) {
      stoppedEarly = true;
      gen.cancel();
    }
  });

  const hard = opts.params.hard_deadline_ms || 2 * (opts.params.deadline_ms ?? 0);
  const guard = hard > 0 ? setTimeout(() => {
    gen.cancel();
    finish({ ok: false, finish: 'timeout', error: `no answer from the engine within ${hard + (opts.graceMs ?? 1000)} ms` });
  }, hard + (opts.graceMs ?? 1000)) : undefined;

  const cancel = () => {
    gen.cancel();
    finish({ ok: false, finish: 'cancelled' });
  };
  opts.signal.addEventListener('abort', cancel);
  if (opts.signal.aborted) cancel();

  gen.done.then(
    (done) => {
      text += decoder.flush();
      const reason = stoppedEarly ? 'enough' : done.finish_reason;
      finish({ ok: reason !== 'cancelled', finish: reason, done });
    },
    (err: Error) => finish({ ok: false, finish: 'error', error: err.message }),
  );
  return result;
}
