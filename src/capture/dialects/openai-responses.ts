// OpenAI Responses (docs/capture-protocol.md §7.3, stream §8.3 with the strict-client fields OpenAI sends).
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
  enableThinking,
  firstChoice,
  isObject,
  normalizeChatRequest,
  openAIErrorBody,
  reasoningText,
  reasoningTokens,
  requireObjects,
  stableHex,
  toolCallsOf,
} from './common.js';
import { encryptReasoning, readReasoningItem } from './reasoning.js';
import { localShellArguments, localShellItem, shellDeclaration, shellKind } from './responses-shell.js';

const TEXT_PARTS = new Set(['input_text', 'output_text', 'text']);
const IMAGE_PARTS = new Set(['input_image', 'image_url']);
const IMAGE_DETAILS = new Set(['auto', 'low', 'high']);

export class OpenAIResponsesDialect implements Dialect {
  readonly name = 'openai_responses' as const;

  readonly clientModel = bodyModel;
  readonly wantsStream = bodyStream;

  toChat(body: JsonObject, ctx: DialectContext): ChatRequest {
    const messages: ChatMessage[] = [];
    if (typeof body.instructions === 'string' && body.instructions) messages.push({ role: 'system', content: body.instructions });
    else if (Array.isArray(body.instructions)) messages.push(...convertInput(requireObjects(body.instructions, 'instructions')));
    const input = body.input ?? '';
    if (typeof input === 'string') {
      if (input) messages.push({ role: 'user', content: input });
    } else if (Array.isArray(input)) messages.push(...convertInput(requireObjects(input, 'input')));
    else throw new DialectError('input must be a string or an array of items');

    const request: ChatRequest = { messages };
    if (typeof body.model === 'string') request.model = body.model;
    const maxTokens = body.max_output_tokens ?? body.max_tokens;
    if (maxTokens !== undefined && maxTokens !== null) request.max_tokens = maxTokens as number;
    for (const key of ['temperature', 'top_p', 'top_logprobs', 'parallel_tool_calls', 'stream']) {
      if (body[key] !== undefined && body[key] !== null) request[key] = body[key];
    }
    const format = isObject(body.text) ? responseFormat(body.text.format) : undefined;
    if (format) request.response_format = format;
    if (isObject(body.reasoning) && Object.keys(body.reasoning).length && String(body.reasoning.effort).toLowerCase() !== 'none')
      enableThinking(request);

    if (body.tools !== undefined && body.tools !== null) {
      const tools = convertTools(requireObjects(body.tools, 'tools'));
      if (tools.length) {
        request.tools = tools;
        if (body.tool_choice !== undefined) request.tool_choice = convertToolChoice(body.tool_choice);
      }
    }
    return normalizeChatRequest(request, ctx.servedModel);
  }

  fromChat(response: ChatResponse, ctx: DialectContext): JsonObject {
    const choice = firstChoice(response);
    const message = choice.message;
    const hex = stableHex(`${response.id}`, 24);
    const output: JsonObject[] = [];
    const reasoning = reasoningText(message);
    if (reasoning) {
      output.push({
        type: 'reasoning',
        id: `rs_${hex}`,
        summary: [{ type: 'summary_text', text: reasoning }],
        content: [{ type: 'reasoning_text', text: reasoning }],
        encrypted_content: encryptReasoning(reasoning),
        status: 'completed',
      });
    }
    const text = contentText(message.content, '');
    if (text) {
      output.push({
        type: 'message',
        id: `msg_${hex}`,
        role: 'assistant',
        status: 'completed',
        content: [{ type: 'output_text', text, annotations: [] }],
      });
    }
    const shell = shellKind(ctx.request.tools);
    toolCallsOf(message).forEach((call, i) => {
      // Only rewrite to a shell item when the request declared one: a user function named `execute`
      // replayed as `shell` once broke exact prefix matching.
      if (shell && ['shell', 'execute', 'run_command'].includes(call.function.name))
        output.push(localShellItem(shell, call, `${hex}_${i}`));
      else
        output.push({
          type: 'function_call',
          id: `fc_${hex}_${i}`,
          call_id: call.id,
          name: call.function.name,
          arguments: call.function.arguments,
          status: 'completed',
        });
    });
    return {
      id: `resp_${hex}`,
      object: 'response',
      created_at: response.created,
      status: 'completed',
      error: null,
      incomplete_details: null,
      model: ctx.clientModel ?? response.model,
      output,
      parallel_tool_calls: ctx.request.parallel_tool_calls !== false,
      tool_choice: ctx.request.tool_choice ?? 'auto',
      tools: [],
      usage: responsesUsage(response),
    };
  }

