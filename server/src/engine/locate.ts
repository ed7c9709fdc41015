// Where the engine binary and the model live: a setting, else an environment
// variable, else the bundled one. The server runs from <root>/dist/server.js
// both in a checkout (npm install builds the engine into <root>/engine/build)
// and in an installed .vsix (which packs the same paths). What runs is never
// changed here: a file that is not executable is an error, never chmodded.
import { constants, existsSync } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileProblem, isGgufPath } from '../model/modelFiles';

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
  /** Where the path came from: the setting, the environment variable or `bundled`. */
  source: string;
  /** Why it is unusable, naming the path and what to do; undefined when usable. */
  problem?: string;
}

/** Why a path from a setting or the environment cannot be used (NUL byte, relative), or undefined. */
export function pathProblem(value: string, source: string): string | undefined {
  if (value.includes('\0')) return `${source} contains a NUL byte; expected an absolute path`;
  if (value !== '' && !isAbsolute(value)) return `${source} is "${value}"; expected an absolute path (or empty for the default)`;
  return undefined;
}

/** The path the setting, else the environment variable, else the default names; checked for shape only. */
function choose(setting: string, settingName: string, envName: string, fallback: () => string): Located {
  const env = process.env[envName] ?? '';
  const located = setting !== '' ? { path: setting, source: settingName } : env !== '' ? { path: env, source: `$${envName}` } : { path: fallback(), source: 'bundled' };
  const problem = pathProblem(located.path, located.source);
  return problem ? { ...located, problem } : located;
}

export function enginePathFor(setting: string): Located {
  return choose(setting, 'runahead.enginePath', 'RUNAHEAD_ENGINE', defaultEnginePath);
}

export function modelPathFor(setting: string): Located {
  return choose(setting, 'runahead.modelPath', 'RUNAHEAD_MODEL', defaultModelPath);
}

export async function locateEngine(setting: string): Promise<Located> {
  const located = enginePathFor(setting);
  if (located.problem) return located;
  const { path, source } = located;
  const fix = source === 'bundled' ? 'run `npm install` (or `node engine/setup.mjs`) to build it, or set runahead.enginePath' : `check ${source}`;
  const st = await stat(path).catch(() => undefined);
  if (!st) return { ...located, problem: `no engine binary at ${path} (from ${source}): ${fix}` };
  if (!st.isFile()) return { ...located, problem: `engine ${path} (from ${source}) is not a file: ${fix}` };
  try {
    await access(path, constants.X_OK);
  } catch {
    const mode = (st.mode & 0o777).toString(8);
    return { ...located, problem: `engine ${path} (from ${source}) is not executable (mode ${mode}); Runahead never changes a file's mode: make it executable yourself, or ${fix}` };
  }
  return located;
}

export async function locateModel(setting: string): Promise<Located> {
  const located = modelPathFor(setting);
  if (located.problem) return located;
  const { path, source } = located;
  if (isGgufPath(path)) {
    // Mapped by the engine, never read whole by the server: only its kind is checked here.
    const st = await stat(path).catch(() => undefined);
    if (!st) return { ...located, problem: `no model at ${path}: check ${source} (a Hugging Face model folder or a .gguf file)` };
    if (!st.isFile()) return { ...located, problem: `${path} (from ${source}) is not a regular file; expected a .gguf model file` };
    return located;
  }
  const config = await fileProblem(join(path, 'config.json'));
  if (config === 'missing') {
    const how = source === 'bundled'
      ? 'the embedded model is not in this install; set runahead.modelPath to a Hugging Face model folder (e.g. Qwen2.5-Coder-0.5B)'
      : `check ${source} (a Hugging Face model folder or a .gguf file)`;
    return { ...located, problem: `no model at ${path} (config.json missing): ${how}` };
  }
  if (config) return { ...located, problem: config };
  const tokenizer = await fileProblem(join(path, 'tokenizer.json'));
  if (tokenizer === 'missing') return { ...located, problem: `model folder ${path} has no tokenizer.json, which the server needs to tokenize` };
  if (tokenizer) return { ...located, problem: tokenizer };
  return located;
}
