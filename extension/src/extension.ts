// The VS Code side of Runahead: starts the language server, wires inline
// completions through the language client, and owns the UI (status bar,
// commands, log). No inference logic lives here.
import * as path from 'node:path';
import * as vscode from 'vscode';
import { LanguageClient, TransportKind, type LanguageClientOptions, type ServerOptions } from 'vscode-languageclient/node';
import { metricsLine, type CompletionMetrics, type ServerStatus } from './format';
import { StatusBar } from './statusBar';

let client: LanguageClient | undefined;

function settings(): Record<string, unknown> {
  const c = vscode.workspace.getConfiguration('runahead');
  const keys = ['enabled', 'modelPath', 'draftModelPath', 'enginePath', 'backend', 'speculation', 'maxDraftTokens', 'maxTokens', 'deadlineMs', 'debounceMs', 'contextBudget', 'disabledLanguages'];
  return Object.fromEntries(keys.map((k) => [k, c.get(k)]));
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = vscode.window.createOutputChannel('Runahead', { log: true });
  const statusBar = new StatusBar();
  context.subscriptions.push(log, statusBar);

  const serverModule = context.asAbsolutePath(path.join('dist', 'server.js'));
  const serverOptions: ServerOptions = {
    run: { module: serverModule, transport: TransportKind.ipc },
    debug: { module: serverModule, transport: TransportKind.ipc, options: { execArgv: ['--nolazy', '--inspect=6019'] } },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    initializationOptions: { settings: settings() },
    outputChannel: log,
  };
  client = new LanguageClient('runahead', 'Runahead', serverOptions, clientOptions);

  context.subscriptions.push(
    client.onNotification('runahead/status', (s: ServerStatus) => {
      statusBar.setStatus(s);
      if (s.state === 'error') log.error(`status: ${s.message}`);
      else if (s.state === 'restarting' || s.state === 'degraded') log.warn(`status ${s.state}: ${s.message}`);
    }),
    client.onNotification('runahead/metrics', (m: CompletionMetrics) => {
      statusBar.setMetrics(m);
      log.info(metricsLine(m));
    }),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('runahead')) void client?.sendNotification('workspace/didChangeConfiguration', { settings: { runahead: settings() } });
    }),
    vscode.commands.registerCommand('runahead.showMenu', showMenu),
    vscode.commands.registerCommand('runahead.toggle', toggle),
    vscode.commands.registerCommand('runahead.restartEngine', async () => {
      log.info('restarting the engine');
      const s = await client?.sendRequest<ServerStatus>('runahead/restartEngine');
      if (s) statusBar.setStatus(s);
    }),
    vscode.commands.registerCommand('runahead.showLog', () => log.show()),
    vscode.commands.registerCommand('runahead.selectModel', selectModel),
  );
  await client.start();
}

async function toggle(): Promise<void> {
  const c = vscode.workspace.getConfiguration('runahead');
  await c.update('enabled', !c.get<boolean>('enabled', true), vscode.ConfigurationTarget.Global);
}

async function selectModel(): Promise<void> {
  const config = vscode.workspace.getConfiguration('runahead');
  const current = config.get<string>('modelPath', '');
  const pick = await vscode.window.showQuickPick(
    [
      { label: '$(package) Embedded model', description: current ? '' : 'current', path: '' },
      ...(current ? [{ label: `$(folder) ${path.basename(current)}`, description: `current: ${current}`, path: current }] : []),
      { label: '$(folder-opened) Choose a model folder…', description: 'a Hugging Face folder: config.json, *.safetensors, tokenizer.json', path: undefined },
    ],
    { title: 'Runahead: model' },
  );
  if (!pick) return;
  let chosen = pick.path;
  if (chosen === undefined) {
    const folder = await vscode.window.showOpenDialog({ canSelectFolders: true, canSelectFiles: false, openLabel: 'Use this model', title: 'Runahead: a Hugging Face model folder' });
    if (!folder?.[0]) return;
    chosen = folder[0].fsPath;
  }
  if (chosen !== current) await config.update('modelPath', chosen, vscode.ConfigurationTarget.Global);
}

async function showMenu(): Promise<void> {
  const enabled = vscode.workspace.getConfiguration('runahead').get<boolean>('enabled', true);
  const items: (vscode.QuickPickItem & { command: string })[] = [
    { label: enabled ? '$(circle-slash) Disable completions' : '$(check) Enable completions', command: 'runahead.toggle' },
    { label: '$(debug-restart) Restart engine', command: 'runahead.restartEngine' },
    { label: '$(output) Show log', command: 'runahead.showLog' },
    { label: '$(folder-opened) Select model…', command: 'runahead.selectModel' },
    { label: '$(settings-gear) Settings', command: 'workbench.action.openSettings' },
  ];
  const pick = await vscode.window.showQuickPick(items, { title: 'Runahead' });
  if (!pick) return;
  if (pick.command === 'workbench.action.openSettings') await vscode.commands.executeCommand(pick.command, 'runahead');
  else await vscode.commands.executeCommand(pick.command);
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
