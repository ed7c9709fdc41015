// A benchmark result as text: a Markdown report (the file `npm run bench`
// writes, the webview's export, the issue text) and a fixed-width table for
// the terminal. The JSON is the result object itself.
import type { BenchmarkResult, ConfigurationResult, TypingResult } from './benchmark';
import type { Distribution } from './stats';

const num = (x: number | undefined, digits = 2): string => (x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(digits));
const dist = (d: Distribution, digits = 2): string => (d.n === 0 ? '–' : `${num(d.mean, digits)} / ${num(d.p50, digits)} / ${num(d.p90, digits)}`);
const pct = (x: number | undefined): string => (x === undefined || !Number.isFinite(x) ? '–' : `${(100 * x).toFixed(0)} %`);

const generationHeader = ['configuration', 'TTFT ms p50', 'ms/token mean / p50 / p90', 'effective ms/token', 'tokens/s', 'accepted/step', 'reused', 'of bound', 'exact', 'edit sim.', 'same as off', 'speed-up'];

function generationRow(r: ConfigurationResult): string[] {
  if (r.error) return [r.configuration, `not run: ${r.error}`];
  return [
    r.configuration + (r.active && r.active !== r.configuration ? ` [${r.active}]` : ''),
    num(r.ttft_ms.p50, 1),
    dist(r.ms_per_token),
    num(r.effective_ms_per_token),
    num(r.tokens_per_s, 0),
    num(r.accepted_per_step),
    `${r.prompt_tokens_reused}/${r.prompt_tokens}`,
    pct(r.bound_fraction),
    pct(r.exact_match),
    num(r.edit_similarity),
    r.identical_to_plain ? `${r.identical_to_plain.same}/${r.identical_to_plain.of}${r.identical_to_plain.all ? '' : ' DIFFERENT'}` : '',
    r.speedup_vs_off === undefined ? '' : `${num(r.speedup_vs_off)}x`,
  ];
}

const typingHeader = ['configuration', 'keys', 'shown', 'engine / cache / prefetch', 'keystroke→ghost p50', 'p90', 'engine ms/token p50', 'reused'];

function typingRow(r: TypingResult): string[] {
  if (r.error) return [r.configuration, `not run: ${r.error}`];
  return [r.configuration, String(r.keys), String(r.shown), `${r.from_engine} / ${r.from_cache} / ${r.from_prefetch}`, num(r.keystroke_to_ghost_ms.p50, 1), num(r.keystroke_to_ghost_ms.p90, 1), num(r.engine_ms_per_token.p50), `${r.prompt_tokens_reused}/${r.prompt_tokens}`];
}

function markdownTable(header: string[], rows: string[][]): string {
  const esc = (c: string) => c.replace(/\|/g, '\\|');
  return [`| ${header.join(' | ')} |`, `|${header.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${header.map((_, i) => esc(r[i] ?? '')).join(' | ')} |`)].join('\n');
}

function textTable(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.filter((r) => r.length === header.length).map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) => (r.length === 2 && header.length > 2 ? `${r[0].padEnd(widths[0])}  ${r[1]}` : r.map((c, i) => c.padEnd(widths[i])).join('  '));
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

/** The facts about the machine a reader of a bug report needs. */
export function machineLines(r: BenchmarkResult): string[] {
  const m = r.machine;
  return [
    `CPU: ${m.cpu} (${m.cores} logical cores), SIMD ${m.simd ?? 'unknown'}, threads ${m.threads ?? 'auto'}${m.load_average ? `, load average ${m.load_average.map((x) => x.toFixed(1)).join(' → ')}` : ''}`,
    `GPU: ${m.gpu ?? (m.backend === 'cuda' ? 'CUDA' : 'none used')}; backend ${m.backend ?? 'unknown'}`,
    `Model: ${m.model}${m.parameters ? `, ${(m.parameters / 1e6).toFixed(1)} M parameters` : ''}, weights ${m.quantization ?? 'unknown'}`,
    `${m.os}, Node ${m.node}; ${r.date}${r.quick ? '; quick run' : ''}`,
  ];
}

