// "Runahead: Run Benchmark" as a user runs it (code-server + headless Chromium):
// picked from the palette, a quick selection in its pickers (the FIM workload,
// speculation off and lookup, no peer), the webview's charts and tables once it
// is ready, its Export JSON through the save dialog, and every number of the
// tables equal to that JSON. The webview must log no CSP violation or error.
// One code-server start. Screenshots: test/artifacts/e2e/benchmark/.
import assert from 'node:assert/strict';
import { cpSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { installExtension, makeRunDir, repoRoot, startCodeServer, stopRun } from './codeServer.mjs';
import { prepareSuite } from './suite.mjs';
import { Workbench } from './workbench.mjs';

const artifacts = join(repoRoot, 'test', 'artifacts', 'e2e', 'benchmark');
const log = (msg) => console.log(`      ${msg}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const fmt = (x) => (typeof x !== 'number' || !Number.isFinite(x) ? '–' : x.toFixed(2));
/** What a table cell should show for a JSON value: counts as integers, fractions as percentages, the rest with two decimals. */
function shown(field, value) {
  if (typeof value !== 'number') return value ?? '';
  if (['prompt_tokens_reused', 'identical_to_plain.same'].includes(field)) return String(value);
  if (['bound_fraction', 'exact_match'].includes(field)) return Number.isFinite(value) ? `${(100 * value).toFixed(0)} %` : '–';
  return fmt(value);
}

describe('Benchmark from the command palette (code-server + headless Chromium)', function () {
  let tools;
  let run;
  let server;
  let wb;
  /** What the page's frames logged: the webview's CSP violations and script errors land here. */
  const consoleErrors = [];
  const webviewMessages = [];

  before(async function () {
    this.timeout(60 * 60_000);
    const suite = prepareSuite(artifacts);
    tools = suite.tools;
    const { vsix, model } = suite;
    run = makeRunDir({ settings: model.isDefault ? {} : { 'runahead.modelPath': model.path } });
    // The sample files are below the benchmark's 400-byte minimum: one real file gives it "your code".
    cpSync(join(repoRoot, 'server', 'src', 'bench', 'stats.ts'), join(run.workspace, 'stats.ts'));
    installExtension(tools, run, vsix);
    server = await startCodeServer(tools, run);
    wb = await Workbench.launch(tools.playwright, { chromium: tools.chromium, profileDir: join(run.dir, 'chromium-profile'), artifacts, url: server.url });
    wb.page.on('console', (m) => {
      if (/webview/.test(m.location().url)) webviewMessages.push(`${m.type()}: ${m.text()}`);
      if (m.type() === 'error' && /Content.Security.Policy|Refused to|benchView|Uncaught/i.test(m.text())) consoleErrors.push(m.text());
    });
    wb.page.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e.message}`));
    await wb.waitForStatus(/ms\/tok|Runahead$/, 180_000);
  });

  after(async function () {
    this.timeout(60_000);
    await stopRun({ wb, server, run, artifacts });
    log(`console of the webview frames: ${JSON.stringify(webviewMessages)}`);
    if (wb) log(`screenshots: ${wb.shots.map((s) => s.slice(repoRoot.length + 1)).join(' ')}`);
  });

  const quickInput = () => wb.page.locator('.quick-input-widget');

  /** In a multi-select picker, leaves exactly the rows whose label is in `labels` checked, then accepts. */
  async function pickOnly(title, labels) {
    await quickInput().locator(`input[aria-label="${title}"]`).waitFor();
    const rows = quickInput().locator('.monaco-list-row');
    await rows.first().waitFor();
    for (let i = 0; i < (await rows.count()); i++) {
      const row = rows.nth(i);
      const label = (await row.locator('.label-name').first().textContent()).trim();
      const box = row.locator('[role=checkbox]');
      if (((await box.getAttribute('aria-checked')) === 'true') !== labels.includes(label)) await box.click();
    }
    await wb.screenshot(`picker-${title.split(': ').pop()}`);
    await quickInput().locator('.quick-input-action .monaco-button').filter({ hasText: 'OK' }).click();
  }

  it('runs a quick benchmark and shows charts and tables whose numbers are the exported JSON', async function () {
    this.timeout(300_000);
    await wb.runCommand('Runahead: Run Benchmark');
    await pickOnly('Runahead benchmark: workloads', ['Your code']);
    await pickOnly('Runahead benchmark: configurations', ['off', 'lookup']);
    await quickInput().locator('input[aria-label="Runahead benchmark: length"]').waitFor();
    await quickInput().locator('.monaco-list-row').filter({ hasText: 'Quick' }).click();

    const started = Date.now();
    const view = wb.page.frameLocator('iframe.webview.ready').frameLocator('iframe#active-frame');
    await view.locator('body[data-ready="true"]').waitFor({ timeout: 240_000 });
    log(`report shown ${((Date.now() - started) / 1000).toFixed(0)} s after the last pick`);
    await wb.page.keyboard.press('Escape'); // a notification can cover the charts
    await sleep(300);
    await wb.screenshot('report');

    await view.locator('table[data-workload="fim"]').scrollIntoViewIfNeeded();
    await wb.screenshot('report-tables');

    const charts = await view.locator('canvas').evaluateAll((cs) => cs.map((c) => ({ id: c.id, w: c.width, h: c.height })));
    assert.deepEqual(charts.map((c) => c.id), ['chart-ms', 'chart-accepted', 'chart-latency']);
    for (const c of charts) assert.ok(c.w > 100 && c.h > 100, `chart ${c.id} is ${c.w}×${c.h}`);

    await view.locator('#exportJson').click();
    // code-server's save dialog is VS Code's own: a path in a quick input, the workspace's runahead-benchmark.json by default.
    const path = quickInput().locator('input');
    await path.waitFor();
    await sleep(300);
    assert.match(await path.inputValue(), /runahead-benchmark\.json$/);
    await wb.page.keyboard.press('Enter');
    const file = join(run.workspace, 'runahead-benchmark.json');
    // The file appears before its last byte is written (the save goes through code-server's file service), so
    // wait until it holds a whole JSON document, for up to 10 s.
    let result;
    for (let i = 0; i < 100 && result === undefined; i++) {
      try {
        result = JSON.parse(readFileSync(file, 'utf8'));
      } catch (e) {
        if (i === 99) throw new Error(`${file} never held a whole JSON document: ${e.message}`);
        await sleep(100);
      }
    }

    const fim = result.results.find((w) => w.workload === 'fim');
    assert.deepEqual(result.results.map((w) => w.workload), ['fim']);
    assert.deepEqual(fim.configurations.map((c) => c.configuration), ['off', 'lookup']);
    assert.ok(fim.configurations.every((c) => !c.error && c.tasks > 0 && c.ms_per_token.mean > 0), JSON.stringify(fim.configurations.map((c) => [c.configuration, c.error, c.ms_per_token])));
    assert.deepEqual([result.task_source.from, result.task_source.files], ['workspace', 1]);
    assert.equal(result.identical_to_plain, true, `greedy outputs differ: ${JSON.stringify(result.mismatches)}`);

    const cells = await view.locator('table[data-workload="fim"] td[data-field]').evaluateAll((tds) => tds.map((td) => ({ config: td.dataset.config, field: td.dataset.field, text: td.textContent })));
    assert.ok(cells.length >= 2 * 12, `only ${cells.length} cells`);
    for (const { config, field, text } of cells) {
      const row = fim.configurations.find((c) => c.configuration === config);
      const value = field.split('.').reduce((o, k) => o?.[k], row);
      assert.equal(text, shown(field, value), `${config} ${field}`);
    }
    log(`${cells.length} cells equal the JSON; off ${fmt(fim.configurations[0].ms_per_token.mean)} ms/token, lookup ${fmt(fim.configurations[1].ms_per_token.mean)} ms/token`);
    assert.deepEqual(consoleErrors, []);
  });
});
