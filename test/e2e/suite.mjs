// What every e2e suite does before it starts an editor.
import { mkdirSync, rmSync } from 'node:fs';
import { chooseModel } from './codeServer.mjs';
import { ensureTools } from './tools.mjs';
import { buildVsix } from './vsix.mjs';

/**
 * A fresh artifacts folder, the tools (installed on the first run), the .vsix, and the model the
 * editor will use (the embedded default, else a fixture, said loudly).
 */
export function prepareSuite(artifacts) {
  rmSync(artifacts, { recursive: true, force: true });
  mkdirSync(artifacts, { recursive: true });
  return { tools: ensureTools(), vsix: buildVsix(), model: chooseModel() };
}
