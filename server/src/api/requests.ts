// OpenAI request bodies read into the agent's requests, with errors that name
// the field and what was expected.
import type { ChatMessage, ChatTool } from '../chat/types';
import { ApiError } from './errors';

type Body = Record<string, unknown>;

const bad = (param: string, expected: string) => new ApiError(400, `${param}: expected ${expected}`, 'invalid_request_error', param);

export function num(body: Body, key: string, fallback: number, min: number, max: number): number {
  const v = body[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) throw bad(key, `a number from ${min} to ${max}`);
  return v;
}

export function optNum(body: Body, key: string, min: number, max: number): number | undefined {
  return body[key] === undefined || body[key] === null ? undefined : num(body, key, 0, min, max);
}

// OpenAI allows 4; vLLM, SGLang and llama-server take more, and so do we (a FIM template's
// stops plus the client's own: Runahead's remote source sends up to a dozen).
const MAX_STOPS = 32;

export function stops(body: Body): string[] | undefined {
  const v = body.stop;
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return [v];
  if (Array.isArray(v) && v.length <= MAX_STOPS && v.every((s) => typeof s === 'string')) return v as string[];
  throw bad('stop', `a string or up to ${MAX_STOPS} strings`);
}

export function promptText(body: Body): string {
  const p = body.prompt;
  if (typeof p === 'string') return p;
  if (Array.isArray(p) && p.length === 1 && typeof p[0] === 'string') return p[0];
  throw bad('prompt', 'a string (one prompt per request)');
}

function contentText(content: unknown, param: string): string | null {
  if (content === null || content === undefined) return null;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part, i) => {
        if (part?.type === 'text' && typeof part.text === 'string') return part.text;
        throw bad(`${param}[${i}]`, 'a text part (this model reads text only)');
      })
      .join('');
  }
  throw bad(param, 'a string or an array of text parts');
}

export function messages(body: Body): ChatMessage[] {
  const list = body.messages;
  if (!Array.isArray(list) || list.length === 0) throw bad('messages', 'a non-empty array');
  return list.map((m, i) => {
    const role = m?.role === 'developer' ? 'system' : m?.role;
    if (!['system', 'user', 'assistant', 'tool'].includes(role)) throw bad(`messages[${i}].role`, 'system, developer, user, assistant or tool');
    const out: ChatMessage = { role, content: contentText(m.content, `messages[${i}].content`) };
    if (Array.isArray(m.tool_calls)) {
      out.tool_calls = m.tool_calls.map((c: any, j: number) => {
        if (typeof c?.function?.name !== 'string') throw bad(`messages[${i}].tool_calls[${j}].function.name`, 'a string');
        const args = c.function.arguments;
        return { id: String(c.id ?? `call_${j}`), type: 'function', function: { name: c.function.name, arguments: typeof args === 'string' ? args : JSON.stringify(args ?? {}) } };
      });
    }
    if (typeof m.tool_call_id === 'string') out.tool_call_id = m.tool_call_id;
    if (typeof m.name === 'string') out.name = m.name;
    return out;
  });
}

export function tools(body: Body): ChatTool[] | undefined {
  const list = body.tools;
  if (list === undefined || list === null || body.tool_choice === 'none') return undefined;
  if (!Array.isArray(list)) throw bad('tools', 'an array of {type: "function", function: {name, description, parameters}}');
  return list.map((t, i) => {
    if (t?.type !== 'function' || typeof t.function?.name !== 'string') throw bad(`tools[${i}]`, '{type: "function", function: {name, …}}');
    return { type: 'function', function: { name: t.function.name, description: t.function.description, parameters: t.function.parameters } };
  });
}