  streamEvents(response: ChatResponse, ctx: DialectContext): SseEvent[] {
    return responsesStream(this.fromChat(response, ctx));
  }

  errorBody(status: number, message: string): unknown {
    return openAIErrorBody(status, message);
  }

  streamErrorEvent(status: number, message: string): SseEvent {
    const code = status >= 500 ? 'server_error' : status === 429 ? 'rate_limit_exceeded' : 'invalid_request_error';
    return { event: 'error', data: { type: 'error', code, message, param: null, sequence_number: 0 } };
  }
}

function responsesUsage(response: ChatResponse): JsonObject {
  const u = response.usage;
  const input = u?.prompt_tokens ?? 0;
  const output = u?.completion_tokens ?? 0;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: cachedTokens(u) },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: reasoningTokens(u) },
    total_tokens: u?.total_tokens ?? input + output,
  };
}

/**
 * The §8.3 events plus what OpenAI itself sends (`sequence_number` everywhere, `response.in_progress`,
 * `item_id` on deltas, `output_text.done`), with each output item streamed to its `output_item.done`
 * before the next one is added, as OpenAI does. Clients that track one current item (pi's
 * openai-responses provider) otherwise apply the first call's arguments to the second of two calls.
 */
export function responsesStream(final: JsonObject): SseEvent[] {
  const events: SseEvent[] = [];
  const emit = (type: string, payload: JsonObject) =>
    events.push({ event: type, data: { type, sequence_number: events.length, ...payload } });
  const zeroUsage = {
    input_tokens: 0,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 0,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 0,
  };
  const start = { ...final, status: 'in_progress', output: [], usage: zeroUsage };
  emit('response.created', { response: start });
  emit('response.in_progress', { response: start });

  const items = final.output as JsonObject[];
  items.forEach((item, output_index) => {
    const item_id = item.id;
    if (item.type === 'reasoning') {
      const text = (item.summary as { text: string }[])[0]?.text ?? '';
      const part = { type: 'summary_text', text };
      emit('response.output_item.added', {
        output_index,
        item: { type: 'reasoning', id: item_id, summary: [], content: [], status: 'in_progress' },
      });
      emit('response.reasoning_summary_part.added', { item_id, output_index, summary_index: 0, part: { ...part, text: '' } });
      emit('response.reasoning_summary_text.delta', { item_id, output_index, summary_index: 0, delta: text });
      emit('response.reasoning_summary_text.done', { item_id, output_index, summary_index: 0, text });
      emit('response.reasoning_summary_part.done', { item_id, output_index, summary_index: 0, part });
      emit('response.output_item.done', { output_index, item });
    } else if (item.type === 'message') {
      const part = (item.content as JsonObject[])[0]!;
      const text = part.text as string;
      emit('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', content: [] } });
      emit('response.content_part.added', { item_id, output_index, content_index: 0, part: { ...part, text: '' } });
      emit('response.output_text.delta', { item_id, output_index, content_index: 0, delta: text, logprobs: [] });
      emit('response.output_text.done', { item_id, output_index, content_index: 0, text, logprobs: [] });
      emit('response.content_part.done', { item_id, output_index, content_index: 0, part });
      emit('response.output_item.done', { output_index, item });
    } else if (item.type === 'function_call') {
      const args = item.arguments as string;
      emit('response.output_item.added', { output_index, item: { ...item, arguments: '', status: 'in_progress' } });
      if (args) emit('response.function_call_arguments.delta', { item_id, output_index, delta: args });
      emit('response.function_call_arguments.done', { item_id, output_index, arguments: args });
      emit('response.output_item.done', { output_index, item });
    } else {
      emit('response.output_item.added', { output_index, item: { ...item, status: 'in_progress' } });
      emit('response.output_item.done', { output_index, item });
    }
  });
  emit('response.completed', { response: final });
  return events;
}

