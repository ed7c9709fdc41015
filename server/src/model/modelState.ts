// The model the server tokenizes for: which folder, its tokenizer and FIM
// builder, or why it is unusable. Reads the folder asynchronously under a time
// limit (a stalled drive cannot hold the server), drops a read overtaken by a
// newer one (the setting changed again), and watches the folder for changes.
import { EventEmitter } from 'node:events';
import { FimBuilder } from '../completion/fim';
import { withTimeout } from '../deadline';
import { locateModel, modelPathFor } from '../engine/locate';
import { FolderWatch } from './folderWatch';
import { loadModelInfo, type ModelInfo } from './modelInfo';

export interface ModelContext {
  info: ModelInfo;
  fim: FimBuilder;
}

export const MODEL_READ_TIMEOUT_MS = 30_000;

/** Emits `changed` when what it holds changes, and `folderChanged` (what changed, in words) when the folder does. */
export class ModelState extends EventEmitter {
  path: string | undefined;
  context: ModelContext | undefined;
  problem: string | undefined;
  loading = false;
  private generation = 0;
  private readonly watch = new FolderWatch((dir, what) => {
    if (dir === this.path) this.emit('folderChanged', `${what} in ${dir}`);
  });

  constructor(
    private readonly log: (level: 'info' | 'warn' | 'error', line: string) => void,
    private readonly timeoutMs = MODEL_READ_TIMEOUT_MS,
  ) {
    super();
  }

  /** Reads the model the setting names, unless it is the one already read (or `force`). */
  async load(setting: string, force = false): Promise<void> {
    const { path } = modelPathFor(setting);
    if (!force && path === this.path) return;
    const generation = ++this.generation;
    Object.assign(this, { path, context: undefined, problem: undefined, loading: true });
    this.watch.follow(path);
    this.emit('changed');
    let context: ModelContext | undefined;
    let problem: string | undefined;
    try {
      context = await withTimeout(this.read(setting), this.timeoutMs, `reading the model folder ${path}`);
    } catch (err) {
      problem = err instanceof Error ? err.message : String(err);
    }
    if (generation !== this.generation) return;
    Object.assign(this, { context, problem, loading: false });
    if (problem) this.log('error', problem);
    else this.log('info', `tokenizer of ${path}: FIM order ${context!.info.fimOrder}, repo-level context ${context!.info.repoLevel ? 'yes' : 'no'}, stop tokens [${context!.info.stopTokens.join(', ')}]`);
    this.emit('changed');
  }

  stop(): void {
    this.watch.stop();
  }

  private async read(setting: string): Promise<ModelContext> {
    const located = await locateModel(setting);
    if (located.problem) throw new Error(located.problem);
    const info = await loadModelInfo(located.path);
    return { info, fim: new FimBuilder(info.tokenizer, info.special, info.fimOrder, info.repoLevel) };
  }
}
