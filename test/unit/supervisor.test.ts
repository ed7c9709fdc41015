// The engine supervisor against a fake engine (fakes/fake-engine.mjs) that can
// crash, hang or speak the wrong protocol; the real engine is exercised by the
// integration tests.
import { strict as assert } from 'node:assert';
import { EngineSupervisor, type EngineState, type SupervisorTiming } from '../../server/src/engine/supervisor';
import { settingsWith, until } from './helpers';

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
  });

  it('gives up after repeated failures and says so; restart by hand resets', async () => {
    start({ FAKE_HANG_AFTER_MS: '0' });
    await until(() => sup.status.state === 'error', 10000);
    assert.match(sup.status.message, /failed 3 times/);
    delete process.env.FAKE_HANG_AFTER_MS;
    await sup.restart();
    assert.ok(await sup.ready(5000));
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
