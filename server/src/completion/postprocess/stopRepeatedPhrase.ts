// A lost model repeats itself within a line until the token limit:
// `{ x: p.x, y: p.y, y: p.y, y: p.y…` or `a + b + b + b + b…`. Two signs, both
// cut the completion before the repeat:
// - a key or named argument given twice in one line (`, y:` after `{ … y:`),
//   which no language accepts in one literal or call;
// - a phrase of 4+ characters with a letter, said 3+ times back to back and
//   still going where the completion ends (a list that closes is code).
import { currentLinePrefix, type Filter } from './context';

/** Longer phrases said three times in one line are rare; the cap bounds the work on a long line. */
const MAX_PHRASE = 80;

const KEY = /^\s*([A-Za-z_$][\w$]*)\s*(?::(?!:)|=(?![=>]))/;

/**
 * The offset in `line` (from `from` on) where a key comes a second time inside the same
 * brackets (`{ x: 1, y: 2, y: 3`), at the comma before it. Keys are what follows `{`, `(` or `,`.
 */
function repeatedKey(line: string, from: number): number | undefined {
  const scopes: Set<string>[] = [new Set()];
  let quote: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i];
    if (quote) {
      if (ch === '\\') i++;
      else if (ch === quote) quote = undefined;
      continue;
    }
    if (ch === '"' || ch === "'" || ch === '`') quote = ch;
    else if (ch === '{' || ch === '(' || ch === '[') scopes.push(new Set());
    else if ((ch === '}' || ch === ')' || ch === ']') && scopes.length > 1) scopes.pop();
    if (ch !== '{' && ch !== '(' && ch !== ',') continue;
    const key = KEY.exec(line.slice(i + 1))?.[1];
    if (!key) continue;
    const scope = scopes[scopes.length - 1];
    if (scope.has(key) && i + 1 >= from) return ch === ',' ? i : i + 1;
    scope.add(key);
  }
  return undefined;
}

/**
 * Where a phrase repeated 3+ times back to back up to the line's end starts repeating; the
 * line may end inside one more copy (the token limit cuts anywhere).
 */
function loopAtEnd(line: string, from: number): number | undefined {
  for (let period = 4; period <= MAX_PHRASE && period * 3 <= line.length - from; period++) {
    // Every rotation of the phrase matches: cut where a copy starts with a separator (`, x`, ` + x`).
    let cut: number | undefined;
    for (let tail = 0; tail < period; tail++) {
      const end = line.length - tail;
      const phrase = line.slice(end - period, end);
      if (!/^[\s,;]/.test(phrase) || !phrase.startsWith(line.slice(end)) || !/[A-Za-z]/.test(phrase) || phrase.trim().length < 3) continue;
      let start = end - period;
      let count = 1;
      while (start - period >= from && line.slice(start - period, start) === phrase) {
        start -= period;
        count++;
      }
      if (count >= 3) cut = Math.min(cut ?? Infinity, start + period);
    }
    if (cut !== undefined) return cut;
  }
  return undefined;
}

export const stopRepeatedPhrase: Filter = (completion, ctx) => {
  const head = currentLinePrefix(ctx);
  let offset = 0;
  const lines = completion.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const before = i === 0 ? head : '';
    const line = before + lines[i];
    const last = i === lines.length - 1;
    const cut = repeatedKey(line, before.length) ?? (last ? loopAtEnd(line, before.length) : undefined);
    if (cut !== undefined) return completion.slice(0, offset + cut - before.length).trimEnd();
    offset += lines[i].length + 1;
  }
  return completion;
};
