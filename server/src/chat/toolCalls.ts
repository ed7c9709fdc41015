// Tool calls back out of the model's text, in the format its chat template
// taught it: Qwen2.5 (Hermes) `<tool_call>{"name":…,"arguments":…}</tool_call>`
// blocks, or Llama 3's bare `{"name":…,"parameters":…}` (after an optional
// <|python_tag|>). While streaming, text is passed on until a call may be
// starting; from there it is held and parsed at the end.
import { randomBytes } from 'node:crypto';
import type { ToolFormat } from './template';
import type { ToolCall } from './types';

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';
const PYTHON_TAG = '<|python_tag|>';

function callId(): string {
  return `call_${randomBytes(9).toString('base64url')}`;
}

function toCall(value: unknown): ToolCall | undefined {
  if (!value || typeof value !== 'object') return undefined;
  const v = value as { name?: unknown; arguments?: unknown; parameters?: unknown };
  if (typeof v.name !== 'string') return undefined;
  const args = v.arguments ?? v.parameters ?? {};
  return { id: callId(), type: 'function', function: { name: v.name, arguments: typeof args === 'string' ? args : JSON.stringify(args) } };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The text without its tool calls, and the calls. A block that does not parse stays text. */
export function parseToolCalls(text: string, format: ToolFormat): { text: string; calls: ToolCall[] } {
  if (format === 'hermes') {
    const calls: ToolCall[] = [];
    const rest = text.replace(/<tool_call>\s*([\s\S]*?)\s*(?:<\/tool_call>|$)/g, (block, body: string) => {
      const call = toCall(parseJson(body));
      if (!call) return block;
      calls.push(call);
      return '';
    });
    return { text: calls.length ? rest.trim() : text, calls };
  }
  if (format === 'llama3') {
    const body = text.trim().replace(PYTHON_TAG, '').trim();
    if (body.startsWith('{')) {
      // One call, or several separated by ';' (Llama 3.2's habit).
      const calls = body.split(/;\s*(?=\{)/).map((part) => toCall(parseJson(part)));
      if (calls.length && calls.every((c) => c)) return { text: '', calls: calls as ToolCall[] };
    }
  }
  return { text, calls: [] };
}

/** Streams text while holding back what may be the start of a tool call. */
export class ToolCallStream {
  private text = '';
  private sent = 0;
  private holding = false;

  constructor(
    private readonly format: ToolFormat,
    private readonly enabled: boolean,
  ) {}

  /** The text so far; returns what may be shown now. */
  push(textSoFar: string): string {
    this.text = textSoFar;
    if (!this.enabled || this.format === 'none') return this.release(this.text.length);
    if (this.holding) return '';
    if (this.format === 'llama3' && /^\s*(\{|<\|python_tag\|>)/.test(this.text)) {
      this.holding = true;
      return '';
    }
    if (this.format === 'llama3' && /^\s*$/.test(this.text)) return '';
    if (this.format === 'hermes') {
      const at = this.text.indexOf(OPEN, this.sent);
      if (at >= 0) {
        this.holding = true;
        return this.release(at);
      }
      // Keep back a tail that could grow into '<tool_call>'.
      for (let k = Math.min(OPEN.length - 1, this.text.length - this.sent); k > 0; k--) {
        if (OPEN.startsWith(this.text.slice(this.text.length - k))) return this.release(this.text.length - k);
      }
    }
    return this.release(this.text.length);
  }

  /** At the end: the text not yet shown (tool calls removed) and the calls. */
  finish(): { text: string; calls: ToolCall[] } {
    if (!this.enabled || this.format === 'none') return { text: this.release(this.text.length), calls: [] };
    const held = this.text.slice(this.sent);
    const { text, calls } = parseToolCalls(held, this.format);
    this.sent = this.text.length;
    return { text: calls.length ? text.replace(CLOSE, '') : held, calls };
  }

  private release(to: number): string {
    if (to <= this.sent) return '';
    const out = this.text.slice(this.sent, to);
    this.sent = to;
    return out;
  }
}
