// Writes a Hugging Face Qwen2 model folder as a GGUF file (version 3) that
// llama.cpp loads: the architecture's metadata, the gpt2 BPE tokenizer
// (tokenizer.ggml.*: tokens, token types, merges, bos/eos/pad, FIM tokens), and
// every tensor under llama.cpp's name: matrices in their own dtype (BF16, F16,
// F32, or Q8_0 for the folder's I8 + weight_scale pairs) or all quantized to
// Q8_0 as llama.cpp's quantizer does, norms and biases as F32 as llama.cpp's
// converter does. The peer of the benchmark (llama.cpp through node-llama-cpp)
// runs the same weights.
import { closeSync, existsSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import { basename, join } from 'node:path';

/** ggml's tensor types for the dtypes a folder holds (I8: the int8 half of a Q8_0 pair, MODEL_FORMAT.md). */
const ggmlType = { F32: 0, F16: 1, BF16: 30, Q8_0: 8, Q4_K: 12, Q6_K: 14 } as const;
export type GgmlType = keyof typeof ggmlType;
type Dtype = GgmlType | 'I8';
const Q8_BLOCK = 32;
const Q8_BLOCK_BYTES = 34;

/** GGUF metadata value types. */
export const T = { U32: 4, I32: 5, F32: 6, BOOL: 7, STRING: 8, ARRAY: 9 } as const;
export type Value = { t: typeof T.U32 | typeof T.I32 | typeof T.F32; v: number } | { t: typeof T.BOOL; v: boolean } | { t: typeof T.STRING; v: string }
  | { t: typeof T.ARRAY; of: typeof T.STRING; v: string[] } | { t: typeof T.ARRAY; of: typeof T.I32; v: number[] };

const ALIGN = 32;

export interface SafeTensor {
  file: string;
  dtype: Dtype;
  shape: number[];
  /** Byte range in the file. */
  start: number;
  end: number;
}

/** The tensors of model.safetensors, or of the shards model.safetensors.index.json names. */
export function readSafetensorsIndex(folder: string): Map<string, SafeTensor> {
  const index = join(folder, 'model.safetensors.index.json');
  const files = existsSync(index)
    ? [...new Set(Object.values((JSON.parse(readFileSync(index, 'utf8')) as { weight_map: Record<string, string> }).weight_map))]
    : ['model.safetensors'];
  const out = new Map<string, SafeTensor>();
  for (const name of files) {
    const file = join(folder, name);
    const fd = openSync(file, 'r');
    try {
      const len = Buffer.alloc(8);
      readSync(fd, len, 0, 8, 0);
      const n = Number(len.readBigUInt64LE());
      const head = Buffer.alloc(n);
      readSync(fd, head, 0, n, 8);
      const header = JSON.parse(head.toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
      for (const [key, t] of Object.entries(header)) {
        if (key === '__metadata__') continue;
        if (!['F32', 'F16', 'BF16', 'I8'].includes(t.dtype)) throw new Error(`${file}: tensor '${key}' has dtype ${t.dtype}; expected BF16, F16, F32 or I8 (Q8_0 with a weight_scale)`);
        out.set(key, { file, dtype: t.dtype as Dtype, shape: t.shape, start: 8 + n + t.data_offsets[0], end: 8 + n + t.data_offsets[1] });
      }
    } finally {
      closeSync(fd);
    }
  }
  return out;
}

/** llama.cpp's name for a Hugging Face Qwen2/Llama tensor; undefined for one it does not use. */
export function ggufTensorName(hf: string): string | undefined {
  const fixed: Record<string, string> = { 'model.embed_tokens.weight': 'token_embd.weight', 'model.norm.weight': 'output_norm.weight', 'lm_head.weight': 'output.weight' };
  if (fixed[hf]) return fixed[hf];
  const m = /^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/.exec(hf);
  if (!m) return undefined;
  const parts: Record<string, string> = {
    input_layernorm: 'attn_norm', post_attention_layernorm: 'ffn_norm',
    'self_attn.q_proj': 'attn_q', 'self_attn.k_proj': 'attn_k', 'self_attn.v_proj': 'attn_v', 'self_attn.o_proj': 'attn_output',
    'mlp.gate_proj': 'ffn_gate', 'mlp.up_proj': 'ffn_up', 'mlp.down_proj': 'ffn_down',
  };
  return parts[m[2]] ? `blk.${m[1]}.${parts[m[2]]}.${m[3]}` : undefined;
}

interface TokenizerJson {
  model: { type: string; vocab: Record<string, number>; merges: (string | [string, string])[] };
  added_tokens?: { id: number; content: string; special: boolean }[];
}

/** tokenizer.ggml.* for a byte-level BPE tokenizer.json: every id up to the model's vocabulary size has a token. */
export function tokenizerMetadata(folder: string, vocabSize: number): Record<string, Value> {
  const tj = JSON.parse(readFileSync(join(folder, 'tokenizer.json'), 'utf8')) as TokenizerJson;
  if (tj.model.type !== 'BPE') throw new Error(`${join(folder, 'tokenizer.json')}: model.type is ${tj.model.type}; expected BPE`);
  const tokens: string[] = Array.from({ length: vocabSize }, (_, i) => `[PAD${i}]`);
  const types: number[] = Array.from({ length: vocabSize }, () => 5); // unused until named
  for (const [text, id] of Object.entries(tj.model.vocab)) if (id < vocabSize) [tokens[id], types[id]] = [text, 1];
  const ids: Record<string, number> = {};
  for (const a of tj.added_tokens ?? []) {
    if (a.id >= vocabSize) continue;
    tokens[a.id] = a.content;
    types[a.id] = a.special ? 3 : 4;
    ids[a.content] = a.id;
  }
  const config = existsSync(join(folder, 'tokenizer_config.json')) ? (JSON.parse(readFileSync(join(folder, 'tokenizer_config.json'), 'utf8')) as { eos_token?: string; pad_token?: string; bos_token?: string | null; chat_template?: unknown }) : {};
  const eos = ids[config.eos_token ?? '<|endoftext|>'] ?? ids['<|endoftext|>'];
  const meta: Record<string, Value> = {
    'tokenizer.ggml.model': { t: T.STRING, v: 'gpt2' },
    'tokenizer.ggml.pre': { t: T.STRING, v: 'qwen2' },
    'tokenizer.ggml.tokens': { t: T.ARRAY, of: T.STRING, v: tokens },
    'tokenizer.ggml.token_type': { t: T.ARRAY, of: T.I32, v: types },
    'tokenizer.ggml.merges': { t: T.ARRAY, of: T.STRING, v: tj.model.merges.map((m) => (typeof m === 'string' ? m : m.join(' '))) },
    'tokenizer.ggml.add_bos_token': { t: T.BOOL, v: false },
  };
  const special: [string, string | undefined][] = [
    ['eos', config.eos_token ?? '<|endoftext|>'], ['bos', config.bos_token ?? config.eos_token ?? '<|endoftext|>'], ['padding', config.pad_token ?? undefined],
    ['fim_pre', '<|fim_prefix|>'], ['fim_suf', '<|fim_suffix|>'], ['fim_mid', '<|fim_middle|>'], ['fim_pad', '<|fim_pad|>'], ['fim_rep', '<|repo_name|>'], ['fim_sep', '<|file_sep|>'],
  ];
  for (const [key, text] of special) {
    const id = text === undefined ? undefined : ids[text];
    if (id !== undefined) meta[`tokenizer.ggml.${key}_token_id`] = { t: T.U32, v: id };
  }
  if (eos !== undefined) meta['tokenizer.ggml.eos_token_id'] = { t: T.U32, v: eos };
  // An instruct model's template travels in the file, as llama.cpp's converter writes it.
  if (typeof config.chat_template === 'string') meta['tokenizer.chat_template'] = { t: T.STRING, v: config.chat_template };
  return meta;
}

export interface Qwen2Config {
  architectures?: string[];
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads?: number;
  max_position_embeddings?: number;
  rms_norm_eps?: number;
  rope_theta?: number;
  rope_parameters?: { rope_theta?: number };
  vocab_size: number;
}

/** The architecture block of the metadata (qwen2.*). */
export function architectureMetadata(folder: string): { meta: Record<string, Value>; config: Qwen2Config } {
  const config = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as Qwen2Config;
  const arch = config.architectures?.[0];
  if (arch !== 'Qwen2ForCausalLM') throw new Error(`${join(folder, 'config.json')}: architectures[0] is ${arch}; the GGUF export writes Qwen2ForCausalLM only`);
  return { config, meta: qwen2Metadata(config, basename(folder)) };
}

/** general.* and qwen2.* for a Qwen2 config. */
export function qwen2Metadata(config: Qwen2Config, name: string): Record<string, Value> {
  const u32 = (v: number): Value => ({ t: T.U32, v });
  return {
      'general.architecture': { t: T.STRING, v: 'qwen2' },
      'general.name': { t: T.STRING, v: name },
      'general.alignment': u32(ALIGN),
      'qwen2.block_count': u32(config.num_hidden_layers),
      'qwen2.context_length': u32(config.max_position_embeddings ?? 4096),
      'qwen2.embedding_length': u32(config.hidden_size),
      'qwen2.feed_forward_length': u32(config.intermediate_size),
      'qwen2.attention.head_count': u32(config.num_attention_heads),
      'qwen2.attention.head_count_kv': u32(config.num_key_value_heads ?? config.num_attention_heads),
      'qwen2.rope.freq_base': { t: T.F32, v: config.rope_parameters?.rope_theta ?? config.rope_theta ?? 10000 },
      'qwen2.attention.layer_norm_rms_epsilon': { t: T.F32, v: config.rms_norm_eps ?? 1e-6 },
  };
}

class Out {
  private readonly chunks: Buffer[] = [];
  length = 0;
  push(b: Buffer): void {
    this.chunks.push(b);
    this.length += b.length;
  }
  u32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.push(b);
  }
  i32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v);
    this.push(b);
  }
  u64(v: number): void {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }
  f32(v: number): void {
    const b = Buffer.alloc(4);
    b.writeFloatLE(v);
    this.push(b);
  }
  str(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.push(b);
  }
  value(x: Value): void {
    this.u32(x.t);
    if (x.t === T.STRING) this.str(x.v);
    else if (x.t === T.BOOL) this.push(Buffer.from([x.v ? 1 : 0]));
    else if (x.t === T.ARRAY) {
      this.u32(x.of);
      this.u64(x.v.length);
      if (x.of === T.STRING) for (const s of x.v as string[]) this.str(s);
      else for (const n of x.v as number[]) this.i32(n);
    } else if (x.t === T.F32) this.f32(x.v);
    else if (x.t === T.U32) this.u32(x.v);
    else this.i32(x.v);
  }
  pad(): void {
    const n = (ALIGN - (this.length % ALIGN)) % ALIGN;
    if (n) this.push(Buffer.alloc(n));
  }
  take(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

export function f16ToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  return e === 0 ? s * 2 ** -14 * (f / 1024) : e === 31 ? (f ? NaN : s * Infinity) : s * 2 ** (e - 15) * (1 + f / 1024);
}

