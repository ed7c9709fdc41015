// Keeps one engine process alive and loaded: finds the binary, checks the
// protocol version, loads the model with progress, pings it, and restarts it
// with backoff when it crashes or hangs. Everything it does shows in `status`.
import { EventEmitter } from 'node:events';
import { EngineConnection } from './connection';
import { locateEngine, locateModel } from './locate';
import { EngineError, EngineGoneError, PROTOCOL_VERSION, type LoadOptions, type LoadReport } from './protocol';
import { engineKey, type Settings } from '../settings';
import { draftModelFor, speculationOptions } from './loadOptions';

export type EngineState = 'stopped' | 'starting' | 'loading' | 'ready' | 'degraded' | 'restarting' | 'error';

export interface EngineStatus {
  state: EngineState;
  message: string;
  progress?: { stage: string; done: number; total: number };
  engine?: string;
  enginePath?: string;
  model?: string;
  backend?: string;
  optimizations?: Record<string, unknown>;
  warnings: string[];
  restarts: number;
  /** The engine's process id while one runs. */
  pid?: number;
  /** What happened to the engine last time it had to be restarted, and when (ISO time). */
  lastRestart?: { reason: string; at: string };
}

export interface SupervisorTiming {
  helloTimeoutMs: number;
  pingIntervalMs: number;
  pingTimeoutMs: number;
  /** Restart delays, growing per consecutive failure; the last one repeats. */
  backoffMs: number[];
  /** Consecutive failed starts after which it gives up until restarted by hand. */
  maxFailures: number;
}

export const defaultTiming: SupervisorTiming = {
  helloTimeoutMs: 10_000,
  pingIntervalMs: 2_000,
  pingTimeoutMs: 5_000,
  backoffMs: [50, 250, 1_000, 3_000, 10_000],
  maxFailures: 6,
};

/** The log level of a line the engine wrote to stderr, from its wording. */
export function stderrLevel(line: string): 'info' | 'warn' | 'error' {
  if (/\b(error|fatal|abort)/i.test(line)) return 'error';
  if (/\bwarn(ing)?\b/i.test(line)) return 'warn';
  return 'info';
}

function timeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
    }),
  ]);
}

export class EngineSupervisor extends EventEmitter {
  private conn: EngineConnection | undefined;
  private report: LoadReport | undefined;
  private settings: Settings | undefined;
  private key = '';
  private epoch = 0;
  private failures = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  private pingTimer: NodeJS.Timeout | undefined;
  private readyAt = 0;
  private _status: EngineStatus = { state: 'stopped', message: 'not started', warnings: [], restarts: 0 };

  constructor(
    private readonly log: (level: 'info' | 'warn' | 'error', line: string) => void,
    private readonly timing: SupervisorTiming = defaultTiming,
  ) {
    super();
  }

  get status(): EngineStatus {
    return this._status;
  }

  get loadReport(): LoadReport | undefined {
    return this.report;
  }

  /** Applies settings; (re)starts the engine when a setting it depends on changed. */
  configure(settings: Settings): void {
    this.settings = settings;
    const key = engineKey(settings);
    if (key === this.key && this._status.state !== 'stopped') return;
    this.key = key;
    this.failures = 0;
    void this.startFresh('settings changed');
  }

  /** Restart by hand (the "Restart engine" command): also leaves the error state. */
  restart(reason = 'restart requested'): Promise<void> {
    this.failures = 0;
    return this.startFresh(reason);
  }

  /** The connection once the model is loaded, waiting for it at most `waitMs`. */
  async ready(waitMs: number): Promise<EngineConnection | undefined> {
    const usable = () => (this._status.state === 'ready' || this._status.state === 'degraded') && this.conn?.alive;
    if (usable()) return this.conn;
    if (waitMs <= 0 || this._status.state === 'error' || this._status.state === 'stopped') return undefined;
    return new Promise((resolve) => {
      const onStatus = () => {
        if (usable()) finish(this.conn);
        else if (this._status.state === 'error' || this._status.state === 'stopped') finish(undefined);
      };
      const timer = setTimeout(() => finish(undefined), waitMs);
      const finish = (c: EngineConnection | undefined) => {
        clearTimeout(timer);
        this.off('status', onStatus);
        resolve(c);
      };
      this.on('status', onStatus);
    });
  }

