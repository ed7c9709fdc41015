import { strict as assert } from 'node:assert';
import { RecentChunks, jaccard, linesAround } from '../../server/src/completion/contextChunks';

const file = (name: string, n = 60) => Array.from({ length: n }, (_, i) => `const ${name}_${i} = load("${name}", ${i});`).join('\n');

describe('recent chunks (ring buffer)', () => {
  it('keeps opened files in order and evicts the oldest past capacity', () => {
    const r = new RecentChunks({ capacity: 3, chunkLines: 10, similarity: 0.7 });
    for (const n of ['a', 'b', 'c', 'd']) r.opened(`file:///${n}.ts`, `${n}.ts`, file(n));
    assert.deepEqual(r.all().map((c) => c.path), ['b.ts', 'c.ts', 'd.ts']);
  });

  it('replaces a near-duplicate in place instead of appending it', () => {
    const r = new RecentChunks({ capacity: 8, chunkLines: 10, similarity: 0.7 });
    r.opened('file:///a.ts', 'a.ts', file('a'));
    r.opened('file:///b.ts', 'b.ts', file('b'));
    const edited = file('a').replace('load("a", 3)', 'load("a", 33)');
    r.opened('file:///a.ts', 'a.ts', edited);
    assert.deepEqual(r.all().map((c) => c.path), ['a.ts', 'b.ts']);
    assert.ok(r.all()[0].text.includes('load("a", 33)'));
  });

  it('adds an edited file only once the user completes elsewhere, and never the file being completed', () => {
    const r = new RecentChunks({ capacity: 8, chunkLines: 10, similarity: 0.7 });
    r.opened('file:///main.ts', 'main.ts', file('main'));
    r.edited('file:///util.ts', 'util.ts', file('util'), 30);
    assert.deepEqual(r.forCompletion('file:///util.ts').map((c) => c.path), ['main.ts']);
    const chunks = r.forCompletion('file:///main.ts');
    assert.deepEqual(chunks.map((c) => c.path), ['util.ts']);
    assert.ok(chunks[0].text.includes('util_30'), 'the chunk is around the edit');
  });

  it('measures similarity on identifiers', () => {
    assert.equal(jaccard('foo bar baz', 'baz bar foo'), 1);
    assert.ok(jaccard('foo bar', 'qux quux') === 0);
    assert.equal(linesAround('0\n1\n2\n3\n4\n5\n6', 5, 3), '4\n5\n6');
    assert.equal(linesAround('0\n1\n2\n3\n4\n5\n6', 0, 3), '0\n1\n2');
  });
});
