import { join } from 'node:path';
import { readSettings, type Settings } from '../../server/src/settings';

export const repoRoot = join(__dirname, '..', '..');
export const fixtureModel = join(repoRoot, 'test', 'fixtures', 'models', 'qwen2-tied-bf16');
export const fakeEngine = join(__dirname, 'fakes', 'fake-engine.mjs');

export function settingsWith(patch: Partial<Settings>): Settings {
  return readSettings({ modelPath: fixtureModel, enginePath: fakeEngine, ...patch });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `cond` until it holds or `ms` pass. */
export async function until(cond: () => boolean, ms = 5000, what = 'condition'): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}
