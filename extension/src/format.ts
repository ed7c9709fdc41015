// What the status bar and the log say, as plain functions of the server's
// runahead/status and runahead/metrics notifications (no VS Code API here, so
// the unit tests can check them). The metrics and status types are the
// server's own, so the wire format is defined once.
import type { EngineStatus } from '../../server/src/engine/supervisor';
import type { CompletionMetrics } from '../../server/src/metrics';
import type { RemoteInfo } from '../../server/src/remote/remoteSource';

export type { CompletionMetrics };

/** runahead/status: the engine supervisor's status and what the server adds to it. */
export type ServerStatus = EngineStatus & { enabled: boolean; fimOrder?: string; remote?: RemoteInfo };

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
  return Object.entries(o).map(([k, v]) => (v === true ? k : v === false ? `~~${k}~~` : `${k}: ${String(v)}`)).join(', ');
}

/** The status bar item's text and colour for a status and the last engine completion. */
export function statusText(s: ServerStatus | undefined, last: CompletionMetrics | undefined): { text: string; level: 'normal' | 'warning' | 'error' } {
  const speed = last ? speedText(last) : 'ready';
  if (!s) return { text: '$(loading~spin) Runahead', level: 'normal' };
  if (!s.enabled) return { text: '$(circle-slash) Runahead', level: 'normal' };
  switch (s.state) {
    case 'starting':
    case 'loading': {
      const pct = s.progress && s.progress.total > 0 ? ` ${Math.round((100 * s.progress.done) / s.progress.total)}%` : '';
      return { text: `$(loading~spin) Runahead${pct}`, level: 'normal' };
    }
    case 'restarting':
      return { text: '$(loading~spin) Runahead restarting', level: 'warning' };
    case 'ready':
      return { text: `$(zap) ${speed}`, level: 'normal' };
    case 'degraded':
      return { text: `$(warning) ${speed}`, level: 'warning' };
    default:
      return { text: '$(error) Runahead', level: 'error' };
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
