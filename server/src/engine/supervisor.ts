// Keeps one engine process alive and loaded: finds the binary, checks the
// protocol version, loads the model with progress, pings it, and restarts it
// when it crashes or hangs, with delays that grow to a cap but never give up.
// Everything it does shows in `status`.
import { EventEmitter } from 'node:events';
import { EngineConnection } from './connection';
import { withTimeout, TimeoutError } from '../deadline';
import { locateEngine, locateModel, pathProblem } from './locate';
import { EngineError, EngineGoneError, PROTOCOL_VERSION, type LoadOptions, type LoadReport, type OptimizationCheck } from './protocol';
import { engineKey, type Settings } from '../settings';
import { draftModelFor, requireOptions, speculationOptions, weightOptions, withoutWeightOptions } from './loadOptions';

export type EngineState = 'stopped' | 'starting' | 'loading' | 'ready' | 'degraded' | 'restarting' | 'error';

export interface EngineStatus {
  state: EngineState;
  message: string;
  progress?: { stage: string; done: number; total: number };
  engine?: string;
  /** The binary that runs (or was refused), and where its path came from. */
  enginePath?: string;
  engineSource?: string;
  model?: string;
  backend?: string;
  optimizations?: Record<string, unknown>;
  /** The engine's start-up self-check (engine/PROTOCOL.md `checks`): each optimisation and drafter, active or not, and why. */
  checks?: OptimizationCheck[];
  warnings: string[];
  restarts: number;
  /** The engine's process id while one runs. */
  pid?: number;
  /** What happened to the engine last time it had to be restarted, and when (ISO time). */
  lastRestart?: { reason: string; at: string };
  /** While restarting: when the next start is due (ISO time). */
  retryAt?: string;
}

/** The status before anything started. */
export const notStarted: EngineStatus = { state: 'stopped', message: 'not started', warnings: [], restarts: 0 };

export interface SupervisorTiming {
  helloTimeoutMs: number;
  pingIntervalMs: number;
  /** A ping unanswered this long is a hang: the engine is killed and restarted. */
  pingTimeoutMs: number;
  /** A ping unanswered this long makes requests give up at once instead of waiting on a possible hang. */
  pingOverdueMs: number;
  /** Restart delays, growing per consecutive crash; the last one repeats, retries never stop. */
  backoffMs: number[];
  /** Running this long since it was ready resets the backoff. */
  healthyMs: number;
}

export const defaultTiming: SupervisorTiming = {
  helloTimeoutMs: 10_000,
  pingIntervalMs: 500,
  pingTimeoutMs: 1_000,
  pingOverdueMs: 300,
  backoffMs: [50, 250, 1_000, 3_000, 10_000, 30_000],
  healthyMs: 10_000,
};

/** The log level of a line the engine wrote to stderr, from its wording. */
export function stderrLevel(line: string): 'info' | 'warn' | 'error' {
  if (/\b(error|fatal|abort)/i.test(line)) return 'error';
  if (/\bwarn(ing)?\b/i.test(line)) return 'warn';
  return 'info';
}

function seconds(ms: number): string {
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
}

