// Which CompletionSource the settings ask for. The owner (runahead.ts) stops
// the old source when this returns another one.
import { EngineSource } from '../engine/engineSource';
import type { Log } from '../log';
import { RemoteSource } from '../remote/remoteSource';
import type { Settings } from '../settings';
import type { CompletionSource } from './source';

/** What a source may need that is not a setting: the remote server's API key (from the editor's secret storage). */
export interface SourceSecrets {
  remoteApiKey?: string;
}

/** `current` when it is the kind the settings want (it takes the new settings), else a new, started source. */
export function sourceFor(settings: Settings, current: CompletionSource | undefined, log: Log, secrets: SourceSecrets = {}): CompletionSource {
  const kind = settings.backend === 'remote' ? 'remote' : 'engine';
  if (current?.kind === kind) {
    current.configure?.(settings);
    return current;
  }
  return kind === 'remote' ? new RemoteSource(settings, log, { apiKey: secrets.remoteApiKey }) : new EngineSource(settings, log);
}
