// `npm run bench:quant`: CPU speed of Runahead and llama.cpp (node-llama-cpp 3.21.1, the
// benchmark's peer) on the same random-weight GGUF files, Q8_0 and Q4_K_M, in interleaved
// rounds: decode ms/token and prefill tokens/s of each (llama.cpp's own counters; the
// engine's `bench` command), next to the read-bandwidth bound the engine measures.
//
//   npm run bench:quant -- [--rounds N] [--ctx N] [--tokens N] [--threads N] [--engine PATH]
//                          [--cases qwen2.5-coder-0.5b:q8_0,qwen2.5-coder-1.5b:q4_k_m]
// The files are cached under test/artifacts/bench/.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findPeer, LlamaCppPeer, releaseLlamaCpp } from '../../server/src/bench/peer';
import { writeRandomGguf, type RandomQuant } from '../../server/src/bench/randomGguf';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const argv = process.argv.slice(2);
const arg = (name: string, fallback: string): string => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : fallback;
};
const rounds = Number(arg('rounds', '3'));
const ctx = Number(arg('ctx', '128'));
const tokens = Number(arg('tokens', '16'));
const threads = Number(arg('threads', '2'));
const engine = arg('engine', process.env.RUNAHEAD_ENGINE ?? join(root, 'engine', 'build', 'runahead-engine'));
const cases = arg('cases', 'qwen2.5-coder-0.5b:q8_0,qwen2.5-coder-1.5b:q4_k_m').split(',').map((c) => c.split(':') as [string, RandomQuant]);
const entry = findPeer(root);
if (!entry) throw new Error('node-llama-cpp is not installed (npm install)');
const cache = join(root, 'test', 'artifacts', 'bench');
mkdirSync(cache, { recursive: true });

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const prompt = Array.from({ length: ctx }, (_, i) => 300 + ((i + 1) * 7919) % 14000);

for (const [shape, quant] of cases) {
  const file = join(cache, `random-${shape}-${quant}.gguf`);
  if (!existsSync(file)) writeRandomGguf(file, shape, quant, join(root, 'engine', 'models', 'runahead-coder'));
  const peer = await LlamaCppPeer.open(entry, file, { threads, contextSize: ctx + tokens + 8, gpu: false });
  const ours: { decode: number[]; prefill: number[]; bound: number; bandwidth: number; bytes: number; simd: string } = { decode: [], prefill: [], bound: 0, bandwidth: 0, bytes: 0, simd: '' };
  const theirs: { decode: number[]; prefill: number[] } = { decode: [], prefill: [] };
  for (let r = 0; r < rounds; r++) {
    const report = JSON.parse(execFileSync(engine, ['bench', '--model', file, '--ctx', String(ctx), '--tokens', String(tokens), '--threads', String(threads), '--json'], { encoding: 'utf8', maxBuffer: 1 << 24 }));
    ours.decode.push(report.decode_ms_per_token);
    ours.prefill.push(report.prefill_tokens_per_s);
    // The strictest bound of the rounds: the fastest sweep this shared machine gave.
    if (!ours.bound || report.bound_ms_per_token < ours.bound)
      Object.assign(ours, { bound: report.bound_ms_per_token, bandwidth: report.read_bandwidth_gb_s });
    Object.assign(ours, { bytes: report.weight_bytes, simd: report.optimizations?.quantized_simd ?? report.simd });
    const run = await peer.generate(prompt, tokens, []);
    theirs.decode.push(run.decode_ms_per_token);
    theirs.prefill.push((1000 * run.prompt_tokens) / run.prefill_ms);
  }
  await peer.close();
  const [d, D] = [median(ours.decode), median(theirs.decode)];
  const [p, P] = [median(ours.prefill), median(theirs.prefill)];
  console.log(`${shape} ${quant}: ${(ours.bytes / 1e6).toFixed(0)} MB read per token, ${threads} threads, quantized kernels ${ours.simd}, ${rounds} interleaved rounds (medians)`);
  console.log(`  decode   Runahead ${d.toFixed(1)} ms/token   llama.cpp ${D.toFixed(1)} ms/token   bound ${ours.bound.toFixed(1)} ms/token at ${ours.bandwidth.toFixed(1)} GB/s   Runahead at ${((100 * ours.bound) / d).toFixed(0)}% of the bound, ${(D / d).toFixed(2)}x llama.cpp's speed`);
  console.log(`  prefill  Runahead ${p.toFixed(0)} tokens/s   llama.cpp ${P.toFixed(0)} tokens/s (${ctx} tokens)   ${(p / P).toFixed(2)}x`);
}
await releaseLlamaCpp();
