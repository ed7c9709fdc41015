// The models on this machine that Runahead can load, for `Runahead: Select
// Model`: discover.ts finds the candidates by layout (Hugging Face cache,
// Ollama, LM Studio, downloads); this reads each one's header — config.json
// `model_type` and the safetensors header, or the GGUF metadata — for its
// architecture and quantization. A model of another architecture or tensor
// type is kept with the reason it cannot load; an unreadable one (truncated,
// permission denied, not a model) is left out. Bounded: a time limit per
// model and for the whole scan, a cap on models, and headers read by range.
import { closeSync, openSync, readdirSync, readFileSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { GGMLFileQuantizationType, GGMLQuantizationType, gguf } from '@huggingface/gguf';
import { discoverModels, quantizationOf, type FoundModel, type ModelRoots } from './discover';

/** The architectures the engine runs (config.json `model_type`, GGUF `general.architecture`). */
export const ARCHITECTURES = ['qwen2', 'qwen3', 'llama'];
/** The GGUF tensor types the engine reads (engine/src/model/gguf.cpp, GgufTensor::dense_dtype and quant_type): keep them equal. */
export const GGUF_TYPES = ['F32', 'F16', 'BF16', 'Q8_0', 'Q4_0', 'Q5_0', 'Q4_1', 'Q5_1', 'Q4_K', 'Q5_K', 'Q6_K'];

export interface LocalModel extends FoundModel {
  /** `qwen2`, `llama`… when read. */
  architecture?: string;
  /** Why Runahead cannot load it; undefined when it can. */
  problem?: string;
}

export interface ScanLimits {
  /** Per model: a header that takes longer (a network drive, a FIFO) leaves the model out. */
  modelTimeoutMs?: number;
  /** The whole scan: models not inspected by then are left out. */
  totalTimeoutMs?: number;
  maxModels?: number;
}

const MAX_SAFETENSORS_HEADER = 64 * 1024 * 1024;

class Unreadable extends Error {}

function withTimeout<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Unreadable(`no answer in ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

/** A safetensors file's header: tensor name → dtype. Throws Unreadable on a short or malformed file. */
export function safetensorsDtypes(file: string): Map<string, string> {
  const fd = openSync(file, 'r');
  try {
    const len = Buffer.alloc(8);
    if (readSync(fd, len, 0, 8, 0) !== 8) throw new Unreadable(`${file}: shorter than a safetensors header`);
    const n = Number(len.readBigUInt64LE());
    if (n <= 0 || n > MAX_SAFETENSORS_HEADER) throw new Unreadable(`${file}: header length ${n}`);
    const head = Buffer.alloc(n);
    if (readSync(fd, head, 0, n, 8) !== n) throw new Unreadable(`${file}: truncated header`);
    const header = JSON.parse(head.toString('utf8')) as Record<string, { dtype?: string }>;
    return new Map(Object.entries(header).filter(([k, t]) => k !== '__metadata__' && typeof t?.dtype === 'string').map(([k, t]) => [k, t.dtype!]));
  } finally {
    closeSync(fd);
  }
}

/** `bf16`, `f16`, `f32`, or `q8_0` when I8 weights come with `*.weight_scale` (MODEL_FORMAT.md). */
export function safetensorsQuantization(dtypes: Map<string, string>): string | undefined {
  const q8 = [...dtypes].some(([k, t]) => t === 'I8' && dtypes.has(`${k}_scale`));
  if (q8) return 'q8_0';
  const count = new Map<string, number>();
  for (const [k, t] of dtypes) if (!k.endsWith('_scale')) count.set(t, (count.get(t) ?? 0) + 1);
  const dominant = [...count].sort((a, b) => b[1] - a[1])[0]?.[0];
  return dominant?.toLowerCase();
}

function inspectFolder(m: FoundModel): LocalModel {
  const config = JSON.parse(readFileSync(join(m.path, 'config.json'), 'utf8')) as { model_type?: unknown };
  const architecture = typeof config.model_type === 'string' ? config.model_type : undefined;
  const shards = readdirSync(m.path).filter((f) => f.endsWith('.safetensors') && !f.startsWith('mtp')).sort();
  const dtypes = new Map<string, string>();
  for (const shard of shards) for (const [k, t] of safetensorsDtypes(join(m.path, shard))) dtypes.set(k, t);
  const quantization = safetensorsQuantization(dtypes);
  const bad = [...new Set(dtypes.values())].filter((t) => !['F32', 'F16', 'BF16', 'I8'].includes(t));
  const problem = !architecture || !ARCHITECTURES.includes(architecture)
    ? `architecture ${architecture ?? 'not stated'} (Runahead runs ${ARCHITECTURES.join(', ')})`
    : bad.length
      ? `tensor type ${bad.join(', ')} (Runahead reads F32, F16, BF16, and I8 with a weight_scale)`
      : undefined;
  return { ...m, architecture, quantization: quantization ?? m.quantization, problem };
}

/** Bytes per block and elements per block of the common GGUF types (ggml's type traits), for the truncation check. */
const BLOCK: Record<string, [number, number]> = {
  F32: [4, 1], F16: [2, 1], BF16: [2, 1], Q4_0: [18, 32], Q4_1: [20, 32], Q5_0: [22, 32], Q5_1: [24, 32], Q8_0: [34, 32],
  Q2_K: [84, 256], Q3_K: [110, 256], Q4_K: [144, 256], Q5_K: [176, 256], Q6_K: [210, 256],
};

async function inspectGguf(m: FoundModel): Promise<LocalModel> {
  const parsed = await gguf(m.path, { allowLocalFile: true });
  const { tensorInfos, tensorDataOffset } = parsed;
  const metadata = parsed.metadata as unknown as Record<string, unknown>;
  // The parser reads past the end of a truncated file as zeros: check that every tensor lies within the file.
  const data = m.bytes - Number(tensorDataOffset);
  if (!tensorInfos.length || data < 0) throw new Unreadable(`${m.path}: no tensors`);
  for (const t of tensorInfos) {
    const block = BLOCK[GGMLQuantizationType[t.dtype] ?? ''];
    const elements = t.shape.reduce((n, d) => n * Number(d), 1);
    const end = Number(t.offset) + (block ? Math.ceil(elements / block[1]) * block[0] : 1);
    if (!t.name || end > data) throw new Unreadable(`${m.path}: truncated (tensor '${t.name}' ends past the file)`);
  }
  const arch = metadata['general.architecture'];
  const architecture = typeof arch === 'string' ? arch : undefined;
  const fileType = metadata['general.file_type'];
  const types = new Map<string, number>();
  for (const t of tensorInfos) {
    const name = GGMLQuantizationType[t.dtype] ?? `type ${t.dtype}`;
    types.set(name, (types.get(name) ?? 0) + 1);
  }
  const dominant = [...types].filter(([t]) => t !== 'F32').sort((a, b) => b[1] - a[1])[0]?.[0] ?? (types.size ? 'F32' : undefined);
  const named = typeof fileType === 'number' || typeof fileType === 'bigint' ? GGMLFileQuantizationType[Number(fileType)] : undefined;
  const quantization = (named && named.replace(/^MOSTLY_/, '')) ?? dominant ?? m.quantization ?? quantizationOf(m.path);
  const bad = [...types.keys()].filter((t) => !GGUF_TYPES.includes(t));
  const problem = !architecture || !ARCHITECTURES.includes(architecture)
    ? `architecture ${architecture ?? 'not stated'} (Runahead runs ${ARCHITECTURES.join(', ')})`
    : bad.length
      ? `tensor type ${bad.join(', ')} (Runahead reads ${GGUF_TYPES.join(', ')})`
      : undefined;
  return { ...m, architecture, quantization, problem };
}

/** Reads one candidate's header; undefined when it is not a readable model. Never throws. */
export async function inspectModel(m: FoundModel, timeoutMs = 5000): Promise<LocalModel | undefined> {
  try {
    return await withTimeout(m.format === 'gguf' ? inspectGguf(m) : Promise.resolve().then(() => inspectFolder(m)), timeoutMs);
  } catch {
    return undefined;
  }
}

/** The models under the roots, inspected: loadable ones first, then the ones with a problem. Never throws. */
export async function localModels(roots: ModelRoots, limits: ScanLimits = {}): Promise<LocalModel[]> {
  const { modelTimeoutMs = 5000, totalTimeoutMs = 15000, maxModels = 200 } = limits;
  const deadline = Date.now() + totalTimeoutMs;
  let candidates: FoundModel[];
  try {
    candidates = discoverModels(roots).slice(0, maxModels);
  } catch {
    return [];
  }
  const out: LocalModel[] = [];
  // A few at a time: headers are small reads, but a slow disk should not stall the picker.
  const queue = [...candidates];
  const worker = async () => {
    for (let m = queue.shift(); m; m = queue.shift()) {
      const left = deadline - Date.now();
      if (left <= 0) return;
      const found = await inspectModel(m, Math.min(modelTimeoutMs, left));
      if (found) out.push(found);
    }
  };
  await Promise.all(Array.from({ length: 4 }, worker));
  const order = new Map(candidates.map((m, i) => [m.path, i]));
  return out.sort((a, b) => Number(!!a.problem) - Number(!!b.problem) || order.get(a.path)! - order.get(b.path)!);
}
