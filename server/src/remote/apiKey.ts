// The remote server's API key travels from the editor's SecretStorage to the
// server in this notification (at start and whenever the user sets it), never
// in settings, initializationOptions or a log line.
export const REMOTE_API_KEY_NOTIFICATION = 'runahead/remoteApiKey';

export interface RemoteApiKeyParams {
  /** Empty or absent: no key. */
  apiKey?: string;
}
