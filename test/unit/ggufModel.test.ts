// A .gguf file as runahead.modelPath: located, read (tokenizer, FIM and stop tokens, context,
// chat template from its metadata) and watched as a folder is.
import { strict as assert } from 'node:assert';
import { mkdirSync, mkdtempSync, rmSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeGguf } from '../../server/src/bench/gguf';
import { loadChatTemplate, modelChatTemplate } from '../../server/src/chat/template';
import { locateModel } from '../../server/src/engine/locate';
import { FolderWatch } from '../../server/src/model/folderWatch';
import { loadModelInfo } from '../../server/src/model/modelInfo';
import { repoRoot, until } from './helpers';

const embedded = join(repoRoot, 'engine', 'models', 'runahead-coder');
const chatModel = join(repoRoot, 'test', 'fixtures', 'models', 'qwen2-chat-tiny');

describe('GGUF model file', function () {
  this.timeout(60_000);
  let dir: string;
  let file: string;

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'runahead-gguf-model-'));
    file = join(dir, 'coder.gguf');
    writeGguf(embedded, file);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('is located as a model; a directory named .gguf or a missing file is refused by path', async () => {
    assert.equal((await locateModel(file)).problem, undefined);
    mkdirSync(join(dir, 'folder.gguf'));
    assert.match((await locateModel(join(dir, 'folder.gguf'))).problem!, /folder\.gguf .*not a regular file; expected a \.gguf model file/);
    assert.match((await locateModel(join(dir, 'none.gguf'))).problem!, /no model at .*none\.gguf: check runahead\.modelPath \(a Hugging Face model folder or a \.gguf file\)/);
  });

  it('reads the same FIM tokens, stop tokens and context length as the folder it was written from', async () => {
    const [fromFile, fromFolder] = await Promise.all([loadModelInfo(file), loadModelInfo(embedded)]);
    assert.equal(fromFile.dir, file);
    assert.deepEqual(fromFile.special, fromFolder.special);
    assert.deepEqual([...fromFile.stopTokens].sort(), [...fromFolder.stopTokens].sort());
    assert.equal(fromFile.contextLength, fromFolder.contextLength);
    assert.equal(fromFile.repoLevel, fromFolder.special.fileSep !== undefined);
    const text = 'def add(a, b):\n    return a + b\n';
    assert.deepEqual(fromFile.tokenizer.encode(text), fromFolder.tokenizer.encode(text));
    // A completion model: no template in the file, and chat says so naming the file.
    await assert.rejects(modelChatTemplate(fromFile), /coder\.gguf: no "tokenizer\.chat_template"/);
  });

  it('carries an instruct model\'s chat template, rendered as the folder\'s', async () => {
    const chatFile = join(dir, 'chat.gguf');
    writeGguf(chatModel, chatFile);
    const fromFile = await modelChatTemplate(await loadModelInfo(chatFile));
    const fromFolder = await loadChatTemplate(chatModel);
    const messages = [{ role: 'system' as const, content: 'Be brief.' }, { role: 'user' as const, content: 'Hi' }];
    assert.equal(fromFile.render(messages), fromFolder.render(messages));
    assert.equal(fromFile.toolFormat, fromFolder.toolFormat);
  });

  it('is watched: a rewritten file is reported by name', async () => {
    const changes: string[] = [];
    const watch = new FolderWatch((_dir, what) => changes.push(what), 20);
    try {
      watch.follow(file);
      await new Promise((r) => setTimeout(r, 60));
      const later = new Date(Date.now() + 5000);
      utimesSync(file, later, later);
      await until(() => changes.length > 0, 2000);
      assert.deepEqual(changes, ['coder.gguf changed']);
    } finally {
      watch.stop();
    }
  });
});
