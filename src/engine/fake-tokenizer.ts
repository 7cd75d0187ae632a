// A deterministic byte-level tokenizer with ChatML specials, used by the fake engine. It is not a
// real model's tokenizer; what matters is that rendering is stable, so a later call's prompt extends
// an earlier call's prompt + completion token for token, exactly as with a real engine.
import type { ChatMessage, ChatToolCall } from '../capture/types.js';

export const FAKE_SPECIALS = {
  endOfText: 151643,
  imStart: 151644,
  imEnd: 151645,
  toolCallStart: 151657,
  toolCallEnd: 151658,
} as const;

const SPECIAL_TEXT: Record<number, string> = {
  [FAKE_SPECIALS.endOfText]: '<|endoftext|>',
  [FAKE_SPECIALS.imStart]: '<|im_start|>',
  [FAKE_SPECIALS.imEnd]: '<|im_end|>',
  [FAKE_SPECIALS.toolCallStart]: '<tool_call>',
  [FAKE_SPECIALS.toolCallEnd]: '</tool_call>',
};
const SPECIAL_IDS = new Map(Object.entries(SPECIAL_TEXT).map(([id, text]) => [text, Number(id)]));
const SPECIAL_PATTERN = /(<\|endoftext\|>|<\|im_start\|>|<\|im_end\|>|<tool_call>|<\/tool_call>)/;

/** Text -> ids: specials map to their ids, everything else to its UTF-8 bytes (ids 0..255). */
export function fakeEncode(text: string): number[] {
  const ids: number[] = [];
  for (const piece of text.split(SPECIAL_PATTERN)) {
    if (piece === '') continue;
    const special = SPECIAL_IDS.get(piece);
    if (special !== undefined) ids.push(special);
    else for (const byte of Buffer.from(piece, 'utf8')) ids.push(byte);
  }
  return ids;
}

export function tokenBytes(id: number): number[] {
  const special = SPECIAL_TEXT[id];
  return special !== undefined ? [...Buffer.from(special, 'utf8')] : [id & 0xff];
}

function contentText(content: ChatMessage['content']): string {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  return content.map((part) => (part.type === 'text' ? (part.text ?? '') : `<${part.type}>`)).join('');
}

/** Canonical rendering of one tool call, shared by the template and by sampled completions. */
export function renderToolCall(call: Pick<ChatToolCall, 'function'>): string {
  let args: unknown = call.function.arguments;
  try {
    args = JSON.parse(call.function.arguments);
  } catch {
    // keep the raw string: the template renders what the harness sent
  }
  return `<tool_call>\n${JSON.stringify({ name: call.function.name, arguments: args })}\n</tool_call>`;
}

/** The assistant text the model emits for a turn (before <|im_end|>); thinking comes first, as with Qwen3. */
export function renderAssistantBody(message: Pick<ChatMessage, 'content' | 'tool_calls'> & { reasoning?: unknown }): string {
  const parts: string[] = [];
  if (typeof message.reasoning === 'string' && message.reasoning) parts.push(`<think>\n${message.reasoning}\n</think>\n`);
  const text = contentText(message.content);
  if (text) parts.push(text);
  for (const call of message.tool_calls ?? []) parts.push(renderToolCall(call));
  return parts.join('\n');
}

/** ChatML rendering in the spirit of Qwen's template; tools go into the system block. */
export function renderChatPrompt(messages: ChatMessage[], tools: unknown[] | undefined): string {
  let out = '';
  let rest = messages;
  const first = messages[0];
  const toolBlock = tools && tools.length ? `\n\n# Tools\n<tools>\n${tools.map((t) => JSON.stringify(t)).join('\n')}\n</tools>` : '';
  if (first && first.role === 'system') {
    out += `<|im_start|>system\n${contentText(first.content)}${toolBlock}<|im_end|>\n`;
    rest = messages.slice(1);
  } else if (toolBlock) {
    out += `<|im_start|>system\n${toolBlock.trimStart()}<|im_end|>\n`;
  }
  for (const message of rest) {
    if (message.role === 'assistant') out += `<|im_start|>assistant\n${renderAssistantBody(message)}<|im_end|>\n`;
    else if (message.role === 'tool')
      out += `<|im_start|>user\n<tool_response>\n${contentText(message.content)}\n</tool_response><|im_end|>\n`;
    else out += `<|im_start|>${message.role}\n${contentText(message.content)}<|im_end|>\n`;
  }
  return `${out}<|im_start|>assistant\n`;
}
