// `Runahead: Edit Selection with Instruction`: the model rewrites the
// selection as told; the rewrite streams into a diff view (the file as it is
// beside the file with the rewrite), then Accept Edit or Reject Edit. The
// prompt holds the file and the selection, so the engine's prompt-lookup
// drafting (speculation `auto` or `lookup`) copies the unchanged parts of the
// rewrite from them several tokens per step.
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { editMessages, rewriteOf } from '../../../server/src/chat/editPrompt';
import type { ChatStreams } from './provider';

const SCHEME = 'runahead-edit';
interface PendingEdit {
  doc: vscode.TextDocument;
  version: number;
  range: vscode.Range;
  selection: string;
  proposed: vscode.Uri;
  text: string;
  done: boolean;
}

export class EditWithInstruction implements vscode.TextDocumentContentProvider {
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;
  private pending: PendingEdit | undefined;
  private serial = 0;

  constructor(
    private readonly client: LanguageClient,
    private readonly streams: ChatStreams,
    private readonly log: vscode.LogOutputChannel,
  ) {}

  register(): vscode.Disposable[] {
    return [
      vscode.workspace.registerTextDocumentContentProvider(SCHEME, this),
      vscode.commands.registerCommand('runahead.editSelection', () => this.run()),
      vscode.commands.registerCommand('runahead.acceptEdit', () => this.accept()),
      vscode.commands.registerCommand('runahead.rejectEdit', () => this.finish('rejected')),
    ];
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    const p = this.pending;
    if (!p || p.proposed.toString() !== uri.toString()) return '';
    const whole = p.doc.getText();
    return whole.slice(0, p.doc.offsetAt(p.range.start)) + rewriteOf(p.selection, p.text) + whole.slice(p.doc.offsetAt(p.range.end));
  }

  async run(instruction?: string): Promise<string | undefined> {
    const editor = vscode.window.activeTextEditor;
    if (!editor) return void vscode.window.showInformationMessage('Runahead: open a file and select the code to edit.');
    const doc = editor.document;
    const range = editor.selection.isEmpty ? doc.lineAt(editor.selection.active.line).range : new vscode.Range(editor.selection.start, editor.selection.end);
    instruction ??= await vscode.window.showInputBox({ title: 'Runahead: edit the selection', prompt: 'What should change?', placeHolder: 'e.g. use a list comprehension', ignoreFocusOut: true });
    if (!instruction) return undefined;
    await this.finish('replaced');
    const proposed = vscode.Uri.from({ scheme: SCHEME, path: doc.uri.path, query: String(++this.serial) });
    const p: PendingEdit = { doc, version: doc.version, range, selection: doc.getText(range), proposed, text: '', done: false };
    this.pending = p;
    await vscode.commands.executeCommand('setContext', 'runahead.editPending', true);
    await vscode.commands.executeCommand('vscode.diff', doc.uri, proposed, `${vscode.workspace.asRelativePath(doc.uri)} ↔ Runahead edit`, { preview: true });
    const text = doc.getText();
    const messages = editMessages(vscode.workspace.asRelativePath(doc.uri), doc.languageId, text.slice(0, doc.offsetAt(range.start)), p.selection, text.slice(doc.offsetAt(range.end)), instruction);
    let timer: NodeJS.Timeout | undefined;
    const r = await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: 'Runahead: editing…', cancellable: true }, (_progress, token) =>
      this.streams.chat(
        this.client,
        { messages, maxTokens: Math.max(256, Math.ceil(p.selection.length / 2) + 256), temperature: 0 },
        (d) => {
          p.text += d.text ?? '';
          timer ??= setTimeout(() => {
            timer = undefined;
            this.changed.fire(proposed);
          }, 50);
        },
        token,
      ),
    ).then(undefined, (err: Error) => {
      this.log.error(`edit failed: ${err.message}`);
      void vscode.window.showErrorMessage(`Runahead: ${err.message}`);
      return undefined;
    });
    clearTimeout(timer);
    p.done = true;
    this.changed.fire(proposed);
    if (r) {
      const s = r.stats;
      this.log.info(`edit: ${r.usage.completionTokens} tokens, ${r.finish}${s?.acceptedPerStep ? `, ${s.acceptedPerStep.toFixed(2)} accepted/step` : ''}${s?.msPerToken ? `, ${s.msPerToken.toFixed(1)} ms/token` : ''}`);
    }
    return rewriteOf(p.selection, p.text);
  }

  /** Replaces the selection with the rewrite, unless the file changed meanwhile. */
  async accept(): Promise<boolean> {
    const p = this.pending;
    if (!p) return false;
    if (p.doc.version !== p.version) {
      void vscode.window.showWarningMessage('Runahead: the file changed since the edit was asked for; edit again.');
      await this.finish('stale');
      return false;
    }
    const edit = new vscode.WorkspaceEdit();
    edit.replace(p.doc.uri, p.range, rewriteOf(p.selection, p.text));
    const ok = await vscode.workspace.applyEdit(edit);
    await this.finish('accepted');
    return ok;
  }

  private async finish(how: string): Promise<void> {
    const p = this.pending;
    if (!p) return;
    this.pending = undefined;
    await vscode.commands.executeCommand('setContext', 'runahead.editPending', false);
    for (const group of vscode.window.tabGroups.all) {
      for (const tab of group.tabs) {
        if (tab.input instanceof vscode.TabInputTextDiff && tab.input.modified.toString() === p.proposed.toString()) await vscode.window.tabGroups.close(tab);
      }
    }
    this.log.info(`edit ${how}`);
  }
}
