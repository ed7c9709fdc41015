// Agent work over LSP, for the extension's chat model provider and
// edit-with-instruction: runahead/chat streams runahead/chatDelta
// notifications and answers with the result (cancelled by $/cancelRequest);
// runahead/chatModel and runahead/tokenCount describe and count.
import { ResponseError, type Connection } from 'vscode-languageserver/node';
import { ApiHost, CONFIGURE_API_REQUEST, type ApiParams } from '../api/host';
import type { Log } from '../log';
import type { Runahead } from '../runahead';
import { AgentError, type AgentModel, type ChatMessage, type ChatTool, type GenerationResult } from './types';

export const CHAT_REQUEST = 'runahead/chat';
export const CHAT_DELTA_NOTIFICATION = 'runahead/chatDelta';
export const CHAT_MODEL_REQUEST = 'runahead/chatModel';
export const TOKEN_COUNT_REQUEST = 'runahead/tokenCount';

export interface ChatParams {
  /** Chosen by the client; every runahead/chatDelta of this request carries it. */
  id: string;
  messages: ChatMessage[];
  tools?: ChatTool[];
  maxTokens?: number;
  temperature?: number;
}

export type ChatDeltaParams = { id: string; text?: string; toolCalls?: GenerationResult['toolCalls'] };

/** What runahead/chatModel answers: the model, or why there is none to chat with (`loading`: ask again soon). */
export type ChatModelAnswer = AgentModel | { problem: string; loading: boolean };

const asResponseError = (err: unknown) => new ResponseError(err instanceof AgentError ? err.status : 500, err instanceof Error ? err.message : String(err));

export function serveAgentRequests(connection: Connection, runahead: Runahead, log: Log): ApiHost {
  const api = new ApiHost(runahead.agent, log);
  connection.onRequest(CHAT_MODEL_REQUEST, async (): Promise<ChatModelAnswer> => {
    try {
      return await runahead.agent.model();
    } catch (err) {
      return { problem: (err as Error).message, loading: err instanceof AgentError && err.code === 'model_not_ready' };
    }
  });
  connection.onRequest(TOKEN_COUNT_REQUEST, async (p: { text: string }) => {
    try {
      return await runahead.agent.countTokens(p.text);
    } catch (err) {
      throw asResponseError(err);
    }
  });
  connection.onRequest(CHAT_REQUEST, async (p: ChatParams, token) => {
    const abort = new AbortController();
    const sub = token.onCancellationRequested(() => abort.abort());
    try {
      const model = await runahead.agent.model();
      if (model.problem) throw new AgentError(model.problem, 400, 'model_not_chat');
      return await runahead.agent.chat(
        { messages: p.messages, tools: p.tools, maxTokens: p.maxTokens ?? model.maxOutputTokens, temperature: p.temperature ?? 0, signal: abort.signal },
        (d) => void connection.sendNotification(CHAT_DELTA_NOTIFICATION, { id: p.id, ...d } satisfies ChatDeltaParams),
      );
    } catch (err) {
      throw asResponseError(err);
    } finally {
      sub.dispose();
    }
  });
  connection.onRequest(CONFIGURE_API_REQUEST, (p: ApiParams) => api.configure(p));
  return api;
}
