// One running engine process and the JSON-lines conversation with it: requests
// go out on stdin, every message that comes back on stdout is routed to the
// request it answers. Knows nothing about restarts (see supervisor.ts); emits
// `generateError` (an EngineError) when a generation fails, so that the
// supervisor can act on a model that broke under the engine.
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { createInterface } from 'node:readline';
import {
  EngineError,
  EngineGoneError,
  type DoneMessage,
  type EngineMessage,
  type GenerateParams,
  type HelloMessage,
  type LoadOptions,
  type LoadProgressMessage,
  type LoadedMessage,
  type RequestId,
  type StatsMessage,
  type TokensMessage,
} from './protocol';

interface Pending {
  onMessage(msg: EngineMessage): boolean; // true when the request is finished
  fail(err: Error): void;
}

export interface Generation {
  id: RequestId;
  done: Promise<DoneMessage>;
  cancel(): void;
}

/** Cancelled requests remembered, so that the engine's `unknown_request` for one whose `done` crossed the cancel is expected. */
const CANCELLED_KEPT = 64;

export class EngineConnection extends EventEmitter {
  private readonly child: ChildProcess;
  private readonly byId = new Map<RequestId, Pending>();
  // hello and stats carry no id: their answers come back in the order asked.
  private readonly byType = new Map<string, Pending[]>();
  private readonly cancelled = new Set<RequestId>();
  private nextId = 1;
  private exitError: Error | undefined;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(
    binary: string,
    args: string[],
    private readonly log: (line: string) => void,
  ) {
    super();
    this.child = spawn(binary, args, { stdio: ['pipe', 'pipe', 'pipe'], windowsHide: true });
    this.exited = new Promise((resolve) => {
      this.child.on('exit', (code, signal) => {
        this.failAll(new EngineGoneError(`engine exited (${signal ?? `code ${code}`})`));
        resolve({ code, signal });
      });
      this.child.on('error', (err) => {
        this.failAll(new EngineGoneError(`engine could not start: ${err.message}`));
        resolve({ code: null, signal: null });
      });
    });
    this.child.stdin!.on('error', () => undefined); // EPIPE after a crash shows up as 'exit'
    createInterface({ input: this.child.stdout! }).on('line', (line) => this.onLine(line));
    createInterface({ input: this.child.stderr! }).on('line', (line) => this.log(line));
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.exitError === undefined;
  }

  hello(): Promise<HelloMessage> {
    return this.askByType<HelloMessage>('hello', { type: 'hello' });
  }

  stats(): Promise<StatsMessage> {
    return this.askByType<StatsMessage>('stats', { type: 'stats' });
  }

  ping(): Promise<void> {
    const id = `p${this.nextId++}`;
    return new Promise((resolve, reject) => {
      this.byId.set(id, {
        onMessage: (m) => (m.type === 'pong' ? (resolve(), true) : false),
        fail: reject,
      });
      this.send({ type: 'ping', id });
    });
  }

  load(model: string, options: LoadOptions, onProgress: (p: LoadProgressMessage) => void): Promise<LoadedMessage> {
    const id = `l${this.nextId++}`;
    return new Promise((resolve, reject) => {
      this.byId.set(id, {
        onMessage: (m) => {
          if (m.type === 'load_progress') {
            onProgress(m);
            return false;
          }
          if (m.type === 'loaded') {
            resolve(m);
            return true;
          }
          if (m.type === 'error') {
            reject(new EngineError(m));
            return true;
          }
          return false;
        },
        fail: reject,
      });
      this.send({ type: 'load', id, model, options });
    });
  }

  /** Starts a generation; `onTokens` sees every batch as it streams. */
  generate(prompt: number[], params: GenerateParams, onTokens: (m: TokensMessage) => void): Generation {
    const id = `g${this.nextId++}`;
    let finished = false;
    const done = new Promise<DoneMessage>((resolve, reject) => {
      this.byId.set(id, {
        onMessage: (m) => {
          if (m.type === 'tokens') {
            onTokens(m);
            return false;
          }
          if (m.type === 'done') {
            finished = true;
            resolve(m);
            return true;
          }
          if (m.type === 'error') {
            finished = true;
            const err = new EngineError(m);
            this.emit('generateError', err);
            reject(err);
            return true;
          }
          return false;
        },
        fail: (e) => {
          finished = true;
          reject(e);
        },
      });
      this.send({ type: 'generate', id, prompt, params });
    });
    return {
      id,
      done,
      cancel: () => {
        if (finished || !this.alive) return;
        this.cancelled.add(id);
        if (this.cancelled.size > CANCELLED_KEPT) this.cancelled.delete(this.cancelled.values().next().value!);
        this.send({ type: 'cancel', id });
      },
    };
  }

  /** Polite stop: `shutdown`, then a kill if the engine takes too long. */
  async shutdown(graceMs = 1000): Promise<void> {
    if (!this.alive) return;
    this.send({ type: 'shutdown' });
    this.child.stdin!.end();
    const timer = setTimeout(() => this.kill(), graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
  }

  private askByType<T extends EngineMessage>(type: string, msg: object): Promise<T> {
    return new Promise((resolve, reject) => {
      const queue = this.byType.get(type) ?? [];
      queue.push({ onMessage: (m) => (resolve(m as T), true), fail: reject });
      this.byType.set(type, queue);
      this.send(msg);
    });
  }

  private send(msg: object): void {
    if (this.exitError) throw this.exitError;
    this.child.stdin!.write(`${JSON.stringify(msg)}\n`);
  }

  private onLine(line: string): void {
    let msg: EngineMessage;
    try {
      msg = JSON.parse(line);
    } catch {
      this.log(`engine wrote a line that is not JSON: ${line.slice(0, 200)}`);
      return;
    }
    const id = (msg as { id?: RequestId }).id;
    if (id !== undefined && this.byId.has(id)) {
      const p = this.byId.get(id)!;
      if (p.onMessage(msg)) this.byId.delete(id);
      return;
    }
    const queue = this.byType.get(msg.type);
    if (queue && queue.length > 0) {
      queue.shift()!.onMessage(msg);
      return;
    }
    if (msg.type !== 'error') return;
    // The request ended before the engine read our cancel: nothing went wrong.
    if (msg.code === 'unknown_request' && id !== undefined && this.cancelled.delete(id)) return;
    this.log(`engine error: ${msg.code}: ${msg.message}`);
  }

  private failAll(err: Error): void {
    if (this.exitError) return;
    this.exitError = err;
    for (const p of this.byId.values()) p.fail(err);
    for (const q of this.byType.values()) for (const p of q) p.fail(err);
    this.byId.clear();
    this.byType.clear();
  }
}
