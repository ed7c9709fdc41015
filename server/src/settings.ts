// The `runahead.*` settings as the server sees them. The extension sends them
// in initializationOptions and on every change (workspace/didChangeConfiguration
// with `{ settings: { runahead: {...} } }`); any other LSP client can do the same.

export type Backend = 'auto' | 'cpu' | 'cuda';
export type Speculation = 'auto' | 'off' | 'lookup' | 'mtp' | 'draft';

export interface Settings {
  enabled: boolean;
  /** Model folder; empty = the embedded model (engine/models/runahead-coder). */
  modelPath: string;
  /** Draft model folder; empty = the model's own draft/ subfolder when present. */
  draftModelPath: string;
  /** Engine executable; empty = the one built by npm install or shipped in the .vsix. */
  enginePath: string;
  backend: Backend;
  speculation: Speculation;
  maxDraftTokens: number;
  maxTokens: number;
  deadlineMs: number;
  debounceMs: number;
  contextBudget: number;
  disabledLanguages: string[];
}

export const defaultSettings: Settings = {
  enabled: true,
  modelPath: '',
  draftModelPath: '',
  enginePath: '',
  backend: 'auto',
  speculation: 'auto',
  maxDraftTokens: 8,
  maxTokens: 128,
  deadlineMs: 1000,
  debounceMs: 20,
  contextBudget: 2048,
  disabledLanguages: ['plaintext', 'markdown', 'scminput'],
};

/** Merges what a client sent over the defaults, keeping only known keys of the right type. */
export function readSettings(raw: unknown, base: Settings = defaultSettings): Settings {
  const out: Settings = { ...base };
  if (!raw || typeof raw !== 'object') return out;
  const src = raw as Record<string, unknown>;
  for (const key of Object.keys(defaultSettings) as (keyof Settings)[]) {
    const value = src[key];
    if (value === undefined || value === null) continue;
    const expected = defaultSettings[key];
    if (Array.isArray(expected) ? Array.isArray(value) : typeof value === typeof expected) {
      (out as unknown as Record<string, unknown>)[key] = value;
    }
  }
  return out;
}

/** The settings that need a new engine or a new model load when they change. */
export function engineKey(s: Settings): string {
  return JSON.stringify([s.enginePath, s.modelPath, s.draftModelPath, s.backend, s.speculation, s.maxDraftTokens]);
}
