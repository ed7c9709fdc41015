#!/usr/bin/env node
// Set-up shared by `npm test` and `npm run demo` on a fresh clone: npm packages
// (whose postinstall builds the engine), an incremental engine build, and the
// bundled language server and extension (dist/).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Runs each step; returns the name of the first that failed, or undefined. */
export function prepare({ quiet = false } = {}) {
  const stdio = quiet ? ['ignore', 'ignore', 'inherit'] : 'inherit';
  const steps = [
    ['npm install', 'npm', [existsSync(join(root, 'package-lock.json')) ? 'ci' : 'install', '--no-audit', '--no-fund'], () => !existsSync(join(root, 'node_modules/.package-lock.json'))],
    ['engine build', 'node', ['engine/setup.mjs', '--quiet'], () => true],
    ['bundle', 'node', ['esbuild.mjs'], () => true],
  ];
  for (const [name, cmd, args, needed] of steps) {
    if (!needed()) continue;
    if (!quiet) console.log(`\n$ ${cmd} ${args.join(' ')}`);
    if (spawnSync(cmd, args, { cwd: root, stdio }).status !== 0) return name;
  }
  return undefined;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const failed = prepare({ quiet: process.argv.includes('--quiet') });
  if (failed) {
    console.error(`[prepare] ${failed} failed`);
    process.exit(1);
  }
}
