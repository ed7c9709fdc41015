// The tokenizer of a GGUF file, from its tokenizer.ggml.* metadata (read with
// @huggingface/gguf): the equivalent Hugging Face tokenizer.json is built and run by
// @huggingface/tokenizers through TextTokenizer, so a GGUF model tokenizes exactly as
// the HF folder it was converted from. Supported: tokenizer.ggml.model "gpt2"
// (byte-level BPE) with the pre-tokenizers that tokenizer.ggml.pre names below.
import { gguf } from '@huggingface/gguf';
import type { SpecialTokens } from './modelInfo';
import { TextTokenizer } from './tokenizer';

/** Metadata as @huggingface/gguf returns it (values only). */
export type GgufMetadata = Record<string, unknown>;

interface PreTokenizer {
  /** The split regex of the HF tokenizer.json (llama.cpp's llama-vocab.cpp uses the same). */
  regex: string;
  normalizer: object | null;
  /** Llama 3's BPE takes a word whole when the vocabulary has it, before any merge. */
  ignoreMerges: boolean;
}

const QWEN2_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const LLAMA3_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const LLAMA3: PreTokenizer = { regex: LLAMA3_REGEX, normalizer: null, ignoreMerges: true };

/** tokenizer.ggml.pre → the pre-tokenization of the HF tokenizer it came from. */
export const PRE_TOKENIZERS: Record<string, PreTokenizer> = {
  qwen2: { regex: QWEN2_REGEX, normalizer: { type: 'NFC' }, ignoreMerges: false },
  'llama-bpe': LLAMA3,
  llama3: LLAMA3,
  'llama-v3': LLAMA3,
};

/** llama.cpp's token types (tokenizer.ggml.token_type). */
const TOKEN_TYPE = { normal: 1, unknown: 2, control: 3, userDefined: 4, unused: 5, byte: 6 } as const;

/** FIM and repo-level tokens: the file's keys first, then the token's text. */
const SPECIAL_KEYS: [keyof SpecialTokens, string[], string][] = [
  ['fimPrefix', ['fim_pre_token_id', 'prefix_token_id'], '<|fim_prefix|>'],
  ['fimSuffix', ['fim_suf_token_id', 'suffix_token_id'], '<|fim_suffix|>'],
  ['fimMiddle', ['fim_mid_token_id', 'middle_token_id'], '<|fim_middle|>'],
  ['fimPad', ['fim_pad_token_id'], '<|fim_pad|>'],
  ['repoName', ['fim_rep_token_id'], '<|repo_name|>'],
  ['fileSep', ['fim_sep_token_id'], '<|file_sep|>'],
  ['endOfText', ['eos_token_id'], '<|endoftext|>'],
];

export interface GgufTokenizer {
  tokenizer: TextTokenizer;
  /** tokenizer.ggml.pre */
  pre: string;
  /** FIM/repo tokens found by key or text (a model without FIM tokens has none). */
  special: Partial<SpecialTokens>;
  bos?: number;
  eos?: number;
  /** {arch}.context_length */
  contextLength?: number;
  /** tokenizer.chat_template (an instruct model's), with its BOS/EOS texts for the template's variables */
  chatTemplate?: { source: string; bos: string; eos: string };
}

function fail(file: string, key: string, problem: string, expected: string): never {
  throw new Error(`${file}: metadata '${key}' ${problem} (expected ${expected})`);
}

function stringArray(meta: GgufMetadata, file: string, key: string): string[] {
  const v = meta[key];
  if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) fail(file, key, v === undefined ? 'is missing' : 'is not an array of strings', 'an array of strings');
  return v as string[];
}

function tokenId(meta: GgufMetadata, file: string, key: string, count: number): number | undefined {
  const v = meta[key];
  if (v === undefined) return undefined;
  const n = typeof v === 'bigint' ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n >= count) fail(file, key, `is ${String(v)}`, `a token id below ${count}`);
  return n;
}

/**
 * The tokenizer.json and tokenizer_config.json objects equivalent to the file's
 * tokenizer.ggml.* metadata. Throws naming the file and the key on anything unsupported.
 */
