// A completion that only says again what already follows the cursor adds
// nothing; shown, it would duplicate the code after the cursor. Compared
// without whitespace, so indentation, spacing and line breaks do not hide it.
import type { Filter } from './context';

const squash = (s: string) => s.replace(/\s+/g, '');

export const dropSuffixEcho: Filter = (completion, ctx) => {
  const text = squash(completion);
  return text.length > 0 && squash(ctx.suffix).startsWith(text) ? '' : completion;
};
