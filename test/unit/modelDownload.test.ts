// Model download against a local hub (test/unit/fakes/fakeHub.ts): the whole
// folder, resume after a dropped connection and after a cancel (HTTP Range),
// a corrupt file refused by its sha256, and too little disk space.
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DownloadError, downloadModel } from '../../server/src/models/download';
import { isModelFolder } from '../../server/src/models/discover';
import { startFakeHub, type FakeFile, type FakeHub } from './fakes/fakeHub';

const repo = 'Qwen/Tiny-Coder';
const weights = randomBytes(3 << 20);
const files: FakeFile[] = [
  { path: 'config.json', content: Buffer.from('{"model_type":"qwen2","torch_dtype":"bfloat16"}') },
  { path: 'tokenizer.json', content: Buffer.from('{"model":{}}') },
  { path: 'README.md', content: Buffer.from('not needed') },
  { path: 'model.safetensors', content: weights, lfs: true },
];

describe('model download (local hub)', function () {
  // Hashing and writing a few MB: quick alone, slower on a busy machine.
  this.timeout(20_000);
  let hub: FakeHub;
  let dir: string;
  beforeEach(async () => {
    hub = await startFakeHub(repo, files);
    dir = mkdtempSync(join(tmpdir(), 'runahead-dl-'));
  });
  afterEach(async () => {
    await hub.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('downloads the files a model folder needs, verified, with progress', async () => {
    const progress: number[] = [];
    const dest = await downloadModel({ repo, dest: join(dir, 'Qwen--Tiny-Coder'), hubUrl: hub.url, onProgress: (d, t) => progress.push(d / t) });
    assert.deepEqual(readdirSync(dest).sort(), ['config.json', 'model.safetensors', 'tokenizer.json']);
    assert.ok(readFileSync(join(dest, 'model.safetensors')).equals(weights));
    assert.ok(isModelFolder(dest));
    assert.equal(progress.at(-1), 1);
    assert.ok(!existsSync(`${dest}.download`));
  });

  it('resumes with a Range request after the connection drops', async () => {
    hub.dropAfter(1 << 20, 1);
    const dest = await downloadModel({ repo, dest: join(dir, 'm'), hubUrl: hub.url, files: ['model.safetensors'] });
    assert.ok(readFileSync(join(dest, 'model.safetensors')).equals(weights));
    const gets = hub.requests.filter((r) => r.path === 'model.safetensors');
    assert.equal(gets.length, 2);
    assert.equal(gets[0].range, undefined);
    assert.match(gets[1].range ?? '', /^bytes=[1-9]\d*-$/, 'the second request resumes');
  });

  it('keeps the partial file when every retry drops, and a later run resumes it', async () => {
    hub.dropAfter(1 << 20, 2);
    await assert.rejects(downloadModel({ repo, dest: join(dir, 'm'), hubUrl: hub.url, retries: 0, files: ['model.safetensors'] }), (e: DownloadError) => e.kind === 'network' && /resume/.test(e.message));
    const part = join(dir, 'm.download', 'model.safetensors.part');
    assert.ok(statSync(part).size > 0 && statSync(part).size < weights.length);
    const dest = await downloadModel({ repo, dest: join(dir, 'm'), hubUrl: hub.url, files: ['model.safetensors'] });
    assert.ok(readFileSync(join(dest, 'model.safetensors')).equals(weights));
    assert.ok(hub.requests.filter((r) => r.path === 'model.safetensors').some((r) => r.range));
  });

  it('resumes after a cancel', async () => {
    const abort = new AbortController();
    await assert.rejects(
      downloadModel({ repo, dest: join(dir, 'm'), hubUrl: hub.url, signal: abort.signal, onProgress: (d) => d > 1 << 20 && abort.abort() }),
      (e: DownloadError) => e.kind === 'cancelled',
    );
    const dest = await downloadModel({ repo, dest: join(dir, 'm'), hubUrl: hub.url });
    assert.ok(readFileSync(join(dest, 'model.safetensors')).equals(weights));
  });

  it('refuses a corrupt file by its sha256 and removes it', async () => {
    hub.corrupt('model.safetensors');
    await assert.rejects(downloadModel({ repo, dest: join(dir, 'm'), hubUrl: hub.url }), (e: DownloadError) => e.kind === 'checksum' && /model\.safetensors: sha256 [0-9a-f]{64} differs/.test(e.message));
    assert.ok(!existsSync(join(dir, 'm.download', 'model.safetensors.part')));
    assert.ok(!existsSync(join(dir, 'm')));
  });

  it('refuses a small file whose git blob id differs', async () => {
    hub.corrupt('config.json');
    await assert.rejects(downloadModel({ repo, dest: join(dir, 'm'), hubUrl: hub.url }), (e: DownloadError) => e.kind === 'checksum' && /config\.json: git blob id/.test(e.message));
  });

  it('checks the disk space before the first byte', async () => {
    await assert.rejects(downloadModel({ repo, dest: join(dir, 'm'), hubUrl: hub.url, freeBytes: async () => 1000 }), (e: DownloadError) => e.kind === 'space' && /needs 3 MB more; .* has 1 kB free/.test(e.message));
    assert.equal(hub.requests.length, 0);
  });
});
