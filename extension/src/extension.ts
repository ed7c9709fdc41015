// The VS Code side of Runahead: starts the language server, wires inline
// completions through the language client, and owns the UI (status bar,
// commands, log). No inference logic lives here.
import * as path from 'node:path';
import * as vscode from 'vscode';
import { LanguageClient, TransportKind, type LanguageClientOptions, type ServerOptions } from 'vscode-languageclient/node';
import { engineLine, ErrorOnce, isModelProblem, measuresSpeed, metricsLine, type CompletionMetrics, type ServerStatus } from './format';
import { selectModel } from './selectModel';
import { Snooze } from './snooze';
import { StatusBar } from './statusBar';
import { registerChat } from './chat';
import { registerBenchmark } from './bench/command';
import { REMOTE_API_KEY_NOTIFICATION, type RemoteApiKeyParams } from '../../server/src/remote/apiKey';

let client: LanguageClient | undefined;

/**
 * What runs (the engine), what is loaded (models) and where your code is sent (the remote server and its
 * headers): only the user's own settings choose them, never a workspace's.
 */
const pathKeys = ['enginePath', 'modelPath', 'draftModelPath'];
const userOnlyKeys = [...pathKeys, 'remote.url', 'remote.headers'];
const keys = ['enabled', ...pathKeys, 'backend', 'speculation', 'weights', 'maxDraftTokens', 'maxTokens', 'deadlineMs', 'debounceMs', 'contextBudget', 'disabledLanguages'];
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
  const snooze = new Snooze(() => updateLocal());
  context.subscriptions.push(log, statusBar, snooze);
  let lastStatus: ServerStatus | undefined;
  let lastEngine: CompletionMetrics | undefined;
  /** What only the editor knows, for the status item: a snooze, and the active editor's language turned off. */
  const updateLocal = () => {
    const language = vscode.window.activeTextEditor?.document.languageId;
    const disabled = vscode.workspace.getConfiguration('runahead').get<string[]>('disabledLanguages', []);
    statusBar.setLocal({ snoozedMinutes: snooze.minutesLeft(), disabledLanguage: language && disabled.includes(language) ? language : undefined });
  };
  updateLocal();
  context.subscriptions.push(vscode.window.onDidChangeActiveTextEditor(updateLocal));
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

  // The server and the status both report an error: each distinct one is written once, repeats counted.
  const errors = new ErrorOnce();
  const serverModule = context.asAbsolutePath(path.join('dist', 'server.js'));
  const serverOptions: ServerOptions = {
    run: { module: serverModule, transport: TransportKind.ipc },
    debug: { module: serverModule, transport: TransportKind.ipc, options: { execArgv: ['--nolazy', '--inspect=6019'] } },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    initializationOptions: { settings: settings() },
    outputChannel: errorsOnce(log, errors),
    middleware: {
      // While snoozed, typing asks nothing; an explicit request (Alt+\) still completes.
      provideInlineCompletionItems: (document, position, ctx, token, next) =>
        snooze.minutesLeft() !== undefined && ctx.triggerKind === vscode.InlineCompletionTriggerKind.Automatic ? null : next(document, position, ctx, token),
    },
  };
  client = new LanguageClient('runahead', 'Runahead', serverOptions, clientOptions);

  const sendApiKey = async () => {
    const apiKey = (await context.secrets.get(API_KEY_SECRET)) ?? '';
    await client?.sendNotification(REMOTE_API_KEY_NOTIFICATION, { apiKey } satisfies RemoteApiKeyParams);
  };
  let shownProblem: string | undefined;
  context.subscriptions.push(
    client.onNotification('runahead/status', (s: ServerStatus) => {
      lastStatus = s;
      statusBar.setStatus(s);
      if (s.state === 'error') lastEngine = undefined;
      if (s.state !== 'error') shownProblem = undefined;
      else if (s.message !== shownProblem) {
        shownProblem = s.message;
        void (s.remote ? remoteProblemNotice(s) : problemNotice(s));
      }
      const line = engineLine(s);
      if (line && line !== running) log.info(line);
      running = line ?? running;
      if (s.state === 'error') {
        if (errors.first(s.message)) log.error(s.message);
      } else {
        const repeats = errors.summary();
        if (repeats) log.info(repeats);
        if (s.state === 'restarting' || s.state === 'degraded') log.warn(`${s.state === 'restarting' ? 'restarting the engine' : 'running degraded'}: ${s.message}`);
      }
    }),
    client.onNotification('runahead/metrics', (m: CompletionMetrics) => {
      statusBar.setMetrics(m);
      if (measuresSpeed(m)) lastEngine = m;
      log.info(metricsLine(m));
    }),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (!e.affectsConfiguration('runahead')) return;
      updateLocal();
      void client?.sendNotification('workspace/didChangeConfiguration', { settings: { runahead: settings() } });
      void warnIgnoredPathSettings();
    }),
    vscode.commands.registerCommand('runahead.showMenu', () => showMenu(snooze)),
    vscode.commands.registerCommand('runahead.toggle', toggle),
    vscode.commands.registerCommand('runahead.restartEngine', async () => {
      log.info('restarting the engine');
      const s = await client?.sendRequest<ServerStatus>('runahead/restartEngine');
      if (s) statusBar.setStatus(s);
    }),
    vscode.commands.registerCommand('runahead.showLog', () => log.show()),
    vscode.commands.registerCommand('runahead.selectModel', () => selectModel({ context, status: () => lastStatus, lastEngine: () => lastEngine, log })),
    vscode.commands.registerCommand('runahead.snooze', async (minutes?: number) => {
      const m = minutes ?? (await pickSnooze());
      if (m) await snooze.start(m);
    }),
    vscode.commands.registerCommand('runahead.cancelSnooze', () => snooze.cancel()),
    vscode.commands.registerCommand('runahead.openSample', openSample),
    vscode.commands.registerCommand('runahead.disableForLanguage', (language?: string) => setLanguage(language, false)),
    vscode.commands.registerCommand('runahead.enableForLanguage', (language?: string) => setLanguage(language, true)),
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
  registerBenchmark(context, client);
  await sendApiKey();
}

