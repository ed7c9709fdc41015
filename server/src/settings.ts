// The `runahead.*` settings as the server sees them. The extension sends them
// in initializationOptions and on every change (workspace/didChangeConfiguration
// with `{ settings: { runahead: {...} } }`); any other LSP client can do the same.
import { fimTemplateNames, type FimTemplateName } from './remote/fimTemplates';

/** Where completions are computed: the local engine on `auto`/`cpu`/`cuda`, or an OpenAI-compatible server (`remote`). */
export type Backend = 'auto' | 'cpu' | 'cuda' | 'remote';
export type Speculation = 'auto' | 'off' | 'lookup' | 'mtp' | 'draft';
/** How the engine keeps the weights (engine/PROTOCOL.md: options.weights, options.lm_head). */
export type WeightsSetting = 'auto' | 'q8_0' | 'q4_k_m' | 'fp8' | 'fp8-lm-head';

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
  /** `auto` as stored; `q8_0` / `q4_k_m` quantized at load; `fp8` / `fp8-lm-head` on the GPU only. */
  weights: WeightsSetting;
  maxDraftTokens: number;
  /** Optimisations that must be active after a load (engine/PROTOCOL.md options.require); one that is not degrades the status. */
  requireOptimizations: string[];
  maxTokens: number;
  deadlineMs: number;
  debounceMs: number;
  contextBudget: number;
  disabledLanguages: string[];
  /** The OpenAI-compatible server of `backend: 'remote'` (runahead.remote.*). */
  remote: RemoteSettings;
}

export interface RemoteSettings {
  /** Base URL, e.g. http://gpu-box:30000 (a trailing /v1 is allowed). Machine scope: a workspace cannot set it. */
  url: string;
  /** The served model's name; empty = the first one /v1/models lists. */
  model: string;
  fimTemplate: FimTemplateName;
  /** The prompt of fimTemplate `custom`, with {prefix} and {suffix}. */
  fimCustom: string;
  /** Stop strings added to the template's. */
  stop: string[];
  /** Extra HTTP headers (a proxy's, an organisation id). Machine scope. The API key is not here: it lives in SecretStorage. */
  headers: Record<string, string>;
  /** Most ms to connect, to wait for the answer's headers and between two streamed chunks; also the health check's limit. */
  timeoutMs: number;
}

export const defaultSettings: Settings = {
  enabled: true,
  modelPath: '',
  draftModelPath: '',
  enginePath: '',
  backend: 'auto',
  speculation: 'auto',
  weights: 'auto',
  maxDraftTokens: 8,
  requireOptimizations: [],
  maxTokens: 128,
  deadlineMs: 1000,
  debounceMs: 20,
  contextBudget: 2048,
  disabledLanguages: ['plaintext', 'markdown', 'scminput'],
  remote: { url: '', model: '', fimTemplate: 'auto', fimCustom: '', stop: [], headers: {}, timeoutMs: 5000 },
};

/** Merges what a client sent over the defaults, keeping only known keys of the right type. */
export function readSettings(raw: unknown, base: Settings = defaultSettings): Settings {
  const out: Settings = { ...base };
  if (!raw || typeof raw !== 'object') return out;
  const src = raw as Record<string, unknown>;
  for (const key of Object.keys(defaultSettings) as (keyof Settings)[]) {
    const value = src[key];
    if (value === undefined || value === null) continue;
    if (key === 'remote') {
      out.remote = readRemote(value, base.remote);
      continue;
    }
    const expected = defaultSettings[key];
    if (Array.isArray(expected) ? Array.isArray(value) : typeof value === typeof expected) {
      (out as unknown as Record<string, unknown>)[key] = value;
    }
  }
  return out;
}

function readRemote(raw: unknown, base: RemoteSettings): RemoteSettings {
  const out: RemoteSettings = { ...base };
  if (!raw || typeof raw !== 'object') return out;
  const src = raw as Record<string, unknown>;
  if (typeof src.url === 'string') out.url = src.url.trim();
  if (typeof src.model === 'string') out.model = src.model.trim();
  if (typeof src.fimTemplate === 'string' && (fimTemplateNames as string[]).includes(src.fimTemplate)) out.fimTemplate = src.fimTemplate as FimTemplateName;
  if (typeof src.fimCustom === 'string') out.fimCustom = src.fimCustom;
  if (Array.isArray(src.stop)) out.stop = src.stop.filter((x): x is string => typeof x === 'string' && x.length > 0);
  if (src.headers && typeof src.headers === 'object' && !Array.isArray(src.headers)) {
    out.headers = Object.fromEntries(Object.entries(src.headers).filter((e): e is [string, string] => typeof e[1] === 'string'));
  }
  if (typeof src.timeoutMs === 'number' && src.timeoutMs > 0) out.timeoutMs = src.timeoutMs;
  return out;
}

/** The settings that need a new engine or a new model load when they change. */
export function engineKey(s: Settings): string {
  return JSON.stringify([s.enginePath, s.modelPath, s.draftModelPath, s.backend, s.speculation, s.maxDraftTokens, s.weights, s.requireOptimizations]);
}
