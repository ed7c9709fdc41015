import { strict as assert } from 'node:assert';
import { measuresSpeed, metricsLine, speedText, statusText, type CompletionMetrics, type ServerStatus } from '../../extension/src/format';

const status = (patch: Partial<ServerStatus>): ServerStatus => ({ state: 'ready', message: '', enabled: true, warnings: [], restarts: 0, ...patch });
const metrics: CompletionMetrics = { source: 'engine', cacheHit: false, servedMs: 31.4, debounceMs: 20, chars: 40, ttftMs: 12.34, decodeMsPerToken: 0.912, acceptedPerStep: 4.08, tokens: 37, promptTokens: 830, reusedTokens: 812, finishReason: 'stop' };

describe('extension: status bar and log text', () => {
  it('shows ms/token and accepted tokens per step once a completion came from the engine', () => {
    assert.equal(speedText(metrics), '0.9 ms/tok · 4.1/step');
    assert.deepEqual(statusText(status({}), metrics), { text: '$(zap) 0.9 ms/tok · 4.1/step', level: 'normal' });
    assert.deepEqual(statusText(status({}), undefined), { text: '$(zap) ready', level: 'normal' });
  });

  it('keeps the last real speed when a completion decoded nothing (e.g. right after a restart)', () => {
    assert.equal(measuresSpeed(metrics), true);
    assert.equal(measuresSpeed({ ...metrics, tokens: 0, decodeMsPerToken: 0, acceptedPerStep: 0 }), false);
    assert.equal(measuresSpeed({ ...metrics, tokens: 1, decodeMsPerToken: 0 }), false);
    assert.equal(measuresSpeed({ ...metrics, source: 'cache' }), false);
  });

  it('shows load progress, degraded, restarting, error and disabled', () => {
    assert.equal(statusText(status({ state: 'loading', progress: { stage: 'binding', done: 3, total: 4 } }), undefined).text, '$(loading~spin) Runahead 75%');
    assert.deepEqual(statusText(status({ state: 'degraded' }), metrics), { text: '$(warning) 0.9 ms/tok · 4.1/step', level: 'warning' });
    assert.equal(statusText(status({ state: 'restarting' }), metrics).level, 'warning');
    assert.deepEqual(statusText(status({ state: 'error', message: 'no model' }), undefined), { text: '$(error) Runahead', level: 'error' });
    assert.equal(statusText(status({ enabled: false }), metrics).text, '$(circle-slash) Runahead');
  });

  it('writes one log line per completion with the numbers the grammar highlights', () => {
    const line = metricsLine(metrics);
    assert.match(line, /ttft 12\.3 ms/);
    assert.match(line, /0\.91 ms\/tok/);
    assert.match(line, /4\.08 accepted\/step/);
    assert.match(line, /reused 812\/830/);
    assert.equal(metricsLine({ ...metrics, source: 'cache', servedMs: 0.4 }), 'completion from cache in 0.4 ms · 40 chars');
  });
});
