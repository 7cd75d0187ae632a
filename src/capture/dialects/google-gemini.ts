// Google Gemini generateContent / streamGenerateContent (docs/capture-protocol.md §7.4, stream §8.3).
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
  cachedTokens,
  contentText,
  dataUrl,
  enableThinking,
  firstChoice,
  isObject,
  normalizeChatRequest,
  parseArguments,
  reasoningText,
  reasoningTokens,
  requireObjects,
  toolCallsOf,
} from './common.js';
import { geminiThoughtSignature } from './reasoning.js';

const FINISH_REASONS: Record<string, string> = {
  stop: 'STOP',
  tool_calls: 'STOP',
  stop_sequence: 'STOP',
  length: 'MAX_TOKENS',
  content_filter: 'SAFETY',
};

const ROLES: Record<string, string> = {
  model: 'assistant',
  user: 'user',
  function: 'user',
  tool: 'user',
  system: 'system',
  developer: 'system',
};

/** `/v1beta/models/{model}:generateContent` -> `{model}` (also tunedModels/..., URL-decoded). */
export function geminiModelFromPath(path: string): string | undefined {
  const match = /\/(?:models|tunedModels)\/([^/:?]+)(?::|\?|$)/.exec(path);
  if (!match) return undefined;
  try {
    return decodeURIComponent(match[1]!);
  } catch {
    return match[1];
  }
}

export class GoogleGeminiDialect implements Dialect {
  readonly name = 'google_gemini' as const;
  /** @google/genai's SSE reader fails on comment frames ("Incomplete JSON segment at the end"). */
  readonly sseComments = false;

