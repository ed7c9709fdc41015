// Models already on this machine, for `Runahead: Select Model`: Hugging Face
// cache snapshots (config.json + *.safetensors + tokenizer.json), Ollama's
// store (manifests → blobs, GGUF) and LM Studio's models folder (GGUF), plus
// the models Runahead downloaded itself. Reads folders only; loads nothing.
import { existsSync, readdirSync, readFileSync, statSync, type Dirent } from 'node:fs';
import { homedir } from 'node:os';
import { basename, join, relative } from 'node:path';

export type ModelFormat = 'safetensors' | 'gguf';

export interface FoundModel {
  /** What the user reads: `Qwen/Qwen2.5-Coder-1.5B`, `qwen2.5-coder:1.5b-base`. */
  name: string;
  /** What runahead.modelPath gets: a folder (safetensors) or a file (GGUF). */
  path: string;
  format: ModelFormat;
  from: 'Hugging Face cache' | 'Ollama' | 'LM Studio' | 'downloaded';
  bytes: number;
  /** `bf16`, `Q8_0`, `Q4_K_M`… when known. */
  quantization?: string;
}

/** Where each tool keeps its models, honouring the environment variables each one reads. */
export interface ModelRoots {
  huggingFace: string;
  ollama: string;
  lmStudio: string[];
  /** Runahead's own downloads (the extension's global storage). */
  downloaded?: string;
}

export function defaultRoots(env: NodeJS.ProcessEnv = process.env, home = homedir()): ModelRoots {
  const hfHome = env.HF_HOME || join(env.XDG_CACHE_HOME || join(home, '.cache'), 'huggingface');
  return {
    huggingFace: env.HF_HUB_CACHE || env.HUGGINGFACE_HUB_CACHE || join(hfHome, 'hub'),
    ollama: env.OLLAMA_MODELS || join(home, '.ollama', 'models'),
    lmStudio: [join(home, '.lmstudio', 'models'), join(home, '.cache', 'lm-studio', 'models')],
  };
}

const QUANT = /(?:^|[._-])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|FP16)(?=[._-]|$)/i;

/** The quantization a GGUF file name states (`model.Q4_K_M.gguf` → `Q4_K_M`). */
export function quantizationOf(name: string): string | undefined {
  return QUANT.exec(name.replace(/\.gguf$/i, ''))?.[1].toUpperCase();
}

/** The most entries read from one folder: a huge or odd folder is not walked whole. */
export const MAX_ENTRIES = 2000;

function entries(path: string): string[] {
  try {
    return readdirSync(path).slice(0, MAX_ENTRIES);
  } catch {
    return [];
  }
}

function dirs(path: string): string[] {
  try {
    return readdirSync(path, { withFileTypes: true }).slice(0, MAX_ENTRIES).filter((d) => d.isDirectory() || d.isSymbolicLink()).map((d) => d.name);
  } catch {
    return [];
  }
}

