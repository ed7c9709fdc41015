// Accuracy against the reference implementation: the embedded model exported to GGUF
// (server/src/bench/gguf.ts) runs in llama.cpp (node-llama-cpp, the benchmark's peer) and in
// Runahead (the real engine, CPU), on real code prompts (this repository's sources): greedy
// 64-token continuations, and top-1 choices teacher-forced on llama.cpp's continuation.
//
// The embedded model ships in Q8_0; its GGUF is written three ways: as stored (the shipped Q8_0
// blocks), with every matrix widened exactly to F32 (no quantization on either side), and in
// llama.cpp's Q4_K_M mix of Q4_K and Q6_K blocks. Its rows of 384 are not whole blocks of 256,
// so for Q4_K_M the model is first widened without changing what it computes
// (server/src/bench/paddedGguf.ts: hidden 768, q heads in whole groups over new zero key/value
// heads, RMSNorms rescaled; checked below: Runahead continues every prompt token for token as
// the original F32 model does), then quantized: a trained model in Q4_K/Q6_K.
// llama.cpp runs with its most exact attention (LlamaCppPeer's exactAttention: F32 KV cache,
// no flash attention), as ours is: its default F16 cache rounds K, V, q and the attention
// weights to f16, which is llama.cpp's own precision, not the arithmetic under test.
// Measured (20 runs, the 17M-parameter v2 model, issue 12): F32 greedy runs identical 20/20
// (19/20 with llama.cpp's F16 cache), log-probs within 6e-5, top-1 100%; Q8_0 17-18/20 (16/20
// with the F16 cache), top-1 99.69-99.92%; Q4_K_M (widened) 17-18/20, top-1 99.53-99.69% (the ranges
// span changes of the CPU's summation orders: the same runs part at other near-ties). Tried on
// 2026-12-05 on top of the RMSNorm's f32 squares (llama.cpp's), each moving the two counts
// within 15-19/20 with no consistent gain, so not kept: RoPE angles by llama.cpp's recurrence
// (Q8_0 19, Q4_K_M 15), with Q8_0 rows in tinyBLAS's one-chain order too (17, 15), ggml's expf
// in SwiGLU instead (18, 17). Why the quantized
// types stay below 95%: int8 activations (llama.cpp's quantize_row_q8_0 and q8_K, which
// ours follow step for step, f16 scale included) turn last-bit differences of float summation
// order into whole quantization steps. A 1e-7 relative perturbation of every matmul output
// moves this model's log-probs by up to 0.03 (a numpy emulation of the forward), and
// Runahead's own AVX-512 and portable kernel tables, which differ only in summation order,
// agree on 15/20 Q8_0 runs and 20/20 F32 runs. Agreeing at near-ties would take ggml's float
// order in every op (matmul lanes, rope's float recurrences, its expf polynomial, softmax),
// not a fix of the arithmetic. The counts also move with the host: on 2026-12-07's AVX2-only
// host Q8_0 15-16/20 and Q4_K_M 14-15/20, and llama.cpp's builds pick other kernels on other
// CPUs: a floor on identical runs near the measured counts (it was 15/20) is not a stable test. Where
// two runs part, llama.cpp's own probabilities there (its softmax, one batch from an empty cache)
// put the two tokens 0.0013-0.13 nats apart on that host (p ratios up to 1.14), and at three of
// eleven partings llama.cpp's own greedy token was the less likely one by its batch
// probabilities (-0.006 to -0.020): near-ties on which llama.cpp's decode and prefill disagree too.
// What is asserted: top-1 >= 99% for each type; F32 runs >= 95% identical; for Q8_0 and Q4_K_M,
// at least 95% of runs identical or parting at a near-tie (llama.cpp's log-prob gap between its
// token and ours below NEAR_TIE nats, twice the largest seen; a wrong op would part runs where
// llama.cpp is sure), and at least half identical.
import { strict as assert } from 'node:assert';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeGguf } from '../../server/src/bench/gguf';
import { writePaddedGguf } from '../../server/src/bench/paddedGguf';
import { findPeer, LlamaCppPeer, releaseLlamaCpp } from '../../server/src/bench/peer';
import { EngineConnection } from '../../server/src/engine/connection';
import { loadGgufTokenizer } from '../../server/src/model/ggufTokenizer';
import { engineBinary, repoRoot } from './lspClient';

