// The one queue in front of the batch-1 engine for agent work (the chat
// provider, edits and the local API): one job runs, at most `maxWaiting`
// wait; one more is refused with 429 and a Retry-After estimated from the
// jobs that ran. A waiting job whose client went away leaves the queue.
import { AgentError } from './types';

export class QueueFullError extends AgentError {
  constructor(readonly retryAfterS: number, waiting: number) {
    super(`${waiting} requests are already waiting for the engine; retry after ${retryAfterS} s`, 429, 'queue_full');
  }
}

export class WorkQueue {
  private running = false;
  private readonly waiting: (() => void)[] = [];
  /** Mean duration of recent jobs, ms. */
  private meanMs = 2000;

  constructor(private readonly maxWaiting: () => number) {}

  get length(): number {
    return this.waiting.length + (this.running ? 1 : 0);
  }

  async run<T>(signal: AbortSignal, job: () => Promise<T>): Promise<T> {
    if (this.running) {
      if (this.waiting.length >= this.maxWaiting()) {
        throw new QueueFullError(Math.max(1, Math.ceil(((this.waiting.length + 1) * this.meanMs) / 1000)), this.waiting.length);
      }
      await new Promise<void>((resolve, reject) => {
        const go = () => {
          signal.removeEventListener('abort', leave);
          resolve();
        };
        const leave = () => {
          const i = this.waiting.indexOf(go);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(new AgentError('the client went away while waiting', 499, 'cancelled'));
        };
        this.waiting.push(go);
        signal.addEventListener('abort', leave, { once: true });
      });
    }
    this.running = true;
    const started = performance.now();
    try {
      return await job();
    } finally {
      this.meanMs = 0.7 * this.meanMs + 0.3 * (performance.now() - started);
      const next = this.waiting.shift();
      if (next) next();
      else this.running = false;
    }
  }
}
