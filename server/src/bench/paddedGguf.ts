// A Qwen2 model folder written as llama.cpp's Q4_K_M mix (Q4_K and Q6_K blocks of 256), for
// models whose widths are not whole blocks (the embedded model: hidden 384 -> 768, 6 -> 12 q
// heads, 2 -> 4 key/value heads). The model is first widened without changing what it
// computes: the hidden size grows to a multiple of 256 with zero rows and columns (zero
// embedding columns, zero outputs into the new hidden dimensions), q heads are added in whole
// groups over new, zero key/value heads (each old q head keeps its key/value head; a new
// head's output is zero, and so are the o_proj columns reading it), and the RMSNorms are
// rescaled so a mean over the wider vector is the old mean: weights times sqrt(H / H'),
// epsilon times H / H'. In f32 the widened model's logits equal the original's; quantized, it
// is a trained model in Q4_K/Q6_K that llama.cpp and Runahead can both read (the accuracy test).
import { architectureMetadata, f16ToF32, f32ToF16, qwen2Metadata, readSafetensorsIndex, T, tensorValues, tokenizerMetadata, writeGgufFile, type GgmlType, type GgufTensorPlan, type Qwen2Config, type Value } from './gguf';
import { moreBits } from './randomGguf';

const QK = 256;

/** ggml's Q4_K blocks of `values` (rows of whole blocks): 8 sub-blocks of 32, each x ~ d*sc*q - dmin*m with q in 0..15
 * and 6-bit sc, m; a sub-block's scale and min from its range (not llama.cpp's error-minimising search: the same format). */
export function quantizeQ4_K(values: Float32Array): Buffer {
  const blocks = values.length / QK;
  const out = Buffer.alloc(blocks * 144);
  const scale = new Float32Array(8), min = new Float32Array(8);
  for (let b = 0; b < blocks; b++) {
    const x = values.subarray(b * QK, (b + 1) * QK), o = b * 144;
    for (let j = 0; j < 8; j++) {
      let lo = 0, hi = 0;  // the range includes 0, so m >= 0 as the format wants
      for (let l = 0; l < 32; l++) lo = Math.min(lo, x[32 * j + l]), hi = Math.max(hi, x[32 * j + l]);
      scale[j] = (hi - lo) / 15;
      min[j] = -lo;
    }
    const d = f32ToF16(Math.max(...scale) / 63), dmin = f32ToF16(Math.max(...min) / 63);
    out.writeUInt16LE(d, o);
    out.writeUInt16LE(dmin, o + 2);
    const df = f16ToF32(d), dminf = f16ToF32(dmin);
    const sc = new Uint8Array(8), m = new Uint8Array(8);
    for (let j = 0; j < 8; j++) {
      sc[j] = df > 0 ? Math.min(63, Math.round(scale[j] / df)) : 0;
      m[j] = dminf > 0 ? Math.min(63, Math.round(min[j] / dminf)) : 0;
    }
    // ggml's 12 bytes of scales and mins (get_scale_min_k4 reads them back).
    const s = out.subarray(o + 4, o + 16);
    for (let j = 0; j < 8; j++) {
      if (j < 4) {
        s[j] = sc[j];
        s[j + 4] = m[j];
      } else {
        s[j + 4] = (sc[j] & 0xf) | ((m[j] & 0xf) << 4);
        s[j - 4] |= (sc[j] >> 4) << 6;
        s[j] |= (m[j] >> 4) << 6;
      }
    }
    const q = new Uint8Array(QK);
    for (let j = 0; j < 8; j++) {
      const a = df * sc[j], c = dminf * m[j];
      for (let l = 0; l < 32; l++) q[32 * j + l] = a > 0 ? Math.max(0, Math.min(15, Math.round((x[32 * j + l] + c) / a))) : 0;
    }
    for (let j = 0; j < 4; j++) for (let l = 0; l < 32; l++) out[o + 16 + 32 * j + l] = q[64 * j + l] | (q[64 * j + 32 + l] << 4);
  }
  return out;
}