const TOKENS = 64;
/** Nats between llama.cpp's log-probs of its token and ours, below which a parting is a near-tie. */
const NEAR_TIE = 0.25;
const embedded = join(repoRoot, 'engine', 'models', 'runahead-coder');

/** 20 prompts of real code: the first 40 lines of source files of this repository. */
const PROMPT_FILES = [
  'server/src/engine/connection.ts', 'server/src/model/modelInfo.ts', 'server/src/completion/fim.ts', 'server/src/bench/peer.ts',
  'server/src/model/folderWatch.ts', 'server/src/engine/locate.ts', 'server/src/chat/template.ts', 'server/src/model/modelFiles.ts',
  'engine/src/model/tensor.cpp', 'engine/src/cpu/matmul.cpp', 'engine/src/model/layout.cpp', 'engine/src/cpu/quant_matvec.cpp',
  'engine/src/model/gguf_weights.cpp', 'engine/src/runtime/sampler.cpp', 'engine/src/model/q8_0_pairs.cpp', 'engine/src/cpu/rmsnorm.cpp',
  'engine/train/model.py', 'engine/setup.mjs', 'esbuild.mjs', 'test/run.mjs',
];

interface Agreement {
  identicalRuns: number;
  runs: number;
  /** Per run that differs: ln p(llama.cpp's token) - ln p(ours) in llama.cpp's own probabilities where the two first part. */
  gaps: number[];
  top1: number;
  detail: string[];
  /** Runahead's greedy continuation of each prompt. */
  ours: number[][];
}

/** The prompts' token ids under `file`'s own tokenizer. */
async function prompts(file: string): Promise<{ prompts: number[][]; eos?: number }> {
  const { tokenizer, eos } = await loadGgufTokenizer(file);
  const text = (name: string) => readFileSync(join(repoRoot, name), 'utf8').split('\n').slice(0, 40).join('\n') + '\n';
  return { prompts: PROMPT_FILES.map((name) => tokenizer.encode(text(name))), eos };
}

/** Runahead (the real engine, CPU) on `file`: `next(prompt, n)` is its greedy continuation. */
async function runaheadOn(file: string): Promise<{ next: (prompt: number[], n: number) => Promise<number[]>; close: () => Promise<void> }> {
  const engine = new EngineConnection(engineBinary, [], () => undefined);
  await engine.hello();
  await engine.load(file, { backend: 'cpu', threads: 2, speculation: 'off', context_length: 1024 }, () => undefined);
  return {
    next: async (prompt, maxTokens) => {
      const tokens: number[] = [];
      await engine.generate(prompt, { max_tokens: maxTokens, temperature: 0 }, (m) => tokens.push(...m.tokens)).done;
      return tokens;
    },
    close: () => engine.shutdown(),
  };
}

/** Runahead and llama.cpp on `file`: identical greedy runs and teacher-forced top-1 agreement. */
async function compare(entry: string, file: string): Promise<Agreement> {
  const peer = await LlamaCppPeer.open(entry, file, { threads: 2, contextSize: 1024, gpu: false, exactAttention: true });
  const runahead = await runaheadOn(file);
  try {
    const { prompts: all, eos } = await prompts(file);
    const out: Agreement = { identicalRuns: 0, runs: 0, gaps: [], top1: 0, detail: [], ours: [] };
    let agree = 0;
    let positions = 0;
    for (const [k, prompt] of all.entries()) {
      const theirs = (await peer.generate(prompt, TOKENS, eos === undefined ? [] : [eos])).tokens;
      const ours = await runahead.next(prompt, TOKENS);
      out.ours.push(ours);
      const differs = ours.length !== theirs.length || ours.some((t, i) => t !== theirs[i]);
      out.runs++;
      if (!differs) out.identicalRuns++;
      else {
        // Where the runs part (a token against the other's end of text, if one stopped first),
        // how far apart llama.cpp itself puts the two choices.
        const at = Math.min(...[ours.findIndex((t, i) => t !== theirs[i]), ours.length, theirs.length].filter((i) => i >= 0));
        const chose = (run: number[]) => (at < run.length ? run[at] : eos);
        const p = await peer.nextProbabilities([...prompt, ...theirs.slice(0, at)]);
        const [a, b] = [chose(theirs), chose(ours)];
        const gap = a === undefined || b === undefined ? Infinity : Math.log(p.get(a) ?? 0) - Math.log(p.get(b) ?? 0);
        out.gaps.push(gap);
        out.detail.push(`${PROMPT_FILES[k]}: differs at token ${at}, llama.cpp's log-prob gap there ${gap.toFixed(4)}`);
      }
      // Teacher-forced on llama.cpp's text: both choose the next token after every prefix.
      const forced = [...prompt, ...theirs];
      const reference = await peer.nextTokens(forced, prompt.length - 1);
      for (let i = 0; i < theirs.length; i++) {
        positions++;
        if ((await runahead.next(forced.slice(0, prompt.length + i), 1))[0] === reference[i]) agree++;
      }
    }
    out.top1 = agree / positions;
    return out;
  } finally {
    await peer.close();
    await runahead.close();
  }
}

