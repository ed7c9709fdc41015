// Where the engine binary and the embedded model live. The server runs from
// <root>/dist/server.js both in a checkout (npm install builds the engine into
// <root>/engine/build) and in an installed .vsix (which packs the same paths).
import { accessSync, chmodSync, constants, existsSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/** The folder that holds dist/, engine/ and package.json. */
export function installRoot(): string {
  if (process.env.RUNAHEAD_ROOT) return resolve(process.env.RUNAHEAD_ROOT);
  let dir = __dirname;
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'engine'))) return dir;
    dir = dirname(dir);
  }
  return resolve(__dirname, '..');
}

const binaryName = process.platform === 'win32' ? 'runahead-engine.exe' : 'runahead-engine';

export function defaultEnginePath(root = installRoot()): string {
  return join(root, 'engine', 'build', binaryName);
}

export function defaultModelPath(root = installRoot()): string {
  return join(root, 'engine', 'models', 'runahead-coder');
}

export interface Located {
  path: string;
  /** Why it is unusable, naming the path and what to do; undefined when usable. */
  problem?: string;
}

export function locateEngine(setting: string): Located {
  const path = setting || process.env.RUNAHEAD_ENGINE || defaultEnginePath();
  if (!existsSync(path)) {
    const how = setting ? 'check the runahead.enginePath setting' : 'run `npm install` (or `node engine/setup.mjs`) to build it';
    return { path, problem: `no engine binary at ${path}: ${how}` };
  }
  try {
    accessSync(path, constants.X_OK);
  } catch {
    // A .vsix (a zip) may lose the executable bit on some installs.
    try {
      chmodSync(path, statSync(path).mode | 0o755);
    } catch {
      return { path, problem: `engine binary ${path} is not executable` };
    }
  }
  return { path };
}

export function locateModel(setting: string): Located {
  const path = setting || process.env.RUNAHEAD_MODEL || defaultModelPath();
  if (!existsSync(join(path, 'config.json'))) {
    const how = setting
      ? 'check the runahead.modelPath setting (a Hugging Face model folder)'
      : 'the embedded model is not in this install; set runahead.modelPath to a Hugging Face model folder (e.g. Qwen2.5-Coder-0.5B)';
    return { path, problem: `no model at ${path} (config.json missing): ${how}` };
  }
  if (!existsSync(join(path, 'tokenizer.json'))) {
    return { path, problem: `model folder ${path} has no tokenizer.json, which the server needs to tokenize` };
  }
  return { path };
}
