// Model discovery on fake folders laid out like the Hugging Face cache,
// Ollama's store, LM Studio's models folder and Runahead's downloads.
import { strict as assert } from 'node:assert';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultRoots, discoverModels, formatBytes, quantizationOf, type ModelRoots } from '../../server/src/models/discover';
import { catalog, expectedMsPerToken, folderName, neededFile, stepBandwidth } from '../../server/src/models/catalog';

function write(path: string, content: string | Buffer): void {
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, content);
}

describe('model discovery', () => {
  let home: string;
  let roots: ModelRoots;
  before(() => {
    home = mkdtempSync(join(tmpdir(), 'runahead-home-'));
    roots = { ...defaultRoots({}, home), downloaded: join(home, 'storage', 'models') };
    // Hugging Face cache: a complete snapshot (files are symlinks to blobs), and an incomplete one.
    const repo = join(roots.huggingFace, 'models--Qwen--Qwen2.5-Coder-1.5B');
    write(join(repo, 'blobs', 'abc'), Buffer.alloc(2000));
    const snap = join(repo, 'snapshots', 'rev1');
    write(join(snap, 'config.json'), '{"torch_dtype":"bfloat16"}');
    write(join(snap, 'tokenizer.json'), '{}');
    symlinkSync(join(repo, 'blobs', 'abc'), join(snap, 'model.safetensors'));
    write(join(roots.huggingFace, 'models--Org--NoWeights', 'snapshots', 'r', 'config.json'), '{}');
    write(join(roots.huggingFace, 'datasets--Org--Data', 'snapshots', 'r', 'config.json'), '{}');
    // Ollama: a manifest naming its model layer and config blob.
    const blobs = join(roots.ollama, 'blobs');
    write(join(blobs, 'sha256-aaa'), Buffer.alloc(3000));
    write(join(blobs, 'sha256-ccc'), '{"file_type":"Q4_K_M"}');
    write(
      join(roots.ollama, 'manifests', 'registry.ollama.ai', 'library', 'qwen2.5-coder', '1.5b-base'),
      JSON.stringify({ config: { digest: 'sha256:ccc' }, layers: [{ mediaType: 'application/vnd.ollama.image.model', digest: 'sha256:aaa', size: 3000 }, { mediaType: 'application/vnd.ollama.image.license', digest: 'sha256:bbb' }] }),
    );
    write(join(roots.ollama, 'manifests', 'registry.ollama.ai', 'library', 'gone', 'latest'), JSON.stringify({ layers: [{ mediaType: 'application/vnd.ollama.image.model', digest: 'sha256:missing' }] }));
    // LM Studio: GGUF files under publisher/repo; a projector file is not a model.
    write(join(roots.lmStudio[0], 'lmstudio-community', 'Qwen2.5-Coder-7B-GGUF', 'Qwen2.5-Coder-7B-Q8_0.gguf'), Buffer.alloc(4000));
    write(join(roots.lmStudio[0], 'lmstudio-community', 'Qwen2.5-Coder-7B-GGUF', 'mmproj-f16.gguf'), Buffer.alloc(10));
    // Runahead's downloads.
    const dl = join(roots.downloaded!, folderName('Qwen/Qwen2.5-Coder-0.5B'));
    write(join(dl, 'config.json'), '{}');
    write(join(dl, 'tokenizer.json'), '{}');
    write(join(dl, 'model.safetensors'), Buffer.alloc(1000));
    write(join(roots.downloaded!, 'half.download', 'config.json'), '{}');
  });
  after(() => rmSync(home, { recursive: true, force: true }));

  it('finds each complete model once, with name, path, size and quantization', () => {
    const found = discoverModels(roots);
    const by = Object.fromEntries(found.map((m) => [m.name, m]));
    assert.deepEqual(found.map((m) => m.name).sort(), ['Qwen/Qwen2.5-Coder-0.5B', 'Qwen/Qwen2.5-Coder-1.5B', 'lmstudio-community/Qwen2.5-Coder-7B-Q8_0', 'qwen2.5-coder:1.5b-base']);
    assert.deepEqual(
      { ...by['Qwen/Qwen2.5-Coder-1.5B'], path: undefined },
      { name: 'Qwen/Qwen2.5-Coder-1.5B', path: undefined, format: 'safetensors', from: 'Hugging Face cache', bytes: 2000, quantization: 'bf16' },
    );
    assert.match(by['Qwen/Qwen2.5-Coder-1.5B'].path, /snapshots[\\/]rev1$/);
    assert.deepEqual({ ...by['qwen2.5-coder:1.5b-base'], path: undefined }, { name: 'qwen2.5-coder:1.5b-base', path: undefined, format: 'gguf', from: 'Ollama', bytes: 3000, quantization: 'Q4_K_M' });
    assert.match(by['qwen2.5-coder:1.5b-base'].path, /blobs[\\/]sha256-aaa$/);
    assert.equal(by['lmstudio-community/Qwen2.5-Coder-7B-Q8_0'].quantization, 'Q8_0');
    assert.equal(by['Qwen/Qwen2.5-Coder-0.5B'].from, 'downloaded');
  });

  it('finds nothing, without throwing, where no tool keeps models', () => {
    assert.deepEqual(discoverModels(defaultRoots({}, join(home, 'nobody'))), []);
  });

  it('honours HF_HUB_CACHE, HF_HOME and OLLAMA_MODELS', () => {
    assert.equal(defaultRoots({ HF_HOME: '/h' }, '/home/u').huggingFace, join('/h', 'hub'));
    assert.equal(defaultRoots({ HF_HUB_CACHE: '/c' }, '/home/u').huggingFace, '/c');
    assert.equal(defaultRoots({ OLLAMA_MODELS: '/o' }, '/home/u').ollama, '/o');
    assert.equal(defaultRoots({}, '/home/u').huggingFace, join('/home/u', '.cache', 'huggingface', 'hub'));
  });

  it('reads quantization from GGUF names and formats sizes', () => {
    assert.equal(quantizationOf('Qwen2.5-Coder-1.5B.Q4_K_M.gguf'), 'Q4_K_M');
    assert.equal(quantizationOf('qwen2.5-coder-1.5b-q8_0.gguf'), 'Q8_0');
    assert.equal(quantizationOf('model-f16.gguf'), 'F16');
    assert.equal(quantizationOf('model.gguf'), undefined);
    assert.equal(formatBytes(1.65e9), '1.6 GB');
    assert.equal(formatBytes(988e6), '988 MB');
  });
});

