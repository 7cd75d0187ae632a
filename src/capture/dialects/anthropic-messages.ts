// Anthropic Messages (docs/capture-protocol.md §7.2, stream §8.3).
import {
  DialectError,
  type ChatContentPart,
  type ChatMessage,
  type ChatRequest,
  type ChatResponse,
  type ChatTool,
  type ChatToolCall,
  type Dialect,
  type DialectContext,
  type JsonObject,
  type SseEvent,
} from '../types.js';
import {
  bodyModel,
  bodyStream,
  cachedTokens,
  contentText,
  dataUrl,
  enableThinking,
  firstChoice,
  isObject,
  normalizeChatRequest,
  parseArguments,
  parseDataUrl,
  reasoningText,
  requireObjects,
  toolCallsOf,
} from './common.js';
import { anthropicSignature } from './reasoning.js';

// claude-code's first system line carries a per-request hash (cch=...), which would break prefix matching.
const BILLING_HEADER = /^\s*x-anthropic-billing-header:[^\n]*\n?/i;
const DEFAULT_MODEL = 'claude-3';

const STOP_REASONS: Record<string, string> = {
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
  content_filter: 'refusal',
  stop_sequence: 'stop_sequence',
};

type Block = JsonObject;

export class AnthropicMessagesDialect implements Dialect {
  readonly name = 'anthropic_messages' as const;

  readonly clientModel = bodyModel;
  readonly wantsStream = bodyStream;

  toChat(body: JsonObject, ctx: DialectContext): ChatRequest {
    const messages: ChatMessage[] = [];
    if (body.system !== undefined && body.system !== null) {
      if (typeof body.system !== 'string' && !Array.isArray(body.system))
        throw new DialectError('system must be a string or an array of text blocks');
      const system = systemText(body.system);
      if (system) messages.push({ role: 'system', content: system });
    }
    const input = requireObjects(body.messages, 'messages');
    input.forEach((m, i) => messages.push(...convertMessage(m, i)));

    const request: ChatRequest = { messages, max_tokens: typeof body.max_tokens === 'number' ? body.max_tokens : 4096 };
    if (typeof body.model === 'string') request.model = body.model;
    for (const key of ['temperature', 'top_p', 'top_k']) if (body[key] !== undefined) request[key] = body[key];
    if (body.stop_sequences !== undefined) request.stop = body.stop_sequences;
    if (body.stream === true) request.stream = true;
    if (isObject(body.thinking) && (body.thinking.type === 'enabled' || body.thinking.type === 'adaptive')) enableThinking(request);

    if (body.tools !== undefined && body.tools !== null) {
      const tools = convertTools(requireObjects(body.tools, 'tools'));
      // claude-code sends tools: [] on compaction calls; tool_choice without tools is a 400 upstream.
      if (tools.length) {
        request.tools = tools;
        const choice = isObject(body.tool_choice) ? body.tool_choice : { type: 'auto' };
        request.tool_choice = convertToolChoice(choice);
        if (choice.disable_parallel_tool_use === true) request.parallel_tool_calls = false;
      }
    }
    return normalizeChatRequest(request, ctx.servedModel);
  }

  fromChat(response: ChatResponse, ctx: DialectContext): JsonObject {
    const choice = firstChoice(response);
    const content: Block[] = [];
    const reasoning = reasoningText(choice.message);
    if (reasoning) content.push({ type: 'thinking', thinking: reasoning, signature: anthropicSignature(reasoning) });
    content.push(...chatContentToBlocks(choice.message.content));
    toolCallsOf(choice.message).forEach((call, i) => content.push(toolUseBlock(call, i)));
    if (!content.length) content.push({ type: 'text', text: '' });
    const { stop_reason, stop_sequence } = stopReason(choice, ctx.request);
    return {
      id: messageId(response),
      type: 'message',
      role: 'assistant',
      model: ctx.clientModel ?? DEFAULT_MODEL,
      content,
      stop_reason,
      stop_sequence,
      usage: anthropicUsage(response),
    };
  }

