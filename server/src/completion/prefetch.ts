// Prefetch: once a completion is shown, ask for the one after it (the prompt
// as if it were accepted) so that accepting shows the next at once. At most
// one runs; any real request that does not want its result cancels it.

export interface PrefetchKey {
  uri: string;
  prefix: string;
  suffix: string;
}

interface Inflight {
  key: PrefetchKey;
  result: Promise<string | undefined>;
  cancel(): void;
}

export class Prefetcher {
  private inflight: Inflight | undefined;

  start(key: PrefetchKey, run: () => { result: Promise<string | undefined>; cancel(): void }): void {
    this.cancel();
    const job = run();
    const entry: Inflight = { key, ...job };
    this.inflight = entry;
    void job.result.finally(() => {
      if (this.inflight === entry) this.inflight = undefined;
    });
  }

  /** The running prefetch for exactly this place, if any. */
  matching(key: PrefetchKey): Promise<string | undefined> | undefined {
    const k = this.inflight?.key;
    return k && k.uri === key.uri && k.prefix === key.prefix && k.suffix === key.suffix ? this.inflight!.result : undefined;
  }

  cancel(): void {
    this.inflight?.cancel();
    this.inflight = undefined;
  }
}
