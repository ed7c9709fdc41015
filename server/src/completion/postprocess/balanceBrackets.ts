// Cut the completion before the first bracket it closes that was never
// opened (neither in the completion nor earlier on the current statement's
// lines): the model has run past the expression the user is writing.
import type { Filter } from './context';

const pairs: Record<string, string> = { ')': '(', ']': '[', '}': '{' };
const openers = new Set(['(', '[', '{']);
const hashCommentLanguages = new Set(['python', 'shellscript', 'ruby', 'perl', 'r', 'yaml', 'toml', 'makefile', 'dockerfile', 'powershell', 'elixir', 'julia', 'coffeescript']);

/** Unclosed openers at the end of `text`, ignoring brackets inside simple string literals. */
export function openBrackets(text: string, hashComments = false): string[] {
  const stack: string[] = [];
  scan(text, hashComments, (ch, i) => {
    if (openers.has(ch)) stack.push(ch);
    else if (pairs[ch]) {
      if (stack[stack.length - 1] === pairs[ch]) stack.pop();
    }
    return i >= 0;
  });
  return stack;
}

/** Calls `visit` for each bracket outside quotes and line comments; stops when it returns false. */
function scan(text: string, hashComments: boolean, visit: (ch: string, i: number) => boolean): void {
  let quote = '';
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quote) {
      if (ch === '\\') i++;
      else if (ch === quote || (ch === '\n' && quote !== '`')) quote = '';
      continue;
    }
    if (ch === '"' || ch === "'" || ch === '`') quote = ch;
    else if (hashComments ? ch === '#' : ch === '/' && text[i + 1] === '/') {
      const nl = text.indexOf('\n', i);
      if (nl < 0) return;
      i = nl;
    } else if ((openers.has(ch) || pairs[ch]) && !visit(ch, i)) return;
  }
}

export const balanceBrackets: Filter = (completion, ctx) => {
  // Openers still open in the last few lines before the cursor may be closed by the completion.
  const recent = ctx.prefix.split('\n').slice(-30).join('\n');
  const hash = hashCommentLanguages.has(ctx.languageId);
  const stack = openBrackets(recent, hash);
  let cut = -1;
  scan(completion, hash, (ch, i) => {
    if (openers.has(ch)) {
      stack.push(ch);
      return true;
    }
    if (stack[stack.length - 1] === pairs[ch]) {
      stack.pop();
      return true;
    }
    cut = i;
    return false;
  });
  return cut < 0 ? completion : completion.slice(0, cut).trimEnd();
};
