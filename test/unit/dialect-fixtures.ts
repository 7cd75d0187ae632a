// Shared engine answers for the dialect tests: the §8.3 example (reasoning, text, one tool call).
import type { ChatResponse, DialectContext, JsonObject } from '../../src/capture/types.js';

export function exampleResponse(overrides: Partial<ChatResponse> = {}): ChatResponse {
  return {
    id: 'chatcmpl-8f2',
    object: 'chat.completion',
    created: 1730000000,
    model: 'Qwen/Qwen3.5-4B',
    prompt_token_ids: [151644, 8948],
    choices: [
      {
        index: 0,
        finish_reason: 'tool_calls',
        message: {
          role: 'assistant',
          content: 'Checking a.txt.',
          reasoning_content: 'Count lines next.',
          tool_calls: [{ id: 'call_2', type: 'function', function: { name: 'bash', arguments: '{"command":"wc -l notes.txt"}' } }],
        },
        token_ids: [151657, 198],
        logprobs: {
          content: [
            { token: 'token_id:151657', logprob: -0.0012, token_id: 151657 },
            { token: 'token_id:198', logprob: -0.31, token_id: 198 },
          ],
        },
      },
    ],
    usage: { prompt_tokens: 812, completion_tokens: 41, total_tokens: 853, prompt_tokens_details: null },
    ...overrides,
  };
}

export function textResponse(content: string | null, finish = 'stop', extra: JsonObject = {}): ChatResponse {
  return exampleResponse({ choices: [{ index: 0, finish_reason: finish, message: { role: 'assistant', content, ...extra } }] });
}

export function ctxFor(path: string, request: JsonObject, clientModel?: string): DialectContext {
  return { path, request, clientModel: clientModel ?? (typeof request.model === 'string' ? request.model : undefined) };
}

export const eventTypes = (events: { event?: string }[]) => events.map((e) => e.event);
