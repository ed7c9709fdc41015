// Agent features in a real editor (code-server + headless Chromium), with the
// chat fixture (Qwen2.5's chat template on random weights: the text is
// gibberish, the plumbing is real): vscode.lm.selectChatModels finds the model
// and a request streams text; VS Code's model picker lists it; Edit Selection
// with Instruction streams into a diff view, Accept applies it, Reject leaves
// the file alone; Copy API Token's token opens the local API. One code-server
// start. Screenshots: test/artifacts/e2e/chat/.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, installExtension, makeRunDir, repoRoot, startCodeServer, stopRun } from './codeServer.mjs';
import { prepareSuite } from './suite.mjs';
import { Workbench } from './workbench.mjs';

const artifacts = join(repoRoot, 'test', 'artifacts', 'e2e', 'chat');
const chatModel = join(repoRoot, 'test', 'fixtures', 'models', 'qwen2-chat-tiny');
// runahead.test.chat is not in the palette (it exists only with RUNAHEAD_E2E_CHAT): a key runs it.
const TEST_CHAT_KEY = { vscode: 'ctrl+alt+shift+f9', playwright: 'Control+Alt+Shift+F9' };
const log = (msg) => console.log(`      ${msg}`);
/** The end of an edit's stream in the log: `edit: N tokens, <finish>…` or `edit failed: <why>`. */
const EDIT_DONE = /edit: \d+ tokens[^\n]*|edit failed[^\n]*/g;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Every file under dir, recursively. */
function filesUnder(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)]));
}

