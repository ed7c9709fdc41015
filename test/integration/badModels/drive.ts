// Drives one bad model through the engine (its stdio protocol) and through the
// server (its status), with a timeout on every wait and a memory watchdog, so
// that a hang or a runaway allocation fails one case, never the suite.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { engineBinary, isAlive, TestClient, type Status } from '../lspClient';

export interface EngineMessage {
  type: string;
  id?: string;
  code?: string;
  message?: string;
  file?: string;
  field?: string;
  [key: string]: unknown;
}

export interface EngineOutcome {
  /** The final message of the load, or of the generate when the load succeeded. */
  final?: EngineMessage;
  /** The load's report, when it loaded. */
  report?: { warnings?: string[]; [key: string]: unknown };
  /** What went wrong with the process: "no answer to load within 5000 ms", "killed by SIGSEGV", ... */
  problems: string[];
  /** Answered a ping after the error, or exited with status 0. */
  survived: boolean;
  /** Peak resident memory (VmHWM) read just before shutdown; undefined when the process was gone. */
  peakRssBytes?: number;
  ms: number;
  stderr: string;
}

export interface Limits {
  /** Longest wait for any one answer. */
  answerMs: number;
  /** The watchdog kills a process whose resident memory passes this. */
  killAboveBytes: number;
}

/** A memory field of /proc/<pid>/status (VmRSS, VmHWM) in bytes; undefined once the process is gone. */
export function procMemory(pid: number, field: 'VmRSS' | 'VmHWM'): number | undefined {
  try {
    const kb = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb === undefined ? undefined : Number(kb) * 1024;
  } catch {
    return undefined;
  }
}

/** Kills `pid` when its resident memory passes `limit`; returns a stop function. */
function watchMemory(pid: number, limit: number, onKill: (rss: number) => void): () => void {
  if (!pid) return () => undefined;
  const timer = setInterval(() => {
    const rss = procMemory(pid, 'VmRSS');
    if (rss !== undefined && rss > limit) {
      onKill(rss);
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }, 25);
  return () => clearInterval(timer);
}

const MiB = 2 ** 20;

/** `p`, or a rejection with `what` after `ms`. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(what)), ms)))]).finally(() => clearTimeout(timer));
}

/** hello, load, and for a model that loads a generate; then ping, VmHWM, shutdown. */
export async function driveEngine(model: string, options: Record<string, unknown>, limits: Limits): Promise<EngineOutcome> {
  const t0 = performance.now();
  const child = spawn(engineBinary, [], { stdio: ['pipe', 'pipe', 'pipe'] });
  const problems: string[] = [];
  const messages: EngineMessage[] = [];
  const waiters = new Set<() => void>();
  let stderr = '';
  let exit: { code: number | null; signal: string | null } | undefined;
  const exitNow = () => exit; // read through a call: the exit handler sets it while we wait
  let ending = false; // set once we end the process ourselves
  child.stdin.on('error', () => undefined);
  child.stderr.on('data', (d) => (stderr = (stderr + String(d)).slice(-4000)));
  createInterface({ input: child.stdout }).on('line', (line) => {
    try {
      messages.push(JSON.parse(line));
    } catch {
      problems.push(`not a JSON line on stdout: ${line.slice(0, 200)}`);
    }
    waiters.forEach((w) => w());
  });
  const exited = new Promise<void>((resolve) => {
    const ended = (code: number | null, signal: string | null, problem?: string) => {
      if (exit) return;
      exit = { code, signal };
      if (problem) problems.push(problem);
      waiters.forEach((w) => w());
      resolve();
    };
    child.on('exit', (code, signal) => {
      if (ending || (!signal && code === 0)) ended(code, signal);
      else ended(code, signal, signal ? `engine killed by ${signal}` : `engine exited with status ${code}`);
    });
    child.on('error', (err) => ended(null, null, `engine could not start: ${err.message}`));
  });
  const stopWatch = watchMemory(child.pid ?? 0, limits.killAboveBytes, (rss) => problems.push(`engine resident memory ${(rss / MiB).toFixed(0)} MiB passed ${(limits.killAboveBytes / MiB).toFixed(0)} MiB: killed`));
  const send = (msg: object) => child.stdin.write(`${JSON.stringify(msg)}\n`);
  /** The first message matching `pred`, or undefined after the timeout or the exit. */
  const waitFor = (pred: (m: EngineMessage) => boolean, what: string, ms = limits.answerMs) =>
    new Promise<EngineMessage | undefined>((resolve) => {
      const check = () => {
        const m = messages.find(pred);
        if (m || exit) {
          waiters.delete(check);
          clearTimeout(timer);
          if (!m) problems.push(`no ${what}: the engine exited`);
          resolve(m);
        }
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        problems.push(`no ${what} within ${ms} ms`);
        resolve(undefined);
      }, ms);
      waiters.add(check);
      check();
    });
  const finalOf = (id: string) => (m: EngineMessage) => m.id === id && ['loaded', 'done', 'error'].includes(m.type);

  let final: EngineMessage | undefined;
  let report: EngineOutcome['report'];
  let survived = false;
  let peakRssBytes: number | undefined;
  try {
    send({ type: 'hello' });
    if (await waitFor((m) => m.type === 'hello', 'hello')) {
      send({ type: 'load', id: 'l', model, options });
      final = await waitFor(finalOf('l'), 'answer to load');
      if (final?.type === 'loaded') {
        report = final.report as EngineOutcome['report'];
        send({ type: 'generate', id: 'g', prompt: [1, 2, 3], params: { max_tokens: 4 } });
        final = await waitFor(finalOf('g'), 'answer to generate');
      }
    }
    if (!exit) {
      send({ type: 'ping', id: 'alive' });
      survived = (await waitFor((m) => m.type === 'pong' && m.id === 'alive', 'pong after the error', 2000)) !== undefined;
      peakRssBytes = procMemory(child.pid!, 'VmHWM');
      // A load that never answered still holds the worker: shutdown would wait for it.
      if (final) {
        ending = true;
        send({ type: 'shutdown' });
        await Promise.race([exited, new Promise((r) => setTimeout(r, 2000))]);
        const after = exitNow();
        if (!after) problems.push('did not exit within 2000 ms of shutdown');
        else if (after.code !== 0) problems.push(`exit status ${after.code ?? after.signal} after shutdown`);
      }
    } else {
      survived = exit.code === 0 && !exit.signal;
    }
  } finally {
    stopWatch();
    if (!exit) {
      ending = true;
      child.kill('SIGKILL');
    }
  }
  return { final, report, problems, survived, peakRssBytes, ms: performance.now() - t0, stderr };
}

