// Bad model folders (badModels/cases.ts), each made from a good fixture at test
// time, driven through the engine and through the server. Every one must be
// refused without a crash or a hang, with an error that names the file (and
// the field or tensor), in bounded memory, and shown as the server's status.
//
// Memory bound: the engine's peak resident memory (VmHWM) stays under twice the
// model's bytes on disk plus 64 MiB for the binary itself (the good fixture
// loads and generates in about 6 MiB).
import { strict as assert } from 'node:assert';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { engineBinary, repoRoot } from './lspClient';
import { cases, type BadModelCase } from './badModels/cases';
import { applySteps } from './badModels/mutations';
import { driveEngine, driveServer, type EngineOutcome, type Limits, type ServerOutcome } from './badModels/drive';

const MiB = 2 ** 20;
const caseMs = 10_000;
const engineLimits: Limits = { answerMs: 5000, killAboveBytes: 512 * MiB };
const serverLimits: Limits = { answerMs: 8000, killAboveBytes: 1024 * MiB };
const parallel = 4;
const fixtures = join(repoRoot, 'test', 'fixtures', 'models');

function folderBytes(dir: string): number {
  return readdirSync(dir).reduce((sum, f) => sum + statSync(join(dir, f)).size, 0);
}

/** Runs the tasks, at most `n` at a time. */
async function pool(tasks: (() => Promise<void>)[], n: number): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) await tasks[next++]();
  };
  await Promise.all(Array.from({ length: n }, worker));
}

const tail = (text: string) => text.trim().split('\n').slice(-5).join('\n');

function engineBrief({ stderr, ...rest }: EngineOutcome): string {
  return `${JSON.stringify(rest)}\n${tail(stderr)}`;
}

function serverBrief(o: ServerOutcome): string {
  return `${JSON.stringify({ status: o.status ?? o.last, problems: o.problems, ms: o.ms })}\n${tail(o.logs)}`;
}

describe('bad models: refused fast, named, in bounded memory, without a crash', function () {
  this.timeout(60_000);
  let root = '';
  const engine = new Map<string, EngineOutcome>();
  const server = new Map<string, ServerOutcome>();
  const bound = new Map<string, number>();

  before(async function () {
    this.timeout(170_000);
    if (!existsSync(engineBinary)) throw new Error(`no engine at ${engineBinary}: run node engine/setup.mjs`);
    root = mkdtempSync(join(tmpdir(), 'runahead-bad-models-'));
    const tasks: (() => Promise<void>)[] = [];
    cases.forEach((c, i) => {
      const fixture = join(fixtures, c.model ?? 'qwen2-tied-bf16');
      // <root>/<i>/model: the folder above is the case's own, for files "outside the folder".
      const dir = join(root, String(i), 'model');
      mkdirSync(join(root, String(i)));
      cpSync(fixture, dir, { recursive: true });
      applySteps(dir, c.steps ?? []);
      const model = dir + (c.path ?? '');
      bound.set(c.name, 2 * folderBytes(fixture) + 64 * MiB);
      tasks.push(async () => void engine.set(c.name, await driveEngine(model, { backend: 'cpu', threads: 1, ...c.options }, engineLimits)));
      if (c.server !== false) tasks.push(async () => void server.set(c.name, await driveServer(model, join(root, String(i)), serverLimits, { ...process.env, RUNAHEAD_THREADS: '1' })));
    });
    await pool(tasks, parallel);
  });

  after(() => root && rmSync(root, { recursive: true, force: true }));

  it(`covers at least 60 kinds of bad model (${cases.length})`, () => {
    assert.ok(cases.length >= 60, `${cases.length} cases`);
    assert.equal(new Set(cases.map((c) => c.name)).size, cases.length, 'case names are unique');
  });

  for (const c of cases) {
    describe(c.name, () => {
      it(c.expect.capped ? 'engine: loads capped with a warning naming the option, alive after, in bounded memory' : 'engine: an error naming the file and field, alive after, in bounded memory', () => checkEngine(c, engine.get(c.name), bound.get(c.name)!));
      if (c.server !== false) it('server: status error naming the file', () => checkServer(c, server.get(c.name)));
    });
  }
});

function checkEngine(c: BadModelCase, o: EngineOutcome | undefined, boundBytes: number): void {
  assert.ok(o, 'not run');
  const why = engineBrief(o);
  assert.deepEqual(o.problems, [], `hang, crash or runaway memory: ${why}`);
  assert.ok(o.final, `no final message: ${why}`);
  if (c.expect.capped) {
    assert.ok(o.report?.warnings?.some((w) => w.includes(c.expect.names)), `no load warning names ${c.expect.names}: ${why}`);
    assert.equal(o.final.type, 'done', `a generation after the capped load did not complete: ${why}`);
  } else {
    assert.equal(o.final.type, 'error', `the bad model was not refused (final ${o.final.type}): ${why}`);
    assert.match(o.final.code ?? '', new RegExp(`^(${c.expect.code ?? 'model_error'})$`), `error code: ${why}`);
    assert.ok(o.final.message?.includes(c.expect.names), `the message does not name ${c.expect.names}: ${why}`);
    if (c.expect.field) assert.match(o.final.field ?? '', new RegExp(c.expect.field), `field: ${why}`);
  }
  assert.ok(o.survived, `the engine did not answer a ping after the error: ${why}`);
  assert.ok(o.peakRssBytes !== undefined && o.peakRssBytes <= boundBytes, `peak RSS ${((o.peakRssBytes ?? NaN) / MiB).toFixed(1)} MiB, bound ${(boundBytes / MiB).toFixed(1)} MiB`);
  assert.ok(o.ms < caseMs, `${o.ms.toFixed(0)} ms, bound ${caseMs} ms`);
}

function checkServer(c: BadModelCase, o: ServerOutcome | undefined): void {
  assert.ok(o, 'not run');
  const expect = c.server || {};
  const why = serverBrief(o);
  assert.deepEqual(o.problems, [], `hang or runaway memory: ${why}`);
  assert.ok(o.status, `no status: ${why}`);
  assert.match(o.status.state, new RegExp(`^(${expect.state ?? 'error'})$`), `status: ${why}`);
  const names = expect.names ?? c.expect.names;
  assert.ok(o.status.message.includes(names), `the status does not name ${names}: ${why}`);
  // Asked again, the server still says so (another check may have rephrased it meanwhile).
  assert.match(o.asked?.state ?? '', new RegExp(`^(${expect.state ?? 'error'})$`), `runahead/status: ${JSON.stringify(o.asked)}`);
  assert.ok(o.asked?.message.includes(names), `runahead/status does not name ${names}: ${JSON.stringify(o.asked)}`);
  assert.ok(o.ms < caseMs, `${o.ms.toFixed(0)} ms, bound ${caseMs} ms`);
}
