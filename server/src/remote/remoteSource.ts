// Completions from an OpenAI-compatible server (SGLang, vLLM, llama-server,
// Ollama): the FIM prompt as text, streamed back by SSE. Keeps the status the
// status bar shows (the server, its model, or what is wrong and what to do),
// checked by GET /v1/models at start, every healthMs, and at once when a
// completion is asked for while the last check failed.
import { EventEmitter } from 'node:events';
import { RemoteAgent } from '../chat/remoteAgent';
import type { CompletionSource, SourceRequest, SourceResult } from '../completion/source';
import type { EngineStatus } from '../engine/supervisor';
import type { Log } from '../log';
import type { RemoteSettings, Settings } from '../settings';
import { checkServer, type ServerInfo } from './health';
import { fimPrompt, resolveTemplate, windowByChars, type FimTemplate } from './fimTemplates';
import { parseBaseUrl, RemoteProblem, shown, type ProblemKind } from './problems';
import { streamCompletion } from './stream';

/** What runahead/status adds for a remote server (the extension reads `problem` to offer the right button). */
export interface RemoteInfo {
  url: string;
  models: string[];
  template?: string;
  problem?: ProblemKind;
}

export type RemoteStatus = EngineStatus & { remote: RemoteInfo };

export interface RemoteTiming {
  /** Health check interval while the server is fine, and while it is not. */
  healthMs: number;
  errorHealthMs: number;
  /** A failed check is repeated for a completion at most this often. */
  recheckMs: number;
}

export const defaultRemoteTiming: RemoteTiming = { healthMs: 30_000, errorHealthMs: 5_000, recheckMs: 500 };

/** Emits `status` (a RemoteStatus) on every change. */
export class RemoteSource extends EventEmitter implements CompletionSource {
  readonly kind = 'remote' as const;
  private settings!: RemoteSettings;
  private contextBudget = 2048;
  private base: URL | undefined;
  private info: ServerInfo | undefined;
  private apiKey: string | undefined;
  /** The lasting problem of the last check, or of the last completion (cleared by the next completion that works). */
  private checkProblem: RemoteProblem | undefined;
  private completionProblem: RemoteProblem | undefined;
  private checking: Promise<void> | undefined;
  private checkedAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private epoch = 0;
  private disposed = false;
  private readonly counters = { requests: 0, ok: 0, failed: 0, cancelled: 0 };
  private _status: RemoteStatus = { state: 'starting', message: 'checking the remote server', warnings: [], restarts: 0, backend: 'remote', remote: { url: '', models: [] } };

  private readonly timing: RemoteTiming;
  /** Chat and text for agent work, forwarded to the server's own endpoints. */
  readonly agent = new RemoteAgent({
    base: () => this.base,
    model: () => this.model(),
    headers: () => this.headers(),
    timeoutMs: () => this.settings.timeoutMs,
  });

  constructor(
    settings: Settings,
    private readonly log: Log = () => undefined,
    options: { timing?: RemoteTiming; apiKey?: string } = {},
  ) {
    super();
    this.timing = options.timing ?? defaultRemoteTiming;
    this.apiKey = options.apiKey || undefined;
    this.configure(settings);
  }

  get status(): RemoteStatus {
    return this._status;
  }

  /** Applies settings; a change of server, model or headers checks the server again. */
  configure(settings: Settings): void {
    const before = JSON.stringify(this.settings);
    this.settings = settings.remote;
    this.contextBudget = settings.contextBudget;
    if (JSON.stringify(this.settings) === before) return;
    const base = parseBaseUrl(this.settings.url);
    this.base = base instanceof URL ? base : undefined;
    this.checkProblem = base instanceof RemoteProblem ? base : undefined;
    this.completionProblem = undefined;
    this.info = undefined;
    this.epoch++;
    this.update();
    void this.check();
  }

  /** The key from the editor's secret storage (never in settings, never logged); undefined removes it. */
  setApiKey(key: string | undefined): void {
    if ((key || undefined) === this.apiKey) return;
    this.apiKey = key || undefined;
    this.completionProblem = undefined;
    this.epoch++;
    void this.check();
  }

  async ready(waitMs: number): Promise<boolean> {
    if (!this.base || this.disposed) return false;
    // A problem seen by a completion is tried again by the next one (it fails fast if it stays).
    if (this.usable()) return true;
    if (performance.now() - this.checkedAt >= this.timing.recheckMs || this.checking) {
      await Promise.race([this.check(), new Promise((r) => setTimeout(r, waitMs).unref())]);
    }
    return this.usable();
  }


