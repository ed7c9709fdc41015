// Byte-level BPE tokenizers attach a space to the word after it (" x", " return"),
// so a prompt that ends in spaces ends in a token the model has rarely seen there
// and it answers badly ("return " → "="). The prompt therefore stops before the
// trailing spaces and tabs of the prefix; the model writes them itself, and only a
// completion that starts with exactly them is shown, without them.

export interface Healed {
  /** The prefix the prompt is built from. */
  prefix: string;
  /** The whitespace the completion must start with. */
  pending: string;
}

export function healTrailingWhitespace(prefix: string): Healed {
  // A loop, not /[ \t]*$/: that regex retries from every space of a long line.
  let start = prefix.length;
  while (start > 0 && (prefix[start - 1] === ' ' || prefix[start - 1] === '\t')) start--;
  return { prefix: prefix.slice(0, start), pending: prefix.slice(start) };
}

/**
 * The completion the user sees, given the model's text so far: `undefined` while the
 * text is too short to tell, `null` when it does not start with the pending whitespace.
 */
export function afterPending(text: string, pending: string): string | null | undefined {
  if (text.length < pending.length) return pending.startsWith(text) ? undefined : null;
  return text.startsWith(pending) ? text.slice(pending.length) : null;
}