describe('accuracy against llama.cpp (node-llama-cpp) on the same GGUF', function () {
  // About 5 minutes on 2 idle cores; over 10 when others share them (two runs timed out at 10).
  this.timeout(1_500_000);
  let dir: string;
  let entry: string | undefined;

  before(function () {
    entry = findPeer(repoRoot);
    if (!entry || !existsSync(engineBinary)) this.skip();
    dir = mkdtempSync(join(tmpdir(), 'runahead-accuracy-'));
  });
  after(async () => {
    await releaseLlamaCpp();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it(`Q8_0, Q4_K_M and F32: teacher-forced top-1 >= 99%; greedy ${TOKENS}-token runs: F32 >= 95% identical, Q8_0 and Q4_K_M >= 95% identical or parting at a near-tie and >= 50% identical`, async () => {
    const q8 = await compare(entry!, writeGguf(embedded, join(dir, 'coder-q8_0.gguf')).path);
    const q4km = await compare(entry!, writePaddedGguf(embedded, join(dir, 'coder-widened-q4_k_m.gguf')).path);
    const f32 = await compare(entry!, writeGguf(embedded, join(dir, 'coder-f32.gguf'), { matrices: 'f32' }).path);
    const line = (name: string, a: Agreement) =>
      `${name}: greedy runs identical ${a.identicalRuns}/${a.runs}, the others parting at log-prob gaps ${a.gaps.map((g) => g.toFixed(4)).join(', ') || '-'}, teacher-forced top-1 ${(100 * a.top1).toFixed(2)}%`;
    console.log(`      ${line('Q8_0', q8)}\n      ${line('Q4_K_M (widened)', q4km)}\n      ${line('F32', f32)}`);
    for (const [name, a] of [['Q8_0', q8], ['Q4_K_M (widened)', q4km], ['F32', f32]] as const) {
      assert.ok(a.top1 >= 0.99, `${line(name, a)}; ${a.detail.join('; ')}`);
    }
    assert.ok(f32.identicalRuns >= 0.95 * f32.runs, `${line('F32', f32)}: ${f32.detail.join('; ')}`);
    for (const [name, a] of [['Q8_0', q8], ['Q4_K_M (widened)', q4km]] as const) {
      const nearTies = a.gaps.filter((g) => g < NEAR_TIE).length;
      assert.ok(a.identicalRuns + nearTies >= 0.95 * a.runs, `${line(name, a)}: ${a.runs - a.identicalRuns - nearTies} run(s) part where llama.cpp is sure (gap >= ${NEAR_TIE}): ${a.detail.join('; ')}`);
      assert.ok(a.identicalRuns >= 0.5 * a.runs, `${line(name, a)}: ${a.detail.join('; ')}`);
    }
    // The widening alone (F32) changes nothing Runahead says: the Q4_K_M file is the trained model, quantized.
    const widened = await runaheadOn(writePaddedGguf(embedded, join(dir, 'coder-widened-f32.gguf'), { matrices: 'f32' }).path);
    try {
      const { prompts: all } = await prompts(join(dir, 'coder-f32.gguf'));
      for (const [k, prompt] of all.entries()) {
        assert.deepEqual(await widened.next(prompt, TOKENS), f32.ours[k], `${PROMPT_FILES[k]}: the widened F32 model continues differently`);
      }
    } finally {
      await widened.close();
    }
  });
});
