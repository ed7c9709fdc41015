// What can go wrong with a remote server, each as a message that names the
// URL and says what to do. `kind` lets the extension offer the right button
// and the source tell a lasting problem (a wrong URL, a refused key) from a
// passing one (a busy server, a dropped connection).
export type ProblemKind =
  | 'url' // not an http(s) URL
  | 'refused' // nothing listens there
  | 'unreachable' // DNS, routing, reset while connecting
  | 'tls' // certificate not trusted
  | 'auth' // 401/403
  | 'model' // the model is not served
  | 'endpoint' // no /v1/completions
  | 'busy' // 429/503 past the deadline
  | 'timeout' // no answer within runahead.remote.timeoutMs
  | 'dropped' // the connection closed mid-stream
  | 'server'; // any other error answer

export class RemoteProblem extends Error {
  constructor(
    readonly kind: ProblemKind,
    message: string,
    readonly httpStatus?: number,
  ) {
    super(message);
  }

  /** Problems that stay until settings, the server or the key change; the others pass. */
  get lasting(): boolean {
    return ['url', 'refused', 'unreachable', 'tls', 'auth', 'model', 'endpoint'].includes(this.kind);
  }
}

const EXAMPLES = 'e.g. http://127.0.0.1:30000 (SGLang), :8000 (vLLM), :8080 (llama-server), :11434 (Ollama)';

/** The server's base URL from runahead.remote.url (a trailing `/` or `/v1` dropped), or the problem with it. */
export function parseBaseUrl(raw: string): URL | RemoteProblem {
  if (!raw) return new RemoteProblem('url', `runahead.remote.url is empty: set it to your server's address, ${EXAMPLES}`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return new RemoteProblem('url', `runahead.remote.url is ${JSON.stringify(raw)}: not a URL; expected http:// or https:// and a host, ${EXAMPLES}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return new RemoteProblem('url', `runahead.remote.url is ${JSON.stringify(raw)}: expected an http:// or https:// URL, ${EXAMPLES}`);
  }
  if (url.username || url.password) {
    return new RemoteProblem('url', `runahead.remote.url has a user or password in it: remove them and set the key with "Runahead: Set Remote API Key" (settings are not secret)`);
  }
  url.pathname = url.pathname.replace(/\/+$/, '').replace(/\/v1$/, '');
  url.search = '';
  url.hash = '';
  return url;
}

/** `base` + `path` (`/v1/...`), keeping a path prefix of the base (a proxy's /llm). */
export function endpoint(base: URL, path: string): string {
  return `${base.origin}${base.pathname.replace(/\/+$/, '')}${path}`;
}

/** The URL as the user wrote it, for messages (no query, no credentials). */
export function shown(base: URL): string {
  return `${base.origin}${base.pathname.replace(/\/+$/, '')}`;
}

const TLS_CODES = /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER|ERR_TLS|SSL/;

/** A fetch that threw (no HTTP answer) as a problem. */
export function networkProblem(err: unknown, base: URL): RemoteProblem {
  const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
  const code = cause?.code ?? (err as { code?: string })?.code ?? '';
  const at = shown(base);
  if (code === 'ECONNREFUSED') return new RemoteProblem('refused', `cannot connect to ${at}: connection refused. Is the server running and listening there? Check runahead.remote.url`);
  if (TLS_CODES.test(code)) {
    return new RemoteProblem('tls', `TLS to ${at} failed (${code}): the server's certificate is not trusted. For a private CA start VS Code with NODE_EXTRA_CA_CERTS=/path/to/ca.pem`);
  }
  if (code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'UND_ERR_CLOSED') {
    return new RemoteProblem('dropped', `${at} closed the connection (${code})`);
  }
  const detail = code || cause?.message || (err as Error)?.message || String(err);
  return new RemoteProblem('unreachable', `cannot reach ${at} (${detail}). Check runahead.remote.url and the network`);
}

/** The message of an error answer: OpenAI's `{"error":{"message"}}`, vLLM's `{"object":"error","message"}`, `{"error":"..."}`, `{"detail":...}` or the text. */
export function errorText(body: string): string {
  try {
    const j = JSON.parse(body) as Record<string, unknown>;
    const e = j.error;
    if (typeof e === 'string') return e;
    if (e && typeof e === 'object' && typeof (e as { message?: unknown }).message === 'string') return (e as { message: string }).message;
    if (typeof j.message === 'string') return j.message;
    if (typeof j.detail === 'string') return j.detail;
  } catch {
    // not JSON: the text itself
  }
  return body.trim().slice(0, 300);
}

const MODEL_MISSING = /model.*(not found|does not exist|not exist|unknown|not served|try pulling|invalid)|(unknown|invalid|no such) model/i;

/** An HTTP error answer of `path` as a problem. */
export function httpProblem(status: number, body: string, base: URL, path: string, model: string): RemoteProblem {
  const at = shown(base);
  const text = errorText(body);
  const said = text ? `: ${text}` : '';
  if (status === 401 || status === 403) {
    return new RemoteProblem('auth', `${at} refused the request (HTTP ${status}${said}): set the key with "Runahead: Set Remote API Key", or check runahead.remote.headers`, status);
  }
  if ((status === 404 || status === 400) && MODEL_MISSING.test(text)) {
    return new RemoteProblem('model', `${at} does not serve model ${JSON.stringify(model)} (HTTP ${status}${said}): set runahead.remote.model to a model it serves`, status);
  }
  if (status === 404 || status === 405 || status === 501) {
    return new RemoteProblem('endpoint', `${at} has no ${path} (HTTP ${status}${said}): Runahead needs an OpenAI-compatible server (SGLang, vLLM, llama-server, Ollama); check runahead.remote.url`, status);
  }
  if (status === 429 || status === 503) return new RemoteProblem('busy', `${at} is busy (HTTP ${status}${said})`, status);
  return new RemoteProblem('server', `${at} answered HTTP ${status} to ${path}${said}`, status);
}

/** Retry-After (seconds or an HTTP date) in ms, if the answer has one. */
export function retryAfterMs(header: string | null, now = Date.now()): number | undefined {
  if (!header) return undefined;
  const secs = Number(header);
  if (Number.isFinite(secs)) return Math.max(0, secs * 1000);
  const at = Date.parse(header);
  return Number.isFinite(at) ? Math.max(0, at - now) : undefined;
}
