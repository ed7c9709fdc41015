import { strict as assert } from 'node:assert';
import { checksText, ErrorOnce, headline, measuresSpeed, metricsLine, optimizationsText, perStepText, speedText, statusView, type CompletionMetrics, type ServerStatus } from '../../extension/src/format';

const statusText = (...a: Parameters<typeof statusView>) => {
  const { text, level } = statusView(...a);
  return { text, level };
};

const status = (patch: Partial<ServerStatus>): ServerStatus => ({ state: 'ready', message: '', enabled: true, warnings: [], restarts: 0, ...patch });
const metrics: CompletionMetrics = { source: 'engine', cacheHit: false, servedMs: 31.4, debounceMs: 20, chars: 40, ttftMs: 12.34, decodeMsPerToken: 0.912, acceptedPerStep: 4.08, tokens: 37, promptTokens: 830, reusedTokens: 812, finishReason: 'stop' };

describe('extension: status bar and log text', () => {
  it('shows ms/token and accepted tokens per step once a completion came from the engine', () => {
    assert.equal(speedText(metrics), '0.9 ms/tok · 4.1/step');
    assert.deepEqual(statusText(status({}), metrics), { text: '$(zap) 0.9 ms/tok · 4.1/step', level: 'normal' });
    assert.deepEqual(statusText(status({}), undefined), { text: '$(zap) Runahead', level: 'normal' });
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
    assert.deepEqual(statusText(status({ state: 'error', message: 'no model folder at /x' }), undefined), { text: '$(error) Runahead: no model', level: 'error' });
    assert.deepEqual(statusText(status({ state: 'error', message: 'engine /x/e exited with code 1' }), undefined), { text: '$(error) Runahead: error', level: 'error' });
    assert.equal(statusText(status({ enabled: false }), metrics).text, '$(circle-slash) Runahead: off');
  });

  it('writes one log line per completion with the numbers the grammar highlights', () => {
    const line = metricsLine(metrics);
    assert.match(line, /ttft 12\.3 ms/);
    assert.match(line, /0\.91 ms\/tok/);
    assert.match(line, /4\.08 accepted\/step/);
    assert.match(line, /reused 812\/830/);
    assert.equal(metricsLine({ ...metrics, source: 'cache', servedMs: 0.4 }), 'completion from cache in 0.4 ms · 40 chars');
  });

  it('names itself whenever it shows no figure, and says snoozed (with the time left) and off for a language', () => {
    for (const [s, m, local] of [[undefined, undefined, {}], [status({ state: 'loading' }), undefined, {}], [status({}), undefined, {}], [status({ state: 'error', message: 'x' }), metrics, {}], [status({}), metrics, { snoozedMinutes: 14 }], [status({}), metrics, { disabledLanguage: 'markdown' }]] as const) {
      assert.match(statusView(s, m, local).text, /Runahead/);
    }
    assert.deepEqual(statusView(status({}), metrics, { snoozedMinutes: 14 }), { text: '$(bell-slash) Runahead: snoozed 14 min', label: 'Runahead: snoozed, 14 minutes left. Click for actions.', level: 'normal', click: 'menu' });
    const md = statusView(status({}), metrics, { disabledLanguage: 'markdown' });
    assert.equal(md.text, '$(circle-slash) Runahead: off for markdown');
    assert.equal(md.click, 'enableLanguage');
    assert.equal(headline(status({}), { disabledLanguage: 'markdown' }), 'off for markdown (runahead.disabledLanguages)');
    // An error wins over a snooze: it needs the user.
    assert.equal(statusView(status({ state: 'error', message: 'no model' }), undefined, { snoozedMinutes: 3 }).level, 'error');
  });

  it('gives every state a spoken label without codicons or Markdown', () => {
    const states: ServerStatus[] = ['stopped', 'starting', 'loading', 'ready', 'degraded', 'restarting', 'error'].map((state) => status({ state: state as ServerStatus['state'], message: 'm' }));
    for (const s of [undefined, ...states, status({ enabled: false })]) {
      for (const local of [{}, { snoozedMinutes: 5 }, { disabledLanguage: 'plaintext' }]) {
        for (const m of [undefined, metrics]) {
          const { label } = statusView(s, m, local);
          assert.match(label, /^Runahead: /);
          assert.doesNotMatch(label, /\$\(|~spin|\*\*|&nbsp;|`/, label);
        }
      }
    }
    assert.equal(statusView(status({}), metrics).label, 'Runahead: 0.9 milliseconds per token, 4.1 tokens per model step.');
  });

  it('explains /step and writes optimisations in words', () => {
    assert.equal(perStepText(metrics), '4.1 tokens per model step from speculative decoding (1.0 = no speed-up)');
    assert.equal(optimizationsText({ cudaGraphs: true, fp8Head: false, drafter: 'lookup' }), 'cudaGraphs, fp8Head off, drafter: lookup');
  });

  it('says how much of the self-check is active, and why each other one is not', () => {
    assert.equal(checksText(undefined), '–');
    assert.equal(checksText([{ name: 'pdl', active: true, why: '40 of 41 edges' }]), '1 of 1 active');
    assert.equal(
      checksText([
        { name: 'pdl', active: true, why: '40 of 41 edges' },
        { name: 'mtp', active: false, why: 'no /m/mtp.safetensors' },
        { name: 'persistent_step', active: false, why: 'the cpu backend has no persistent_step', required: true },
      ]),
      '1 of 3 active; not active: mtp: no /m/mtp.safetensors; persistent_step (required): the cpu backend has no persistent_step',
    );
  });

  it('logs each distinct error once and counts its repeats', () => {
    const e = new ErrorOnce();
    assert.equal(e.first('no model at /a'), true);
    assert.equal(e.first('no model at /a'), false);
    assert.equal(e.first('no model at /a'), false);
    assert.equal(e.summary(), 'the error above came 2 more times: no model at /a');
    assert.equal(e.summary(), undefined);
    assert.equal(e.first('no model at /a'), false, 'the same error again later is not logged again');
    assert.equal(e.first('engine crashed'), true);
  });
});