describe('model catalog', () => {
  it('lists the Qwen2.5-Coder base models as safetensors, and GGUF Q8_0 and Q4_K_M', () => {
    assert.deepEqual(catalog.filter((m) => m.format === 'safetensors').map((m) => m.label), ['Qwen2.5-Coder 0.5B', 'Qwen2.5-Coder 1.5B', 'Qwen2.5-Coder 3B', 'Qwen2.5-Coder 7B']);
    assert.deepEqual(catalog.filter((m) => m.format === 'gguf').map((m) => m.quantization), ['Q8_0', 'Q4_K_M']);
    for (const m of catalog) assert.ok(m.licence && m.bytes > 0 && !/instruct/i.test(m.repo), m.repo);
  });

  it('keeps the files a model folder needs', () => {
    assert.deepEqual(['config.json', 'model-00001-of-00002.safetensors', 'model.safetensors.index.json', 'tokenizer.json', 'README.md', 'LICENSE', 'onnx/model.onnx'].filter(neededFile), ['config.json', 'model-00001-of-00002.safetensors', 'model.safetensors.index.json', 'tokenizer.json']);
  });

  it('expects ms/token from the bandwidth the loaded model achieved', () => {
    // 1 GB read in a 2 ms step (0.5 ms/tok at 4 tokens/step) is 0.5 GB/ms; a 3 GB model then takes 6 ms a step.
    const bw = stepBandwidth(1e9, 0.5, 4)!;
    assert.equal(bw, 5e8);
    assert.equal(expectedMsPerToken(3e9, bw), 6);
    assert.equal(stepBandwidth(0, 1, 1), undefined);
  });
});
