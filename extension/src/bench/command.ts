// "Runahead: Run Benchmark": pick workloads and configurations, run the
// benchmark in the language server (runahead/benchmark) under a progress
// notification with cancel and an ETA, then show the report (panel.ts).
// llama.cpp as a peer is optional here: node-llama-cpp installed into the
// extension's storage on request (a terminal runs npm), detected there.
import * as path from 'node:path';
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import type { BenchmarkRequest, BenchmarkResponse } from '../../../server/src/bench/lsp';
import type { Configuration, Progress, Workload } from '../../../server/src/bench/benchmark';
import { findPeer, peerInstallCommand } from '../../../server/src/bench/peer';
import { showBenchmark } from './panel';

const workloadItems: { id: Workload; label: string; detail: string }[] = [
  { id: 'fim', label: 'Your code', detail: 'Fill-in-the-middle tasks cut from this workspace at realistic cursors (bundled samples when it is empty)' },
  { id: 'typing', label: 'Typing replay', detail: 'A file typed key by key through debounce, cache and prefetch: keystroke to ghost text' },
  { id: 'agent', label: 'Long generation', detail: 'Left-to-right generation, as agent edits need' },
  { id: 'synthetic', label: 'Synthetic repetitive prompts', detail: 'Reported apart: they flatter speculation' },
];
const configurationItems: Configuration[] = ['off', 'lookup', 'mtp', 'draft', 'auto', 'remote'];

/** What the command may be given instead of asking (tests, keybindings). */
export interface BenchmarkArgs {
  workloads?: Workload[];
  configurations?: Configuration[];
  quick?: boolean;
  tasks?: number;
}

export function registerBenchmark(context: vscode.ExtensionContext, client: LanguageClient): void {
  context.subscriptions.push(vscode.commands.registerCommand('runahead.runBenchmark', (args?: BenchmarkArgs) => runBenchmark(context, client, args)));
}

async function pick(args: BenchmarkArgs | undefined, peerBase: string): Promise<BenchmarkArgs | undefined> {
  if (args?.workloads && args.configurations) return args;
  const w = await vscode.window.showQuickPick(workloadItems.map((x) => ({ ...x, picked: true })), { canPickMany: true, title: 'Runahead benchmark: workloads' });
  if (!w?.length) return undefined;
  const peer = findPeer(peerBase) ? 'llama.cpp peer: installed' : 'llama.cpp peer: not installed (pick to install node-llama-cpp into the extension storage)';
  const c = await vscode.window.showQuickPick(
    [...configurationItems.map((id) => ({ label: id, picked: id !== 'remote', description: id === 'remote' ? 'runahead.remote.url' : 'speculation' })), { label: peer, picked: false, description: 'peer' }],
    { canPickMany: true, title: 'Runahead benchmark: configurations' },
  );
  if (!c?.length) return undefined;
  if (c.some((x) => x.description === 'peer') && !findPeer(peerBase)) {
    const terminal = vscode.window.createTerminal('Runahead: install llama.cpp peer');
    terminal.show();
    terminal.sendText(peerInstallCommand(peerBase));
    void vscode.window.showInformationMessage('Installing node-llama-cpp for the llama.cpp peer in the terminal; run the benchmark again when it is done.');
  }
  const quick = await vscode.window.showQuickPick(['Quick (a few minutes)', 'Full'], { title: 'Runahead benchmark: length' });
  if (!quick) return undefined;
  return { workloads: w.map((x) => x.id), configurations: c.filter((x) => x.description !== 'peer').map((x) => x.label as Configuration), quick: quick.startsWith('Quick') };
}

async function runBenchmark(context: vscode.ExtensionContext, client: LanguageClient, given?: BenchmarkArgs): Promise<BenchmarkResponse | undefined> {
  const storage = context.globalStorageUri.fsPath;
  const peerBase = path.join(storage, 'llama');
  const args = await pick(given, peerBase);
  if (!args) return undefined;
  const exclude = Object.entries(vscode.workspace.getConfiguration('files').get<Record<string, boolean>>('exclude') ?? {}).filter(([, on]) => on === true).map(([glob]) => glob);
  const request: BenchmarkRequest = { ...args, exclude, peerBase, cacheDir: path.join(storage, 'bench') };
  const response = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: 'Runahead benchmark', cancellable: true },
    async (progress, token) => {
      let reported = 0;
      const sub = client.onNotification('runahead/benchmarkProgress', (p: Progress) => {
        const now = Math.floor((100 * p.done) / Math.max(1, p.total));
        const eta = p.eta_s === undefined ? '' : ` — about ${p.eta_s < 90 ? `${Math.round(p.eta_s)} s` : `${Math.round(p.eta_s / 60)} min`} left`;
        progress.report({ message: `${p.message}${eta}`, increment: now - reported });
        reported = now;
      });
      try {
        return await client.sendRequest<BenchmarkResponse>('runahead/benchmark', request, token);
      } catch (err) {
        if (token.isCancellationRequested) return undefined;
        void vscode.window.showErrorMessage(`Runahead benchmark failed: ${err instanceof Error ? err.message : String(err)}`);
        return undefined;
      } finally {
        sub.dispose();
      }
    },
  );
  if (response) showBenchmark(context, response);
  return response;
}
