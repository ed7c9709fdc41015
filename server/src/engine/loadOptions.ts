// The speculation part of the engine's `load` options, from the settings and
// what the engine says it supports (hello.capabilities.speculation).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { LoadOptions } from './protocol';
import type { Settings } from '../settings';

/** The draft model: the setting, else the model folder's own draft/ subfolder. */
export function draftModelFor(settings: Settings, modelPath: string): string | undefined {
  if (settings.draftModelPath) return settings.draftModelPath;
  const bundled = join(modelPath, 'draft');
  return existsSync(join(bundled, 'config.json')) ? bundled : undefined;
}

/**
 * Options for `load`. `auto` asks for nothing and lets the engine choose; an
 * explicit method the engine does not list is still sent (the engine reports
 * it) and noted as a warning so the status shows "degraded".
 */
export function speculationOptions(settings: Settings, draft: string | undefined, supported: string[], warnings: string[]): LoadOptions {
  const out: LoadOptions = {};
  if (settings.speculation === 'off') return supported.length > 0 ? { speculation: 'off' } : {};
  if (settings.speculation !== 'auto') {
    out.speculation = settings.speculation;
    if (!supported.includes(settings.speculation)) {
      warnings.push(`speculation "${settings.speculation}" was asked for but this engine supports ${supported.length ? supported.join(', ') : 'none'}`);
    }
  }
  if (draft && (settings.speculation === 'draft' || (settings.speculation === 'auto' && supported.includes('draft')))) out.draft_model = draft;
  if (settings.speculation !== 'auto' || supported.length > 0) out.max_draft = settings.maxDraftTokens;
  return out;
}
