// `Runahead: Select Model`: the models on this machine (with size,
// quantization and expected ms/token; ones Runahead cannot load are shown with
// the reason), the embedded demo, a file or folder, and the curated FIM models
// to download (with size, expected ms/token here and licence). It writes runahead.modelPath to the user's
// settings (machine scope: in a remote window that is the Remote tab).
import * as path from 'node:path';
import * as vscode from 'vscode';
import { catalog, copyBandwidth, expectedMsPerToken, folderName, stepBandwidth, type CatalogModel } from '../../server/src/models/catalog';
import { defaultRoots, formatBytes, weightBytes } from '../../server/src/models/discover';
import { DownloadError, downloadModel } from '../../server/src/models/download';
import { localModels, type LocalModel } from '../../server/src/models/localModels';
import type { CompletionMetrics, ServerStatus } from './format';

const BANDWIDTH_KEY = 'runahead.copyBandwidth';

type Item = vscode.QuickPickItem & { action?: { kind: 'path'; path: string } | { kind: 'unsupported'; name: string; problem: string } | { kind: 'download'; model: CatalogModel } | { kind: 'browse' } };

/** What the picker needs from the running extension. */
export interface ModelContext {
  context: vscode.ExtensionContext;
  status: () => ServerStatus | undefined;
  lastEngine: () => CompletionMetrics | undefined;
  log: vscode.LogOutputChannel;
}

export function downloadRoot(context: vscode.ExtensionContext): string {
  return path.join(context.globalStorageUri.fsPath, 'models');
}

/** Bytes per ms a model step reads here: from the loaded model's last completion, else a buffer copy measured once. */
function bandwidth(mc: ModelContext): { bytesPerMs: number; measured: boolean } {
  const s = mc.status();
  const m = mc.lastEngine();
  const loaded = s?.model ? weightBytes(s.model) : 0;
  const fromEngine = m?.decodeMsPerToken ? stepBandwidth(loaded, m.decodeMsPerToken, m.acceptedPerStep ?? 1) : undefined;
  if (fromEngine) return { bytesPerMs: fromEngine, measured: true };
  let copy = mc.context.globalState.get<number>(BANDWIDTH_KEY);
  if (!copy) {
    copy = copyBandwidth();
    void mc.context.globalState.update(BANDWIDTH_KEY, copy);
  }
  return { bytesPerMs: copy, measured: false };
}

function speed(bytes: number, bw: { bytesPerMs: number; measured: boolean }): string {
  const ms = expectedMsPerToken(bytes, bw.bytesPerMs);
  return `≈ ${ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms/token here${bw.measured ? '' : ' (estimate)'}`;
}

export function foundItem(m: LocalModel, current: string, bw: { bytesPerMs: number; measured: boolean }): Item {
  if (m.problem) {
    const facts = [`cannot load: ${m.problem}`, m.quantization, formatBytes(m.bytes)].filter(Boolean).join(' · ');
    return { label: `$(circle-slash) ${m.name}`, description: facts, detail: `${m.from}: ${m.path}`, action: { kind: 'unsupported', name: m.name, problem: m.problem } };
  }
  const facts = [m.architecture, m.quantization, formatBytes(m.bytes), speed(m.bytes, bw)].filter(Boolean).join(' · ');
  return { label: `$(database) ${m.name}`, description: `${m.path === current ? 'current · ' : ''}${facts}`, detail: `${m.from}: ${m.path}`, action: { kind: 'path', path: m.path } };
}

export function catalogItem(m: CatalogModel, bw: { bytesPerMs: number; measured: boolean }): Item {
  const gguf = m.format === 'gguf';
  const facts = [gguf ? 'GGUF' : 'safetensors', m.quantization, formatBytes(m.bytes), speed(m.bytes, bw), m.licence].filter(Boolean).join(' · ');
  return { label: `$(cloud-download) ${m.label}${gguf ? ` ${m.quantization}` : ''}`, description: facts, detail: `download from huggingface.co/${m.repo}${m.file ? ` (${m.file})` : ''}`, action: { kind: 'download', model: m } };
}

