// Renders a chat-completions request through the model's own Jinja chat template, the way vLLM does
// with transformers' apply_chat_template: messages and tools as sent, add_generation_prompt, and
// chat_template_kwargs merged into the template variables.
import { Template } from '@huggingface/jinja';
import type { ChatMessage, ChatTool, ChatToolCall } from '../types.js';

export class ChatTemplateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ChatTemplateError';
  }
}

export interface RenderOptions {
  tools?: ChatTool[] | undefined;
  addGenerationPrompt?: boolean;
  /** Extra template variables (`chat_template_kwargs`, e.g. `{enable_thinking: false}`). */
  kwargs?: Record<string, unknown>;
  bosToken?: string;
  eosToken?: string;
}

export class ChatTemplate {
  private readonly template: Template;

  constructor(readonly source: string) {
    try {
      this.template = new Template(source);
    } catch (err) {
      throw new ChatTemplateError(`the model's chat template does not parse: ${(err as Error).message}`);
    }
  }

  render(messages: ChatMessage[], opts: RenderOptions = {}): string {
    const vars: Record<string, unknown> = {
      bos_token: opts.bosToken ?? '',
      eos_token: opts.eosToken ?? '',
      ...opts.kwargs,
      messages: messages.map(templateMessage),
      add_generation_prompt: opts.addGenerationPrompt ?? true,
    };
    if (opts.tools?.length) vars.tools = opts.tools;
    try {
      return this.template.render(vars);
    } catch (err) {
      throw new ChatTemplateError(`rendering the chat template failed: ${(err as Error).message}`);
    }
  }
}

/**
 * What the template sees for one message: text content as a string (parts joined), reasoning under
 * `reasoning_content` (vLLM accepts `reasoning` too), and null content as '' so templates that
 * concatenate it do not fail.
 */
function templateMessage(m: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { ...m, content: textContent(m) };
  const reasoning = m.reasoning_content ?? (typeof m.reasoning === 'string' ? m.reasoning : undefined);
  delete out.reasoning;
  if (reasoning !== undefined && reasoning !== null) out.reasoning_content = reasoning;
  else delete out.reasoning_content;
  if (m.tool_calls?.length === 0) delete out.tool_calls;
  else if (m.tool_calls) out.tool_calls = m.tool_calls.map(templateToolCall);
  return out;
}

/**
 * Like vLLM, hand templates the arguments as an object, so `tojson` re-renders them in the model's
 * own format: harnesses that re-serialise arguments (gemini-cli, Anthropic `input`, compact JSON)
 * then still produce a prompt that extends the previous call token for token.
 */
function templateToolCall(call: ChatToolCall): ChatToolCall | Record<string, unknown> {
  const args = call.function?.arguments;
  if (typeof args !== 'string') return call;
  try {
    const parsed: unknown = JSON.parse(args);
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed))
      return { ...call, function: { ...call.function, arguments: parsed } };
  } catch {
    // not JSON: the template renders the string as it came
  }
  return call;
}

function textContent(m: ChatMessage): string {
  if (m.content === undefined || m.content === null) return '';
  if (typeof m.content === 'string') return m.content;
  return m.content
    .map((part) => {
      if (part.type === 'text' && typeof part.text === 'string') return part.text;
      throw new ChatTemplateError(`message content part of type '${part.type}' is not supported by the embedded engine (text only)`);
    })
    .join('');
}
