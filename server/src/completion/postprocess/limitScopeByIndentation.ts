// Stop at the end of the current block, judged by indentation against the
// line the cursor is on:
// - on a blank line (the user is between statements) the completion may add
//   statements at that level and deeper, and stops at the first line indented
//   less;
// - on a line the user has started, the completion finishes that line and the
//   block it may open, and stops at the first line back at that line's level
//   or above, keeping it only when it is a closing bracket (`}`, `)`, `]`).
import { currentLinePrefix, indentOf, isBlank, type Filter } from './context';

const closerLine = /^\s*[)\]}]/;

/** How many completion lines to keep. */
export function linesInBlock(lines: string[], linePrefix: string): number {
  const indent = indentOf(linePrefix);
  const started = !isBlank(linePrefix);
  for (let i = 1; i < lines.length; i++) {
    if (isBlank(lines[i])) continue;
    const d = indentOf(lines[i]);
    if (d < indent) return i;
    if (started && d === indent) return closerLine.test(lines[i]) ? i + 1 : i;
  }
  return lines.length;
}

export const limitScopeByIndentation: Filter = (completion, ctx) => {
  const lines = completion.split('\n');
  if (lines.length < 2) return completion;
  const keep = linesInBlock(lines, currentLinePrefix(ctx));
  return keep >= lines.length ? completion : lines.slice(0, keep).join('\n');
};
