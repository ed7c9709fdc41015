// Drives the VS Code workbench in Chromium the way a user does: Quick Open,
// typing, Tab. Reads what the user sees from the DOM: ghost text, the status
// bar. Monaco renders lines out of DOM order, so lines are found by text.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const NBSP = /\u00a0/g;

export const chromiumArgs = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-dev-shm-usage',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

/** The Runahead status bar item: its id is `<publisher>.<name>.<item id>`, else its text names it. */
function findStatusItem() {
  const items = [...document.querySelectorAll('.part.statusbar .statusbar-item')];
  const item = items.find((el) => el.id.startsWith('runahead.')) ??
    items.find((el) => /runahead|ms\/tok/i.test(`${el.textContent} ${el.getAttribute('aria-label') ?? ''}`));
  return item ?? null;
}

/** Runs in the page before the workbench loads: records every text the Runahead item shows. */
function recordStatusTexts(findSource) {
  const find = new Function(`return (${findSource})()`);
  window.__runaheadStatus = [];
  const t0 = Date.now();
  const look = () => {
    const el = find();
    if (!el) return;
    const icons = [...el.querySelectorAll('.codicon')].map((i) => [...i.classList].find((c) => c.startsWith('codicon-') && c !== 'codicon-modifier-spin') ?? '');
    const text = `${icons.map((i) => `$(${i.replace('codicon-', '')})`).join('')} ${el.textContent}`.trim();
    const log = window.__runaheadStatus;
    if (log.length === 0 || log[log.length - 1].text !== text) log.push({ ms: Date.now() - t0, text, tooltip: el.getAttribute('aria-label') ?? '' });
  };
  new MutationObserver(look).observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
}

export class Workbench {
  constructor(page, artifacts) {
    this.page = page;
    this.artifacts = artifacts;
    this.shots = [];
    mkdirSync(artifacts, { recursive: true });
  }

  static async launch(playwright, { chromium, profileDir, artifacts, url, timeoutMs = 120_000 }) {
    const context = await playwright.chromium.launchPersistentContext(profileDir, {
      executablePath: chromium,
      headless: true,
      args: chromiumArgs,
      viewport: { width: 1280, height: 800 },
      timeout: 60_000,
    });
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(30_000);
    await page.addInitScript(`(${recordStatusTexts})(${JSON.stringify(findStatusItem.toString())})`);
    const wb = new Workbench(page, artifacts);
    wb.context = context;
    await wb.goto(url, timeoutMs);
    return wb;
  }

  /** Loads the workbench at url (e.g. another folder) and waits for its status bar. */
  async goto(url, timeoutMs = 120_000) {
    await this.page.goto(url, { timeout: timeoutMs });
    await this.page.locator('.monaco-workbench').waitFor({ timeout: timeoutMs });
    await this.page.locator('.part.statusbar').waitFor({ timeout: timeoutMs });
  }

  async close() {
    await this.context?.close().catch(() => {});
  }

  /** Runs a command from the palette by its title. */
  async runCommand(title) {
    await this.page.keyboard.press('F1');
    const input = this.page.locator('.quick-input-widget input');
    await input.waitFor();
    await input.fill(`>${title}`);
    await this.page.locator('.quick-input-widget .monaco-list-row.focused').filter({ hasText: title }).waitFor();
    await this.page.keyboard.press('Enter');
  }

  async screenshot(name) {
    const path = join(this.artifacts, `${String(this.shots.length + 1).padStart(2, '0')}-${name}.png`);
    await this.page.screenshot({ path });
    this.shots.push(path);
    return path;
  }

  /** Every distinct text the Runahead status item has shown since the page loaded. */
  statusHistory() {
    return this.page.evaluate(() => window.__runaheadStatus ?? []);
  }

  async statusItemId() {
    return this.page.evaluate(`(() => { const el = (${findStatusItem})(); return el ? el.id : null; })()`);
  }

  async statusText() {
    return this.page.evaluate(`(() => { const el = (${findStatusItem})(); return el ? el.textContent.trim() : null; })()`);
  }

  /** Waits until the status item's text matches re; returns the text. */
  async waitForStatus(re, timeoutMs) {
    const handle = await this.page.waitForFunction(
      ([find, source, flags]) => {
        const el = new Function(`return (${find})()`)();
        return el && new RegExp(source, flags).test(el.textContent) ? el.textContent.trim() : false;
      },
      [findStatusItem.toString(), re.source, re.flags],
      { timeout: timeoutMs, polling: 100 },
    );
    return handle.jsonValue();
  }

  /** Opens a workspace file with Quick Open and waits until its editor shows a line of it. */
  async openFile(name, lineText, timeoutMs = 30_000) {
    await this.page.keyboard.press('Control+P');
    const input = this.page.locator('.quick-input-widget input');
    await input.waitFor({ timeout: timeoutMs });
    await input.fill(name);
    // The list shows recent files first; Enter only once the filtered match is the focused row.
    await this.page.locator('.quick-input-widget .monaco-list-row.focused').filter({ hasText: name }).waitFor({ timeout: timeoutMs });
    await this.page.keyboard.press('Enter');
    await this.page.locator('.tabs-container .tab.active').filter({ hasText: name }).waitFor({ timeout: timeoutMs });
    await this.editorLine(lineText).waitFor({ timeout: timeoutMs });
    await this.editor().locator('.view-lines').click();
  }

  editor() {
    return this.page.locator('.editor-group-container.active .monaco-editor').first();
  }

  /** A rendered line of the active editor that contains text (spaces render as nbsp). */
  editorLine(text) {
    return this.editor().locator('.view-line').filter({ hasText: text.replace(/ /g, '\u00a0') }).first();
  }

  async type(text, delayMs = 25) {
    await this.page.keyboard.type(text, { delay: delayMs });
  }

  /**
   * Waits for ghost text in the active editor; returns { inline, block }:
   * inline — shown after the cursor on its line (.ghost-text-decoration spans),
   * block — the further lines, a view zone (.suggest-preview-text), joined by \n.
   */
  async waitForGhostText(timeoutMs) {
    const handle = await this.page.waitForFunction(
      () => {
        const editor = document.querySelector('.editor-group-container.active .monaco-editor');
        if (!editor) return false;
        const inline = [...editor.querySelectorAll('.ghost-text-decoration')].map((e) => e.textContent).join('');
        const block = [...editor.querySelectorAll('.suggest-preview-text')]
          .flatMap((zone) => [...zone.querySelectorAll('.view-line')])
          .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
          .map((l) => l.textContent)
          .join('\n');
        return inline.trim() || block.trim() ? { inline, block } : false;
      },
      undefined,
      { timeout: timeoutMs, polling: 100 },
    );
    const g = await handle.jsonValue();
    return { inline: g.inline.replace(NBSP, ' '), block: g.block.replace(NBSP, ' ') };
  }

  async save() {
    await this.page.keyboard.press('Control+S');
    await this.page.locator('.tabs-container .tab.active.dirty').waitFor({ state: 'detached', timeout: 10_000 });
  }
}
