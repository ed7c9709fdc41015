// Cut the completion at the first character no source file wants: U+FFFD (a
// byte sequence that is not UTF-8) or a control character other than tab,
// newline and carriage return. Models emit these when they are lost.
import type { Filter } from './context';

const invalid = /[\uFFFD\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F]/;

export const stopAtInvalidText: Filter = (completion) => {
  const at = completion.search(invalid);
  return at < 0 ? completion : completion.slice(0, at);
};