  /** §8.3: thinking block, text block, one block per tool call, message_delta, message_stop. */
  streamEvents(response: ChatResponse, ctx: DialectContext): SseEvent[] {
    const message = this.fromChat(response, ctx);
    const usage = message.usage as JsonObject;
    const events: SseEvent[] = [];
    const emit = (type: string, payload: JsonObject = {}) => events.push({ event: type, data: { type, ...payload } });
    emit('message_start', {
      message: { ...message, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 0 } },
    });
    (message.content as Block[]).forEach((block, index) => {
      if (block.type === 'thinking') {
        emit('content_block_start', { index, content_block: { type: 'thinking', thinking: '', signature: '' } });
        emit('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: block.thinking } });
        emit('content_block_delta', { index, delta: { type: 'signature_delta', signature: block.signature } });
      } else if (block.type === 'text') {
        emit('content_block_start', { index, content_block: { type: 'text', text: '' } });
        if (block.text) emit('content_block_delta', { index, delta: { type: 'text_delta', text: block.text } });
      } else if (block.type === 'tool_use') {
        emit('content_block_start', { index, content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} } });
        emit('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) } });
      } else {
        emit('content_block_start', { index, content_block: block });
      }
      emit('content_block_stop', { index });
    });
    emit('message_delta', { delta: { stop_reason: message.stop_reason, stop_sequence: message.stop_sequence }, usage });
    emit('message_stop');
    return events;
  }

  errorBody(status: number, message: string): unknown {
    return { type: 'error', error: { type: anthropicErrorType(status), message } };
  }

  streamErrorEvent(status: number, message: string): SseEvent {
    return { event: 'error', data: { type: 'error', error: { type: anthropicErrorType(status), message } } };
  }
}

export function anthropicErrorType(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 413) return 'request_too_large';
  if (status === 429) return 'rate_limit_error';
  if (status === 529) return 'overloaded_error';
  if (status >= 500) return 'api_error';
  return 'invalid_request_error';
}

function messageId(response: ChatResponse): string {
  return `msg_${response.id}`;
}

/** Text of a string or a list of blocks (text blocks, and the text inside nested tool results). */
function blocksText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const parts: string[] = [];
  for (const block of content) {
    if (typeof block === 'string') parts.push(block);
    else if (isObject(block) && block.type === 'text' && typeof block.text === 'string') parts.push(block.text);
  }
  return parts.join('\n');
}

/** System text without claude-code's billing-header line (a block of its own, or the first line). */
function systemText(system: string | unknown[]): string {
  if (typeof system === 'string') return system.replace(BILLING_HEADER, '');
  const blocks = system.filter((b) => typeof b === 'string' || (isObject(b) && b.type === 'text' && typeof b.text === 'string'));
  const first = blocks[0];
  const firstText = typeof first === 'string' ? first : isObject(first) ? String(first.text) : '';
  if (BILLING_HEADER.test(firstText)) {
    const rest = firstText.replace(BILLING_HEADER, '');
    blocks.splice(0, 1, ...(rest.trim() ? [rest] : []));
  }
  return blocksText(blocks);
}

function convertMessage(m: JsonObject, i: number): ChatMessage[] {
  const role = m.role;
  if (typeof role !== 'string') throw new DialectError(`messages[${i}].role must be a string`);
  const content = m.content;
  if (typeof content === 'string') return [{ role, content }];
  if (content === undefined || content === null) return [{ role, content: '' }];
  const blocks = requireObjects(content, `messages[${i}].content`);
  if (role === 'assistant') return [assistantMessage(blocks, i)];
  if (role === 'system') return [{ role: 'system', content: blocksText(blocks) }];

  const out: ChatMessage[] = [];
  const rest: Block[] = [];
  for (const block of blocks) {
    if (block.type !== 'tool_result') {
      rest.push(block);
      continue;
    }
    if (typeof block.tool_use_id !== 'string') throw new DialectError(`messages[${i}]: tool_result.tool_use_id must be a string`);
    const parts =
      typeof block.content === 'string'
        ? [{ type: 'text', text: block.content }]
        : userParts(Array.isArray(block.content) ? block.content.filter(isObject) : []);
    let text = contentText(parts.filter((p) => p.type === 'text'));
    if (block.is_error === true) text = text ? `[Tool Error] ${text}` : '[Tool Error]';
    out.push({ role: 'tool', tool_call_id: block.tool_use_id, content: text });
    // Tool messages are text-only upstream; the result's images follow as a user message.
    const images = parts.filter((p) => p.type === 'image_url');
    if (images.length) out.push({ role: 'user', content: images });
  }
  if (!out.length) return [{ role, content: userParts(rest) }];
  const remaining = userParts(rest);
  if (remaining.length) out.push({ role, content: remaining.every((p) => p.type === 'text') ? contentText(remaining) : remaining });
  return out;
}

function assistantMessage(blocks: Block[], i: number): ChatMessage {
  const texts: string[] = [];
  const thinking: string[] = [];
  const calls: ChatToolCall[] = [];
  for (const block of blocks) {
    if (block.type === 'text' && typeof block.text === 'string') texts.push(block.text);
    else if (block.type === 'thinking' && typeof block.thinking === 'string' && block.thinking) thinking.push(block.thinking);
    else if (block.type === 'tool_use') {
      if (typeof block.id !== 'string' || typeof block.name !== 'string')
        throw new DialectError(`messages[${i}]: tool_use needs a string id and name`);
      const input = block.input ?? {};
      if (!isObject(input)) throw new DialectError(`messages[${i}]: tool_use.input must be an object`);
      calls.push({ id: block.id, type: 'function', function: { name: block.name, arguments: JSON.stringify(input) } });
    }
  }
  const message: ChatMessage = { role: 'assistant', content: texts.length ? texts.join('\n') : null };
  if (thinking.length) message.reasoning_content = thinking.join('\n');
  if (calls.length) message.tool_calls = calls;
  return message;
}

