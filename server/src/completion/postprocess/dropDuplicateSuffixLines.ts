// Stop where the completion starts repeating the text after the cursor: at
// the first completed line that equals the next non-blank line of the suffix,
// indentation included (the model re-wrote code that is already there).
import { isBlank, type Filter } from './context';

function nextLines(suffix: string, count: number): string[] {
  const after = suffix.split('\n').slice(1).filter((l) => !isBlank(l));
  return after.slice(0, count).map((l) => l.trimEnd());
}

export const dropDuplicateSuffixLines: Filter = (completion, ctx) => {
  const [next] = nextLines(ctx.suffix, 1);
  if (next === undefined) return completion;
  const lines = completion.split('\n');
  for (let i = 1; i < lines.length; i++) {
    if (lines[i].trimEnd() === next) return lines.slice(0, i).join('\n').replace(/\n[ \t]*$/, '');
  }
  return completion;
};
