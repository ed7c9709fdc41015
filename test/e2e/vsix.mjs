// The extension as users install it: `npm run package` builds the .vsix (bundled
// JS, engine binary, default model). RUNAHEAD_E2E_VSIX=<file> uses a given one.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from './codeServer.mjs';

let built;

/** The .vsix to test: built once per process, however many test files ask. */
export function buildVsix() {
  built ??= packageVsix();
  return built;
}

function packageVsix() {
  if (process.env.RUNAHEAD_E2E_VSIX) {
    const given = process.env.RUNAHEAD_E2E_VSIX;
    if (!existsSync(given)) throw new Error(`RUNAHEAD_E2E_VSIX=${given}: no such file`);
    console.log(`[e2e] using the .vsix from RUNAHEAD_E2E_VSIX: ${given}`);
    return given;
  }
  const pkg = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8'));
  if (!pkg.scripts?.package) throw new Error('package.json has no "package" script to build the .vsix (set RUNAHEAD_E2E_VSIX to use a prebuilt one)');
  const started = Date.now();
  console.log('[e2e] $ npm run package');
  // Its output streams through: an engine rebuild can take minutes.
  const r = spawnSync('npm', ['run', 'package'], { cwd: repoRoot, stdio: ['ignore', 'inherit', 'inherit'], timeout: 30 * 60_000, killSignal: 'SIGKILL' });
  if (r.status !== 0) throw new Error(`npm run package failed (status ${r.status}${r.signal ? `, ${r.signal}` : ''}); its output is above`);
  const vsix = [repoRoot, join(repoRoot, 'dist')]
    .filter(existsSync)
    .flatMap((d) => readdirSync(d).filter((n) => n.endsWith('.vsix')).map((n) => join(d, n)))
    .filter((p) => statSync(p).mtimeMs >= started - 1000)
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0];
  if (!vsix) throw new Error(`npm run package succeeded but wrote no new .vsix in ${repoRoot} or dist/`);
  console.log(`[e2e] built ${vsix} (${(statSync(vsix).size / 2 ** 20).toFixed(1)} MiB) in ${((Date.now() - started) / 1000).toFixed(0)}s`);
  return vsix;
}
