#!/usr/bin/env node
// Installs what the engine build needs (Debian packages, when run as root) and
// builds it with CMake into engine/build. Idempotent: a second run only rebuilds
// what changed. Used by `npm install` (postinstall), `npm run demo` and `npm test`.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const engineDir = dirname(fileURLToPath(import.meta.url));
const buildDir = join(engineDir, 'build');

const debianPackages = { cmake: 'cmake', ninja: 'ninja-build', 'g++': 'g++' };
const debianHeaders = {
  '/usr/include/nlohmann/json.hpp': 'nlohmann-json3-dev',
  '/usr/include/doctest/doctest.h': 'doctest-dev',
};

function onPath(tool) {
  return spawnSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' }).status === 0;
}

function missingPackages() {
  const missing = Object.entries(debianPackages).filter(([tool]) => !onPath(tool)).map(([, pkg]) => pkg);
  for (const [header, pkg] of Object.entries(debianHeaders)) if (!existsSync(header)) missing.push(pkg);
  return missing;
}

function installPackages(packages) {
  if (packages.length === 0) return;
  const command = `apt-get update && apt-get install -y --no-install-recommends ${packages.join(' ')}`;
  if (process.getuid && process.getuid() === 0) {
    console.error(`[setup] installing Debian packages: ${packages.join(' ')}`);
    execFileSync('sh', ['-c', command], { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
  } else {
    console.error(`[setup] the engine build needs: ${packages.join(' ')}\n[setup] run:  sudo sh -c '${command}'`);
    process.exit(1);
  }
}

function run(cmd, args, quiet) {
  const r = spawnSync(cmd, args, { stdio: quiet ? ['ignore', 'pipe', 'inherit'] : 'inherit' });
  if (r.status !== 0) {
    if (quiet && r.stdout) process.stdout.write(r.stdout);
    console.error(`[setup] failed: ${cmd} ${args.join(' ')}`);
    process.exit(r.status ?? 1);
  }
}

function buildEngine({ quiet = false } = {}) {
  installPackages(missingPackages());
  if (!existsSync(join(buildDir, 'build.ninja'))) {
    run('cmake', ['-S', engineDir, '-B', buildDir, '-G', 'Ninja', '-DCMAKE_BUILD_TYPE=Release'], quiet);
  }
  run('cmake', ['--build', buildDir, '--parallel'], quiet);
}

buildEngine({ quiet: process.argv.includes('--quiet') });
