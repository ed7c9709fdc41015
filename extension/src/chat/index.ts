// Agent features in the editor: the chat model provider (model picker, agent
// mode), edit-with-instruction, and the local API's settings and token.
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { configureApi, copyApiToken } from './apiToken';
import { EditWithInstruction } from './edit';
import { ChatStreams, RunaheadChatProvider, VENDOR } from './provider';

export function registerChat(context: vscode.ExtensionContext, client: LanguageClient, log: vscode.LogOutputChannel): void {
  const streams = new ChatStreams(client);
  const provider = new RunaheadChatProvider(client, streams, log);
  const edits = new EditWithInstruction(client, streams, log);
  let lastState: string | undefined;
  context.subscriptions.push(
    vscode.lm.registerLanguageModelChatProvider(VENDOR, provider),
    ...edits.register(),
    vscode.commands.registerCommand('runahead.copyApiToken', () => copyApiToken(context.secrets)),
    // A model loaded, changed or failed: the picker asks again.
    client.onNotification('runahead/status', (s: { state: string; model?: string }) => {
      const key = `${s.state} ${s.model ?? ''}`;
      if (key !== lastState) provider.refresh();
      lastState = key;
    }),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('runahead.api')) void configureApi(client, context.secrets, log);
    }),
  );
  void configureApi(client, context.secrets, log);
  // A test-only hook (the e2e suite): one chat request through vscode.lm, as any extension would make it.
  if (process.env.RUNAHEAD_E2E_CHAT) {
    context.subscriptions.push(
      vscode.commands.registerCommand('runahead.test.chat', async (prompt: string) => {
        const [model] = await vscode.lm.selectChatModels({ vendor: VENDOR });
        if (!model) return { error: 'no model from vendor runahead' };
        const response = await model.sendRequest([vscode.LanguageModelChatMessage.User(prompt)], {}, new vscode.CancellationTokenSource().token);
        let text = '';
        let parts = 0;
        for await (const t of response.text) {
          text += t;
          parts++;
        }
        return { model: model.id, maxInputTokens: model.maxInputTokens, tokens: await model.countTokens(prompt), text, parts };
      }),
    );
  }
}
