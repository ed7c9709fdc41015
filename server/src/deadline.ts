// A promise that gives up after a time, for work that may never answer (an
// engine that hangs, a model folder on a stalled network drive).

export class TimeoutError extends Error {}

/** `p`, or a TimeoutError saying `what` timed out after `ms`. */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new TimeoutError(`${what} timed out after ${ms} ms`)), ms);
    }),
  ]);
}
