import { strict as assert } from 'node:assert';
import { FimBuilder, alignFor } from '../../server/src/completion/fim';
import { loadModelInfo, type ModelInfo } from '../../server/src/model/modelInfo';
import { fixtureModel } from './helpers';

function commonPrefix(a: number[], b: number[]): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

describe('FIM prompt', () => {
  let info: ModelInfo;
  let tok: ModelInfo['tokenizer'];
  let sp: ModelInfo['special'];
  before(async () => {
    info = await loadModelInfo(fixtureModel);
    ({ tokenizer: tok, special: sp } = info);
  });
  const code = Array.from({ length: 400 }, (_, i) => `    value_${i} = compute(${i}, "item ${i}")`).join('\n');
  const cut = code.indexOf('value_200');
  const prefix = code.slice(0, cut);
  const suffix = code.slice(cut);

  it('lays out PSM with repo name and file separator', async () => {
    const fim = new FimBuilder(tok, sp, 'psm');
    const p = await fim.build({ prefix: 'def f(x):\n    return ', suffix: '\n\nprint(f(2))\n', path: 'src/f.py', repoName: 'demo', extra: [], budget: 512 });
    const text = tok.decode(p.ids);
    assert.equal(text, '<|repo_name|>demo\n<|file_sep|>src/f.py\n<|fim_prefix|>def f(x):\n    return <|fim_suffix|>\n\nprint(f(2))\n<|fim_middle|>');
    assert.equal(p.ids[p.ids.length - 1], sp.fimMiddle);
  });

  it('lays out SPM: suffix first, then the prefix right before <|fim_middle|>', async () => {
    const fim = new FimBuilder(tok, sp, 'spm');
    const p = await fim.build({ prefix: 'a = ', suffix: '\nb = 2\n', path: 'x.py', extra: [], budget: 512 });
    assert.equal(tok.decode(p.ids), '<|file_sep|>x.py\n<|fim_suffix|>\nb = 2\n<|fim_prefix|>a = <|fim_middle|>');
  });

  it('leaves out the repo-level head and other files for a model without that format', async () => {
    const fim = new FimBuilder(tok, sp, 'spm', false);
    const p = await fim.build({ prefix: 'a = ', suffix: '\nb = 2\n', path: 'x.py', repoName: 'r', extra: [{ path: 'o.py', text: 'x = 1\n' }], budget: 512 });
    assert.equal(tok.decode(p.ids), '<|fim_suffix|>\nb = 2\n<|fim_prefix|>a = <|fim_middle|>');
    assert.equal(p.extraFiles, 0);
  });

  it('keeps the prompt within the token budget, prefix ending at the cursor and suffix starting there', async () => {
    const fim = new FimBuilder(tok, sp, 'psm');
    for (const budget of [128, 512, 2048]) {
      const p = await fim.build({ prefix, suffix, path: 'big.py', extra: [], budget });
      assert.ok(p.ids.length <= budget, `${p.ids.length} tokens for a budget of ${budget}`);
      assert.ok(p.ids.length >= budget * 0.6, `only ${p.ids.length} of ${budget} tokens used`);
      assert.ok(prefix.endsWith(p.prefix) && p.prefix.length > 0);
      assert.ok(suffix.startsWith(p.suffix) && p.suffix.length > 0);
      assert.ok(p.prefixTokens > p.suffixTokens, 'the prefix gets the larger share');
    }
  });

  it('moves the prefix window in whole blocks of lines, so typing keeps the prompt head', async () => {
    const fim = new FimBuilder(tok, sp, 'spm');
    const a = await fim.build({ prefix, suffix, path: 'big.py', extra: [], budget: 1024 });
    const b = await fim.build({ prefix: prefix + 'x', suffix, path: 'big.py', extra: [], budget: 1024 });
    const c = await fim.build({ prefix: prefix + 'xy', suffix, path: 'big.py', extra: [], budget: 1024 });
    // SPM: a keystroke only changes the tokens at the very end.
    assert.ok(commonPrefix(a.ids, b.ids) >= a.ids.length - 3, `shared ${commonPrefix(a.ids, b.ids)} of ${a.ids.length}`);
    assert.ok(commonPrefix(b.ids, c.ids) >= b.ids.length - 3);
    const d = await fim.build({ prefix: `${prefix}x = 1\n    y = `, suffix, path: 'big.py', extra: [], budget: 1024 });
    assert.equal(d.prefix.split('\n')[0], a.prefix.split('\n')[0], 'a new line does not move the window start');
    const firstLine = code.split('\n').indexOf(a.prefix.split('\n')[0]);
    assert.equal(firstLine % alignFor(a.prefix.split('\n').length), 0, 'the window starts on a block boundary');
  });

  it('puts recent files first, in their order, and drops the oldest when over budget', async () => {
    const fim = new FimBuilder(tok, sp, 'psm');
    const extra = [
      { path: 'a.py', text: 'def alpha():\n    return 1\n' },
      { path: 'b.py', text: 'def beta():\n    return 2\n' },
    ];
    const p = await fim.build({ prefix: 'x = ', suffix: '', path: 'main.py', repoName: 'r', extra, budget: 512 });
    const text = tok.decode(p.ids);
    assert.ok(text.startsWith('<|repo_name|>r\n<|file_sep|>a.py\ndef alpha():\n    return 1\n<|file_sep|>b.py\ndef beta():'), text);
    assert.equal(p.extraFiles, 2);
    const big = [{ path: 'old.py', text: 'z = 0\n'.repeat(300) }, ...extra];
    const q = await fim.build({ prefix: 'x = ', suffix: '', path: 'main.py', repoName: 'r', extra: big, budget: 512 });
    assert.ok(!tok.decode(q.ids).includes('old.py'));
    assert.equal(q.extraFiles, 2);
    assert.ok(q.ids.length <= 512);
  });

  it('builds from a 1 MB one-line file and a 100k-line file without tokenizing past the budget', async () => {
    const fim = new FimBuilder(tok, sp, 'psm');
    const minified = Array.from({ length: 60_000 }, (_, i) => `var a${i}=f(${i});`).join('').slice(0, 1 << 20);
    const long = Array.from({ length: 100_000 }, (_, i) => `    value_${i} = compute(${i})`).join('\n');
    for (const [name, text] of [['1 MB line', minified], ['100k lines', long]]) {
      const t0 = performance.now();
      const p = await fim.build({ prefix: text, suffix: text.slice(0, 5000), path: 'big.js', extra: [], budget: 2048 });
      const ms = performance.now() - t0;
      assert.ok(ms < 500, `${name}: ${ms.toFixed(0)} ms`);
      assert.ok(p.ids.length <= 2048 && p.ids.length > 1000, `${name}: ${p.ids.length} tokens`);
      assert.ok(text.endsWith(p.prefix), `${name}: the prefix window ends at the cursor`);
    }
  });

  it('keeps the event loop free while it encodes: no step of a big prompt holds it 50 ms', async () => {
    const fim = new FimBuilder(tok, sp, 'psm');
    const minified = Array.from({ length: 60_000 }, (_, i) => `var b${i}=g(${i});`).join('');
    let worst = 0;
    let last = performance.now();
    const ticker = setInterval(() => {
      worst = Math.max(worst, performance.now() - last);
      last = performance.now();
    }, 1);
    await fim.build({ prefix: minified, suffix: '', path: 'min.js', extra: [], budget: 2048 });
    clearInterval(ticker);
    // Pieces take ~20 ms on this tokenizer; the bound leaves room for a loaded test machine.
    assert.ok(worst < 100, `the event loop waited ${worst.toFixed(0)} ms`);
  });
});

