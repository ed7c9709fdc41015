// When a generation may stop before max_tokens: the Completer asks its source
// for no more tokens once the text so far is a whole completion.
import type { FilterContext } from './postprocess';
import { currentLinePrefix, currentLineSuffix } from './postprocess/context';
import { linesInBlock } from './postprocess/limitScopeByIndentation';
import { removeRepeatedLines } from './postprocess/removeRepeatedLines';
import { textFollowsCursor } from './postprocess/singleLineWhenTextFollows';

/** Enough tokens: the one line is done, the block has ended, or the model loops on a line. */
export function completionIsComplete(text: string, ctx: FilterContext): boolean {
  if (textFollowsCursor(currentLineSuffix(ctx))) return text.includes('\n');
  const lines = text.split('\n');
  if (lines.length < 2) return false;
  const complete = text.slice(0, text.lastIndexOf('\n'));
  return linesInBlock(lines, currentLinePrefix(ctx)) < lines.length || removeRepeatedLines(complete, ctx) !== complete;
}