  clientModel(body: JsonObject, path: string): string | undefined {
    return geminiModelFromPath(path) ?? (typeof body.model === 'string' ? body.model.replace(/^models\//, '') : undefined);
  }

  /** Google puts streaming in the URL, never in the body (gemini-cli uses `?alt=sse`). */
  wantsStream(_body: JsonObject, path: string): boolean {
    const lower = path.toLowerCase();
    return lower.includes('streamgeneratecontent') || lower.includes('alt=sse');
  }

  toChat(body: JsonObject, ctx: DialectContext): ChatRequest {
    const config = isObject(body.config) ? body.config : {};
    const messages: ChatMessage[] = [];
    const system = body.systemInstruction ?? body.system_instruction ?? config.systemInstruction ?? config.system_instruction;
    if (system !== undefined && system !== null) {
      const text = systemText(system);
      if (text) messages.push({ role: 'system', content: text });
    }
    const contents =
      body.contents === undefined
        ? []
        : typeof body.contents === 'string'
          ? [{ role: 'user', parts: [{ text: body.contents }] }]
          : body.contents;
    requireObjects(contents, 'contents').forEach((content, i) => messages.push(...convertContent(content, i)));

    const request: ChatRequest = { messages };
    const model = this.clientModel(body, ctx.path);
    if (model) request.model = model;
    const gen = body.generationConfig ?? body.generation_config ?? config.generationConfig ?? config;
    if (isObject(gen)) applyGenerationConfig(request, gen);

    const tools = convertTools(body.tools ?? config.tools);
    if (tools.length) {
      request.tools = tools;
      const toolConfig = body.toolConfig ?? body.tool_config ?? config.toolConfig;
      const choice = isObject(toolConfig)
        ? convertToolChoice(toolConfig.functionCallingConfig ?? toolConfig.function_calling_config)
        : undefined;
      if (choice !== undefined) request.tool_choice = choice;
    }
    return normalizeChatRequest(request, ctx.servedModel);
  }

  fromChat(response: ChatResponse, ctx: DialectContext): JsonObject {
    const { visible, calls, finishReason } = parts(response);
    const out = envelope(response, ctx, [...visible, ...calls], finishReason);
    if (calls.length) out.functionCalls = calls.map((p) => p.functionCall);
    return out;
  }

  /** Text/thought parts first, function calls in a second event; every event is written (§8.3). */
  streamEvents(response: ChatResponse, ctx: DialectContext): SseEvent[] {
    const { visible, calls, finishReason } = parts(response);
    const events: SseEvent[] = [];
    if (visible.length || !calls.length) events.push({ data: envelope(response, ctx, visible, finishReason) });
    if (calls.length)
      events.push({ data: { ...envelope(response, ctx, calls, finishReason), functionCalls: calls.map((p) => p.functionCall) } });
    return events;
  }

  errorBody(status: number, message: string): unknown {
    return { error: { code: status, message, status: googleStatus(status) } };
  }

  streamErrorEvent(status: number, message: string): SseEvent {
    return { data: { error: { code: status, message, status: googleStatus(status) } } };
  }
}

export function googleStatus(status: number): string {
  const named: Record<number, string> = {
    400: 'INVALID_ARGUMENT',
    401: 'UNAUTHENTICATED',
    403: 'PERMISSION_DENIED',
    404: 'NOT_FOUND',
    409: 'ABORTED',
    429: 'RESOURCE_EXHAUSTED',
    499: 'CANCELLED',
    501: 'UNIMPLEMENTED',
    503: 'UNAVAILABLE',
    504: 'DEADLINE_EXCEEDED',
  };
  return named[status] ?? (status >= 500 ? 'INTERNAL' : 'INVALID_ARGUMENT');
}

function systemText(system: unknown): string {
  if (typeof system === 'string') return system;
  const partsList = isObject(system) ? system.parts : system;
  if (!Array.isArray(partsList)) throw new DialectError('systemInstruction must be a string, a Content or a list of parts');
  return partsList
    .map((p) => (typeof p === 'string' ? p : isObject(p) && typeof p.text === 'string' ? p.text : ''))
    .filter(Boolean)
    .join('\n');
}

function convertContent(content: JsonObject, i: number): ChatMessage[] {
  const role = ROLES[typeof content.role === 'string' ? content.role : 'user'];
  if (!role) throw new DialectError(`contents[${i}].role must be user or model`);
  const list = content.parts === undefined ? [] : requireObjects(content.parts, `contents[${i}].parts`);
  if (role === 'assistant') return [modelMessage(list, i)];
  if (role === 'system') return [{ role: 'system', content: contentText(list.filter((p) => p.thought !== true)) }];

  const out: ChatMessage[] = [];
  const user: ChatContentPart[] = [];
  for (const part of list) {
    const response = part.functionResponse ?? part.function_response;
    if (isObject(response)) {
      const id = str(response.id) || str(part.call_id) || str(response.name);
      out.push({ role: 'tool', tool_call_id: id, content: JSON.stringify(response.response ?? {}) });
    } else if (typeof part.text === 'string' && part.thought !== true) user.push({ type: 'text', text: part.text });
    else {
      const image = imagePart(part);
      if (image) user.push(image);
    }
  }
  if (user.length) out.push({ role: 'user', content: user });
  return out.length ? out : [{ role: 'user', content: '' }];
}

function modelMessage(list: JsonObject[], i: number): ChatMessage {
  let text = '';
  let thought = '';
  const calls: ChatToolCall[] = [];
  for (const part of list) {
    const call = part.functionCall ?? part.function_call;
    if (isObject(call)) {
      if (typeof call.name !== 'string') throw new DialectError(`contents[${i}]: functionCall.name must be a string`);
      const args = call.args ?? {};
      if (!isObject(args)) throw new DialectError(`contents[${i}]: functionCall.args must be an object`);
      calls.push({
        id: str(call.id) || str(part.call_id),
        type: 'function',
        function: { name: call.name, arguments: JSON.stringify(args) },
      });
    } else if (typeof part.text === 'string') {
      // Consecutive parts of a model turn are stream fragments, so they are joined without a separator.
      if (part.thought === true) thought += part.text;
      else text += part.text;
    }
  }
  const message: ChatMessage = { role: 'assistant', content: text || (calls.length ? null : '') };
  if (thought) message.reasoning_content = thought;
  if (calls.length) message.tool_calls = calls;
  return message;
}

function imagePart(part: JsonObject): ChatContentPart | null {
  const inline = part.inlineData ?? part.inline_data;
  if (isObject(inline) && typeof inline.data === 'string') {
    const mime = str(inline.mimeType) || str(inline.mime_type);
    return mime.startsWith('image/') ? { type: 'image_url', image_url: { url: dataUrl(mime, inline.data) } } : null;
  }
  const file = part.fileData ?? part.file_data;
  if (isObject(file)) {
    const uri = str(file.fileUri) || str(file.file_uri);
    return uri ? { type: 'image_url', image_url: { url: uri } } : null;
  }
  return null;
}

function applyGenerationConfig(request: ChatRequest, gen: JsonObject): void {
  const map: [string, string][] = [
    ['maxOutputTokens', 'max_tokens'],
    ['temperature', 'temperature'],
    ['topP', 'top_p'],
    ['topK', 'top_k'],
    ['stopSequences', 'stop'],
    ['candidateCount', 'n'],
    ['presencePenalty', 'presence_penalty'],
    ['frequencyPenalty', 'frequency_penalty'],
    ['seed', 'seed'],
  ];
  for (const [from, to] of map) {
    const snake = from.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    const value = gen[from] ?? gen[snake];
    if (value !== undefined && value !== null) request[to] = value;
  }
  if (typeof gen.logprobs === 'number') {
    request.logprobs = true;
    request.top_logprobs = gen.logprobs;
  } else if (gen.responseLogprobs === true) request.logprobs = true;
  const mime = gen.responseMimeType ?? gen.response_mime_type;
  if (mime === 'application/json') {
    const jsonSchema = gen.responseJsonSchema ?? gen.response_json_schema;
    const schema = gen.responseSchema ?? gen.response_schema;
    if (isObject(jsonSchema)) request.response_format = { type: 'json_schema', json_schema: { name: 'response', schema: jsonSchema } };
    else if (isObject(schema))
      request.response_format = { type: 'json_schema', json_schema: { name: 'response', schema: lowerTypes(schema) } };
    else request.response_format = { type: 'json_object' };
  }
  const thinking = gen.thinkingConfig ?? gen.thinking_config;
  if (isObject(thinking) && (thinking.includeThoughts === true || thinking.include_thoughts === true)) enableThinking(request);
}

/** Gemini's OpenAPI-style schemas spell types in upper case (`OBJECT`); JSON Schema wants lower case. */
function lowerTypes(schema: unknown): JsonObject {
  const walk = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(walk);
    if (!isObject(node)) return node;
    const out: JsonObject = {};
    for (const [k, v] of Object.entries(node)) out[k] = k === 'type' && typeof v === 'string' ? v.toLowerCase() : walk(v);
    return out;
  };
  return walk(schema) as JsonObject;
}

function convertTools(tools: unknown): ChatTool[] {
  if (tools === undefined || tools === null) return [];
  const out: ChatTool[] = [];
  for (const tool of requireObjects(tools, 'tools')) {
    const decls = tool.functionDeclarations ?? tool.function_declarations;
    if (decls === undefined) continue; // googleSearch, codeExecution, ...: hosted, dropped
    for (const decl of requireObjects(decls, 'functionDeclarations')) {
      if (typeof decl.name !== 'string' || !decl.name) throw new DialectError('functionDeclarations[].name must be a non-empty string');
      const jsonSchema = decl.parametersJsonSchema ?? decl.parameters_json_schema;
      const parameters = isObject(jsonSchema)
        ? jsonSchema
        : isObject(decl.parameters)
          ? lowerTypes(decl.parameters)
          : { type: 'object', properties: {} };
      out.push({ type: 'function', function: { name: decl.name, description: str(decl.description), parameters } });
    }
  }
  return out;
}

function convertToolChoice(config: unknown): unknown {
  if (!isObject(config) || typeof config.mode !== 'string') return undefined;
  const mode = config.mode.toUpperCase();
  if (mode === 'NONE') return 'none';
  if (mode === 'AUTO') return 'auto';
  if (mode === 'ANY' || mode === 'VALIDATED') {
    const allowed = config.allowedFunctionNames ?? config.allowed_function_names;
    if (Array.isArray(allowed) && allowed.length === 1 && typeof allowed[0] === 'string')
      return { type: 'function', function: { name: allowed[0] } };
    return 'required';
  }
  return undefined;
}

interface GeminiParts {
  visible: JsonObject[];
  calls: { functionCall: JsonObject }[];
  finishReason: string;
}

function parts(response: ChatResponse): GeminiParts {
  const choice = firstChoice(response);
  const visible: JsonObject[] = [];
  const reasoning = reasoningText(choice.message);
  if (reasoning) visible.push({ text: reasoning, thought: true, thoughtSignature: geminiThoughtSignature(reasoning) });
  const text = contentText(choice.message.content, '');
  if (text) visible.push({ text });
  const calls = toolCallsOf(choice.message).map((call) => {
    const functionCall: JsonObject = { name: call.function.name, args: geminiArgs(call.function.arguments) };
    if (call.id) functionCall.id = call.id;
    return { functionCall };
  });
  return { visible, calls, finishReason: FINISH_REASONS[choice.finish_reason ?? 'stop'] ?? 'STOP' };
}

/** Gemini args must be an object: unparsable text becomes {raw}, a JSON scalar or list {value}. */
function geminiArgs(args: string): JsonObject {
  const parsed = parseArguments(args);
  if (parsed === undefined) return { raw: args };
  return isObject(parsed) ? parsed : { value: parsed };
}

function envelope(response: ChatResponse, ctx: DialectContext, partList: JsonObject[], finishReason: string): JsonObject {
  const usage = response.usage;
  const usageMetadata: JsonObject = {
    promptTokenCount: usage?.prompt_tokens ?? 0,
    candidatesTokenCount: usage?.completion_tokens ?? 0,
    totalTokenCount: usage?.total_tokens ?? (usage?.prompt_tokens ?? 0) + (usage?.completion_tokens ?? 0),
  };
  const cached = cachedTokens(usage);
  if (cached) usageMetadata.cachedContentTokenCount = cached;
  const thoughts = reasoningTokens(usage);
  if (thoughts) usageMetadata.thoughtsTokenCount = thoughts;
  return {
    candidates: [{ content: { parts: partList, role: 'model' }, finishReason, index: 0, safetyRatings: [] }],
    usageMetadata,
    modelVersion: ctx.clientModel ?? response.model,
    responseId: response.id,
  };
}

function str(value: unknown): string {
  return typeof value === 'string' ? value : '';
}
