// Agent features in the editor: the chat model provider (model picker, agent
// mode), edit-with-instruction, and the local API's settings and token.
import { writeFileSync } from 'node:fs';
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { configureApi, copyApiToken } from './apiToken';
import { EditWithInstruction } from './edit';
import { ChatStreams, RunaheadChatProvider, VENDOR } from './provider';

export function registerChat(context: vscode.ExtensionContext, client: LanguageClient, log: vscode.LogOutputChannel): void {
  const streams = new ChatStreams(client);
  const provider = new RunaheadChatProvider(client, streams, log);
  const edits = new EditWithInstruction(client, streams, log);
  context.subscriptions.push(
    vscode.lm.registerLanguageModelChatProvider(VENDOR, provider),
    ...edits.register(),
    vscode.commands.registerCommand('runahead.copyApiToken', () => copyApiToken(context.secrets)),
    // runahead/status is the status bar's (a client has one handler per notification): the
    // settings that choose the model tell the picker to ask again instead.
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('runahead.api')) void configureApi(client, context.secrets, log);
      else if (e.affectsConfiguration('runahead')) provider.refresh();
    }),
  );
  void configureApi(client, context.secrets, log);
  // A test-only hook (the e2e suite binds a key to it): one chat request through vscode.lm, as any
  // extension would make it; what came back goes to the file RUNAHEAD_E2E_CHAT names.
  const e2eChat = process.env.RUNAHEAD_E2E_CHAT;
  if (e2eChat) {
    context.subscriptions.push(
      vscode.commands.registerCommand('runahead.test.chat', async (args?: { prompt?: string }) => {
        const result = await testChat(args?.prompt ?? 'Write a function that adds two numbers.').catch((err: Error) => ({ error: err.message }));
        log.info(`test chat: ${JSON.stringify(result)}`);
        writeFileSync(e2eChat, JSON.stringify(result));
        return result;
      }),
    );
  }
}

async function testChat(prompt: string): Promise<object> {
  const models = await vscode.lm.selectChatModels({ vendor: VENDOR });
  const [model] = models;
  if (!model) return { error: 'no model from vendor runahead' };
  const response = await model.sendRequest([vscode.LanguageModelChatMessage.User(prompt)], {}, new vscode.CancellationTokenSource().token);
  let text = '';
  let parts = 0;
  for await (const t of response.text) {
    text += t;
    parts++;
  }
  return { models: models.map((m) => `${m.vendor}/${m.id} ${m.name}`), model: model.id, maxInputTokens: model.maxInputTokens, tokens: await model.countTokens(prompt), text, parts };
}
