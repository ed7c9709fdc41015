/// <reference lib="dom" />
// The benchmark webview's script (bundled to dist/benchView.js): charts of
// ms/token with the bandwidth bound and the llama.cpp peer, accepted tokens per
// step, the latency distribution; the numbers as tables (each cell names its
// configuration and field, so a test can compare them with the JSON); buttons
// that ask the extension to export or copy. Colours are the theme's.
import '@vscode-elements/elements/dist/vscode-button/index.js';
import '@vscode-elements/elements/dist/vscode-collapsible/index.js';
import { Chart, registerables, type ChartDataset } from 'chart.js';
import type { BenchmarkResult, ConfigurationResult } from '../../../server/src/bench/benchmark';

Chart.register(...registerables);
declare function acquireVsCodeApi(): { postMessage(m: unknown): void };
const vscode = acquireVsCodeApi();
const result = JSON.parse(document.getElementById('result')!.textContent!) as BenchmarkResult;
const root = document.getElementById('root')!;
const css = getComputedStyle(document.body);
const theme = (name: string, fallback: string) => css.getPropertyValue(`--vscode-${name}`).trim() || fallback;
const colours = {
  bar: theme('charts-blue', '#3794ff'),
  second: theme('charts-purple', '#b180d7'),
  bound: theme('charts-red', '#f14c4c'),
  peer: theme('charts-orange', '#d18616'),
  text: theme('foreground', '#cccccc'),
  grid: theme('widget-border', 'rgba(128,128,128,0.3)'),
};
Chart.defaults.color = colours.text;
Chart.defaults.borderColor = colours.grid;
Chart.defaults.font.family = css.getPropertyValue('--vscode-font-family') || 'sans-serif';

const el = <K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, text?: string): HTMLElementTagNameMap[K] => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
};
const fmt = (x: number | undefined, d = 2) => (x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(d));

const style = el('style');
style.textContent = `body{padding:0 20px;color:var(--vscode-foreground);font-family:var(--vscode-font-family)}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(380px,1fr));gap:16px}
.chart{position:relative;height:280px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border-bottom:1px solid var(--vscode-widget-border,#8884);padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}.warn{background:var(--vscode-inputValidation-errorBackground);border:1px solid var(--vscode-inputValidation-errorBorder);padding:8px;font-weight:bold}
.bar{display:flex;gap:8px;margin:12px 0}.table{overflow-x:auto}`;
document.head.appendChild(style);

root.appendChild(el('h1', {}, 'Runahead benchmark'));
const buttons = el('div', { class: 'bar' });
for (const [type, label] of [['exportMarkdown', 'Export Markdown'], ['exportJson', 'Export JSON'], ['copyIssue', 'Copy as issue text']]) {
  const b = el('vscode-button' as 'button', { id: type }, label);
  b.addEventListener('click', () => vscode.postMessage({ type }));
  buttons.appendChild(b);
}
root.appendChild(buttons);
if (!result.identical_to_plain) {
  root.appendChild(el('div', { class: 'warn', id: 'mismatch' }, `Greedy outputs differ from plain decoding in ${result.mismatches.length} task(s): speculation changed the answer. This is a bug.`));
}
const facts = el('ul');
const m = result.machine;
for (const line of [
  `CPU ${m.cpu} (${m.cores} cores), SIMD ${m.simd ?? '?'}, threads ${m.threads ?? 'auto'}${m.load_average ? `, load average ${m.load_average.map((x) => x.toFixed(1)).join(' → ')}` : ''}; GPU ${m.gpu ?? 'none used'}; backend ${m.backend ?? '?'}`,
  `Model ${m.model}, ${m.quantization ?? '?'}${m.parameters ? `, ${(m.parameters / 1e6).toFixed(1)} M parameters` : ''}`,
  result.bound ? `Bandwidth bound: ${fmt(result.bound.bound_ms_per_token, 3)} ms/token (${(result.bound.weight_bytes / 1e6).toFixed(1)} MB at ${fmt(result.bound.read_bandwidth_gb_s, 1)} GB/s)` : 'Bandwidth bound: not measured',
  `Tasks from ${result.task_source.from}: ${Object.entries(result.task_source.languages).map(([k, v]) => `${k} ${v}`).join(', ')}`,
  result.fp8_head,
  ...result.warnings.map((w) => `⚠ ${w}`),
]) facts.appendChild(el('li', {}, line));
root.appendChild(facts);

