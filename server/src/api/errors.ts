// Errors in OpenAI's JSON shape: {"error": {message, type, param, code}}, so
// that OpenAI clients raise their usual exceptions (AuthenticationError,
// RateLimitError, …) with our message.
import type { ServerResponse } from 'node:http';
import { QueueFullError } from '../chat/queue';
import { AgentError } from '../chat/types';

const TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  404: 'not_found_error',
  405: 'invalid_request_error',
  413: 'invalid_request_error',
  429: 'rate_limit_error',
  503: 'server_error',
};

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string,
    readonly param: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** Any error thrown while serving, as the ApiError the client is told. */
export function asApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof QueueFullError) return new ApiError(429, err.message, err.code, null, { 'retry-after': String(err.retryAfterS) });
  if (err instanceof AgentError) return new ApiError(err.status, err.message, err.code);
  return new ApiError(500, err instanceof Error ? err.message : String(err), 'internal_error');
}

export function sendError(res: ServerResponse, err: ApiError): void {
  if (res.headersSent) {
    if (!res.writableEnded) res.end();
    return;
  }
  const body = JSON.stringify({ error: { message: err.message, type: TYPES[err.status] ?? 'server_error', param: err.param, code: err.code } });
  res.writeHead(err.status, { 'content-type': 'application/json', ...err.headers });
  res.end(body);
}