/** The log as the language client writes to it, with an error already written dropped (ErrorOnce counts it). */
function errorsOnce(log: vscode.LogOutputChannel, errors: ErrorOnce): vscode.LogOutputChannel {
  return new Proxy(log, {
    get(target, prop) {
      if (prop === 'error') return (message: string | Error, ...args: unknown[]) => (typeof message !== 'string' || errors.first(message) ? target.error(message, ...args) : undefined);
      const value: unknown = Reflect.get(target, prop);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** A remote server's problem (wrong URL, refused connection, key, model, endpoint) as a notification with the way out. */
async function remoteProblemNotice(s: ServerStatus): Promise<void> {
  const actions = s.remote?.problem === 'auth' ? ['Set API Key', 'Open Settings'] : ['Open Settings'];
  const pick = await vscode.window.showErrorMessage(`Runahead: ${s.message}`, ...actions);
  if (pick === 'Set API Key') await vscode.commands.executeCommand('runahead.setRemoteApiKey');
  else if (pick === 'Open Settings') await vscode.commands.executeCommand('workbench.action.openSettings', s.remote?.problem === 'auth' ? 'runahead.remote.headers' : 'runahead.remote');
}

/** The engine or model failed: one notification per distinct error, with the ways out. */
async function problemNotice(s: ServerStatus): Promise<void> {
  const setting = isModelProblem(s.message) ? 'runahead.modelPath' : 'runahead.enginePath';
  const pick = await vscode.window.showErrorMessage(`Runahead: ${s.message}`, 'Select Model', 'Open Setting', 'Show Log');
  if (pick === 'Select Model') await vscode.commands.executeCommand('runahead.selectModel');
  else if (pick === 'Open Setting') await vscode.commands.executeCommand('workbench.action.openSettings', setting);
  else if (pick === 'Show Log') await vscode.commands.executeCommand('runahead.showLog');
}

/** The walkthrough's sample: a small TypeScript file, untitled, with the cursor where a completion helps. */
async function openSample(): Promise<void> {
  const content = [
    'export class Point {',
    '  constructor(readonly x: number, readonly y: number) {}',
    '',
    '  add(other: Point): Point {',
    '    return new Point(this.x + other.x, this.y + other.y);',
    '  }',
    '',
    '  ',
    '}',
    '',
  ].join('\n');
  const doc = await vscode.workspace.openTextDocument({ language: 'typescript', content });
  const editor = await vscode.window.showTextDocument(doc);
  const at = new vscode.Position(7, 2);
  editor.selection = new vscode.Selection(at, at);
}

async function pickSnooze(): Promise<number | undefined> {
  const pick = await vscode.window.showQuickPick(
    [5, 15, 60].map((m) => ({ label: `${m} minutes`, minutes: m })),
    { title: 'Runahead: no completions while typing for…' },
  );
  return pick?.minutes;
}

/** Turns completions on or off for a language (the active editor's by default) in the user's runahead.disabledLanguages. */
async function setLanguage(language: string | undefined, on: boolean): Promise<void> {
  const lang = language ?? vscode.window.activeTextEditor?.document.languageId;
  if (!lang) return;
  const c = vscode.workspace.getConfiguration('runahead');
  const list = c.get<string[]>('disabledLanguages', []);
  const next = on ? list.filter((l) => l !== lang) : [...new Set([...list, lang])];
  if (next.length !== list.length) await c.update('disabledLanguages', next, vscode.ConfigurationTarget.Global);
}

async function toggle(): Promise<void> {
  const c = vscode.workspace.getConfiguration('runahead');
  await c.update('enabled', !c.get<boolean>('enabled', true), vscode.ConfigurationTarget.Global);
}

async function showMenu(snooze: Snooze): Promise<void> {
  const c = vscode.workspace.getConfiguration('runahead');
  const enabled = c.get<boolean>('enabled', true);
  const language = vscode.window.activeTextEditor?.document.languageId;
  const languageOff = language !== undefined && c.get<string[]>('disabledLanguages', []).includes(language);
  const left = snooze.minutesLeft();
  type Item = vscode.QuickPickItem & { command: string; args?: unknown[] };
  const items: Item[] = [
    { label: '$(folder-opened) Select model…', description: 'models on this machine, or download one', command: 'runahead.selectModel' },
    { label: enabled ? '$(circle-slash) Disable completions' : '$(check) Enable completions', command: 'runahead.toggle' },
    ...(language
      ? [languageOff
          ? { label: `$(check) Enable for ${language}`, command: 'runahead.enableForLanguage', args: [language] }
          : { label: `$(circle-slash) Disable for ${language}`, command: 'runahead.disableForLanguage', args: [language] }]
      : []),
    ...(left !== undefined
      ? [{ label: '$(bell) Cancel snooze', description: `${left} min left`, command: 'runahead.cancelSnooze' }]
      : [5, 15, 60].map((m) => ({ label: `$(bell-slash) Snooze ${m} minutes`, command: 'runahead.snooze', args: [m] }))),
    { label: '$(debug-restart) Restart engine', command: 'runahead.restartEngine' },
    { label: '$(output) Show log', command: 'runahead.showLog' },
    { label: '$(key) Set remote API key…', command: 'runahead.setRemoteApiKey' },
    { label: '$(book) Get started', description: 'the walkthrough', command: 'workbench.action.openWalkthrough', args: ['runahead.runahead#runahead.gettingStarted', false] },
    { label: '$(settings-gear) Settings', command: 'workbench.action.openSettings', args: ['runahead'] },
  ];
  const pick = await vscode.window.showQuickPick(items, { title: 'Runahead' });
  if (pick) await vscode.commands.executeCommand(pick.command, ...(pick.args ?? []));
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
