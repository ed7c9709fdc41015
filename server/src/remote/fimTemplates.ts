// The FIM prompt as text for a remote server, which tokenizes it itself: each
// model family's sentinel strings and the strings that end its completion.
// Without a tokenizer the window is counted in characters (≈ 4 per token).
export type FimTemplateName = 'auto' | 'qwen' | 'codellama' | 'deepseek' | 'starcoder' | 'custom';
export const fimTemplateNames: FimTemplateName[] = ['auto', 'qwen', 'codellama', 'deepseek', 'starcoder', 'custom'];

export interface FimTemplate {
  name: Exclude<FimTemplateName, 'auto'>;
  /** The prompt, with `{prefix}` and `{suffix}` where the code before and after the cursor go. */
  pattern: string;
  /** Strings the server should stop at (and that are cut from the text should it not). */
  stop: string[];
}

export const fimTemplates: Record<Exclude<FimTemplateName, 'auto' | 'custom'>, FimTemplate> = {
  qwen: {
    name: 'qwen',
    pattern: '<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>',
    stop: ['<|endoftext|>', '<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>', '<|fim_pad|>', '<|file_sep|>', '<|repo_name|>', '<|im_start|>', '<|im_end|>'],
  },
  codellama: {
    name: 'codellama',
    pattern: '<PRE> {prefix} <SUF>{suffix} <MID>',
    stop: ['<EOT>', '<PRE>', '<SUF>', '<MID>', '</s>'],
  },
  deepseek: {
    name: 'deepseek',
    pattern: '<｜fim▁begin｜>{prefix}<｜fim▁hole｜>{suffix}<｜fim▁end｜>',
    stop: ['<｜fim▁begin｜>', '<｜fim▁hole｜>', '<｜fim▁end｜>', '<｜end▁of▁sentence｜>', '<|EOT|>'],
  },
  starcoder: {
    name: 'starcoder',
    pattern: '<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>',
    stop: ['<|endoftext|>', '<fim_prefix>', '<fim_suffix>', '<fim_middle>', '<file_sep>'],
  },
};

/** The template for a model name: by family, Qwen's (the Qwen2.5-Coder family, CodeGemma) when the name says no other. */
export function templateForModel(model: string): FimTemplate {
  const m = model.toLowerCase();
  if (/code-?llama/.test(m)) return fimTemplates.codellama;
  if (m.includes('deepseek')) return fimTemplates.deepseek;
  if (/starcoder|santacoder/.test(m)) return fimTemplates.starcoder;
  return fimTemplates.qwen;
}

/**
 * The template a setting names. `custom` takes `pattern` (runahead.remote.fimCustom), which
 * must hold `{prefix}` and `{suffix}`; an error says what is wrong with it.
 */
export function resolveTemplate(name: FimTemplateName, model: string, pattern: string, extraStop: string[]): FimTemplate {
  let t: FimTemplate;
  if (name === 'custom') {
    if (!pattern.includes('{prefix}') || !pattern.includes('{suffix}')) {
      throw new Error(`runahead.remote.fimCustom is ${JSON.stringify(pattern)}: expected a prompt with {prefix} and {suffix} in it, e.g. "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"`);
    }
    t = { name: 'custom', pattern, stop: [] };
  } else {
    t = name === 'auto' ? templateForModel(model) : fimTemplates[name];
  }
  return extraStop.length === 0 ? t : { ...t, stop: [...new Set([...t.stop, ...extraStop])] };
}

/** Characters per token assumed when windowing text for a tokenizer we do not have. */
export const CHARS_PER_TOKEN = 4;
const PREFIX_SHARE = 3 / 4;

export interface TextWindow {
  prefix: string;
  suffix: string;
}

/** The end of `prefix` and the start of `suffix` that fit `budgetTokens` (≈ × 4 characters, 3/4 of them before the cursor), cut at line boundaries where a line end is near. */
export function windowByChars(prefix: string, suffix: string, budgetTokens: number): TextWindow {
  const total = Math.max(0, budgetTokens) * CHARS_PER_TOKEN;
  // What one side does not use, the other may.
  let prefixChars = Math.floor(total * PREFIX_SHARE);
  let suffixChars = total - prefixChars;
  if (suffix.length < suffixChars) prefixChars += suffixChars - suffix.length;
  else if (prefix.length < prefixChars) suffixChars += prefixChars - prefix.length;
  return { prefix: tailLines(prefix, prefixChars), suffix: headLines(suffix, suffixChars) };
}

function tailLines(text: string, chars: number): string {
  if (text.length <= chars) return text;
  const from = text.length - chars;
  const nl = text.indexOf('\n', from);
  // A cut mid-line only when the kept part holds no line end (one very long line).
  return nl >= 0 && nl + 1 < text.length ? text.slice(nl + 1) : text.slice(from);
}

function headLines(text: string, chars: number): string {
  if (text.length <= chars) return text;
  const nl = text.lastIndexOf('\n', chars - 1);
  return nl >= 0 ? text.slice(0, nl + 1) : text.slice(0, chars);
}

/** The prompt text for `window` in `template`. */
export function fimPrompt(template: FimTemplate, window: TextWindow): string {
  // One pass, so that a `{suffix}` inside the code before the cursor stays code.
  return template.pattern.replace(/\{(prefix|suffix)\}/g, (_, which: 'prefix' | 'suffix') => window[which]);
}

/** `text` up to the first stop string in it, and whether one was found. */
export function cutAtStop(text: string, stop: string[]): { text: string; stopped: boolean } {
  let at = -1;
  for (const s of stop) {
    const i = s ? text.indexOf(s) : -1;
    if (i >= 0 && (at < 0 || i < at)) at = i;
  }
  return at < 0 ? { text, stopped: false } : { text: text.slice(0, at), stopped: true };
}
