// Runahead as a user meets it: the .vsix installed into a real VS Code
// (code-server) in headless Chromium; open files, type, see ghost text from the
// embedded model, accept it with Tab, read ms/token in the status bar, kill the
// engine and see completions come back. Screenshots: test/artifacts/e2e/.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { enginePids, installExtension, makeRunDir, repoRoot, startCodeServer, stopRun } from './codeServer.mjs';
import { prepareSuite } from './suite.mjs';
import { Workbench } from './workbench.mjs';

const artifacts = join(repoRoot, 'test', 'artifacts', 'e2e');
const GHOST_TIMEOUT_MS = Number(process.env.RUNAHEAD_E2E_GHOST_TIMEOUT_MS ?? 90_000);
const MS_PER_TOKEN = /(\d+(?:\.\d+)?)\s*ms\s*\/\s*tok/i;
const LOADING = /\$\((?:loading|sync)[^)]*\)|loading/i;
const BROKEN = /error|fail|no model|not found|missing/i;

const log = (msg) => console.log(`      ${msg}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The status texts with the time each first showed, ms/token figures folded into one entry. */
function summarize(history) {
  const seen = new Map();
  for (const h of history) {
    const key = h.text.replace(MS_PER_TOKEN, 'N ms/tok');
    if (!seen.has(key)) seen.set(key, { at: h.ms, count: 0, last: h.text });
    Object.assign(seen.get(key), { count: seen.get(key).count + 1, last: h.text });
  }
  return [...seen.entries()].map(([k, v]) => `${v.at} ms: ${JSON.stringify(v.last)}${v.count > 1 ? ` (x${v.count}, pattern ${JSON.stringify(k)})` : ''}`).join('; ');
}

describe('Runahead in a real editor (code-server + headless Chromium)', function () {
  let tools;
  let run;
  let server;
  let wb;

  before(async function () {
    this.timeout(60 * 60_000); // the first run installs Chromium, Node 24 and code-server
    const suite = prepareSuite(artifacts);
    tools = suite.tools;
    const { vsix, model } = suite;
    console.log(`[e2e] model: ${model.path}${model.isDefault ? ' (the embedded default, from the .vsix)' : ' (FIXTURE, via runahead.modelPath)'}`);
    run = makeRunDir({ settings: model.isDefault ? {} : { 'runahead.modelPath': model.path } });
    installExtension(tools, run, vsix);
    server = await startCodeServer(tools, run);
    wb = await Workbench.launch(tools.playwright, {
      chromium: tools.chromium,
      profileDir: join(run.dir, 'chromium-profile'),
      artifacts,
      url: server.url,
    });
  });

  after(async function () {
    this.timeout(60_000);
    try {
      if (wb) await wb.screenshot('final');
      if (wb) log(`status bar history: ${summarize(await wb.statusHistory())}`);
    } catch (e) {
      log(`final screenshot failed: ${e.message}`);
    }
    await stopRun({ wb, server, run, artifacts });
    if (wb) log(`screenshots: ${wb.shots.map((s) => s.slice(repoRoot.length + 1)).join(' ')}`);
  });

  /** Types `typed` (its last line is where ghost text must appear), waits for ghost text, Tab, checks the file on disk. */
  async function completeAndAccept(file, typed, label) {
    await wb.page.keyboard.press('Control+End');
    const [first, ...rest] = typed.split('\n');
    await wb.type(first);
    for (const line of rest) {
      await wb.page.keyboard.press('Enter');
      await wb.type(line);
    }
    const typedAt = Date.now();
    const ghost = await wb.waitForGhostText(GHOST_TIMEOUT_MS).catch(async (e) => {
      await wb.screenshot(`${label}-no-ghost-text`);
      throw new Error(`no ghost text in ${file} within ${GHOST_TIMEOUT_MS} ms of typing ${JSON.stringify(typed)} (status bar: ${JSON.stringify(await wb.statusText())}): ${e.message.split('\n')[0]}`);
    });
    const ms = Date.now() - typedAt;
    log(`${label}: ghost text ${ms} ms after the last keystroke: ${JSON.stringify(ghost)}`);
    await wb.screenshot(`${label}-ghost-text`);

    await wb.page.keyboard.press('Tab');
    await wb.save();
    await wb.screenshot(`${label}-accepted`);
    const text = readFileSync(join(run.workspace, file), 'utf8');
    const anchor = text.indexOf(first);
    assert.ok(anchor >= 0, `${file} on disk lacks the typed line ${JSON.stringify(first)}`);
    const last = rest.at(-1) ?? first;
    // Auto-indent may change the typed line's indentation, nothing after it.
    const typedText = last.trimStart();
    const at = text.indexOf(typedText, anchor);
    assert.ok(at >= 0, `${file} on disk lacks the typed text ${JSON.stringify(last)}`);
    const after = text.slice(at + typedText.length);
    // What the user saw, line by line (trailing blanks aside), must now follow the typed text.
    const shown = (ghost.block ? `${ghost.inline}\n${ghost.block}` : ghost.inline).split('\n').map((l) => l.trimEnd());
    const landed = after.split('\n').slice(0, shown.length).map((l) => l.trimEnd());
    assert.deepEqual(landed, shown, `Tab did not insert the ghost text after ${JSON.stringify(last)} in ${file}`);
    return { ghost, ms };
  }

  it('shows the Runahead status item: loading, then ready', async function () {
    this.timeout(240_000);
    await wb.screenshot('workbench');
    const appeared = await wb.waitForStatus(/\S/, 90_000);
    log(`status item #${await wb.statusItemId()} appeared: ${JSON.stringify(appeared)}`);
    await wb.screenshot('status-first');
    // Ready: the item stops saying it loads (and says nothing broken).
    const ready = await wb.page.waitForFunction(
      ([loading, broken]) => {
        const h = window.__runaheadStatus ?? [];
        const last = h.at(-1);
        if (!last) return false;
        if (new RegExp(broken, 'i').test(last.text)) return { broken: last.text };
        return new RegExp(loading, 'i').test(last.text) ? false : { ready: last.text };
      },
      [LOADING.source, BROKEN.source],
      { timeout: 180_000, polling: 200 },
    ).then((h) => h.jsonValue());
    const history = await wb.statusHistory();
    log(`status history: ${summarize(history)}`);
    await wb.screenshot('status-ready');
    assert.ok(!ready.broken, `the status item reports a problem: ${JSON.stringify(ready.broken)}`);
    const loadingAt = history.findIndex((h) => LOADING.test(h.text));
    const readyAt = history.findIndex((h, i) => i > loadingAt && !LOADING.test(h.text));
    assert.ok(loadingAt >= 0, `the status item never showed a loading state: ${JSON.stringify(history)}`);
    assert.ok(readyAt > loadingAt, `the status item never left the loading state: ${JSON.stringify(history)}`);
  });

  it('shows ghost text in a TypeScript file and Tab accepts it', async function () {
    this.timeout(240_000);
    await wb.openFile('example.ts', 'export function midpoint');
    await wb.screenshot('ts-opened');
    await completeAndAccept('example.ts', 'export function manhattan(a: Point, b: Point): number {\nreturn ', 'ts');
  });

  it('shows ghost text in a Python file and Tab accepts it', async function () {
    this.timeout(240_000);
    await wb.openFile('example.py', 'def factorial');
    await wb.screenshot('py-opened');
    await completeAndAccept('example.py', 'def is_even(n: int) -> bool:\nreturn ', 'py');
  });

  it('shows a real ms/token figure in the status bar after completions', async function () {
    this.timeout(60_000);
    const text = await wb.waitForStatus(MS_PER_TOKEN, 30_000);
    const msPerToken = Number(text.match(MS_PER_TOKEN)[1]);
    log(`status bar: ${JSON.stringify(text)} (${msPerToken} ms/token)`);
    await wb.page.locator('.part.statusbar').screenshot({ path: join(artifacts, 'statusbar.png') });
    assert.ok(msPerToken > 0 && msPerToken < 10_000, `implausible ms/token ${msPerToken} in ${JSON.stringify(text)}`);
  });

  it('brings completions back after the engine process is killed', async function () {
    this.timeout(300_000);
    const before = enginePids(server.pid);
    assert.ok(before.length > 0, `no process named runahead-engine under code-server (pid ${server.pid})`);
    const seenBefore = (await wb.statusHistory()).length;
    for (const pid of before) process.kill(pid, 'SIGKILL');
    log(`killed engine pid(s) ${before.join(' ')}`);
    const deadline = Date.now() + 10_000;
    while (enginePids(server.pid).some((p) => before.includes(p)) && Date.now() < deadline) await sleep(100);
    await sleep(500);
    await wb.screenshot('engine-killed');
    log(`status after the kill: ${JSON.stringify(await wb.statusText())}`);

    await wb.openFile('example.ts', 'export function midpoint');
    await wb.page.keyboard.press('Control+End');
    await wb.page.keyboard.press('Enter');
    await wb.page.keyboard.press('Enter');
    await completeAndAccept('example.ts', 'export function dot(a: Point, b: Point): number {\nreturn ', 'ts-after-kill');
    const after = enginePids(server.pid);
    log(`engine pid(s) now: ${after.join(' ')}; status: ${JSON.stringify(await wb.waitForStatus(MS_PER_TOKEN, 30_000))}`);
    assert.ok(after.length > 0 && after.every((p) => !before.includes(p)), `expected a new engine process, had ${before} and now ${after}`);
    const sinceKill = (await wb.statusHistory()).slice(seenBefore);
    assert.ok(sinceKill.some((h) => LOADING.test(h.text)), `the status bar never showed the engine restarting: ${summarize(sinceKill)}`);
  });

  it('never showed a zero or missing ms/token figure', async function () {
    const figures = (await wb.statusHistory()).filter((h) => /ms\s*\/\s*tok/i.test(h.text));
    assert.ok(figures.length > 0, 'the status bar never showed ms/tok');
    const bad = figures.filter((h) => !(Number(h.text.match(MS_PER_TOKEN)?.[1]) > 0));
    assert.deepEqual(bad.map((h) => h.text), [], `the status bar showed ${bad.length} of ${figures.length} ms/tok figures that are not a positive number`);
  });
});
