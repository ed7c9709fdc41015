import { strict as assert } from 'node:assert';
import { CompletionCache } from '../../server/src/completion/cache';

describe('type-through cache', () => {
  const uri = 'file:///a.py';
  const prefix = 'import os\n\ndef main():\n    path = ';
  const suffix = '\n\nmain()\n';

  it('answers with the rest of the completion while the user types what it predicted', () => {
    const c = new CompletionCache();
    c.put(uri, prefix, suffix, 'os.path.join(root, "x")');
    assert.deepEqual(c.get(uri, prefix, suffix), { text: 'os.path.join(root, "x")', typed: 0, source: 'engine' });
    assert.deepEqual(c.get(uri, `${prefix}os.pa`, suffix), { text: 'th.join(root, "x")', typed: 5, source: 'engine' });
  });

  it('misses when the user types something else, the suffix changed, another file, or all of it was typed', () => {
    const c = new CompletionCache();
    c.put(uri, prefix, suffix, 'os.getcwd()');
    assert.equal(c.get(uri, `${prefix}sys`, suffix), undefined);
    assert.equal(c.get(uri, prefix, `${suffix}x`), undefined);
    assert.equal(c.get('file:///b.py', prefix, suffix), undefined);
    assert.equal(c.get(uri, `${prefix}os.getcwd()`, suffix), undefined);
    assert.equal(c.get(uri, `# edited\n${prefix}`, suffix), undefined);
  });

  it('still answers when the editor auto-closed the bracket the user typed', () => {
    const c = new CompletionCache();
    c.put(uri, prefix, suffix, 'os.getcwd()');
    assert.equal(c.get(uri, `${prefix}os.getcwd(`, `)${suffix}`)?.text, ')');
    assert.equal(c.get(uri, `${prefix}os.getcwd(`, `]${suffix}`)?.text, ')', 'the closer is not checked here: post-processing decides');
    assert.equal(c.get(uri, `${prefix}os.getcwd(`, `x)${suffix}`), undefined);
  });

  it('prefers the newest entry and forgets a closed file', () => {
    const c = new CompletionCache();
    c.put(uri, prefix, suffix, 'first()');
    c.put(uri, prefix, suffix, 'second()', 'prefetch');
    assert.deepEqual(c.get(uri, prefix, suffix), { text: 'second()', typed: 0, source: 'prefetch' });
    assert.equal(c.size, 1);
    c.clear(uri);
    assert.equal(c.get(uri, prefix, suffix), undefined);
  });

  it('keeps at most its capacity', () => {
    const c = new CompletionCache(4);
    for (let i = 0; i < 10; i++) c.put(uri, `${prefix}${i}`, suffix, `v${i}`);
    assert.equal(c.size, 4);
    assert.equal(c.get(uri, `${prefix}0`, suffix), undefined);
    assert.equal(c.get(uri, `${prefix}9`, suffix)?.text, 'v9');
  });
});
