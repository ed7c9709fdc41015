// The post-processing stage: the filters in the order they run. Each one is a
// small file with its golden cases in test/unit/golden/<filter>/.
import type { Filter, FilterContext } from './context';
import { stopAtInvalidText } from './stopAtInvalidText';
import { dropSuffixEcho } from './dropSuffixEcho';
import { stopRepeatedPhrase } from './stopRepeatedPhrase';
import { removeRepeatedBlocks } from './removeRepeatedBlocks';
import { singleLineWhenTextFollows } from './singleLineWhenTextFollows';
import { limitScopeByIndentation } from './limitScopeByIndentation';
import { removeRepeatedLines } from './removeRepeatedLines';
import { dropDuplicateSuffixLines } from './dropDuplicateSuffixLines';
import { balanceBrackets } from './balanceBrackets';
import { removeSuffixOverlap } from './removeSuffixOverlap';
import { trimTrailingWhitespace } from './trimTrailingWhitespace';

export const filters: Record<string, Filter> = {
  stopAtInvalidText,
  dropSuffixEcho,
  stopRepeatedPhrase,
  singleLineWhenTextFollows,
  limitScopeByIndentation,
  removeRepeatedLines,
  removeRepeatedBlocks,
  dropDuplicateSuffixLines,
  balanceBrackets,
  removeSuffixOverlap,
  trimTrailingWhitespace,
};

export function postprocess(completion: string, ctx: FilterContext): string {
  let text = completion;
  for (const filter of Object.values(filters)) {
    text = filter(text, ctx);
    if (text.length === 0) break;
  }
  return text;
}

export type { FilterContext } from './context';
