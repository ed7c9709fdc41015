// The `runahead/benchmark` request: the benchmark in the server process, with
// `runahead/benchmarkProgress` notifications and LSP cancellation. The editor
// sends the workloads and configurations picked, its workspace folders'
// `files.exclude` globs and where node-llama-cpp is installed, if it is.
import { fileURLToPath } from 'node:url';
import { LSPErrorCodes, ResponseError, type Connection } from 'vscode-languageserver/node';
import type { Runahead } from '../runahead';
import { BenchmarkCancelled, defaultParams, runBenchmark, type BenchmarkParams, type BenchmarkResult, type Configuration, type Workload } from './benchmark';
import { workspaceFiles } from './files';
import { findPeer } from './peer';
import { renderIssue, renderMarkdown } from './report';
import type { SourceFile } from './tasks';

export const BENCHMARK_REQUEST = 'runahead/benchmark';
export const BENCHMARK_PROGRESS = 'runahead/benchmarkProgress';

export interface BenchmarkRequest {
  workloads?: Workload[];
  configurations?: Configuration[];
  quick?: boolean;
  tasks?: number;
  /** `files.exclude` globs set to true. */
  exclude?: string[];
  /** A folder whose node_modules may hold node-llama-cpp (the extension's storage). */
  peerBase?: string;
  /** Where the GGUF export goes. */
  cacheDir?: string;
}

export interface BenchmarkResponse {
  result: BenchmarkResult;
  markdown: string;
  issue: string;
}

export function registerBenchmark(connection: Connection, runahead: Runahead): void {
  connection.onRequest(BENCHMARK_REQUEST, async (req: BenchmarkRequest, token): Promise<BenchmarkResponse> => {
    const abort = new AbortController();
    token.onCancellationRequested(() => abort.abort());
    const params: BenchmarkParams = { ...defaultParams(req.quick ?? false) };
    if (req.workloads?.length) params.workloads = req.workloads;
    if (req.configurations?.length) params.configurations = req.configurations;
    if (req.tasks) params.tasks = req.tasks;
    params.peerEntry = req.peerBase ? findPeer(req.peerBase) : undefined;
    params.cacheDir = req.cacheDir;
    const files: SourceFile[] = [];
    for (const folder of runahead.workspace.folders) {
      if (folder.uri.startsWith('file:')) files.push(...(await workspaceFiles(fileURLToPath(folder.uri), req.exclude ?? [])));
    }
    try {
      const result = await runBenchmark(params, {
        settings: runahead.settings,
        log: () => undefined,
        files,
        signal: abort.signal,
        onProgress: (p) => void connection.sendNotification(BENCHMARK_PROGRESS, p),
      });
      return { result, markdown: renderMarkdown(result), issue: renderIssue(result) };
    } catch (err) {
      if (err instanceof BenchmarkCancelled) throw new ResponseError(LSPErrorCodes.RequestCancelled, err.message);
      throw err;
    }
  });
}
