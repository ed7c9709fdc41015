// A completion, stage by stage:
//   trigger → selected item → type-through cache → running prefetch → debounce
//   → engine ready → FIM prompt → request (stream, early stop) → post-process
//   → cache, metrics, prefetch of the next one.
// Each stage is its own module; this file only wires them.
import type { InlineCompletionItem, InlineCompletionList, InlineCompletionParams, Range } from 'vscode-languageserver';
import type { TextDocument } from 'vscode-languageserver-textdocument';
import type { EngineSupervisor } from '../engine/supervisor';
import type { ModelContext } from '../model/modelState';
import type { Settings } from '../settings';
import { engineMetrics, type CompletionMetrics } from '../metrics';
import { CompletionCache } from './cache';
import type { RecentChunks } from './contextChunks';
import { AdaptiveDebounce, type Cancellable } from './debounce';
import { postprocess, type FilterContext } from './postprocess';
import { linesInBlock } from './postprocess/limitScopeByIndentation';
import { removeRepeatedLines } from './postprocess/removeRepeatedLines';
import { currentLinePrefix, currentLineSuffix, filterContext } from './postprocess/context';
import { textFollowsCursor } from './postprocess/singleLineWhenTextFollows';
import { Prefetcher } from './prefetch';
import { runRequest, type RequestResult } from './request';
import { shouldComplete } from './trigger';
import { afterPending, healTrailingWhitespace } from './tokenHealing';

export interface PipelineDeps {
  document(uri: string): TextDocument | undefined;
  supervisor: EngineSupervisor;
  model(): ModelContext | undefined;
  settings(): Settings;
  recent: RecentChunks;
  /** The path the model sees for a document, and the repository name. */
  describe(uri: string): { path: string; repoName?: string };
  metrics(m: CompletionMetrics): void;
  log(level: 'info' | 'warn' | 'error', line: string): void;
}

interface Place {
  uri: string;
  languageId: string;
  /** Text before the cursor, with the selected IntelliSense item applied. */
  prefix: string;
  suffix: string;
}

const neverCancelled: Cancellable = { isCancellationRequested: false };

/** What the filters see of a place: bounded windows of lines around the cursor. */
const filtersFor = (p: Place): FilterContext => filterContext(p.prefix, p.suffix, p.languageId);

/** Enough tokens: the one line is done, the block has ended, or the model loops on a line. */
export function completionIsComplete(text: string, ctx: FilterContext): boolean {
  if (textFollowsCursor(currentLineSuffix(ctx))) return text.includes('\n');
  const lines = text.split('\n');
  if (lines.length < 2) return false;
  const complete = text.slice(0, text.lastIndexOf('\n'));
  return linesInBlock(lines, currentLinePrefix(ctx)) < lines.length || removeRepeatedLines(complete, ctx) !== complete;
}

/** How requests ended, for runahead/stats (the reliability bench reads them). */
export interface PipelineCounters {
  requests: number;
  skipped: number;
  fromCache: number;
  fromPrefetch: number;
  fromEngine: number;
  cancelledWaiting: number;
  cancelledInEngine: number;
  noEngine: number;
  failed: number;
}

export class CompletionPipeline {
  readonly counters: PipelineCounters = { requests: 0, skipped: 0, fromCache: 0, fromPrefetch: 0, fromEngine: 0, cancelledWaiting: 0, cancelledInEngine: 0, noEngine: 0, failed: 0 };
  readonly cache = new CompletionCache();
  readonly debounce: AdaptiveDebounce;
  private readonly prefetcher = new Prefetcher();
  private active: { cancel(): void } | undefined;

  constructor(private readonly deps: PipelineDeps) {
    this.debounce = new AdaptiveDebounce(deps.settings().debounceMs);
  }

