// Reading the small files of a model folder (config.json, tokenizer.json, ...).
// The folder comes from a setting and may hold anything: a FIFO would block a
// read forever and a link to /dev/zero would never end, so a file is read only
// when it is a regular file, and only up to a size cap, without blocking.
import { constants, type Stats } from 'node:fs';
import { open, stat } from 'node:fs/promises';

export const MAX_MODEL_FILE_BYTES = 64 * 1024 * 1024;

/** Whether a model path names a GGUF file rather than a Hugging Face folder. */
export function isGgufPath(path: string): boolean {
  return path.toLowerCase().endsWith('.gguf');
}

function kindOf(st: Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

/** Why `path` cannot be read as a model file ('missing' when it does not exist), or undefined when it can. */
export async function fileProblem(path: string): Promise<string | undefined> {
  let st: Stats;
  try {
    st = await stat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
    return `${path}: ${(err as Error).message}`;
  }
  return sizeProblem(path, st);
}

function sizeProblem(path: string, st: Stats): string | undefined {
  if (!st.isFile()) return `${path} is ${kindOf(st)}; expected a regular file`;
  if (st.size > MAX_MODEL_FILE_BYTES) return `${path} is ${(st.size / 2 ** 20).toFixed(0)} MiB; the server reads model files of at most ${MAX_MODEL_FILE_BYTES / 2 ** 20} MiB`;
  return undefined;
}

/** The text of a model file; undefined when it does not exist. */
export async function readModelFile(path: string): Promise<string | undefined> {
  const before = await fileProblem(path);
  if (before === 'missing') return undefined;
  if (before) throw new Error(before);
  // O_NONBLOCK: a file swapped for a FIFO since the stat opens at once instead of blocking a thread.
  const file = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const now = sizeProblem(path, await file.stat());
    if (now) throw new Error(now);
    const chunks: Buffer[] = [];
    let size = 0;
    for (;;) {
      const chunk = Buffer.allocUnsafe(1 << 20);
      const { bytesRead } = await file.read(chunk, 0, chunk.length, null);
      if (bytesRead === 0) break;
      size += bytesRead;
      if (size > MAX_MODEL_FILE_BYTES) throw new Error(`${path} grew past ${MAX_MODEL_FILE_BYTES / 2 ** 20} MiB while being read; the server reads model files of at most that size`);
      chunks.push(chunk.subarray(0, bytesRead));
    }
    return Buffer.concat(chunks, size).toString('utf8');
  } finally {
    await file.close();
  }
}

/** A model file's JSON object; `{}` when the file does not exist and is optional. */
export async function readModelJson(path: string, required = false): Promise<Record<string, any>> {
  const text = await readModelFile(path);
  if (text === undefined) {
    if (required) throw new Error(`${path} is missing`);
    return {};
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new Error(`${path}: not valid JSON (${(err as Error).message})`);
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw new Error(`${path}: expected a JSON object`);
  return value as Record<string, any>;
}
