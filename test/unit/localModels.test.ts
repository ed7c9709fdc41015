// The models `Runahead: Select Model` lists, read from a fake home: a Hugging
// Face cache (safetensors snapshots of a supported and an unsupported
// architecture, a Q8_0 one, a .gguf repository), an Ollama manifest + GGUF
// blob, an LM Studio .gguf, and junk that must be skipped without a throw.
import { strict as assert } from 'node:assert';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeGguf } from '../../server/src/bench/gguf';
import { defaultRoots, type ModelRoots } from '../../server/src/models/discover';
import { localModels, safetensorsQuantization, type LocalModel } from '../../server/src/models/localModels';
import { repoRoot } from './helpers';

const fixtures = join(repoRoot, 'test', 'fixtures', 'models');
const qwen2 = join(fixtures, 'qwen2-tied-bf16');
const qwen2f16 = join(fixtures, 'qwen2-untied-f16');

function write(path: string, content: string | Buffer): void {
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, content);
}

/** A safetensors file of zero-filled tensors with the given dtypes and shapes. */
function safetensors(tensors: Record<string, { dtype: string; shape: number[]; bytes: number }>): Buffer {
  let at = 0;
  const header: Record<string, unknown> = {};
  for (const [name, t] of Object.entries(tensors)) {
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + t.bytes] };
    at += t.bytes;
  }
  const json = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  return Buffer.concat([len, json, Buffer.alloc(at)]);
}

/** A Hugging Face model folder: the fixture's tokenizer, the given config and weights. */
function folder(dir: string, config: object, weights: Buffer): void {
  write(join(dir, 'config.json'), JSON.stringify(config));
  copyFileSync(join(qwen2, 'tokenizer.json'), join(dir, 'tokenizer.json'));
  writeFileSync(join(dir, 'model.safetensors'), weights);
}

