// The Runahead language server: LSP over stdio (`node dist/server.js --stdio`)
// or Node IPC (VS Code). A thin front end over the server's state (runahead.ts):
// serves textDocument/inlineCompletion through the Completer, feeds it the
// documents, and sends runahead/status and runahead/metrics notifications.
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  createConnection,
  ProposedFeatures,
  TextDocuments,
  TextDocumentSyncKind,
  type CancellationToken,
  type InitializeParams,
  type InitializeResult,
  type InlineCompletionList,
  type InlineCompletionParams,
} from 'vscode-languageserver/node';
import { TextDocument } from 'vscode-languageserver-textdocument';
import type { CompletionInput } from './completion/completer';
import type { Log } from './log';
import { METRICS_NOTIFICATION, STATUS_NOTIFICATION } from './metrics';
import { Runahead } from './runahead';
import { readSettings } from './settings';
import { REMOTE_API_KEY_NOTIFICATION, type RemoteApiKeyParams } from './remote/apiKey';
import { serveAgentRequests } from './chat/lsp';
import { registerBenchmark } from './bench/lsp';

const connection = createConnection(ProposedFeatures.all);
const documents = new TextDocuments(TextDocument);

const log: Log = (level, line) => {
  if (level === 'error') connection.console.error(line);
  else if (level === 'warn') connection.console.warn(line);
  else connection.console.info(line);
};

const runahead = new Runahead(log, (status) => void connection.sendNotification(STATUS_NOTIFICATION, status));

/** The Completer's input for an LSP request, with its cancellation as an AbortSignal. */
function completionInput(params: InlineCompletionParams, doc: TextDocument, signal: AbortSignal): CompletionInput {
  const sel = params.context.selectedCompletionInfo;
  return {
    uri: doc.uri,
    text: doc.getText(),
    offset: doc.offsetAt(params.position),
    languageId: doc.languageId,
    ...runahead.workspace.describe(doc.uri),
    selected: sel && { from: doc.offsetAt(sel.range.start), to: doc.offsetAt(sel.range.end), text: sel.text },
    trigger: params.context.triggerKind === 1 ? 'invoked' : 'automatic',
    context: runahead.workspace.contextFor(doc.uri),
    signal,
  };
}

async function inlineCompletion(params: InlineCompletionParams, token: CancellationToken): Promise<InlineCompletionList | null> {
  runahead.workspace.cursorAt(params.textDocument.uri, params.position.line);
  const doc = documents.get(params.textDocument.uri);
  if (!doc) return null;
  const abort = new AbortController();
  const sub = token.onCancellationRequested(() => abort.abort());
  if (token.isCancellationRequested) abort.abort();
  try {
    const result = await runahead.completer.complete(completionInput(params, doc, abort.signal));
    if (result.metrics) void connection.sendNotification(METRICS_NOTIFICATION, result.metrics);
    if (result.text.length === 0) return null;
    const range = { start: doc.positionAt(result.from), end: doc.positionAt(result.to) };
    // Asked for again where a suggestion already shows (Alt+] / Alt+[): add a second one.
    const shownBefore = result.finish === 'cache' || result.finish === 'prefetch';
    const second = params.context.triggerKind === 1 && shownBefore ? await runahead.completer.alternative(completionInput(params, doc, abort.signal), result.text) : undefined;
    return { items: [result.text, ...(second ? [second] : [])].map((insertText) => ({ insertText, range })) };
  } finally {
    sub.dispose();
  }
}

connection.onInitialize((params: InitializeParams): InitializeResult => {
  runahead.workspace.folders = params.workspaceFolders ?? (params.rootUri ? [{ uri: params.rootUri, name: basename(fileURLToPath(params.rootUri)) }] : []);
  runahead.settings = readSettings((params.initializationOptions as { settings?: unknown } | undefined)?.settings ?? params.initializationOptions);
  return {
    capabilities: {
      textDocumentSync: TextDocumentSyncKind.Incremental,
      inlineCompletionProvider: true,
    },
    serverInfo: { name: 'runahead', version: '0.1.0' },
  };
});

// The source starts once the client is initialized (its status notifications may flow then).
connection.onInitialized(() => runahead.configure(runahead.settings));

connection.onDidChangeConfiguration((params) => {
  const raw = params.settings as { runahead?: unknown } | undefined;
  runahead.configure(readSettings(raw && typeof raw === 'object' && 'runahead' in raw ? raw.runahead : raw, runahead.settings));
});
connection.onNotification(REMOTE_API_KEY_NOTIFICATION, (p: RemoteApiKeyParams | undefined) => runahead.setRemoteApiKey(p?.apiKey));
// Chat, edits, token counts and the local API (chat/lsp.ts, api/).
const api = serveAgentRequests(connection, runahead, log);
registerBenchmark(connection, runahead);
connection.onRequest('runahead/restartEngine', () => runahead.restart());
connection.onRequest('runahead/status', () => runahead.status());
// Memory of the server and the engine's own counters (memory, requests, busy),
// for the reliability bench and diagnostics. Collects garbage first when node
// runs with --expose-gc, so heap numbers compare.
connection.onRequest('runahead/stats', () => {
  (globalThis as { gc?: () => void }).gc?.();
  return runahead.stats();
});
connection.languages.inlineCompletion.on(async (params, token) => {
  try {
    return await inlineCompletion(params, token);
  } catch (err) {
    // A bug in a stage costs this completion, never an error dialog in the editor.
    log('error', `completion failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    return null;
  }
});

documents.onDidOpen((e) => {
  runahead.opened(e.document.uri, e.document.getText());
  // The document's line table (offsetAt, positionAt, and every incremental change after the
  // first) is built on first use: ~30 ms of a blocked event loop for a 100k-line file, which
  // the first completion there paid while the editor waited on it. Built now, once the open is
  // handled, it is ready before a completion asks.
  const doc = e.document;
  setImmediate(() => {
    if (documents.get(doc.uri) === doc) doc.offsetAt({ line: 0, character: 0 });
  });
});
documents.onDidChangeContent((e) => runahead.edited(e.document.uri, e.document.getText()));
documents.onDidClose((e) => runahead.closed(e.document.uri));

connection.onShutdown(async () => {
  await Promise.all([api.close(), runahead.stop()]);
});
// The engine never outlives the server, however the server ends.
process.on('exit', () => runahead.killNow());
for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
  process.on(signal, () => {
    runahead.killNow();
    process.exit(0);
  });
}

documents.listen(connection);
connection.listen();
