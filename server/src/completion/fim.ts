// The FIM prompt as token ids, from the model's special tokens:
//   PSM: [<|repo_name|>repo\n] [<|file_sep|>path\ntext\n]* [<|file_sep|>path\n] <|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>
//   SPM: ... the same head ... <|fim_suffix|>S<|fim_prefix|>P<|fim_middle|>
// The bracketed head only for models that use the repo-level format (modelInfo.ts).
// Windows are cut at line boundaries aligned to blocks of lines, so that the
// start of the prompt stays the same while the cursor moves and the engine
// keeps reusing its KV cache. Text beyond what the budget can use is never
// tokenized (a 1 MB one-line file costs as much as a small one), and encoding
// yields to the event loop every few KB, so the server keeps answering
// (runahead/status, cancellations) while it builds a prompt.
import type { SpecialTokens, FimOrder } from '../model/modelInfo';
import { detach } from './detach';

export interface Encoder {
  encode(text: string): number[];
  decode(ids: number[]): string;
}

/** Windows assume at most this many characters per token: text past budget × this is never tokenized. */
export const MAX_CHARS_PER_TOKEN = 8;
/** Characters encoded between two yields to the event loop. */
const PIECE_CHARS = 2048;
/** Characters of lines whose token counts are kept (the cache starts over past this). */
const LINE_CACHE_CHARS = 1 << 20;

const yieldNow = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Near `at` (at most PIECE_CHARS / 2 before it, not before `floor`), where a line may be cut without changing its tokens: before a space; else `at`, not inside a surrogate pair. */
function cutNear(text: string, at: number, floor: number): number {
  const space = text.lastIndexOf(' ', at - 1);
  if (space > Math.max(floor, at - PIECE_CHARS / 2)) return space;
  return /[\uDC00-\uDFFF]/.test(text[at] ?? '') ? at - 1 : at;
}

/** Where a piece of `text` starting at `from` may end near `limit`: right after a newline that starts a non-blank line (pre-tokenization splits there), else as cutNear. */
function pieceEnd(text: string, from: number, limit: number): number {
  for (let nl = text.lastIndexOf('\n', limit - 1); nl > from; nl = text.lastIndexOf('\n', nl - 1)) {
    if (!/\s/.test(text[nl + 1])) return nl + 1;
  }
  return cutNear(text, limit, from);
}

/** `text` as ids, encoded a piece at a time with a yield to the event loop between pieces. */
export async function encodeInPieces(encoder: Encoder, text: string): Promise<number[]> {
  const ids: number[] = [];
  for (let at = 0; at < text.length; ) {
    const end = text.length - at > PIECE_CHARS ? pieceEnd(text, at, at + PIECE_CHARS) : text.length;
    for (const id of encoder.encode(text.slice(at, end))) ids.push(id);
    at = end;
    if (at < text.length) await yieldNow();
  }
  return ids;
}

export interface ContextFile {
  path: string;
  text: string;
}

export interface FimInput {
  prefix: string;
  suffix: string;
  /** The current file's path as the model should see it (relative to the workspace). */
  path: string;
  repoName?: string;
  /** Extra context (other files' chunks), in a stable order, oldest first. */
  extra: ContextFile[];
  /** Most prompt tokens in all. */
  budget: number;
}

export interface FimPrompt {
  ids: number[];
  prefixTokens: number;
  suffixTokens: number;
  extraTokens: number;
  extraFiles: number;
  /** The text that went in, after windowing (what post-processing should look at). */
  prefix: string;
  suffix: string;
}

/** Window starts and ends move in steps of up to this many lines (a quarter of the window at most). */
export const LINE_ALIGN = 16;

/** The step for a window of `lines` lines: a power of two, at most LINE_ALIGN and a quarter of the window. */
export function alignFor(lines: number): number {
  let a = 1;
  while (a * 2 <= Math.min(LINE_ALIGN, lines / 4)) a *= 2;
  return a;
}
const EXTRA_SHARE = 0.25;
const SUFFIX_SHARE = 0.25;

