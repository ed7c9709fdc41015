// The status bar item: the engine's state, and after each completion its
// ms/token and accepted tokens per step; the tooltip holds the breakdown.
import * as vscode from 'vscode';
import { measuresSpeed, num, optimizationsText, pathCell, statusText, type CompletionMetrics, type ServerStatus } from './format';

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
    if (measuresSpeed(m)) this.lastEngine = m;
    this.render();
  }

  dispose(): void {
    this.item.dispose();
  }

  private render(): void {
    const { text, level } = statusText(this.status, this.lastEngine);
    this.item.text = text;
    this.item.backgroundColor = level === 'normal' ? undefined : new vscode.ThemeColor(level === 'warning' ? 'statusBarItem.warningBackground' : 'statusBarItem.errorBackground');
    this.item.tooltip = this.tooltip();
  }

  private tooltip(): vscode.MarkdownString {
    const s = this.status;
    const md = new vscode.MarkdownString(undefined, true);
    md.appendMarkdown(`**Runahead** — ${s ? `${s.state}${s.enabled ? '' : ' (disabled)'}` : 'starting'}\n\n`);
    if (s?.message) md.appendText(`${s.message}\n\n`);
    if (s) {
      md.appendMarkdown(`| | |\n|---|---|\n`);
      md.appendMarkdown(`| Model | ${pathCell(s.model)} |\n| Backend | ${s.backend ?? '–'} |\n| Engine | ${s.engine ?? '–'} |\n| Engine binary | ${pathCell(s.enginePath)} |\n`);
      const restart = s.lastRestart ? ` (last: ${s.lastRestart.reason} at ${new Date(s.lastRestart.at).toLocaleTimeString()})` : '';
      md.appendMarkdown(`| Optimisations | ${optimizationsText(s.optimizations)} |\n| FIM order | ${s.fimOrder ?? '–'} |\n| Restarts | ${s.restarts}${restart} |\n\n`);
      for (const w of s.warnings) md.appendMarkdown(`$(warning) ${w}\n\n`);
    }
    const m = this.lastEngine;
    if (m) {
      md.appendMarkdown(`**Last completion from the engine**\n\n| | |\n|---|---|\n`);
      md.appendMarkdown(`| Time to first token | ${num(m.ttftMs)} ms |\n| Prompt tokens reused | ${m.reusedTokens ?? 0} / ${m.promptTokens ?? 0} |\n`);
      md.appendMarkdown(`| Decode | ${num(m.decodeMsPerToken, 2)} ms/token |\n| Accepted / drafted | ${m.accepted ?? 0} / ${m.drafted ?? 0} (${num(m.acceptedPerStep, 2)} tokens/step${m.drafter ? `, ${m.drafter}` : ''}) |\n`);
      md.appendMarkdown(`| Tokens | ${m.tokens ?? 0} in ${m.steps ?? 0} steps |\n| Served in | ${num(m.servedMs)} ms (debounce ${num(m.debounceMs, 0)} ms) |\n\n`);
    }
    if (this.last && this.last !== m) md.appendMarkdown(`Latest: from ${this.last.source} in ${num(this.last.servedMs)} ms\n\n`);
    md.appendMarkdown('Click for actions.');
    return md;
  }
}
