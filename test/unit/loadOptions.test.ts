import { strict as assert } from 'node:assert';
import { speculationOptions } from '../../server/src/engine/loadOptions';
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
