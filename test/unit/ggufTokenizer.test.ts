import { strict as assert } from 'node:assert';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, sep } from 'node:path';
import { writeGguf } from '../../server/src/bench/gguf';
import { ggufSpecialTokens, ggufTokenizerJson, loadGgufTokenizer, type GgufTokenizer } from '../../server/src/model/ggufTokenizer';
import { TextTokenizer } from '../../server/src/model/tokenizer';
import { repoRoot } from './helpers';

const embedded = join(repoRoot, 'engine', 'models', 'runahead-coder');

// Never read (shared/RESERVED.md): kept out of everything the project evaluates on.
const RESERVED = new Set(['express', 'zod', 'date-fns', 'koa', 'fastify', 'rxjs']);

/** Source files of node_modules, in a fixed order, none from a reserved package at any depth. */
function sourceFiles(limit: number): string[] {
  const root = join(repoRoot, 'node_modules');
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir).sort()) {
      if (out.length >= limit) return;
      if (RESERVED.has(name) || name.startsWith('.')) continue;
      const path = join(dir, name);
      const st = statSync(path, { throwIfNoEntry: false });
      if (!st) continue;
      if (st.isDirectory()) walk(path);
      else if (/\.(ts|js|mjs|cjs|py|json|md)$/.test(name) && st.size > 2000 && st.size < 400_000) out.push(path);
    }
  };
  walk(root);
  for (const f of out) assert.ok(!relative(root, f).split(sep).some((part) => RESERVED.has(part)));
  return out;
}

/** Snippets of 200-3000 characters cut at line starts, a few per file. */
function snippets(files: string[], perFile: number): string[] {
  const out: string[] = [];
  for (const file of files) {
    const lines = readFileSync(file, 'utf8').split('\n');
    const step = Math.max(1, Math.floor(lines.length / perFile));
    for (let at = 0; at < lines.length && out.length < files.length * perFile; at += step) {
      const text = lines.slice(at, at + 10 + (at % 50)).join('\n');
      if (text.trim().length > 40) out.push(text.slice(0, 3000));
    }
  }
  return out;
}

