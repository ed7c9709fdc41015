// Type-through cache: a completion shown at some prefix still answers while
// the user types exactly what it predicted, without asking the engine. Also
// holds prefetched completions (see prefetch.ts) keyed by the prefix that
// accepting a completion produces.
import { detach } from './detach';

interface Entry {
  uri: string;
  prefixLen: number;
  /** The end of the prefix the completion was made for (enough to tell prefixes apart). */
  prefixTail: string;
  suffixHead: string;
  completion: string;
  source: string;
}

export interface CacheHit {
  /** What is left of the cached completion after what the user typed. */
  text: string;
  typed: number;
  source: string;
}

const TAIL = 512;
const SUFFIX_HEAD = 256;

export class CompletionCache {
  private entries: Entry[] = [];

  constructor(private readonly capacity = 64) {}

  put(uri: string, prefix: string, suffix: string, completion: string, source = 'engine'): void {
    if (completion.length === 0) return;
    const entry = { uri, prefixLen: prefix.length, prefixTail: detach(prefix.slice(-TAIL)), suffixHead: detach(suffix.slice(0, SUFFIX_HEAD)), completion, source };
    this.entries = this.entries.filter((e) => !(e.uri === uri && e.prefixLen === entry.prefixLen && e.prefixTail === entry.prefixTail));
    this.entries.push(entry);
    if (this.entries.length > this.capacity) this.entries.shift();
  }

  /**
   * The rest of a cached completion the user has typed into. The editor may
   * have auto-closed a bracket or quote the user typed (`(` → `()`), so up to
   * a few closing characters before the cached suffix still match; the caller
   * removes what the completion would duplicate (post-processing).
   */
  get(uri: string, prefix: string, suffix: string): CacheHit | undefined {
    const closers = /^[)\]}"'`]{0,3}/.exec(suffix)![0].length;
    for (let i = this.entries.length - 1; i >= 0; i--) {
      const e = this.entries[i];
      if (e.uri !== uri || prefix.length < e.prefixLen) continue;
      let k = 0;
      while (k <= closers && suffix.slice(k, k + SUFFIX_HEAD) !== e.suffixHead) k++;
      if (k > closers) continue;
      if (prefix.slice(e.prefixLen - e.prefixTail.length, e.prefixLen) !== e.prefixTail) continue;
      const typed = prefix.slice(e.prefixLen);
      if (typed.length < e.completion.length && e.completion.startsWith(typed)) {
        return { text: e.completion.slice(typed.length), typed: typed.length, source: e.source };
      }
    }
    return undefined;
  }

  clear(uri?: string): void {
    this.entries = uri ? this.entries.filter((e) => e.uri !== uri) : [];
  }

  get size(): number {
    return this.entries.length;
  }
}
