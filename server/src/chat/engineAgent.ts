// Agent work on the local engine: a chat turn rendered with the model's own
// template, or a plain / fill-in-the-middle text completion, tokenized here
// and generated as a pre-emptible run (inlineFirst.ts), so inline
// completions stay first. Speculation is the engine's (`speculation: auto`
// drafts by prompt lookup): an edit's prompt holds the selection and the
// file, so the rewrite is drafted from them.
import { basename } from 'node:path';
import type { EngineConnection } from '../engine/connection';
import type { LoadReport } from '../engine/protocol';
import type { ModelContext } from '../model/modelState';
import { StreamDecoder } from '../model/tokenizer';
import { InlineFirst, type SegmentedResult } from './inlineFirst';
import { modelChatTemplate, type ChatTemplate } from './template';
import { ToolCallStream } from './toolCalls';
import { AgentError, type AgentModel, type ChatDelta, type ChatRequest, type GenerationResult, type TextRequest } from './types';

export interface EngineAgentDeps {
  connect(): Promise<EngineConnection | undefined>;
  model(): ModelContext | undefined;
  loadReport(): LoadReport | undefined;
}

export class EngineAgent {
  readonly inlineFirst = new InlineFirst();
  private readonly templates = new WeakMap<ModelContext, Promise<ChatTemplate>>();

  constructor(private readonly deps: EngineAgentDeps) {}

  async agentModel(): Promise<AgentModel> {
    const model = this.requireModel();
    const contextLength = this.contextLength(model);
    let problem: string | undefined;
    let toolCalling = false;
    try {
      toolCalling = (await this.template(model)).toolFormat !== 'none';
    } catch (err) {
      problem = (err as Error).message;
    }
    return { id: basename(model.info.dir), name: basename(model.info.dir), contextLength, maxOutputTokens: Math.min(4096, Math.floor(contextLength / 2)), toolCalling, problem };
  }

  async countTokens(text: string): Promise<number> {
    return this.requireModel().info.tokenizer.encode(text).length;
  }

  async chat(request: ChatRequest, onDelta: (d: ChatDelta) => void): Promise<GenerationResult> {
    const model = this.requireModel();
    const template = await this.template(model);
    const tokenizer = model.info.tokenizer;
    const prompt = tokenizer.encode(template.render(request.messages, request.tools));
    const endIds = template.endTokens.map((t) => tokenizer.tokenId(t)).filter((x): x is number => x !== undefined);
    const calls = new ToolCallStream(template.toolFormat, (request.tools?.length ?? 0) > 0);
    const r = await this.generate(model, prompt, request, endIds, (text) => {
      const shown = calls.push(text);
      if (shown) onDelta({ text: shown });
    });
    const end = calls.finish();
    if (end.text) onDelta({ text: end.text });
    if (end.calls.length) onDelta({ toolCalls: end.calls });
    const text = r.text.includes('<tool_call>') || end.calls.length ? stripCalls(r.text, end.calls.length > 0) : r.text;
    return { ...r, text, toolCalls: end.calls, finish: end.calls.length && r.ok ? 'tool_calls' : r.finish };
  }

  async text(request: TextRequest, onText: (delta: string) => void): Promise<GenerationResult> {
    const model = this.requireModel();
    const prompt =
      request.suffix !== undefined
        ? (await model.fim.build({ prefix: request.prompt, suffix: request.suffix, path: '', extra: [], budget: this.contextLength(model) - request.maxTokens - 1 })).ids
        : model.info.tokenizer.encode(request.prompt);
    let sent = 0;
    return this.generate(model, prompt, request, [], (text) => {
      onText(text.slice(sent));
      sent = text.length;
    });
  }

  private async generate(
    model: ModelContext,
    prompt: number[],
    request: Pick<ChatRequest, 'maxTokens' | 'temperature' | 'topP' | 'seed' | 'stop' | 'signal'>,
    endIds: number[],
    onText: (textSoFar: string) => void,
  ): Promise<GenerationResult> {
    const contextLength = this.contextLength(model);
    if (prompt.length >= contextLength) {
      throw new AgentError(`the prompt is ${prompt.length} tokens; the model's context holds ${contextLength}`, 400, 'context_length_exceeded');
    }
    const decoder = new StreamDecoder(model.info.tokenizer);
    const stop = request.stop?.filter((s) => s.length > 0) ?? [];
    // A stop string ends the generation like a client that went away, but as 'stop'.
    const job = new AbortController();
    const follow = () => job.abort();
    request.signal.addEventListener('abort', follow);
    if (request.signal.aborted) job.abort();
    let text = '';
    let stoppedAt: number | undefined;
    let r: SegmentedResult;
    try {
      r = await this.inlineFirst.run(
        () => this.deps.connect(),
        prompt,
        {
          max_tokens: Math.max(1, Math.min(request.maxTokens, contextLength - prompt.length)),
          temperature: request.temperature,
          ...(request.topP !== undefined ? { top_p: request.topP } : {}),
          ...(request.seed !== undefined ? { seed: request.seed } : {}),
          stop: [...new Set([...model.info.stopTokens, ...endIds])],
        },
        job.signal,
        (ids) => {
          if (stoppedAt !== undefined) return;
          text += decoder.push(ids);
          const at = firstStop(text, stop);
          if (at !== undefined) {
            stoppedAt = at;
            text = text.slice(0, at);
            job.abort();
          }
          onText(text);
        },
      );
    } finally {
      request.signal.removeEventListener('abort', follow);
    }
    if (stoppedAt === undefined) {
      const rest = decoder.flush();
      if (rest) onText((text += rest));
    }
    const finish = stoppedAt !== undefined ? 'stop' : r.finish === 'stop' || r.finish === 'length' ? r.finish : r.finish === 'context' ? 'length' : r.finish === 'cancelled' ? 'cancelled' : 'error';
    return {
      ok: finish === 'stop' || finish === 'length',
      text,
      toolCalls: [],
      finish,
      error: r.error,
      usage: { promptTokens: prompt.length, completionTokens: r.tokens.length },
      stats: { acceptedPerStep: r.acceptedPerStep, msPerToken: r.msPerToken, preempted: r.preempted, steps: r.steps },
    };
  }

  private requireModel(): ModelContext {
    const model = this.deps.model();
    if (!model) throw new AgentError('the model is not loaded yet', 503, 'model_not_ready');
    return model;
  }

  private template(model: ModelContext): Promise<ChatTemplate> {
    let t = this.templates.get(model);
    if (!t) this.templates.set(model, (t = modelChatTemplate(model.info)));
    return t;
  }

  private contextLength(model: ModelContext): number {
    return this.deps.loadReport()?.context_length ?? model.info.contextLength;
  }
}

function firstStop(text: string, stops: string[]): number | undefined {
  let first: number | undefined;
  for (const s of stops) {
    const at = text.indexOf(s);
    if (at >= 0 && (first === undefined || at < first)) first = at;
  }
  return first;
}

function stripCalls(text: string, found: boolean): string {
  return found ? text.replace(/<tool_call>[\s\S]*?(<\/tool_call>|$)/g, '').trim() : text;
}
