import { strict as assert } from 'node:assert';
import { requireOptions, speculationOptions, weightOptions, withoutWeightOptions } from '../../server/src/engine/loadOptions';
import { readSettings, type Settings } from '../../server/src/settings';

describe('engine load options for speculation', () => {
  const s = (patch: Partial<Settings>) => readSettings(patch);

  it('always sends the method and max_draft (engines ignore options they do not know)', () => {
    const warnings: string[] = [];
    assert.deepEqual(speculationOptions(s({}), undefined, [], warnings), { speculation: 'auto', max_draft: 8 });
    assert.deepEqual(speculationOptions(s({ speculation: 'off' }), '/m/draft', [], warnings), { speculation: 'off', max_draft: 8 });
    assert.deepEqual(warnings, []);
  });

  it('passes the method, draft model and max_draft, and warns when the engine lacks the method', () => {
    const warnings: string[] = [];
    assert.deepEqual(speculationOptions(s({ speculation: 'draft', maxDraftTokens: 6 }), '/m/draft', ['lookup', 'draft'], warnings), { speculation: 'draft', draft_model: '/m/draft', max_draft: 6 });
    assert.deepEqual(warnings, []);
    assert.deepEqual(speculationOptions(s({ speculation: 'mtp' }), undefined, ['lookup'], warnings), { speculation: 'mtp', max_draft: 8 });
    assert.match(warnings[0], /"mtp" was asked for but this engine supports lookup/);
  });

  it('on auto, offers the bundled draft model', () => {
    assert.deepEqual(speculationOptions(s({}), '/m/draft', ['lookup', 'mtp', 'draft'], []), { speculation: 'auto', draft_model: '/m/draft', max_draft: 8 });
  });
});

describe('engine load options for the weight format', () => {
  it('maps runahead.weights to options.weights / options.lm_head, and auto to none', () => {
    const s = (weights: unknown) => readSettings({ weights });
    assert.deepEqual(weightOptions(s('auto')), {});
    assert.deepEqual(weightOptions(s('q8_0')), { weights: 'q8_0' });
    assert.deepEqual(weightOptions(s('q4_k_m')), { weights: 'q4_k_m' });
    assert.deepEqual(weightOptions(s('fp8')), { weights: 'fp8' });
    assert.deepEqual(weightOptions(s('fp8-lm-head')), { lm_head: 'fp8' });
    assert.deepEqual(withoutWeightOptions({ backend: 'cpu', weights: 'fp8', lm_head: 'fp8', speculation: 'auto' }), { backend: 'cpu', speculation: 'auto' });
  });
});

describe('engine load options for the self-check', () => {
  it('sends runahead.requireOptimizations as options.require with fallback, and nothing when empty', () => {
    assert.deepEqual(requireOptions(readSettings({})), {});
    assert.deepEqual(requireOptions(readSettings({ requireOptimizations: ['pdl', 'persistent_step'] })), { require: ['pdl', 'persistent_step'], fallback: true });
    // A value of the wrong type is ignored like any other setting.
    assert.deepEqual(requireOptions(readSettings({ requireOptimizations: 'pdl' })), {});
  });
});
