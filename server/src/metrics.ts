// The `runahead/metrics` notification sent after each completion, built from
// the engine's `done` stats and `loaded` report. Field names are the wire format.
import type { DoneMessage, LoadReport } from './engine/protocol';

export const METRICS_NOTIFICATION = 'runahead/metrics';
export const STATUS_NOTIFICATION = 'runahead/status';

export interface CompletionMetrics {
  /** engine: generated now; cache: typed through a shown completion; prefetch: made ahead of time. */
  source: 'engine' | 'cache' | 'prefetch';
  cacheHit: boolean;
  /** From the LSP request to the answer, debounce included. */
  servedMs: number;
  debounceMs: number;
  chars: number;
  /** The engine's finish reason, or 'enough' when the server stopped it because the completion was complete. */
  finishReason?: string;
  ttftMs?: number;
  decodeMsPerToken?: number;
  tokens?: number;
  steps?: number;
  drafted?: number;
  accepted?: number;
  acceptedPerStep?: number;
  /** The drafter the engine's speculative scheduler used (`stats.speculation.drafter`), when one ran. */
  drafter?: string;
  promptTokens?: number;
  reusedTokens?: number;
  prefillMs?: number;
  backend?: string;
  model?: string;
  optimizations?: Record<string, unknown>;
}

export function engineMetrics(done: DoneMessage | undefined, report: LoadReport | undefined): Partial<CompletionMetrics> {
  const s = done?.stats;
  return {
    finishReason: done?.finish_reason,
    ttftMs: s?.ttft_ms,
    decodeMsPerToken: s?.decode_ms_per_token,
    tokens: s?.tokens,
    steps: s?.steps,
    drafted: s?.drafted,
    accepted: s?.accepted,
    acceptedPerStep: s?.accepted_per_step,
    drafter: (s?.speculation as { drafter?: string } | undefined)?.drafter,
    promptTokens: s?.prompt_tokens,
    reusedTokens: s?.reused_tokens,
    prefillMs: s?.prefill_ms,
    backend: report?.backend,
    model: report?.model,
    optimizations: report?.optimizations,
  };
}
