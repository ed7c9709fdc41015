import { strict as assert } from 'node:assert';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gguf } from '@huggingface/gguf';
import { agreedTokens, defaultParams, runBenchmark, type BenchmarkResult, type Configuration } from '../../server/src/bench/benchmark';
import { isReserved, reservedPackages, workspaceFiles } from '../../server/src/bench/files';
import { findPeer, LlamaCppPeer, parsePerfLines, releaseLlamaCpp } from '../../server/src/bench/peer';
import { quantizeQ8_0, writeGguf } from '../../server/src/bench/gguf';
import { paddedShape, quantizeQ4_K, quantizeQ6_K, writePaddedGguf } from '../../server/src/bench/paddedGguf';
import { renderIssue, renderMarkdown, renderText } from '../../server/src/bench/report';
import { bundledSamples } from '../../server/src/bench/samples';
import { distribution, editDistance, editSimilarity, exactMatch, percentile } from '../../server/src/bench/stats';
import { candidates, cursorKinds, cutTasks, sameLines } from '../../server/src/bench/tasks';
import type { CompletionSource, SourceRequest } from '../../server/src/completion/source';
import { defaultSettings } from '../../server/src/settings';

describe('benchmark stats', () => {
  it('takes nearest-rank percentiles and ignores non-finite values', () => {
    const xs = [5, 1, 4, 2, 3, 6, 7, 8, 9, 10];
    assert.equal(percentile(xs, 0.5), 5);
    assert.equal(percentile(xs, 0.9), 9);
    assert.equal(percentile([7], 0.9), 7);
    assert.ok(Number.isNaN(percentile([], 0.5)));
    assert.deepEqual(distribution([1, 2, 3, NaN]), { n: 3, mean: 2, p50: 2, p90: 3 });
  });

  it('measures edit similarity and exact match against the real middle', () => {
    assert.equal(editDistance('kitten', 'sitting'), 3);
    assert.equal(editSimilarity('', ''), 1);
    assert.equal(editSimilarity('abc', 'abc'), 1);
    assert.equal(editSimilarity('abc', 'xyz'), 0);
    assert.equal(editSimilarity('return a + b;', 'return a - b;'), 1 - 1 / 13);
    assert.ok(exactMatch('x = 1;  \n', 'x = 1;'));
    assert.ok(!exactMatch('x = 2;', 'x = 1;'));
    assert.equal(sameLines('a\nb\nc', '\nnext'), 'a\nb');
  });
});

