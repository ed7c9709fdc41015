// Inline completions keep priority over agent work on the batch-1 engine.
// An inline completion that starts pre-empts the running agent generation
// (its engine request is cancelled within one step); the agent generation
// waits until no inline completion has run for `quietMs` (typing comes in
// bursts) and continues from the tokens it had produced: the prompt plus
// those tokens is the next request, so greedy output is the same as without
// the interruption and the client's stream just pauses.
import type { EngineConnection } from '../engine/connection';
import type { GenerateParams } from '../engine/protocol';

export interface SegmentedResult {
  tokens: number[];
  /** The engine's finish reason of the last segment, or cancelled | error. */
  finish: string;
  error?: string;
  /** How often inline completions pre-empted it. */
  preempted: number;
  promptTokens: number;
  steps: number;
  acceptedPerStep?: number;
  msPerToken?: number;
}

export class InlineFirst {
  private inlineRunning = 0;
  private lastInlineEnd = -Infinity;
  private readonly preemptors = new Set<() => void>();
  private readonly waiters = new Set<() => void>();

  constructor(readonly quietMs = 250) {}

  /** An inline completion starts: agent generations yield the engine. Returns the call that ends it. */
  inlineStarts(): () => void {
    this.inlineRunning++;
    for (const preempt of this.preemptors) preempt();
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.inlineRunning--;
      this.lastInlineEnd = performance.now();
      for (const wake of this.waiters) wake();
    };
  }

  /** Resolves true once no inline completion has run for quietMs; false when `signal` aborts first. */
  async turn(signal: AbortSignal): Promise<boolean> {
    while (!signal.aborted) {
      const wait = this.inlineRunning > 0 ? undefined : this.lastInlineEnd + this.quietMs - performance.now();
      if (wait !== undefined && wait <= 0) return true;
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.waiters.delete(wake);
          signal.removeEventListener('abort', wake);
          resolve();
        };
        const timer = wait === undefined ? undefined : setTimeout(wake, wait);
        this.waiters.add(wake);
        signal.addEventListener('abort', wake);
      });
    }
    return false;
  }

  /** One agent generation, in as many engine requests as pre-emptions make it take. */
  async run(
    connect: () => Promise<EngineConnection | undefined>,
    prompt: number[],
    params: GenerateParams,
    signal: AbortSignal,
    onTokens: (ids: number[]) => void,
  ): Promise<SegmentedResult> {
    const tokens: number[] = [];
    const result = (finish: string, error?: string): SegmentedResult => ({
      tokens,
      finish,
      error,
      preempted,
      promptTokens: prompt.length,
      steps,
      acceptedPerStep: steps > 0 ? accepted / steps : undefined,
      msPerToken: decodeTokens > 0 ? decodeMs / decodeTokens : undefined,
    });
    let preempted = 0;
    let steps = 0;
    let accepted = 0;
    let decodeMs = 0;
    let decodeTokens = 0;
    for (;;) {
      if (!(await this.turn(signal))) return result('cancelled');
      const conn = await connect();
      if (!conn) return result('error', 'the engine is not ready');
      const left = params.max_tokens - tokens.length;
      if (left <= 0) return result('length');
      let wasPreempted = false;
      const gen = conn.generate([...prompt, ...tokens], { ...params, max_tokens: left }, (m) => {
        tokens.push(...m.tokens);
        onTokens(m.tokens);
      });
      const preempt = () => {
        wasPreempted = true;
        gen.cancel();
      };
      const cancel = () => gen.cancel();
      this.preemptors.add(preempt);
      signal.addEventListener('abort', cancel);
      try {
        const done = await gen.done;
        const s = done.stats;
        steps += s.steps ?? 0;
        accepted += (s.accepted_per_step ?? 1) * (s.steps ?? 0);
        if (s.tokens > 1 && s.decode_ms_per_token > 0) {
          decodeMs += s.decode_ms_per_token * (s.tokens - 1);
          decodeTokens += s.tokens - 1;
        }
        if (done.finish_reason !== 'cancelled') return result(done.finish_reason);
        if (signal.aborted || !wasPreempted) return result('cancelled');
        preempted++;
      } catch (err) {
        return result('error', (err as Error).message);
      } finally {
        this.preemptors.delete(preempt);
        signal.removeEventListener('abort', cancel);
      }
    }
  }
}
