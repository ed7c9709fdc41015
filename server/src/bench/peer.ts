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
  /** llama.cpp's own times, from its counters (llama_perf_context): the prompt's decode, and per generated token its decode, as the engine times itself. */
  prefill_ms: number;
  decode_ms_per_token: number;
  /** The same seen from JavaScript, as an extension on node-llama-cpp would: every token is a round trip to a native worker thread and back. */
  wall_prefill_ms: number;
  wall_decode_ms_per_token: number;
  tokens: number[];
}

// Minimal shapes of the node-llama-cpp API this file uses.
interface NlcSequence {
  clearHistory(): Promise<void>;
  evaluate(tokens: number[], options: { temperature: number; yieldEogToken: boolean }): AsyncGenerator<number>;
  controlledEvaluate(
    input: (number | [number, { generateNext: { token?: true; probabilities?: true; options: { temperature: number; topK?: number; topP?: number; minP?: number } } }])[],
  ): Promise<({ next?: { token?: number | null; probabilities?: Map<number, number> } } | undefined)[]>;
}
interface NlcContext {
  getSequence(): NlcSequence;
  /** Logs llama_perf_context_print's lines and resets the counters. */
  printTimings(): Promise<void>;
  dispose(): Promise<void>;
}
interface NlcModule {
  getLlama(options: { gpu: 'auto' | false; build: 'never'; logLevel: 'info'; logger: (level: string, message: string) => void }): Promise<{
    gpu: string | false;
    loadModel(o: { modelPath: string }): Promise<{
      createContext(o: {
        contextSize: number;
        threads?: number;
        batchSize: number;
        performanceTracking: true;
        flashAttention?: boolean;
        experimentalKvCacheKeyType?: 'F32';
        experimentalKvCacheValueType?: 'F32';
      }): Promise<NlcContext>;
      dispose(): Promise<void>;
    }>;
    dispose(): Promise<void>;
  }>;
}

