// The benchmark's peer: llama.cpp through node-llama-cpp (3.21.1, its
// prebuilt binaries from npm), on the same model exported to GGUF (gguf.ts),
// fed the same prompt token ids. Optional: the package is loaded from where it
// is installed (this repository's node_modules for `npm run bench`, the
// extension's storage in the editor) and its absence is reported, not thrown.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export const PEER_PACKAGE = 'node-llama-cpp';
export const PEER_VERSION = '3.21.1';

/** One greedy generation of the peer. */
export interface PeerRun {
  prompt_tokens: number;
  prefill_ms: number;
  /** Decode time per token after the first (the first comes from the prefill). */
  decode_ms_per_token: number;
  tokens: number[];
}

// Minimal shapes of the node-llama-cpp API this file uses.
interface NlcSequence {
  clearHistory(): Promise<void>;
  evaluate(tokens: number[], options: { temperature: number }): AsyncGenerator<number>;
}
interface NlcModule {
  getLlama(options: { gpu: 'auto' | false; build: 'never'; logLevel?: string }): Promise<{
    gpu: string | false;
    loadModel(o: { modelPath: string }): Promise<{
      createContext(o: { contextSize: number; threads?: number; batchSize?: number }): Promise<{ getSequence(): NlcSequence; dispose(): Promise<void> }>;
      dispose(): Promise<void>;
    }>;
    dispose(): Promise<void>;
  }>;
}

// A real dynamic import also from the CommonJS bundle (esbuild would turn `import()` into `require`, and the package is ESM only).
const importModule = new Function('url', 'return import(url)') as (url: string) => Promise<unknown>;

/** Where node-llama-cpp is installed under `base` (a folder with node_modules), or undefined. */
export function findPeer(base: string): string | undefined {
  if (!existsSync(join(base, 'node_modules', PEER_PACKAGE, 'package.json'))) return undefined;
  try {
    return createRequire(join(base, 'package.json')).resolve(PEER_PACKAGE);
  } catch {
    return undefined;
  }
}

/** How to install the peer into `base` (the extension's storage), for the user to run or the editor to run on request. */
export function peerInstallCommand(base: string): string {
  return `npm install --prefix "${base}" --no-save ${PEER_PACKAGE}@${PEER_VERSION}`;
}

export class LlamaCppPeer {
  private constructor(
    private readonly sequence: NlcSequence,
    private readonly dispose: () => Promise<void>,
    /** What the peer runs on: cpu, cuda, vulkan, metal. */
    readonly device: string,
  ) {}

  /** Loads `gguf` with node-llama-cpp from `entry` (its resolved index.js); `gpu` false keeps it on the CPU like a CPU engine. */
  static async open(entry: string, gguf: string, options: { threads: number; contextSize: number; gpu: boolean }): Promise<LlamaCppPeer> {
    const nlc = (await importModule(pathToFileURL(entry).href)) as NlcModule;
    const llama = await nlc.getLlama({ gpu: options.gpu ? 'auto' : false, build: 'never', logLevel: 'error' });
    const model = await llama.loadModel({ modelPath: gguf });
    const context = await model.createContext({ contextSize: options.contextSize, threads: options.threads || undefined, batchSize: 512 });
    return new LlamaCppPeer(context.getSequence(), async () => {
      await context.dispose();
      await model.dispose();
      await llama.dispose();
    }, llama.gpu || 'cpu');
  }

  /** Greedy generation from `prompt` with an empty KV cache, stopping at `stop` ids or after `maxTokens`. */
  async generate(prompt: number[], maxTokens: number, stop: readonly number[]): Promise<PeerRun> {
    await this.sequence.clearHistory();
    const tokens: number[] = [];
    const started = performance.now();
    let first = 0;
    for await (const t of this.sequence.evaluate(prompt, { temperature: 0 })) {
      if (tokens.length === 0) first = performance.now();
      if (stop.includes(t)) break;
      tokens.push(t);
      if (tokens.length >= maxTokens) break;
    }
    const end = performance.now();
    const prefill = (first || end) - started;
    return { prompt_tokens: prompt.length, prefill_ms: prefill, decode_ms_per_token: tokens.length > 1 ? (end - first) / (tokens.length - 1) : NaN, tokens };
  }

  close(): Promise<void> {
    return this.dispose();
  }
}
