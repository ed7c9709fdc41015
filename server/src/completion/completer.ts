// A completion, stage by stage, for any front end (LSP, benchmark, HTTP API):
//   trigger → selected item → type-through cache → running prefetch → debounce
//   → source ready → prompt and request (the source's: stream, early stop)
//   → post-process → cache, metrics, prefetch of the next one.
// It knows nothing of LSP: text and offsets in, text, offsets and metrics out.
// Each stage is its own module; this file only wires them.
import { createHash } from 'node:crypto';
import { follow } from '../abort';
import type { Log } from '../log';
import type { CompletionMetrics } from '../metrics';
import type { Settings } from '../settings';
import { CompletionCache } from './cache';
import { AdaptiveDebounce } from './debounce';
import { completionIsComplete } from './earlyStop';
import type { ContextFile } from './fim';
import { postprocess, type FilterContext } from './postprocess';
import { currentLinePrefix, currentLineSuffix, filterContext } from './postprocess/context';
import { Prefetcher } from './prefetch';
import type { CompletionSource, SourceRequest, SourceResult } from './source';
import { afterPending, healTrailingWhitespace } from './tokenHealing';
import { shouldComplete, type Trigger } from './trigger';

export interface CompletionInput {
  /** Names the document for the caches and the context chunks (a URI, or any stable name). */
  uri: string;
  /** The whole document and the cursor's offset in it. */
  text: string;
  offset: number;
  languageId: string;
  /** The file's path as the model should see it, and the repository's name. */
  path: string;
  repoName?: string;
  /** An IntelliSense item the user has selected: complete as if `text` replaced [from, to), and replace that range. */
  selected?: { from: number; to: number; text: string };
  trigger: Trigger;
  /** Chunks of other files for the prompt, oldest first. */
  context?: ContextFile[];
  /** Aborted when the completion is no longer wanted (the next key came). */
  signal?: AbortSignal;
}

export interface CompletionResult {
  /** What to insert over [from, to) (the selected item's text, then the completion); '' when there is nothing to show. */
  text: string;
  from: number;
  to: number;
  /** skipped | cancelled | unavailable | cache | prefetch, or the source's finish (stop, length, enough, deadline, timeout, error, …). */
  finish: string;
  /** Present when a completion was served (sent as runahead/metrics), even one that ended empty or cancelled after. */
  metrics?: CompletionMetrics;
}

/** How requests ended, for runahead/stats (the reliability and typing benches read them). */
export interface CompletionCounters {
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

export interface CompleterDeps {
  /** The source to ask now; undefined before the server has started one. */
  source(): CompletionSource | undefined;
  settings(): Settings;
  log: Log;
}

interface Place {
  uri: string;
  languageId: string;
  /** Text before the cursor, with the selected IntelliSense item applied. */
  prefix: string;
  suffix: string;
  path: string;
  repoName?: string;
  extra: ContextFile[];
}

const never = new AbortController().signal;

/** Where to complete; with an IntelliSense item selected, as if it were inserted, replacing its range [from, to). */
function placeOf(input: CompletionInput): { place: Place; from: number; to: number; lead: string } {
  const from = input.selected?.from ?? input.offset;
  const to = input.selected?.to ?? input.offset;
  const lead = input.selected?.text ?? '';
  const place: Place = {
    uri: input.uri,
    languageId: input.languageId,
    prefix: input.text.slice(0, from) + lead,
    suffix: input.text.slice(to),
    path: input.path,
    repoName: input.repoName,
    extra: input.context ?? [],
  };
  return { place, from, to, lead };
}

/** Temperature of the second suggestion (Alt+]): different enough from greedy, still plausible. */
const ALTERNATIVE_TEMPERATURE = 0.8;
/** Samples tried for a second suggestion that differs from the first. */
const ALTERNATIVE_TRIES = 3;
/** How many places keep their second suggestion. */
const ALTERNATIVES_KEPT = 32;

/** What the filters see of a place: bounded windows of lines around the cursor. */
const filtersFor = (p: Place): FilterContext => filterContext(p.prefix, p.suffix, p.languageId);

export class Completer {
  readonly counters: CompletionCounters = { requests: 0, skipped: 0, fromCache: 0, fromPrefetch: 0, fromEngine: 0, cancelledWaiting: 0, cancelledInEngine: 0, noEngine: 0, failed: 0 };
  readonly cache = new CompletionCache();
  readonly debounce: AdaptiveDebounce;
  private readonly prefetcher = new Prefetcher();
  private active: AbortController | undefined;
  /** Second suggestions by place (uri, prefix, suffix), newest last. */
  private readonly alternatives = new Map<string, string>();
  private seed = 1;

