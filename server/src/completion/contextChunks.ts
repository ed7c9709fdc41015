// Extra context for the prompt: a ring buffer of chunks from recently opened
// and edited files. Near-duplicates replace the chunk they resemble in place,
// and new chunks go at the end, so the order is stable and the prompt's head
// (and the engine's prefix cache) stays the same while the user types.
import type { ContextFile } from './fim';
import { detach } from './detach';

export interface Chunk extends ContextFile {
  uri: string;
}

export interface RingOptions {
  capacity: number;
  /** Lines of a chunk around an edit, and of the head of an opened file. */
  chunkLines: number;
  /** Jaccard similarity of identifier sets at or above which two chunks are the same. */
  similarity: number;
}

export const defaultRingOptions: RingOptions = { capacity: 8, chunkLines: 24, similarity: 0.7 };

function words(text: string): Set<string> {
  return new Set(text.split(/[^A-Za-z0-9_]+/).filter((w) => w.length > 1));
}

export function jaccard(a: string, b: string): number {
  const wa = words(a);
  const wb = words(b);
  if (wa.size === 0 && wb.size === 0) return a.trim() === b.trim() ? 1 : 0;
  let common = 0;
  for (const w of wa) if (wb.has(w)) common++;
  return common / (wa.size + wb.size - common);
}

/** Most characters of a chunk: a file of huge lines (minified code) gives a chunk this long, not 1 MB. */
export const CHUNK_CHARS = 4096;

/** Where line `line` of `text` starts (text.length past the last line). */
function lineStart(text: string, line: number, from = 0, fromLine = 0): number {
  let at = from;
  for (let n = fromLine; n < line && at < text.length; n++) {
    const nl = text.indexOf('\n', at);
    at = nl < 0 ? text.length : nl + 1;
  }
  return at;
}

/** `count` lines of `text` centred on `line`, at most CHUNK_CHARS; walks to them instead of splitting the whole file. */
export function linesAround(text: string, line: number, count: number): string {
  let lines = 1;
  for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n', nl + 1)) lines++;
  const first = Math.max(0, Math.min(line - Math.floor(count / 2), lines - count));
  const begin = lineStart(text, first);
  const end = lineStart(text, first + count, begin, first);
  return detach(text.slice(begin, Math.min(end - (end > begin && text[end - 1] === '\n' ? 1 : 0), begin + CHUNK_CHARS)));
}

export class RecentChunks {
  private ring: Chunk[] = [];
  /** The latest edit of each file, added to the ring when the user works elsewhere. */
  private pending = new Map<string, Chunk>();

  constructor(readonly options: RingOptions = defaultRingOptions) {}

  opened(uri: string, path: string, text: string): void {
    this.add({ uri, path, text: linesAround(text, 0, this.options.chunkLines) });
  }

  edited(uri: string, path: string, text: string, line: number): void {
    this.pending.set(uri, { uri, path, text: linesAround(text, line, this.options.chunkLines) });
  }

  closed(uri: string): void {
    this.commit(uri);
  }

  /** The chunks for a completion in `uri`: commits other files' pending edits first. */
  forCompletion(uri: string): Chunk[] {
    for (const other of [...this.pending.keys()]) if (other !== uri) this.commit(other);
    return this.ring.filter((c) => c.uri !== uri);
  }

  all(): readonly Chunk[] {
    return this.ring;
  }

  add(chunk: Chunk): void {
    if (chunk.text.trim().length === 0) return;
    const i = this.ring.findIndex((c) => c.text === chunk.text || jaccard(c.text, chunk.text) >= this.options.similarity);
    if (i >= 0) {
      if (this.ring[i].text !== chunk.text) this.ring[i] = chunk;
      return;
    }
    this.ring.push(chunk);
    if (this.ring.length > this.options.capacity) this.ring.shift();
  }

  private commit(uri: string): void {
    const c = this.pending.get(uri);
    this.pending.delete(uri);
    if (c) this.add(c);
  }
}
