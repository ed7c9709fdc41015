// The Runahead language server: LSP over stdio (`node dist/server.js --stdio`)
// or Node IPC (VS Code). Serves textDocument/inlineCompletion from the engine,
// and sends runahead/status and runahead/metrics notifications.
import { basename, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  createConnection,
  ProposedFeatures,
  TextDocuments,
  TextDocumentSyncKind,
  type InitializeParams,
  type InitializeResult,
  type WorkspaceFolder,
} from 'vscode-languageserver/node';
import { TextDocument } from 'vscode-languageserver-textdocument';
import { EngineSupervisor, type EngineStatus } from './engine/supervisor';
import { ModelState } from './model/modelState';
import { RecentChunks } from './completion/contextChunks';
import { CompletionPipeline } from './completion/pipeline';
import { METRICS_NOTIFICATION, STATUS_NOTIFICATION } from './metrics';
import { readSettings, type Settings } from './settings';

const connection = createConnection(ProposedFeatures.all);
const documents = new TextDocuments(TextDocument);

let settings: Settings = readSettings({});
let folders: WorkspaceFolder[] = [];

const log = (level: 'info' | 'warn' | 'error', line: string) => {
  if (level === 'error') connection.console.error(line);
  else if (level === 'warn') connection.console.warn(line);
  else connection.console.info(line);
};

const supervisor = new EngineSupervisor(log);
const model = new ModelState(log);
const recent = new RecentChunks();
const cursorLine = new Map<string, number>();

const sendStatus = () => void connection.sendNotification(STATUS_NOTIFICATION, status());

/** The model folder changed, or broke under the engine: read it again and reload the engine. */
function reloadModel(reason: string): void {
  log('info', `reloading the model: ${reason}`);
  pipeline.cancelAll();
  void model.load(settings.modelPath, true);
  void supervisor.restart(reason);
}
model.on('changed', sendStatus);
model.on('folderChanged', (what: string) => reloadModel(what));
// The supervisor restarts the engine itself; the server's copy of the model (tokenizer) is read again.
supervisor.on('modelError', (message: string) => {
  log('info', `reading the model again: the engine reported ${message}`);
  void model.load(settings.modelPath, true);
});

/** The status the client shows: the engine's, unless the server's read of the model folder is still running or failed. */
function status(): EngineStatus & { enabled: boolean; fimOrder?: string } {
  const s = supervisor.status;
  const base = { ...s, enabled: settings.enabled, fimOrder: model.context?.info.fimOrder };
  if (s.state === 'error') return base;
  if (model.problem) return { ...base, state: 'error', message: model.problem };
  if (model.loading) return { ...base, state: 'loading', message: `reading ${model.path}` };
  return base;
}

function describe(uri: string): { path: string; repoName?: string } {
  const file = uri.startsWith('file:') ? fileURLToPath(uri) : uri;
  const folder = folders.find((f) => uri.startsWith(f.uri.endsWith('/') ? f.uri : `${f.uri}/`));
  if (!folder) return { path: basename(file) };
  return { path: relative(fileURLToPath(folder.uri), file), repoName: folder.name };
}

const pipeline = new CompletionPipeline({
  document: (uri) => documents.get(uri),
  supervisor,
  model: () => model.context,
  settings: () => settings,
  recent,
  describe,
  metrics: (m) => void connection.sendNotification(METRICS_NOTIFICATION, m),
  log,
});

function applySettings(raw: unknown): void {
  const r = raw as { runahead?: unknown } | undefined;
  settings = readSettings(r && typeof r === 'object' && 'runahead' in r ? r.runahead : raw, settings);
  void model.load(settings.modelPath);
  supervisor.configure(settings);
  sendStatus();
}

connection.onInitialize((params: InitializeParams): InitializeResult => {
  folders = params.workspaceFolders ?? (params.rootUri ? [{ uri: params.rootUri, name: basename(fileURLToPath(params.rootUri)) }] : []);
  settings = readSettings((params.initializationOptions as { settings?: unknown } | undefined)?.settings ?? params.initializationOptions);
  return {
    capabilities: {
      textDocumentSync: TextDocumentSyncKind.Incremental,
      inlineCompletionProvider: true,
    },
    serverInfo: { name: 'runahead', version: '0.1.0' },
  };
});

connection.onInitialized(() => {
  supervisor.on('status', sendStatus);
  void model.load(settings.modelPath);
  supervisor.configure(settings);
});

connection.onDidChangeConfiguration((params) => applySettings(params.settings));
connection.onRequest('runahead/restartEngine', async () => {
  pipeline.cancelAll();
  // Read the model folder again too: it may have been fixed or replaced.
  await Promise.all([model.load(settings.modelPath, true), supervisor.restart()]);
  return status();
});
connection.onRequest('runahead/status', () => status());
// Memory of the server and the engine's own counters (memory, requests, busy),
// for the reliability bench and diagnostics. Collects garbage first when node
// runs with --expose-gc, so heap numbers compare.
connection.onRequest('runahead/stats', async () => {
  (globalThis as { gc?: () => void }).gc?.();
  const conn = await supervisor.ready(0);
  return { server: process.memoryUsage(), completions: pipeline.counters, engine: conn ? await conn.stats().catch(() => null) : null };
});
connection.languages.inlineCompletion.on(async (params, token) => {
  cursorLine.set(params.textDocument.uri, params.position.line);
  try {
    return await pipeline.complete(params, token);
  } catch (err) {
    // A bug in a stage costs this completion, never an error dialog in the editor.
    log('error', `completion failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    return null;
  }
});

documents.onDidOpen((e) => {
  const { path } = describe(e.document.uri);
  recent.opened(e.document.uri, path, e.document.getText());
});
documents.onDidChangeContent((e) => {
  pipeline.debounce.keystroke();
  const { path } = describe(e.document.uri);
  recent.edited(e.document.uri, path, e.document.getText(), cursorLine.get(e.document.uri) ?? 0);
});
documents.onDidClose((e) => {
  recent.closed(e.document.uri);
  pipeline.cache.clear(e.document.uri);
  cursorLine.delete(e.document.uri);
});

connection.onShutdown(() => {
  model.stop();
  return supervisor.stop();
});
// The engine never outlives the server, however the server ends.
process.on('exit', () => supervisor.killNow());
for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
  process.on(signal, () => {
    supervisor.killNow();
    process.exit(0);
  });
}

documents.listen(connection);
connection.listen();
