// The VS Code side of Runahead: starts the language server, wires inline
// completions through the language client, and owns the UI (status bar,
// commands, log). No inference logic lives here.
import * as path from 'node:path';
import * as vscode from 'vscode';
import { LanguageClient, TransportKind, type LanguageClientOptions, type ServerOptions } from 'vscode-languageclient/node';
import { engineLine, metricsLine, type CompletionMetrics, type ServerStatus } from './format';
import { StatusBar } from './statusBar';
import { registerChat } from './chat';
import { REMOTE_API_KEY_NOTIFICATION, type RemoteApiKeyParams } from '../../server/src/remote/apiKey';

let client: LanguageClient | undefined;

/**
 * What runs (the engine), what is loaded (models) and where your code is sent (the remote server and its
 * headers): only the user's own settings choose them, never a workspace's.
 */
const pathKeys = ['enginePath', 'modelPath', 'draftModelPath'];
const userOnlyKeys = [...pathKeys, 'remote.url', 'remote.headers'];
const keys = ['enabled', ...pathKeys, 'backend', 'speculation', 'maxDraftTokens', 'maxTokens', 'deadlineMs', 'debounceMs', 'contextBudget', 'disabledLanguages'];
const remoteKeys = ['url', 'model', 'fimTemplate', 'fimCustom', 'stop', 'headers', 'timeoutMs'];
/** Where the remote server's API key is kept (the editor's SecretStorage, never settings.json). */
const API_KEY_SECRET = 'runahead.remote.apiKey';

/**
 * The user's (global) value of a setting, else its default. A workspace or folder value is
 * never read, so that even a VS Code that ignores `machine` scope cannot be steered by a
 * cloned repository's .vscode/settings.json.
 */
function userValue(c: vscode.WorkspaceConfiguration, key: string): unknown {
  const i = c.inspect(key);
  return i?.globalValue ?? i?.defaultValue;
}

function settings(): Record<string, unknown> {
  const c = vscode.workspace.getConfiguration('runahead');
  const value = (k: string) => (userOnlyKeys.includes(k) ? userValue(c, k) : c.get(k));
  return { ...Object.fromEntries(keys.map((k) => [k, value(k)])), remote: Object.fromEntries(remoteKeys.map((k) => [k, value(`remote.${k}`)])) };
}

/** A user-only setting that a workspace tries to set: its key, the value as JSON text, and where. */
interface IgnoredSetting {
  key: string;
  value: string;
  where: string;
}

/**
 * The user-only settings a workspace tries to set. A current VS Code drops `machine` settings
 * from workspace settings before an extension sees them, so the settings files of the folders
 * and the workspace are read; VS Code's own view shows them where it ignores that scope.
 */