describe('benchmark tasks', () => {
  const file = (path: string, languageId: string, text: string) => ({ path, languageId, text });
  const ts = bundledSamples[0];

  it('cuts the same tasks for the same seed, each kind of cursor, and prefix + middle + suffix is the file', () => {
    const a = cutTasks(bundledSamples, 12, 7);
    const b = cutTasks(bundledSamples, 12, 7);
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, cutTasks(bundledSamples, 12, 8));
    assert.equal(a.length, 12);
    assert.deepEqual(new Set(a.map((t) => t.kind)), new Set(cursorKinds));
    assert.deepEqual(new Set(a.map((t) => t.languageId)), new Set(['typescript', 'python', 'go', 'rust']));
    for (const t of a) {
      const text = bundledSamples.find((f) => f.path === t.file)!.text;
      assert.equal(t.prefix + t.middle + t.suffix, text);
      assert.ok(t.middle.trim().length > 0, `${t.file}:${t.line} has an empty middle`);
    }
  });

  it('puts each kind of cursor where a user would have it', () => {
    const lines = ts.text.split('\n');
    for (const c of candidates(lines, 'after-bracket')) assert.match(lines[c.line][c.col - 1], /[([{]/);
    for (const c of candidates(lines, 'end-of-line')) assert.equal(c.col, lines[c.line].length);
    for (const c of candidates(lines, 'blank-in-block')) assert.equal(c.col, lines[c.line].length - lines[c.line].trimStart().length);
    for (const c of candidates(lines, 'mid-expression')) assert.ok(c.col > 0 && c.col < lines[c.line].length - 3);
    // end-of-line: the middle is the next line, newline first.
    const eol = cutTasks([ts], 1, 1)[0];
    assert.equal(eol.kind, 'end-of-line');
    assert.ok(eol.middle.startsWith('\n'));
  });

  it('gives every language its share even when one dominates', () => {
    const many = Array.from({ length: 20 }, (_, i) => file(`src/f${i}.ts`, 'typescript', ts.text));
    const tasks = cutTasks([...many, bundledSamples[1]], 8, 1);
    assert.ok(tasks.filter((t) => t.languageId === 'python').length >= 3);
  });

  it('never uses the reserved packages, not even in its bundled samples', () => {
    assert.ok(isReserved('node_modules/express/lib/router.js'));
    assert.ok(isReserved('venv/lib/site-packages/twisted/internet/defer.py'));
    assert.ok(isReserved('vendor/github.com/spf13/cobra/command.go'));
    assert.ok(!isReserved('src/expression.ts'));
    for (const s of bundledSamples) for (const p of reservedPackages) assert.ok(!new RegExp(`\\b${p}\\b`).test(s.text), `${s.path} mentions ${p}`);
  });

  it('lists workspace files with .gitignore and files.exclude respected', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-files-'));
    try {
      const code = ts.text;
      for (const p of ['src/a.ts', 'src/gen/b.ts', 'build/c.ts', 'node_modules/express/index.js', 'lib/d.py', 'notes.txt', 'src/tiny.ts']) {
        mkdirSync(join(dir, p, '..'), { recursive: true });
        writeFileSync(join(dir, p), p.endsWith('tiny.ts') ? 'x\n' : code);
      }
      writeFileSync(join(dir, '.gitignore'), 'build/\n');
      const files = await workspaceFiles(dir, ['**/gen']);
      assert.deepEqual(files.map((f) => f.path), ['lib/d.py', 'src/a.ts']);
      assert.equal(files[0].languageId, 'python');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** A source that answers `text(request)` with engine-like metrics. */
function fakeSource(text: (r: SourceRequest) => string): CompletionSource {
  return {
    kind: 'engine',
    status: { state: 'ready', message: '', warnings: [], restarts: 0 },
    ready: async () => true,
    complete: async (r) => ({
      ok: true,
      text: text(r),
      finish: 'length',
      metrics: { ttftMs: 10, decodeMsPerToken: 2, tokens: 9, steps: 4, acceptedPerStep: 2, promptTokens: 100, reusedTokens: 20, prefillMs: 8 },
    }),
  };
}

describe('benchmark run (fake sources)', () => {
  const params = { ...defaultParams(true), workloads: ['fim', 'synthetic'] as const, tasks: 4, syntheticTasks: 1 };
  const run = (differ: Configuration | undefined) =>
    runBenchmark({ ...params, workloads: [...params.workloads], configurations: ['off', 'lookup', 'auto'] }, {
      settings: defaultSettings,
      log: () => undefined,
      files: [],
      makeSource: (c) => fakeSource((r) => (c === differ && r.suffix !== '' ? 'something else' : `done(${r.prefix.length})`)),
    });

  it('says all greedy outputs match when they do, and aggregates per configuration', async () => {
    const r = await run(undefined);
    assert.equal(r.identical_to_plain, true);
    assert.equal(r.task_source.from, 'bundled samples');
    const fim = r.results.find((w) => w.workload === 'fim')!;
    const lookup = fim.configurations.find((c) => c.configuration === 'lookup')!;
    assert.deepEqual(lookup.identical_to_plain, { same: 4, of: 4, all: true });
    assert.equal(lookup.ms_per_token.mean, 2);
    assert.equal(lookup.accepted_per_step, 2);
    assert.equal(lookup.tokens_per_s, 500);
    assert.equal(lookup.prompt_tokens_reused, 80);
    assert.equal(lookup.speedup_vs_off, 1);
    assert.equal(r.llama_cpp.status, 'not installed');
  });

  it('says so loudly when a configuration changes the greedy output', async () => {
    const r = await run('lookup');
    assert.equal(r.identical_to_plain, false);
    assert.equal(r.mismatches.length, 4);
    assert.ok(r.mismatches.every((m) => m.configuration === 'lookup' && m.workload === 'fim'));
    assert.match(r.warnings[0], /GREEDY OUTPUTS DIFFER/);
    assert.match(renderMarkdown(r), /WARNING: greedy outputs differ from plain decoding/);
    assert.match(renderText(r), /!! GREEDY OUTPUTS DIFFER FROM PLAIN DECODING in 4 task/);
    assert.match(renderText(r), /0\/4 DIFFERENT/);
  });
});

describe('benchmark: configurations whose engine loaded with warnings', () => {
  // A warning that leaves the configuration as asked runs it (and logs the warning); one whose
  // load report shows another speculation mode than the row's name does not.
  const degraded = (mode: string) => ({
    ...fakeSource(() => 'x'),
    status: { state: 'degraded' as const, message: '', warnings: ['the q8_0 weights run widened to bf16 on the GPU'], restarts: 0 },
    loadReport: { backend: 'cuda', speculation: { mode } },
  });
  it('runs a row whose load report shows its own mode, and drops one whose mode changed', async () => {
    const logged: string[] = [];
    const r = await runBenchmark({ ...defaultParams(true), workloads: ['fim'], configurations: ['off', 'lookup', 'mtp'], tasks: 2 }, {
      settings: defaultSettings,
      log: (_level, line) => logged.push(line),
      files: [],
      makeSource: (c) => (c === 'off' ? fakeSource(() => 'x') : degraded(c === 'lookup' ? 'lookup' : 'off')),
    });
    const rows = r.results.find((w) => w.workload === 'fim')!.configurations;
    const lookup = rows.find((c) => c.configuration === 'lookup')!;
    const mtp = rows.find((c) => c.configuration === 'mtp')!;
    assert.equal(lookup.error, undefined);
    assert.equal(lookup.tasks, 2);
    assert.ok(logged.some((l) => l.startsWith('lookup: ') && l.includes('widened to bf16')));
    assert.match(mtp.error ?? '', /^degraded: .*widened to bf16/);
  });
});

describe('benchmark report', () => {
  let result: BenchmarkResult;
  before(async () => {
    result = await runBenchmark({ ...defaultParams(true), workloads: ['fim'], configurations: ['off', 'mtp'], tasks: 2 }, {
      settings: defaultSettings,
      log: () => undefined,
      files: [],
      makeSource: (c) => (c === 'mtp' ? { ...fakeSource(() => ''), ready: async () => false, status: { state: 'error', message: 'no mtp.safetensors', warnings: [], restarts: 0 } } : fakeSource(() => 'x')),
    });
  });

  it('renders a Markdown table per workload, with a configuration that did not run and why', () => {
    const md = renderMarkdown(result);
    assert.match(md, /^# Runahead benchmark/);
    assert.match(md, /## Your code: FIM tasks/);
    assert.match(md, /\| off \| 10\.0 \| 2\.00 \/ 2\.00 \/ 2\.00 \|/);
    assert.match(md, /\| mtp \| not run: no mtp\.safetensors \|/);
    assert.match(md, /llama\.cpp \(node-llama-cpp@3\.21\.1\): not installed/);
  });

  it('copies as issue text with the machine facts first', () => {
    const issue = renderIssue(result);
    assert.match(issue, /^### Machine\n\n- CPU: .+ SIMD/);
    assert.match(issue, /- Model: /);
    assert.match(issue, /<details>/);
  });
});

describe('GGUF export', function () {
  this.timeout(60_000);
  it('writes a Qwen2 folder that @huggingface/gguf reads back with llama.cpp names, tokenizer and shapes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-gguf-'));
    try {
      const out = writeGguf('test/fixtures/models/qwen2-tied-bf16', join(dir, 'm.gguf'));
      const { metadata, tensorInfos } = await gguf(out.path, { allowLocalFile: true });
      const m = metadata as Record<string, unknown>;
      assert.equal(m['general.architecture'], 'qwen2');
      assert.equal(m['tokenizer.ggml.model'], 'gpt2');
      assert.equal(m['tokenizer.ggml.pre'], 'qwen2');
      assert.ok((m['tokenizer.ggml.merges'] as string[]).length > 0);
      assert.equal(typeof m['tokenizer.ggml.eos_token_id'], 'number');
      const names = tensorInfos.map((t) => t.name);
      assert.ok(names.includes('token_embd.weight'));
      assert.ok(names.includes('blk.0.attn_q.bias'));
      assert.ok(names.includes('output_norm.weight'));
      const embd = tensorInfos.find((t) => t.name === 'token_embd.weight')!;
      assert.equal((m['tokenizer.ggml.tokens'] as string[]).length, Number(embd.shape[1]));
      // Norms are F32 (type 0); matrices keep BF16 (type 30).
      assert.equal(tensorInfos.find((t) => t.name === 'output_norm.weight')!.dtype, 0);
      assert.equal(embd.dtype, 30);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('writes every matrix as Q8_0 blocks when asked, norms still F32', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-gguf-'));
    try {
      const out = writeGguf('test/fixtures/models/qwen2-tied-bf16', join(dir, 'm.gguf'), { matrices: 'q8_0' });
      assert.equal(out.dtype, 'Q8_0');
      const { metadata, tensorInfos } = await gguf(out.path, { allowLocalFile: true });
      assert.equal((metadata as Record<string, unknown>)['general.file_type'], 7);
      assert.equal(tensorInfos.find((t) => t.name === 'blk.1.ffn_down.weight')!.dtype, 8);
      assert.equal(tensorInfos.find((t) => t.name === 'token_embd.weight')!.dtype, 8);
      assert.equal(tensorInfos.find((t) => t.name === 'blk.0.attn_q.bias')!.dtype, 0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('quantizes a block as llama.cpp\'s quantize_row_q8_0_ref: d = amax / 127 in f16, q = round(x / d)', () => {
    const x = new Float32Array(32).map((_, i) => (i - 10) / 8);
    const b = quantizeQ8_0(x);
    assert.equal(b.length, 34);
    assert.equal(b.readUInt16LE(0), 0x254b); // f16(2.625 / 127)
    assert.equal(b.readInt8(2 + 31), 127);
    assert.equal(b.readInt8(2 + 0), -60); // round(-1.25 / (2.625 / 127))
  });

  it('refuses an architecture it cannot write, naming the file and field', () => {
    assert.throws(() => writeGguf('test/fixtures/models/llama-f32', join(tmpdir(), 'x.gguf')), /config\.json: architectures\[0\] is LlamaForCausalLM/);
  });

  // ggml's dequantize_row_q4_K / q6_K, written from the format (not from the writer), so a
  // packing mistake in the writer cannot cancel out here.
  const f16 = (h: number) => {
    const e = (h >> 10) & 31, m = h & 1023, s = h & 0x8000 ? -1 : 1;
    return e === 0 ? s * m * 2 ** -24 : s * (1 + m / 1024) * 2 ** (e - 15);
  };
  function dequantQ4_K(b: Buffer): Float32Array {
    const y = new Float32Array((b.length / 144) * 256);
    for (let k = 0; k < b.length / 144; k++) {
      const o = 144 * k, d = f16(b.readUInt16LE(o)), dmin = f16(b.readUInt16LE(o + 2)), sc = b.subarray(o + 4, o + 16);
      const scaleMin = (j: number) => (j < 4 ? [sc[j] & 63, sc[j + 4] & 63] : [(sc[j + 4] & 0xf) | ((sc[j - 4] >> 6) << 4), (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)]);
      for (let j = 0; j < 4; j++) {
        const [s1, m1] = scaleMin(2 * j), [s2, m2] = scaleMin(2 * j + 1);
        for (let l = 0; l < 32; l++) {
          const q = b[o + 16 + 32 * j + l];
          y[256 * k + 64 * j + l] = d * s1 * (q & 0xf) - dmin * m1;
          y[256 * k + 64 * j + 32 + l] = d * s2 * (q >> 4) - dmin * m2;
        }
      }
    }
    return y;
  }
  function dequantQ6_K(b: Buffer): Float32Array {
    const y = new Float32Array((b.length / 210) * 256);
    for (let k = 0; k < b.length / 210; k++) {
      const o = 210 * k, d = f16(b.readUInt16LE(o + 208));
      for (let n = 0; n < 2; n++) {
        const ql = o + 64 * n, qh = o + 128 + 32 * n, sc = o + 192 + 8 * n, y0 = 256 * k + 128 * n;
        for (let l = 0; l < 32; l++) {
          const is = Math.floor(l / 16), h = b[qh + l];
          y[y0 + l] = d * b.readInt8(sc + is) * (((b[ql + l] & 0xf) | ((h & 3) << 4)) - 32);
          y[y0 + l + 32] = d * b.readInt8(sc + is + 2) * (((b[ql + l + 32] & 0xf) | (((h >> 2) & 3) << 4)) - 32);
          y[y0 + l + 64] = d * b.readInt8(sc + is + 4) * (((b[ql + l] >> 4) | (((h >> 4) & 3) << 4)) - 32);
          y[y0 + l + 96] = d * b.readInt8(sc + is + 6) * (((b[ql + l + 32] >> 4) | (((h >> 6) & 3) << 4)) - 32);
        }
      }
    }
    return y;
  }
  const gaussian = (n: number, seed: number) => {
    let s = seed;
    const u = () => ((s = (s * 1103515245 + 12345) % 2147483648) + 1) / 2147483649;
    return new Float32Array(n).map(() => 0.02 * Math.sqrt(-2 * Math.log(u())) * Math.cos(2 * Math.PI * u()));
  };
  const rmsError = (x: Float32Array, y: Float32Array) => Math.sqrt(x.reduce((a, v, i) => a + (v - y[i]) ** 2, 0) / x.reduce((a, v) => a + v * v, 0));

  it('writes Q4_K and Q6_K blocks that ggml\'s dequantization reads back within their precision', () => {
    const x = gaussian(256 * 64, 7);
    const q4 = quantizeQ4_K(x), q6 = quantizeQ6_K(x);
    assert.equal(q4.length, 64 * 144);
    assert.equal(q6.length, 64 * 210);
    // Gaussian weights: a 4-bit step of a sub-block's range is ~0.3 sigma (RMS error ~0.09), a 6-bit one ~0.08 sigma (~0.025).
    const e4 = rmsError(x, dequantQ4_K(q4)), e6 = rmsError(x, dequantQ6_K(q6));
    assert.ok(e4 < 0.12, `Q4_K relative RMS error ${e4}`);
    assert.ok(e6 < 0.04, `Q6_K relative RMS error ${e6}`);
    // All-zero blocks stay zero (no division by a zero scale).
    assert.ok(dequantQ4_K(quantizeQ4_K(new Float32Array(256))).every((v) => v === 0));
    assert.ok(dequantQ6_K(quantizeQ6_K(new Float32Array(256))).every((v) => v === 0));
  });

  it('widens a model to whole Q4_K blocks (hidden, q heads in whole groups, intermediate) and writes the Q4_K_M mix', async () => {
    const embedded = { hidden_size: 384, intermediate_size: 1024, num_hidden_layers: 7, num_attention_heads: 6, num_key_value_heads: 2, vocab_size: 16384 };
    assert.deepEqual(paddedShape(embedded), { hidden: 768, heads: 12, kvHeads: 4, intermediate: 1024 });
    assert.throws(() => paddedShape({ ...embedded, num_attention_heads: 5 }), /heads must divide the hidden size/);
    // Already whole blocks (the 1.5B shape): unchanged.
    assert.deepEqual(paddedShape({ ...embedded, hidden_size: 1536, intermediate_size: 8960, num_attention_heads: 12 }), { hidden: 1536, heads: 12, kvHeads: 2, intermediate: 8960 });
    const dir = mkdtempSync(join(tmpdir(), 'bench-gguf-'));
    try {
      const out = writePaddedGguf('test/fixtures/models/qwen2-tied-bf16', join(dir, 'm.gguf'));
      const { metadata, tensorInfos } = await gguf(out.path, { allowLocalFile: true });
      const m = metadata as Record<string, unknown>;
      assert.equal(m['qwen2.embedding_length'], out.shape.hidden);
      assert.equal(out.shape.hidden % 256, 0);
      assert.equal(m['qwen2.attention.head_count'], out.shape.heads);
      const info = (name: string) => tensorInfos.find((t) => t.name === name)!;
      assert.equal(info('token_embd.weight').dtype, 14); // tied: Q6_K, as llama.cpp's Q4_K_M
      assert.equal(info('blk.0.attn_q.weight').dtype, 12); // Q4_K
      assert.deepEqual(info('blk.0.attn_q.weight').shape.map(Number), [out.shape.hidden, out.shape.hidden]);
      assert.equal(info('blk.0.attn_norm.weight').dtype, 0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('llama.cpp peer', function () {
  this.timeout(120_000);
  it('reads llama.cpp\'s own counters from llama_perf_context_print', () => {
    const lines = [
      'llama_perf_context_print:        load time =       0.00 ms',
      'llama_perf_context_print: prompt eval time =     377.60 ms /  1000 tokens (    0.38 ms per token,  2648.30 tokens per second)',
      'llama_perf_context_print:        eval time =      80.45 ms /    47 runs   (    1.71 ms per token,   584.19 tokens per second)',
    ];
    assert.deepEqual(parsePerfLines(lines), { prompt_ms: 377.6, prompt_tokens: 1000, eval_ms: 80.45, eval_runs: 47 });
    assert.equal(parsePerfLines(lines.slice(0, 2)), undefined);
  });

  it('counts the leading tokens of llama.cpp\'s output that agree with Runahead\'s text', () => {
    const decode = (ids: number[]) => ids.map((i) => 'abcdef'[i]).join('');
    assert.equal(agreedTokens([0, 1, 2], 'abc', decode), 3);
    assert.equal(agreedTokens([0, 1, 4], 'abc', decode), 2);
    assert.equal(agreedTokens([3], 'abc', decode), 0);
  });

  it('runs the embedded model\'s GGUF on the ids it is given (no BOS added) with its own timings', async function () {
    const entry = findPeer(process.cwd());
    if (!entry) this.skip();
    const dir = mkdtempSync(join(tmpdir(), 'bench-peer-'));
    const peer = await LlamaCppPeer.open(entry!, writeGguf('engine/models/runahead-coder', join(dir, 'm.gguf')).path, { threads: 1, contextSize: 512, gpu: false });
    try {
      const prompt = Array.from({ length: 40 }, (_, i) => 300 + ((i + 1) * 37) % 9000);
      const a = await peer.generate(prompt, 12, []);
      const b = await peer.generate(prompt, 12, []);
      assert.equal(a.prompt_tokens, 40);
      assert.equal(a.tokens.length, 12);
      assert.deepEqual(b.tokens, a.tokens);
      assert.ok(a.decode_ms_per_token > 0 && a.decode_ms_per_token < a.wall_decode_ms_per_token * 1.5, `decode ${a.decode_ms_per_token} ms, from JS ${a.wall_decode_ms_per_token} ms`);
      // A stop id ends it before that token.
      assert.deepEqual((await peer.generate(prompt, 12, [a.tokens[3]])).tokens, a.tokens.slice(0, a.tokens.indexOf(a.tokens[3])));
    } finally {
      await peer.close();
      await releaseLlamaCpp();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
