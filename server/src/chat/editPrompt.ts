// The prompt of `Runahead: Edit Selection with Instruction` and what its reply
// becomes: the file around the selection, the selection itself (so prompt-lookup
// drafting can copy its unchanged parts) and the instruction; the reply without
// code fences, ending in a newline where the selection did.
import type { ChatMessage } from './types';

/** Characters of the file around the selection that go into the prompt. */
const FILE_CONTEXT_CHARS = 12_000;

/** The prompt of an edit: the file, the selection and the instruction. */
export function editMessages(file: string, languageId: string, before: string, selection: string, after: string, instruction: string): ChatMessage[] {
  const head = before.slice(-FILE_CONTEXT_CHARS / 2);
  const tail = after.slice(0, FILE_CONTEXT_CHARS / 2);
  return [
    { role: 'system', content: 'You edit code. Reply with the rewritten selection only: no explanation, no code fences, the same indentation as the original.' },
    {
      role: 'user',
      content: `File ${file} (${languageId}):\n${head}<selection>\n${selection}\n</selection>${tail}\n\nThe selection:\n${selection}\n\nInstruction: ${instruction}\nRewrite the selection.`,
    },
  ];
}

/** A reply without the code fences an instruct model may add anyway. */
function unfence(text: string): string {
  const m = /^\s*```[\w+-]*\n([\s\S]*?)\n?```\s*$/.exec(text);
  return m ? m[1] : text.replace(/^\s*```[\w+-]*\n/, '');
}

/** The reply as the selection's replacement: unfenced, and ending in a newline where the selection did (whole lines selected). */
export function rewriteOf(selection: string, reply: string): string {
  const text = unfence(reply);
  return selection.endsWith('\n') && text && !text.endsWith('\n') ? `${text}\n` : text;
}
