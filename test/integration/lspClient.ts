// A minimal LSP client for the integration tests and the reliability bench:
// spawns `node dist/server.js --stdio` and talks JSON-RPC to it.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  CancellationTokenSource,
  createProtocolConnection,
  InlineCompletionRequest,
  StreamMessageReader,
  StreamMessageWriter,
  type InlineCompletionList,
  type ProtocolConnection,
} from 'vscode-languageserver-protocol/node';

export const repoRoot = join(__dirname, '..', '..');
export const serverJs = join(repoRoot, 'dist', 'server.js');
export const engineBinary = process.env.RUNAHEAD_ENGINE ?? join(repoRoot, 'engine', 'build', 'runahead-engine');
export const fixtureModel = join(repoRoot, 'test', 'fixtures', 'models', 'qwen2-tied-bf16');

export interface Status {
  state: string;
  message: string;
  pid?: number;
  restarts: number;
  backend?: string;
  model?: string;
  optimizations?: Record<string, unknown>;
}

export interface Metrics {
  source: string;
  cacheHit: boolean;
  servedMs: number;
  ttftMs?: number;
  decodeMsPerToken?: number;
  tokens?: number;
  acceptedPerStep?: number;
  promptTokens?: number;
  reusedTokens?: number;
  backend?: string;
  model?: string;
  finishReason?: string;
}

export class TestClient {
  readonly child: ChildProcess;
  readonly conn: ProtocolConnection;
  status: Status | undefined;
  readonly metrics: Metrics[] = [];
  readonly logs: string[] = [];
  private statusWaiters: (() => void)[] = [];
  private version = new Map<string, number>();

  constructor(settings: Record<string, unknown>, env: NodeJS.ProcessEnv = process.env) {
    if (!existsSync(serverJs)) throw new Error(`${serverJs} is missing: run \`node esbuild.mjs\``);
    this.child = spawn(process.execPath, [serverJs, '--stdio'], { stdio: ['pipe', 'pipe', 'pipe'], env });
    this.child.stderr!.on('data', (d) => this.logs.push(String(d)));
    this.conn = createProtocolConnection(new StreamMessageReader(this.child.stdout!), new StreamMessageWriter(this.child.stdin!));
    this.conn.onNotification('runahead/status', (s: Status) => {
      this.status = s;
      this.statusWaiters.forEach((w) => w());
    });
    this.conn.onNotification('runahead/metrics', (m: Metrics) => void this.metrics.push(m));
    this.conn.onNotification('window/logMessage', (m: { message: string }) => void this.logs.push(m.message));
    this.conn.listen();
    this.settings = settings;
  }

  private settings: Record<string, unknown>;

  async initialize(rootDir = repoRoot): Promise<void> {
    await this.conn.sendRequest('initialize', {
      processId: process.pid,
      rootUri: pathToFileURL(rootDir).href,
      workspaceFolders: [{ uri: pathToFileURL(rootDir).href, name: 'runahead' }],
      capabilities: {},
      initializationOptions: { settings: this.settings },
    });
    await this.conn.sendNotification('initialized', {});
  }

  /** Resolves when the status satisfies `pred`; rejects after `ms`. */
  waitStatus(pred: (s: Status) => boolean, ms = 30000): Promise<Status> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (this.status && pred(this.status)) {
          clearTimeout(timer);
          this.statusWaiters = this.statusWaiters.filter((w) => w !== check);
          resolve(this.status);
        }
      };
      const timer = setTimeout(() => reject(new Error(`status not reached in ${ms} ms; last: ${JSON.stringify(this.status)}\n${this.logs.slice(-20).join('\n')}`)), ms);
      this.statusWaiters.push(check);
      check();
    });
  }

  waitReady(ms = 30000): Promise<Status> {
    return this.waitStatus((s) => s.state === 'ready' || s.state === 'degraded' || s.state === 'error', ms).then((s) => {
      if (s.state === 'error') throw new Error(`server error: ${s.message}`);
      return s;
    });
  }

  open(uri: string, text: string, languageId = 'python'): void {
    this.version.set(uri, 1);
    void this.conn.sendNotification('textDocument/didOpen', { textDocument: { uri, languageId, version: 1, text } });
  }

  replace(uri: string, text: string): void {
    const v = (this.version.get(uri) ?? 1) + 1;
    this.version.set(uri, v);
    void this.conn.sendNotification('textDocument/didChange', { textDocument: { uri, version: v }, contentChanges: [{ text }] });
  }

  complete(uri: string, line: number, character: number, cancel?: CancellationTokenSource, triggerKind = 1): Promise<InlineCompletionList | null> {
    const params = { textDocument: { uri }, position: { line, character }, context: { triggerKind: triggerKind as 1 | 2 } };
    return this.conn.sendRequest(InlineCompletionRequest.type, params, cancel?.token).then((r) => (Array.isArray(r) ? { items: r } : r));
  }

  async engineStats(): Promise<{ rss_bytes?: number; busy?: boolean; requests?: number } | null> {
    return (await this.conn.sendRequest<{ engine: { rss_bytes?: number; busy?: boolean; requests?: number } | null }>('runahead/stats')).engine;
  }

  async close(): Promise<void> {
    try {
      await Promise.race([this.conn.sendRequest('shutdown'), new Promise((r) => setTimeout(r, 2000))]);
      void this.conn.sendNotification('exit');
    } catch {
      // already gone
    }
    await new Promise((r) => setTimeout(r, 100));
    this.conn.dispose();
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

/** True while the process runs (a zombie waiting to be reaped counts as gone). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
}

export { CancellationTokenSource };
