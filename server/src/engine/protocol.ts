// Messages of the engine's stdio protocol, version 1 (engine/PROTOCOL.md).
// Only the fields the server reads are typed; the engine may send more.

export const PROTOCOL_VERSION = 1;

export type RequestId = string | number;

export interface HelloMessage {
  type: 'hello';
  protocol: number;
  engine: string;
  capabilities: {
    backends?: string[];
    architectures?: string[];
    speculation?: string[];
    max_line_bytes?: number;
    [key: string]: unknown;
  };
}

export interface LoadOptions {
  backend?: string;
  threads?: number;
  context_length?: number;
  draft_model?: string;
  speculation?: string;
  max_draft?: number;
  [key: string]: unknown;
}

export interface LoadProgressMessage {
  type: 'load_progress';
  id: RequestId;
  stage: string;
  done: number;
  total: number;
}

/** One entry of the load report's start-up self-check: an optimisation or drafter, active or not, and why. */
export interface OptimizationCheck {
  name: string;
  active: boolean;
  why: string;
  /** options.require named it. */
  required?: boolean;
}

export interface LoadReport {
  architecture?: string;
  model?: string;
  parameters?: number;
  /** The embedding's storage format. */
  dtype?: string;
  /** The weight matrices' formats as stored: "bf16", "q8_0", "q4_k+q6_k", ... (engine/PROTOCOL.md). */
  weights?: string;
  backend?: string;
  threads?: number;
  context_length?: number;
  vocab_size?: number;
  optimizations?: Record<string, unknown>;
  /** The start-up self-check: every optimisation and drafter, active or not, and why. */
  checks?: OptimizationCheck[];
  warnings?: string[];
  [key: string]: unknown;
}

export interface LoadedMessage {
  type: 'loaded';
  id: RequestId;
  report: LoadReport;
}

export interface GenerateParams {
  max_tokens: number;
  temperature?: number;
  top_k?: number;
  top_p?: number;
  seed?: number;
  stop?: number[];
  deadline_ms?: number;
  hard_deadline_ms?: number;
}

export interface TokensMessage {
  type: 'tokens';
  id: RequestId;
  tokens: number[];
  ms: number[];
}

export type FinishReason = 'stop' | 'length' | 'deadline' | 'cancelled' | 'context';

export interface DoneStats {
  prompt_tokens: number;
  reused_tokens: number;
  prefill_ms: number;
  ttft_ms: number;
  decode_ms_per_token: number;
  tokens: number;
  total_ms: number;
  steps: number;
  drafted: number;
  accepted: number;
  accepted_per_step: number;
  [key: string]: unknown;
}

export interface DoneMessage {
  type: 'done';
  id: RequestId;
  finish_reason: FinishReason;
  stats: DoneStats;
}

export interface ErrorMessage {
  type: 'error';
  id?: RequestId;
  code: string;
  message: string;
  file?: string;
  field?: string;
  expected?: string;
}

export interface StatsMessage {
  type: 'stats';
  loaded: boolean;
  model?: string;
  backend?: string;
  kv_tokens?: number;
  context_length?: number;
  rss_bytes?: number;
  requests?: number;
  tokens_generated?: number;
  busy?: boolean;
}

export type EngineMessage =
  | HelloMessage
  | LoadProgressMessage
  | LoadedMessage
  | TokensMessage
  | DoneMessage
  | ErrorMessage
  | StatsMessage
  | { type: 'pong'; id: RequestId }
  | { type: 'unloaded'; id: RequestId }
  | { type: 'bye' };

/** An `error` message turned into an exception that keeps its fields. */
export class EngineError extends Error {
  constructor(readonly detail: ErrorMessage) {
    super(`${detail.code}: ${detail.message}`);
  }
  get code(): string {
    return this.detail.code;
  }
}

/** The engine process is gone (crashed, killed or restarting). */
export class EngineGoneError extends Error {}
