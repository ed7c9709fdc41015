// Reading a model folder the server does not trust: FIFOs, device links, huge
// and broken files end in errors that name the file, never in a blocked or
// swollen server; a changed folder is noticed.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { TestClient } from '../integration/lspClient';
import { loadModelInfo } from '../../server/src/model/modelInfo';
import { ModelState } from '../../server/src/model/modelState';
import { FolderWatch } from '../../server/src/model/folderWatch';
import { fakeEngine, fixtureModel, repoRoot, until } from './helpers';

describe('model folder', function () {
  this.timeout(20000);
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'runahead-model-'));
    cpSync(fixtureModel, dir, { recursive: true });
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const fails = (re: RegExp) => loadModelInfo(dir).then(() => assert.fail('loaded'), (err: Error) => assert.match(err.message, re));
  const replace = (name: string) => rmSync(join(dir, name));

  it('refuses a FIFO and a link to /dev/zero by name, without reading them', async () => {
    replace('config.json');
    execFileSync('mkfifo', [join(dir, 'config.json')]);
    await fails(/config\.json is a FIFO; expected a regular file/);
    replace('tokenizer.json');
    symlinkSync('/dev/zero', join(dir, 'tokenizer.json'));
    replace('config.json');
    cpSync(join(fixtureModel, 'config.json'), join(dir, 'config.json'));
    await fails(/tokenizer\.json is a device; expected a regular file/);
  });

  it('refuses a file over 64 MiB, saying the cap', async () => {
    truncateSync(join(dir, 'tokenizer.json'), 65 * 2 ** 20);
    await fails(/tokenizer\.json is 65 MiB; the server reads model files of at most 64 MiB/);
  });

  it('names the file of a JSON error, a tokenizer without model.vocab, and ids past vocab_size', async () => {
    writeFileSync(join(dir, 'config.json'), '{"a": 1, oops}');
    await fails(/config\.json: not valid JSON \(/);
    cpSync(join(fixtureModel, 'config.json'), join(dir, 'config.json'));
    const tok = JSON.parse(readFileSync(join(fixtureModel, 'tokenizer.json'), 'utf8'));
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify({ ...tok, model: { ...tok.model, vocab: undefined } }));
    await fails(/tokenizer\.json: no model\.vocab; expected/);
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tok));
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...JSON.parse(readFileSync(join(fixtureModel, 'config.json'), 'utf8')), vocab_size: 100 }));
    await fails(/tokenizer\.json has token id \d+, but .*config\.json says vocab_size 100/);
  });

  it('drops a read overtaken by a newer one', async () => {
    const model = new ModelState(() => undefined);
    const first = model.load(dir);
    const second = model.load(fixtureModel);
    await Promise.all([first, second]);
    assert.equal(model.path, fixtureModel);
    assert.ok(model.context && !model.problem && !model.loading);
    model.stop();
  });

  it('notices a changed weight file', async () => {
    const changes: string[] = [];
    const watch = new FolderWatch((_, what) => changes.push(what), 50);
    watch.follow(dir);
    await new Promise((r) => setTimeout(r, 120));
    writeFileSync(join(dir, 'model.safetensors'), 'truncated');
    await until(() => changes.length > 0, 2000, 'a change');
    watch.stop();
    assert.match(changes[0], /model\.safetensors changed/);
  });

  it('a FIFO config.json leaves the server answering runahead/status at once', async () => {
    replace('config.json');
    execFileSync('mkfifo', [join(dir, 'config.json')]);
    const client = new TestClient({ modelPath: dir, enginePath: fakeEngine });
    try {
      await client.initialize();
      const s = await client.waitStatus((x) => x.state === 'error');
      assert.match(s.message, /config\.json is a FIFO/);
      const t0 = performance.now();
      await client.conn.sendRequest('runahead/status');
      assert.ok(performance.now() - t0 < 200, `status took ${performance.now() - t0} ms`);
      client.open(pathToFileURL(join(repoRoot, 'x.py')).href, 'x = ');
      assert.equal(await client.complete(pathToFileURL(join(repoRoot, 'x.py')).href, 0, 4), null);
    } finally {
      await client.close();
    }
  });
});
