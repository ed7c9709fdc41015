// What every post-processing filter sees besides the completion text.
export interface FilterContext {
  /** Document text before the cursor: its last lines (filterContext), not the prompt window. */
  prefix: string;
  /** Document text after the cursor: its first lines. */
  suffix: string;
  languageId: string;
}

/** Lines around the cursor the filters get: they look at the current line, the next non-blank one and the last 30. */
export const FILTER_LINES = 64;
/** At most this many characters on either side, so that a huge file or line costs what a small one does. */
export const FILTER_CHARS = 16_384;

/** The last FILTER_LINES lines of `prefix`, at most FILTER_CHARS; a longer current line keeps its indentation and its end. */
function lastLines(prefix: string): string {
  let nl = prefix.length;
  for (let n = 0; n < FILTER_LINES && nl >= 0; n++) nl = nl > 0 ? prefix.lastIndexOf('\n', nl - 1) : -1;
  const begin = nl + 1;
  if (prefix.length - begin <= FILTER_CHARS) return prefix.slice(begin);
  const cut = prefix.length - FILTER_CHARS;
  const lineStart = prefix.lastIndexOf('\n') + 1;
  if (lineStart > cut) return prefix.slice(prefix.indexOf('\n', cut) + 1);
  let indentEnd = lineStart;
  while (indentEnd < cut && (prefix[indentEnd] === ' ' || prefix[indentEnd] === '\t')) indentEnd++;
  return prefix.slice(lineStart, indentEnd) + prefix.slice(Math.max(cut, indentEnd));
}

/** The first FILTER_LINES lines of `suffix`, at most FILTER_CHARS (whole lines, unless the first is longer). */
function firstLines(suffix: string): string {
  let end = -1;
  for (let n = 0; n < FILTER_LINES; n++) {
    end = suffix.indexOf('\n', end + 1);
    if (end < 0) {
      end = suffix.length;
      break;
    }
  }
  if (end <= FILTER_CHARS) return suffix.slice(0, end);
  const lastNl = suffix.lastIndexOf('\n', FILTER_CHARS);
  return suffix.slice(0, lastNl > 0 ? lastNl : FILTER_CHARS);
}

/** What the filters see of a document: bounded windows of lines around the cursor. */
export function filterContext(prefix: string, suffix: string, languageId: string): FilterContext {
  return { prefix: lastLines(prefix), suffix: firstLines(suffix), languageId };
}

export type Filter = (completion: string, ctx: FilterContext) => string;

export function currentLinePrefix(ctx: FilterContext): string {
  return ctx.prefix.slice(ctx.prefix.lastIndexOf('\n') + 1);
}

export function currentLineSuffix(ctx: FilterContext): string {
  const end = ctx.suffix.indexOf('\n');
  return end < 0 ? ctx.suffix : ctx.suffix.slice(0, end);
}

export function indentOf(line: string): number {
  let n = 0;
  for (const ch of line) {
    if (ch === ' ') n++;
    else if (ch === '\t') n += 4;
    else break;
  }
  return n;
}

export function isBlank(line: string): boolean {
  return line.trim().length === 0;
}
