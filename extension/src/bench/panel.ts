// The benchmark report as a webview: charts and tables drawn by view.ts
// (dist/benchView.js) from the result JSON embedded in the page, under a
// strict Content-Security-Policy (scripts only from the extension, by nonce);
// its buttons export Markdown or JSON, or copy the issue text.
import { randomBytes } from 'node:crypto';
import * as vscode from 'vscode';
import type { BenchmarkResponse } from '../../../server/src/bench/lsp';

export function showBenchmark(context: vscode.ExtensionContext, response: BenchmarkResponse): vscode.WebviewPanel {
  const dist = vscode.Uri.joinPath(context.extensionUri, 'dist');
  const panel = vscode.window.createWebviewPanel('runahead.benchmark', 'Runahead Benchmark', vscode.ViewColumn.Active, { enableScripts: true, localResourceRoots: [dist] });
  const nonce = randomBytes(16).toString('base64');
  const csp = [`default-src 'none'`, `img-src ${panel.webview.cspSource} data:`, `font-src ${panel.webview.cspSource}`, `style-src ${panel.webview.cspSource} 'unsafe-inline'`, `script-src 'nonce-${nonce}'`].join('; ');
  const script = panel.webview.asWebviewUri(vscode.Uri.joinPath(dist, 'benchView.js'));
  // JSON in a data block: never executed, and `<` escaped so it cannot close the element.
  const data = JSON.stringify(response.result).replace(/</g, '\\u003c');
  panel.webview.html = `<!DOCTYPE html>
<html lang="en"><head><meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>Runahead Benchmark</title></head>
<body><script type="application/json" id="result">${data}</script><main id="root"></main>
<script nonce="${nonce}" src="${script}"></script></body></html>`;
  panel.webview.onDidReceiveMessage(async (m: { type: string }) => {
    if (m.type === 'copyIssue') {
      await vscode.env.clipboard.writeText(response.issue);
      void vscode.window.showInformationMessage('Benchmark copied as issue text (machine facts and the report).');
      return;
    }
    const markdown = m.type === 'exportMarkdown';
    if (!markdown && m.type !== 'exportJson') return;
    const uri = await vscode.window.showSaveDialog({
      defaultUri: vscode.Uri.joinPath(vscode.workspace.workspaceFolders?.[0]?.uri ?? context.globalStorageUri, markdown ? 'runahead-benchmark.md' : 'runahead-benchmark.json'),
      filters: markdown ? { Markdown: ['md'] } : { JSON: ['json'] },
    });
    if (uri) await vscode.workspace.fs.writeFile(uri, Buffer.from(markdown ? response.markdown : `${JSON.stringify(response.result, null, 1)}\n`, 'utf8'));
  }, undefined, context.subscriptions);
  return panel;
}
