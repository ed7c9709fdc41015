// The server's state, owned in one place and handed to every front end (LSP
// in server.ts; the benchmark, the agent features and an HTTP API next): the
// settings, the completion source they choose, the Completer with its caches
// and counters, and the workspace.
import { Agent } from './chat/agent';
import { Completer, type CompletionCounters } from './completion/completer';
import type { CompletionSource } from './completion/source';
import { sourceFor, type SourceSecrets } from './completion/sources';
import { notStarted, type EngineStatus } from './engine/supervisor';
import type { Log } from './log';
import { RemoteSource, type RemoteInfo } from './remote/remoteSource';
import { defaultSettings, type Settings } from './settings';
import { Workspace } from './workspace';

/** What runahead/status carries: the source's status, whether completions are on, and a remote server's details. */
export type ServerStatus = EngineStatus & { enabled: boolean; fimOrder?: string; remote?: RemoteInfo };

export class Runahead {
  settings: Settings = defaultSettings;
  readonly workspace = new Workspace();
  readonly completer: Completer;
  /** Chat, edits and the local API: one queue in front of the same source. */
  readonly agent = new Agent(() => this.source);
  private source: CompletionSource | undefined;
  private readonly secrets: SourceSecrets = {};

  constructor(
    private readonly log: Log,
    /** Called with the new status whenever it changes. */
    private readonly statusChanged: (status: ServerStatus) => void,
  ) {
    this.completer = new Completer({ source: () => this.source, settings: () => this.settings, log });
  }

  /** Applies settings: starts the source they choose, stopping another one that ran. */
  configure(settings: Settings): void {
    this.settings = settings;
    const next = sourceFor(settings, this.source, this.log, this.secrets);
    if (next !== this.source) {
      const old = this.source;
      this.completer.cancelAll();
      this.source = next;
      next.onStatus?.(() => {
        if (this.source === next) this.statusChanged(this.status());
      });
      void old?.stop?.();
    }
    this.statusChanged(this.status());
  }

  /** The remote server's API key from the editor's secret storage (runahead/remoteApiKey), kept for a remote source started later. */
  setRemoteApiKey(key: string | undefined): void {
    this.secrets.remoteApiKey = key || undefined;
    if (this.source instanceof RemoteSource) this.source.setApiKey(key);
  }

  status(): ServerStatus {
    const s = this.source?.status ?? notStarted;
    return { ...s, enabled: this.settings.enabled };
  }

  /** The "Restart engine" command. */
  async restart(): Promise<ServerStatus> {
    this.completer.cancelAll();
    await this.source?.restart?.();
    return this.status();
  }

  /** Memory of the server, the completion counters and the source's own counters, for runahead/stats. */
  async stats(): Promise<{ server: NodeJS.MemoryUsage; completions: CompletionCounters; engine: unknown }> {
    return { server: process.memoryUsage(), completions: this.completer.counters, engine: (await this.source?.stats?.()) ?? null };
  }

  opened(uri: string, text: string): void {
    this.workspace.opened(uri, text);
  }

  edited(uri: string, text: string): void {
    this.completer.debounce.keystroke();
    this.workspace.edited(uri, text);
  }

  closed(uri: string): void {
    this.workspace.closed(uri);
    this.completer.cache.clear(uri);
  }

  stop(): Promise<void> {
    return this.source?.stop?.() ?? Promise.resolve();
  }

  /** The engine never outlives the server, however the server ends. */
  killNow(): void {
    this.source?.killNow?.();
  }
}
