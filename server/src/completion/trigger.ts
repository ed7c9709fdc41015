// Whether to complete at all: the setting, the language, and the cursor's
// place in the line (not in the middle of a word).
import type { Settings } from '../settings';

export interface TriggerInput {
  languageId: string;
  linePrefix: string;
  lineSuffix: string;
  trigger: Trigger;
}

/** Invoked: the user asked for a completion; automatic: it follows typing. */
export type Trigger = 'invoked' | 'automatic';

export type TriggerDecision = { complete: true } | { complete: false; reason: string };

export function shouldComplete(input: TriggerInput, settings: Pick<Settings, 'enabled' | 'disabledLanguages'>): TriggerDecision {
  const invoked = input.trigger === 'invoked';
  if (!settings.enabled && !invoked) return { complete: false, reason: 'disabled (runahead.enabled)' };
  if (settings.disabledLanguages.includes(input.languageId) && !invoked) {
    return { complete: false, reason: `language ${input.languageId} is in runahead.disabledLanguages` };
  }
  if (!invoked && /^\w/.test(input.lineSuffix) && /\w$/.test(input.linePrefix)) {
    return { complete: false, reason: 'cursor inside a word' };
  }
  return { complete: true };
}