describe('local models (Select Model)', function () {
  this.timeout(60_000);
  let home: string;
  let roots: ModelRoots;
  let found: LocalModel[];
  let by: Record<string, LocalModel>;
  const sizes: Record<string, number> = {};

  before(async () => {
    home = mkdtempSync(join(tmpdir(), 'runahead-local-models-'));
    roots = defaultRoots({}, home);
    const hub = roots.huggingFace;

    // Hugging Face cache: a qwen2 snapshot whose files are symlinks to blobs, as huggingface_hub writes them.
    const repo = join(hub, 'models--Qwen--Tiny-Coder');
    const snap = join(repo, 'snapshots', 'rev1');
    mkdirSync(snap, { recursive: true });
    for (const f of ['config.json', 'tokenizer.json', 'model.safetensors']) {
      copyFileSync(join(qwen2, f), join(repo, 'blobs-' + f));
      symlinkSync(join(repo, 'blobs-' + f), join(snap, f));
    }
    sizes.qwen2 = statSync(join(qwen2, 'model.safetensors')).size;
    // A Q8_0 folder: I8 weights with their weight_scale (engine/MODEL_FORMAT.md).
    const q8 = safetensors({ 'model.embed_tokens.weight': { dtype: 'I8', shape: [4, 32], bytes: 128 }, 'model.embed_tokens.weight_scale': { dtype: 'F32', shape: [4, 1], bytes: 16 }, 'model.norm.weight': { dtype: 'F32', shape: [32], bytes: 128 } });
    folder(join(hub, 'models--Org--Tiny-Q8', 'snapshots', 'r'), { model_type: 'qwen3' }, q8);
    sizes.q8 = q8.length;
    // Another architecture: listed with the reason it cannot load.
    folder(join(hub, 'models--microsoft--phi', 'snapshots', 'r'), { model_type: 'phi3' }, safetensors({ 'w.weight': { dtype: 'BF16', shape: [2, 2], bytes: 8 } }));
    // A GGUF repository in the cache.
    mkdirSync(join(hub, 'models--Org--Tiny-GGUF', 'snapshots', 'r'), { recursive: true });
    writeGguf(qwen2, join(hub, 'models--Org--Tiny-GGUF', 'snapshots', 'r', 'tiny-q8_0.gguf'), { matrices: 'q8_0' });

    // Ollama: manifest → model layer → GGUF blob.
    const blob = join(roots.ollama, 'blobs', 'sha256-' + 'a'.repeat(64));
    mkdirSync(join(blob, '..'), { recursive: true });
    writeGguf(qwen2, blob);
    sizes.ollama = statSync(blob).size;
    write(
      join(roots.ollama, 'manifests', 'registry.ollama.ai', 'library', 'tiny-coder', 'latest'),
      JSON.stringify({ layers: [{ mediaType: 'application/vnd.ollama.image.model', digest: 'sha256:' + 'a'.repeat(64), size: sizes.ollama }] }),
    );

    // LM Studio: publisher/repo/*.gguf.
    const lm = join(roots.lmStudio[0], 'someone', 'Tiny-Coder-GGUF');
    mkdirSync(lm, { recursive: true });
    writeGguf(qwen2f16, join(lm, 'tiny-coder-f16.gguf'));
    sizes.lmStudio = statSync(join(lm, 'tiny-coder-f16.gguf')).size;

    // Junk: a truncated GGUF, a GGUF that is text, a manifest naming a missing blob, a manifest that is not JSON,
    // non-model folders, a truncated safetensors, a symlink loop.
    writeFileSync(join(lm, 'truncated-q4_k_m.gguf'), readFileSync(join(lm, 'tiny-coder-f16.gguf')).subarray(0, 200));
    write(join(roots.lmStudio[1], 'x', 'y', 'notes.gguf'), 'not a gguf');
    write(join(roots.lmStudio[1], 'x', 'readme.txt'), 'hello');
    write(join(roots.ollama, 'manifests', 'registry.ollama.ai', 'library', 'gone', 'latest'), JSON.stringify({ layers: [{ mediaType: 'application/vnd.ollama.image.model', digest: 'sha256:missing' }] }));
    write(join(roots.ollama, 'manifests', 'registry.ollama.ai', 'library', 'broken', 'latest'), '{');
    write(join(hub, 'models--Org--NoWeights', 'snapshots', 'r', 'config.json'), '{"model_type":"qwen2"}');
    write(join(hub, 'datasets--Org--Data', 'snapshots', 'r', 'config.json'), '{}');
    write(join(hub, 'version.txt'), '1');
    folder(join(hub, 'models--Org--Cut', 'snapshots', 'r'), { model_type: 'qwen2' }, Buffer.from([200, 0, 0, 0, 0, 0, 0, 0, 123]));
    mkdirSync(join(hub, 'models--Org--Loop', 'snapshots'), { recursive: true });
    symlinkSync(join(hub, 'models--Org--Loop', 'snapshots'), join(hub, 'models--Org--Loop', 'snapshots', 'loop'));
    symlinkSync(join(hub, 'models--Org--Self', 'snapshots', 'a'), join(hub, 'models--Org--Loop', 'snapshots', 'dangling'));

    found = await localModels(roots);
    by = Object.fromEntries(found.map((m) => [m.name, m]));
  });
  after(() => rmSync(home, { recursive: true, force: true }));

  it('lists each readable model once, loadable ones first', () => {
    assert.deepEqual(found.slice(0, -1).map((m) => m.name).sort(), ['Org/Tiny-GGUF/tiny-q8_0', 'Org/Tiny-Q8', 'Qwen/Tiny-Coder', 'someone/tiny-coder-f16', 'tiny-coder:latest']);
    assert.equal(found.at(-1)?.name, 'microsoft/phi');
  });

  it('gives each its source, architecture, size on disk and quantization', () => {
    const facts = (m: LocalModel) => ({ from: m.from, format: m.format, architecture: m.architecture, bytes: m.bytes, quantization: m.quantization, problem: m.problem });
    assert.deepEqual(facts(by['Qwen/Tiny-Coder']), { from: 'Hugging Face cache', format: 'safetensors', architecture: 'qwen2', bytes: sizes.qwen2, quantization: 'bf16', problem: undefined });
    assert.match(by['Qwen/Tiny-Coder'].path, /snapshots[\\/]rev1$/);
    assert.deepEqual(facts(by['Org/Tiny-Q8']), { from: 'Hugging Face cache', format: 'safetensors', architecture: 'qwen3', bytes: sizes.q8, quantization: 'q8_0', problem: undefined });
    assert.equal(by['Org/Tiny-GGUF/tiny-q8_0'].quantization, 'Q8_0');
    assert.equal(by['Org/Tiny-GGUF/tiny-q8_0'].architecture, 'qwen2');
    assert.deepEqual(facts(by['tiny-coder:latest']), { from: 'Ollama', format: 'gguf', architecture: 'qwen2', bytes: sizes.ollama, quantization: 'BF16', problem: undefined });
    assert.match(by['tiny-coder:latest'].path, /blobs[\\/]sha256-a{64}$/);
    assert.deepEqual(facts(by['someone/tiny-coder-f16']), { from: 'LM Studio', format: 'gguf', architecture: 'qwen2', bytes: sizes.lmStudio, quantization: 'F16', problem: undefined });
  });

  it('keeps another architecture with the reason it cannot load', () => {
    assert.match(by['microsoft/phi'].problem ?? '', /architecture phi3 \(Runahead runs qwen2, qwen3, llama\)/);
  });

  it('finds nothing, without throwing, where no tool keeps models or the time is up', async () => {
    assert.deepEqual(await localModels(defaultRoots({}, join(home, 'nobody'))), []);
    assert.deepEqual(await localModels(roots, { totalTimeoutMs: 0 }), []);
    assert.ok((await localModels(roots, { maxModels: 2 })).length <= 2);
  });

  it('names the dtype that dominates a safetensors header, or q8_0 for I8 with a weight_scale', () => {
    assert.equal(safetensorsQuantization(new Map([['a.weight', 'F16'], ['b.weight', 'F16'], ['n.weight', 'F32']])), 'f16');
    assert.equal(safetensorsQuantization(new Map([['a.weight', 'I8'], ['a.weight_scale', 'F32'], ['n.weight', 'F32']])), 'q8_0');
    assert.equal(safetensorsQuantization(new Map()), undefined);
  });
});