/** Round to nearest even f32 -> f16 bits (finite values in f16's range, as Q8_0 scales are). */
export function f32ToF16(v: number): number {
  const f32 = new Float32Array([v]);
  const x = new Uint32Array(f32.buffer)[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = ((x >>> 23) & 0xff) - 127 + 15;
  let mant = x & 0x7fffff;
  if (exp <= 0) {
    if (exp < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - exp;
    const half = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    return sign | (half + (rest > mid || (rest === mid && half & 1) ? 1 : 0));
  }
  if (exp >= 31) return sign | 0x7c00;
  const half = (exp << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  return sign | (half + (rest > 0x1000 || (rest === 0x1000 && half & 1) ? 1 : 0));
}

/** A tensor's values as numbers. */
function toNumbers(bytes: Buffer, dtype: Dtype): Float32Array {
  if (dtype === 'F32') return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  const n = bytes.length / 2;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const h = bytes.readUInt16LE(2 * i);
    out[i] = dtype === 'BF16' ? new Float32Array(new Uint32Array([h << 16 >>> 0]).buffer)[0] : f16ToF32(h);
  }
  return out;
}

/** A tensor's bytes as F32 (norms and biases: llama.cpp's binary ops want them so). */
function toF32(bytes: Buffer, dtype: Dtype): Buffer {
  return dtype === 'F32' ? bytes : Buffer.from(toNumbers(bytes, dtype).buffer);
}

/** llama.cpp's quantize_row_q8_0_ref over every row: per 32 values d = amax / 127 (f16), q = round(x / d). */
export function quantizeQ8_0(values: Float32Array): Buffer {
  const out = Buffer.alloc((values.length / Q8_BLOCK) * Q8_BLOCK_BYTES);
  for (let b = 0; b < values.length / Q8_BLOCK; b++) {
    let amax = 0;
    for (let l = 0; l < Q8_BLOCK; l++) amax = Math.max(amax, Math.abs(values[b * Q8_BLOCK + l]));
    const d = Math.fround(amax / 127);
    const id = d ? Math.fround(1 / d) : 0;
    out.writeUInt16LE(f32ToF16(d), b * Q8_BLOCK_BYTES);
    for (let l = 0; l < Q8_BLOCK; l++) out.writeInt8(Math.round(Math.fround(values[b * Q8_BLOCK + l] * id)), b * Q8_BLOCK_BYTES + 2 + l);
  }
  return out;
}

/** An I8 [out, in] weight and its F16 [out, in / 32] scale as ggml's Q8_0 blocks. */
function repackQ8_0(q: Buffer, scale: Buffer): Buffer {
  const blocks = q.length / Q8_BLOCK;
  const out = Buffer.alloc(blocks * Q8_BLOCK_BYTES);
  for (let b = 0; b < blocks; b++) {
    scale.copy(out, b * Q8_BLOCK_BYTES, 2 * b, 2 * b + 2);
    q.copy(out, b * Q8_BLOCK_BYTES + 2, b * Q8_BLOCK, (b + 1) * Q8_BLOCK);
  }
  return out;
}

/** An I8 weight and its F16 scale widened to F32 values (d·q: exact, the reference a Q8_0 file is compared with). */
function widenQ8_0(q: Buffer, scale: Buffer): Buffer {
  const out = new Float32Array(q.length);
  for (let i = 0; i < q.length; i++) out[i] = f16ToF32(scale.readUInt16LE(2 * Math.floor(i / Q8_BLOCK))) * q.readInt8(i);
  return Buffer.from(out.buffer);
}

/** The values of tensor `hf` of a folder as F32 (an I8 weight widened with its `_scale`, exactly). */
export function tensorValues(tensors: Map<string, SafeTensor>, hf: string): Float32Array {
  const t = tensors.get(hf);
  if (!t) throw new Error(`no tensor '${hf}'`);
  if (t.dtype !== 'I8') return toNumbers(readRange(t), t.dtype);
  const scale = tensors.get(`${hf}_scale`);
  if (!scale) throw new Error(`${t.file}: tensor '${hf}' is I8 without '${hf}_scale'`);
  const wide = widenQ8_0(readRange(t), readRange(scale));
  return new Float32Array(wide.buffer, wide.byteOffset, wide.length / 4);
}

function readRange(t: SafeTensor): Buffer {
  const raw = Buffer.alloc(t.end - t.start);
  const src = openSync(t.file, 'r');
  try {
    readSync(src, raw, 0, raw.length, t.start);
  } finally {
    closeSync(src);
  }
  return raw;
}

export interface GgufExport {
  path: string;
  tensors: number;
  bytes: number;
  dtype: string;
}

export interface GgufOptions {
  /** 'as-stored' (default): matrices keep their dtype (Q8_0 pairs become Q8_0); 'q8_0': every matrix whose rows are whole blocks is Q8_0;
   * 'f32': every matrix F32 (Q8_0 pairs widened exactly: the unquantized reference of a Q8_0 model). */
  matrices?: 'as-stored' | 'q8_0' | 'f32';
}

/** Writes `folder` (a Qwen2 model) as the GGUF file `out`. */
export function writeGguf(folder: string, out: string, options: GgufOptions = {}): GgufExport {
  const { meta, config } = architectureMetadata(folder);
  const tensors = readSafetensorsIndex(folder);
  const kept = [...tensors.entries()].map(([hf, t]) => ({ hf, name: ggufTensorName(hf), t })).filter((x): x is { hf: string; name: string; t: SafeTensor } => x.name !== undefined);
  if (!kept.some((x) => x.name === 'token_embd.weight')) throw new Error(`${folder}: no model.embed_tokens.weight`);
  // What each tensor is written as, and how its bytes are made.
  const plan: (GgufTensorPlan & { name: string })[] = kept.map((x) => {
    const cols = x.t.shape[x.t.shape.length - 1];
    const scale = tensors.get(`${x.hf}_scale`);
    if (x.t.dtype === 'I8') {
      if (!scale) throw new Error(`${x.t.file}: tensor '${x.hf}' is I8 without '${x.hf}_scale'`);
      if (options.matrices === 'f32') return { name: x.name, shape: x.t.shape, type: 'F32', data: () => widenQ8_0(readRange(x.t), readRange(scale)) };
      return { name: x.name, shape: x.t.shape, type: 'Q8_0', data: () => repackQ8_0(readRange(x.t), readRange(scale)) };
    }
    if (x.t.shape.length === 1) return { name: x.name, shape: x.t.shape, type: 'F32', data: () => toF32(readRange(x.t), x.t.dtype) };
    if (options.matrices === 'f32') return { name: x.name, shape: x.t.shape, type: 'F32', data: () => toF32(readRange(x.t), x.t.dtype) };
    if (options.matrices === 'q8_0' && cols % Q8_BLOCK === 0) return { name: x.name, shape: x.t.shape, type: 'Q8_0', data: () => quantizeQ8_0(toNumbers(readRange(x.t), x.t.dtype)) };
    return { name: x.name, shape: x.t.shape, type: x.t.dtype as GgmlType, data: () => readRange(x.t) };
  });
  const dtype = plan.find((x) => x.name === 'token_embd.weight')!.type;
  const fileType = { F32: 0, F16: 1, Q8_0: 7, Q4_K: 15, Q6_K: 18, BF16: 32 }[dtype];
  const all = { ...meta, 'general.file_type': { t: T.U32, v: fileType } as Value, ...tokenizerMetadata(folder, config.vocab_size) };

  return { ...writeGgufFile(out, all, plan), dtype };
}

/** One tensor of a GGUF file: its name, shape (outermost first), type, and its bytes when asked. */
export interface GgufTensorPlan {
  name: string;
  shape: number[];
  type: GgmlType;
  data(): Buffer;
}

const bytesPer = (type: GgmlType, n: number) =>
  type === 'Q8_0' ? (n / 32) * 34 : type === 'Q4_K' ? (n / 256) * 144 : type === 'Q6_K' ? (n / 256) * 210 : n * { F32: 4, F16: 2, BF16: 2 }[type];

/** Writes a GGUF v3 file: metadata, tensor infos, tensors aligned to ALIGN (each made when written). */
export function writeGgufFile(out: string, meta: Record<string, Value>, plan: GgufTensorPlan[]): { path: string; tensors: number; bytes: number } {
  const head = new Out();
  head.push(Buffer.from('GGUF', 'ascii'));
  head.u32(3);
  head.u64(plan.length);
  head.u64(Object.keys(meta).length);
  for (const [key, value] of Object.entries(meta)) {
    head.str(key);
    head.value(value);
  }
  let offset = 0;
  const placed = plan.map((p) => {
    const bytes = bytesPer(p.type, p.shape.reduce((a, b) => a * b, 1));
    const at = offset;
    offset += Math.ceil(bytes / ALIGN) * ALIGN;
    head.str(p.name);
    head.u32(p.shape.length);
    // GGUF lists dimensions innermost first: [out, in] is ne = [in, out].
    for (const d of [...p.shape].reverse()) head.u64(d);
    head.u32(ggmlType[p.type]);
    head.u64(at);
    return { ...p, at };
  });
  head.pad();

  const fd = openSync(out, 'w');
  try {
    writeSync(fd, head.take());
    let written = 0;
    for (const p of placed) {
      const data = p.data();
      if (written < p.at) writeSync(fd, Buffer.alloc(p.at - written));
      writeSync(fd, data);
      written = p.at + data.length;
    }
    const end = Math.ceil(written / ALIGN) * ALIGN;
    if (end > written) writeSync(fd, Buffer.alloc(end - written));
    return { path: out, tensors: placed.length, bytes: head.length + end };
  } finally {
    closeSync(fd);
  }
}