describe('Runahead agent features in a real editor (chat model, edit with instruction, API token)', function () {
  let tools;
  let run;
  let server;
  let wb;
  let apiPort;
  let chatResult;

  before(async function () {
    this.timeout(60 * 60_000);
    const suite = prepareSuite(artifacts);
    tools = suite.tools;
    const { vsix } = suite;
    apiPort = await freePort();
    run = makeRunDir({
      settings: { 'runahead.modelPath': chatModel, 'chat.disableAIFeatures': false, 'runahead.api.enabled': true, 'runahead.api.port': apiPort },
    });
    chatResult = join(run.dir, 'test-chat.json');
    writeFileSync(join(run.userData, 'User', 'keybindings.json'), JSON.stringify([{ key: TEST_CHAT_KEY.vscode, command: 'runahead.test.chat' }]));
    installExtension(tools, run, vsix);
    server = await startCodeServer(tools, run, { env: { RUNAHEAD_E2E_CHAT: chatResult } });
    wb = await Workbench.launch(tools.playwright, { chromium: tools.chromium, profileDir: join(run.dir, 'chromium-profile'), artifacts, url: server.url });
    await wb.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url.replace(/\/$/, '') });
    // Ready: the item shows no loading spinner (and nothing broken).
    const ready = await wb.page
      .waitForFunction(() => {
        const last = (window.__runaheadStatus ?? []).at(-1);
        return last && !/\$\((?:loading|sync)/.test(last.text) && last.text;
      }, undefined, { timeout: 180_000, polling: 200 })
      .then((h) => h.jsonValue());
    log(`status: ${JSON.stringify(ready)}`);
    assert.doesNotMatch(ready, /error|no model/i);
  });

  after(async function () {
    this.timeout(60_000);
    await wb?.screenshot('final').catch(() => {});
    await stopRun({ wb, server, run, artifacts });
    if (wb) log(`screenshots: ${wb.shots.map((s) => s.slice(repoRoot.length + 1)).join(' ')}`);
  });

  /** The Runahead output channel's log so far. */
  const runaheadLog = () => filesUnder(join(run.userData, 'logs')).filter((p) => /Runahead\.log$/.test(p)).map((f) => readFileSync(f, 'utf8')).join('\n');

  /** Waits until the log holds more than `after` lines matching re (global); returns the last. */
  async function waitForLog(re, after, timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const all = runaheadLog().match(re) ?? [];
      if (all.length > after) return all.at(-1);
      if (Date.now() > deadline) throw new Error(`no new log line matching ${re} within ${timeoutMs / 1000}s`);
      await sleep(200);
    }
  }

  /** The diff editor's proposed side, copied as a user would (Ctrl+A, Ctrl+C): exact, unlike the rendered lines. */
  async function copyProposed() {
    await wb.page.locator('.monaco-diff-editor .editor.modified .view-lines').click();
    await wb.page.keyboard.press('Control+A');
    await wb.page.keyboard.press('Control+C');
    return wb.page.evaluate(() => navigator.clipboard.readText());
  }

  /** Selects five whole lines from `line` on and asks for an edit; resolves with the proposed file once the stream ended. */
  async function askForEdit(file, shownLine, line, instruction, label) {
    await wb.openFile(file, shownLine);
    await wb.page.keyboard.press('Control+G');
    await wb.page.keyboard.type(String(line));
    await wb.page.keyboard.press('Enter');
    for (let i = 0; i < 5; i++) await wb.page.keyboard.press('Shift+ArrowDown');
    const edits = (runaheadLog().match(EDIT_DONE) ?? []).length;
    await wb.runCommand('Runahead: Edit Selection with Instruction');
    await wb.page.locator('.quick-input-widget').filter({ hasText: 'edit the selection' }).waitFor();
    await wb.screenshot(`${label}-instruction`);
    await wb.page.locator('.quick-input-widget input').fill(instruction);
    await wb.page.keyboard.press('Enter');
    const started = Date.now();
    await wb.page.locator('.monaco-diff-editor').first().waitFor({ timeout: 30_000 });
    const done = await waitForLog(EDIT_DONE, edits, 120_000);
    const ms = Date.now() - started;
    assert.doesNotMatch(done, /edit failed/);
    // The diff shows the last text once its content provider is asked again: copy until two copies agree.
    let proposed = await copyProposed();
    for (let i = 0, prev; i < 10 && proposed !== prev; i++) {
      await sleep(300);
      [prev, proposed] = [proposed, await copyProposed()];
    }
    await wb.page.keyboard.press('Control+Home');
    log(`${label}: ${done} in ${ms} ms; proposed file ${JSON.stringify(proposed.slice(0, 300))}…`);
    await wb.screenshot(`${label}-diff`);
    return proposed;
  }

  /** Clicks a button of the diff editor's title bar by its label. */
  async function titleAction(label) {
    await wb.page.locator(`.editor-actions .action-label[aria-label^="${label}"]`).first().click();
  }

  it('vscode.lm.selectChatModels finds the model and a request streams text', async function () {
    this.timeout(120_000);
    await wb.page.locator('.part.editor').click();
    await wb.page.keyboard.press(TEST_CHAT_KEY.playwright);
    const deadline = Date.now() + 90_000;
    while (!existsSync(chatResult) && Date.now() < deadline) await sleep(200);
    assert.ok(existsSync(chatResult), 'runahead.test.chat wrote no result within 90 s');
    const r = JSON.parse(readFileSync(chatResult, 'utf8'));
    log(`selectChatModels → ${JSON.stringify(r.models)}; ${r.parts} streamed part(s), ${r.text?.length} chars: ${JSON.stringify(r.text?.slice(0, 120))}; countTokens ${r.tokens}, maxInputTokens ${r.maxInputTokens}`);
    assert.equal(r.error, undefined, `the chat request failed: ${r.error}`);
    assert.ok(r.models.length >= 1 && r.models[0].startsWith('runahead/'), `selectChatModels gave ${JSON.stringify(r.models)}`);
    assert.ok(r.text.length > 0 && r.parts > 0, 'the response streamed no text');
    assert.ok(r.tokens > 0 && r.maxInputTokens > 0, 'countTokens and maxInputTokens must be positive');
  });

  it("VS Code's chat model picker lists the model", async function () {
    this.timeout(90_000);
    await wb.runCommand('Chat: Open Chat');
    await sleep(2000);
    await wb.screenshot('chat-view');
    // The chat input's toolbar shows the chosen model; a click opens the picker's list.
    const picker = wb.page.locator('.interactive-input-part .action-item').filter({ hasText: 'qwen2-chat' }).first();
    await picker.waitFor({ timeout: 20_000 });
    await picker.click();
    const entry = wb.page.getByText('qwen2-chat-tiny (Runahead)').first();
    await entry.waitFor({ timeout: 20_000 });
    await wb.screenshot('model-picker');
    await wb.page.keyboard.press('Escape');
    await wb.page.keyboard.press('Control+Alt+B');
  });

  it('Edit Selection with Instruction: the diff streams, Accept applies the proposed text', async function () {
    this.timeout(180_000);
    const file = join(run.workspace, 'example.ts');
    const original = readFileSync(file, 'utf8');
    const proposed = await askForEdit('example.ts', 'export function distance', 8, 'rename dx and dy to deltaX and deltaY', 'edit-accept');
    assert.notEqual(proposed.trim(), original.trim(), 'the diff shows no rewrite');
    await titleAction('Accept Edit');
    await wb.page.locator('.monaco-diff-editor').waitFor({ state: 'detached', timeout: 10_000 });
    await wb.runCommand('File: Save All Files');
    await wb.page.locator('.tabs-container .tab.dirty').waitFor({ state: 'detached', timeout: 10_000 });
    const now = readFileSync(file, 'utf8');
    await wb.screenshot('edit-accepted');
    assert.notEqual(now, original, 'Accept Edit left example.ts as it was');
    assert.equal(now, proposed, 'example.ts on disk differs from what the diff proposed');
  });

  it('Edit Selection with Instruction: Reject leaves the file unchanged', async function () {
    this.timeout(180_000);
    // example.py: example.ts now holds the gibberish the first edit accepted, too long for the fixture's context.
    const file = join(run.workspace, 'example.py');
    const before = readFileSync(file, 'utf8');
    const mtime = statSync(file).mtimeMs;
    await askForEdit('example.py', 'def fibonacci', 4, 'add a docstring', 'edit-reject');
    await titleAction('Reject Edit');
    await wb.page.locator('.monaco-diff-editor').waitFor({ state: 'detached', timeout: 10_000 });
    await waitForLog(/edit rejected/g, 0, 5000);
    await sleep(500);
    assert.equal(await wb.page.locator('.tabs-container .tab.dirty').count(), 0, 'a tab is dirty after Reject Edit');
    assert.equal(readFileSync(file, 'utf8'), before, 'Reject Edit changed example.py');
    assert.equal(statSync(file).mtimeMs, mtime);
    await wb.screenshot('edit-rejected');
  });

  it('Copy API Token puts a token on the clipboard that opens the local API', async function () {
    this.timeout(60_000);
    await wb.runCommand('Runahead: Copy API Token');
    await wb.page.locator('.notifications-toasts .notification-toast').filter({ hasText: 'API token copied' }).waitFor({ timeout: 10_000 });
    await wb.screenshot('api-token-copied');
    const token = await wb.page.evaluate(() => navigator.clipboard.readText());
    assert.match(token, /^[\w-]{40,}$/, `the clipboard holds ${JSON.stringify(token)}`);
    const url = `http://127.0.0.1:${apiPort}/v1/models`;
    const denied = await fetch(url);
    const ok = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
    const body = await ok.json();
    log(`clipboard token ${token.length} chars; ${url}: ${denied.status} without it, ${ok.status} with it: ${JSON.stringify(body).slice(0, 200)}`);
    assert.equal(denied.status, 401);
    assert.equal(ok.status, 200);
    assert.ok(body.data?.length >= 1, 'the API lists no model');
  });
});