describe('GGUF tokenizer (tokenizer.ggml.* → tokenizer.json)', function () {
  this.timeout(60_000);
  let dir: string;
  let fromFile: GgufTokenizer;
  let hf: TextTokenizer;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'runahead-gguf-'));
    // The benchmark's exporter writes what llama.cpp's converter would: tokens, types, merges, pre, FIM keys.
    writeGguf(embedded, join(dir, 'model.gguf'));
    fromFile = await loadGgufTokenizer(join(dir, 'model.gguf'));
    hf = await TextTokenizer.load(embedded);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('gives the same ids as the Hugging Face tokenizer on 200+ snippets of real code', () => {
    const corpus = snippets(sourceFiles(120), 3);
    corpus.push('def grüße(n):\n    return "日本語 ✓ 🚀" * n\n', 'x = 12345678 + 0.5e-10  # números\r\n\tfoo\'s bar\'ll', '<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>');
    assert.ok(corpus.length >= 200, `only ${corpus.length} snippets`);
    let tokens = 0;
    for (const text of corpus) {
      const want = hf.encode(text);
      assert.deepEqual(fromFile.tokenizer.encode(text), want, `differs on: ${JSON.stringify(text.slice(0, 200))}`);
      assert.equal(fromFile.tokenizer.decode(want), hf.decode(want));
      tokens += want.length;
    }
    assert.ok(tokens > 20_000, `only ${tokens} tokens compared`);
  });

  it('finds the FIM and repo tokens by the file keys, BOS/EOS and the context length', () => {
    assert.equal(fromFile.pre, 'qwen2');
    for (const [field, text] of [['fimPrefix', '<|fim_prefix|>'], ['fimSuffix', '<|fim_suffix|>'], ['fimMiddle', '<|fim_middle|>'], ['fimPad', '<|fim_pad|>'], ['repoName', '<|repo_name|>'], ['fileSep', '<|file_sep|>'], ['endOfText', '<|endoftext|>']] as const) {
      assert.equal(fromFile.special[field], hf.tokenId(text), field);
    }
    assert.equal(fromFile.eos, hf.tokenId('<|endoftext|>'));
    assert.equal(fromFile.contextLength, JSON.parse(readFileSync(join(embedded, 'config.json'), 'utf8')).max_position_embeddings);
  });

  it('finds FIM tokens by their text when the file has no FIM keys', () => {
    const meta = { 'tokenizer.ggml.tokens': ['a', '<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>'] };
    const byText = { tokenId: (t: string) => meta['tokenizer.ggml.tokens'].indexOf(t) >= 0 ? meta['tokenizer.ggml.tokens'].indexOf(t) : undefined };
    assert.deepEqual(ggufSpecialTokens(meta, 'x.gguf', byText), { fimPrefix: 1, fimSuffix: 2, fimMiddle: 3 });
    assert.deepEqual(ggufSpecialTokens({ ...meta, 'tokenizer.ggml.fim_pre_token_id': 0 }, 'x.gguf', byText).fimPrefix, 0);
  });

  it('refuses what it cannot build, naming the file and the key', () => {
    const base = { 'tokenizer.ggml.model': 'gpt2', 'tokenizer.ggml.pre': 'qwen2', 'tokenizer.ggml.tokens': ['a', 'b', 'ab'], 'tokenizer.ggml.merges': ['a b'] };
    assert.doesNotThrow(() => ggufTokenizerJson(base, 'm.gguf'));
    assert.throws(() => ggufTokenizerJson({ ...base, 'tokenizer.ggml.model': 'llama' }, 'm.gguf'), /m\.gguf: metadata 'tokenizer\.ggml\.model' is "llama".*gpt2/);
    assert.throws(() => ggufTokenizerJson({ ...base, 'tokenizer.ggml.pre': 'falcon' }, 'm.gguf'), /'tokenizer\.ggml\.pre' is "falcon", which is not supported \(expected one of qwen2, llama-bpe/);
    assert.throws(() => ggufTokenizerJson({ ...base, 'tokenizer.ggml.merges': undefined }, 'm.gguf'), /'tokenizer\.ggml\.merges' is missing/);
    assert.throws(() => ggufTokenizerJson({ ...base, 'tokenizer.ggml.token_type': [1] }, 'm.gguf'), /'tokenizer\.ggml\.token_type' does not have one entry per token/);
    assert.throws(() => ggufTokenizerJson({ ...base, 'tokenizer.ggml.eos_token_id': 9 }, 'm.gguf'), /'tokenizer\.ggml\.eos_token_id' is 9 \(expected a token id below 3\)/);
  });

  it('reads Llama 3 files (llama-bpe): digits split in threes, whole words before merges', () => {
    const tokens = ['1', '2', '3', '4', '12', '123', 'Ġ', 'a', 'b', 'c', 'abc'];
    const meta = { 'tokenizer.ggml.model': 'gpt2', 'tokenizer.ggml.pre': 'llama-bpe', 'tokenizer.ggml.tokens': tokens, 'tokenizer.ggml.merges': ['1 2', '12 3'] };
    const { tokenizerJson, tokenizerConfig } = ggufTokenizerJson(meta, 'l.gguf');
    const tok = new TextTokenizer(tokenizerJson, tokenizerConfig);
    assert.deepEqual(tok.encode('1234'), [5, 3]);  // "123" + "4": \p{N}{1,3}
    assert.deepEqual(tok.encode('abc'), [10]);     // in the vocabulary whole, with no merge for it
    const qwen = ggufTokenizerJson({ ...meta, 'tokenizer.ggml.pre': 'qwen2' }, 'q.gguf');
    assert.deepEqual(new TextTokenizer(qwen.tokenizerJson, qwen.tokenizerConfig).encode('1234'), [0, 1, 2, 3]);
  });

  it('names the file when it is not GGUF', async () => {
    await assert.rejects(loadGgufTokenizer(join(embedded, 'config.json')), /config\.json: not a readable GGUF file/);
  });
});
