// The status bar item: the engine's state, and after each completion its
// ms/token and accepted tokens per step; the tooltip holds the breakdown.
import * as vscode from 'vscode';

export interface ServerStatus {
  state: 'stopped' | 'starting' | 'loading' | 'ready' | 'degraded' | 'restarting' | 'error';
  message: string;
  enabled: boolean;
  progress?: { stage: string; done: number; total: number };
  engine?: string;
  model?: string;
  backend?: string;
  optimizations?: Record<string, unknown>;
  warnings: string[];
  restarts: number;
  lastRestart?: { reason: string; at: string };
  fimOrder?: string;
}

export interface CompletionMetrics {
  source: 'engine' | 'cache' | 'prefetch';
  cacheHit: boolean;
  servedMs: number;
  debounceMs: number;
  chars: number;
  finishReason?: string;
  ttftMs?: number;
  decodeMsPerToken?: number;
  tokens?: number;
  steps?: number;
  drafted?: number;
  accepted?: number;
  acceptedPerStep?: number;
  promptTokens?: number;
  reusedTokens?: number;
  prefillMs?: number;
  backend?: string;
  model?: string;
  optimizations?: Record<string, unknown>;
}

const num = (x: number | undefined, digits = 1) => (x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(digits));

/** `0.9 ms/tok · 4.1/step`: the two numbers that say how fast completions are. */
export function speedText(m: CompletionMetrics): string {
  return `${num(m.decodeMsPerToken)} ms/tok · ${num(m.acceptedPerStep)}/step`;
}

/** One line for the log, highlighted by syntaxes/runahead-log.tmLanguage.json. */
export function metricsLine(m: CompletionMetrics): string {
  if (m.source !== 'engine') return `completion from ${m.source} in ${num(m.servedMs)} ms · ${m.chars} chars`;
  return (
    `completion ttft ${num(m.ttftMs)} ms · ${num(m.decodeMsPerToken, 2)} ms/tok · ${num(m.acceptedPerStep, 2)} accepted/step` +
    ` · ${m.tokens ?? 0} tok · reused ${m.reusedTokens ?? 0}/${m.promptTokens ?? 0} prompt tok · served ${num(m.servedMs)} ms` +
    ` (debounce ${num(m.debounceMs, 0)} ms) · ${m.finishReason ?? '?'}`
  );
}

function optimizationsText(o: Record<string, unknown> | undefined): string {
  if (!o) return '–';
  return Object.entries(o).map(([k, v]) => (v === true ? k : v === false ? `~~${k}~~` : `${k}: ${String(v)}`)).join(', ');
}

export class StatusBar implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem('runahead.status', vscode.StatusBarAlignment.Right, 100);
  private status: ServerStatus | undefined;
  private last: CompletionMetrics | undefined;
  private lastEngine: CompletionMetrics | undefined;

  constructor() {
    this.item.name = 'Runahead';
    this.item.command = 'runahead.showMenu';
    this.render();
    this.item.show();
  }

  setStatus(s: ServerStatus): void {
    this.status = s;
    this.render();
  }

  setMetrics(m: CompletionMetrics): void {
    this.last = m;
    if (m.source === 'engine') this.lastEngine = m;
    this.render();
  }

  dispose(): void {
    this.item.dispose();
  }

  private render(): void {
    const s = this.status;
    const speed = this.lastEngine ? speedText(this.lastEngine) : 'ready';
    this.item.backgroundColor = undefined;
    if (!s) {
      this.item.text = '$(loading~spin) Runahead';
    } else if (!s.enabled) {
      this.item.text = '$(circle-slash) Runahead';
    } else if (s.state === 'loading' || s.state === 'starting' || s.state === 'restarting') {
      const pct = s.progress && s.progress.total > 0 ? ` ${Math.round((100 * s.progress.done) / s.progress.total)}%` : '';
      this.item.text = `$(loading~spin) Runahead${s.state === 'restarting' ? ' restarting' : pct}`;
    } else if (s.state === 'ready') {
      this.item.text = `$(zap) ${speed}`;
    } else if (s.state === 'degraded') {
      this.item.text = `$(warning) ${speed}`;
      this.item.backgroundColor = new vscode.ThemeColor('statusBarItem.warningBackground');
    } else {
      this.item.text = '$(error) Runahead';
      this.item.backgroundColor = new vscode.ThemeColor('statusBarItem.errorBackground');
    }
    this.item.tooltip = this.tooltip();
  }

  private tooltip(): vscode.MarkdownString {
    const s = this.status;
    const md = new vscode.MarkdownString(undefined, true);
    md.appendMarkdown(`**Runahead** — ${s ? `${s.state}${s.enabled ? '' : ' (disabled)'}` : 'starting'}\n\n`);
    if (s?.message) md.appendText(`${s.message}\n\n`);
    if (s) {
      md.appendMarkdown(`| | |\n|---|---|\n`);
      md.appendMarkdown(`| Model | ${s.model ?? '–'} |\n| Backend | ${s.backend ?? '–'} |\n| Engine | ${s.engine ?? '–'} |\n`);
      const restart = s.lastRestart ? ` (last: ${s.lastRestart.reason} at ${new Date(s.lastRestart.at).toLocaleTimeString()})` : '';
      md.appendMarkdown(`| Optimisations | ${optimizationsText(s.optimizations)} |\n| FIM order | ${s.fimOrder ?? '–'} |\n| Restarts | ${s.restarts}${restart} |\n\n`);
      for (const w of s.warnings) md.appendMarkdown(`$(warning) ${w}\n\n`);
    }
    const m = this.lastEngine;
    if (m) {
      md.appendMarkdown(`**Last completion from the engine**\n\n| | |\n|---|---|\n`);
      md.appendMarkdown(`| Time to first token | ${num(m.ttftMs)} ms |\n| Prompt tokens reused | ${m.reusedTokens ?? 0} / ${m.promptTokens ?? 0} |\n`);
      md.appendMarkdown(`| Decode | ${num(m.decodeMsPerToken, 2)} ms/token |\n| Accepted / drafted | ${m.accepted ?? 0} / ${m.drafted ?? 0} (${num(m.acceptedPerStep, 2)} tokens/step) |\n`);
      md.appendMarkdown(`| Tokens | ${m.tokens ?? 0} in ${m.steps ?? 0} steps |\n| Served in | ${num(m.servedMs)} ms (debounce ${num(m.debounceMs, 0)} ms) |\n\n`);
    }
    if (this.last && this.last !== m) md.appendMarkdown(`Latest: from ${this.last.source} in ${num(this.last.servedMs)} ms\n\n`);
    md.appendMarkdown('Click for actions.');
    return md;
  }
}