function peerLines(r: BenchmarkResult): string[] {
  const p = r.llama_cpp;
  if (p.status !== 'ran') return [`llama.cpp (${p.package}): ${p.status}${p.detail ? ` — ${p.detail}` : ''}`];
  return [
    `llama.cpp (${p.package}, ${p.device}) on the same model as GGUF, ${p.tasks} FIM tasks interleaved with Runahead (speculation off):`,
    `  prefill tokens/s: Runahead ${num(p.runahead_prefill_tokens_per_s, 0)}, llama.cpp ${num(p.prefill_tokens_per_s, 0)} → ${num(p.prefill_ratio)}x`,
    `  decode ms/token (mean / p50 / p90): Runahead ${dist(p.runahead_decode_ms_per_token!, 3)}, llama.cpp ${dist(p.decode_ms_per_token!, 3)} → ${num(p.decode_ratio)}x`,
    `  (both engines' own clocks; llama.cpp seen from JavaScript through node-llama-cpp: ${dist(p.wall_decode_ms_per_token!, 3)} ms/token)`,
    `  same greedy output as Runahead: ${p.same_output?.same}/${p.same_output?.of}${p.same_output?.diverged_at.length ? ` (the others depart at token ${p.same_output.diverged_at.join(', ')})` : ''}`,
  ];
}

function boundLine(r: BenchmarkResult): string {
  const b = r.bound;
  if (!b) return 'Bandwidth bound: not measured';
  return `Bandwidth bound (${b.backend}): ${(b.weight_bytes / 1e6).toFixed(1)} MB of weights at ${num(b.read_bandwidth_gb_s, 1)} GB/s read = ${num(b.bound_ms_per_token, 3)} ms/token for one token per step`;
}

function tasksLine(r: BenchmarkResult): string {
  const t = r.task_source;
  const langs = Object.entries(t.languages).map(([k, v]) => `${k} ${v}`).join(', ');
  const kinds = Object.entries(t.kinds).map(([k, v]) => `${k} ${v}`).join(', ');
  return `Tasks from ${t.from} (${t.files} files): ${langs}; cursors: ${kinds}; seed ${r.params.seed}, max ${r.params.maxTokens} tokens, greedy`;
}

/** The whole report as Markdown. */
export function renderMarkdown(r: BenchmarkResult): string {
  const out: string[] = ['# Runahead benchmark', ''];
  if (!r.identical_to_plain) {
    out.push(`> **WARNING: greedy outputs differ from plain decoding** in ${r.mismatches.length} task(s). Speculation must not change the answer; this is a bug.`, '');
    for (const m of r.mismatches.slice(0, 20)) out.push(`> - ${m.workload} / ${m.configuration}: ${m.task}`);
    out.push('');
  }
  out.push(...machineLines(r).map((l) => `- ${l}`), `- ${boundLine(r)}`, `- ${tasksLine(r)}`, `- ${r.fp8_head}`, '');
  for (const w of r.results) {
    out.push(`## ${w.title}`, '', markdownTable(generationHeader, w.configurations.map(generationRow)), '');
  }
  if (r.typing) out.push(`## Typing replay (${r.params.typingKeys} keys, one every ${r.params.typingIntervalMs} ms)`, '', markdownTable(typingHeader, r.typing.map(typingRow)), '');
  out.push('## Peer', '', ...peerLines(r).map((l) => (l.startsWith('  ') ? `  - ${l.trim()}` : `- ${l}`)), '');
  if (r.warnings.length) out.push('## Warnings', '', ...r.warnings.map((w) => `- ${w}`), '');
  out.push('ms/token columns: decode time per output token (after the first), mean / p50 / p90 over tasks. Effective: the whole request over its output tokens. Of bound: the one-token-per-step bandwidth bound ÷ ms/token.');
  return `${out.join('\n')}\n`;
}

/** The report for the terminal. */
export function renderText(r: BenchmarkResult): string {
  const out: string[] = [];
  if (!r.identical_to_plain) out.push('!'.repeat(78), `!! GREEDY OUTPUTS DIFFER FROM PLAIN DECODING in ${r.mismatches.length} task(s): this is a bug`, ...r.mismatches.slice(0, 10).map((m) => `!!   ${m.workload} / ${m.configuration}: ${m.task}`), '!'.repeat(78), '');
  out.push(...machineLines(r), boundLine(r), tasksLine(r), r.fp8_head, '');
  for (const w of r.results) out.push(`${w.title}:`, textTable(generationHeader, w.configurations.map(generationRow)), '');
  if (r.typing) out.push(`Typing replay (${r.params.typingKeys} keys, one every ${r.params.typingIntervalMs} ms):`, textTable(typingHeader, r.typing.map(typingRow)), '');
  out.push(...peerLines(r), '');
  if (r.warnings.length) out.push(...r.warnings.map((w) => `warning: ${w}`), '');
  out.push(`${r.wall_s.toFixed(0)} s`);
  return out.join('\n');
}

/** What to paste into a GitHub issue: the machine facts first, then the report. */
export function renderIssue(r: BenchmarkResult): string {
  return ['### Machine', '', ...machineLines(r).map((l) => `- ${l}`), '', '<details><summary>Benchmark report</summary>', '', renderMarkdown(r).replace(/^# .*\n/, ''), '</details>', ''].join('\n');
}