const charts = el('div', { class: 'charts' });
root.appendChild(charts);
function chart(id: string, title: string, labels: string[], datasets: ChartDataset<'bar' | 'line', number[]>[], yTitle: string): void {
  const box = el('div');
  box.appendChild(el('h3', {}, title));
  const holder = el('div', { class: 'chart' });
  const canvas = el('canvas', { id, role: 'img', 'aria-label': title });
  holder.appendChild(canvas);
  box.appendChild(holder);
  charts.appendChild(box);
  new Chart(canvas, {
    type: 'bar',
    data: { labels, datasets: datasets as ChartDataset<'bar', number[]>[] },
    options: { maintainAspectRatio: false, animation: false, scales: { y: { beginAtZero: true, title: { display: true, text: yTitle } } } },
  });
}

const ran = (w: { configurations: ConfigurationResult[] }) => w.configurations.filter((c) => !c.error);
const fim = result.results.find((w) => w.workload === 'fim') ?? result.results[0];
if (fim) {
  const rows = ran(fim);
  const labels: string[] = rows.map((r) => r.configuration);
  const peer = result.llama_cpp.status === 'ran' ? result.llama_cpp : undefined;
  if (peer) labels.push('llama.cpp');
  const datasets: ChartDataset<'bar' | 'line', number[]>[] = [
    { type: 'bar', label: 'decode ms/token (mean)', data: [...rows.map((r) => r.ms_per_token.mean), ...(peer ? [peer.decode_ms_per_token!.mean] : [])], backgroundColor: labels.map((l) => (l === 'llama.cpp' ? colours.peer : colours.bar)) },
    { type: 'bar', label: 'effective ms/token', data: rows.map((r) => r.effective_ms_per_token), backgroundColor: colours.second },
  ];
  if (result.bound) datasets.push({ type: 'line', label: 'bandwidth bound (1 token/step)', data: labels.map(() => result.bound!.bound_ms_per_token), borderColor: colours.bound, borderDash: [6, 4], pointRadius: 0 });
  chart('chart-ms', `ms/token by configuration (${fim.title})`, labels, datasets, 'ms per token');
  chart('chart-accepted', 'Accepted tokens per step', result.results.length ? labels.filter((l) => l !== 'llama.cpp') : [], result.results.map((w, i) => ({
    type: 'bar' as const, label: w.title, data: labels.filter((l) => l !== 'llama.cpp').map((l) => w.configurations.find((c) => c.configuration === l)?.accepted_per_step ?? NaN),
    backgroundColor: [colours.bar, colours.second, colours.peer, colours.bound][i % 4],
  })), 'tokens per step');
}
const typing = result.typing?.filter((t) => !t.error) ?? [];
if (typing.length) {
  chart('chart-latency', 'Keystroke to ghost text (typing replay)', typing.map((t) => t.configuration), [
    { type: 'bar', label: 'p50 ms', data: typing.map((t) => t.keystroke_to_ghost_ms.p50), backgroundColor: colours.bar },
    { type: 'bar', label: 'p90 ms', data: typing.map((t) => t.keystroke_to_ghost_ms.p90), backgroundColor: colours.second },
  ], 'ms');
} else if (fim) {
  chart('chart-latency', 'Time to first token', ran(fim).map((r) => r.configuration), [
    { type: 'bar', label: 'p50 ms', data: ran(fim).map((r) => r.ttft_ms.p50), backgroundColor: colours.bar },
    { type: 'bar', label: 'p90 ms', data: ran(fim).map((r) => r.ttft_ms.p90), backgroundColor: colours.second },
  ], 'ms');
}

