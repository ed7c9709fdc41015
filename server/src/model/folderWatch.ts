// Notices a model folder that changed under the server (weights replaced or
// truncated, tokenizer edited) by polling what loading depends on: the mtime
// and size of config.json, tokenizer.json and every *.safetensors file (of a
// .gguf model, the file itself). A poll is a readdir and a few stats, cheap
// enough every 2 s.
import { readdir, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { isGgufPath } from './modelFiles';

type Fingerprint = Map<string, string>;

const WATCHED = ['config.json', 'tokenizer.json'];

async function fingerprint(dir: string): Promise<Fingerprint> {
  if (isGgufPath(dir)) {
    const st = await stat(dir).catch(() => undefined);
    return new Map(st ? [[basename(dir), `${st.mtimeMs}:${st.size}`]] : []);
  }
  const names = await readdir(dir).catch(() => [] as string[]);
  const out: Fingerprint = new Map();
  for (const name of names) {
    if (!WATCHED.includes(name) && !name.endsWith('.safetensors')) continue;
    const st = await stat(join(dir, name)).catch(() => undefined);
    if (st) out.set(name, `${st.mtimeMs}:${st.size}`);
  }
  return out;
}

/** What differs between two fingerprints, in words ("model.safetensors changed, tokenizer.json added"). */
export function describeChange(before: Fingerprint, after: Fingerprint): string | undefined {
  const changes: string[] = [];
  for (const [name, v] of after) {
    if (!before.has(name)) changes.push(`${name} added`);
    else if (before.get(name) !== v) changes.push(`${name} changed`);
  }
  for (const name of before.keys()) if (!after.has(name)) changes.push(`${name} removed`);
  return changes.length > 0 ? changes.join(', ') : undefined;
}

export class FolderWatch {
  private dir: string | undefined;
  private last: Fingerprint | undefined;
  private timer: NodeJS.Timeout | undefined;
  private polling = false;

  constructor(
    /** Called with what changed, e.g. "model.safetensors changed". */
    private readonly onChange: (dir: string, what: string) => void,
    private readonly intervalMs = 2_000,
  ) {}

  /** Watches `dir` from now on (no-op when it is already the one watched). */
  follow(dir: string): void {
    if (dir === this.dir) return;
    this.stop();
    this.dir = dir;
    this.last = undefined;
    void this.poll();
    this.timer = setInterval(() => void this.poll(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.dir = undefined;
  }

  private async poll(): Promise<void> {
    const dir = this.dir;
    if (!dir || this.polling) return;
    this.polling = true;
    try {
      const now = await fingerprint(dir);
      if (dir !== this.dir) return;
      const what = this.last && describeChange(this.last, now);
      this.last = now;
      if (what) this.onChange(dir, what);
    } finally {
      this.polling = false;
    }
  }
}
