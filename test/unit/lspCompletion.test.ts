// The whole completion pipeline inside the real server (dist/server.js) over
// LSP (the LSP front end over the Completer; completer.test.ts drives the
// Completer alone), with the fake engine streaming a known completion (" foo(x)\n" in a
// loop: the model writes the space after "return " itself, see tokenHealing.ts),
// so what each stage does is visible in the answers and metrics.
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { TestClient } from '../integration/lspClient';
import { TextTokenizer } from '../../server/src/model/tokenizer';
import { fakeEngine, fixtureModel, repoRoot, sleep } from './helpers';

const uri = pathToFileURL(join(repoRoot, 'example', 'f.py')).href;
const doc = (body: string) => `import os\n\n\ndef f(x):\n    return ${body}\n\n\nprint(f(1))\n`;
const line = 4;
const col = (body: string) => '    return '.length + body.length;

describe('completion over LSP (server + fake engine)', function () {
  this.timeout(20000);
  let client: TestClient;
  const engineRuns = () => client.metrics.filter((m) => m.source === 'engine').length;

  beforeEach(async () => {
    const ids = (await TextTokenizer.load(fixtureModel)).encode(' foo(x)\n').join(',');
    client = new TestClient(
      { modelPath: fixtureModel, enginePath: fakeEngine, debounceMs: 0, disabledLanguages: ['markdown'] },
      { ...process.env, FAKE_TOKENS: ids, FAKE_TOKEN_MS: '1' },
    );
    await client.initialize();
    await client.waitReady();
    client.open(uri, doc(''));
  });
  afterEach(() => client.close());

  it('completes to the end of the statement: the next line at a lower indent is cut', async () => {
    const r = await client.complete(uri, line, col(''), undefined, 2);
    assert.equal(r?.items[0].insertText, 'foo(x)');
    assert.deepEqual(r?.items[0].range, { start: { line, character: col('') }, end: { line, character: col('') } });
    await sleep(20);
    const m = client.metrics.find((x) => x.source === 'engine')!;
    assert.equal(m.finishReason, 'enough', 'the engine was stopped once the block ended');
  });

  it('types through: what the user types of the shown completion is answered from the cache', async () => {
    await client.complete(uri, line, col(''), undefined, 2);
    await sleep(50);
    const before = engineRuns();
    client.replace(uri, doc('fo'));
    const r = await client.complete(uri, line, col('fo'), undefined, 2);
    assert.equal(r?.items[0].insertText, 'o(x)');
    await sleep(20);
    assert.equal(client.metrics[client.metrics.length - 1].source, 'cache');
    assert.equal(engineRuns(), before, 'the engine was not asked');
  });

  it('types through a bracket the editor auto-closed: the rest, without doubling the closer', async () => {
    await client.complete(uri, line, col(''), undefined, 2);
    await sleep(50);
    const before = engineRuns();
    client.replace(uri, doc('foo()'));
    const r = await client.complete(uri, line, col('foo('), undefined, 2);
    assert.equal(r?.items[0].insertText, 'x');
    assert.equal(engineRuns(), before, 'the engine was not asked');
  });

  it('prefetches the next completion: accepting shows it without a new engine request', async () => {
    await client.complete(uri, line, col(''), undefined, 2);
    await sleep(300); // the prefetch of what follows "foo(x)" runs meanwhile
    const before = engineRuns();
    client.replace(uri, doc('foo(x)'));
    const r = await client.complete(uri, line, col('foo(x)'), undefined, 2);
    await sleep(20);
    const last = client.metrics[client.metrics.length - 1];
    assert.ok(last.source === 'cache' || last.source === 'prefetch', `served by ${last.source}`);
    assert.equal(engineRuns(), before);
    assert.ok(last.servedMs < 200, `served in ${last.servedMs} ms`);
    assert.ok(r === null || typeof r.items[0].insertText === 'string');
  });

  it('extends the IntelliSense item the user has selected, replacing its range', async () => {
    client.replace(uri, doc('fo'));
    const params = {
      textDocument: { uri },
      position: { line, character: col('fo') },
      context: { triggerKind: 2 as const, selectedCompletionInfo: { range: { start: { line, character: col('') }, end: { line, character: col('fo') } }, text: 'foo_bar' } },
    };
    const r = await client.conn.sendRequest('textDocument/inlineCompletion', params);
    const item = (r as { items: { insertText: string; range: unknown }[] }).items[0];
    assert.ok(item.insertText.startsWith('foo_bar'), item.insertText);
    assert.deepEqual(item.range, params.context.selectedCompletionInfo.range);
  });

  it('does not complete while typing in a disabled language', async () => {
    const md = pathToFileURL(join(repoRoot, 'example', 'notes.md')).href;
    client.open(md, '# Notes\n\nSome text ', 'markdown');
    const r = await client.complete(md, 2, 'Some text '.length, undefined, 2);
    assert.equal(r, null);
    await sleep(20);
    assert.equal(client.metrics.length, 0);
  });
});

describe('server status when something is missing', function () {
  this.timeout(20000);

  it('says which model folder is missing and which setting to set, and serves nothing', async () => {
    const client = new TestClient({ modelPath: '/nonexistent/model', enginePath: fakeEngine });
    try {
      await client.initialize();
      const s = await client.waitStatus((x) => x.state === 'error');
      assert.match(s.message, /no model at \/nonexistent\/model/);
      assert.match(s.message, /runahead\.modelPath/);
      client.open(uri, doc(''));
      assert.equal(await client.complete(uri, line, col('')), null);
    } finally {
      await client.close();
    }
  });

  it('recovers when the setting is fixed', async () => {
    const client = new TestClient({ modelPath: '/nonexistent/model', enginePath: fakeEngine });
    try {
      await client.initialize();
      await client.waitStatus((x) => x.state === 'error');
      void client.conn.sendNotification('workspace/didChangeConfiguration', { settings: { runahead: { modelPath: fixtureModel } } });
      await client.waitStatus((x) => x.state === 'ready');
    } finally {
      await client.close();
    }
  });
});