/** Counts show as integers, fractions as percentages, times and rates with two decimals. */
const counts = new Set(['prompt_tokens_reused', 'identical_to_plain.same', 'keys', 'shown', 'from_engine', 'from_cache', 'from_prefetch']);
const fractions = new Set(['bound_fraction', 'exact_match']);
const cell = (field: string, v: number) => (counts.has(field) ? String(v) : fractions.has(field) ? (Number.isFinite(v) ? `${(100 * v).toFixed(0)} %` : '–') : fmt(v));

/** A table (in a box that scrolls sideways when narrow) whose cells carry data-workload, data-config and data-field (the JSON path of the number). */
function table(workload: string, header: [string, string][], rows: { configuration: string; error?: string }[], value: (row: never, field: string) => number | string | undefined): HTMLElement {
  const box = el('div', { class: 'table' });
  const t = box.appendChild(el('table', { 'data-workload': workload }));
  const head = el('tr');
  for (const [, label] of header) head.appendChild(el('th', {}, label));
  t.appendChild(head);
  for (const r of rows) {
    const tr = el('tr');
    for (const [field] of header) {
      const v = field === 'configuration' ? r.configuration : r.error ? (field === header[1][0] ? `not run: ${r.error}` : '') : value(r as never, field);
      tr.appendChild(el('td', { 'data-config': r.configuration, 'data-field': field }, typeof v === 'number' ? cell(field, v) : (v ?? '')));
    }
    t.appendChild(tr);
  }
  return box;
}
const get = (row: unknown, field: string): number | string | undefined => {
  const v = field.split('.').reduce<unknown>((o, k) => (o as Record<string, unknown> | undefined)?.[k], row);
  return typeof v === 'number' || typeof v === 'string' ? v : undefined;
};
const generationFields: [string, string][] = [
  ['configuration', 'configuration'], ['ttft_ms.p50', 'TTFT p50 ms'], ['ms_per_token.mean', 'ms/token mean'], ['ms_per_token.p50', 'p50'], ['ms_per_token.p90', 'p90'],
  ['effective_ms_per_token', 'effective ms/token'], ['tokens_per_s', 'tokens/s'], ['accepted_per_step', 'accepted/step'], ['prompt_tokens_reused', 'reused'],
  ['bound_fraction', 'of bound'], ['exact_match', 'exact'], ['edit_similarity', 'edit sim.'], ['identical_to_plain.same', 'same as off'],
];
for (const w of result.results) {
  root.appendChild(el('h2', {}, w.title));
  root.appendChild(table(w.workload, generationFields, w.configurations, get));
}
if (result.typing) {
  root.appendChild(el('h2', {}, `Typing replay (${result.params.typingKeys} keys, one every ${result.params.typingIntervalMs} ms)`));
  root.appendChild(table('typing', [['configuration', 'configuration'], ['keys', 'keys'], ['shown', 'shown'], ['from_engine', 'engine'], ['from_cache', 'cache'], ['from_prefetch', 'prefetch'],
    ['keystroke_to_ghost_ms.p50', 'keystroke→ghost p50'], ['keystroke_to_ghost_ms.p90', 'p90'], ['engine_ms_per_token.p50', 'engine ms/token p50']], result.typing, get));
}
root.appendChild(el('h2', {}, 'llama.cpp peer'));
const p = result.llama_cpp;
root.appendChild(el('p', { id: 'peer' }, p.status === 'ran'
  ? `${p.package} (${p.device}), ${p.tasks} tasks: prefill ${fmt(p.prefill_tokens_per_s, 0)} tokens/s vs Runahead ${fmt(p.runahead_prefill_tokens_per_s, 0)} (${fmt(p.prefill_ratio)}x); decode ${fmt(p.decode_ms_per_token?.mean, 3)} ms/token vs Runahead ${fmt(p.runahead_decode_ms_per_token?.mean, 3)} (${fmt(p.decode_ratio)}x; through node-llama-cpp from JavaScript ${fmt(p.wall_decode_ms_per_token?.mean, 3)}); same greedy output ${p.same_output?.same}/${p.same_output?.of}`
  : `${p.package}: ${p.status}${p.detail ? ` — ${p.detail}` : ''}. Install it with "Run Benchmark" → configurations → llama.cpp peer.`));
document.body.setAttribute('data-ready', 'true');