  constructor(private readonly deps: CompleterDeps) {
    this.debounce = new AdaptiveDebounce(deps.settings().debounceMs);
  }

  /** One completion; `onText` sees the source's text as it streams (before post-processing; answers from the cache or a prefetch come only as the result). */
  async complete(input: CompletionInput, onText?: (textSoFar: string) => void): Promise<CompletionResult> {
    const started = performance.now();
    this.counters.requests++;
    const signal = input.signal ?? never;
    const settings = this.deps.settings();
    const { place, from, to, lead } = placeOf(input);
    const answer = (finish: string, completion = '', metrics?: CompletionMetrics): CompletionResult => ({
      text: completion.length === 0 ? '' : lead + completion,
      from,
      to,
      finish,
      metrics,
    });

    const filterCtx = filtersFor(place);
    const decision = shouldComplete(
      { languageId: input.languageId, linePrefix: currentLinePrefix(filterCtx), lineSuffix: currentLineSuffix(filterCtx), trigger: input.trigger },
      settings,
    );
    if (!decision.complete) {
      this.counters.skipped++;
      return answer('skipped');
    }

    const served = (source: CompletionMetrics['source'], completion: string, debounceMs: number, result?: SourceResult): CompletionMetrics => ({
      source,
      cacheHit: source !== 'engine',
      servedMs: performance.now() - started,
      debounceMs,
      chars: completion.length,
      ...(result ? { ...result.metrics, finishReason: result.finish } : {}),
    });

    const hit = this.cache.get(place.uri, place.prefix, place.suffix);
    if (hit) {
      // Filters again: the text after the cursor may have changed (an auto-closed bracket).
      const text = postprocess(hit.text, filterCtx);
      this.counters.fromCache++;
      return answer('cache', text, served('cache', text, 0));
    }
    const pending = this.prefetcher.matching(place);
    if (pending) {
      const completion = await pending;
      if (completion !== undefined && !signal.aborted) {
        this.counters.fromPrefetch++;
        const metrics = served('prefetch', completion, 0);
        this.prefetchAfter(place, completion);
        return answer('prefetch', completion, metrics);
      }
    }
    this.prefetcher.cancel();

    this.debounce.baseMs = settings.debounceMs;
    const debounceMs = input.trigger === 'invoked' ? 0 : this.debounce.delay();
    if (!(await this.debounce.wait(signal, debounceMs))) {
      this.counters.cancelledWaiting++;
      return answer('cancelled');
    }

    const asked = performance.now();
    const result = await this.generate(place, settings, signal, onText && ((text) => onText(lead + text)));
    if (!result) {
      this.counters[signal.aborted ? 'cancelledWaiting' : 'noEngine']++;
      return answer(signal.aborted ? 'cancelled' : 'unavailable');
    }
    if (!result.ok) {
      if (result.finish === 'cancelled') this.counters.cancelledInEngine++;
      else {
        this.counters.failed++;
        this.deps.log('warn', `completion ended without text: ${result.error ?? result.finish}`);
      }
      return answer(result.finish);
    }
    this.counters.fromEngine++;
    this.debounce.latency(performance.now() - asked);
    const completion = postprocess(result.text, filterCtx);
    const metrics = served('engine', completion, debounceMs, result);
    if (completion.length === 0) return answer(result.finish, '', metrics);
    this.cache.put(place.uri, place.prefix, place.suffix, completion);
    this.prefetchAfter(place, completion);
    return signal.aborted ? answer('cancelled', '', metrics) : answer(result.finish, completion, metrics);
  }

