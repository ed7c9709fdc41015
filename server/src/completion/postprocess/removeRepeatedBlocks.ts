// A model that lost its place writes the same lines again further down
// (A B C A B C…). Cut where a block of 2+ lines, long enough to mean something,
// comes a second time. One line twice (`return None` in two branches) is code
// and stays; removeRepeatedLines cuts a line repeated back to back.
import { isBlank, type Filter } from './context';

const MIN_BLOCK_CHARS = 24;

export const removeRepeatedBlocks: Filter = (completion) => {
  const lines = completion.split('\n');
  const key = lines.map((l) => l.trim());
  for (let j = 2; j < lines.length; j++) {
    for (let i = 0; i + 2 <= j; i++) {
      let k = 0;
      while (j + k < lines.length && i + k < j && key[i + k] === key[j + k]) k++;
      const block = key.slice(j, j + k);
      if (k >= 2 && block.filter((l) => !isBlank(l)).length >= 2 && block.join('').length >= MIN_BLOCK_CHARS) return lines.slice(0, j).join('\n').trimEnd();
    }
  }
  return completion;
};
