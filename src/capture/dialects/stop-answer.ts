// The synthetic stop answer (docs/capture-protocol.md §8.6): a normal answer in the caller's dialect, used for the
// model-call budget and context overflows, never recorded. Its text must be non-empty: opencode retried
// an empty assistant message forever.
import type { ChatResponse, Dialect, DialectContext, SseEvent } from '../types.js';
import { fillUsageDetails, randomHex } from './common.js';

export const STOP_ANSWER_TEXT = 'Step budget exhausted; stopping.';

/** The stop answer as an engine-shaped chat completion, ready for any dialect's `fromChat`/`streamEvents`. */
export function stopAnswer(model = 'capture-proxy'): ChatResponse {
  return {
    id: `chatcmpl-stop-${randomHex(24)}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: STOP_ANSWER_TEXT }, finish_reason: 'stop', logprobs: null }],
    usage: fillUsageDetails({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 }),
  };
}

/** Whether an assistant reply is the stop answer (the ATIF cross-check skips these). */
export function isStopAnswerText(text: unknown): boolean {
  return typeof text === 'string' && text.trim() === STOP_ANSWER_TEXT;
}

export type RenderedAnswer = { stream: false; body: unknown } | { stream: true; events: SseEvent[] };

/** The stop answer rendered in a dialect, as JSON or as its SSE event sequence. */
export function renderStopAnswer(dialect: Dialect, ctx: DialectContext, stream: boolean): RenderedAnswer {
  const answer = stopAnswer(ctx.clientModel);
  return stream ? { stream: true, events: dialect.streamEvents(answer, ctx) } : { stream: false, body: dialect.fromChat(answer, ctx) };
}