async function ignoredWorkspaceSettings(): Promise<IgnoredSetting[]> {
  const found: IgnoredSetting[] = [];
  const folders = vscode.workspace.workspaceFolders ?? [];
  const files = [...folders.map((f) => vscode.Uri.joinPath(f.uri, '.vscode', 'settings.json')), ...(vscode.workspace.workspaceFile ? [vscode.workspace.workspaceFile] : [])];
  for (const file of files) {
    let text: string;
    try {
      text = new TextDecoder().decode(await vscode.workspace.fs.readFile(file));
    } catch {
      continue;
    }
    for (const key of userOnlyKeys) {
      const m = new RegExp(`"runahead\\.${key.replace('.', '\\.')}"\\s*:\\s*("(?:[^"\\\\]|\\\\.)*"|\\{[^}]*\\})`).exec(text);
      if (m) found.push({ key, value: m[1], where: file.scheme === 'file' ? file.fsPath : file.toString() });
    }
  }
  for (const key of userOnlyKeys) {
    const i = vscode.workspace.getConfiguration('runahead').inspect(key);
    if (i?.workspaceValue !== undefined) found.push({ key, value: JSON.stringify(i.workspaceValue), where: 'the workspace settings' });
    for (const f of folders) {
      const v = vscode.workspace.getConfiguration('runahead', f.uri).inspect(key)?.workspaceFolderValue;
      if (v !== undefined) found.push({ key, value: JSON.stringify(v), where: `the settings of folder ${f.name}` });
    }
  }
  return found;
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = vscode.window.createOutputChannel('Runahead', { log: true });
  const statusBar = new StatusBar();
  context.subscriptions.push(log, statusBar);
  const logTrust = () => log.info(`workspace ${vscode.workspace.isTrusted ? 'trusted' : 'not trusted (Restricted Mode)'}; runahead.${userOnlyKeys.join(', runahead.')} come from user settings only`);
  logTrust();
  context.subscriptions.push(vscode.workspace.onDidGrantWorkspaceTrust(logTrust));

  // Once per setting and value, however many places or changes show it.
  const warned = new Set<string>();
  const warnIgnoredPathSettings = async () => {
    for (const s of await ignoredWorkspaceSettings()) {
      if (warned.has(`${s.key}=${s.value}`)) continue;
      warned.add(`${s.key}=${s.value}`);
      log.warn(`${s.where} sets runahead.${s.key} to ${s.key === 'remote.headers' ? '(headers)' : s.value}: ignored, only your user settings choose the engine, the models and the remote server`);
    }
  };
  void warnIgnoredPathSettings();
  let running: string | undefined;

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

  const sendApiKey = async () => {
    const apiKey = (await context.secrets.get(API_KEY_SECRET)) ?? '';
    await client?.sendNotification(REMOTE_API_KEY_NOTIFICATION, { apiKey } satisfies RemoteApiKeyParams);
  };
  let shownProblem: string | undefined;
  context.subscriptions.push(
    client.onNotification('runahead/status', (s: ServerStatus) => {
      statusBar.setStatus(s);
      if (s.state !== 'error') shownProblem = undefined;
      else if (s.remote && s.message !== shownProblem) {
        shownProblem = s.message;
        void remoteProblemNotice(s);
      }
      const line = engineLine(s);
      if (line && line !== running) log.info(line);
      running = line ?? running;
      if (s.state === 'error') log.error(`status: ${s.message}`);
      else if (s.state === 'restarting' || s.state === 'degraded') log.warn(`status ${s.state}: ${s.message}`);
    }),
    client.onNotification('runahead/metrics', (m: CompletionMetrics) => {
      statusBar.setMetrics(m);
      log.info(metricsLine(m));
    }),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (!e.affectsConfiguration('runahead')) return;
      void client?.sendNotification('workspace/didChangeConfiguration', { settings: { runahead: settings() } });
      void warnIgnoredPathSettings();
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
    vscode.commands.registerCommand('runahead.setRemoteApiKey', async () => {
      const key = await vscode.window.showInputBox({
        title: 'Runahead: API key of the remote server',
        prompt: 'Kept in the editor\'s secret storage and sent as "Authorization: Bearer …". Empty removes it.',
        password: true,
        ignoreFocusOut: true,
      });
      if (key === undefined) return;
      if (key.trim()) await context.secrets.store(API_KEY_SECRET, key.trim());
      else await context.secrets.delete(API_KEY_SECRET);
      log.info(key.trim() ? 'remote API key set' : 'remote API key removed');
    }),
    // Set here or in another window: the server gets the new key either way.
    context.secrets.onDidChange((e) => {
      if (e.key === API_KEY_SECRET) void sendApiKey();
    }),
  );
  await client.start();
  registerChat(context, client, log);
  await sendApiKey();
}

/** A remote server's problem (wrong URL, refused connection, key, model, endpoint) as a notification with the way out. */
async function remoteProblemNotice(s: ServerStatus): Promise<void> {
  const actions = s.remote?.problem === 'auth' ? ['Set API Key', 'Open Settings'] : ['Open Settings'];
  const pick = await vscode.window.showErrorMessage(`Runahead: ${s.message}`, ...actions);
  if (pick === 'Set API Key') await vscode.commands.executeCommand('runahead.setRemoteApiKey');
  else if (pick === 'Open Settings') await vscode.commands.executeCommand('workbench.action.openSettings', s.remote?.problem === 'auth' ? 'runahead.remote.headers' : 'runahead.remote');
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
    { label: '$(key) Set remote API key…', command: 'runahead.setRemoteApiKey' },
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