  async stop(): Promise<void> {
    this.epoch++;
    this.clearTimers();
    const conn = this.conn;
    this.conn = undefined;
    this.setStatus({ state: 'stopped', message: 'engine stopped', progress: undefined, pid: undefined });
    if (conn) await conn.shutdown();
  }

  /** Synchronous last resort for process exit handlers. */
  killNow(): void {
    this.epoch++;
    this.clearTimers();
    this.conn?.kill();
  }

  private async startFresh(reason: string): Promise<void> {
    const epoch = ++this.epoch;
    this.clearTimers();
    const old = this.conn;
    this.conn = undefined;
    if (old) {
      this.log('info', `stopping engine pid ${old.pid}: ${reason}`);
      await old.shutdown(500);
    }
    if (epoch === this.epoch) await this.run(epoch);
  }

  private async run(epoch: number): Promise<void> {
    const settings = this.settings;
    if (!settings) return;
    const current = () => epoch === this.epoch;
    this.report = undefined;
    this.setStatus({ state: 'starting', message: 'starting the engine', progress: undefined, warnings: [] });

    const engine = locateEngine(settings.enginePath);
    const model = locateModel(settings.modelPath);
    const problem = engine.problem ?? model.problem;
    if (problem) {
      this.log('error', problem);
      this.setStatus({ state: 'error', message: problem, enginePath: engine.path, model: model.path });
      return;
    }

    const conn = new EngineConnection(engine.path, [], (line) => this.log(stderrLevel(line), `[engine] ${line}`));
    this.conn = conn;
    void conn.exited.then(({ code, signal }) => {
      if (current()) this.onCrash(epoch, signal ? `killed by ${signal}` : `exited with code ${code}`);
    });

    try {
      const hello = await timeout(conn.hello(), this.timing.helloTimeoutMs, 'engine hello');
      if (hello.protocol !== PROTOCOL_VERSION) {
        conn.kill();
        throw new Error(`${engine.path} speaks protocol ${hello.protocol}; this server speaks ${PROTOCOL_VERSION}: rebuild the engine (npm run build:engine)`);
      }
      this.log('info', `engine ${hello.engine} (pid ${conn.pid}) at ${engine.path}`);
      this.setStatus({ state: 'loading', message: `loading ${model.path}`, engine: hello.engine, enginePath: engine.path, model: model.path, pid: conn.pid });

      const warnings: string[] = [];
      const draft = draftModelFor(settings, model.path);
      // RUNAHEAD_THREADS overrides the engine's choice (one per physical core), for benchmarks on a shared machine.
      const base: LoadOptions = { backend: settings.backend, threads: Number(process.env.RUNAHEAD_THREADS ?? 0) || 0, context_length: 0 };
      const spec = speculationOptions(settings, draft, hello.capabilities.speculation ?? [], warnings);
      const onProgress = (p: { stage: string; done: number; total: number }) => {
        if (!current()) return;
        this.setStatus({ state: 'loading', message: `loading ${model.path}: ${p.stage} ${p.done}/${p.total}`, progress: { stage: p.stage, done: p.done, total: p.total } });
      };
      let loaded;
      try {
        loaded = await conn.load(model.path, { ...base, ...spec }, onProgress);
      } catch (err) {
        // An engine without speculation refuses its options, and a model without the drafter
        // asked for (no mtp.safetensors, no draft/) refuses that one: load without, loudly.
        if (!(err instanceof EngineError) || !refusesSpeculation(err) || spec.speculation === 'off') throw err;
        warnings.push(`speculation "${settings.speculation}" refused (${err.message}); running without speculation`);
        // An engine that knows no speculation options gets none; ours is told `off`, since its default is `auto`.
        loaded = await conn.load(model.path, err.code === 'bad_request' ? base : { ...base, speculation: 'off' }, onProgress);
      }
      if (!current()) return;
      const report = loaded.report;
      this.report = report;
      if (settings.backend !== 'auto' && report.backend && report.backend !== settings.backend) {
        warnings.push(`backend ${settings.backend} was asked for but the engine runs on ${report.backend}`);
      }
      warnings.push(...(report.warnings ?? []));
      for (const w of warnings) this.log('warn', w);
      this.readyAt = Date.now();
      this.setStatus({
        state: warnings.length > 0 ? 'degraded' : 'ready',
        message: warnings.length > 0 ? warnings.join('; ') : `ready: ${report.architecture ?? 'model'} on ${report.backend ?? '?'}`,
        progress: undefined,
        backend: report.backend,
        optimizations: report.optimizations,
        warnings,
      });
      this.schedulePing(epoch, conn);
    } catch (err) {
      if (!current()) return;
      if (err instanceof EngineGoneError) return; // the exit handler restarts it
      const message = err instanceof Error ? err.message : String(err);
      this.log('error', message);
      // A model that cannot load will not load on retry; a hung start may.
      if (err instanceof EngineError || /protocol/.test(message)) {
        this.epoch++;
        conn.kill();
        this.setStatus({ state: 'error', message, progress: undefined });
      } else {
        conn.kill();
      }
    }
  }

