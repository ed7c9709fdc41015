#!/usr/bin/env node
// The README's test command (`npm test`): installs and builds whatever is missing,
// runs every suite (engine ctest, mocha unit + integration, and the end-to-end
// editor test where it is enabled), and closes with one "N passed, N failed" line.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { prepare, root } from './prepare.mjs';

process.chdir(root);
const pkg = JSON.parse(readFileSync('package.json', 'utf8'));

function sh(cmd, args, opts = {}) {
  console.log(`\n$ ${cmd} ${args.join(' ')}`);
  const r = spawnSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 256 << 20, ...opts });
  process.stdout.write(r.stdout ?? '');
  process.stderr.write(r.stderr ?? '');
  return { status: r.status ?? 1, out: `${r.stdout ?? ''}\n${r.stderr ?? ''}` };
}

const totals = { passed: 0, failed: 0 };
// What failed, repeated just above the closing line: a CI log that keeps only its tail
// still says which test failed and why.
const failures = [];
// A suite that ended without a count of its failures: its exit status and its last lines.
const exited = (suite, status, out) => `${suite}: exited ${status}:\n${out.trimEnd().split('\n').slice(-20).join('\n')}`;
function count(suite, passed, failed) {
  console.log(`[test] ${suite}: ${passed} passed, ${failed} failed`);
  totals.passed += passed;
  totals.failed += failed;
}

// 1. npm packages, the engine build and the bundles.
const failed = prepare();
if (failed) count(failed, 0, 1);

// 2. The engine's ctest suite.
if (failed !== 'engine build' && failed !== 'npm install') {
  const ctest = sh('ctest', ['--test-dir', 'engine/build', '--output-on-failure', '--timeout', '600', '-j2']);
  const m = ctest.out.match(/(\d+) tests failed out of (\d+)/);
  if (m) count('engine (ctest)', Number(m[2]) - Number(m[1]), Number(m[1]));
  else count('engine (ctest)', 0, 1);
  const list = ctest.out.match(/The following tests FAILED:\n((?:\s+\d+ - .*\n?)+)/);
  if (list) failures.push(`engine (ctest):\n${list[1].trimEnd()}`);
  else if (!m) failures.push(exited('engine (ctest)', ctest.status, ctest.out));
}

// 3. JavaScript suites: each package.json script named test:<suite> that mocha runs.
for (const suite of ['unit', 'integration', 'e2e']) {
  const script = pkg.scripts?.[`test:${suite}`];
  if (!script) continue;
  if (suite === 'e2e' && process.env.RUNAHEAD_SKIP_E2E) { console.log('[test] e2e skipped (RUNAHEAD_SKIP_E2E)'); continue; }
  const r = sh('npm', ['run', '--silent', `test:${suite}`]);
  const passing = Number(r.out.match(/(\d+) passing/)?.[1] ?? 0);
  const failing = Number(r.out.match(/(\d+) failing/)?.[1] ?? 0);
  count(suite, passing, failing + (r.status !== 0 && failing === 0 ? 1 : 0));
  const report = r.out.match(/\d+ failing\n([\s\S]*)/);
  if (report) failures.push(`${suite}:\n${report[1].split('\n').slice(0, 60).join('\n').trimEnd()}`);
  else if (r.status !== 0) failures.push(exited(suite, r.status, r.out));
}

if (failures.length) console.log(`\n[test] what failed\n${failures.join('\n\n')}`);
console.log(`\n${totals.passed} passed, ${totals.failed} failed`);
process.exit(totals.failed === 0 && totals.passed > 0 ? 0 : 1);
