// The benchmark, one run: workloads × configurations, with the same sources,
// prompts and post-processing as completions in the editor. Front ends: the
// `runahead/benchmark` request (lsp.ts) and `npm run bench` (test/bench/bench.ts).
//
// Generation workloads (FIM tasks from the user's code, long left-to-right
// generation, synthetic repetitive prompts) run every task on every
// configuration in turn, so a machine that gets busier slows all alike; the
// peer (llama.cpp) runs each FIM task right after ours. The typing replay
// types a file key by key through a Completer (debounce, type-through cache,
// prefetch) on each configuration.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { Completer } from '../completion/completer';
import { filterContext } from '../completion/postprocess/context';
import { postprocess } from '../completion/postprocess';
import type { CompletionSource, SourceResult } from '../completion/source';
import { EngineSource } from '../engine/engineSource';
import { locateEngine } from '../engine/locate';
import type { LoadReport } from '../engine/protocol';
import type { Log } from '../log';
import { RemoteSource } from '../remote/remoteSource';
import type { Settings, Speculation } from '../settings';
import { LlamaCppPeer, PEER_PACKAGE, PEER_VERSION, releaseLlamaCpp, type PeerRun } from './peer';
import { writeGguf } from './gguf';
import { bundledSamples } from './samples';
import { distribution, editSimilarity, exactMatch, mean, type Distribution } from './stats';
import { cutTasks, sameLines, type FimTask, type SourceFile } from './tasks';

export type Workload = 'fim' | 'typing' | 'agent' | 'synthetic';
export const workloads: readonly Workload[] = ['fim', 'typing', 'agent', 'synthetic'];
export const workloadTitles: Record<Workload, string> = {
  fim: 'Your code: FIM tasks',
  typing: 'Typing replay',
  agent: 'Agent-style: long left-to-right generation',
  synthetic: 'Synthetic repetitive prompts (flatter speculation)',
};
/** A speculation mode of the local engine, or the remote OpenAI-compatible server. */
export type Configuration = Speculation | 'remote';
export const speculationModes: readonly Speculation[] = ['off', 'lookup', 'mtp', 'draft', 'auto'];

export interface BenchmarkParams {
  workloads: Workload[];
  configurations: Configuration[];
  /** FIM tasks cut from the workspace. */
  tasks: number;
  maxTokens: number;
  seed: number;
  /** Keys typed per configuration in the typing replay, and the time between two. */
  typingKeys: number;
  typingIntervalMs: number;
  /** Left-to-right generations and their length. */
  agentTasks: number;
  agentTokens: number;
  syntheticTasks: number;
  /** Where node-llama-cpp is installed (its resolved entry), or undefined: no peer. */
  peerEntry?: string;
  /** Where the GGUF export of the model is written for the peer. */
  cacheDir?: string;
  quick: boolean;
}

export function defaultParams(quick: boolean): BenchmarkParams {
  return {
    workloads: [...workloads],
    configurations: [...speculationModes],
    tasks: quick ? 12 : 40,
    maxTokens: quick ? 48 : 64,
    seed: 1,
    typingKeys: quick ? 40 : 150,
    typingIntervalMs: 120,
    agentTasks: quick ? 2 : 4,
    agentTokens: quick ? 128 : 256,
    syntheticTasks: quick ? 2 : 5,
    quick,
  };
}

export interface Progress {
  done: number;
  total: number;
  message: string;
  /** Seconds left, from the time the steps done so far took. */
  eta_s?: number;
}

export interface BenchmarkEnv {
  settings: Settings;
  log: Log;
  /** The workspace's source files; empty: the bundled samples. */
  files: SourceFile[];
  remoteApiKey?: string;
  signal?: AbortSignal;
  onProgress?: (p: Progress) => void;
  /** Makes the source of a configuration (tests give fakes); default: the engine, or the remote server. */
  makeSource?: (configuration: Configuration, settings: Settings) => CompletionSource;
}

