// Which CompletionSource the settings ask for. The owner (runahead.ts) stops
// the old source when this returns another one.
import { EngineSource } from '../engine/engineSource';
import type { Log } from '../log';
import type { Settings } from '../settings';
import type { CompletionSource } from './source';

/** `current` when it is the kind the settings want (it takes the new settings), else a new, started source. */
export function sourceFor(settings: Settings, current: CompletionSource | undefined, log: Log): CompletionSource {
  if (current?.kind === 'engine') {
    current.configure?.(settings);
    return current;
  }
  return new EngineSource(settings, log);
}
