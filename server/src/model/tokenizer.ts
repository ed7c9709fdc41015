// Text ↔ token ids with @huggingface/tokenizers, from the model folder's
// tokenizer.json and tokenizer_config.json, and a streaming decoder that
// never emits half a UTF-8 character.
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { readModelJson } from './modelFiles';

const WORD_CACHE = 2048;

export class TextTokenizer {
  private readonly tok: Tokenizer;
  private readonly vocab: Map<string, number>;

  constructor(tokenizerJson: object, tokenizerConfig: object) {
    this.tok = new Tokenizer(tokenizerJson, tokenizerConfig);
    this.vocab = this.tok.get_vocab(true);
    // BPE keeps an LRU of tokenized words (10,000 by default); every keystroke makes a
    // new partial word, so a smaller bound keeps a long-running server's heap flat.
    const cache = (this.tok.model as { cache?: { capacity?: number } } | null)?.cache;
    if (cache && typeof cache.capacity === 'number') cache.capacity = WORD_CACHE;
  }

  /** The model folder's tokenizer.json (and tokenizer_config.json when there is one). */
  static async load(dir: string): Promise<TextTokenizer> {
    const path = join(dir, 'tokenizer.json');
    const json = await readModelJson(path, true);
    const vocab = json.model?.vocab;
    if (!vocab || typeof vocab !== 'object') {
      throw new Error(`${path}: no model.vocab; expected a Hugging Face tokenizer.json whose "model" has a "vocab" (token → id)`);
    }
    const config = await readModelJson(join(dir, 'tokenizer_config.json'));
    try {
      return new TextTokenizer(json, config);
    } catch (err) {
      throw new Error(`${path}: @huggingface/tokenizers cannot use it (${(err as Error).message}); expected a BPE tokenizer such as Qwen2.5-Coder's`);
    }
  }

  /** The largest token id the vocabulary (added tokens included) uses. */
  maxId(): number {
    let max = -1;
    for (const id of this.vocab.values()) if (id > max) max = id;
    return max;
  }

  /** Plain text to ids; no BOS/EOS are added. */
  encode(text: string): number[] {
    if (text.length === 0) return [];
    return this.tok.encode(text, { add_special_tokens: false }).ids;
  }

  decode(ids: number[]): string {
    if (ids.length === 0) return '';
    return this.tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }

  /** The id of a special token such as `<|fim_prefix|>`, if the vocabulary has it. */
  tokenId(text: string): number | undefined {
    return this.vocab.get(text);
  }
}

/**
 * Incremental detokenization: decodes a window of recent tokens and emits only
 * the new text, holding it back while it ends in U+FFFD (an incomplete UTF-8
 * sequence split across tokens). The window restarts after each emitted chunk,
 * so the cost per token stays constant.
 */
export class StreamDecoder {
  private ids: number[] = [];
  private prefixOffset = 0;
  private readOffset = 0;

  constructor(private readonly tokenizer: Pick<TextTokenizer, 'decode'>) {}

  /** Adds tokens; returns the text that is now complete (maybe ''). */
  push(tokens: number[]): string {
    this.ids.push(...tokens);
    const before = this.tokenizer.decode(this.ids.slice(this.prefixOffset, this.readOffset));
    const after = this.tokenizer.decode(this.ids.slice(this.prefixOffset));
    if (after.length > before.length && !after.endsWith('\uFFFD')) {
      const text = after.slice(before.length);
      this.prefixOffset = this.readOffset;
      this.readOffset = this.ids.length;
      return text;
    }
    return '';
  }

  /** What is left at the end of the stream (a dangling partial character becomes U+FFFD). */
  flush(): string {
    const before = this.tokenizer.decode(this.ids.slice(this.prefixOffset, this.readOffset));
    const after = this.tokenizer.decode(this.ids.slice(this.prefixOffset));
    this.prefixOffset = this.readOffset = this.ids.length;
    return after.slice(before.length);
  }
}