/** llama.cpp's counters as llama_perf_context_print logs them: `prompt eval time = 12.3 ms / 456 tokens`, `eval time = 7.8 ms / 9 runs`. */
export function parsePerfLines(lines: readonly string[]): { prompt_ms: number; prompt_tokens: number; eval_ms: number; eval_runs: number } | undefined {
  const prompt = lines.map((l) => /prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens/.exec(l)).find(Boolean);
  const evals = lines.map((l) => /(?<!prompt )eval time =\s*([\d.]+) ms \/\s*(\d+) runs/.exec(l)).find(Boolean);
  if (!prompt || !evals) return undefined;
  return { prompt_ms: Number(prompt[1]), prompt_tokens: Number(prompt[2]), eval_ms: Number(evals[1]), eval_runs: Number(evals[2]) };
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

type NlcLlama = Awaited<ReturnType<NlcModule['getLlama']>>;
let shared: { key: string; llama: NlcLlama; logged: string[] } | undefined;

/**
 * One llama.cpp instance per process and device choice: node-llama-cpp keeps its logger with
 * the first instance, so a second getLlama would log nowhere and the counters could not be read.
 */
async function sharedLlama(entry: string, gpu: boolean): Promise<{ llama: NlcLlama; logged: string[] }> {
  const key = `${entry}:${gpu}`;
  if (shared?.key === key) return shared;
  await shared?.llama.dispose();
  const nlc = (await importModule(pathToFileURL(entry).href)) as NlcModule;
  const logged: string[] = [];
  // At 'info' so that printTimings reaches the logger; nothing else logged is shown.
  const llama = await nlc.getLlama({ gpu: gpu ? 'auto' : false, build: 'never', logLevel: 'info', logger: (_level, message) => logged.push(message) });
  shared = { key, llama, logged };
  return shared;
}

/** Releases the llama.cpp instance (after the last peer is closed): the process can then exit. */
export async function releaseLlamaCpp(): Promise<void> {
  const last = shared;
  shared = undefined;
  await last?.llama.dispose();
}

export class LlamaCppPeer {
  private constructor(
    private readonly context: NlcContext,
    private readonly sequence: NlcSequence,
    /** What llama.cpp has logged since the last generation started. */
    private readonly logged: string[],
    private readonly dispose: () => Promise<void>,
    /** What the peer runs on: cpu, cuda, vulkan, metal. */
    readonly device: string,
  ) {}

  /**
   * Loads `gguf` with node-llama-cpp from `entry` (its resolved index.js); `gpu` false keeps it on the CPU like a CPU engine.
   * `exactAttention`: an F32 KV cache and no flash attention, so attention runs in f32 as ours does (llama.cpp's default
   * F16 cache rounds K, V, q and the attention weights to f16); for accuracy comparisons, not for speed.
   */
  static async open(entry: string, gguf: string, options: { threads: number; contextSize: number; gpu: boolean; exactAttention?: boolean }): Promise<LlamaCppPeer> {
    const { llama, logged } = await sharedLlama(entry, options.gpu);
    const model = await llama.loadModel({ modelPath: gguf });
    const exact = options.exactAttention ? { flashAttention: false, experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32' } as const : {};
    const context = await model.createContext({ contextSize: options.contextSize, threads: options.threads || undefined, batchSize: 512, performanceTracking: true, ...exact });
    const peer = new LlamaCppPeer(context, context.getSequence(), logged, async () => {
      await context.dispose();
      await model.dispose();
    }, llama.gpu || 'cpu');
    // The first evaluation allocates llama.cpp's compute buffers (~5x a later prefill): not part of any task.
    await peer.generate(Array.from({ length: 64 }, (_, i) => i + 1), 8, []);
    return peer;
  }

  /**
   * Greedy generation from `prompt` (ids as they are: no BOS added, nothing
   * tokenized) with an empty KV cache, stopping at `stop` ids or after
   * `maxTokens`. llama.cpp's own end-of-generation set (which adds the FIM
   * pad, repo and file-separator tokens) is not used, so both engines stop alike.
   */
  async generate(prompt: number[], maxTokens: number, stop: readonly number[]): Promise<PeerRun> {
    await this.sequence.clearHistory();
    await this.timings(); // resets the counters
    const tokens: number[] = [];
    const started = performance.now();
    let first = 0;
    let decodes = 0;
    for await (const t of this.sequence.evaluate(prompt, { temperature: 0, yieldEogToken: true })) {
      if (first === 0) first = performance.now();
      else decodes++;
      if (stop.includes(t)) break;
      tokens.push(t);
      if (tokens.length >= maxTokens) break;
    }
    const end = performance.now();
    const perf = await this.timings();
    return {
      // What llama.cpp evaluated: a BOS of its own would make it one more.
      prompt_tokens: perf.prompt_tokens,
      prefill_ms: perf.prompt_ms,
      decode_ms_per_token: perf.eval_runs > 0 ? perf.eval_ms / perf.eval_runs : NaN,
      wall_prefill_ms: first - started,
      wall_decode_ms_per_token: decodes > 0 ? (end - first) / decodes : NaN,
      tokens,
    };
  }

  /**
   * Teacher forcing: llama.cpp's greedy next token after each position `from`..end of
   * `tokens` (one batch over the whole sequence, from an empty KV cache).
   */
  async nextTokens(tokens: number[], from: number): Promise<number[]> {
    await this.sequence.clearHistory();
    const input = tokens.map((t, i) => (i >= from ? ([t, { generateNext: { token: true, options: { temperature: 0 } } }] as [number, { generateNext: { token: true; options: { temperature: 0 } } }]) : t));
    const out = await this.sequence.controlledEvaluate(input);
    return tokens.slice(from).map((_, i) => {
      const t = out[from + i]?.next?.token;
      if (typeof t !== 'number') throw new Error(`llama.cpp gave no next token at position ${from + i}`);
      return t;
    });
  }

  /**
   * llama.cpp's probabilities of the token after `tokens` (from an empty KV cache): the
   * softmax of its logits, nothing cut (temperature 1, no top-k, top-p or min-p).
   */
  async nextProbabilities(tokens: number[]): Promise<Map<number, number>> {
    await this.sequence.clearHistory();
    const last = tokens.length - 1;
    const options = { temperature: 1, topK: 0, topP: 1, minP: 0 };
    const input = tokens.map((t, i) => (i === last ? ([t, { generateNext: { probabilities: true, options } }] as [number, { generateNext: { probabilities: true; options: typeof options } }]) : t));
    const p = (await this.sequence.controlledEvaluate(input))[last]?.next?.probabilities;
    if (!p) throw new Error(`llama.cpp gave no probabilities after position ${last}`);
    return p;
  }

  /** llama.cpp's counters since the last call (printTimings logs and resets them; the logger runs on the event loop, after printTimings has returned). */
  private async timings(): Promise<NonNullable<ReturnType<typeof parsePerfLines>>> {
    this.logged.length = 0;
    await this.context.printTimings();
    for (let i = 0; i < 100; i++) {
      const perf = parsePerfLines(this.logged);
      if (perf) return perf;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error(`llama.cpp logged no 'prompt eval time' and 'eval time' lines (llama_perf_context_print) after a generation; it logged: ${this.logged.slice(-5).join(' | ') || 'nothing'}`);
  }

  close(): Promise<void> {
    return this.dispose();
  }
}
