// No trailing spaces on any line and no trailing blank lines: ghost text that
// ends in whitespace inserts junk on accept. A leading newline is kept.
import type { Filter } from './context';

export const trimTrailingWhitespace: Filter = (completion) =>
  completion
    .split('\n')
    .map((l) => l.trimEnd())
    .join('\n')
    .replace(/\n+$/, '');
