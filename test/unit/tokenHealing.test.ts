import { strict as assert } from 'node:assert';
import { afterPending, healTrailingWhitespace } from '../../server/src/completion/tokenHealing';

describe('token healing of trailing whitespace', () => {
  it('builds the prompt without the spaces after the cursor\'s last word', () => {
    assert.deepEqual(healTrailingWhitespace('    return '), { prefix: '    return', pending: ' ' });
    assert.deepEqual(healTrailingWhitespace('def f():\n    '), { prefix: 'def f():\n', pending: '    ' });
    assert.deepEqual(healTrailingWhitespace('x = 1\n'), { prefix: 'x = 1\n', pending: '' });
    assert.deepEqual(healTrailingWhitespace('a\t'), { prefix: 'a', pending: '\t' });
  });

  it('shows a completion only when the model wrote the same whitespace, without it', () => {
    assert.equal(afterPending(' x + 1', ' '), 'x + 1');
    assert.equal(afterPending('    return 0', '    '), 'return 0');
    assert.equal(afterPending('  ', '    '), undefined, 'too short to tell');
    assert.equal(afterPending('x', ' '), null, 'the model did not write the space');
    assert.equal(afterPending('  x', '    '), null, 'less indentation than typed');
    assert.equal(afterPending('abc', ''), 'abc');
  });
});