export interface ServerOutcome {
  /** The status notification that ended the load: error, ready or degraded; undefined on a timeout. */
  status?: Status;
  /** The answer to a runahead/status request right after it. */
  asked?: Status;
  /** The last status seen, for the failure message. */
  last?: Status;
  problems: string[];
  ms: number;
  logs: string;
}

/** A server of its own with `modelPath` set; waits for the status that ends the load. */
export async function driveServer(modelPath: string, root: string, limits: Limits, env: NodeJS.ProcessEnv): Promise<ServerOutcome> {
  const t0 = performance.now();
  const problems: string[] = [];
  const client = new TestClient({ modelPath, enginePath: engineBinary, deadlineMs: 5000 }, env);
  const stopWatch = watchMemory(client.child.pid!, limits.killAboveBytes, (rss) => problems.push(`server resident memory ${(rss / MiB).toFixed(0)} MiB passed ${(limits.killAboveBytes / MiB).toFixed(0)} MiB: killed`));
  // Every engine the server started: one stuck opening a FIFO does not see its stdin close.
  const enginePids = new Set<number>();
  const notePid = () => void (client.status?.pid && enginePids.add(client.status.pid));
  const poll = setInterval(notePid, 10);
  const exited = new Promise<never>((_, reject) =>
    client.child.on('exit', (code, signal) => reject(new Error(`the server exited (${signal ?? `status ${code}`}): ${client.logs.join('').split('\n').filter((l) => l.trim()).slice(-6).join(' | ')}`))),
  );
  exited.catch(() => undefined);
  /** `p`, unless the server exits first (a later rejection of `p` is then ignored). */
  const unlessExited = <T>(p: Promise<T>) => {
    p.catch(() => undefined);
    return Promise.race([p, exited]);
  };
  let status: Status | undefined;
  let asked: Status | undefined;
  try {
    await unlessExited(within(client.initialize(root), limits.answerMs, `no answer to initialize within ${limits.answerMs} ms`));
    status = await unlessExited(client.waitStatus((s) => (notePid(), ['error', 'ready', 'degraded'].includes(s.state)), limits.answerMs));
    asked = await unlessExited(within(client.conn.sendRequest<Status>('runahead/status'), limits.answerMs, `no answer to runahead/status within ${limits.answerMs} ms`));
  } catch (err) {
    const why = err instanceof Error ? err.message.split('\n')[0] : String(err);
    problems.push(status ? `after the status: ${why}` : why);
  } finally {
    clearInterval(poll);
    stopWatch();
    if (status) await client.close();
    else {
      client.child.kill('SIGKILL');
      client.conn.dispose();
    }
    for (const pid of enginePids) if (isAlive(pid)) process.kill(pid, 'SIGKILL');
  }
  return { status, asked, last: client.status, problems, ms: performance.now() - t0, logs: client.logs.slice(-10).join('') };
}