export class FimBuilder {
  private readonly lineCounts = new Map<string, number>();
  private lineCountChars = 0;
  /** Characters encoded since the last yield to the event loop. */
  private unyielded = 0;
  private readonly chunkIds = new Map<string, number[]>();

  constructor(
    private readonly encoder: Encoder,
    private readonly special: SpecialTokens,
    private readonly order: FimOrder,
    /** Repo-level format: <|repo_name|>, <|file_sep|> and other files' chunks. */
    private readonly repoLevel = special.fileSep !== undefined,
  ) {}

  async build(input: FimInput): Promise<FimPrompt> {
    const sp = this.special;
    const head: number[] = [];
    const useRepo = this.repoLevel && sp.fileSep !== undefined;
    if (useRepo && input.repoName && sp.repoName !== undefined) head.push(sp.repoName, ...this.encoder.encode(`${input.repoName}\n`));
    const fileHead = useRepo ? [sp.fileSep!, ...this.encoder.encode(`${input.path}\n`)] : [];
    const avail = Math.max(0, input.budget - head.length - fileHead.length - 3);

    const extraBudget = useRepo && input.extra.length > 0 ? Math.floor(avail * EXTRA_SHARE) : 0;
    const suffixBudget = Math.floor((avail - extraBudget) * SUFFIX_SHARE);
    const prefix = await this.prefixWindow(input.prefix, avail - extraBudget - suffixBudget);
    const suffix = await this.suffixWindow(input.suffix, suffixBudget);
    let prefixIds = await encodeInPieces(this.encoder, prefix);
    const suffixIds = await encodeInPieces(this.encoder, suffix);
    // Line counts are estimates; a whole-text encoding that overshoots loses its oldest tokens.
    const over = prefixIds.length + suffixIds.length - (avail - extraBudget);
    if (over > 0) prefixIds = prefixIds.slice(over);

    const extra = useRepo ? await this.extraIds(input.extra, extraBudget + Math.max(0, -over), sp.fileSep) : { ids: [], files: 0 };
    const body =
      this.order === 'spm'
        ? [sp.fimSuffix, ...suffixIds, sp.fimPrefix, ...prefixIds, sp.fimMiddle]
        : [sp.fimPrefix, ...prefixIds, sp.fimSuffix, ...suffixIds, sp.fimMiddle];
    return {
      ids: [...head, ...extra.ids, ...fileHead, ...body],
      prefixTokens: prefixIds.length,
      suffixTokens: suffixIds.length,
      extraTokens: extra.ids.length,
      extraFiles: extra.files,
      prefix,
      suffix,
    };
  }

  /** The longest tail of whole lines that fits, its start rounded up to a block of lines (counted from the top of the file). */
  async prefixWindow(prefix: string, budget: number): Promise<string> {
    const maxChars = budget * MAX_CHARS_PER_TOKEN;
    let from = 0;
    if (prefix.length > maxChars) {
      const nl = prefix.indexOf('\n', prefix.length - maxChars);
      if (nl < 0) return this.tailOfLine(prefix.slice(prefix.length - maxChars), budget);
      from = nl + 1;
    }
    const firstLine = from === 0 ? 0 : countNewlines(prefix, from);
    const lines = prefix.slice(from).split('\n');
    let used = 0;
    let start = lines.length;
    while (start > 0) {
      const cost = await this.lineCost(lines[start - 1]);
      if (used + cost > budget) break;
      used += cost;
      start--;
    }
    if (start === 0 && from === 0) return prefix;
    if (start === lines.length) return this.tailOfLine(lines[lines.length - 1], budget);
    const step = alignFor(lines.length - start);
    const aligned = Math.min(Math.ceil((firstLine + start) / step) * step - firstLine, lines.length - 1);
    return lines.slice(aligned).join('\n');
  }

