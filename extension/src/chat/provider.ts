// The loaded model in VS Code's model picker (chat and agent mode), through
// the language-model chat provider API finalised in VS Code 1.104: VS Code's
// messages become OpenAI-shaped ones for runahead/chat; text and tool calls
// stream back as response parts; cancellation is $/cancelRequest; token
// counts are the model's tokenizer's (runahead/tokenCount).
import { randomUUID } from 'node:crypto';
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import type { ChatMessage, ChatTool, GenerationResult } from '../../../server/src/chat/types';
import { CHAT_DELTA_NOTIFICATION, CHAT_MODEL_REQUEST, CHAT_REQUEST, TOKEN_COUNT_REQUEST, type ChatDeltaParams, type ChatModelAnswer, type ChatParams } from '../../../server/src/chat/lsp';

export const VENDOR = 'runahead';

/** Streams runahead/chat answers to whoever asked, by request id. */
export class ChatStreams {
  private readonly listeners = new Map<string, (d: ChatDeltaParams) => void>();

  constructor(client: LanguageClient) {
    client.onNotification(CHAT_DELTA_NOTIFICATION, (d: ChatDeltaParams) => this.listeners.get(d.id)?.(d));
  }

  /** One chat request; `onDelta` sees its text and tool calls as they come. */
  async chat(client: LanguageClient, params: Omit<ChatParams, 'id'>, onDelta: (d: ChatDeltaParams) => void, token?: vscode.CancellationToken): Promise<GenerationResult> {
    const id = randomUUID();
    this.listeners.set(id, onDelta);
    try {
      return await client.sendRequest<GenerationResult>(CHAT_REQUEST, { ...params, id }, token);
    } finally {
      this.listeners.delete(id);
    }
  }
}

function text(parts: readonly unknown[]): string {
  return parts.map((p) => (p instanceof vscode.LanguageModelTextPart ? p.value : '')).join('');
}

/** VS Code's request messages as OpenAI chat messages (tool results become `tool` messages). */
export function toChatMessages(messages: readonly vscode.LanguageModelChatRequestMessage[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (const m of messages) {
    const role = m.role === vscode.LanguageModelChatMessageRole.Assistant ? 'assistant' : m.role === vscode.LanguageModelChatMessageRole.User ? 'user' : 'system';
    for (const p of m.content) {
      if (p instanceof vscode.LanguageModelToolResultPart) out.push({ role: 'tool', tool_call_id: p.callId, content: text(p.content) });
    }
    const calls = m.content.filter((p): p is vscode.LanguageModelToolCallPart => p instanceof vscode.LanguageModelToolCallPart);
    const content = text(m.content);
    if (content || calls.length) {
      out.push({ role, content, ...(calls.length ? { tool_calls: calls.map((c) => ({ id: c.callId, type: 'function' as const, function: { name: c.name, arguments: JSON.stringify(c.input) } })) } : {}) });
    }
  }
  return out;
}

export class RunaheadChatProvider implements vscode.LanguageModelChatProvider {
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeLanguageModelChatInformation = this.changed.event;

  constructor(
    private readonly client: LanguageClient,
    private readonly streams: ChatStreams,
    private readonly log: vscode.LogOutputChannel,
  ) {}

  private retry: NodeJS.Timeout | undefined;
  private lastProblem: string | undefined;

  /** The model may have changed: VS Code asks for the list again. */
  refresh(): void {
    this.changed.fire();
  }

  async provideLanguageModelChatInformation(): Promise<vscode.LanguageModelChatInformation[]> {
    const model = await this.client.sendRequest<ChatModelAnswer>(CHAT_MODEL_REQUEST).catch((err: Error): ChatModelAnswer => ({ problem: err.message, loading: false }));
    clearTimeout(this.retry);
    if ('loading' in model) {
      if (model.problem !== this.lastProblem) this.log.info(`chat model: none (${model.problem})`);
      this.lastProblem = model.problem;
      // VS Code only asks again when told: while the server loads the model, tell it every second.
      if (model.loading) this.retry = setTimeout(() => this.refresh(), 1000);
      return [];
    }
    this.lastProblem = undefined;
    if (model.problem) this.log.warn(`chat model ${model.name}: ${model.problem}`);
    return [
      {
        id: model.id,
        name: `${model.name} (Runahead)`,
        family: model.id,
        version: '1',
        tooltip: model.problem ?? `${model.name} on Runahead, context ${model.contextLength} tokens`,
        detail: model.problem ? 'no chat template' : 'local',
        maxInputTokens: model.contextLength - Math.min(model.maxOutputTokens, model.contextLength / 4),
        maxOutputTokens: model.maxOutputTokens,
        capabilities: { toolCalling: model.toolCalling, imageInput: false },
      },
    ];
  }

  async provideLanguageModelChatResponse(
    _model: vscode.LanguageModelChatInformation,
    messages: readonly vscode.LanguageModelChatRequestMessage[],
    options: vscode.ProvideLanguageModelChatResponseOptions,
    progress: vscode.Progress<vscode.LanguageModelResponsePart>,
    token: vscode.CancellationToken,
  ): Promise<void> {
    const tools: ChatTool[] | undefined = options.tools?.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.inputSchema as Record<string, unknown> | undefined } }));
    const r = await this.streams.chat(
      this.client,
      { messages: toChatMessages(messages), tools, temperature: typeof options.modelOptions?.temperature === 'number' ? options.modelOptions.temperature : 0 },
      (d) => {
        if (d.text) progress.report(new vscode.LanguageModelTextPart(d.text));
        for (const c of d.toolCalls ?? []) progress.report(new vscode.LanguageModelToolCallPart(c.id, c.function.name, parseInput(c.function.arguments)));
      },
      token,
    );
    if (r.finish === 'error') throw new Error(r.error ?? 'the generation failed');
  }

  async provideTokenCount(_model: vscode.LanguageModelChatInformation, value: string | vscode.LanguageModelChatRequestMessage): Promise<number> {
    const t = typeof value === 'string' ? value : toChatMessages([value]).map((m) => m.content ?? JSON.stringify(m.tool_calls ?? '')).join('\n');
    return this.client.sendRequest<number>(TOKEN_COUNT_REQUEST, { text: t });
  }
}

function parseInput(args: string): object {
  try {
    const v = JSON.parse(args);
    return v && typeof v === 'object' ? v : { value: v };
  } catch {
    return { arguments: args };
  }
}
