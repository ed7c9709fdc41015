// A Hugging Face hub on 127.0.0.1 that speaks the two endpoints a download
// uses: GET /api/models/<repo>/tree/<rev>?recursive=… (the file list, with
// LFS sha256 and git blob ids) and GET /<repo>/resolve/<rev>/<path> (the bytes,
// with Range). It can drop a connection part-way or serve corrupt bytes.
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeFile {
  path: string;
  content: Buffer;
  /** Listed as an LFS file (sha256), else as a git blob (sha1). */
  lfs?: boolean;
}

export interface FakeHub {
  url: string;
  /** GET requests of file bytes, with their Range header. */
  requests: { path: string; range?: string }[];
  /** The next `count` file responses stop after `bytes` bytes (socket destroyed). */
  dropAfter(bytes: number, count?: number): void;
  /** Serves this file's bytes with one flipped. */
  corrupt(path: string): void;
  close(): Promise<void>;
}

const gitBlobId = (b: Buffer) => createHash('sha1').update(`blob ${b.length}\0`).update(b).digest('hex');
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

export async function startFakeHub(repo: string, files: FakeFile[]): Promise<FakeHub> {
  const requests: FakeHub['requests'] = [];
  let drop: { bytes: number; count: number } | undefined;
  const corrupt = new Set<string>();
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname.startsWith(`/api/models/${repo}/tree/`)) {
      res.setHeader('Content-Type', 'application/json');
      res.end(
        JSON.stringify(
          files.map((f) => ({
            type: 'file',
            path: f.path,
            size: f.lfs ? 134 : f.content.length,
            oid: gitBlobId(f.lfs ? Buffer.from('pointer') : f.content),
            ...(f.lfs ? { lfs: { oid: sha256(f.content), size: f.content.length, pointerSize: 134 } } : {}),
          })),
        ),
      );
      return;
    }
    const prefix = `/${repo}/resolve/main/`;
    const file = url.pathname.startsWith(prefix) ? files.find((f) => f.path === decodeURIComponent(url.pathname.slice(prefix.length))) : undefined;
    if (!file) {
      res.statusCode = 404;
      res.end('not found');
      return;
    }
    requests.push({ path: file.path, range: req.headers.range });
    let body = file.content;
    if (corrupt.has(file.path)) {
      body = Buffer.from(body);
      body[body.length >> 1] ^= 0xff;
    }
    const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const start = m ? Number(m[1]) : 0;
    if (start >= body.length && m) {
      res.statusCode = 416;
      res.end();
      return;
    }
    res.statusCode = m ? 206 : 200;
    if (m) res.setHeader('Content-Range', `bytes ${start}-${body.length - 1}/${body.length}`);
    res.setHeader('Content-Length', body.length - start);
    const rest = body.subarray(start);
    if (drop && drop.count > 0) {
      drop.count--;
      res.flushHeaders();
      res.write(rest.subarray(0, drop.bytes), () => setTimeout(() => res.socket?.destroy(), 20));
      return;
    }
    res.end(rest);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    dropAfter: (bytes, count = 1) => (drop = { bytes, count }),
    corrupt: (path) => corrupt.add(path),
    close: () => new Promise((r) => server.close(() => r())),
  };
}
