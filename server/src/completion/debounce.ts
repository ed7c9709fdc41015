// How long to wait after a keystroke before asking the engine. The base is
// runahead.debounceMs. When the engine answers faster than the user types,
// that is all: the completion shows before the next key. When it is slower,
// a request made mid-burst would be cancelled by the next key anyway, so the
// wait grows to half the typing interval (bounded by maxMs): a cancelled
// request costs the engine only one step, so the wait stays short.

const ALPHA = 0.3; // weight of the newest sample in the moving averages
const PAUSE_MS = 2000; // gaps longer than this are pauses, not typing

export class AdaptiveDebounce {
  private lastKey = 0;
  typingMs: number | undefined;
  latencyMs: number | undefined;

  constructor(
    public baseMs: number,
    private readonly maxMs = 150,
  ) {}

  keystroke(now = Date.now()): void {
    const gap = now - this.lastKey;
    this.lastKey = now;
    if (gap <= 0 || gap > PAUSE_MS) return;
    this.typingMs = this.typingMs === undefined ? gap : this.typingMs + ALPHA * (gap - this.typingMs);
  }

  /** Time from request to an answer from the engine (debounce not included). */
  latency(ms: number): void {
    this.latencyMs = this.latencyMs === undefined ? ms : this.latencyMs + ALPHA * (ms - this.latencyMs);
  }

  delay(): number {
    if (this.typingMs === undefined || this.latencyMs === undefined) return this.baseMs;
    if (this.latencyMs <= this.typingMs / 2) return this.baseMs;
    return Math.min(this.maxMs, Math.max(this.baseMs, 0.5 * this.typingMs));
  }

  /** Waits `delay()`; false when the request was cancelled (`signal` aborted) meanwhile. */
  wait(signal: AbortSignal, ms = this.delay()): Promise<boolean> {
    if (signal.aborted) return Promise.resolve(false);
    if (ms <= 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const cancelled = () => {
        clearTimeout(timer);
        resolve(false);
      };
      signal.addEventListener('abort', cancelled, { once: true });
      const timer = setTimeout(() => {
        signal.removeEventListener('abort', cancelled);
        resolve(!signal.aborted);
      }, ms);
    });
  }
}
