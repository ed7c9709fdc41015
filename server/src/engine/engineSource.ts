// The local engine as a CompletionSource: the supervised engine process and
// the model the server reads from the same folder (tokenizer, FIM builder).
// Builds the FIM prompt as token ids within the engine's context and runs the
// generation on it (request.ts). Its status is the engine's, unless the
// server's read of the model folder is still running or failed.
import { follow } from '../abort';
import { EngineAgent } from '../chat/engineAgent';
import type { CompletionSource, SourceRequest, SourceResult } from '../completion/source';
import type { Log } from '../log';
import { engineMetrics } from '../metrics';
import { ModelState } from '../model/modelState';
import type { Settings } from '../settings';
import { runRequest } from './request';
import { EngineSupervisor, type EngineStatus } from './supervisor';

export class EngineSource implements CompletionSource {
  readonly kind = 'engine' as const;
  readonly supervisor: EngineSupervisor;
  readonly model: ModelState;
  private settings!: Settings;
  private readonly listeners: (() => void)[] = [];
  /** Generations running now: a reload of the model cancels them. */
  private readonly running = new Set<AbortController>();
  /** Chat, edits and API completions; inline completions pre-empt them (chat/inlineFirst.ts). */
  readonly agent = new EngineAgent({
    connect: () => this.supervisor.ready(30_000),
    model: () => this.model.context,
    loadReport: () => this.supervisor.loadReport,
  });

  constructor(
    settings: Settings,
    private readonly log: Log,
  ) {
    this.supervisor = new EngineSupervisor(log);
    this.model = new ModelState(log);
    const changed = () => this.listeners.forEach((l) => l());
    this.model.on('changed', changed);
    this.supervisor.on('status', changed);
    this.model.on('folderChanged', (what: string) => this.reload(what));
    // The supervisor restarts the engine itself; the server's copy of the model (tokenizer) is read again.
    this.supervisor.on('modelError', (message: string) => {
      log('info', `reading the model again: the engine reported ${message}`);
      void this.model.load(this.settings.modelPath, true);
    });
    this.configure(settings);
  }

  get status(): EngineStatus & { fimOrder?: string } {
    const s = this.supervisor.status;
    const base = { ...s, fimOrder: this.model.context?.info.fimOrder };
    if (s.state === 'error') return base;
    if (this.model.problem) return { ...base, state: 'error', message: this.model.problem };
    if (this.model.loading) return { ...base, state: 'loading', message: `reading ${this.model.path}` };
    return base;
  }

  configure(settings: Settings): void {
    this.settings = settings;
    void this.model.load(settings.modelPath);
    this.supervisor.configure(settings);
  }

  onStatus(listener: () => void): void {
    this.listeners.push(listener);
  }

  async ready(waitMs: number): Promise<boolean> {
    const deadline = performance.now() + waitMs;
    const conn = await this.supervisor.ready(waitMs);
    // The engine can be loaded before the server's own read of the model folder (its tokenizer) ends.
    while (conn && this.model.loading && !this.model.context && performance.now() < deadline) {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.model.off('changed', done);
          resolve();
        };
        const timer = setTimeout(done, deadline - performance.now());
        this.model.on('changed', done);
      });
    }
    return conn !== undefined && this.model.context !== undefined;
  }

  async complete(request: SourceRequest, onText?: (textSoFar: string) => void): Promise<SourceResult> {
    const inlineEnds = this.agent.inlineFirst.inlineStarts();
    try {
      return await this.completeInline(request, onText);
    } finally {
      inlineEnds();
    }
  }


  private async completeInline(request: SourceRequest, onText?: (textSoFar: string) => void): Promise<SourceResult> {
    const conn = await this.supervisor.ready(0);
    const model = this.model.context;
    if (!conn || !model) return { ok: false, text: '', finish: 'error', error: 'the engine is not ready', metrics: {} };
    const job = new AbortController();
    this.running.add(job);
    const unlink = follow(request.signal, job);
    try {
      const prompt = await model.fim.build({
        prefix: request.prefix,
        suffix: request.suffix,
        path: request.path,
        repoName: request.repoName,
        extra: request.extra,
        // The engine's context (from its load report) holds the prompt and the completion.
        budget: Math.max(64, Math.min(this.settings.contextBudget, (this.supervisor.loadReport?.context_length ?? model.info.contextLength) - request.maxTokens - 1)),
      });
      if (job.signal.aborted) return { ok: false, text: '', finish: 'cancelled', metrics: {} };
      const r = await runRequest(conn, {
        prompt: prompt.ids,
        params: {
          max_tokens: request.maxTokens,
          temperature: request.temperature,
          ...(request.seed !== undefined ? { seed: request.seed } : {}),
          stop: model.info.stopTokens,
          deadline_ms: request.deadlineMs,
          hard_deadline_ms: 2 * request.deadlineMs,
        },
        tokenizer: model.info.tokenizer,
        signal: job.signal,
        enough: request.enough,
        onText,
      });
      return { ok: r.ok, text: r.text, finish: r.finish, error: r.error, metrics: engineMetrics(r.done, this.supervisor.loadReport) };
    } catch (err) {
      // A bug in building the prompt costs this completion only.
      return { ok: false, text: '', finish: 'error', error: err instanceof Error ? (err.stack ?? err.message) : String(err), metrics: {} };
    } finally {
      unlink();
      this.running.delete(job);
    }
  }

  /** The "Restart engine" command: reads the model folder again too (it may have been fixed or replaced). */
  async restart(): Promise<void> {
    await Promise.all([this.model.load(this.settings.modelPath, true), this.supervisor.restart()]);
  }

  async stats(): Promise<unknown> {
    const conn = await this.supervisor.ready(0);
    return conn ? conn.stats().catch(() => null) : null;
  }

  stop(): Promise<void> {
    this.listeners.length = 0;
    this.model.stop();
    return this.supervisor.stop();
  }

  killNow(): void {
    this.supervisor.killNow();
  }

  /** The model folder changed, or broke under the engine: read it again and reload the engine. */
  private reload(reason: string): void {
    this.log('info', `reloading the model: ${reason}`);
    for (const job of this.running) job.abort();
    void this.model.load(this.settings.modelPath, true);
    void this.supervisor.restart(reason);
  }
}
