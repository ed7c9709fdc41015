// Downloads a model from the Hugging Face hub into a folder: the file list and
// checksums from the hub's metadata (@huggingface/hub listFiles: sizes, LFS
// sha256, git blob ids), a disk-space check before the first byte, each file
// into `<file>.part` and resumed with an HTTP Range after a dropped connection
// or a cancel, verified before it takes its name. The folder appears whole:
// files go to `<dest>.download/` which is renamed to `<dest>` at the end.
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { statfs } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { listFiles } from '@huggingface/hub';
import { neededFile } from './catalog';
import { formatBytes } from './discover';

export interface DownloadRequest {
  repo: string;
  revision?: string;
  /** The folder the model ends up in. */
  dest: string;
  /** Only these files (a GGUF repository's one quantization); else what a model folder needs. */
  files?: string[];
  hubUrl?: string;
  accessToken?: string;
  signal?: AbortSignal;
  /** Bytes done and in all, after each chunk. */
  onProgress?: (done: number, total: number, file: string) => void;
  /** Tries per file after a dropped connection, each resuming where the last stopped. */
  retries?: number;
  /** Free bytes where `dir` is (tests replace it). */
  freeBytes?: (dir: string) => Promise<number>;
}

export class DownloadError extends Error {
  constructor(
    message: string,
    readonly kind: 'space' | 'checksum' | 'http' | 'network' | 'cancelled' | 'empty',
  ) {
    super(message);
  }
}

interface RemoteFile {
  path: string;
  size: number;
  /** `sha256` for LFS files, else the git blob id (sha1 of `blob <size>\0` + content). */
  hash: { kind: 'sha256' | 'gitsha1'; value: string } | undefined;
}

const HUB = 'https://huggingface.co';

async function freeBytesAt(dir: string): Promise<number> {
  let at = dir;
  while (!existsSync(at) && dirname(at) !== at) at = dirname(at);
  const s = await statfs(at);
  return s.bavail * s.bsize;
}

async function remoteFiles(req: DownloadRequest): Promise<RemoteFile[]> {
  const files: RemoteFile[] = [];
  for await (const f of listFiles({ repo: req.repo, revision: req.revision, recursive: true, hubUrl: req.hubUrl, accessToken: req.accessToken })) {
    if (f.type !== 'file' || !(req.files ? req.files.includes(f.path) : neededFile(f.path))) continue;
    const hash = f.lfs ? { kind: 'sha256' as const, value: f.lfs.oid } : f.oid ? { kind: 'gitsha1' as const, value: f.oid } : undefined;
    files.push({ path: f.path, size: f.lfs?.size ?? f.size, hash });
  }
  return files;
}

const sizeOf = (path: string) => (existsSync(path) ? statSync(path).size : 0);

/** Hashes what is already in a `.part` file, so a resumed download is checked whole. */
async function hashOf(path: string, file: RemoteFile) {
  const h = createHash(file.hash?.kind === 'gitsha1' ? 'sha1' : 'sha256');
  if (file.hash?.kind === 'gitsha1') h.update(`blob ${file.size}\0`);
  if (existsSync(path)) for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h;
}

/** One file into `<dir>/<path>.part`, resumed from its length, then verified and renamed. */
async function downloadFile(req: DownloadRequest, dir: string, file: RemoteFile, progress: (n: number) => void): Promise<void> {
  const final = join(dir, file.path);
  if (sizeOf(final) === file.size) return;
  mkdirSync(dirname(final), { recursive: true });
  const part = `${final}.part`;
  const url = `${req.hubUrl ?? HUB}/${req.repo}/resolve/${encodeURIComponent(req.revision ?? 'main')}/${file.path.split('/').map(encodeURIComponent).join('/')}`;
  const tries = (req.retries ?? 3) + 1;
  for (let attempt = 1; ; attempt++) {
    let have = sizeOf(part);
    if (have > file.size) {
      rmSync(part);
      have = 0;
    }
    try {
      if (have < file.size) await fetchInto(url, part, have, req, progress);
      break;
    } catch (err) {
      if (req.signal?.aborted) throw new DownloadError(`download of ${req.repo} cancelled; it resumes where it stopped next time`, 'cancelled');
      if (err instanceof DownloadError && err.kind === 'http') throw err;
      if (attempt >= tries) throw new DownloadError(`${file.path}: the connection dropped ${tries} times (${(err as Error).message}); run the download again to resume`, 'network');
    }
  }
  if (sizeOf(part) !== file.size) throw new DownloadError(`${file.path}: got ${sizeOf(part)} bytes, the hub lists ${file.size}`, 'checksum');
  if (file.hash) {
    const got = (await hashOf(part, file)).digest('hex');
    if (got !== file.hash.value) {
      rmSync(part);
      throw new DownloadError(`${file.path}: ${file.hash.kind === 'sha256' ? 'sha256' : 'git blob id'} ${got} differs from the hub's ${file.hash.value}; the file was removed, download it again`, 'checksum');
    }
  }
  renameSync(part, final);
}

/** GET with `Range: bytes=<have>-`, appending to `part`; a server that ignores the range starts it over. */
async function fetchInto(url: string, part: string, have: number, req: DownloadRequest, progress: (n: number) => void): Promise<void> {
  const headers: Record<string, string> = {};
  if (have > 0) headers.Range = `bytes=${have}-`;
  if (req.accessToken) headers.Authorization = `Bearer ${req.accessToken}`;
  const res = await fetch(url, { headers, signal: req.signal });
  if (res.status === 416) return;
  if (!res.ok || !res.body) throw new DownloadError(`${url}: HTTP ${res.status} ${res.statusText}`, 'http');
  const resumed = res.status === 206;
  if (!resumed && have > 0) progress(-have);
  const out = createWriteStream(part, { flags: resumed ? 'a' : 'w' });
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
      progress(chunk.length);
    }
  } finally {
    await new Promise<void>((resolve) => out.end(resolve));
  }
}

/** Downloads `req.repo` into `req.dest` and returns it; a second call after a failure resumes. */
export async function downloadModel(req: DownloadRequest): Promise<string> {
  const files = await remoteFiles(req);
  if (!files.some((f) => f.path.endsWith('.safetensors') || f.path.endsWith('.gguf'))) {
    throw new DownloadError(`${req.repo} has no ${req.files ? req.files.join(', ') : '*.safetensors weights'} on the hub`, 'empty');
  }
  const work = `${req.dest}.download`;
  const total = files.reduce((n, f) => n + f.size, 0);
  const present = (f: RemoteFile) => Math.min(f.size, Math.max(sizeOf(join(work, f.path)), sizeOf(join(work, `${f.path}.part`))));
  let done = files.reduce((n, f) => n + present(f), 0);
  const free = await (req.freeBytes ?? freeBytesAt)(dirname(req.dest));
  if (free < total - done) {
    throw new DownloadError(`${req.repo} needs ${formatBytes(total - done)} more; ${dirname(req.dest)} has ${formatBytes(free)} free`, 'space');
  }
  mkdirSync(work, { recursive: true });
  req.onProgress?.(done, total, '');
  for (const f of files) {
    await downloadFile(req, work, f, (n) => {
      done += n;
      req.onProgress?.(done, total, f.path);
    });
  }
  rmSync(req.dest, { recursive: true, force: true });
  renameSync(work, req.dest);
  return req.dest;
}
