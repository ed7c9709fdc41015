// The API's lifetime in the language server: runahead/configureApi (sent by
// the extension with runahead.api.* and the token from SecretStorage) starts,
// moves or stops it.
import type { Agent } from '../chat/agent';
import type { Log } from '../log';
import { ApiServer } from './server';

export const CONFIGURE_API_REQUEST = 'runahead/configureApi';

export interface ApiParams {
  enabled: boolean;
  port: number;
  token: string;
  maxQueue: number;
}

export interface ApiState {
  url?: string;
  error?: string;
}

export class ApiHost {
  private server: ApiServer | undefined;
  private key = '';

  constructor(
    private readonly agent: Agent,
    private readonly log: Log,
  ) {}

  async configure(p: ApiParams): Promise<ApiState> {
    this.agent.maxQueue = p.maxQueue;
    const key = p.enabled ? `${p.port}\n${p.token}` : '';
    if (key === this.key && (this.server || !p.enabled)) return { url: this.server?.url };
    this.key = key;
    await this.server?.close();
    this.server = undefined;
    if (!p.enabled) return {};
    try {
      this.server = await ApiServer.listen(this.agent, { host: '127.0.0.1', port: p.port, token: p.token });
      this.log('info', `OpenAI-compatible API on ${this.server.url}`);
      return { url: this.server.url };
    } catch (err) {
      const error = `the API could not listen on 127.0.0.1:${p.port}: ${(err as Error).message}`;
      this.log('error', error);
      return { error };
    }
  }

  close(): Promise<void> {
    return this.server?.close() ?? Promise.resolve();
  }
}
