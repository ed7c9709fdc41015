import { strict as assert } from 'node:assert';
import { shouldComplete, type Trigger } from '../../server/src/completion/trigger';

describe('trigger', () => {
  const on = { enabled: true, disabledLanguages: ['markdown'] };
  const at = (linePrefix: string, lineSuffix = '', languageId = 'python', trigger: Trigger = 'automatic') => ({ languageId, linePrefix, lineSuffix, trigger });

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
    assert.equal(shouldComplete(at('# ', '', 'markdown', 'invoked'), on).complete, true);
    assert.equal(shouldComplete(at('x = ', '', 'python', 'invoked'), { ...on, enabled: false }).complete, true);
  });
});
