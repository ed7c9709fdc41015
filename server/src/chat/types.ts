// What agent work (chat, agent mode, edit-with-instruction, the local API)
// exchanges with a CompletionSource, in OpenAI's chat shapes so that the API
// forwards them as they are and a remote server receives them unchanged.

export interface ToolCall {
  id: string;
  type: 'function';
  /** `arguments` is JSON text, as OpenAI sends it. */
  function: { name: string; arguments: string };
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
  name?: string;
}

export interface ChatTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

export interface ChatRequest {
  messages: ChatMessage[];
  tools?: ChatTool[];
  maxTokens: number;
  temperature: number;
  topP?: number;
  seed?: number;
  /** Extra stop strings. */
  stop?: string[];
  signal: AbortSignal;
}

/** Plain completion (`prompt`) or fill-in-the-middle (`prompt` before the gap, `suffix` after it). */
export interface TextRequest {
  prompt: string;
  suffix?: string;
  maxTokens: number;
  temperature: number;
  topP?: number;
  seed?: number;
  stop?: string[];
  signal: AbortSignal;
}

/** A piece of a streamed answer: text, or tool calls once they are complete. */
export interface ChatDelta {
  text?: string;
  toolCalls?: ToolCall[];
}

export interface Usage {
  promptTokens: number;
  completionTokens: number;
}

export interface GenerationResult {
  ok: boolean;
  text: string;
  toolCalls: ToolCall[];
  /** OpenAI's finish reasons: stop | length | tool_calls; else cancelled | error. */
  finish: 'stop' | 'length' | 'tool_calls' | 'cancelled' | 'error';
  error?: string;
  usage: Usage;
  /** Speculation and speed of the engine's generation (accepted per step, ms/token), when local. */
  stats?: { acceptedPerStep?: number; msPerToken?: number; preempted?: number; steps?: number };
}

/** The model agent work runs on, as the chat model picker and /v1/models show it. */
export interface AgentModel {
  id: string;
  name: string;
  contextLength: number;
  maxOutputTokens: number;
  toolCalling: boolean;
  /** Why it cannot chat (no chat template, not ready), when it cannot. */
  problem?: string;
}

export class AgentError extends Error {
  constructor(
    message: string,
    /** The HTTP status the API answers with. */
    readonly status: number,
    readonly code: string,
  ) {
    super(message);
  }
}

/** What a completion source offers agent work: the model, chat, text and token counts. */
export interface AgentBackend {
  /** The model it runs on. Throws an AgentError when it cannot chat. */
  agentModel(): Promise<AgentModel>;
  /** A chat turn: text and tool calls streamed by `onDelta`. Throws an AgentError for a request it cannot serve. */
  chat(request: ChatRequest, onDelta: (d: ChatDelta) => void): Promise<GenerationResult>;
  /** A plain or fill-in-the-middle text completion, streamed by `onText`. */
  text(request: TextRequest, onText: (delta: string) => void): Promise<GenerationResult>;
  /** Tokens of `text` by the model's tokenizer (estimated where it is remote). */
  countTokens(text: string): Promise<number>;
}