/**
 * Emits `status` on every change, and `modelError` (the engine's message) when a
 * generation failed because the model broke under the engine (the owner of the
 * model folder reads it again; the supervisor restarts the engine itself).
 */
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
  /** When the ping now unanswered was sent. */
  private pingSentAt: number | undefined;
  /** Why the supervisor itself killed the running engine (a hang, a broken model), for the restart message. */
  private killReason: string | undefined;
  private _status: EngineStatus = notStarted;

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

  /** Restart by hand (the "Restart engine" command) or because the model folder changed: also leaves the error state. */
  restart(reason = 'restart requested'): Promise<void> {
    this.failures = 0;
    return this.startFresh(reason);
  }

  /** True while a ping has gone unanswered past pingOverdueMs: the engine may be hung. */
  get pingOverdue(): boolean {
    return this.pingSentAt !== undefined && performance.now() - this.pingSentAt > this.timing.pingOverdueMs;
  }

  /**
   * The connection once the model is loaded, waiting for it at most `waitMs`.
   * Undefined at once when the engine may be hung (a ping is overdue), is in
   * error, or its restart is due later than the wait: a completion then shows
   * nothing instead of holding the editor.
   */
  async ready(waitMs: number): Promise<EngineConnection | undefined> {
    const usable = () => (this._status.state === 'ready' || this._status.state === 'degraded') && this.conn?.alive && !this.pingOverdue;
    if (usable()) return this.conn;
    const s = this._status;
    if (waitMs <= 0 || s.state === 'error' || s.state === 'stopped' || this.pingOverdue) return undefined;
    if (s.state === 'restarting' && s.retryAt && Date.parse(s.retryAt) > Date.now() + waitMs) return undefined;
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
    this.setStatus({ state: 'stopped', message: 'engine stopped', progress: undefined, pid: undefined, retryAt: undefined });
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

  /** An error state that only a change (settings, model folder, restart by hand) leaves. */
  private fail(epoch: number, message: string, patch: Partial<EngineStatus> = {}): void {
    if (epoch !== this.epoch) return;
    this.epoch++;
    this.clearTimers();
    this.conn?.kill();
    this.conn = undefined;
    this.log('error', message);
    this.setStatus({ state: 'error', message, progress: undefined, pid: undefined, retryAt: undefined, ...patch });
  }

  private async run(epoch: number): Promise<void> {
    const settings = this.settings;
    if (!settings) return;
    const current = () => epoch === this.epoch;
    this.report = undefined;
    this.killReason = undefined;
    this.setStatus({ state: 'starting', message: 'starting the engine', progress: undefined, warnings: [], retryAt: undefined });

    const [engine, model] = await Promise.all([locateEngine(settings.enginePath), locateModel(settings.modelPath)]);
    if (!current()) return;
    const where = { enginePath: engine.path, engineSource: engine.source, model: model.path };
    const problem = engine.problem ?? model.problem ?? pathProblem(settings.draftModelPath, 'runahead.draftModelPath');
    if (problem) return this.fail(epoch, problem, where);

    const conn = new EngineConnection(engine.path, [], (line) => this.log(stderrLevel(line), `[engine] ${line}`));
    this.conn = conn;
    let greeted = false;
    void conn.exited.then(({ code, signal }) => {
      if (current() && greeted) this.onCrash(epoch, this.killReason ?? (signal ? `killed by ${signal}` : `exited with code ${code}`));
    });
    conn.on('generateError', (err: EngineError) => {
      if (!current() || err.code !== 'model_error') return;
      this.emit('modelError', err.message);
      this.recover(epoch, conn, `the model broke under the engine (${err.message})`);
    });

    // What runs must be our engine: no answer to hello, or another protocol, is an error naming the binary.
    const binary = `${engine.path} (from ${engine.source})`;
    let hello;
    try {
      hello = await withTimeout(conn.hello(), this.timing.helloTimeoutMs, 'hello');
    } catch (err) {
      const why = err instanceof TimeoutError ? `did not answer hello within ${this.timing.helloTimeoutMs} ms` : `ended before answering hello (${(err as Error).message})`;
      return this.fail(epoch, `engine ${binary} ${why}; expected a runahead engine speaking protocol ${PROTOCOL_VERSION}`, where);
    }
    if (!current()) return;
    if (hello.protocol !== PROTOCOL_VERSION) {
      return this.fail(epoch, `engine ${binary} speaks protocol ${hello.protocol}; this server speaks ${PROTOCOL_VERSION}: rebuild the engine (npm run build:engine)`, where);
    }
    greeted = true;
    // The extension logs the binary's path with the model's; this line says only that it started.
    this.log('info', `engine ${hello.engine} started (pid ${conn.pid})`);
    this.setStatus({ state: 'loading', message: `loading ${model.path}`, engine: hello.engine, ...where, pid: conn.pid });

    try {
      const warnings: string[] = [];
      const draft = draftModelFor(settings, model.path);
      // RUNAHEAD_THREADS overrides the engine's choice (one per physical core, fewer for a small model), for benchmarks on a shared machine.
      const base: LoadOptions = { backend: settings.backend, threads: Number(process.env.RUNAHEAD_THREADS ?? 0) || 0, context_length: 0, ...requireOptions(settings) };
      const spec = speculationOptions(settings, draft, hello.capabilities.speculation ?? [], warnings);
      const onProgress = (p: { stage: string; done: number; total: number }) => {
        if (!current()) return;
        this.setStatus({ state: 'loading', message: `loading ${model.path}: ${p.stage} ${p.done}/${p.total}`, progress: { stage: p.stage, done: p.done, total: p.total } });
      };
      // A refused weight format (fp8 asked of the CPU backend) and a refused drafter each load
      // again without that option, once, loudly (the status shows degraded).
      const weights = weightOptions(settings);
      let options: LoadOptions = { ...base, ...weights, ...spec };
      let loaded;
      for (let attempt = 0; ; attempt++) {
        try {
          loaded = await conn.load(model.path, options, onProgress);
          break;
        } catch (err) {
          if (!(err instanceof EngineError) || attempt >= 2) throw err;
          const field = err.detail.field ?? '';
          if ((field === 'options.weights' || field === 'options.lm_head') && (options.weights !== undefined || options.lm_head !== undefined)) {
            warnings.push(`weights "${settings.weights}" refused (${err.message}); running the weights as stored`);
            options = withoutWeightOptions(options);
            continue;
          }
          // An engine without speculation refuses its options, and a model without the drafter
          // asked for (no mtp.safetensors, no draft/) refuses that one: load without, loudly.
          if (!refusesSpeculation(err) || spec.speculation === 'off' || options.speculation === 'off') throw err;
          warnings.push(`speculation "${settings.speculation}" refused (${err.message}); running without speculation`);
          // An engine that knows no speculation options gets none; ours is told `off`, since its default is `auto`.
          const kept = { ...base, ...(options.weights !== undefined || options.lm_head !== undefined ? weights : {}) };
          options = err.code === 'bad_request' ? kept : { ...kept, speculation: 'off' };
        }
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
        checks: report.checks,
        warnings,
      });
      this.schedulePing(epoch, conn);
    } catch (err) {
      if (!current() || err instanceof EngineGoneError) return; // a crash while loading: the exit handler restarts it
      // A model the engine refuses will not load on retry; the model folder's watch restarts it when the folder changes.
      this.fail(epoch, err instanceof Error ? err.message : String(err));
    }
  }

  /** Pings every pingIntervalMs; a ping unanswered for pingTimeoutMs is a hang, so a hang shows within their sum. */
  private schedulePing(epoch: number, conn: EngineConnection): void {
    this.pingTimer = setTimeout(async () => {
      if (epoch !== this.epoch) return;
      this.pingSentAt = performance.now();
      try {
        await withTimeout(conn.ping(), this.timing.pingTimeoutMs, 'engine ping');
        if (epoch !== this.epoch) return;
        this.pingSentAt = undefined;
        if (this.readyAt && Date.now() - this.readyAt > this.timing.healthyMs) this.failures = 0;
        this.schedulePing(epoch, conn);
      } catch (err) {
        if (epoch !== this.epoch || err instanceof EngineGoneError) return;
        this.recover(epoch, conn, `engine pid ${conn.pid} did not answer a ping within ${this.timing.pingTimeoutMs} ms (hung)`);
      }
    }, this.timing.pingIntervalMs);
    this.pingTimer.unref();
  }

  /** Kills an engine that is no use any more; its exit restarts it with `reason` as the cause. */
  private recover(epoch: number, conn: EngineConnection, reason: string): void {
    if (epoch !== this.epoch || this.killReason) return;
    this.killReason = reason;
    this.log('error', `${reason}: killing it`);
    conn.kill();
  }

  private onCrash(epoch: number, how: string): void {
    this.conn = undefined;
    this.report = undefined;
    this.pingSentAt = undefined;
    this.clearTimers();
    this.failures++;
    const restarts = this._status.restarts + 1;
    const delays = this.timing.backoffMs;
    const delay = delays[Math.min(this.failures - 1, delays.length - 1)];
    const at = new Date(Date.now() + delay);
    const reason = how.startsWith('engine') ? how : `engine ${how}`;
    const message = `${reason}; restart ${this.failures > 1 ? `(failure ${this.failures} in a row) ` : ''}in ${seconds(delay)}, at ${at.toTimeString().slice(0, 8)}`;
    this.log('warn', message);
    this.setStatus({ state: 'restarting', message, progress: undefined, pid: undefined, restarts, lastRestart: { reason, at: new Date().toISOString() }, retryAt: at.toISOString() });
    this.restartTimer = setTimeout(() => {
      if (epoch === this.epoch) void this.run(epoch);
    }, delay);
  }

  private clearTimers(): void {
    clearTimeout(this.restartTimer);
    clearTimeout(this.pingTimer);
    this.pingSentAt = undefined;
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
