// Random-weight GGUF files of the published Qwen2.5-Coder shapes in a block format, for the
// CPU speed comparison with llama.cpp (test/bench/quant-peer.mts): both engines read the same
// bytes, so what the blocks hold does not matter, only that each block's f16 scales keep the
// weights finite and small (~0.02), as a trained model's are. The tokenizer is the embedded
// model's, its ids padded to the shape's vocabulary (what tokenizerMetadata does).
import { randomFillSync } from 'node:crypto';
import { f32ToF16, qwen2Metadata, tokenizerMetadata, writeGgufFile, type GgmlType, type GgufTensorPlan, type Qwen2Config } from './gguf';

export const RANDOM_GGUF_SHAPES: Record<string, Qwen2Config> = {
  'qwen2.5-coder-0.5b': { hidden_size: 896, intermediate_size: 4864, num_hidden_layers: 24, num_attention_heads: 14, num_key_value_heads: 2, vocab_size: 151936, max_position_embeddings: 32768, rope_theta: 1e6, rms_norm_eps: 1e-6 },
  'qwen2.5-coder-1.5b': { hidden_size: 1536, intermediate_size: 8960, num_hidden_layers: 28, num_attention_heads: 12, num_key_value_heads: 2, vocab_size: 151936, max_position_embeddings: 32768, rope_theta: 1e6, rms_norm_eps: 1e-6 },
};

/** 'q8_0': every matrix Q8_0. 'q4_k_m': llama.cpp's Q4_K_M choice (Q6_K for the tied embedding/head and for attn_v and ffn_down of some layers, Q4_K elsewhere). */
export type RandomQuant = 'q8_0' | 'q4_k_m';

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third between.
export const moreBits = (i: number, n: number) => i < n / 8 || i >= (7 * n) / 8 || (i - Math.floor(n / 8)) % 3 === 2;

/** Random blocks of `type` for `n` weights, each block's scale fields set so the weights are ~0.02. */
function randomBlocks(type: GgmlType, n: number): Buffer {
  const layout = { Q8_0: { elems: 32, bytes: 34, scales: [[0, 2.7e-4]] }, Q4_K: { elems: 256, bytes: 144, scales: [[0, 1e-4], [2, 1e-4]] }, Q6_K: { elems: 256, bytes: 210, scales: [[208, 1.7e-5]] } }[type as 'Q8_0' | 'Q4_K' | 'Q6_K'];
  const out = randomFillSync(Buffer.alloc((n / layout.elems) * layout.bytes));
  const fields = layout.scales.map(([at, v]) => [at, f32ToF16(v)]);
  for (let b = 0; b < out.length; b += layout.bytes) for (const [at, h] of fields) out.writeUInt16LE(h, b + at);
  return out;
}

/** Writes a random `shape` model in `quant` to `out`; `tokenizerFolder`: a byte-level BPE HF folder. */
export function writeRandomGguf(out: string, shape: string, quant: RandomQuant, tokenizerFolder: string): { path: string; bytes: number } {
  const c = RANDOM_GGUF_SHAPES[shape];
  if (!c) throw new Error(`unknown shape '${shape}'; expected one of ${Object.keys(RANDOM_GGUF_SHAPES).join(', ')}`);
  const H = c.hidden_size, I = c.intermediate_size, L = c.num_hidden_layers, hd = H / c.num_attention_heads, kv = c.num_key_value_heads! * hd;
  if (quant === 'q4_k_m' && (H % 256 || I % 256)) {
    throw new Error(`${shape}: rows of ${H} and ${I} weights are not all whole Q4_K/Q6_K blocks of 256 (llama.cpp falls back to Q5_0 for those, which this writer does not write); use a shape whose widths are multiples of 256`);
  }
  const low: GgmlType = quant === 'q8_0' ? 'Q8_0' : 'Q4_K';
  const high: GgmlType = quant === 'q8_0' ? 'Q8_0' : 'Q6_K';
  const matrix = (name: string, rows: number, cols: number, type: GgmlType): GgufTensorPlan => ({ name, shape: [rows, cols], type, data: () => randomBlocks(type, rows * cols) });
  const vector = (name: string, n: number, value: number): GgufTensorPlan => ({ name, shape: [n], type: 'F32', data: () => Buffer.from(new Float32Array(n).fill(value).buffer) });
  const plan: GgufTensorPlan[] = [matrix('token_embd.weight', c.vocab_size, H, high), vector('output_norm.weight', H, 1)];
  for (let i = 0; i < L; i++) {
    const p = `blk.${i}.`;
    plan.push(
      vector(`${p}attn_norm.weight`, H, 1), vector(`${p}ffn_norm.weight`, H, 1),
      matrix(`${p}attn_q.weight`, H, H, low), vector(`${p}attn_q.bias`, H, 0),
      matrix(`${p}attn_k.weight`, kv, H, low), vector(`${p}attn_k.bias`, kv, 0),
      matrix(`${p}attn_v.weight`, kv, H, moreBits(i, L) ? high : low), vector(`${p}attn_v.bias`, kv, 0),
      matrix(`${p}attn_output.weight`, H, H, low),
      matrix(`${p}ffn_gate.weight`, I, H, low), matrix(`${p}ffn_up.weight`, I, H, low),
      matrix(`${p}ffn_down.weight`, H, I, moreBits(i, L) ? high : low),
    );
  }
  const meta = { ...qwen2Metadata({ ...c, architectures: ['Qwen2ForCausalLM'] }, `random ${shape} ${quant}`), ...tokenizerMetadata(tokenizerFolder, c.vocab_size) };
  const written = writeGgufFile(out, meta, plan);
  return { path: written.path, bytes: written.bytes };
}
