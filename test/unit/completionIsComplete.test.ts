import { strict as assert } from 'node:assert';
import { completionIsComplete } from '../../server/src/completion/earlyStop';

describe('early stop (request stage asks the engine for no more tokens)', () => {
  const ctx = (prefix: string, suffix = '') => ({ prefix, suffix, languageId: 'python' });

  it('stops a one-line completion at its newline when text follows the cursor', () => {
    assert.equal(completionIsComplete('x, y', ctx('f(', 'z)')), false);
    assert.equal(completionIsComplete('x, y\n', ctx('f(', 'z)')), true);
  });

  it('stops once a line leaves the block, not before its indentation is known', () => {
    const c = ctx('def f(x):\n    ');
    assert.equal(completionIsComplete('y = x\n    return y\n', c), false);
    assert.equal(completionIsComplete('y = x\n    return y\n\ndef', c), true);
  });

  it('stops when the model repeats a whole line, but not on a line still being written', () => {
    const c = ctx('def f(x):\n    ');
    assert.equal(completionIsComplete('x = g(x)\n    x = g(x)', c), false);
    assert.equal(completionIsComplete('x = g(x)\n    x = g(x)\n', c), true);
  });
});
