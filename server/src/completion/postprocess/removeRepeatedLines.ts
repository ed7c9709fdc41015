// A small or lost model loops: the same line again and again. Cut at the
// first line that repeats the line before it (ignoring indentation; short
// lines such as `}` or `end` may legitimately repeat and are left alone).
import { isBlank, type Filter } from './context';

const MIN_LENGTH = 6;

export const removeRepeatedLines: Filter = (completion) => {
  const lines = completion.split('\n');
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!isBlank(line) && line.length >= MIN_LENGTH && line === lines[i - 1].trim()) return lines.slice(0, i).join('\n');
  }
  return completion;
};
