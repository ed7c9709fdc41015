import { strict as assert } from 'node:assert';
import { shouldComplete } from '../../server/src/completion/trigger';

describe('trigger', () => {
  const on = { enabled: true, disabledLanguages: ['markdown'] };
  const at = (linePrefix: string, lineSuffix = '', languageId = 'python', triggerKind = 2) => ({ languageId, linePrefix, lineSuffix, triggerKind });

  it('completes at the end of a line and before closing brackets', () => {
    assert.equal(shouldComplete(at('    x = '), on).complete, true);
    assert.equal(shouldComplete(at('print(', ')'), on).complete, true);
  });

  it('does not complete inside a word while typing', () => {
    assert.equal(shouldComplete(at('    val', 'ue = 1'), on).complete, false);
  });

  it('respects runahead.enabled and disabledLanguages, unless invoked explicitly', () => {
    assert.equal(shouldComplete(at('x = '), { ...on, enabled: false }).complete, false);
    assert.equal(shouldComplete(at('# ', '', 'markdown'), on).complete, false);
    assert.equal(shouldComplete(at('# ', '', 'markdown', 1), on).complete, true);
    assert.equal(shouldComplete(at('x = ', '', 'python', 1), { ...on, enabled: false }).complete, true);
  });
});
