// Text after the cursor on the same line (not just closing brackets or
// punctuation) means the user is editing inside a line: complete one line only.
import { currentLineSuffix, type Filter } from './context';

export function textFollowsCursor(lineSuffix: string): boolean {
  return !/^[\s)\]}>"'`;,.:]*$/.test(lineSuffix);
}

export const singleLineWhenTextFollows: Filter = (completion, ctx) => {
  if (!textFollowsCursor(currentLineSuffix(ctx))) return completion;
  const nl = completion.indexOf('\n');
  return nl < 0 ? completion : completion.slice(0, nl);
};
