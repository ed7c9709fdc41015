// The first hour of a user, in a real editor (code-server + headless Chromium),
// for what only the editor shows: the walkthrough opens, the status item says
// snoozed and off for a language (one click turns it on), a bad model raises one
// notification with its buttons, Alt+] shows a second suggestion. One
// code-server start. Screenshots: test/artifacts/e2e/ux/.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { installExtension, makeRunDir, repoRoot, startCodeServer, stopRun } from './codeServer.mjs';
import { prepareSuite } from './suite.mjs';
import { Workbench } from './workbench.mjs';

const artifacts = join(repoRoot, 'test', 'artifacts', 'e2e', 'ux');
const GHOST_TIMEOUT_MS = Number(process.env.RUNAHEAD_E2E_GHOST_TIMEOUT_MS ?? 90_000);
const log = (msg) => console.log(`      ${msg}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe('Runahead UX in a real editor (walkthrough, snooze, per-language, errors, Alt+])', function () {
  let tools;
  let run;
  let server;
  let wb;
  let model;

  before(async function () {
    this.timeout(60 * 60_000);
    const suite = prepareSuite(artifacts);
    tools = suite.tools;
    model = suite.model;
    const { vsix } = suite;
    run = makeRunDir({ settings: model.isDefault ? {} : { 'runahead.modelPath': model.path } });
    writeFileSync(join(run.workspace, 'notes.md'), '# Notes\n\nSome text here.\n');
    installExtension(tools, run, vsix);
    server = await startCodeServer(tools, run);
    wb = await Workbench.launch(tools.playwright, { chromium: tools.chromium, profileDir: join(run.dir, 'chromium-profile'), artifacts, url: server.url });
    await wb.waitForStatus(/ms\/tok|Runahead$/, 180_000);
  });

  after(async function () {
    this.timeout(60_000);
    await wb?.screenshot('final').catch(() => {});
    await stopRun({ wb, server, run, artifacts });
    if (wb) log(`screenshots: ${wb.shots.map((s) => s.slice(repoRoot.length + 1)).join(' ')}`);
  });

  /** Picks an entry of the Runahead menu (the status item's click). */
  async function menu(entry) {
    await wb.runCommand('Runahead: Show Menu');
    const row = wb.page.locator('.quick-input-widget .monaco-list-row').filter({ hasText: entry }).first();
    await row.waitFor();
    await row.click();
  }

  const statusLabel = () => wb.page.evaluate(() => document.querySelector('.part.statusbar .statusbar-item[id^="runahead."] a, .part.statusbar .statusbar-item[id^="runahead."]')?.getAttribute('aria-label') ?? '');

  it('opens the walkthrough from the menu', async function () {
    this.timeout(60_000);
    await menu('Get started');
    const page = wb.page.locator('.gettingStartedContainer');
    await page.filter({ hasText: 'Get started with Runahead' }).waitFor({ timeout: 30_000 });
    for (const step of ['What Runahead does', 'Pick a model', 'Try it on a sample file', 'Read the status bar', 'Measure this machine']) {
      assert.ok(await page.getByText(step).first().isVisible(), `the walkthrough lacks the step "${step}"`);
    }
    await wb.screenshot('walkthrough');
    await wb.page.keyboard.press('Control+W');
  });

  it('shows ghost text and ms/tok, then a second suggestion with Alt+]', async function () {
    this.timeout(240_000);
    await wb.openFile('example.ts', 'export function midpoint');
    await wb.page.keyboard.press('Control+End');
    await wb.type('export function scale(p: Point, k: number): Point {');
    await wb.page.keyboard.press('Enter');
    await wb.type('return ');
    const first = await wb.waitForGhostText(GHOST_TIMEOUT_MS);
    const status = await wb.waitForStatus(/ms\/tok/, 30_000);
    log(`ghost text ${JSON.stringify(first)}; status ${JSON.stringify(status)}; spoken ${JSON.stringify(await statusLabel())}`);
    const shot = await wb.screenshot('ghost-text-and-status');
    // The README's picture: one small PNG, where ImageMagick is installed (the picture is not
    // what this test checks, so a machine without it keeps the committed one).
    try {
      execFileSync('convert', [shot, '-resize', '960x', '-colors', '64', '-strip', join(repoRoot, 'media', 'screenshot.png')], { stdio: 'pipe' });
    } catch (e) {
      log(`README picture not refreshed: convert failed (${String(e.stderr ?? e.message).trim().split('\n')[0]})`);
    }
    await wb.page.keyboard.press('Alt+]');
    const shown = (g) => `${g.inline}\n${g.block}`;
    const second = await wb.page
      .waitForFunction(
        (before) => {
          const editor = document.querySelector('.editor-group-container.active .monaco-editor');
          const inline = [...(editor?.querySelectorAll('.ghost-text-decoration') ?? [])].map((e) => e.textContent).join('');
          const block = [...(editor?.querySelectorAll('.suggest-preview-text .view-line') ?? [])].map((l) => l.textContent).join('\n');
          const now = `${inline}\n${block}`.replace(/\u00a0/g, ' ');
          return now.trim() && now !== before ? now : false;
        },
        shown(first),
        { timeout: 60_000, polling: 100 },
      )
      .then((h) => h.jsonValue());
    log(`Alt+] showed: ${JSON.stringify(second)}`);
    await wb.screenshot('second-suggestion');
    await wb.page.keyboard.press('Alt+[');
    await sleep(500);
    const back = await wb.waitForGhostText(10_000);
    assert.equal(shown(back).trim(), shown(first).trim(), 'Alt+[ goes back to the first suggestion');
    await wb.page.keyboard.press('Escape');
  });

  it('says snoozed with the time left, and cancels it', async function () {
    this.timeout(60_000);
    await menu('Snooze 5 minutes');
    const text = await wb.waitForStatus(/snoozed 5 min/, 10_000);
    const label = await statusLabel();
    log(`snoozed: ${JSON.stringify(text)}; spoken ${JSON.stringify(label)}`);
    assert.match(label, /Runahead: snoozed, 5 minutes left/);
    await wb.screenshot('snoozed');
    await menu('Cancel snooze');
    await wb.waitForStatus(/ms\/tok|Runahead$/, 10_000);
  });

  it('says off for markdown, and one click on the item turns it on', async function () {
    this.timeout(60_000);
    await wb.openFile('notes.md', 'Some text here.');
    const off = await wb.waitForStatus(/off for markdown/, 10_000);
    log(`markdown: ${JSON.stringify(off)}; spoken ${JSON.stringify(await statusLabel())}`);
    await wb.screenshot('off-for-markdown');
    await wb.page.locator('.part.statusbar .statusbar-item[id^="runahead."]').first().click();
    await wb.page.waitForFunction(() => !/off for markdown/.test(document.querySelector('.part.statusbar .statusbar-item[id^="runahead."]')?.textContent ?? ''), undefined, { timeout: 10_000 });
    await wb.screenshot('on-for-markdown');
    await menu('Disable for markdown');
    await wb.waitForStatus(/off for markdown/, 10_000);
  });

  it('a bad model path raises one notification with Select Model, Open Setting and Show Log', async function () {
    this.timeout(240_000);
    const machine = join(run.userData, 'Machine', 'settings.json');
    writeFileSync(machine, JSON.stringify({ 'runahead.modelPath': join(run.dir, 'no-such-model') }, null, 2));
    // The status item's hover (the mouse rests there after the last test's click) would cover the toast.
    await wb.page.mouse.move(600, 300);
    await wb.page.keyboard.press('Escape');
    const toast = wb.page.locator('.notifications-toasts .notification-toast').filter({ hasText: 'Runahead:' }).first();
    await toast.waitFor({ timeout: 60_000 });
    const buttons = await toast.locator('.monaco-button').allTextContents();
    const status = await wb.waitForStatus(/no model|error/, 10_000);
    log(`notification: ${JSON.stringify(await toast.locator('.notification-list-item-message').textContent())}; buttons ${JSON.stringify(buttons)}; status ${JSON.stringify(status)}`);
    await wb.page.mouse.move(600, 300);
    await wb.screenshot('bad-model-notification');
    for (const b of ['Select Model', 'Open Setting', 'Show Log']) assert.ok(buttons.some((t) => t.includes(b)), `no "${b}" button: ${JSON.stringify(buttons)}`);
    await sleep(3000);
    const count = await wb.page.locator('.notifications-toasts .notification-toast').filter({ hasText: 'Runahead:' }).count();
    assert.equal(count, 1, 'one notification for one error');
    await toast.locator('.monaco-button').filter({ hasText: 'Select Model' }).click();
    await wb.page.locator('.quick-input-widget').filter({ hasText: 'Runahead demo model' }).waitFor({ timeout: 10_000 });
    await wb.screenshot('select-model');
    await wb.page.keyboard.press('Escape');
    writeFileSync(machine, JSON.stringify(model.isDefault ? {} : { 'runahead.modelPath': model.path }, null, 2));
    // Back to the embedded model; notes.md (markdown) is still the active editor.
    const back = await wb.waitForStatus(/off for markdown/, 120_000);
    log(`model restored: ${JSON.stringify(back)}`);
    // The log: the error once, then how many more times it came.
    const logs = execFileSync('find', [join(run.userData, 'logs'), '-name', 'Runahead.log'], { encoding: 'utf8' }).trim().split('\n').filter(Boolean);
    const text = logs.map((f) => readFileSync(f, 'utf8')).join('\n');
    const errorLines = text.split('\n').filter((l) => /\[error\] no model at/.test(l));
    log(`log: ${errorLines.length} error line(s); ${JSON.stringify(text.split('\n').find((l) => /came \d+ more time/.test(l))?.slice(24, 80))}`);
    assert.equal(errorLines.length, 1, `the log writes the error ${errorLines.length} times:\n${errorLines.join('\n')}`);
  });
});
