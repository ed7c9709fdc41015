// The health check: GET /v1/models. It proves the server answers (and takes
// the key), lists what it serves and names it from `owned_by`.
import { endpoint, httpProblem, networkProblem, RemoteProblem, shown } from './problems';

export interface ServerInfo {
  /** Served model ids; empty when the server has no /v1/models (then the model cannot be checked). */
  models: string[];
  listed: boolean;
  /** vLLM, SGLang, llama-server, Ollama, from the first model's `owned_by`; else undefined. */
  serverName?: string;
  /** The first model's context length, where the server says it (vLLM, SGLang: max_model_len; llama-server: meta.n_ctx_train). */
  contextLength?: number;
}

const NAMES: Record<string, string> = { vllm: 'vLLM', sglang: 'SGLang', llamacpp: 'llama-server', library: 'Ollama', ollama: 'Ollama' };

interface ModelEntry {
  id?: unknown;
  owned_by?: unknown;
  max_model_len?: unknown;
  meta?: { n_ctx_train?: unknown };
}

export async function checkServer(base: URL, headers: Record<string, string>, timeoutMs: number): Promise<ServerInfo | RemoteProblem> {
  const url = endpoint(base, '/v1/models');
  let res: Response;
  let body: string;
  try {
    res = await fetch(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
    body = await res.text();
  } catch (err) {
    if ((err as Error)?.name === 'TimeoutError') {
      return new RemoteProblem('timeout', `${shown(base)} did not answer GET /v1/models within ${timeoutMs} ms (runahead.remote.timeoutMs). Is it the right address and is the server up?`);
    }
    return networkProblem(err, base);
  }
  if (res.status === 404 || res.status === 405) return { models: [], listed: false };
  if (!res.ok) return httpProblem(res.status, body, base, '/v1/models', '');
  let data: ModelEntry[];
  try {
    const j = JSON.parse(body) as { data?: unknown };
    if (!Array.isArray(j.data)) throw new Error('no "data" list');
    data = j.data as ModelEntry[];
  } catch (err) {
    return new RemoteProblem('endpoint', `${shown(base)}/v1/models is not an OpenAI model list (${(err as Error).message}): is runahead.remote.url an OpenAI-compatible server?`);
  }
  const models = data.map((m) => m.id).filter((id): id is string => typeof id === 'string');
  const first = data[0];
  const ctx = first?.max_model_len ?? first?.meta?.n_ctx_train;
  return {
    models,
    listed: true,
    serverName: typeof first?.owned_by === 'string' ? NAMES[first.owned_by] : undefined,
    contextLength: typeof ctx === 'number' ? ctx : undefined,
  };
}