export interface ConfigurationResult {
  configuration: Configuration;
  /** Why it did not run (a mode the model cannot use), when it did not. */
  error?: string;
  /** The speculation the engine reports active (its drafters), from its load report. */
  active?: string;
  tasks: number;
  output_tokens: number;
  ttft_ms: Distribution;
  prompt_tokens: number;
  prompt_tokens_reused: number;
  /** Decode time per output token (after the first), over tasks. */
  ms_per_token: Distribution;
  /** Whole request (prefill, first token, decode) divided by its output tokens, over all tasks. */
  effective_ms_per_token: number;
  tokens_per_s: number;
  accepted_per_step: number;
  /** The bandwidth bound of one token per step ÷ ms_per_token mean: the fraction of the bound reached (above 1 needs several tokens per step). */
  bound_fraction?: number;
  /** Against the real middle, the completion post-processed and cut to the middle's lines (FIM only). */
  exact_match?: number;
  edit_similarity?: number;
  /** Tasks whose greedy output equals the `off` configuration's. */
  identical_to_plain?: { same: number; of: number; all: boolean };
  speedup_vs_off?: number;
}

export interface WorkloadResult {
  workload: Workload;
  title: string;
  configurations: ConfigurationResult[];
}

export interface TypingResult {
  configuration: Configuration;
  error?: string;
  keys: number;
  /** Keys after which ghost text was shown, by where it came from. */
  shown: number;
  from_engine: number;
  from_cache: number;
  from_prefetch: number;
  skipped: number;
  cancelled: number;
  /** Keystroke to ghost text, debounce included, for the keys that showed some. */
  keystroke_to_ghost_ms: Distribution;
  engine_ms_per_token: Distribution;
  prompt_tokens_reused: number;
  prompt_tokens: number;
}

export interface LlamaCppResult {
  status: 'ran' | 'not installed' | 'failed' | 'not asked';
  detail?: string;
  package: string;
  gguf?: string;
  device?: string;
  tasks?: number;
  /** llama.cpp's own times (its perf counters), as Runahead's are the engine's own. */
  prefill_tokens_per_s?: number;
  decode_ms_per_token?: Distribution;
  /** llama.cpp's decode time per token seen from JavaScript through node-llama-cpp (a native round trip per token). */
  wall_decode_ms_per_token?: Distribution;
  /** The same tasks on Runahead with speculation off, measured interleaved. */
  runahead_prefill_tokens_per_s?: number;
  runahead_decode_ms_per_token?: Distribution;
  /** Runahead ÷ llama.cpp for prefill speed, llama.cpp ÷ Runahead for decode time: above 1, Runahead is faster. */
  prefill_ratio?: number;
  decode_ratio?: number;
  /** Tasks whose greedy output equals Runahead's (the export and both engines agree); for each other task, the token where llama.cpp's departs. */
  same_output?: { same: number; of: number; diverged_at: number[] };
}

export interface BoundResult {
  weight_bytes: number;
  read_bandwidth_gb_s: number;
  bound_ms_per_token: number;
  backend: string;
  source: string;
}

export interface Machine {
  cpu: string;
  cores: number;
  simd?: string;
  gpu?: string;
  threads?: number;
  backend?: string;
  /** 1-minute load average at the start and the end of the run: above `cores`, every time here is inflated. */
  load_average?: [number, number];
  model: string;
  quantization?: string;
  parameters?: number;
  os: string;
  node: string;
}

export interface BenchmarkResult {
  version: 1;
  date: string;
  quick: boolean;
  machine: Machine;
  params: Omit<BenchmarkParams, 'peerEntry' | 'cacheDir'>;
  task_source: { from: 'workspace' | 'bundled samples'; files: number; languages: Record<string, number>; kinds: Record<string, number> };
  bound?: BoundResult;
  fp8_head: string;
  results: WorkloadResult[];
  typing?: TypingResult[];
  /** Greedy outputs of every configuration equal the plain ones: false is a bug, and the report says so loudly. */
  identical_to_plain: boolean;
  mismatches: { workload: Workload; configuration: Configuration; task: string }[];
  llama_cpp: LlamaCppResult;
  warnings: string[];
  wall_s: number;
}