export function ggufTokenizerJson(meta: GgufMetadata, file: string): { tokenizerJson: object; tokenizerConfig: object; pre: string } {
  const model = meta['tokenizer.ggml.model'];
  if (model !== 'gpt2') fail(file, 'tokenizer.ggml.model', model === undefined ? 'is missing' : `is ${JSON.stringify(model)}`, '"gpt2" (byte-level BPE)');
  const pre = meta['tokenizer.ggml.pre'];
  if (typeof pre !== 'string' || !(pre in PRE_TOKENIZERS)) {
    fail(file, 'tokenizer.ggml.pre', pre === undefined ? 'is missing' : `is ${JSON.stringify(pre)}, which is not supported`, `one of ${Object.keys(PRE_TOKENIZERS).join(', ')}`);
  }
  const style = PRE_TOKENIZERS[pre];
  const tokens = stringArray(meta, file, 'tokenizer.ggml.tokens');
  const merges = stringArray(meta, file, 'tokenizer.ggml.merges');
  const types = meta['tokenizer.ggml.token_type'];
  if (types !== undefined && (!Array.isArray(types) || types.length !== tokens.length)) {
    fail(file, 'tokenizer.ggml.token_type', 'does not have one entry per token', `${tokens.length} token types`);
  }
  // No prototype: tokens such as "toString" or "__proto__" are ordinary keys.
  const vocab: Record<string, number> = Object.create(null);
  const added: object[] = [];
  tokens.forEach((content, id) => {
    const type = Number((types as unknown[] | undefined)?.[id] ?? TOKEN_TYPE.normal);
    if (type === TOKEN_TYPE.unused) return;
    if (!Object.hasOwn(vocab, content)) vocab[content] = id;
    // Control and user-defined tokens are matched whole before BPE, as HF's added tokens are.
    if (type === TOKEN_TYPE.control || type === TOKEN_TYPE.userDefined) {
      added.push({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: type === TOKEN_TYPE.control });
    }
  });
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: style.normalizer,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: style.regex }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
      ],
    },
    post_processor: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: style.ignoreMerges,
      vocab,
      merges: merges.map((m) => {
        const at = m.indexOf(' ');
        return [m.slice(0, at), m.slice(at + 1)];
      }),
    },
  };
  const name = (key: string) => {
    const id = tokenId(meta, file, key, tokens.length);
    return id === undefined ? undefined : tokens[id];
  };
  const tokenizerConfig = {
    clean_up_tokenization_spaces: false,
    bos_token: name('tokenizer.ggml.bos_token_id') ?? null,
    eos_token: name('tokenizer.ggml.eos_token_id') ?? null,
    pad_token: name('tokenizer.ggml.padding_token_id') ?? null,
  };
  return { tokenizerJson, tokenizerConfig, pre };
}

/** FIM and repo-level token ids: the file's tokenizer.ggml.*_token_id keys, else by text. */
export function ggufSpecialTokens(meta: GgufMetadata, file: string, tokenizer: Pick<TextTokenizer, 'tokenId'>): Partial<SpecialTokens> {
  const count = (meta['tokenizer.ggml.tokens'] as unknown[] | undefined)?.length ?? 0;
  const special: Partial<SpecialTokens> = {};
  for (const [field, keys, text] of SPECIAL_KEYS) {
    const fromKey = keys.map((k) => tokenId(meta, file, `tokenizer.ggml.${k}`, count)).find((id) => id !== undefined);
    const id = fromKey ?? tokenizer.tokenId(text);
    if (id !== undefined) special[field] = id;
  }
  return special;
}

/** Reads a GGUF file's metadata (not its tensors) and builds its tokenizer. */
export async function loadGgufTokenizer(path: string): Promise<GgufTokenizer> {
  let meta: GgufMetadata;
  try {
    meta = (await gguf(path, { allowLocalFile: true })).metadata as unknown as GgufMetadata;
  } catch (err) {
    throw new Error(`${path}: not a readable GGUF file (${(err as Error).message}); expected a llama.cpp GGUF model`);
  }
  const { tokenizerJson, tokenizerConfig, pre } = ggufTokenizerJson(meta, path);
  let tokenizer: TextTokenizer;
  try {
    tokenizer = new TextTokenizer(tokenizerJson, tokenizerConfig);
  } catch (err) {
    throw new Error(`${path}: @huggingface/tokenizers cannot use the tokenizer.ggml.* metadata (${(err as Error).message}); expected a byte-level BPE tokenizer`);
  }
  const tokens = meta['tokenizer.ggml.tokens'] as string[];
  const count = tokens.length;
  const arch = meta['general.architecture'];
  const context = typeof arch === 'string' ? meta[`${arch}.context_length`] : undefined;
  const bos = tokenId(meta, path, 'tokenizer.ggml.bos_token_id', count);
  const eos = tokenId(meta, path, 'tokenizer.ggml.eos_token_id', count);
  const template = meta['tokenizer.chat_template'];
  return {
    tokenizer,
    pre,
    special: ggufSpecialTokens(meta, path, tokenizer),
    bos,
    eos,
    contextLength: typeof context === 'number' || typeof context === 'bigint' ? Number(context) : undefined,
    chatTemplate: typeof template === 'string' && template !== ''
      ? { source: template, bos: bos === undefined ? '' : tokens[bos], eos: eos === undefined ? '' : tokens[eos] }
      : undefined,
  };
}
