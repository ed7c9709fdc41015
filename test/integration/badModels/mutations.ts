// The named ways a bad-model case corrupts its copy of a good fixture. A case
// lists steps as [name, ...args]; every path is relative to the model folder.
// JSON paths separate keys with '/' (tensor names hold dots).
import { execFileSync } from 'node:child_process';
import { copyFileSync, cpSync, mkdirSync, readFileSync, rmSync, statSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

type Json = any; // parsed JSON of any shape

/** Replaces the file with something else at the same path. */
function replace(dir: string, file: string, make: (path: string) => void): void {
  const path = join(dir, file);
  rmSync(path, { recursive: true, force: true });
  make(path);
}

function editJson(dir: string, file: string, edit: (j: Json) => void): void {
  const path = join(dir, file);
  const j = JSON.parse(readFileSync(path, 'utf8'));
  edit(j);
  writeFileSync(path, JSON.stringify(j, null, 2));
}

/** The object that holds the last key of `path`, creating objects on the way. */
function parentOf(j: Json, path: string): [Json, string] {
  const keys = path.split('/');
  const last = keys.pop()!;
  for (const k of keys) j = j[k] ??= {};
  return [j, last];
}

// A safetensors file: 8-byte little-endian header length, JSON header, data.
interface Safetensors {
  header: Record<string, Json>;
  data: Buffer;
}

function readSafetensors(path: string): Safetensors {
  const bytes = readFileSync(path);
  const n = Number(bytes.readBigUInt64LE(0));
  return { header: JSON.parse(bytes.subarray(8, 8 + n).toString('utf8')), data: bytes.subarray(8 + n) };
}

function writeSafetensors(path: string, { header, data }: Safetensors): void {
  const text = Buffer.from(JSON.stringify(header), 'utf8');
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(text.length));
  writeFileSync(path, Buffer.concat([len, text, data]));
}

function editSafetensors(dir: string, file: string, edit: (st: Safetensors) => void): void {
  const path = join(dir, file);
  const st = readSafetensors(path);
  edit(st);
  writeSafetensors(path, st);
}

// Bit patterns of one NaN and one +Inf element in each dtype the fixtures use.
const poisonBits: Record<string, Record<'nan' | 'inf', (b: Buffer, at: number) => void>> = {
  BF16: { nan: (b, at) => b.writeUInt16LE(0x7fc0, at), inf: (b, at) => b.writeUInt16LE(0x7f80, at) },
  F16: { nan: (b, at) => b.writeUInt16LE(0x7e00, at), inf: (b, at) => b.writeUInt16LE(0x7c00, at) },
  F32: { nan: (b, at) => b.writeFloatLE(NaN, at), inf: (b, at) => b.writeFloatLE(Infinity, at) },
};

export const mutations = {
  /** Sets a JSON field (config.json, tokenizer.json, the index). */
  set(dir: string, file: string, path: string, value: Json): void {
    editJson(dir, file, (j) => {
      const [obj, key] = parentOf(j, path);
      obj[key] = value;
    });
  },
  unset(dir: string, file: string, path: string): void {
    editJson(dir, file, (j) => {
      const [obj, key] = parentOf(j, path);
      delete obj[key];
    });
  },
  write(dir: string, file: string, text: string): void {
    replace(dir, file, (p) => writeFileSync(p, text));
  },
  remove(dir: string, file: string): void {
    rmSync(join(dir, file), { recursive: true, force: true });
  },
  /** A named pipe with no writer: opening it for reading blocks forever. */
  fifo(dir: string, file: string): void {
    replace(dir, file, (p) => execFileSync('mkfifo', [p]));
  },
  symlink(dir: string, file: string, target: string): void {
    replace(dir, file, (p) => symlinkSync(target, p));
  },
  directory(dir: string, file: string): void {
    replace(dir, file, (p) => mkdirSync(p));
  },
  /** Keeps the first `fraction` of the file. */
  truncate(dir: string, file: string, fraction: number): void {
    const p = join(dir, file);
    truncateSync(p, Math.floor(statSync(p).size * fraction));
  },
  /** A copy of the whole folder in a subfolder (a draft model); by way of a sibling, as a folder cannot be copied into itself. */
  copyModel(dir: string, sub: string): void {
    const tmp = `${dir}.copy`;
    cpSync(dir, tmp, { recursive: true });
    cpSync(tmp, join(dir, sub), { recursive: true });
    rmSync(tmp, { recursive: true });
  },
  /** A copy of one of the folder's files next to the folder (outside it). */
  copyOutside(dir: string, file: string, as: string): void {
    copyFileSync(join(dir, file), join(dirname(dir), as));
  },
  /** Overwrites the safetensors header length (a decimal string: it may not fit a double). */
  headerLength(dir: string, file: string, length: string): void {
    const p = join(dir, file);
    const bytes = readFileSync(p);
    bytes.writeBigUInt64LE(BigInt(length), 0);
    writeFileSync(p, bytes);
  },
  /** Replaces the header text with `text`, padded with spaces to the same length. */
  headerText(dir: string, file: string, text: string): void {
    const p = join(dir, file);
    const bytes = readFileSync(p);
    const n = Number(bytes.readBigUInt64LE(0));
    Buffer.from(text.padEnd(n, ' ').slice(0, n), 'utf8').copy(bytes, 8);
    writeFileSync(p, bytes);
  },
  /** Sets a field of a tensor's header entry, e.g. ('model.norm.weight/dtype', 'Q7'). */
  tensorField(dir: string, file: string, path: string, value: Json): void {
    editSafetensors(dir, file, ({ header }) => {
      const [obj, key] = parentOf(header, path);
      obj[key] = value;
    });
  },
  /** Gives tensor `name` the data offsets of tensor `as` (two tensors, one byte range). */
  overlap(dir: string, file: string, name: string, as: string): void {
    editSafetensors(dir, file, ({ header }) => {
      header[name].data_offsets = [...header[as].data_offsets];
    });
  },
  /** Removes a tensor and its bytes: a well-formed file that lacks it. */
  dropTensor(dir: string, file: string, name: string): void {
    editSafetensors(dir, file, (st) => {
      const [begin, end] = st.header[name].data_offsets as [number, number];
      delete st.header[name];
      for (const t of Object.values(st.header)) {
        if (t.data_offsets && t.data_offsets[0] >= end) t.data_offsets = t.data_offsets.map((o: number) => o - (end - begin));
      }
      st.data = Buffer.concat([st.data.subarray(0, begin), st.data.subarray(end)]);
    });
  },
  /** Writes one NaN or Inf into the middle of a tensor's data. */
  poison(dir: string, file: string, name: string, what: 'nan' | 'inf'): void {
    editSafetensors(dir, file, (st) => {
      const t = st.header[name];
      const [begin, end] = t.data_offsets as [number, number];
      const width = t.dtype === 'F32' ? 4 : 2;
      const at = begin + Math.floor((end - begin) / width / 2) * width;
      poisonBits[t.dtype][what](st.data, at);
    });
  },
} satisfies Record<string, (dir: string, ...args: any[]) => void>;

export type MutationName = keyof typeof mutations;
export type Step = [MutationName, ...unknown[]];

export function applySteps(dir: string, steps: Step[]): void {
  for (const [name, ...args] of steps) {
    const fn = mutations[name] as (dir: string, ...a: unknown[]) => void;
    if (!fn) throw new Error(`unknown mutation ${name}`);
    fn(dir, ...args);
  }
}
