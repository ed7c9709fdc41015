// What every post-processing filter sees besides the completion text.
export interface FilterContext {
  /** Document text before the cursor (the whole file, not the prompt window). */
  prefix: string;
  /** Document text after the cursor. */
  suffix: string;
  languageId: string;
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
