// Linking abort signals by hand: AbortSignal.any keeps every composite alive as
// long as its longest-lived source, which grows the heap of a server that runs
// for days (the reliability bench measures it).

/** Aborts `controller` when `signal` aborts (at once if it has); returns the function that unlinks them. */
export function follow(signal: AbortSignal, controller: AbortController): () => void {
  const abort = () => controller.abort();
  if (signal.aborted) abort();
  else signal.addEventListener('abort', abort, { once: true });
  return () => signal.removeEventListener('abort', abort);
}
