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
  // Per round: ours and llama.cpp's decode, and the bound of that round's own bandwidth sweep.
  // A shared host's bandwidth moves between rounds (35 and 68 GB/s minutes apart have been seen),
  // so each round's decode is set against its own bound and the peer's decode of that round.
  const rows: { decode: number; bound: number; bandwidth: number; prefill: number; peerDecode: number; peerPrefill: number }[] = [];
  let bytes = 0;
  let simd = '';
  for (let r = 0; r < rounds; r++) {
    const report = JSON.parse(execFileSync(engine, ['bench', '--model', file, '--ctx', String(ctx), '--tokens', String(tokens), '--threads', String(threads), '--json'], { encoding: 'utf8', maxBuffer: 1 << 24 }));
    bytes = report.weight_bytes;
    simd = report.optimizations?.quantized_simd ?? report.simd;
    const run = await peer.generate(prompt, tokens, []);
    rows.push({
      decode: report.decode_ms_per_token, bound: report.bound_ms_per_token, bandwidth: report.read_bandwidth_gb_s,
      prefill: report.prefill_tokens_per_s, peerDecode: run.decode_ms_per_token, peerPrefill: (1000 * run.prompt_tokens) / run.prefill_ms,
    });
  }
  await peer.close();
  const m = (f: (row: (typeof rows)[number]) => number) => median(rows.map(f));
  console.log(`${shape} ${quant}: ${(bytes / 1e6).toFixed(0)} MB read per token, ${threads} threads, quantized kernels ${simd}, ${rounds} interleaved rounds`);
  for (const [i, row] of rows.entries())
    console.log(`  round ${i + 1}: decode ${row.decode.toFixed(1)} ms/token (${((100 * row.bound) / row.decode).toFixed(0)}% of ${row.bound.toFixed(1)} ms at ${row.bandwidth.toFixed(1)} GB/s), llama.cpp ${row.peerDecode.toFixed(1)} (${(row.peerDecode / row.decode).toFixed(2)}x); prefill ${row.prefill.toFixed(0)} / ${row.peerPrefill.toFixed(0)} tokens/s`);
  console.log(`  decode   Runahead ${m((r) => r.decode).toFixed(1)} ms/token   llama.cpp ${m((r) => r.peerDecode).toFixed(1)} ms/token   medians of the rounds: ${m((r) => (100 * r.bound) / r.decode).toFixed(0)}% of the round's bound (${m((r) => r.bound).toFixed(1)} ms/token, ${m((r) => r.bandwidth).toFixed(1)} GB/s), ${m((r) => r.peerDecode / r.decode).toFixed(2)}x llama.cpp's speed`);
  console.log(`  prefill  Runahead ${m((r) => r.prefill).toFixed(0)} tokens/s   llama.cpp ${m((r) => r.peerPrefill).toFixed(0)} tokens/s (${ctx} tokens)   ${m((r) => r.prefill / r.peerPrefill).toFixed(2)}x`);
}
await releaseLlamaCpp();
