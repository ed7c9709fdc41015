// Agent work on a remote OpenAI-compatible server: chat turns are forwarded
// to its /v1/chat/completions (its own template and tool-call parser apply),
// text to its /v1/completions (with `suffix` for FIM), both streamed by SSE.
// Token counts are estimated (the remote tokenizer is not here).
import { sseEvents, textChunks } from '../remote/sse';
import { AgentError, type AgentModel, type ChatDelta, type ChatRequest, type GenerationResult, type TextRequest, type ToolCall } from './types';

export interface RemoteAgentDeps {
  base(): URL | undefined;
  model(): string | undefined;
  headers(): Record<string, string>;
  timeoutMs(): number;
}

/** Characters per token of code and English for BPE vocabularies like Qwen's and Llama's. */
const CHARS_PER_TOKEN = 3.5;

export class RemoteAgent {
  constructor(private readonly deps: RemoteAgentDeps) {}

  async agentModel(): Promise<AgentModel> {
    const model = this.deps.model();
    if (!this.deps.base() || !model) throw new AgentError('the remote server is not reachable or lists no model', 503, 'model_not_ready');
    return { id: model, name: model, contextLength: 32768, maxOutputTokens: 4096, toolCalling: true };
  }

  async countTokens(text: string): Promise<number> {
    return Math.ceil(text.length / CHARS_PER_TOKEN);
  }

  async chat(request: ChatRequest, onDelta: (d: ChatDelta) => void): Promise<GenerationResult> {
    const body = {
      messages: request.messages,
      ...(request.tools?.length ? { tools: request.tools } : {}),
      max_tokens: request.maxTokens,
      temperature: request.temperature,
      ...(request.topP !== undefined ? { top_p: request.topP } : {}),
      ...(request.seed !== undefined ? { seed: request.seed } : {}),
      ...(request.stop?.length ? { stop: request.stop } : {}),
    };
    const calls = new Map<number, ToolCall>();
    return this.stream('chat/completions', body, request.signal, (choice) => {
      const delta = (choice.delta ?? {}) as { content?: string; tool_calls?: { index?: number; id?: string; function?: { name?: string; arguments?: string } }[] };
      if (delta.content) onDelta({ text: delta.content });
      for (const c of delta.tool_calls ?? []) {
        const i = c.index ?? 0;
        const call = calls.get(i) ?? { id: c.id ?? `call_${i}`, type: 'function' as const, function: { name: '', arguments: '' } };
        if (c.id) call.id = c.id;
        call.function.name += c.function?.name ?? '';
        call.function.arguments += c.function?.arguments ?? '';
        calls.set(i, call);
      }
      return delta.content ?? '';
    }).then((r) => {
      const toolCalls = [...calls.values()];
      if (toolCalls.length) onDelta({ toolCalls });
      return { ...r, toolCalls, finish: toolCalls.length && r.ok ? 'tool_calls' : r.finish };
    });
  }

  text(request: TextRequest, onText: (delta: string) => void): Promise<GenerationResult> {
    const body = {
      prompt: request.prompt,
      ...(request.suffix !== undefined ? { suffix: request.suffix } : {}),
      max_tokens: request.maxTokens,
      temperature: request.temperature,
      ...(request.stop?.length ? { stop: request.stop } : {}),
    };
    return this.stream('completions', body, request.signal, (choice) => {
      const t = typeof choice.text === 'string' ? choice.text : '';
      if (t) onText(t);
      return t;
    });
  }

  private async stream(path: string, body: Record<string, unknown>, signal: AbortSignal, onChoice: (choice: Record<string, unknown>) => string): Promise<GenerationResult> {
    const base = this.deps.base();
    if (!base) throw new AgentError('no remote server (runahead.remote.url)', 503, 'model_not_ready');
    const url = new URL(path, base.href.endsWith('/') ? base : new URL(`${base.href}/`));
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...this.deps.headers() },
        body: JSON.stringify({ ...body, model: this.deps.model(), stream: true, stream_options: { include_usage: true } }),
        signal: AbortSignal.any([signal, AbortSignal.timeout(Math.max(60_000, this.deps.timeoutMs()))]),
      });
    } catch (err) {
      if (signal.aborted) return cancelled('');
      throw new AgentError(`${url}: ${(err as Error).message}`, 502, 'upstream_error');
    }
    if (!res.ok || !res.body) {
      const detail = await res.text().catch(() => '');
      throw new AgentError(`${url} answered ${res.status}: ${detail.slice(0, 300)}`, res.status === 429 ? 429 : 502, 'upstream_error');
    }
    let text = '';
    let finish: GenerationResult['finish'] = 'stop';
    const usage = { promptTokens: 0, completionTokens: 0 };
    try {
      for await (const data of sseEvents(textChunks(res.body))) {
        if (data === '[DONE]') break;
        const chunk = JSON.parse(data) as { choices?: Record<string, unknown>[]; usage?: { prompt_tokens?: number; completion_tokens?: number } };
        if (chunk.usage) Object.assign(usage, { promptTokens: chunk.usage.prompt_tokens ?? 0, completionTokens: chunk.usage.completion_tokens ?? 0 });
        const choice = chunk.choices?.[0];
        if (!choice) continue;
        text += onChoice(choice);
        if (choice.finish_reason === 'length') finish = 'length';
      }
    } catch (err) {
      if (signal.aborted) return cancelled(text);
      return { ok: false, text, toolCalls: [], finish: 'error', error: (err as Error).message, usage };
    }
    if (signal.aborted) return cancelled(text);
    return { ok: true, text, toolCalls: [], finish, usage };
  }
}

function cancelled(text: string): GenerationResult {
  return { ok: false, text, toolCalls: [], finish: 'cancelled', usage: { promptTokens: 0, completionTokens: 0 } };
}