/** Responses input items -> chat messages, keeping each engine turn as one assistant message. */
function convertInput(items: JsonObject[]): ChatMessage[] {
  const messages: ChatMessage[] = [];
  let pendingReasoning = '';
  // The assistant message that function_call items may still join (one engine turn = one message).
  let openAssistant: ChatMessage | null = null;
  // The user message that bare input_text/input_image items are appended to.
  let bareUser: ChatMessage | null = null;

  const flushReasoning = () => {
    if (pendingReasoning) messages.push({ role: 'assistant', content: null, reasoning_content: pendingReasoning });
    pendingReasoning = '';
  };
  const addCall = (call: ChatToolCall) => {
    bareUser = null;
    if (openAssistant) {
      (openAssistant.tool_calls ??= []).push(call);
      return;
    }
    openAssistant = { role: 'assistant', content: null, tool_calls: [call] };
    if (pendingReasoning) openAssistant.reasoning_content = pendingReasoning;
    pendingReasoning = '';
    messages.push(openAssistant);
  };
  const addToolOutput = (callId: string, output: unknown) => {
    openAssistant = null;
    bareUser = null;
    const { text, images } = toolOutput(output);
    messages.push({ role: 'tool', tool_call_id: callId, content: text });
    if (images.length) messages.push({ role: 'user', content: images });
  };

  items.forEach((item, i) => {
    const type = item.type ?? (item.role !== undefined ? 'message' : undefined);
    switch (type) {
      case 'reasoning': {
        const text = readReasoningItem(item);
        openAssistant = null;
        if (text) pendingReasoning = pendingReasoning ? `${pendingReasoning}\n${text}` : text;
        return;
      }
      case 'message': {
        if (typeof item.role !== 'string') throw new DialectError(`input[${i}].role must be a string`);
        bareUser = null;
        if (item.role === 'assistant') {
          const msg: ChatMessage = { role: 'assistant', content: contentText(partsOf(item.content, i)) };
          if (pendingReasoning) msg.reasoning_content = pendingReasoning;
          pendingReasoning = '';
          messages.push(msg);
          openAssistant = msg;
          return;
        }
        flushReasoning();
        openAssistant = null;
        const parts = chatParts(partsOf(item.content, i));
        const system = item.role === 'system' || item.role === 'developer';
        messages.push({ role: item.role, content: system || typeof item.content === 'string' ? contentText(parts) : parts });
        return;
      }
      case 'function_call': {
        if (typeof item.name !== 'string') throw new DialectError(`input[${i}].name must be a string`);
        const args = item.arguments ?? '{}';
        if (typeof args !== 'string') throw new DialectError(`input[${i}].arguments must be a string`);
        const id = typeof item.call_id === 'string' ? item.call_id : typeof item.id === 'string' ? item.id : '';
        addCall({ id, type: 'function', function: { name: item.name, arguments: args } });
        return;
      }
      case 'local_shell_call':
      case 'shell_call': {
        const id = typeof item.call_id === 'string' ? item.call_id : typeof item.id === 'string' ? item.id : '';
        addCall({ id, type: 'function', function: { name: 'shell', arguments: localShellArguments(item.action) } });
        return;
      }
      case 'function_call_output':
      case 'local_shell_call_output':
      case 'shell_call_output': {
        const id = typeof item.call_id === 'string' ? item.call_id : typeof item.id === 'string' ? item.id : '';
        addToolOutput(id, item.output ?? '');
        return;
      }
      case 'input_text':
      case 'input_image': {
        flushReasoning();
        openAssistant = null;
        const parts = chatParts([item]);
        if (bareUser && Array.isArray(bareUser.content)) bareUser.content.push(...parts);
        else {
          bareUser = { role: 'user', content: parts };
          messages.push(bareUser);
        }
        return;
      }
      default:
        // item_reference, hosted-tool results and other kinds the engine cannot use are skipped.
        return;
    }
  });
  flushReasoning();
  return messages;
}

function partsOf(content: unknown, i: number): JsonObject[] {
  if (typeof content === 'string') return [{ type: 'input_text', text: content }];
  if (content === undefined || content === null) return [];
  return requireObjects(content, `input[${i}].content`);
}

