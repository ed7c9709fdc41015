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
 * Options for `load`: the method (`auto` lets the engine choose), the most
 * drafted tokens per step, and the draft model when there is one. Engines
 * ignore options they do not know (PROTOCOL.md); one that refuses them is
 * loaded again without (supervisor.ts). An explicit method the engine does not
 * list in hello.capabilities.speculation is still sent and noted as a warning,
 * so the status shows "degraded".
 */
export function speculationOptions(settings: Settings, draft: string | undefined, supported: string[], warnings: string[]): LoadOptions {
  const out: LoadOptions = { speculation: settings.speculation, max_draft: settings.maxDraftTokens };
  if (settings.speculation === 'off') return out;
  if (settings.speculation !== 'auto' && !supported.includes(settings.speculation)) {
    warnings.push(`speculation "${settings.speculation}" was asked for but this engine supports ${supported.length ? supported.join(', ') : 'none'}`);
  }
  if (draft && (settings.speculation === 'draft' || settings.speculation === 'auto')) out.draft_model = draft;
  return out;
}

/** The weight-format part of `load`'s options for runahead.weights (none for `auto`). */
export function weightOptions(settings: Settings): LoadOptions {
  switch (settings.weights) {
    case 'q8_0': return { weights: 'q8_0' };
    case 'q4_k_m': return { weights: 'q4_k_m' };
    case 'fp8': return { weights: 'fp8' };
    case 'fp8-lm-head': return { lm_head: 'fp8' };
    default: return {};
  }
}

/** `options` without the weight-format options (what a load that refused them tries next). */
export function withoutWeightOptions(options: LoadOptions): LoadOptions {
  const { weights: _weights, lm_head: _lmHead, ...rest } = options;
  return rest;
}

/**
 * The self-check part of `load`'s options: the optimisations runahead.requireOptimizations
 * lists, with fallback, so one the engine cannot make active is a warning in the report (the
 * status shows degraded) rather than a model that does not load.
 */
export function requireOptions(settings: Settings): LoadOptions {
  const names = settings.requireOptimizations.filter((n): n is string => typeof n === 'string' && n.length > 0);
  return names.length > 0 ? { require: names, fallback: true } : {};
}