  /**
   * One generation for `place` from the source (cancelling whatever ran before), with
   * the prefix's trailing whitespace healed and stripped again from the text; undefined
   * when no source is ready in time.
   */
  private async generate(place: Place, settings: Settings, signal: AbortSignal, onText?: (text: string) => void, temperature = 0): Promise<SourceResult | undefined> {
    const source = this.deps.source();
    if (!source || !(await source.ready(settings.deadlineMs)) || signal.aborted) return undefined;
    const healed = healTrailingWhitespace(place.prefix);
    const filterCtx = filtersFor(place);
    this.active?.abort();
    const job = new AbortController();
    this.active = job;
    const unlink = follow(signal, job);
    const request: SourceRequest = {
      prefix: healed.prefix,
      suffix: place.suffix,
      path: place.path,
      repoName: place.repoName,
      extra: place.extra,
      maxTokens: settings.maxTokens,
      temperature,
      ...(temperature > 0 ? { seed: this.seed++ } : {}),
      deadlineMs: settings.deadlineMs,
      enough: (text) => {
        const shown = afterPending(text, healed.pending);
        return shown === null || (shown !== undefined && completionIsComplete(shown, filterCtx));
      },
      signal: job.signal,
    };
    const stream = onText && ((text: string) => {
      const shown = afterPending(text, healed.pending);
      if (shown) onText(shown);
    });
    const result = await source.complete(request, stream).finally(unlink);
    return { ...result, text: afterPending(result.text, healed.pending) ?? '' };
  }

  private prefetchAfter(place: Place, completion: string): void {
    const next: Place = { ...place, prefix: place.prefix + completion };
    if (this.cache.get(next.uri, next.prefix, next.suffix)) return;
    const settings = this.deps.settings();
    this.prefetcher.start(next, () => {
      const abort = new AbortController();
      const result = this.generate(next, settings, abort.signal).then((r) => {
        if (!r?.ok) return undefined;
        const text = postprocess(r.text, filtersFor(next));
        this.cache.put(next.uri, next.prefix, next.suffix, text, 'prefetch');
        return text;
      });
      return { result, cancel: () => abort.abort() };
    });
  }

  /**
   * A second suggestion for a place whose first one is already shown (Alt+] asks for it):
   * one sample at temperature > 0, made only now, so the first answer never waits on it,
   * and kept for the next time. Undefined when the sample is empty or says the same.
   */
  async alternative(input: CompletionInput, shown: string): Promise<string | undefined> {
    const { place, lead } = placeOf(input);
    // A digest, not the text: each kept entry would otherwise hold a copy of the whole document.
    const key = createHash('sha256').update(JSON.stringify([place.uri, place.prefix, place.suffix])).digest('base64');
    const differs = (t: string) => t.length > 0 && lead + t !== shown;
    let text = this.alternatives.get(key);
    // A small model often samples the greedy text again: a few seeds, each bounded by the deadline.
    for (let tries = 0; text === undefined && tries < ALTERNATIVE_TRIES; tries++) {
      const r = await this.generate(place, this.deps.settings(), input.signal ?? never, undefined, ALTERNATIVE_TEMPERATURE);
      if (!r?.ok) return undefined;
      const sample = postprocess(r.text, filtersFor(place));
      if (differs(sample)) text = sample;
    }
    if (!this.alternatives.has(key)) {
      this.deps.log('info', text === undefined ? `second suggestion: ${ALTERNATIVE_TRIES} samples said what the first one says` : `second suggestion: ${text.length} chars`);
      this.alternatives.set(key, text ?? '');
      if (this.alternatives.size > ALTERNATIVES_KEPT) this.alternatives.delete(this.alternatives.keys().next().value!);
    }
    return text !== undefined && differs(text) ? lead + text : undefined;
  }

  /** Stops whatever runs (a request or a prefetch). */
  cancelAll(): void {
    this.prefetcher.cancel();
    this.active?.abort();
  }
}
