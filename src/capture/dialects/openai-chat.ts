// OpenAI Chat Completions (docs/capture-protocol.md §7.1): the internal form, so conversion is mostly a copy.
import {
  DialectError,
  type ChatChoice,
  type ChatMessage,
  type ChatRequest,
  type ChatResponse,
  type Dialect,
  type DialectContext,
  type JsonObject,
  type SseEvent,
} from '../types.js';
import {
  bodyModel,
  bodyStream,
  fillUsageDetails,
  isObject,
  normalizeChatRequest,
  openAIErrorBody,
  reasoningText,
  toolCallsOf,
} from './common.js';

export class OpenAIChatDialect implements Dialect {
  readonly name = 'openai_chat' as const;

  readonly clientModel = bodyModel;
  readonly wantsStream = bodyStream;

  toChat(body: JsonObject, ctx: DialectContext): ChatRequest {
    if (!Array.isArray(body.messages)) throw new DialectError('messages must be an array');
    const messages = body.messages.map((m, i): ChatMessage => {
      if (!isObject(m)) throw new DialectError(`messages[${i}] must be an object`);
      if (typeof m.role !== 'string') throw new DialectError(`messages[${i}].role must be a string`);
      const c = m.content;
      if (c !== undefined && c !== null && typeof c !== 'string' && !Array.isArray(c)) {
        throw new DialectError(`messages[${i}].content must be a string, an array of parts or null`);
      }
      if (m.tool_calls !== undefined && m.tool_calls !== null && !Array.isArray(m.tool_calls)) {
        throw new DialectError(`messages[${i}].tool_calls must be an array`);
      }
      return { ...m } as ChatMessage;
    });
    if (body.tools !== undefined && body.tools !== null && !Array.isArray(body.tools)) throw new DialectError('tools must be an array');
    const request: ChatRequest = { ...body, messages };
    if (request.max_tokens === undefined && typeof body.max_completion_tokens === 'number') request.max_tokens = body.max_completion_tokens;
    return normalizeChatRequest(request, ctx.servedModel);
  }

  fromChat(response: ChatResponse, ctx: DialectContext): ChatResponse {
    const wantsLogprobs = ctx.request.logprobs === true;
    const out: ChatResponse = {
      ...response,
      model: ctx.clientModel ?? response.model,
      choices: response.choices.map((c) => clientChoice(c, wantsLogprobs)),
    };
    delete out.prompt_token_ids;
    delete out.prompt_logprobs;
    out.usage = fillUsageDetails(response.usage);
    return out;
  }

  /** One chunk carrying the whole answer, then `[DONE]` (§8.3). */
  streamEvents(response: ChatResponse, ctx: DialectContext): SseEvent[] {
    const wantsLogprobs = ctx.request.logprobs === true;
    const chunk = {
      id: response.id,
      object: 'chat.completion.chunk',
      created: response.created,
      model: ctx.clientModel ?? response.model,
      choices: response.choices.map((choice) => {
        const message = choice.message;
        const delta: JsonObject = { role: 'assistant' };
        if (message.content !== null && message.content !== undefined) delta.content = message.content;
        const reasoning = reasoningText(message);
        if (reasoning) delta.reasoning_content = reasoning;
        const calls = toolCallsOf(message);
        if (calls.length)
          delta.tool_calls = calls.map((call, index) => ({
            index,
            id: call.id,
            type: 'function',
            function: { name: call.function.name, arguments: call.function.arguments },
          }));
        const out: JsonObject = { index: choice.index, delta, finish_reason: choice.finish_reason };
        if (wantsLogprobs && choice.logprobs) out.logprobs = clientLogprobs(choice.logprobs);
        return out;
      }),
      usage: fillUsageDetails(response.usage),
    };
    return [{ data: chunk }, { data: '[DONE]' }];
  }

  errorBody(status: number, message: string): unknown {
    return openAIErrorBody(status, message);
  }

  streamErrorEvent(status: number, message: string): SseEvent {
    return { data: { error: { message, code: status } } };
  }
}

function clientChoice(choice: ChatChoice, wantsLogprobs: boolean): ChatChoice {
  const message: ChatMessage = { ...choice.message };
  if (message.reasoning_content === undefined && typeof message.reasoning === 'string') message.reasoning_content = message.reasoning;
  delete message.reasoning;
  const out: ChatChoice = { ...choice, message, logprobs: wantsLogprobs && choice.logprobs ? clientLogprobs(choice.logprobs) : null };
  delete out.token_ids;
  delete out.prompt_token_ids;
  return out;
}

// The engine's entries carry our `token_id` stamp; clients get the plain OpenAI entry.
function clientLogprobs(logprobs: NonNullable<ChatChoice['logprobs']>): ChatChoice['logprobs'] {
  const content = logprobs.content?.map((entry) => {
    const copy = { ...entry };
    delete copy.token_id;
    return copy;
  });
  return { ...logprobs, content: content ?? null };
}
