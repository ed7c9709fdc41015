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
import { locateModel } from './engine/locate';
import { loadModelInfo } from './model/modelInfo';
import { FimBuilder } from './completion/fim';
import { RecentChunks } from './completion/contextChunks';
import { CompletionPipeline, type ModelContext } from './completion/pipeline';
import { METRICS_NOTIFICATION, STATUS_NOTIFICATION } from './metrics';
import { readSettings, type Settings } from './settings';

const connection = createConnection(ProposedFeatures.all);
const documents = new TextDocuments(TextDocument);

let settings: Settings = readSettings({});
let folders: WorkspaceFolder[] = [];
let model: { path: string; context?: ModelContext; problem?: string } | undefined;

const log = (level: 'info' | 'warn' | 'error', line: string) => {
  if (level === 'error') connection.console.error(line);
  else if (level === 'warn') connection.console.warn(line);
  else connection.console.info(line);
};

const supervisor = new EngineSupervisor(log);
const recent = new RecentChunks();
const cursorLine = new Map<string, number>();

function modelContext(): ModelContext | undefined {
  return model?.context;
}

/** Reads the model folder's tokenizer and FIM tokens when the model path changes. */
function loadModel(): void {
  const located = locateModel(settings.modelPath);
  if (model?.path === located.path) return;
  model = { path: located.path, problem: located.problem };
  if (located.problem) return;
  try {
    const info = loadModelInfo(located.path);
    model.context = { info, fim: new FimBuilder(info.tokenizer, info.special, info.fimOrder, info.repoLevel) };
    log('info', `tokenizer of ${located.path}: FIM order ${info.fimOrder}, repo-level context ${info.repoLevel ? 'yes' : 'no'}, stop tokens [${info.stopTokens.join(', ')}]`);
  } catch (err) {
    model.problem = err instanceof Error ? err.message : String(err);
    log('error', model.problem);
  }
}

/** The status the client shows: the engine's, unless the model's tokenizer is unusable. */
function status(): EngineStatus & { enabled: boolean; fimOrder?: string } {
  const s = supervisor.status;
  const base = { ...s, enabled: settings.enabled, fimOrder: model?.context?.info.fimOrder };
  return model?.problem && s.state !== 'error' ? { ...base, state: 'error', message: model.problem } : base;
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
  model: modelContext,
  settings: () => settings,
  recent,
  describe,
  metrics: (m) => void connection.sendNotification(METRICS_NOTIFICATION, m),
  log,
});

function applySettings(raw: unknown): void {
  const r = raw as { runahead?: unknown } | undefined;
  settings = readSettings(r && typeof r === 'object' && 'runahead' in r ? r.runahead : raw, settings);
  loadModel();
  supervisor.configure(settings);
  void connection.sendNotification(STATUS_NOTIFICATION, status());
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
  supervisor.on('status', () => void connection.sendNotification(STATUS_NOTIFICATION, status()));
  loadModel();
  supervisor.configure(settings);
});

connection.onDidChangeConfiguration((params) => applySettings(params.settings));
connection.onRequest('runahead/restartEngine', async () => {
  pipeline.cancelAll();
  model = undefined; // read the model folder again too: it may have been fixed or replaced
  loadModel();
  await supervisor.restart();
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

connection.onShutdown(() => supervisor.stop());
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
