// runahead.modelPath naming a .gguf file: the server reads the tokenizer from the file, the
// real engine loads it (Q8_0 matrices on the CPU's int8 kernels), and a completion is served.
import { strict as assert } from 'node:assert';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { writeGguf } from '../../server/src/bench/gguf';
import { engineBinary, repoRoot, TestClient } from './lspClient';

const embedded = join(repoRoot, 'engine', 'models', 'runahead-coder');
const uri = pathToFileURL(join(repoRoot, 'example', 'stats.py')).href;
const text = ['def mean(xs):', '    total = 0', '    for x in xs:', '        total += x', '    return ', ''].join('\n');

describe('a .gguf model file with the real engine', function () {
  this.timeout(60000);
  let dir: string;
  let client: TestClient;

  before(function () {
    if (!existsSync(engineBinary)) throw new Error(`no engine at ${engineBinary}: run node engine/setup.mjs`);
    dir = mkdtempSync(join(tmpdir(), 'runahead-gguf-int-'));
  });
  after(async () => {
    await client?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('completes with the embedded model exported to GGUF Q8_0', async () => {
    const file = writeGguf(embedded, join(dir, 'coder-q8_0.gguf'), { matrices: 'q8_0' }).path;
    client = new TestClient({ modelPath: file, enginePath: engineBinary, maxTokens: 24, deadlineMs: 5000 });
    await client.initialize();
    await client.waitReady();
    client.open(uri, text);
    await client.complete(uri, 4, '    return '.length);
    const m = client.metrics.find((x) => x.source === 'engine');
    assert.ok(m, `no engine metrics; got ${JSON.stringify(client.metrics)}`);
    assert.equal(m.model, file);
    assert.ok(m.tokens! > 0, `tokens ${m.tokens}`);
    assert.ok(m.promptTokens! > 10, `prompt tokens ${m.promptTokens}`);
  });
});
