// What the status bar and the log say, as plain functions of the server's
// runahead/status and runahead/metrics notifications (no VS Code API here, so
// the unit tests can check them). The metrics and status types are the
// server's own, so the wire format is defined once.
import type { CompletionMetrics } from '../../server/src/metrics';
import type { OptimizationCheck } from '../../server/src/engine/protocol';
import type { ServerStatus } from '../../server/src/runahead';

export type { CompletionMetrics, ServerStatus };

export const num = (x: number | undefined, digits = 1) => (x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(digits));

/** Whether a completion measured decode speed: it decoded tokens after the first (a
 * completion that stopped at once, e.g. right after an engine restart, says nothing). */
export function measuresSpeed(m: CompletionMetrics): boolean {
  return m.source === 'engine' && (m.tokens ?? 0) > 1 && (m.decodeMsPerToken ?? 0) > 0;
}

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

export function optimizationsText(o: Record<string, unknown> | undefined): string {
  if (!o) return '–';
  return Object.entries(o).map(([k, v]) => (v === true ? k : v === false ? `${k} off` : `${k}: ${String(v)}`)).join(', ');
}

/** The engine's self-check in one line: how many optimisations are active, then each one that is not, and why. */
export function checksText(checks: OptimizationCheck[] | undefined): string {
  if (!checks || checks.length === 0) return '–';
  const off = checks.filter((c) => !c.active);
  const active = `${checks.length - off.length} of ${checks.length} active`;
  return off.length === 0 ? active : `${active}; not active: ${off.map((c) => `${c.name}${c.required ? ' (required)' : ''}: ${c.why}`).join('; ')}`;
}

/** What only the editor knows: a snooze, and whether the active editor's language is turned off. */
export interface LocalState {
  /** Minutes left of a snooze (rounded up); undefined when not snoozed. */
  snoozedMinutes?: number;
  /** The active editor's language id when it is in runahead.disabledLanguages. */
  disabledLanguage?: string;
}

export type Level = 'normal' | 'warning' | 'error';

/** The status bar item: its text (with a codicon), what a screen reader says, its colour, and what a click does. */
export interface StatusView {
  text: string;
  /** The same in words, for StatusBarItem.accessibilityInformation (no codicon names, no Markdown). */
  label: string;
  level: Level;
  /** A click: the menu, or turning the active language back on. */
  click: 'menu' | 'enableLanguage';
}

/** Whether an error is about the model (a missing or unreadable folder or file) rather than the engine. */
export function isModelProblem(message: string): boolean {
  return /\bmodel\b|config\.json|safetensors|tokenizer|\bgguf\b/i.test(message);
}

/** The status bar item for a status, the last engine completion and the editor's own state. */
export function statusView(s: ServerStatus | undefined, last: CompletionMetrics | undefined, local: LocalState = {}): StatusView {
  const view = (text: string, label: string, level: Level = 'normal', click: StatusView['click'] = 'menu'): StatusView => ({ text, label, level, click });
  if (!s) return view('$(loading~spin) Runahead', 'Runahead: starting');
  if (s.state === 'error') {
    const what = isModelProblem(s.message) ? 'no model' : 'error';
    return view(`$(error) Runahead: ${what}`, `Runahead: ${what}. ${s.message}. Click for actions.`, 'error');
  }
  if (!s.enabled) return view('$(circle-slash) Runahead: off', 'Runahead: completions are off. Click for actions.');
  if (local.snoozedMinutes !== undefined) return view(`$(bell-slash) Runahead: snoozed ${local.snoozedMinutes} min`, `Runahead: snoozed, ${local.snoozedMinutes} minutes left. Click for actions.`);
  if (local.disabledLanguage) {
    return view(`$(circle-slash) Runahead: off for ${local.disabledLanguage}`, `Runahead: off for ${local.disabledLanguage}. Click to turn it on for ${local.disabledLanguage}.`, 'normal', 'enableLanguage');
  }
  switch (s.state) {
    case 'stopped':
    case 'starting':
    case 'loading': {
      const pct = s.progress && s.progress.total > 0 ? Math.round((100 * s.progress.done) / s.progress.total) : undefined;
      return view(`$(loading~spin) Runahead${pct === undefined ? '' : ` ${pct}%`}`, `Runahead: loading the model${pct === undefined ? '' : `, ${pct} percent`}`);
    }
    case 'restarting':
      return view('$(loading~spin) Runahead: restarting', `Runahead: restarting the engine. ${s.message}`, 'warning');
    case 'ready':
    case 'degraded': {
      const level = s.state === 'ready' ? 'normal' : 'warning';
      const icon = s.state === 'ready' ? '$(zap)' : '$(warning)';
      const warn = s.state === 'ready' ? '' : ` Degraded: ${s.message}.`;
      if (!last) return view(`${icon} Runahead`, `Runahead: ready, no completion yet.${warn}`, level);
      return view(`${icon} ${speedText(last)}`, `Runahead: ${num(last.decodeMsPerToken)} milliseconds per token, ${num(last.acceptedPerStep)} tokens per model step.${warn}`, level);
    }
  }
}

/** The hover's first line, in words. */
export function headline(s: ServerStatus | undefined, local: LocalState = {}): string {
  if (!s) return 'starting';
  if (s.state === 'error') return isModelProblem(s.message) ? 'no model: the model could not be loaded' : 'error';
  if (!s.enabled) return 'completions are off (runahead.enabled)';
  if (local.snoozedMinutes !== undefined) return `snoozed, ${local.snoozedMinutes} min left`;
  if (local.disabledLanguage) return `off for ${local.disabledLanguage} (runahead.disabledLanguages)`;
  return s.state;
}

/** What "/step" means, for the hover. */
export function perStepText(m: CompletionMetrics): string {
  return `${num(m.acceptedPerStep)} tokens per model step from speculative decoding (1.0 = no speed-up)`;
}

/**
 * Each distinct error logged once: `first(message)` says whether to log it; repeats are counted
 * and reported once, by `summary()`, when another message comes or the error clears.
 */
export class ErrorOnce {
  private current: string | undefined;
  private repeats = 0;
  private readonly seen = new Set<string>();

  /** True when `message` was not logged before. */
  first(message: string): boolean {
    if (message === this.current) {
      this.repeats++;
      return false;
    }
    this.current = message;
    this.repeats = 0;
    if (this.seen.has(message)) return false;
    this.seen.add(message);
    return true;
  }

  /** `the error above came N more times` when it repeated, then forgets it (the error cleared). */
  summary(): string | undefined {
    const line = this.current !== undefined && this.repeats > 0 ? `the error above came ${this.repeats} more time${this.repeats === 1 ? '' : 's'}: ${this.current}` : undefined;
    this.current = undefined;
    this.repeats = 0;
    return line;
  }
}

/** `engine /path/runahead-engine (runahead-engine 0.1.0) · model /path/model`: what runs, for the log; undefined until the server knows. */
export function engineLine(s: ServerStatus): string | undefined {
  if (!s.enginePath && !s.model) return undefined;
  return `engine ${s.enginePath ?? '–'}${s.engine ? ` (${s.engine})` : ''} · model ${s.model ?? '–'}`;
}

/** A path as a Markdown table cell: code-formatted, so `_` or `*` in it stay literal. */
export function pathCell(p: string | undefined): string {
  return p ? `\`${p.replace(/`/g, "'").replace(/\|/g, '\\|')}\`` : '–';
}