  async complete(params: InlineCompletionParams, token: Cancellable): Promise<InlineCompletionList | null> {
    const started = performance.now();
    this.counters.requests++;
    const doc = this.deps.document(params.textDocument.uri);
    if (!doc) return null;
    const settings = this.deps.settings();
    const text = doc.getText();
    const cursor = doc.offsetAt(params.position);
    const sel = params.context.selectedCompletionInfo;
    // With an IntelliSense item selected, complete as if it were inserted, and replace its range.
    const replaceFrom = sel ? doc.offsetAt(sel.range.start) : cursor;
    const replaceTo = sel ? doc.offsetAt(sel.range.end) : cursor;
    const lead = sel ? sel.text : '';
    const place: Place = { uri: doc.uri, languageId: doc.languageId, prefix: text.slice(0, replaceFrom) + lead, suffix: text.slice(replaceTo) };
    const range: Range = { start: doc.positionAt(replaceFrom), end: doc.positionAt(replaceTo) };
    const answer = (completion: string): InlineCompletionList | null =>
      completion.length === 0 ? null : { items: [{ insertText: lead + completion, range } satisfies InlineCompletionItem] };

    const filterCtx = filtersFor(place);
    const decision = shouldComplete(
      { languageId: doc.languageId, linePrefix: currentLinePrefix(filterCtx), lineSuffix: currentLineSuffix(filterCtx), triggerKind: params.context.triggerKind },
      settings,
    );
    if (!decision.complete) {
      this.counters.skipped++;
      return null;
    }

    const served = (source: CompletionMetrics['source'], completion: string, debounceMs: number, result?: RequestResult) => {
      this.deps.metrics({
        source,
        cacheHit: source !== 'engine',
        servedMs: performance.now() - started,
        debounceMs,
        chars: completion.length,
        ...(result ? { ...engineMetrics(result.done, this.deps.supervisor.loadReport), finishReason: result.finish } : {}),
      });
    };

    const hit = this.cache.get(place.uri, place.prefix, place.suffix);
    if (hit) {
      // Filters again: the text after the cursor may have changed (an auto-closed bracket).
      const text = postprocess(hit.text, filterCtx);
      this.counters.fromCache++;
      served('cache', text, 0);
      return answer(text);
    }
    const pending = this.prefetcher.matching(place);
    if (pending) {
      const completion = await pending;
      if (completion !== undefined && !token.isCancellationRequested) {
        this.counters.fromPrefetch++;
        served('prefetch', completion, 0);
        this.prefetchAfter(place, completion);
        return answer(completion);
      }
    }
    this.prefetcher.cancel();

    this.debounce.baseMs = settings.debounceMs;
    const debounceMs = params.context.triggerKind === 1 ? 0 : this.debounce.delay();
    if (!(await this.debounce.wait(token, debounceMs))) {
      this.counters.cancelledWaiting++;
      return null;
    }

    const asked = performance.now();
    const job = await this.generate(place, settings, token);
    if (!job) {
      this.counters[token.isCancellationRequested ? 'cancelledWaiting' : 'noEngine']++;
      return null;
    }
    const result = await job.result;
    if (!result.ok && result.finish !== 'enough') {
      if (result.finish === 'cancelled') this.counters.cancelledInEngine++;
      else {
        this.counters.failed++;
        this.deps.log('warn', `completion ended without text: ${result.error ?? result.finish}`);
      }
      return null;
    }
    this.counters.fromEngine++;
    this.debounce.latency(performance.now() - asked);
    const completion = postprocess(result.text, filterCtx);
    served('engine', completion, debounceMs, result);
    if (completion.length === 0) return answer('');
    this.cache.put(place.uri, place.prefix, place.suffix, completion);
    this.prefetchAfter(place, completion);
    return token.isCancellationRequested ? null : answer(completion);
  }

  /** Starts a generation for `place` (cancelling whatever ran before); undefined when no engine is ready in time. */
  private async generate(place: Place, settings: Settings, token: Cancellable) {
    const conn = await this.deps.supervisor.ready(settings.deadlineMs);
    const model = this.deps.model();
    if (!conn || !model || token.isCancellationRequested) return undefined;
    const { path, repoName } = this.deps.describe(place.uri);
    const healed = healTrailingWhitespace(place.prefix);
    const prompt = await model.fim.build({
      prefix: healed.prefix,
      suffix: place.suffix,
      path,
      repoName,
      extra: this.deps.recent.forCompletion(place.uri),
      // The engine's context (from its load report) holds the prompt and the completion.
      budget: Math.max(64, Math.min(settings.contextBudget, (this.deps.supervisor.loadReport?.context_length ?? model.info.contextLength) - settings.maxTokens - 1)),
    });
    if (token.isCancellationRequested) return undefined;
    const filterCtx = filtersFor(place);
    this.active?.cancel();
    const job = runRequest(conn, {
      prompt: prompt.ids,
      params: {
        max_tokens: settings.maxTokens,
        temperature: 0,
        stop: model.info.stopTokens,
        deadline_ms: settings.deadlineMs,
        hard_deadline_ms: 2 * settings.deadlineMs,
      },
      tokenizer: model.info.tokenizer,
      token,
      enough: (text) => {
        const shown = afterPending(text, healed.pending);
        return shown === null || (shown !== undefined && completionIsComplete(shown, filterCtx));
      },
    });
    this.active = job;
    const result = job.result.then((r) => ({ ...r, text: afterPending(r.text, healed.pending) ?? '' }));
    return { result, cancel: () => job.cancel() };
  }

  private prefetchAfter(place: Place, completion: string): void {
    const next: Place = { ...place, prefix: place.prefix + completion };
    if (this.cache.get(next.uri, next.prefix, next.suffix)) return;
    const settings = this.deps.settings();
    this.prefetcher.start(next, () => {
      let cancelled = false;
      let job: { cancel(): void } | undefined;
      const result = (async () => {
        const started = await this.generate(next, settings, neverCancelled);
        if (!started || cancelled) {
          started?.cancel();
          return undefined;
        }
        job = started;
        const r = await started.result;
        if (!r.ok && r.finish !== 'enough') return undefined;
        const text = postprocess(r.text, filtersFor(next));
        this.cache.put(next.uri, next.prefix, next.suffix, text, 'prefetch');
        return text;
      })();
      return {
        result,
        cancel: () => {
          cancelled = true;
          job?.cancel();
        },
      };
    });
  }

  /** Stops whatever runs (a request or a prefetch). */
  cancelAll(): void {
    this.prefetcher.cancel();
    this.active?.cancel();
  }
}
