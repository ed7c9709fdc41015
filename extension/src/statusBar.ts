// The status bar item: the engine's state, and after each completion its
// ms/token and accepted tokens per step; the tooltip holds the breakdown.
// What it says in each state is statusView's (format.ts).
import * as vscode from 'vscode';
import { checksText, headline, measuresSpeed, num, optimizationsText, pathCell, perStepText, statusView, type CompletionMetrics, type LocalState, type ServerStatus } from './format';

export class StatusBar implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem('runahead.status', vscode.StatusBarAlignment.Right, 100);
  private status: ServerStatus | undefined;
  private last: CompletionMetrics | undefined;
  private lastEngine: CompletionMetrics | undefined;
  private local: LocalState = {};

  constructor() {
    this.item.name = 'Runahead';
    this.render();
    this.item.show();
  }

  setStatus(s: ServerStatus): void {
    this.status = s;
    // Numbers of a model that failed would describe something no longer there.
    if (s.state === 'error') this.last = this.lastEngine = undefined;
    this.render();
  }

  setMetrics(m: CompletionMetrics): void {
    this.last = m;
    if (measuresSpeed(m)) this.lastEngine = m;
    this.render();
  }

  setLocal(local: LocalState): void {
    this.local = local;
    this.render();
  }

  dispose(): void {
    this.item.dispose();
  }

  private render(): void {
    const v = statusView(this.status, this.lastEngine, this.local);
    this.item.text = v.text;
    this.item.accessibilityInformation = { label: v.label, role: 'button' };
    this.item.backgroundColor = v.level === 'normal' ? undefined : new vscode.ThemeColor(v.level === 'warning' ? 'statusBarItem.warningBackground' : 'statusBarItem.errorBackground');
    this.item.command =
      v.click === 'enableLanguage' && this.local.disabledLanguage
        ? { title: `Turn Runahead on for ${this.local.disabledLanguage}`, command: 'runahead.enableForLanguage', arguments: [this.local.disabledLanguage] }
        : 'runahead.showMenu';
    this.item.tooltip = this.tooltip();
  }

  /** Plain lines (no tables: screen readers read their empty header cells), paths as code. */
  private tooltip(): vscode.MarkdownString {
    const s = this.status;
    const md = new vscode.MarkdownString(undefined, true);
    const line = (label: string, value: string) => md.appendMarkdown(`${label}: ${value}  \n`);
    md.appendMarkdown(`### Runahead: ${headline(s, this.local)}\n\n`);
    if (s?.message) md.appendText(`${s.message}\n\n`);
    if (s) {
      line('Model', pathCell(s.model));
      line('Engine binary', pathCell(s.enginePath));
      if (s.state !== 'error') {
        line('Backend', s.backend ?? '–');
        line('Engine', s.engine ?? '–');
        line('Optimisations', optimizationsText(s.optimizations));
        line('Self-check', checksText(s.checks));
        line('FIM order', s.fimOrder ?? '–');
      }
      const restart = s.lastRestart ? ` (last: ${s.lastRestart.reason} at ${new Date(s.lastRestart.at).toLocaleTimeString()})` : '';
      line('Restarts', `${s.restarts}${restart}`);
      md.appendMarkdown('\n');
      for (const w of s.warnings) md.appendMarkdown(`$(warning) ${w}\n\n`);
    }
    const m = this.lastEngine;
    if (m) {
      md.appendMarkdown(`#### Last completion from the engine\n\n`);
      line('Speed', `${num(m.decodeMsPerToken, 2)} ms per token`);
      line('Per step', `${perStepText(m)}${m.drafter ? `, drafted by ${m.drafter}` : ''}; ${m.accepted ?? 0} of ${m.drafted ?? 0} drafted tokens accepted`);
      line('Time to first token', `${num(m.ttftMs)} ms (${m.reusedTokens ?? 0} of ${m.promptTokens ?? 0} prompt tokens reused)`);
      line('Tokens', `${m.tokens ?? 0} in ${m.steps ?? 0} steps`);
      line('Served in', `${num(m.servedMs)} ms (debounce ${num(m.debounceMs, 0)} ms)`);
      md.appendMarkdown('\n');
    }
    if (this.last && this.last !== m) md.appendMarkdown(`Latest: from ${this.last.source} in ${num(this.last.servedMs)} ms\n\n`);
    md.appendMarkdown('Click for actions.');
    return md;
  }
}