/** Responses content parts -> chat parts (only the image details upstreams accept are kept). */
function chatParts(parts: JsonObject[]): ChatContentPart[] {
  const out: ChatContentPart[] = [];
  for (const part of parts) {
    if (TEXT_PARTS.has(String(part.type)) && typeof part.text === 'string') out.push({ type: 'text', text: part.text });
    else if (part.type === 'refusal' && typeof part.refusal === 'string') out.push({ type: 'text', text: part.refusal });
    else if (IMAGE_PARTS.has(String(part.type))) {
      const raw = part.image_url;
      const url = typeof raw === 'string' ? raw : isObject(raw) && typeof raw.url === 'string' ? raw.url : undefined;
      if (!url) continue;
      const detail =
        typeof part.detail === 'string' ? part.detail : isObject(raw) && typeof raw.detail === 'string' ? raw.detail : undefined;
      out.push({ type: 'image_url', image_url: detail && IMAGE_DETAILS.has(detail) ? { url, detail } : { url } });
    }
  }
  return out;
}

function toolOutput(output: unknown): { text: string; images: ChatContentPart[] } {
  if (typeof output === 'string') return { text: output, images: [] };
  if (Array.isArray(output)) {
    const objects = output.filter(isObject);
    // shell_call_output: [{stdout, stderr, outcome}]
    if (objects.some((o) => 'stdout' in o || 'stderr' in o)) {
      return { text: objects.map((o) => [o.stdout, o.stderr].filter((s) => typeof s === 'string' && s).join('\n')).join('\n'), images: [] };
    }
    const parts = chatParts(objects);
    return { text: contentText(parts.filter((p) => p.type === 'text')), images: parts.filter((p) => p.type === 'image_url') };
  }
  if (isObject(output)) {
    if (TEXT_PARTS.has(String(output.type)) || IMAGE_PARTS.has(String(output.type))) return toolOutput([output]);
    for (const key of ['output', 'body', 'content']) if (key in output) return toolOutput(output[key]);
    return { text: JSON.stringify(output), images: [] };
  }
  return { text: output === null || output === undefined ? '' : String(output), images: [] };
}

function responseFormat(format: unknown): JsonObject | undefined {
  if (!isObject(format)) return undefined;
  if (format.type === 'json_object') return { type: 'json_object' };
  if (format.type !== 'json_schema') return undefined;
  if (isObject(format.json_schema)) return { type: 'json_schema', json_schema: format.json_schema };
  const schema: JsonObject = {};
  for (const key of ['name', 'description', 'schema', 'strict']) if (key in format) schema[key] = format[key];
  return Object.keys(schema).length ? { type: 'json_schema', json_schema: schema } : undefined;
}

function convertTools(tools: JsonObject[]): ChatTool[] {
  const out: ChatTool[] = [];
  for (const tool of tools) {
    if (tool.type === 'function' && isObject(tool.function) && typeof tool.function.name === 'string') {
      out.push({ type: 'function', function: tool.function as ChatTool['function'] });
    } else if (tool.type === 'shell' || tool.type === 'local_shell') {
      out.push(shellDeclaration(tool));
    } else if (tool.type === 'function' || tool.type === undefined) {
      const name = typeof tool.name === 'string' ? tool.name : '';
      if (!name) continue;
      const schema = isObject(tool.inputSchema) ? tool.inputSchema : isObject(tool.input_schema) ? tool.input_schema : undefined;
      const parameters = isObject(tool.parameters)
        ? tool.parameters
        : schema && isObject(schema.jsonSchema)
          ? schema.jsonSchema
          : (schema ?? { type: 'object', properties: {} });
      const fn: ChatTool['function'] = { name, description: typeof tool.description === 'string' ? tool.description : '', parameters };
      if (typeof tool.strict === 'boolean') fn.strict = tool.strict;
      out.push({ type: 'function', function: fn });
    }
    // Hosted tools (web_search, file_search, mcp, namespace, custom, ...) are dropped: the engine cannot run them.
  }
  return out;
}

function convertToolChoice(choice: unknown): unknown {
  if (choice === 'shell') return { type: 'function', function: { name: 'shell' } };
  if (typeof choice === 'string' || !isObject(choice)) return choice;
  if (choice.type === 'function') {
    if (isObject(choice.function)) return choice;
    if (typeof choice.name === 'string') return { type: 'function', function: { name: choice.name } };
  }
  if (choice.type === 'shell' || choice.type === 'local_shell') return { type: 'function', function: { name: 'shell' } };
  if (choice.type === 'allowed_tools') return choice.mode === 'required' ? 'required' : 'auto';
  return 'auto';
}
