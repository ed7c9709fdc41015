// The model's own chat template (tokenizer_config.json `chat_template`, or
// chat_template.jinja beside it; a GGUF file's tokenizer.chat_template) rendered with @huggingface/jinja, as
// transformers' apply_chat_template does: messages, tools, the generation
// prompt. Which tool-call format the template teaches (Qwen2.5's
// <tool_call> JSON, Llama 3's bare JSON) is read from the template itself.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { isGgufPath } from '../model/modelFiles';
import type { ModelInfo } from '../model/modelInfo';
import { AgentError, type ChatMessage, type ChatTool } from './types';

export type ToolFormat = 'hermes' | 'llama3' | 'none';

export interface ChatTemplate {
  render(messages: ChatMessage[], tools?: ChatTool[]): string;
  toolFormat: ToolFormat;
  /** Special tokens that end an assistant turn in this template (<|im_end|>, <|eot_id|>, …). */
  endTokens: string[];
}

const END_TOKENS = ['<|im_end|>', '<|eot_id|>', '<|eom_id|>', '<|end|>', '<end_of_turn>', '<|endoftext|>'];

function tokenText(t: unknown): string {
  if (typeof t === 'string') return t;
  if (t && typeof t === 'object' && typeof (t as { content?: unknown }).content === 'string') return (t as { content: string }).content;
  return '';
}

/** The chat template of a model read by modelInfo.ts: a GGUF file's own, else its folder's files. */
export async function modelChatTemplate(info: Pick<ModelInfo, 'dir' | 'chatTemplate'>): Promise<ChatTemplate> {
  if (info.chatTemplate) return compileChatTemplate(info.chatTemplate.source, info.chatTemplate.bos, info.chatTemplate.eos, `${info.dir}: tokenizer.chat_template`);
  if (isGgufPath(info.dir)) {
    throw new AgentError(`${info.dir}: no "tokenizer.chat_template" in the file's metadata; chat, agent mode and edits need an instruct model with a chat template. The model loaded is a completion model.`, 400, 'model_not_chat');
  }
  return loadChatTemplate(info.dir);
}

/** Reads the chat template of a model folder; an error naming the files when there is none. */
export async function loadChatTemplate(dir: string): Promise<ChatTemplate> {
  const configPath = join(dir, 'tokenizer_config.json');
  let config: Record<string, unknown> = {};
  try {
    config = JSON.parse(await readFile(configPath, 'utf8'));
  } catch {
    // No tokenizer_config.json: the .jinja file may still be there.
  }
  let source: string | undefined;
  const field = config.chat_template;
  if (typeof field === 'string') source = field;
  else if (Array.isArray(field)) {
    const named = field.find((t) => t?.name === 'tool_use') ?? field.find((t) => t?.name === 'default') ?? field[0];
    if (typeof named?.template === 'string') source = named.template;
  }
  if (!source) source = await readFile(join(dir, 'chat_template.jinja'), 'utf8').catch(() => undefined);
  if (!source) {
    throw new AgentError(
      `${configPath}: no "chat_template" (nor ${join(dir, 'chat_template.jinja')}); chat, agent mode and edits need an instruct model with a chat template, such as Qwen2.5-Coder-7B-Instruct. The model loaded is a completion model.`,
      400,
      'model_not_chat',
    );
  }
  return compileChatTemplate(source, tokenText(config.bos_token), tokenText(config.eos_token), configPath);
}

export function compileChatTemplate(source: string, bosToken = '', eosToken = '', where = 'chat_template'): ChatTemplate {
  let template: Template;
  try {
    template = new Template(source);
  } catch (err) {
    throw new AgentError(`${where}: the chat template does not parse (${(err as Error).message})`, 400, 'bad_chat_template');
  }
  const toolFormat: ToolFormat = source.includes('<tool_call>') ? 'hermes' : /"parameters"|ipython|python_tag/.test(source) ? 'llama3' : 'none';
  return {
    toolFormat,
    endTokens: END_TOKENS.filter((t) => source.includes(t) || t === eosToken),
    render(messages, tools) {
      try {
        return template.render({
          messages: messages.map(forTemplate),
          tools: tools?.length ? tools : undefined,
          add_generation_prompt: true,
          bos_token: bosToken,
          eos_token: eosToken,
        });
      } catch (err) {
        throw new AgentError(`${where}: rendering the chat template failed (${(err as Error).message})`, 400, 'bad_chat_template');
      }
    },
  };
}

/** Templates read tool-call arguments as objects (transformers passes dicts), and content as text. */
function forTemplate(m: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content ?? '' };
  if (m.tool_call_id) out.tool_call_id = m.tool_call_id;
  if (m.name) out.name = m.name;
  if (m.tool_calls?.length) {
    out.tool_calls = m.tool_calls.map((c) => ({
      id: c.id,
      type: 'function',
      function: { name: c.function.name, arguments: parseArguments(c.function.arguments) },
    }));
  }
  return out;
}

function parseArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