  private schedulePing(epoch: number, conn: EngineConnection): void {
    this.pingTimer = setTimeout(async () => {
      if (epoch !== this.epoch) return;
      try {
        await timeout(conn.ping(), this.timing.pingTimeoutMs, 'engine ping');
        if (this.readyAt && Date.now() - this.readyAt > 30_000) this.failures = 0;
        this.schedulePing(epoch, conn);
      } catch (err) {
        if (epoch !== this.epoch || err instanceof EngineGoneError) return;
        this.log('error', `engine pid ${conn.pid} did not answer a ping within ${this.timing.pingTimeoutMs} ms: killing it`);
        conn.kill();
      }
    }, this.timing.pingIntervalMs);
    this.pingTimer.unref();
  }

  private onCrash(epoch: number, how: string): void {
    this.conn = undefined;
    this._status.pid = undefined;
    this.report = undefined;
    this.clearTimers();
    this.failures++;
    const restarts = this._status.restarts + 1;
    if (this.failures >= this.timing.maxFailures) {
      this.epoch++;
      const message = `engine ${how}; it failed ${this.failures} times in a row, so it stays stopped: use "Runahead: Restart Engine"`;
      this.log('error', message);
      this.setStatus({ state: 'error', message, progress: undefined, restarts });
      return;
    }
    const delays = this.timing.backoffMs;
    const delay = delays[Math.min(this.failures - 1, delays.length - 1)];
    this.log('warn', `engine ${how}; restarting in ${delay} ms`);
    this.setStatus({ state: 'restarting', message: `engine ${how}; restarting`, progress: undefined, restarts, lastRestart: { reason: `engine ${how}`, at: new Date().toISOString() } });
    this.restartTimer = setTimeout(() => {
      if (epoch === this.epoch) void this.run(epoch);
    }, delay);
  }

  private clearTimers(): void {
    clearTimeout(this.restartTimer);
    clearTimeout(this.pingTimer);
  }

  private setStatus(patch: Partial<EngineStatus>): void {
    this._status = { ...this._status, ...patch };
    this.emit('status', this._status);
  }
}

/** The engine refused the speculation options, not the model: an old engine's bad_request, or a drafter the model lacks. */
function refusesSpeculation(err: EngineError): boolean {
  const field = err.detail.field ?? '';
  return err.code === 'bad_request' || field.startsWith('options.speculation') || field.startsWith('options.draft_model');
}
