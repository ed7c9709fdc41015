// Where completion text comes from, as the Completer sees it: the local engine
// (token ids over stdio, KV reuse, speculation stats) or a remote
// OpenAI-compatible server (the FIM prompt as text over HTTP, streamed). A
// source builds its own prompt from the document's text, since only it knows
// its tokenizer or template; everything before (trigger, cache, debounce) and
// after (post-processing, metrics) is the Completer's and the same for both.
//
// The members below `complete` are optional. sources.ts picks the source
// (`sourceFor`); on a change of kind the old source is `stop`ped. Token healing
// is the Completer's: `prefix` arrives healed and the Completer strips the
// pending whitespace from the text, so a source returns the model's text as is.
import type { CompletionMetrics } from '../metrics';
import type { EngineStatus } from '../engine/supervisor';
import type { Settings } from '../settings';
import type { ContextFile } from './fim';
import type { AgentBackend } from '../chat/types';

export interface SourceRequest {
  /** Text before the cursor (token healing already applied) and after it: the whole document; the source windows it to its budget. */
  prefix: string;
  suffix: string;
  /** The file's path as the model should see it, and the repository's name. */
  path: string;
  repoName?: string;
  /** Chunks of other files, oldest first. */
  extra: ContextFile[];
  maxTokens: number;
  temperature: number;
  /** Sampling seed with temperature > 0 (another seed, another sample). */
  seed?: number;
  /** Soft deadline in ms: stop at the next line end past it; stop at once at twice it. */
  deadlineMs: number;
  /** True when the text so far needs no more tokens; the source then stops generating. */
  enough?: (text: string) => boolean;
  /** Aborted when the editor no longer wants this completion. */
  signal: AbortSignal;
}

export interface SourceResult {
  /** False when it ended without a usable text (cancelled, failed, timed out). */
  ok: boolean;
  text: string;
  /** stop | length | deadline | context | enough | cancelled | timeout | error */
  finish: string;
  error?: string;
  /** What the status bar and runahead/metrics show: TTFT, ms/token, tokens, backend, model, … */
  metrics: Partial<CompletionMetrics>;
}

export interface CompletionSource {
  /** 'engine' for the local engine, 'remote' for an OpenAI-compatible server. */
  readonly kind: 'engine' | 'remote';
  /** The status bar's state for this source (same shape for both). */
  readonly status: EngineStatus;
  /** Whether a completion can start, waiting at most `waitMs` for the source to become ready. */
  ready(waitMs: number): Promise<boolean>;
  /** One generation; `onText` sees the text as it streams. Always settles, never throws. */
  complete(request: SourceRequest, onText?: (textSoFar: string) => void): Promise<SourceResult>;
  /** Takes changed settings while the same kind of source stays (a new model folder, URL or key). */
  configure?(settings: Settings): void;
  /** `listener` runs whenever `status` changes. */
  onStatus?(listener: () => void): void;
  /** Starts over (the "Restart engine" command): reads the model again, reconnects. */
  restart?(): Promise<void>;
  /** The source's own counters for runahead/stats (the engine's `stats`), or null. */
  stats?(): Promise<unknown>;
  /** Ends it: the settings switched to another source, or the server shuts down. */
  stop?(): Promise<void>;
  /** Ends it at once and synchronously: the server process is exiting. */
  killNow?(): void;
  /** Agent work (chat/agent mode, edits, the local API; server/src/chat), where the source can do it. */
  readonly agent?: AgentBackend;
}
