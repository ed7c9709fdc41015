// Workspace trust (issue 18) as a user meets it: a cloned folder whose
// .vscode/settings.json points runahead.enginePath at a script of its own (mode
// 644, which would leave a marker file if it ever ran), runahead.modelPath at a
// bogus folder and runahead.draftModelPath at `--help`. One code-server with
// VS Code's workspace trust on opens a copy of it untrusted (Restricted Mode),
// then another copy trusted: in both the script never runs and keeps its mode,
// the engine that runs is the bundled binary with the embedded model, and
// ghost text appears. Screenshots: test/artifacts/e2e/workspace-trust/.
import assert from 'node:assert/strict';
import { chmodSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, realpathSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { defaultModel, enginePids, installExtension, makeRunDir, repoRoot, sampleWorkspace, startCodeServer, stopRun } from './codeServer.mjs';
import { prepareSuite } from './suite.mjs';
import { Workbench } from './workbench.mjs';

const artifacts = join(repoRoot, 'test', 'artifacts', 'e2e', 'workspace-trust');
const GHOST_TIMEOUT_MS = Number(process.env.RUNAHEAD_E2E_GHOST_TIMEOUT_MS ?? 90_000);
const PATH_KEYS = ['enginePath', 'modelPath', 'draftModelPath'];

const log = (msg) => console.log(`      ${msg}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const literally = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A copy of the sample workspace that tries to choose the engine and the models. */
function hostileFolder(dir, marker) {
  cpSync(sampleWorkspace, dir, { recursive: true });
  const script = join(dir, 'tools', 'runahead-engine');
  mkdirSync(join(dir, 'tools'));
  writeFileSync(script, `#!/bin/sh\necho "ran as $(id -un): $0 $*" >> '${marker}'\n`);
  chmodSync(script, 0o644);
  mkdirSync(join(dir, 'bogus-model'));
  writeFileSync(join(dir, 'bogus-model', 'config.json'), '{ "architectures": ["NotAModel"] }\n');
  writeFileSync(join(dir, 'bogus-model', 'tokenizer.json'), '{}\n');
  const values = { enginePath: script, modelPath: join(dir, 'bogus-model'), draftModelPath: '--help' };
  mkdirSync(join(dir, '.vscode'));
  writeFileSync(join(dir, '.vscode', 'settings.json'), `${JSON.stringify(Object.fromEntries(PATH_KEYS.map((k) => [`runahead.${k}`, values[k]])), null, 2)}\n`);
  return { dir, script, marker, values };
}

/** Every Output → Runahead log file the editor wrote, newest last. */
function runaheadLogs(userData) {
  const found = [];
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else if (/Runahead\.log$/.test(e.name)) found.push(join(d, e.name));
    }
  };
  if (existsSync(join(userData, 'logs'))) walk(join(userData, 'logs'));
  return found.sort((a, b) => statSync(a).mtimeMs - statSync(b).mtimeMs);
}

/** The Runahead log of the window that logged `mark`, once it holds every pattern (or the deadline passes). */
async function waitForLog(userData, mark, patterns, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = runaheadLogs(userData).map((f) => readFileSync(f, 'utf8')).filter((t) => t.includes(mark)).at(-1) ?? '';
    if ((text && patterns.every((p) => p.test(text))) || Date.now() > deadline) return text;
    await sleep(250);
  }
}

/** The mapped model weight files of an engine process. */
function mappedWeights(pid) {
  const maps = readFileSync(`/proc/${pid}/maps`, 'utf8');
  return [...new Set(maps.split('\n').map((l) => l.split(/\s+/).slice(5).join(' ')).filter((p) => /\.(safetensors|gguf)$/.test(p)))];
}

