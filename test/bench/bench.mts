// `npm run bench`: the benchmark of the "Runahead: Run Benchmark" command, in
// this process, on this repository's own code (git-tracked files), every
// speculation mode, the typing replay, long generation, synthetic prompts,
// and llama.cpp (node-llama-cpp, a devDependency) on the same model as GGUF.
// Prints the tables; writes JSON and Markdown when asked.
//
//   npm run bench -- [--quick] [--json FILE] [--markdown FILE] [--model DIR] [--engine PATH]
//                    [--backend auto|cpu|cuda] [--configurations off,lookup,mtp,draft,auto]
//                    [--workloads fim,typing,agent,synthetic] [--tasks N] [--max-tokens N] [--seed N] [--no-peer]
//                    [--threads N]   (both engines: Runahead through RUNAHEAD_THREADS, llama.cpp the same)
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gguf } from '@huggingface/gguf';
import { defaultParams, runBenchmark, type Configuration, type Workload } from '../../server/src/bench/benchmark';
import { workspaceFiles } from '../../server/src/bench/files';
import { findPeer } from '../../server/src/bench/peer';
import { renderMarkdown, renderText } from '../../server/src/bench/report';
import { readSettings, type Backend } from '../../server/src/settings';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const argv = process.argv.slice(2);
const arg = (name: string): string | undefined => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
};
const flag = (name: string) => argv.includes(`--${name}`);

const params = defaultParams(flag('quick'));
if (arg('configurations')) params.configurations = arg('configurations')!.split(',') as Configuration[];
if (arg('workloads')) params.workloads = arg('workloads')!.split(',') as Workload[];
if (arg('tasks')) params.tasks = Number(arg('tasks'));
if (arg('max-tokens')) params.maxTokens = Number(arg('max-tokens'));
if (arg('seed')) params.seed = Number(arg('seed'));
if (arg('threads')) process.env.RUNAHEAD_THREADS = arg('threads');
if (!flag('no-peer')) params.peerEntry = findPeer(root);
params.cacheDir = join(root, 'test', 'artifacts', 'bench');

const settings = readSettings({ modelPath: arg('model') ?? '', enginePath: arg('engine') ?? process.env.RUNAHEAD_ENGINE ?? '', backend: (arg('backend') ?? 'auto') as Backend });
const files = await workspaceFiles(root);
const quiet = flag('quiet');
let last = 0;
const result = await runBenchmark(params, {
  settings,
  files,
  log: (level, line) => {
    if (level !== 'info' && !quiet) process.stderr.write(`[${level}] ${line}\n`);
  },
  onProgress: (p) => {
    if (quiet || Date.now() - last < 2000) return;
    last = Date.now();
    process.stderr.write(`[${p.done}/${p.total}${p.eta_s === undefined ? '' : `, ${Math.round(p.eta_s)} s left`}] ${p.message}\n`);
  },
});

// The peer's GGUF, read back by another implementation of the format.
if (result.llama_cpp.gguf) {
  const { metadata, tensorInfos } = await gguf(result.llama_cpp.gguf, { allowLocalFile: true });
  const tokens = (metadata as Record<string, unknown>)['tokenizer.ggml.tokens'] as unknown[] | undefined;
  result.llama_cpp.detail = `GGUF read back by @huggingface/gguf: ${metadata['general.architecture']}, ${tensorInfos.length} tensors, ${tokens?.length ?? 0} tokens`;
}

console.log(renderText(result));
const json = arg('json');
if (json) writeFileSync(json, `${JSON.stringify(result, null, 1)}\n`);
const md = arg('markdown');
if (md) writeFileSync(md, renderMarkdown(result));
// node-llama-cpp keeps handles open after dispose.
process.exit(result.identical_to_plain ? 0 : 1);
