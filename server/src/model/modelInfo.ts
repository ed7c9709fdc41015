// What the server needs to know about a model folder beyond its weights: its
// FIM special tokens, the tokens that end a completion and the FIM order it
// was trained for.
//
// FIM order: SPM (suffix, then prefix) lets a keystroke only append to the
// prompt, so the engine reuses its whole KV cache; only models trained on it
// may use it. The server reads, first found wins:
//   config.json            "runahead": { "fim_order": "spm" | "psm" }
//   tokenizer_config.json  "runahead_fim_order": "spm" | "psm"
// and uses PSM (the Qwen2.5-Coder default) when neither is present.
//
// Repo-level context (<|repo_name|>, <|file_sep|> and chunks of other files)
// is used when the tokenizer has those tokens, except for a model whose
// config.json has a "runahead" key (trained by this project) without
// "repo_level": true: such a model never saw that format.
import { join } from 'node:path';
import { loadGgufTokenizer } from './ggufTokenizer';
import { isGgufPath, readModelJson } from './modelFiles';
import { TextTokenizer } from './tokenizer';

export type FimOrder = 'psm' | 'spm';

export interface SpecialTokens {
  fimPrefix: number;
  fimSuffix: number;
  fimMiddle: number;
  fimPad?: number;
  repoName?: number;
  fileSep?: number;
  endOfText?: number;
}

export interface ModelInfo {
  /** The model folder, or the .gguf file. */
  dir: string;
  tokenizer: TextTokenizer;
  special: SpecialTokens;
  fimOrder: FimOrder;
  /** Whether prompts carry <|repo_name|>/<|file_sep|> and other files' chunks. */
  repoLevel: boolean;
  /** Tokens that end a completion: EOS ids, and the FIM/file markers (a model that emits one has left the middle). */
  stopTokens: number[];
  contextLength: number;
  /** A .gguf file's tokenizer.chat_template (a folder's is read by chat/template.ts when chat needs it). */
  chatTemplate?: { source: string; bos: string; eos: string };
}

export function readFimOrder(config: Record<string, any>, tokenizerConfig: Record<string, any>): FimOrder {
  const value = config.runahead?.fim_order ?? tokenizerConfig.runahead_fim_order;
  return value === 'spm' ? 'spm' : 'psm';
}

export function readRepoLevel(config: Record<string, any>, special: SpecialTokens): boolean {
  if (special.fileSep === undefined) return false;
  return config.runahead ? config.runahead.repo_level === true : true;
}

/** Reads the folder's config.json, tokenizer files and generation_config.json (files checked by modelFiles.ts), or a .gguf file's metadata. */
export async function loadModelInfo(dir: string): Promise<ModelInfo> {
  if (isGgufPath(dir)) return loadGgufModelInfo(dir);
  const config = await readModelJson(join(dir, 'config.json'), true);
  const tokenizer = await TextTokenizer.load(dir);
  const tokenizerConfig = await readModelJson(join(dir, 'tokenizer_config.json'));
  const generation = await readModelJson(join(dir, 'generation_config.json'));
  const vocabSize = config.vocab_size;
  if (typeof vocabSize === 'number' && tokenizer.maxId() >= vocabSize) {
    throw new Error(`${join(dir, 'tokenizer.json')} has token id ${tokenizer.maxId()}, but ${join(dir, 'config.json')} says vocab_size ${vocabSize}; expected every id below vocab_size (a tokenizer from another model?)`);
  }
  const id = (text: string) => tokenizer.tokenId(text);
  const special = fimTokens(join(dir, 'tokenizer.json'), {
    fimPrefix: id('<|fim_prefix|>'),
    fimSuffix: id('<|fim_suffix|>'),
    fimMiddle: id('<|fim_middle|>'),
    fimPad: id('<|fim_pad|>'),
    repoName: id('<|repo_name|>'),
    fileSep: id('<|file_sep|>'),
    endOfText: id('<|endoftext|>'),
  });
  const eos = [config.eos_token_id, generation.eos_token_id].flat().filter((x) => typeof x === 'number');
  return {
    dir,
    tokenizer,
    special,
    fimOrder: readFimOrder(config, tokenizerConfig),
    repoLevel: readRepoLevel(config, special),
    stopTokens: stopTokens(tokenizer, eos),
    contextLength: Number(config.max_position_embeddings) || 4096,
  };
}

/** A GGUF file: tokenizer, FIM tokens, EOS, context length and chat template from its metadata (FIM order PSM). */
async function loadGgufModelInfo(path: string): Promise<ModelInfo> {
  const g = await loadGgufTokenizer(path);
  const special = fimTokens(path, g.special);
  return {
    dir: path,
    tokenizer: g.tokenizer,
    special,
    fimOrder: 'psm',
    repoLevel: readRepoLevel({}, special),
    stopTokens: stopTokens(g.tokenizer, g.eos === undefined ? [] : [g.eos]),
    contextLength: g.contextLength ?? 4096,
    chatTemplate: g.chatTemplate,
  };
}

/** The FIM tokens, or an error naming `where` when the model has none. */
function fimTokens(where: string, found: Partial<SpecialTokens>): SpecialTokens {
  const { fimPrefix, fimSuffix, fimMiddle } = found;
  if (fimPrefix === undefined || fimSuffix === undefined || fimMiddle === undefined) {
    throw new Error(`${where}: no <|fim_prefix|>/<|fim_suffix|>/<|fim_middle|> tokens; Runahead needs a fill-in-the-middle model such as Qwen2.5-Coder`);
  }
  return { ...found, fimPrefix, fimSuffix, fimMiddle };
}

/** EOS ids, and the FIM/file markers (a model that emits one has left the middle). */
function stopTokens(tokenizer: Pick<TextTokenizer, 'tokenId'>, eos: number[]): number[] {
  const markers = ['<|endoftext|>', '<|fim_pad|>', '<|file_sep|>', '<|repo_name|>', '<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>', '<|im_end|>'].map((t) => tokenizer.tokenId(t));
  return [...new Set([...eos, ...markers].filter((x): x is number => x !== undefined))];
}