interface Config {
  name: Configuration;
  source: CompletionSource;
  settings: Settings;
  error?: string;
  report?: LoadReport;
}

interface GenTask {
  label: string;
  prefix: string;
  suffix: string;
  path: string;
  languageId: string;
  middle?: string;
}

interface GenRecord {
  text: string;
  result: SourceResult;
  wallMs: number;
}

export class BenchmarkCancelled extends Error {
  constructor() {
    super('the benchmark was cancelled');
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A block of code repeated, then its start again: prompt lookup sees the answer, as no real task lets it. */
export function syntheticPrompt(i: number): string {
  const name = ['add', 'plus', 'total', 'combine', 'merge', 'sum'][i % 6];
  const block = `function ${name}${i}(a, b) {\n  const sum = a + b;\n  console.log("sum", sum);\n  return sum;\n}\n\n`;
  return `${block.repeat(12)}function ${name}${i}(a, b) {\n`;
}

/** Runs the benchmark; always stops the engines it started. */
export async function runBenchmark(params: BenchmarkParams, env: BenchmarkEnv): Promise<BenchmarkResult> {
  const t0 = performance.now();
  const loadAtStart = loadavg()[0];
  const warnings: string[] = [];
  const files = env.files.length > 0 ? env.files : [...bundledSamples];
  const fim = cutTasks(files, params.tasks, params.seed);
  const doing = new Set(params.workloads);
  const agentTasks: GenTask[] = files.slice(0).sort((a, b) => b.text.length - a.text.length).slice(0, params.agentTasks).map((f) => {
    const cut = f.text.lastIndexOf('\n', Math.floor(f.text.length * 0.6)) + 1;
    return { label: `${f.path}:${f.text.slice(0, cut).split('\n').length}`, prefix: f.text.slice(0, cut), suffix: '', path: f.path, languageId: f.languageId };
  });
  const synthetic: GenTask[] = Array.from({ length: params.syntheticTasks }, (_, i) => ({ label: `synthetic ${i + 1}`, prefix: syntheticPrompt(i), suffix: '', path: 'synthetic.js', languageId: 'javascript' }));
  const fimTasks: GenTask[] = fim.map((t) => ({ label: `${t.file}:${t.line}:${t.col} (${t.kind})`, prefix: t.prefix, suffix: t.suffix, path: t.file, languageId: t.languageId, middle: t.middle }));

  const configNames = params.configurations.filter((c) => c !== 'remote' || env.settings.remote.url);
  if (params.configurations.includes('remote') && !env.settings.remote.url) warnings.push('remote: no runahead.remote.url set, so no remote configuration');
  // The order of a step counter: every generation on every configuration, every typed key, every peer task.
  const gens = (doing.has('fim') ? fimTasks.length : 0) + (doing.has('agent') ? agentTasks.length : 0) + (doing.has('synthetic') ? synthetic.length : 0);
  const total = configNames.length * (gens + (doing.has('typing') ? params.typingKeys : 0)) + (params.peerEntry && doing.has('fim') ? fimTasks.length : 0) + configNames.length;
  let done = 0;
  const step = (message: string) => {
    done++;
    const elapsed = (performance.now() - t0) / 1000;
    env.onProgress?.({ done, total, message, eta_s: done > 0 ? (elapsed / done) * (total - done) : undefined });
  };
  const check = () => {
    if (env.signal?.aborted) throw new BenchmarkCancelled();
  };

  const configs: Config[] = [];
  const peer: LlamaCppResult = { status: params.peerEntry ? 'failed' : 'not installed', package: `${PEER_PACKAGE}@${PEER_VERSION}` };
  let llama: LlamaCppPeer | undefined;
  try {
    // One engine loads at a time: each measures its speculation cost table at load, and engines
    // loading beside it (on the same cores or GPU) would inflate it (measured on an H200: five
    // at once left every drafter idle).
    for (const name of configNames) {
      check();
      const settings: Settings = name === 'remote' ? env.settings : { ...env.settings, speculation: name, backend: env.settings.backend === 'remote' ? 'auto' : env.settings.backend };
      const source: CompletionSource = env.makeSource?.(name, settings) ?? (name === 'remote' ? new RemoteSource(settings, env.log, { apiKey: env.remoteApiKey }) : new EngineSource(settings, env.log));
      const c: Config = { name, source, settings };
      configs.push(c);
      const ok = await readyOrFailed(c.source, 120_000);
      const status = c.source.status;
      c.report = c.source instanceof EngineSource ? c.source.supervisor.loadReport : (c.source as { loadReport?: LoadReport }).loadReport;
      if (!ok || status.state === 'error') c.error = status.message || 'not ready';
      else if (status.state === 'degraded') {
        // A warning that leaves the configuration as asked (quantized weights widened on the GPU)
        // goes to the log; one that changed it (its drafter refused, speculation off) would make
        // the row measure something else.
        const why = [status.message, ...(status.warnings ?? [])].filter(Boolean).join('; ');
        const mode = (c.report?.speculation as { mode?: string } | undefined)?.mode;
        if (c.name === 'remote' || mode !== c.settings.speculation) c.error = `degraded: ${why}`;
        else env.log('warn', `${c.name}: ${why}`);
      }
      step(`loaded ${c.name}${c.error ? `: ${c.error}` : ''}`);
    }
    const plain = configs.find((c) => c.name === 'off' && !c.error);
    const report = plain?.report ?? configs.find((c) => c.report)?.report;
    const bound = report ? await measureBound(env.settings, report).catch((err: Error) => {
      warnings.push(`bandwidth bound not measured: ${err.message}`);
      return undefined;
    }) : undefined;

    if (params.peerEntry && doing.has('fim') && plain?.source instanceof EngineSource) {
      try {
        const dir = params.cacheDir ?? join(tmpdir(), 'runahead-bench');
        mkdirSync(dir, { recursive: true });
        const folder = plain.source.model.path!;
        const gguf = join(dir, `${basename(folder)}-${Math.round(statSync(join(folder, 'config.json')).mtimeMs)}.gguf`);
        if (!existsSync(gguf)) writeGguf(folder, gguf);
        llama = await LlamaCppPeer.open(params.peerEntry, gguf, { threads: report?.threads ?? 0, contextSize: report?.context_length ?? 4096, gpu: report?.backend === 'cuda' });
        Object.assign(peer, { status: 'ran', gguf, device: llama.device });
      } catch (err) {
        peer.detail = err instanceof Error ? err.message : String(err);
        warnings.push(`llama.cpp peer failed: ${peer.detail}`);
      }
    } else if (!params.peerEntry) {
      peer.detail = `${PEER_PACKAGE} was not found`;
    } else {
      peer.status = 'not asked';
      peer.detail = doing.has('fim') ? 'the peer needs the local engine with speculation off' : 'the peer runs with the FIM workload';
    }

    const results: WorkloadResult[] = [];
    const mismatches: BenchmarkResult['mismatches'] = [];
    const peerRuns: PeerRecord[] = [];
    const runWorkload = async (workload: Workload, tasks: GenTask[], maxTokens: number) => {
      const records = new Map<Config, GenRecord[]>(configs.map((c) => [c, []]));
      for (const [i, task] of tasks.entries()) {
        for (const c of configs) {
          check();
          if (c.error) continue;
          records.get(c)!.push(await generate(c, task, maxTokens));
          step(`${workloadTitles[workload]}: ${c.name} ${i + 1}/${tasks.length}`);
        }
        if (workload === 'fim' && llama && plain?.source instanceof EngineSource) {
          const ours = records.get(plain)!.at(-1)!;
          const model = plain.source.model.context!;
          const budget = Math.max(64, Math.min(plain.settings.contextBudget, (report?.context_length ?? model.info.contextLength) - maxTokens - 1));
          const prompt = await model.fim.build({ prefix: task.prefix, suffix: task.suffix, path: task.path, extra: [], budget });
          const theirs = await llama.generate(prompt.ids, maxTokens, model.info.stopTokens);
          peerRuns.push({ ours, prompt: prompt.ids.length, theirs, agreed: agreedTokens(theirs.tokens, ours.text, (ids) => model.info.tokenizer.decode(ids)) });
          step(`llama.cpp ${i + 1}/${tasks.length}`);
        }
      }
      const base = plain ? records.get(plain)! : undefined;
      const rows = configs.map((c) => summarize(c, records.get(c)!, tasks, base && c !== plain && c.name !== 'remote' ? base : undefined, bound));
      for (const c of configs) {
        if (!base || c === plain || c.name === 'remote' || c.error) continue;
        records.get(c)!.forEach((r, i) => {
          if (r.text !== base[i]?.text) mismatches.push({ workload, configuration: c.name, task: tasks[i].label });
        });
      }
      const off = rows.find((r) => r.configuration === 'off' && !r.error);
      for (const r of rows) if (off && !r.error) r.speedup_vs_off = off.ms_per_token.mean / r.ms_per_token.mean;
      results.push({ workload, title: workloadTitles[workload], configurations: rows });
    };

    if (doing.has('fim')) await runWorkload('fim', fimTasks, params.maxTokens);
    if (doing.has('agent')) await runWorkload('agent', agentTasks, params.agentTokens);
    if (doing.has('synthetic')) await runWorkload('synthetic', synthetic, params.maxTokens);
    const typing = doing.has('typing') ? await typingReplay(configs, files, params, env.log, check, step) : undefined;

    if (peer.status === 'ran' && peerRuns.length > 0) summarizePeer(peer, peerRuns);
    const machine: Machine = {
      cpu: cpus()[0]?.model ?? 'unknown',
      cores: cpus().length,
      simd: report?.optimizations?.simd as string | undefined,
      gpu: (report?.optimizations?.device ?? report?.optimizations?.gpu) as string | undefined,
      threads: report?.threads,
      load_average: [loadAtStart, loadavg()[0]],
      backend: report?.backend ?? (configs.some((c) => c.name === 'remote') ? 'remote' : undefined),
      model: report?.model ? basename(report.model) : env.settings.modelPath || 'runahead-coder',
      quantization: report?.weights ?? report?.dtype,
      parameters: report?.parameters,
      os: `${process.platform} ${process.arch}`,
      node: process.version,
    };
    const busiest = Math.max(...machine.load_average!);
    if (machine.backend !== 'cuda' && busiest > machine.cores - 0.5) {
      const peerWorst = peer.status === 'ran' ? ", llama.cpp's most (its threads wait for each other spinning, without yielding to the processes that hold the cores); set RUNAHEAD_THREADS=1 for both engines" : '';
      warnings.push(`the machine was busy (load average up to ${busiest.toFixed(1)} on ${machine.cores} cores): CPU times are inflated${peerWorst}; run again when it is quiet`);
    }
    const count = (xs: string[]) => xs.reduce<Record<string, number>>((m, x) => ({ ...m, [x]: (m[x] ?? 0) + 1 }), {});
    const { peerEntry: _peer, cacheDir: _cache, ...shown } = params;
    if (mismatches.length > 0) warnings.unshift(`GREEDY OUTPUTS DIFFER FROM PLAIN DECODING in ${mismatches.length} task(s): speculation changed the answer, which is a bug`);
    return {
      version: 1,
      date: new Date().toISOString(),
      quick: params.quick,
      machine,
      params: shown,
      task_source: { from: env.files.length > 0 ? 'workspace' : 'bundled samples', files: files.length, languages: count(fim.map((t) => t.languageId)), kinds: count(fim.map((t) => t.kind)) },
      bound,
      fp8_head: fp8HeadLine(report),
      results,
      typing,
      identical_to_plain: mismatches.length === 0,
      mismatches,
      llama_cpp: peer,
      warnings,
      wall_s: (performance.now() - t0) / 1000,
    };
  } finally {
    await llama?.close().catch(() => undefined);
    await releaseLlamaCpp().catch(() => undefined);
    await Promise.all(configs.map((c) => c.source.stop?.().catch(() => undefined)));
  }
}

/** Waits until the source is ready (the engine loaded and the server's read of the model done) or has failed. */
async function readyOrFailed(source: CompletionSource, waitMs: number): Promise<boolean> {
  const until = performance.now() + waitMs;
  while (performance.now() < until) {
    if (await source.ready(Math.min(1000, until - performance.now()))) return true;
    if (source.status.state === 'error') return false;
    await sleep(100);
  }
  return false;
}

/** One greedy generation of `task` on `c`, run to max tokens or a stop token (no deadline, no early stop: every configuration makes the same tokens). */
async function generate(c: Config, task: GenTask, maxTokens: number): Promise<GenRecord> {
  const started = performance.now();
  const result = await c.source.complete({
    prefix: task.prefix,
    suffix: task.suffix,
    path: task.path,
    extra: [],
    maxTokens,
    temperature: 0,
    deadlineMs: 60_000,
    signal: new AbortController().signal,
  });
  return { text: result.text, result, wallMs: performance.now() - started };
}

function summarize(c: Config, records: GenRecord[], tasks: GenTask[], base: GenRecord[] | undefined, bound: BoundResult | undefined): ConfigurationResult {
  const empty = distribution([]);
  const row: ConfigurationResult = {
    configuration: c.name, tasks: records.length, output_tokens: 0, ttft_ms: empty, prompt_tokens: 0, prompt_tokens_reused: 0,
    ms_per_token: empty, effective_ms_per_token: NaN, tokens_per_s: NaN, accepted_per_step: NaN,
  };
  if (c.error) return { ...row, error: c.error };
  const spec = (c.report?.speculation ?? undefined) as { mode?: string; drafters?: { name: string }[] } | undefined;
  if (spec) row.active = `${spec.mode ?? c.name}${spec.drafters?.length ? ` (${spec.drafters.map((d) => d.name).join(', ')})` : ''}`;
  const m = records.map((r) => r.result.metrics);
  row.output_tokens = m.reduce((n, x) => n + (x.tokens ?? 0), 0);
  row.ttft_ms = distribution(m.map((x) => x.ttftMs ?? NaN));
  row.prompt_tokens = m.reduce((n, x) => n + (x.promptTokens ?? 0), 0);
  row.prompt_tokens_reused = m.reduce((n, x) => n + (x.reusedTokens ?? 0), 0);
  row.ms_per_token = distribution(m.filter((x) => (x.tokens ?? 0) > 1).map((x) => x.decodeMsPerToken ?? NaN));
  row.effective_ms_per_token = records.reduce((n, r) => n + r.wallMs, 0) / Math.max(1, row.output_tokens);
  row.tokens_per_s = 1000 / row.ms_per_token.mean;
  // Tokens made by decode steps (all but the first) per step, over all tasks.
  const steps = m.reduce((n, x) => n + (x.steps ?? 0), 0);
  const decoded = m.reduce((n, x) => n + (x.steps ? (x.acceptedPerStep ?? 1) * x.steps : 0), 0);
  row.accepted_per_step = steps > 0 ? decoded / steps : NaN;
  if (bound && c.name !== 'remote') row.bound_fraction = bound.bound_ms_per_token / row.ms_per_token.mean;
  if (tasks.some((t) => t.middle !== undefined)) {
    const judged = records.map((r, i) => {
      const t = tasks[i];
      const shown = sameLines(postprocess(r.text, filterContext(t.prefix, t.suffix, t.languageId)), t.middle ?? '');
      return { exact: exactMatch(shown, t.middle ?? ''), similarity: editSimilarity(shown, t.middle ?? '') };
    });
    row.exact_match = mean(judged.map((j) => (j.exact ? 1 : 0)));
    row.edit_similarity = mean(judged.map((j) => j.similarity));
  }
  if (base) {
    const same = records.filter((r, i) => r.text === base[i]?.text).length;
    row.identical_to_plain = { same, of: records.length, all: same === records.length };
  }
  return row;
}

interface PeerRecord {
  ours: GenRecord;
  prompt: number;
  theirs: PeerRun;
  /** Leading tokens of llama.cpp's output whose text Runahead's text starts with. */
  agreed: number;
}

/** How many of `tokens` (llama.cpp's) agree with `text` (ours): the longest run whose decoded text `text` starts with; all of them and the same length when equal. */
export function agreedTokens(tokens: number[], text: string, decode: (ids: number[]) => string): number {
  let n = 0;
  while (n < tokens.length && text.startsWith(decode(tokens.slice(0, n + 1)))) n++;
  return n;
}

function summarizePeer(peer: LlamaCppResult, runs: PeerRecord[]): void {
  const oursPrefill = runs.map((r) => ({ tokens: (r.ours.result.metrics.promptTokens ?? 0) - (r.ours.result.metrics.reusedTokens ?? 0), ms: r.ours.result.metrics.prefillMs ?? NaN }));
  const rate = (xs: { tokens: number; ms: number }[]) => (1000 * xs.reduce((n, x) => n + x.tokens, 0)) / xs.reduce((n, x) => n + x.ms, 0);
  peer.tasks = runs.length;
  peer.prefill_tokens_per_s = rate(runs.map((r) => ({ tokens: r.prompt, ms: r.theirs.prefill_ms })));
  peer.decode_ms_per_token = distribution(runs.map((r) => r.theirs.decode_ms_per_token));
  peer.wall_decode_ms_per_token = distribution(runs.map((r) => r.theirs.wall_decode_ms_per_token));
  peer.runahead_prefill_tokens_per_s = rate(oursPrefill);
  peer.runahead_decode_ms_per_token = distribution(runs.filter((r) => (r.ours.result.metrics.tokens ?? 0) > 1).map((r) => r.ours.result.metrics.decodeMsPerToken ?? NaN));
  peer.prefill_ratio = peer.runahead_prefill_tokens_per_s / peer.prefill_tokens_per_s;
  peer.decode_ratio = peer.decode_ms_per_token.mean / peer.runahead_decode_ms_per_token.mean;
  const same = (r: PeerRecord) => r.agreed === r.theirs.tokens.length && r.ours.result.metrics.tokens === r.theirs.tokens.length;
  peer.same_output = { same: runs.filter(same).length, of: runs.length, diverged_at: runs.filter((r) => !same(r)).map((r) => r.agreed) };
}

/** The read bandwidth and the bound of one token per step, from `runahead-engine bench` on the same model and backend. */
async function measureBound(settings: Settings, report: LoadReport): Promise<BoundResult> {
  const engine = await locateEngine(settings.enginePath);
  if (!report.model) throw new Error('the load report names no model');
  const args = ['bench', '--model', report.model, '--tokens', '32', '--json', ...(report.backend === 'cuda' ? ['--backend', 'cuda'] : report.threads ? ['--threads', String(report.threads)] : [])];
  const { stdout } = await promisify(execFile)(engine.path, args, { timeout: 300_000, maxBuffer: 16 << 20 });
  const line = stdout.trim().split('\n').reverse().find((l) => l.startsWith('{'));
  if (!line) throw new Error(`${engine.path} ${args.join(' ')} printed no JSON`);
  // The CPU bench measures read bandwidth; the CUDA bench the device-to-device copy bandwidth.
  const b = JSON.parse(line) as { weight_bytes?: number; read_bandwidth_gb_s?: number; copy_bandwidth_gb_s?: number; bound_ms_per_token?: number; backend?: string };
  const weight = b.weight_bytes ?? (report.weight_bytes as number | undefined);
  const bandwidth = b.read_bandwidth_gb_s ?? b.copy_bandwidth_gb_s;
  if (!weight || !bandwidth) throw new Error('runahead-engine bench printed no weight_bytes or bandwidth (read_bandwidth_gb_s, copy_bandwidth_gb_s)');
  return { weight_bytes: weight, read_bandwidth_gb_s: bandwidth, bound_ms_per_token: b.bound_ms_per_token ?? weight / (bandwidth * 1e6), backend: b.backend ?? report.backend ?? 'cpu', source: `runahead-engine ${args.join(' ')}` };
}

/**
 * Types the middle of a file key by key into a Completer on each configuration,
 * as the editor does: an automatic completion after each key, the previous one
 * cancelled, the next key `typingIntervalMs` later whether or not it answered.
 */
async function typingReplay(configs: Config[], files: SourceFile[], params: BenchmarkParams, log: Log, check: () => void, step: (m: string) => void): Promise<TypingResult[]> {
  const file = [...files].sort((a, b) => b.text.length - a.text.length)[0];
  const start = file.text.lastIndexOf('\n', Math.floor(file.text.length * 0.4)) + 1;
  const end = Math.min(file.text.length, start + params.typingKeys);
  const out: TypingResult[] = [];
  for (const c of configs) {
    const row: TypingResult = {
      configuration: c.name, keys: 0, shown: 0, from_engine: 0, from_cache: 0, from_prefetch: 0, skipped: 0, cancelled: 0,
      keystroke_to_ghost_ms: distribution([]), engine_ms_per_token: distribution([]), prompt_tokens: 0, prompt_tokens_reused: 0,
    };
    if (c.error) {
      out.push({ ...row, error: c.error });
      continue;
    }
    const completer = new Completer({ source: () => c.source, settings: () => c.settings, log });
    const latencies: number[] = [];
    const perToken: number[] = [];
    const pending: Promise<void>[] = [];
    let previous: AbortController | undefined;
    const uri = `bench-typing:${file.path}`;
    for (let at = start + 1; at <= end; at++) {
      check();
      const text = file.text.slice(0, at) + file.text.slice(end);
      completer.debounce.keystroke();
      previous?.abort();
      const abort = new AbortController();
      previous = abort;
      const answer = completer.complete({ uri, text, offset: at, languageId: file.languageId, path: file.path, trigger: 'automatic', signal: abort.signal }).then((r) => {
        row.keys++;
        if (r.finish === 'skipped') row.skipped++;
        else if (r.finish === 'cancelled' || abort.signal.aborted) row.cancelled++;
        else if (r.text && r.metrics) {
          row.shown++;
          latencies.push(r.metrics.servedMs);
          if (r.metrics.source === 'engine') {
            row.from_engine++;
            if (r.metrics.decodeMsPerToken !== undefined && (r.metrics.tokens ?? 0) > 1) perToken.push(r.metrics.decodeMsPerToken);
            row.prompt_tokens += r.metrics.promptTokens ?? 0;
            row.prompt_tokens_reused += r.metrics.reusedTokens ?? 0;
          } else if (r.metrics.source === 'cache') row.from_cache++;
          else row.from_prefetch++;
        }
      });
      pending.push(answer);
      const asked = performance.now();
      await Promise.race([answer, sleep(params.typingIntervalMs)]);
      const left = params.typingIntervalMs - (performance.now() - asked);
      if (left > 0) await sleep(left);
      step(`${workloadTitles.typing}: ${c.name} key ${at - start}/${end - start}`);
    }
    await Promise.all(pending);
    completer.cancelAll();
    row.keystroke_to_ghost_ms = distribution(latencies);
    row.engine_ms_per_token = distribution(perToken);
    out.push(row);
  }
  return out;
}

/** Which lm_head this run measured, and how to measure the other: the fp8 head is a GPU load option (runahead.weights). */
function fp8HeadLine(report: LoadReport | undefined): string {
  const head = String((report?.optimizations as Record<string, unknown> | undefined)?.lm_head ?? 'as stored');
  if (report?.backend !== 'cuda') return `FP8 lm_head on/off: a GPU option (runahead.weights fp8-lm-head); this ${report?.backend ?? 'engine'} run measured the head ${head}`;
  return `FP8 lm_head: this run measured the head ${head}; for the other, set runahead.weights to ${/F8/.test(head) ? 'auto' : 'fp8-lm-head'} and run again (runahead-engine bench --backend cuda --lm-head fp8 compares bytes per step and ms/token side by side)`;
}