describe('Workspace trust: a cloned folder cannot choose what runs (code-server + headless Chromium)', function () {
  let tools;
  let run;
  let server;
  let wb;
  let bundledEngine;
  let bundledModel;
  const ghostMs = {};

  before(async function () {
    this.timeout(60 * 60_000); // the first run installs Chromium, Node 24 and code-server
    const suite = prepareSuite(artifacts);
    tools = suite.tools;
    const { vsix, model } = suite;
    assert.ok(model.isDefault, `the embedded model ${defaultModel} is absent; this test checks that the bundled engine runs the embedded model`);
    run = makeRunDir({ settings: { 'security.workspace.trust.enabled': true, 'security.workspace.trust.startupPrompt': 'once' } });
    const [installed] = installExtension(tools, run, vsix);
    bundledEngine = realpathSync(join(run.extensions, installed, 'engine', 'build', 'runahead-engine'));
    bundledModel = realpathSync(join(run.extensions, installed, 'engine', 'models', 'runahead-coder'));
    server = await startCodeServer(tools, run, { workspaceTrust: true });
  });

  after(async function () {
    this.timeout(60_000);
    await stopRun({ wb, server, run, artifacts });
    if (wb) log(`screenshots: ${wb.shots.map((s) => s.slice(repoRoot.length + 1)).join(' ')}`);
    if (Object.keys(ghostMs).length) log(`ghost text after the last keystroke: ${JSON.stringify(ghostMs)} ms`);
  });

  /** Opens folder in the browser and answers VS Code's trust prompt with the button named by answer; returns the folder's URL. */
  async function openFolder(folder, answer, label) {
    const url = `${server.url}?folder=${encodeURIComponent(folder.dir)}`;
    if (!wb) wb = await Workbench.launch(tools.playwright, { chromium: tools.chromium, profileDir: join(run.dir, 'chromium-profile'), artifacts, url });
    else await wb.goto(url);
    const button = wb.page.locator('.monaco-dialog-box .monaco-button').filter({ hasText: answer });
    await button.waitFor({ timeout: 60_000 });
    await wb.screenshot(`${label}-trust-prompt`);
    await button.click();
    await wb.page.locator('.monaco-dialog-box').waitFor({ state: 'detached', timeout: 10_000 });
    return url;
  }

  /** Types in example.ts until ghost text shows; returns the ms from the last keystroke. */
  async function ghostText(label) {
    await wb.waitForStatus(/ms\/tok|Runahead$/, 180_000).catch(async (e) => {
      await wb.screenshot(`${label}-not-ready`);
      throw new Error(`Runahead never became ready (status bar: ${JSON.stringify(await wb.statusText())}): ${e.message.split('\n')[0]}`);
    });
    await wb.openFile('example.ts', 'export function midpoint');
    await wb.page.keyboard.press('Control+End');
    await wb.type('export function manhattan(a: Point, b: Point): number {');
    await wb.page.keyboard.press('Enter');
    await wb.type('return ');
    const typedAt = Date.now();
    const ghost = await wb.waitForGhostText(GHOST_TIMEOUT_MS).catch(async (e) => {
      await wb.screenshot(`${label}-no-ghost-text`);
      throw new Error(`no ghost text within ${GHOST_TIMEOUT_MS} ms (status bar: ${JSON.stringify(await wb.statusText())}): ${e.message.split('\n')[0]}`);
    });
    const ms = Date.now() - typedAt;
    log(`${label}: ghost text ${ms} ms after the last keystroke: ${JSON.stringify(ghost)}`);
    await wb.screenshot(`${label}-ghost-text`);
    return ms;
  }

  /** The engines under code-server that appeared since `before` (pids): each must be the bundled binary on the embedded model. */
  function checkEngines(before, label) {
    const pids = enginePids(server.pid).filter((p) => !before.includes(p));
    assert.ok(pids.length > 0, `${label}: no new process named runahead-engine under code-server (pid ${server.pid})`);
    for (const pid of pids) {
      const exe = readlinkSync(`/proc/${pid}/exe`);
      const weights = mappedWeights(pid);
      log(`${label}: engine pid ${pid} runs ${exe}; maps ${weights.join(', ') || 'no weight file (copied at load)'}`);
      assert.equal(exe, bundledEngine, `${label}: engine pid ${pid} runs ${exe}, not the bundled ${bundledEngine}`);
      // The log (checkLog) says which model loaded; the maps show it where the weights stay mapped.
      assert.ok(weights.every((w) => w.startsWith(`${bundledModel}/`)), `${label}: engine pid ${pid} maps ${JSON.stringify(weights)}, not the embedded model ${bundledModel}`);
    }
    return pids;
  }

  function checkScriptNeverRan(folder, label) {
    assert.ok(!existsSync(folder.marker), `${label}: the folder's engine script ran: ${existsSync(folder.marker) ? readFileSync(folder.marker, 'utf8') : ''}`);
    const mode = statSync(folder.script).mode & 0o7777;
    assert.equal(mode.toString(8), '644', `${label}: the folder's engine script changed mode to ${mode.toString(8)}`);
  }

  /** The Runahead log names the bundled engine and embedded model, and warns once about each path setting. */
  async function checkLog(folder, mark, label) {
    const warnings = PATH_KEYS.map((k) => new RegExp(`runahead\\.${k} to ${literally(JSON.stringify(folder.values[k]))}: ignored`));
    const running = new RegExp(`engine ${literally(bundledEngine)}.* · model ${literally(bundledModel)}`);
    const text = await waitForLog(run.userData, mark, [running, ...warnings]);
    assert.ok(text, `${label}: no Runahead log says ${JSON.stringify(mark)}; logs: ${runaheadLogs(run.userData).join(', ')}`);
    assert.match(text, running, `${label}: the Runahead log does not say the bundled engine runs the embedded model:\n${text}`);
    for (const [i, w] of warnings.entries()) {
      const count = text.split('\n').filter((l) => w.test(l)).length;
      assert.equal(count, 1, `${label}: the Runahead log warns ${count} times (expected once) that runahead.${PATH_KEYS[i]} from the folder is ignored:\n${text}`);
    }
    log(`${label}: log: ${text.split('\n').filter((l) => /trusted|ignored|engine \//.test(l)).map((l) => l.replace(/^\S+ \S+ /, '')).join(' | ')}`);
  }

  /** Hovers the Runahead status item; its tooltip must name the bundled engine binary. */
  async function checkHover(label) {
    await wb.page.locator('.part.statusbar .statusbar-item[id^="runahead."]').first().hover();
    const hover = wb.page.locator('.monaco-hover, .workbench-hover').filter({ hasText: 'Engine binary' }).first();
    await hover.waitFor({ timeout: 10_000 });
    await wb.screenshot(`${label}-hover`);
    const text = (await hover.textContent()).replace(/\u00a0/g, ' ');
    assert.ok(text.includes(bundledEngine), `${label}: the status bar hover does not name the bundled engine ${bundledEngine}: ${JSON.stringify(text)}`);
    await wb.page.mouse.move(640, 300);
  }

  it('untrusted (Restricted Mode): the folder\'s engine never runs, the bundled one completes', async function () {
    this.timeout(420_000);
    const folder = hostileFolder(join(run.dir, 'cloned-untrusted'), join(run.dir, 'ENGINE-RAN-untrusted'));
    await openFolder(folder, "No, I don't trust the authors", 'untrusted');
    const restricted = wb.page.locator('.part.statusbar .statusbar-item').filter({ hasText: 'Restricted Mode' });
    await restricted.first().waitFor({ timeout: 30_000 });
    await wb.screenshot('untrusted-restricted-mode');
    log(`untrusted: status bar shows ${JSON.stringify((await restricted.first().textContent()).trim())}`);

    ghostMs.untrusted = await ghostText('untrusted');
    checkEngines([], 'untrusted');
    checkScriptNeverRan(folder, 'untrusted');
    await checkLog(folder, 'not trusted (Restricted Mode)', 'untrusted');
    await checkHover('untrusted');
  });

  it('trusted: the folder\'s engine still never runs (user settings only), the bundled one completes', async function () {
    this.timeout(420_000);
    const before = enginePids(server.pid);
    const folder = hostileFolder(join(run.dir, 'cloned-trusted'), join(run.dir, 'ENGINE-RAN-trusted'));
    const url = await openFolder(folder, 'Yes, I trust the authors', 'trusted');
    // The window takes the grant in (the extension logs it) before the reload, which otherwise could
    // come before VS Code has stored the trust (seen once in CI: asked again after the reload).
    await waitForLog(run.userData, 'workspace trusted;', [/workspace trusted;/]);
    await sleep(1000);
    // Trust was granted after the extension started; a reload starts it in a window trusted from the outset.
    await wb.goto(url);
    await sleep(2000);
    const dialogs = wb.page.locator('.monaco-dialog-box');
    assert.equal(await dialogs.count(), 0, `trusted: VS Code asked about trust again after the reload: ${JSON.stringify(await dialogs.allTextContents())}`);
    assert.equal(await wb.page.locator('.part.statusbar .statusbar-item').filter({ hasText: 'Restricted Mode' }).count(), 0, 'trusted: the status bar still shows Restricted Mode');
    await wb.screenshot('trusted-opened');

    ghostMs.trusted = await ghostText('trusted');
    checkEngines(before, 'trusted');
    checkScriptNeverRan(folder, 'trusted');
    await checkLog(folder, 'workspace trusted;', 'trusted');
  });
});