/** ggml's Q6_K blocks of `values`: 16 sub-blocks of 16, x ~ d*sc*(q - 32) with q in 0..63 and int8 sc. */
export function quantizeQ6_K(values: Float32Array): Buffer {
  const blocks = values.length / QK;
  const out = Buffer.alloc(blocks * 210);
  const scale = new Float32Array(16);
  for (let b = 0; b < blocks; b++) {
    const x = values.subarray(b * QK, (b + 1) * QK), o = b * 210;
    for (let j = 0; j < 16; j++) {
      let amax = 0;
      for (let l = 0; l < 16; l++) amax = Math.max(amax, Math.abs(x[16 * j + l]));
      scale[j] = amax / 31;
    }
    const d = f32ToF16(Math.max(...scale) / 127), df = f16ToF32(d);
    const q = new Uint8Array(QK);
    for (let j = 0; j < 16; j++) {
      const sc = df > 0 ? Math.min(127, Math.round(scale[j] / df)) : 0;
      out.writeInt8(sc, o + 192 + j);
      const a = df * sc;
      for (let l = 0; l < 16; l++) q[16 * j + l] = (a > 0 ? Math.max(-32, Math.min(31, Math.round(x[16 * j + l] / a))) : 0) + 32;
    }
    out.writeUInt16LE(d, o + 208);
    // ggml's layout: per half of 128, low nibbles of values l and l + 64 in ql[l], of l + 32 and
    // l + 96 in ql[l + 32]; the four values' high 2 bits in qh[l].
    for (let h = 0; h < 2; h++) {
      const ql = o + 64 * h, qh = o + 128 + 32 * h, v = 128 * h;
      for (let l = 0; l < 32; l++) {
        const q1 = q[v + l], q2 = q[v + l + 32], q3 = q[v + l + 64], q4 = q[v + l + 96];
        out[ql + l] = (q1 & 0xf) | ((q3 & 0xf) << 4);
        out[ql + l + 32] = (q2 & 0xf) | ((q4 & 0xf) << 4);
        out[qh + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
      }
    }
  }
  return out;
}

/** [rows, cols] values in the top-left corner of a zero [rows2, cols2] matrix. */
function place(v: Float32Array, rows: number, cols: number, rows2: number, cols2: number): Float32Array {
  const out = new Float32Array(rows2 * cols2);
  for (let r = 0; r < rows; r++) out.set(v.subarray(r * cols, (r + 1) * cols), r * cols2);
  return out;
}

const up = (n: number) => Math.ceil(n / QK) * QK;

export interface PaddedShape {
  hidden: number;
  heads: number;
  kvHeads: number;
  intermediate: number;
}

/** The widened shape: hidden a multiple of 256 that is whole groups of q heads (llama.cpp's qwen2 wants q as wide as
 * the hidden state), the new q heads in whole groups over new key/value heads; intermediate up to a multiple of 256. */
export function paddedShape(c: Qwen2Config): PaddedShape {
  const hd = c.hidden_size / c.num_attention_heads, kv = c.num_key_value_heads ?? c.num_attention_heads, group = c.num_attention_heads / kv;
  if (!Number.isInteger(hd) || !Number.isInteger(group)) {
    throw new Error(`hidden_size ${c.hidden_size}, num_attention_heads ${c.num_attention_heads}, num_key_value_heads ${kv}: heads must divide the hidden size and key/value heads the heads`);
  }
  const gcd = (a: number, b: number): number => (b ? gcd(b, a % b) : a);
  const step = (QK * group * hd) / gcd(QK, group * hd);
  const hidden = Math.ceil(c.hidden_size / step) * step;
  return { hidden, heads: hidden / hd, kvHeads: hidden / hd / group, intermediate: up(c.intermediate_size) };
}

/** Writes the Qwen2 model in `folder` widened (paddedShape) and quantized to llama.cpp's Q4_K_M mix, or with
 * `matrices: 'f32'` every matrix F32 (what the widening alone does: the original's logits). */
export function writePaddedGguf(folder: string, out: string, options: { matrices?: 'q4_k_m' | 'f32' } = {}): { path: string; bytes: number; shape: PaddedShape } {
  const { config: c } = architectureMetadata(folder);  // refuses all but Qwen2
  const t = readSafetensorsIndex(folder);
  const p = paddedShape(c);
  const H = c.hidden_size, I = c.intermediate_size, L = c.num_hidden_layers, V = c.vocab_size;
  const hd = H / c.num_attention_heads, q = c.num_attention_heads * hd, kv = (c.num_key_value_heads ?? c.num_attention_heads) * hd;
  const Hp = p.hidden, Ip = p.intermediate, qp = p.heads * hd, kvp = p.kvHeads * hd;
  const norm = Math.sqrt(H / Hp);
  const values = (name: string) => tensorValues(t, name);
  const f32 = options.matrices === 'f32';
  const matrix = (name: string, type: GgmlType, rows: number, cols: number, make: () => Float32Array): GgufTensorPlan => ({
    name, shape: [rows, cols], type: f32 ? 'F32' : type,
    data: () => (f32 ? Buffer.from(make().buffer) : type === 'Q4_K' ? quantizeQ4_K(make()) : quantizeQ6_K(make())),
  });
  const vector = (name: string, n: number, make: () => Float32Array): GgufTensorPlan => ({ name, shape: [n], type: 'F32', data: () => Buffer.from(make().buffer) });
  const scaledNorm = (hf: string) => () => place(values(hf).map((v) => v * norm), 1, H, 1, Hp);
  const tied = !t.has('lm_head.weight');
  const plan: GgufTensorPlan[] = [
    matrix('token_embd.weight', tied ? 'Q6_K' : 'Q4_K', V, Hp, () => place(values('model.embed_tokens.weight'), V, H, V, Hp)),
    vector('output_norm.weight', Hp, scaledNorm('model.norm.weight')),
  ];
  if (!tied) plan.push(matrix('output.weight', 'Q6_K', V, Hp, () => place(values('lm_head.weight'), V, H, V, Hp)));
  for (let i = 0; i < L; i++) {
    const hf = (s: string) => `model.layers.${i}.${s}`, g = `blk.${i}.`;
    const bias = (s: string, n: number, n2: number) => () => (t.has(hf(s)) ? place(values(hf(s)), 1, n, 1, n2) : new Float32Array(n2));
    plan.push(
      vector(`${g}attn_norm.weight`, Hp, scaledNorm(hf('input_layernorm.weight'))),
      vector(`${g}ffn_norm.weight`, Hp, scaledNorm(hf('post_attention_layernorm.weight'))),
      matrix(`${g}attn_q.weight`, 'Q4_K', qp, Hp, () => place(values(hf('self_attn.q_proj.weight')), q, H, qp, Hp)),
      vector(`${g}attn_q.bias`, qp, bias('self_attn.q_proj.bias', q, qp)),
      matrix(`${g}attn_k.weight`, 'Q4_K', kvp, Hp, () => place(values(hf('self_attn.k_proj.weight')), kv, H, kvp, Hp)),
      vector(`${g}attn_k.bias`, kvp, bias('self_attn.k_proj.bias', kv, kvp)),
      matrix(`${g}attn_v.weight`, moreBits(i, L) ? 'Q6_K' : 'Q4_K', kvp, Hp, () => place(values(hf('self_attn.v_proj.weight')), kv, H, kvp, Hp)),
      vector(`${g}attn_v.bias`, kvp, bias('self_attn.v_proj.bias', kv, kvp)),
      matrix(`${g}attn_output.weight`, 'Q4_K', Hp, qp, () => place(values(hf('self_attn.o_proj.weight')), H, q, Hp, qp)),
      matrix(`${g}ffn_gate.weight`, 'Q4_K', Ip, Hp, () => place(values(hf('mlp.gate_proj.weight')), I, H, Ip, Hp)),
      matrix(`${g}ffn_up.weight`, 'Q4_K', Ip, Hp, () => place(values(hf('mlp.up_proj.weight')), I, H, Ip, Hp)),
      matrix(`${g}ffn_down.weight`, moreBits(i, L) ? 'Q6_K' : 'Q4_K', Hp, Ip, () => place(values(hf('mlp.down_proj.weight')), H, I, Hp, Ip)),
    );
  }
  const config: Qwen2Config = { ...c, hidden_size: Hp, intermediate_size: Ip, num_attention_heads: p.heads, num_key_value_heads: p.kvHeads, rms_norm_eps: (c.rms_norm_eps ?? 1e-6) * (H / Hp) };
  const meta: Record<string, Value> = {
    ...qwen2Metadata(config, `${c.architectures?.[0]} widened to ${Hp}`),
    // hidden / heads is no longer the head width
    'qwen2.attention.key_length': { t: T.U32, v: hd },
    'qwen2.attention.value_length': { t: T.U32, v: hd },
    'general.file_type': { t: T.U32, v: f32 ? 0 : 15 },  // llama.cpp's ALL_F32 or MOSTLY_Q4_K_M
    ...tokenizerMetadata(folder, V),
  };
  const written = writeGgufFile(out, meta, plan);
  return { path: written.path, bytes: written.bytes, shape: p };
}
