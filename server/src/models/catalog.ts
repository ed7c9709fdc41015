// Fill-in-the-middle models worth downloading, for `Runahead: Select Model`.
// The Qwen2.5-Coder base models share a tokenizer and FIM tokens; base (not
// instruct) is what completes code. Sizes are the hub's file sizes.
import type { ModelFormat } from './discover';

export interface CatalogModel {
  /** The Hugging Face repository. */
  repo: string;
  label: string;
  format: ModelFormat;
  /** For a GGUF repository of many quantizations: the one file to fetch. Else every file the engine reads. */
  file?: string;
  bytes: number;
  quantization: string;
  licence: string;
}

export const catalog: CatalogModel[] = [
  { repo: 'Qwen/Qwen2.5-Coder-0.5B', label: 'Qwen2.5-Coder 0.5B', format: 'safetensors', bytes: 988e6, quantization: 'bf16', licence: 'Apache-2.0' },
  { repo: 'Qwen/Qwen2.5-Coder-1.5B', label: 'Qwen2.5-Coder 1.5B', format: 'safetensors', bytes: 3.09e9, quantization: 'bf16', licence: 'Apache-2.0' },
  { repo: 'Qwen/Qwen2.5-Coder-3B', label: 'Qwen2.5-Coder 3B', format: 'safetensors', bytes: 6.17e9, quantization: 'bf16', licence: 'Qwen Research (non-commercial)' },
  { repo: 'Qwen/Qwen2.5-Coder-7B', label: 'Qwen2.5-Coder 7B', format: 'safetensors', bytes: 15.2e9, quantization: 'bf16', licence: 'Apache-2.0' },
  { repo: 'mradermacher/Qwen2.5-Coder-1.5B-GGUF', label: 'Qwen2.5-Coder 1.5B', format: 'gguf', file: 'Qwen2.5-Coder-1.5B.Q8_0.gguf', bytes: 1.65e9, quantization: 'Q8_0', licence: 'Apache-2.0' },
  { repo: 'mradermacher/Qwen2.5-Coder-1.5B-GGUF', label: 'Qwen2.5-Coder 1.5B', format: 'gguf', file: 'Qwen2.5-Coder-1.5B.Q4_K_M.gguf', bytes: 986e6, quantization: 'Q4_K_M', licence: 'Apache-2.0' },
];

/** The files of a repository that a model folder needs: weights, their index, config and tokenizer. */
export function neededFile(path: string): boolean {
  return /^(config\.json|generation_config\.json|tokenizer\.json|tokenizer_config\.json|[^/]*\.safetensors|model\.safetensors\.index\.json)$/.test(path);
}

/** Where a downloaded repository lives under the download root: `Org--Name`. */
export function folderName(repo: string): string {
  return repo.replace(/\//g, '--');
}

/**
 * Expected ms/token for a model of `bytes`: one model step reads every weight once, so a step
 * takes bytes ÷ bandwidth. `bytesPerMs` is the bandwidth, measured (see measuredBandwidth).
 */
export function expectedMsPerToken(bytes: number, bytesPerMs: number): number {
  return bytes / bytesPerMs;
}

/**
 * The bandwidth a model step achieved: its weights read once per step, a step taking
 * ms/token × tokens per step. From the last completion of the model now loaded.
 */
export function stepBandwidth(modelBytes: number, msPerToken: number, tokensPerStep: number): number | undefined {
  const stepMs = msPerToken * Math.max(1, tokensPerStep);
  return modelBytes > 0 && stepMs > 0 ? modelBytes / stepMs : undefined;
}

/** Memory bandwidth of this machine in bytes/ms, from copying a buffer larger than the caches (read + write). */
export function copyBandwidth(bytes = 64 << 20, rounds = 4): number {
  const src = Buffer.alloc(bytes, 1);
  const dst = Buffer.allocUnsafe(bytes);
  src.copy(dst);
  const t0 = performance.now();
  for (let i = 0; i < rounds; i++) src.copy(dst);
  const ms = performance.now() - t0;
  return (2 * bytes * rounds) / ms;
}
