import { strict as assert } from 'node:assert';
import { StreamDecoder, TextTokenizer } from '../../server/src/model/tokenizer';
import { loadModelInfo, readFimOrder, readRepoLevel } from '../../server/src/model/modelInfo';
import { fixtureModel } from './helpers';

describe('tokenizer', () => {
  let tok: TextTokenizer;
  before(async () => {
    tok = await TextTokenizer.load(fixtureModel);
  });

  it('round-trips code with multi-byte characters', () => {
    const text = 'def grüße(n):\n    return "日本語 ✓ 🚀" * n\n';
    assert.equal(tok.decode(tok.encode(text)), text);
  });

  it('streams without ever emitting half a UTF-8 character, token by token', () => {
    const text = 'π ≈ 3.14159 — “quotes” and emoji 🚀🚀 and 日本語\n';
    const ids = tok.encode(text);
    assert.ok(ids.length > 10);
    const d = new StreamDecoder(tok);
    let out = '';
    for (const id of ids) {
      const piece = d.push([id]);
      assert.ok(!piece.includes('\uFFFD'), `emitted a replacement character after token ${id}`);
      out += piece;
    }
    assert.equal(out + d.flush(), text);
  });

  it('streams batches of several tokens (speculative steps) the same way', () => {
    const text = 'const s = "ünïcödé ✓";\n'.repeat(3);
    const ids = tok.encode(text);
    const d = new StreamDecoder(tok);
    let out = '';
    for (let i = 0; i < ids.length; i += 3) out += d.push(ids.slice(i, i + 3));
    assert.equal(out + d.flush(), text);
  });

  it('finds the FIM and repo-level special tokens of the model', async () => {
    const info = await loadModelInfo(fixtureModel);
    for (const t of ['<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>', '<|file_sep|>', '<|repo_name|>']) {
      assert.notEqual(tok.tokenId(t), undefined, t);
    }
    assert.equal(info.special.fimPrefix, tok.tokenId('<|fim_prefix|>'));
    assert.ok(info.stopTokens.includes(tok.tokenId('<|endoftext|>')!));
    assert.ok(info.stopTokens.includes(tok.tokenId('<|file_sep|>')!));
    assert.equal(info.fimOrder, 'psm');
  });

  it('uses repo-level context for models with the tokens, unless trained here without it', async () => {
    const special = (await loadModelInfo(fixtureModel)).special;
    assert.equal(readRepoLevel({}, special), true);
    assert.equal(readRepoLevel({ runahead: { fim_order: 'spm' } }, special), false);
    assert.equal(readRepoLevel({ runahead: { repo_level: true } }, special), true);
    assert.equal(readRepoLevel({}, { ...special, fileSep: undefined }), false);
  });

  it('reads the FIM order from config.json, then tokenizer_config.json', () => {
    assert.equal(readFimOrder({ runahead: { fim_order: 'spm' } }, {}), 'spm');
    assert.equal(readFimOrder({}, { runahead_fim_order: 'spm' }), 'spm');
    assert.equal(readFimOrder({ runahead: { fim_order: 'psm' } }, { runahead_fim_order: 'spm' }), 'psm');
    assert.equal(readFimOrder({}, {}), 'psm');
  });
});
