// A completion that ends with the text that already follows the cursor on
// this line (typically closing brackets and quotes) would duplicate it on
// accept: drop the overlapping end.
import { currentLineSuffix, type Filter } from './context';

export const removeSuffixOverlap: Filter = (completion, ctx) => {
  const rest = currentLineSuffix(ctx).trimEnd();
  if (rest.length === 0) return completion;
  const firstLineEnd = completion.indexOf('\n');
  const line = firstLineEnd < 0 ? completion : completion.slice(0, firstLineEnd);
  const tail = firstLineEnd < 0 ? '' : completion.slice(firstLineEnd);
  const trimmed = line.trimEnd();
  for (let n = Math.min(rest.length, trimmed.length); n > 0; n--) {
    if (trimmed.endsWith(rest.slice(0, n))) return trimmed.slice(0, trimmed.length - n) + tail;
  }
  return completion;
};