  async complete(request: SourceRequest, onText?: (textSoFar: string) => void): Promise<SourceResult> {
    const started = performance.now();
    const base = this.base;
    if (!base) return { ok: false, text: '', finish: 'error', error: this._status.message, metrics: { backend: 'remote' } };
    const model = this.model();
    let template: FimTemplate;
    try {
      template = resolveTemplate(this.settings.fimTemplate, model ?? '', this.settings.fimCustom, this.settings.stop);
    } catch (err) {
      return { ok: false, text: '', finish: 'error', error: (err as Error).message, metrics: { backend: 'remote', model } };
    }
    const window = windowByChars(request.prefix, request.suffix, this.promptBudget(request.maxTokens));
    const epoch = this.epoch;
    const r = await streamCompletion({
      base,
      headers: this.headers(),
      body: { ...(model ? { model } : {}), prompt: fimPrompt(template, window), max_tokens: request.maxTokens, temperature: request.temperature, stop: template.stop },
      stop: template.stop,
      timeoutMs: this.settings.timeoutMs,
      deadlineMs: request.deadlineMs,
      started,
      signal: request.signal,
      enough: request.enough,
      onText,
    });
    if (epoch === this.epoch) {
      if (r.problem?.lasting) {
        this.completionProblem = r.problem;
        this.update();
      } else if (r.ok && this.completionProblem) {
        this.completionProblem = undefined;
        this.update();
      }
    }
    this.counters.requests++;
    this.counters[r.ok ? 'ok' : r.finish === 'cancelled' ? 'cancelled' : 'failed']++;
    if (r.problem) this.log(r.problem.lasting ? 'error' : 'warn', `remote completion: ${r.problem.message}`);
    const { problem: _, ...result } = r;
    return result;
  }

  onStatus(listener: () => void): void {
    this.on('status', listener);
  }

  /** Forgets what went wrong and checks the server again ("Restart engine" reconnects). */
  async restart(): Promise<void> {
    this.completionProblem = undefined;
    this.epoch++;
    await this.check();
  }

  async stats(): Promise<unknown> {
    return { ...this.counters, url: this._status.remote.url, models: this._status.remote.models };
  }

  async stop(): Promise<void> {
    this.dispose();
  }

  killNow(): void {
    this.dispose();
  }

  dispose(): void {
    this.disposed = true;
    clearTimeout(this.timer);
    this.removeAllListeners();
  }

  /** Tokens of prompt: the context budget, less the completion where the server says its context length. */
  private promptBudget(maxTokens: number): number {
    const ctx = this.info?.contextLength;
    return ctx ? Math.max(64, Math.min(this.contextBudget, ctx - maxTokens - 1)) : this.contextBudget;
  }

  private model(): string | undefined {
    return this.settings.model || this.info?.models[0];
  }

  private headers(): Record<string, string> {
    return { ...this.settings.headers, ...(this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {}) };
  }

  private usable(): boolean {
    return this.checkProblem === undefined && this.info !== undefined;
  }

  /** One health check at a time; the next is scheduled when it ends. */
  private check(): Promise<void> {
    if (this.disposed) return Promise.resolve();
    this.checking ??= this.runCheck().finally(() => {
      this.checking = undefined;
      this.checkedAt = performance.now();
      clearTimeout(this.timer);
      if (!this.disposed) this.timer = setTimeout(() => void this.check(), this.checkProblem ? this.timing.errorHealthMs : this.timing.healthMs).unref();
    });
    return this.checking;
  }

  /** GET /v1/models until settings and key stayed the same during the check (else its answer is stale). */
  private async fetchInfo(): Promise<{ base: URL; got: ServerInfo | RemoteProblem } | undefined> {
    for (;;) {
      const epoch = this.epoch;
      const base = this.base;
      if (!base) return undefined;
      const got = await checkServer(base, this.headers(), this.settings.timeoutMs);
      if (epoch === this.epoch) return { base, got };
    }
  }

  private async runCheck(): Promise<void> {
    const checked = await this.fetchInfo();
    if (!checked) return;
    const { base, got } = checked;
    const wasProblem = this.checkProblem?.message;
    if (got instanceof RemoteProblem) {
      this.checkProblem = got;
    } else {
      const wanted = this.settings.model;
      this.info = got;
      this.checkProblem =
        got.listed && (wanted ? !got.models.includes(wanted) : got.models.length === 0)
          ? new RemoteProblem('model', wanted
            ? `${shown(base)} does not serve model ${JSON.stringify(wanted)}; it serves ${got.models.map((m) => JSON.stringify(m)).join(', ') || 'no model'}: set runahead.remote.model to one of them`
            : `${shown(base)} serves no model (GET /v1/models is empty): load one on the server`)
          : undefined;
    }
    if (this.checkProblem && this.checkProblem.message !== wasProblem) this.log('error', `remote server: ${this.checkProblem.message}`);
    else if (!this.checkProblem && wasProblem) this.log('info', `remote server ${shown(base)} answers again`);
    this.update();
  }

  private update(): void {
    const base = this.base;
    const problem = this.checkProblem ?? this.completionProblem;
    const url = base ? shown(base) : this.settings.url;
    const model = this.model();
    const server = this.info ? `${this.info.serverName ?? 'OpenAI-compatible server'} at ${url}` : url;
    const warnings = this.info && !this.info.listed ? [`${url} has no /v1/models: the model name cannot be checked`] : [];
    let template: string | undefined;
    try {
      template = resolveTemplate(this.settings.fimTemplate, model ?? '', this.settings.fimCustom, []).name;
    } catch (err) {
      warnings.push((err as Error).message);
    }
    const state: EngineStatus['state'] = problem ? 'error' : !this.info ? 'starting' : warnings.length > 0 ? 'degraded' : 'ready';
    const message = problem?.message ?? (this.info ? `${server} · model ${model ?? '(the server default)'}` : `checking ${url}`);
    const next: RemoteStatus = {
      state,
      message,
      engine: server,
      model,
      backend: 'remote',
      warnings,
      restarts: 0,
      remote: { url, models: this.info?.models ?? [], template, problem: problem?.kind },
    };
    if (JSON.stringify(next) === JSON.stringify(this._status)) return;
    this._status = next;
    this.emit('status', next);
  }
}