function mtime(path: string): number {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

function isGgufFile(name: string): boolean {
  return name.toLowerCase().endsWith('.gguf') && !name.startsWith('mmproj');
}

function size(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** A complete Hugging Face model folder: what the engine needs to load it. */
export function isModelFolder(dir: string): boolean {
  const files = entries(dir);
  return files.includes('config.json') && files.includes('tokenizer.json') && files.some((f) => f.endsWith('.safetensors'));
}

function folderModel(dir: string, name: string, from: FoundModel['from']): FoundModel {
  const files = entries(dir).filter((f) => f.endsWith('.safetensors'));
  let dtype: string | undefined;
  try {
    dtype = (JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { torch_dtype?: string }).torch_dtype?.replace('bfloat16', 'bf16').replace('float16', 'f16');
  } catch {
    dtype = undefined;
  }
  return { name, path: dir, format: 'safetensors', from, bytes: files.reduce((n, f) => n + size(join(dir, f)), 0), quantization: dtype };
}

/** `models--Org--Name/snapshots/<rev>/`: the newest complete snapshot of each cached repository, and the `.gguf` files of the newest snapshot that has any. */
function huggingFaceModels(hub: string): FoundModel[] {
  const found: FoundModel[] = [];
  for (const repo of dirs(hub).filter((d) => d.startsWith('models--'))) {
    const name = repo.slice('models--'.length).split('--').join('/');
    const snapshots = join(hub, repo, 'snapshots');
    const revs = dirs(snapshots)
      .map((rev) => join(snapshots, rev))
      .sort((a, b) => mtime(b) - mtime(a));
    const complete = revs.find(isModelFolder);
    if (complete) found.push(folderModel(complete, name, 'Hugging Face cache'));
    const withGguf = revs.find((rev) => entries(rev).some(isGgufFile));
    for (const file of withGguf ? entries(withGguf).filter(isGgufFile) : []) {
      found.push({ name: `${name}/${basename(file, '.gguf')}`, path: join(withGguf!, file), format: 'gguf', from: 'Hugging Face cache', bytes: size(join(withGguf!, file)), quantization: quantizationOf(file) });
    }
  }
  return found;
}

interface OllamaManifest {
  layers?: { mediaType?: string; digest?: string; size?: number }[];
  config?: { digest?: string };
}

/** `manifests/<registry>/<namespace>/<model>/<tag>` → the blob of the layer `application/vnd.ollama.image.model`. */
function ollamaModels(root: string): FoundModel[] {
  const found: FoundModel[] = [];
  const manifests = join(root, 'manifests');
  const blob = (digest: string) => join(root, 'blobs', digest.replace(':', '-'));
  const walk = (dir: string, depth: number): void => {
    let list: Dirent[];
    try {
      list = readdirSync(dir, { withFileTypes: true }).slice(0, MAX_ENTRIES);
    } catch {
      return;
    }
    for (const entry of list) {
      const path = join(dir, entry.name);
      if (entry.isDirectory() && depth < 4) walk(path, depth + 1);
      else if (entry.isFile() && depth === 3) {
        let manifest: OllamaManifest;
        try {
          manifest = JSON.parse(readFileSync(path, 'utf8')) as OllamaManifest;
        } catch {
          continue;
        }
        const layer = manifest.layers?.find((l) => l.mediaType === 'application/vnd.ollama.image.model');
        if (!layer?.digest || !existsSync(blob(layer.digest))) continue;
        const [registry, namespace, model] = relative(manifests, dir).split(/[\\/]/);
        let quantization: string | undefined;
        try {
          quantization = (JSON.parse(readFileSync(blob(manifest.config?.digest ?? ''), 'utf8')) as { file_type?: string }).file_type;
        } catch {
          quantization = quantizationOf(entry.name);
        }
        const short = registry === 'registry.ollama.ai' && namespace === 'library' ? model : `${namespace}/${model}`;
        found.push({ name: `${short}:${entry.name}`, path: blob(layer.digest), format: 'gguf', from: 'Ollama', bytes: layer.size ?? size(blob(layer.digest)), quantization });
      }
    }
  };
  if (existsSync(manifests)) walk(manifests, 0);
  return found;
}

/** `<publisher>/<repo>/*.gguf` (LM Studio's layout); Hugging Face folders there too. */
function lmStudioModels(root: string): FoundModel[] {
  const found: FoundModel[] = [];
  for (const publisher of dirs(root)) {
    for (const repo of dirs(join(root, publisher))) {
      const dir = join(root, publisher, repo);
      if (isModelFolder(dir)) {
        found.push(folderModel(dir, `${publisher}/${repo}`, 'LM Studio'));
        continue;
      }
      for (const file of entries(dir).filter(isGgufFile)) {
        found.push({ name: `${publisher}/${basename(file, '.gguf')}`, path: join(dir, file), format: 'gguf', from: 'LM Studio', bytes: size(join(dir, file)), quantization: quantizationOf(file) });
      }
    }
  }
  return found;
}

/** `<root>/<Org>--<Name>/`: models downloaded by Runahead. */
function downloadedModels(root: string): FoundModel[] {
  return dirs(root)
    .map((d) => join(root, d))
    .filter(isModelFolder)
    .map((dir) => folderModel(dir, basename(dir).split('--').join('/'), 'downloaded'));
}

/** Every model found under the roots; a root that is missing or unreadable adds none. */
export function discoverModels(roots: ModelRoots = defaultRoots()): FoundModel[] {
  const safely = (f: () => FoundModel[]) => {
    try {
      return f();
    } catch {
      return [];
    }
  };
  return [
    ...(roots.downloaded ? safely(() => downloadedModels(roots.downloaded!)) : []),
    ...safely(() => huggingFaceModels(roots.huggingFace)),
    ...safely(() => ollamaModels(roots.ollama)),
    ...roots.lmStudio.flatMap((r) => safely(() => lmStudioModels(r))),
  ];
}

/** `1.6 GB`, `988 MB`. */
export function formatBytes(bytes: number): string {
  if (bytes >= 1e9) return `${(bytes / 1e9).toFixed(1)} GB`;
  if (bytes >= 1e6) return `${Math.round(bytes / 1e6)} MB`;
  return `${Math.max(1, Math.round(bytes / 1e3))} kB`;
}

/** Bytes of the weights a model reads per step: a folder's *.safetensors, or a GGUF file. */
export function weightBytes(path: string): number {
  try {
    if (statSync(path).isFile()) return size(path);
    return readdirSync(path)
      .filter((f) => f.endsWith('.safetensors') && !f.startsWith('mtp'))
      .reduce((n, f) => n + size(join(path, f)), 0);
  } catch {
    return 0;
  }
}
