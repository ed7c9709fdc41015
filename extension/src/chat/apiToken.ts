// The local API's bearer token: made on first start (32 random bytes),
// kept in the editor's SecretStorage, copied by `Runahead: Copy API Token`,
// and sent with runahead.api.* to the server (runahead/configureApi).
import { randomBytes } from 'node:crypto';
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { CONFIGURE_API_REQUEST, type ApiParams, type ApiState } from '../../../server/src/api/host';

const TOKEN_SECRET = 'runahead.api.token';

export async function apiToken(secrets: vscode.SecretStorage): Promise<string> {
  let token = await secrets.get(TOKEN_SECRET);
  if (!token) {
    token = randomBytes(32).toString('base64url');
    await secrets.store(TOKEN_SECRET, token);
  }
  return token;
}

/** Sends runahead.api.* (user settings only: a workspace cannot open a port) and the token to the server. */
export async function configureApi(client: LanguageClient, secrets: vscode.SecretStorage, log: vscode.LogOutputChannel): Promise<void> {
  const c = vscode.workspace.getConfiguration('runahead.api');
  const user = <T>(key: string, fallback: T): T => (c.inspect<T>(key)?.globalValue ?? c.inspect<T>(key)?.defaultValue ?? fallback) as T;
  const params: ApiParams = { enabled: user('enabled', false), port: user('port', 8012), token: await apiToken(secrets), maxQueue: c.get('maxQueue', 4) };
  const state = await client.sendRequest<ApiState>(CONFIGURE_API_REQUEST, params);
  if (state.error) {
    log.error(state.error);
    void vscode.window.showErrorMessage(`Runahead: ${state.error}`, 'Open Settings').then((pick) => pick && vscode.commands.executeCommand('workbench.action.openSettings', 'runahead.api'));
  } else if (state.url) log.info(`local API on ${state.url} (Runahead: Copy API Token for its bearer token)`);
}

export async function copyApiToken(secrets: vscode.SecretStorage): Promise<void> {
  await vscode.env.clipboard.writeText(await apiToken(secrets));
  const on = vscode.workspace.getConfiguration('runahead.api').get<boolean>('enabled', false);
  void vscode.window.showInformationMessage(`Runahead: API token copied. ${on ? '' : 'The API is off: turn on runahead.api.enabled.'}`);
}