/** Anthropic user blocks -> chat parts: text, images (data or URL), text documents; PDFs are dropped. */
function userParts(blocks: Block[]): ChatContentPart[] {
  const parts: ChatContentPart[] = [];
  for (const block of blocks) {
    if (block.type === 'text' && typeof block.text === 'string') parts.push({ type: 'text', text: block.text });
    else if (block.type === 'image' && isObject(block.source)) {
      const url = sourceUrl(block.source);
      if (url) parts.push({ type: 'image_url', image_url: { url } });
    } else if (block.type === 'document' && isObject(block.source)) {
      const s = block.source;
      if (s.type === 'text' && typeof s.data === 'string') parts.push({ type: 'text', text: s.data });
      else if (s.type === 'content') {
        const text = blocksText(s.content);
        if (text) parts.push({ type: 'text', text });
      }
    }
  }
  return parts;
}

function sourceUrl(source: JsonObject): string | null {
  if (source.type === 'base64' && typeof source.data === 'string')
    return dataUrl(typeof source.media_type === 'string' ? source.media_type : 'image/png', source.data);
  if (source.type === 'url' && typeof source.url === 'string') return source.url;
  return null;
}

function convertTools(tools: JsonObject[]): ChatTool[] {
  const out: ChatTool[] = [];
  for (const tool of tools) {
    // Server-side tools (web_search_*, code_execution_*) have a type and no schema; the engine cannot run them.
    if (typeof tool.type === 'string' && tool.type !== 'custom' && tool.type !== 'function' && tool.input_schema === undefined) continue;
    if (typeof tool.name !== 'string' || !tool.name) continue;
    out.push({
      type: 'function',
      function: {
        name: tool.name,
        description: typeof tool.description === 'string' ? tool.description : '',
        parameters: isObject(tool.input_schema) ? tool.input_schema : { type: 'object', properties: {} },
      },
    });
  }
  return out;
}

function convertToolChoice(choice: JsonObject): unknown {
  if (choice.type === 'any') return 'required';
  if (choice.type === 'none') return 'none';
  if (choice.type === 'tool' && typeof choice.name === 'string') return { type: 'function', function: { name: choice.name } };
  return 'auto';
}

/** Chat content (string or parts) -> Anthropic text/image blocks. */
function chatContentToBlocks(content: ChatMessage['content']): Block[] {
  if (typeof content === 'string') return content ? [{ type: 'text', text: content }] : [];
  if (!Array.isArray(content)) return [];
  const blocks: Block[] = [];
  for (const part of content) {
    if (part.type === 'text' && typeof part.text === 'string' && part.text) blocks.push({ type: 'text', text: part.text });
    else if (part.type === 'image_url' && part.image_url?.url) {
      const data = parseDataUrl(part.image_url.url);
      blocks.push({
        type: 'image',
        source: data ? { type: 'base64', media_type: data.mediaType, data: data.data } : { type: 'url', url: part.image_url.url },
      });
    }
  }
  return blocks;
}

function toolUseBlock(call: ChatToolCall, index: number): Block {
  const parsed = parseArguments(call.function.arguments);
  const input = parsed === undefined ? {} : isObject(parsed) ? parsed : { value: parsed };
  return { type: 'tool_use', id: call.id || `toolu_${index}`, name: call.function.name, input };
}

function stopReason(choice: ChatResponse['choices'][number], request: JsonObject): { stop_reason: string; stop_sequence: string | null } {
  const finish = choice.finish_reason ?? 'stop';
  // vLLM reports which stop string matched in `stop_reason`; Anthropic clients expect stop_sequence then.
  const matched = choice.stop_reason;
  if (
    finish === 'stop' &&
    typeof matched === 'string' &&
    Array.isArray(request.stop_sequences) &&
    request.stop_sequences.includes(matched)
  ) {
    return { stop_reason: 'stop_sequence', stop_sequence: matched };
  }
  return { stop_reason: STOP_REASONS[finish] ?? 'end_turn', stop_sequence: null };
}

function anthropicUsage(response: ChatResponse): JsonObject {
  const usage = response.usage;
  const cached = cachedTokens(usage);
  const prompt = usage?.prompt_tokens ?? 0;
  const out: JsonObject = {
    input_tokens: Math.max(prompt - cached, 0),
    output_tokens: usage?.completion_tokens ?? 0,
    cache_read_input_tokens: cached,
  };
  const creation = usage?.cache_creation_input_tokens;
  if (typeof creation === 'number' && creation) out.cache_creation_input_tokens = creation;
  return out;
}