  /** The longest head of whole lines that fits, its end rounded down to a block of lines. */
  async suffixWindow(suffix: string, budget: number): Promise<string> {
    const maxChars = budget * MAX_CHARS_PER_TOKEN;
    const cut = suffix.length > maxChars;
    // Cut by characters first: only whole lines, none past what the budget could use.
    const lastEnd = cut ? suffix.lastIndexOf('\n', maxChars) : suffix.length;
    if (lastEnd < 0) return '';
    const lines = (cut ? suffix.slice(0, lastEnd) : suffix).split('\n');
    let used = 0;
    let end = 0;
    while (end < lines.length) {
      const cost = await this.lineCost(lines[end]);
      if (used + cost > budget) break;
      used += cost;
      end++;
    }
    if (end === lines.length && !cut) return suffix;
    if (end === 0) return '';
    const step = alignFor(end);
    const aligned = Math.max(1, Math.floor(end / step) * step);
    return lines.slice(0, aligned).join('\n') + '\n';
  }

  /** The end of one line longer than the budget (minified code): the text of its last `budget` tokens, encoding pieces from its end only until they hold that many. */
  private async tailOfLine(line: string, budget: number): Promise<string> {
    const pieces: number[][] = [];
    let count = 0;
    let start = line.length;
    while (start > 0 && count <= budget) {
      const from = start > PIECE_CHARS ? cutNear(line, start - PIECE_CHARS, 0) : 0;
      const ids = this.encoder.encode(line.slice(from, start));
      pieces.unshift(ids);
      count += ids.length;
      start = from;
      await yieldNow();
    }
    if (count <= budget) return line;
    const ids = pieces.flat();
    // The first kept token may start inside a character; then start a token later.
    for (let keep = budget; keep > budget - 4 && keep > 0; keep--) {
      const tail = this.encoder.decode(ids.slice(ids.length - keep));
      if (line.endsWith(tail)) return tail;
    }
    return line.slice(line.length - Math.floor(((line.length - start) * budget) / count));
  }

  private async extraIds(files: ContextFile[], budget: number, fileSep: number | undefined): Promise<{ ids: number[]; files: number }> {
    if (fileSep === undefined || budget <= 0) return { ids: [], files: 0 };
    const encoded: number[][] = [];
    for (const f of files) encoded.push(await this.chunkTokens(f, fileSep));
    // Drop the oldest until the rest fits: the newest context is the most relevant.
    let first = 0;
    let total = encoded.reduce((n, ids) => n + ids.length, 0);
    while (first < encoded.length && total > budget) total -= encoded[first++].length;
    return { ids: encoded.slice(first).flat(), files: encoded.length - first };
  }

  private async chunkTokens(f: ContextFile, fileSep: number): Promise<number[]> {
    const key = `${f.path}\u0000${f.text}`;
    let ids = this.chunkIds.get(key);
    if (!ids) {
      ids = [fileSep, ...(await encodeInPieces(this.encoder, `${f.path}\n${f.text.endsWith('\n') ? f.text : `${f.text}\n`}`))];
      if (this.chunkIds.size > 256) this.chunkIds.clear();
      this.chunkIds.set(key, ids);
    }
    return ids;
  }

  /** Tokens of one line and its newline, cached; yields to the event loop every few KB encoded. */
  private async lineCost(line: string): Promise<number> {
    let n = this.lineCounts.get(line);
    if (n === undefined) {
      n = line.length > PIECE_CHARS ? (await encodeInPieces(this.encoder, `${line}\n`)).length : this.encoder.encode(`${line}\n`).length;
      if (this.lineCountChars > LINE_CACHE_CHARS) {
        this.lineCounts.clear();
        this.lineCountChars = 0;
      }
      this.lineCounts.set(detach(line), n);
      this.lineCountChars += line.length;
      this.unyielded += line.length;
      if (this.unyielded > PIECE_CHARS) {
        this.unyielded = 0;
        await yieldNow();
      }
    }
    return n;
  }
}

/** How many newlines `text` has before `end`. */
function countNewlines(text: string, end: number): number {
  let n = 0;
  for (let i = text.indexOf('\n'); i >= 0 && i < end; i = text.indexOf('\n', i + 1)) n++;
  return n;
}
