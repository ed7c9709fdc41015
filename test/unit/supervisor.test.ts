// The engine supervisor against a fake engine (fakes/fake-engine.mjs) that can
// crash, hang or speak the wrong protocol; the real engine is exercised by the
// integration tests.
import { strict as assert } from 'node:assert';
import { chmodSync, copyFileSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EngineSupervisor, defaultTiming, type EngineState, type SupervisorTiming } from '../../server/src/engine/supervisor';
import { fakeEngine, settingsWith, sleep, until } from './helpers';

const fast: SupervisorTiming = { helloTimeoutMs: 2000, pingIntervalMs: 100, pingTimeoutMs: 300, pingOverdueMs: 150, backoffMs: [20, 40, 80], healthyMs: 10_000 };

describe('engine supervisor', function () {
  this.timeout(15000);
  let sup: EngineSupervisor;
  let states: EngineState[];
  const saved = { ...process.env };

  function start(env: Record<string, string> = {}, patch = {}) {
    Object.assign(process.env, env);
    sup = new EngineSupervisor(() => undefined, fast);
    states = [];
    sup.on('status', (s) => states.push(s.state));
    sup.configure(settingsWith(patch));
  }

  afterEach(async () => {
    await sup?.stop();
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
  });

  it('starts, checks the protocol, loads the model with progress and becomes ready', async () => {
    start();
    assert.ok(await sup.ready(5000));
    assert.equal(sup.status.state, 'ready');
    assert.equal(sup.status.engine, 'fake-engine 0.0.0');
    assert.ok(states.includes('starting') && states.includes('loading'));
    assert.equal(sup.loadReport?.backend, 'cpu');
  });

  it('refuses an engine that speaks another protocol version', async () => {
    start({ FAKE_PROTOCOL: '2' });
    await until(() => sup.status.state === 'error');
    assert.match(sup.status.message, /protocol 2/);
    assert.equal(await sup.ready(100), undefined);
  });

  it('reports a missing engine binary by path, with what to do', async () => {
    start({}, { enginePath: '/nonexistent/runahead-engine' });
    await until(() => sup.status.state === 'error');
    assert.match(sup.status.message, /no engine binary at \/nonexistent\/runahead-engine/);
  });

  it('reports a model the engine cannot load, without retrying', async () => {
    start({ FAKE_LOAD_ERROR: 'model_error' });
    await until(() => sup.status.state === 'error');
    assert.match(sup.status.message, /model_error/);
    assert.equal(sup.status.restarts, 0);
  });

  it('restarts an engine killed with SIGKILL and is ready again quickly', async () => {
    start();
    const first = await sup.ready(5000);
    const t0 = Date.now();
    first!.kill('SIGKILL');
    await until(() => sup.status.state === 'restarting', 2000, 'restarting');
    const second = await sup.ready(5000);
    assert.ok(second && second !== first);
    assert.ok(Date.now() - t0 < 2000, `ready again after ${Date.now() - t0} ms`);
    assert.equal(sup.status.restarts, 1);
  });

  it('kills and restarts an engine that stops answering pings', async () => {
    start({ FAKE_HANG_AFTER_MS: '300' });
    const first = await sup.ready(5000);
    await until(() => sup.status.restarts >= 1, 5000, 'a restart after the hang');
    assert.equal(first!.alive, false);
    assert.notEqual(sup.status.state, 'error');
  });

  it('keeps retrying a crash loop, with delays that grow to a cap, saying why and when', async () => {
    start({ FAKE_EXIT_AFTER_LOAD: '1' });
    const seen: { restarts: number; delay: number; message: string }[] = [];
    sup.on('status', (s) => {
      if (s.state === 'restarting' && s.retryAt && s.lastRestart) seen.push({ restarts: s.restarts, delay: Date.parse(s.retryAt) - Date.parse(s.lastRestart.at), message: s.message });
    });
    await until(() => sup.status.restarts >= 6, 10000, 'six restarts');
    assert.ok(!states.includes('error'), `states: ${states.join(' ')}`);
    assert.match(seen[seen.length - 1].message, /exited with code 3; restart \(failure \d+ in a row\) in 80 ms, at \d\d:\d\d:\d\d/);
    assert.ok(seen.every((x) => x.delay <= 80 + 5), `delays ${seen.map((x) => x.delay).join(', ')}`);
    assert.deepEqual(seen.slice(0, 3).map((x) => Math.round(x.delay / 10) * 10), [20, 40, 80]);
    delete process.env.FAKE_EXIT_AFTER_LOAD;
    assert.ok(await sup.ready(5000), 'ready again once the engine stops crashing');
  });

  it('refuses an engine that never answers hello, naming the binary', async () => {
    start({ FAKE_HANG_AFTER_MS: '0' });
    await until(() => sup.status.state === 'error', 5000);
    assert.match(sup.status.message, /fake-engine\.mjs \(from runahead\.enginePath\) did not answer hello within 2000 ms/);
    assert.equal(sup.status.restarts, 0);
  });

  it('never changes a file mode: a mode-644 engine is refused by path and setting, and stays 644', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'runahead-engine-'));
    const copy = join(dir, 'runahead-engine');
    try {
      copyFileSync(fakeEngine, copy);
      chmodSync(copy, 0o644);
      start({}, { enginePath: copy });
      await until(() => sup.status.state === 'error');
      assert.match(sup.status.message, new RegExp(`${copy} \\(from runahead\\.enginePath\\) is not executable \\(mode 644\\)`));
      assert.equal(sup.status.enginePath, copy);
      assert.equal(statSync(copy).mode & 0o777, 0o644);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a path setting with a NUL byte or a relative path, naming the setting', async () => {
    for (const [patch, re] of [
      [{ enginePath: '/etc\0/x' }, /runahead\.enginePath contains a NUL byte/],
      [{ modelPath: '/tmp/m\0' }, /runahead\.modelPath contains a NUL byte/],
      [{ draftModelPath: 'draft' }, /runahead\.draftModelPath is "draft"; expected an absolute path/],
      [{ enginePath: 'bin/engine' }, /runahead\.enginePath is "bin\/engine"; expected an absolute path/],
    ] as const) {
      start({}, patch);
      await until(() => sup.status.state === 'error');
      assert.match(sup.status.message, re);
      await sup.stop();
    }
  });

  it('sees a SIGSTOPped engine within 1.5 s and answers requests at once meanwhile', async () => {
    sup = new EngineSupervisor(() => undefined, { ...defaultTiming, backoffMs: [20] });
    states = [];
    sup.configure(settingsWith({}));
    const first = await sup.ready(5000);
    await sleep(700); // a few pings answered
    const stoppedAt = performance.now();
    process.kill(first!.pid!, 'SIGSTOP');
    await until(() => sup.pingOverdue, 1500, 'an overdue ping');
    const t0 = performance.now();
    assert.equal(await sup.ready(1000), undefined);
    assert.ok(performance.now() - t0 < 20, `ready() took ${(performance.now() - t0).toFixed(0)} ms while a ping was overdue`);
    await until(() => sup.status.restarts >= 1, 3000, 'the hang detected');
    const detectedMs = performance.now() - stoppedAt;
    assert.ok(detectedMs < 1600, `hang detected after ${detectedMs.toFixed(0)} ms`);
    assert.match(sup.status.lastRestart!.reason, /did not answer a ping within 1000 ms \(hung\)/);
    assert.ok(await sup.ready(5000), 'a new engine is ready');
  });

  it('restarts the engine and reports it when a generation fails with model_error', async () => {
    start({ FAKE_GENERATE_ERROR: 'model_error' });
    const errors: string[] = [];
    sup.on('modelError', (m: string) => errors.push(m));
    const conn = await sup.ready(5000);
    await conn!.generate([1], { max_tokens: 4 }, () => undefined).done.catch(() => undefined);
    await until(() => sup.status.restarts >= 1, 3000, 'a restart');
    assert.match(errors[0], /model_error: model\.safetensors/);
    assert.match(sup.status.lastRestart!.reason, /the model broke under the engine/);
  });

  it('loads without speculation options an engine refuses, and shows degraded', async () => {
    start({ FAKE_REFUSE_OPTIONS: '1' }, { speculation: 'mtp' });
    assert.ok(await sup.ready(5000));
    assert.equal(sup.status.state, 'degraded');
    assert.ok(sup.status.warnings.some((w) => /speculation/.test(w)), sup.status.warnings.join('; '));
  });

  it('stops the engine: shutdown ends the process', async () => {
    start();
    const conn = await sup.ready(5000);
    await sup.stop();
    assert.equal(conn!.alive, false);
    assert.equal(sup.status.state, 'stopped');
  });
});