export async function selectModel(mc: ModelContext): Promise<void> {
  const config = vscode.workspace.getConfiguration('runahead');
  const current = config.inspect<string>('modelPath')?.globalValue ?? '';
  const bw = bandwidth(mc);
  const found = await vscode.window.withProgress({ location: vscode.ProgressLocation.Window, title: 'Runahead: looking for models on this machine' }, () =>
    localModels({ ...defaultRoots(), downloaded: downloadRoot(mc.context) }),
  );
  const items: Item[] = [
    { label: 'On this machine', kind: vscode.QuickPickItemKind.Separator },
    ...found.map((m) => foundItem(m, current, bw)),
    { label: '$(package) Runahead demo model (embedded)', description: `${current ? '' : 'current · '}a small demo: shows that completion works, not for real work`, action: { kind: 'path', path: '' } },
    { label: '$(folder-opened) Choose a file or folder…', description: 'a Hugging Face model folder (config.json, *.safetensors, tokenizer.json) or a GGUF file', action: { kind: 'browse' } },
    { label: 'Download from Hugging Face', kind: vscode.QuickPickItemKind.Separator },
    ...catalog.map((m) => catalogItem(m, bw)),
  ];
  const pick = await vscode.window.showQuickPick(items, { title: 'Runahead: choose the model that completes your code', matchOnDescription: true, matchOnDetail: true });
  const action = pick?.action;
  if (!action) return;
  if (action.kind === 'unsupported') {
    void vscode.window.showInformationMessage(`Runahead cannot load ${action.name}: ${action.problem}.`);
    return;
  }
  let chosen: string | undefined;
  if (action.kind === 'browse') {
    const uri = await vscode.window.showOpenDialog({ canSelectFolders: true, canSelectFiles: true, filters: { 'GGUF model': ['gguf'] }, openLabel: 'Use this model', title: 'Runahead: a model folder or GGUF file' });
    chosen = uri?.[0]?.fsPath;
  } else if (action.kind === 'path') {
    chosen = action.path;
  } else chosen = await download(mc, action.model);
  if (chosen === undefined || chosen === current) return;
  await config.update('modelPath', chosen, vscode.ConfigurationTarget.Global);
  mc.log.info(`model set to ${chosen || 'the embedded demo model'}`);
}

/** Downloads a catalog model with progress in a notification; returns its path, or undefined when cancelled or failed. */
async function download(mc: ModelContext, model: CatalogModel): Promise<string | undefined> {
  const dest = path.join(downloadRoot(mc.context), folderName(model.repo) + (model.file ? `--${model.quantization}` : ''));
  const title = `Downloading ${model.label}${model.format === 'gguf' ? ` ${model.quantization}` : ''}`;
  try {
    const folder = await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title, cancellable: true }, async (progress, token) => {
      const abort = new AbortController();
      token.onCancellationRequested(() => abort.abort());
      let shown = 0;
      return downloadModel({
        repo: model.repo,
        dest,
        files: model.file ? [model.file] : undefined,
        signal: abort.signal,
        onProgress: (done, total) => {
          const pct = total > 0 ? (100 * done) / total : 0;
          if (pct - shown < 1 && done < total) return;
          progress.report({ increment: pct - shown, message: `${formatBytes(done)} of ${formatBytes(total)}` });
          shown = pct;
        },
      });
    });
    mc.log.info(`downloaded ${model.repo} to ${folder}`);
    return model.file ? path.join(folder, model.file) : folder;
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    mc.log.error(`download of ${model.repo}: ${message}`);
    if (err instanceof DownloadError && err.kind === 'cancelled') return undefined;
    const again = await vscode.window.showErrorMessage(`Runahead: ${message}`, 'Try Again', 'Show Log');
    if (again === 'Try Again') return download(mc, model);
    if (again === 'Show Log') mc.log.show();
    return undefined;
  }
}
