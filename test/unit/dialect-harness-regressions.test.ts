// Dialect bugs that real harness CLIs showed (test/integration/harness-cli.test.ts and manual runs),
// pinned here at unit level with the client behaviour that exposed them.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { OpenAIResponsesDialect } from '../../src/capture/dialects/index.js';
import type { ChatResponse, DialectContext, JsonObject } from '../../src/capture/types.js';

const ctx = (request: JsonObject): DialectContext => ({ path: '/v1/responses', clientModel: 'test-model', request });

function answer(content: string | null, calls: { name: string; arguments: string }[]): ChatResponse {
  return {
    id: 'chatcmpl-regression',
    object: 'chat.completion',
    created: 1_730_000_000,
    model: 'served',
    choices: [
      {
        index: 0,
        finish_reason: calls.length ? 'tool_calls' : 'stop',
        message: {
          role: 'assistant',
          content,
          tool_calls: calls.map((c, i) => ({ id: `call_${i}`, type: 'function' as const, function: c })),
        },
      },
    ],
    usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
  };
}

/**
 * A Responses stream reader that keeps one "current item", as pi's openai-responses provider
 * (@mariozechner/pi-ai 0.73) does: deltas and `.done` events apply to the last added item.
 */
function currentItemReader(events: { data: unknown }[]): { text: string; calls: { name: string; arguments: string }[] } {
  let current: { type: string; name?: string; args: string } | null = null;
  let text = '';
  const calls: { name: string; arguments: string }[] = [];
  for (const { data } of events) {
    const e = data as JsonObject;
    const item = e.item as JsonObject | undefined;
    if (e.type === 'response.output_item.added') current = { type: String(item!.type), name: item!.name as string | undefined, args: '' };
    else if (e.type === 'response.output_text.delta' && current?.type === 'message') text += e.delta as string;
    else if (e.type === 'response.function_call_arguments.delta' && current?.type === 'function_call') current.args += e.delta as string;
    else if (e.type === 'response.function_call_arguments.done' && current?.type === 'function_call') current.args = e.arguments as string;
    else if (e.type === 'response.output_item.done' && item!.type === 'function_call') {
      calls.push({
        name: current?.type === 'function_call' ? current.name! : String(item!.name),
        arguments: current?.type === 'function_call' ? current.args : String(item!.arguments),
      });
      current = null;
    } else if (e.type === 'response.output_item.done') current = null;
  }
  return { text, calls };
}

describe('dialect regressions found with real harness CLIs', () => {
  // pi-openai-responses: with two tool calls in one answer, pi ran the first command twice and never
  // the second, because the stream added both items before finishing either.
  test('Responses stream: each output item is finished before the next one starts (pi, parallel tool calls)', () => {
    const calls = [
      { name: 'bash', arguments: '{"command":"echo one > a.txt"}' },
      { name: 'bash', arguments: '{"command":"echo two > b.txt"}' },
    ];
    const events = new OpenAIResponsesDialect().streamEvents(
      answer('Writing both files.', calls),
      ctx({ model: 'test-model', stream: true }),
    );
    let open: unknown = null;
    for (const { data } of events) {
      const e = data as JsonObject;
      if (e.output_index === undefined) continue;
      if (e.type === 'response.output_item.added') {
        assert.equal(open, null, `item ${String(e.output_index)} added while item ${String(open)} is still open`);
        open = e.output_index;
      } else assert.equal(e.output_index, open, `${String(e.type)} for item ${String(e.output_index)} while item ${String(open)} is open`);
      if (e.type === 'response.output_item.done') open = null;
    }
    assert.deepEqual(currentItemReader(events), { text: 'Writing both files.', calls });
  });
});
