// Agent work as every front end sees it (the LSP chat requests behind VS
// Code's model picker and edit-with-instruction, and the local HTTP API):
// one queue in front of the source, whichever source the settings chose.
import type { CompletionSource } from '../completion/source';
import { WorkQueue } from './queue';
import { AgentError, type AgentBackend, type AgentModel, type ChatDelta, type ChatRequest, type GenerationResult, type TextRequest } from './types';

export const DEFAULT_MAX_QUEUE = 4;

export class Agent {
  readonly queue: WorkQueue;
  maxQueue = DEFAULT_MAX_QUEUE;

  constructor(private readonly source: () => CompletionSource | undefined) {
    this.queue = new WorkQueue(() => this.maxQueue);
  }

  model(): Promise<AgentModel> {
    return this.ready().agentModel();
  }

  countTokens(text: string): Promise<number> {
    return this.ready().countTokens(text);
  }

  chat(request: ChatRequest, onDelta: (d: ChatDelta) => void): Promise<GenerationResult> {
    return this.queue.run(request.signal, () => this.ready().chat(request, onDelta));
  }

  text(request: TextRequest, onText: (delta: string) => void): Promise<GenerationResult> {
    return this.queue.run(request.signal, () => this.ready().text(request, onText));
  }

  private ready(): AgentBackend {
    const agent = this.source()?.agent;
    if (!agent) throw new AgentError('no model is running', 503, 'model_not_ready');
    return agent;
  }
}
