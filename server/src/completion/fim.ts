// The FIM prompt as token ids, from the model's special tokens:
//   PSM: [<|repo_name|>repo\n] [<|file_sep|>path\ntext\n]* [<|file_sep|>path\n] <|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>
//   SPM: ... the same head ... <|fim_suffix|>S<|fim_prefix|>P<|fim_middle|>
// The bracketed head only for models that use the repo-level format (modelInfo.ts).
// Windows are cut at line boundaries aligned to blocks of lines, so that the
// start of the prompt stays the same while the cursor moves and the engine
// keeps reusing its KV cache.
import type { SpecialTokens, FimOrder } from '../model/modelInfo';

export interface Encoder {
  encode(text: string): number[];
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
  private readonly chunkIds = new Map<string, number[]>();

  constructor(
    private readonly encoder: Encoder,
    private readonly special: SpecialTokens,
    private readonly order: FimOrder,
    /** Repo-level format: <|repo_name|>, <|file_sep|> and other files' chunks. */
    private readonly repoLevel = special.fileSep !== undefined,
  ) {}

  build(input: FimInput): FimPrompt {
    const sp = this.special;
    const head: number[] = [];
    const useRepo = this.repoLevel && sp.fileSep !== undefined;
    if (useRepo && input.repoName && sp.repoName !== undefined) head.push(sp.repoName, ...this.encoder.encode(`${input.repoName}\n`));
    const fileHead = useRepo ? [sp.fileSep!, ...this.encoder.encode(`${input.path}\n`)] : [];
    const avail = Math.max(0, input.budget - head.length - fileHead.length - 3);

    const extraBudget = useRepo && input.extra.length > 0 ? Math.floor(avail * EXTRA_SHARE) : 0;
    const suffixBudget = Math.floor((avail - extraBudget) * SUFFIX_SHARE);
    const prefix = this.prefixWindow(input.prefix, avail - extraBudget - suffixBudget);
    const suffix = this.suffixWindow(input.suffix, suffixBudget);
    let prefixIds = this.encoder.encode(prefix);
    const suffixIds = this.encoder.encode(suffix);
    // Line counts are estimates; a whole-text encoding that overshoots loses its oldest tokens.
    const over = prefixIds.length + suffixIds.length - (avail - extraBudget);
    if (over > 0) prefixIds = prefixIds.slice(over);

    const extra = useRepo ? this.extraIds(input.extra, extraBudget + Math.max(0, -over), sp.fileSep) : { ids: [], files: 0 };
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

  /** The longest tail of whole lines that fits, its start rounded up to a block of lines. */
  prefixWindow(prefix: string, budget: number): string {
    const lines = prefix.split('\n');
    let used = 0;
    let start = lines.length;
    while (start > 0) {
      const cost = this.lineCost(lines[start - 1]);
      if (used + cost > budget) break;
      used += cost;
      start--;
    }
    if (start === 0) return prefix;
    if (start === lines.length) return this.tailOfLine(lines[lines.length - 1], budget);
    const step = alignFor(lines.length - start);
    const aligned = Math.min(Math.ceil(start / step) * step, lines.length - 1);
    return lines.slice(aligned).join('\n');
  }

  /** The longest head of whole lines that fits, its end rounded down to a block of lines. */
  suffixWindow(suffix: string, budget: number): string {
    const lines = suffix.split('\n');
    let used = 0;
    let end = 0;
    while (end < lines.length) {
      const cost = this.lineCost(lines[end]);
      if (used + cost > budget) break;
      used += cost;
      end++;
    }
    if (end === lines.length) return suffix;
    if (end === 0) return '';
    const step = alignFor(end);
    const aligned = Math.max(1, Math.floor(end / step) * step);
    return lines.slice(0, aligned).join('\n') + '\n';
  }

  private tailOfLine(line: string, budget: number): string {
    // One line longer than the budget (minified code): keep its end, at a character boundary.
    let keep = line.length;
    while (keep > 0 && this.encoder.encode(line.slice(line.length - keep)).length > budget) keep = Math.floor(keep * 0.8);
    return line.slice(line.length - keep);
  }

  private extraIds(files: ContextFile[], budget: number, fileSep: number | undefined): { ids: number[]; files: number } {
    if (fileSep === undefined || budget <= 0) return { ids: [], files: 0 };
    const encoded = files.map((f) => this.chunkTokens(f, fileSep));
    // Drop the oldest until the rest fits: the newest context is the most relevant.
    let first = 0;
    let total = encoded.reduce((n, ids) => n + ids.length, 0);
    while (first < encoded.length && total > budget) total -= encoded[first++].length;
    return { ids: encoded.slice(first).flat(), files: encoded.length - first };
  }

  private chunkTokens(f: ContextFile, fileSep: number): number[] {
    const key = `${f.path}\u0000${f.text}`;
    let ids = this.chunkIds.get(key);
    if (!ids) {
      ids = [fileSep, ...this.encoder.encode(`${f.path}\n${f.text.endsWith('\n') ? f.text : `${f.text}\n`}`)];
      if (this.chunkIds.size > 256) this.chunkIds.clear();
      this.chunkIds.set(key, ids);
    }
    return ids;
  }

  private lineCost(line: string): number {
    let n = this.lineCounts.get(line);
    if (n === undefined) {
      n = this.encoder.encode(`${line}\n`).length;
      if (this.lineCounts.size > 4096) this.lineCounts.clear();
      this.lineCounts.set(line, n);
    }
    return n;
  }
}
