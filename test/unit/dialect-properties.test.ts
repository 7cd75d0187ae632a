// Property tests: whatever the engine says survives the trip through every dialect and back, and the
// stream replays say the same as the JSON answers. Names, ids, arguments, text and reasoning must survive.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { DIALECTS } from '../../src/capture/dialects/index.js';
import { decryptReasoning, encryptReasoning } from '../../src/capture/dialects/reasoning.js';
import type { ChatMessage, ChatResponse, ChatToolCall, JsonObject } from '../../src/capture/types.js';

const { openai_chat: chat, openai_responses: responses, anthropic_messages: anthropic, google_gemini: gemini } = DIALECTS;

const name = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_-]{0,30}$/);
const id = fc.stringMatching(/^[A-Za-z0-9_-]{1,24}$/);
// Mixed: any grapheme, plus a bias towards whitespace, quotes and escapes where converters tend to slip.
const text = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 60 }),
  fc.string({ unit: fc.constantFrom(' ', '\n', '\t', 'a', 'é', '{', '"', '\\', '😀', 'x-anthropic-billing-header:'), maxLength: 20 }),
);
// Arguments as the engine emits them: a JSON object (normalised through JSON so -0 and friends compare).
const args = fc
  .dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 })
  .map((o) => JSON.parse(JSON.stringify(o)) as JsonObject);
const toolCall = fc
  .record({ id, name, args })
  .map(({ id: i, name: n, args: a }): ChatToolCall => ({ id: i, type: 'function', function: { name: n, arguments: JSON.stringify(a) } }));
const uniqueCalls = fc.uniqueArray(toolCall, { maxLength: 4, selector: (c) => c.id });

const engineMessage = fc
  .record({ content: fc.option(text, { nil: null }), reasoning: fc.option(text, { nil: undefined }), calls: uniqueCalls })
  .map(({ content, reasoning, calls }): ChatMessage => {
    const m: ChatMessage = { role: 'assistant', content: calls.length && content === '' ? null : content };
    if (reasoning) m.reasoning_content = reasoning;
    if (calls.length) m.tool_calls = calls;
    return m;
  });

function answer(message: ChatMessage): ChatResponse {
  return {
    id: 'chatcmpl-prop',
    object: 'chat.completion',
    created: 1,
    model: 'engine-model',
    choices: [{ index: 0, message, finish_reason: message.tool_calls ? 'tool_calls' : 'stop' }],
    usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
  };
}

const ctx = (path: string, request: JsonObject = {}) => ({ path, request, clientModel: 'client-model' });

/** The engine turn and the turn recovered from the client's next request carry the same content. */
function assertSameTurn(original: ChatMessage, back: ChatMessage | undefined, exactArguments: boolean): void {
  assert.ok(back, 'assistant turn recovered');
  assert.equal(back.role, 'assistant');
  assert.equal(back.content ?? '', original.content ?? '');
  assert.equal(back.reasoning_content ?? '', original.reasoning_content ?? '');
  const calls = (m: ChatMessage) =>
    (m.tool_calls ?? []).map((c) => ({
      id: c.id,
      name: c.function.name,
      args: exactArguments ? c.function.arguments : JSON.parse(c.function.arguments),
    }));
  assert.deepEqual(calls(back), calls(original));
}

const hasSomething = (m: ChatMessage) => Boolean(m.content || m.reasoning_content || m.tool_calls?.length);

describe('engine answer -> dialect answer -> next request -> chat (round trip)', () => {
  it('Anthropic: thinking, text and tool_use come back as the same assistant turn', () => {
    fc.assert(
      fc.property(engineMessage, (message) => {
        const out = anthropic.fromChat(answer(message), ctx('/v1/messages')) as JsonObject;
        const next = {
          messages: [
            { role: 'user', content: 'go' },
            { role: 'assistant', content: out.content },
          ],
        };
        assertSameTurn(message, anthropic.toChat(next, ctx('/v1/messages', next)).messages[1], false);
      }),
    );
  });

  it('Responses: output items come back as one assistant turn with byte-identical arguments', () => {
    fc.assert(
      fc.property(engineMessage.filter(hasSomething), (message) => {
        const out = responses.fromChat(answer(message), ctx('/v1/responses')) as { output: JsonObject[] };
        const outputs = (message.tool_calls ?? []).map((c) => ({ type: 'function_call_output', call_id: c.id, output: 'ok' }));
        const next = { input: [{ role: 'user', content: 'go' }, ...out.output, ...outputs] };
        const messages = responses.toChat(next, ctx('/v1/responses', next)).messages;
        assertSameTurn(message, messages[1], true);
        assert.deepEqual(
          messages.slice(2).map((m) => m.tool_call_id),
          (message.tool_calls ?? []).map((c) => c.id),
        );
      }),
    );
  });

  it('Gemini: thought, text and functionCall parts come back as the same assistant turn', () => {
    fc.assert(
      fc.property(engineMessage, (message) => {
        const out = gemini.fromChat(answer(message), ctx('/v1beta/models/m:generateContent')) as { candidates: { content: JsonObject }[] };
        const next = { contents: [{ role: 'user', parts: [{ text: 'go' }] }, out.candidates[0]!.content] };
        assertSameTurn(message, gemini.toChat(next, ctx('/v1beta/models/m:generateContent', next)).messages[1], false);
      }),
    );
  });

  it('Chat Completions: the answer message is passed back unchanged', () => {
    fc.assert(
      fc.property(engineMessage, (message) => {
        const out = chat.fromChat(answer(message), ctx('/v1/chat/completions')) as ChatResponse;
        const next = { messages: [{ role: 'user', content: 'go' }, out.choices[0]!.message] };
        assertSameTurn(message, chat.toChat(next, ctx('/v1/chat/completions', next)).messages[1], true);
      }),
    );
  });
});

describe('stream replay says the same as the JSON answer', () => {
  it('Anthropic: reassembled blocks equal fromChat content', () => {
    fc.assert(
      fc.property(engineMessage, (message) => {
        const c = ctx('/v1/messages');
        const json = anthropic.fromChat(answer(message), c) as { content: JsonObject[]; stop_reason: string };
        const blocks: JsonObject[] = [];
        let stop: unknown;
        for (const e of anthropic.streamEvents(answer(message), c)) {
          const d = e.data as JsonObject;
          if (d.type === 'content_block_start') blocks[d.index as number] = { ...(d.content_block as JsonObject) };
          if (d.type === 'content_block_delta') {
            const b = blocks[d.index as number]!;
            const delta = d.delta as JsonObject;
            if (delta.type === 'text_delta') b.text = String(b.text) + String(delta.text);
            if (delta.type === 'thinking_delta') b.thinking = String(b.thinking) + String(delta.thinking);
            if (delta.type === 'signature_delta') b.signature = delta.signature;
            if (delta.type === 'input_json_delta') b.input = JSON.parse(String(delta.partial_json));
          }
          if (d.type === 'message_delta') stop = (d.delta as JsonObject).stop_reason;
        }
        assert.deepEqual(blocks, json.content);
        assert.equal(stop, json.stop_reason);
      }),
    );
  });

  it('Responses: deltas rebuild the items and response.completed equals fromChat', () => {
    fc.assert(
      fc.property(engineMessage, (message) => {
        const c = ctx('/v1/responses');
        const json = responses.fromChat(answer(message), c) as { output: JsonObject[] };
        const events = responses.streamEvents(answer(message), c);
        const text = new Map<number, string>();
        const argsByIndex = new Map<number, string>();
        for (const e of events) {
          const d = e.data as JsonObject;
          const i = d.output_index as number;
          if (d.type === 'response.output_text.delta') text.set(i, (text.get(i) ?? '') + String(d.delta));
          if (d.type === 'response.function_call_arguments.delta') argsByIndex.set(i, (argsByIndex.get(i) ?? '') + String(d.delta));
        }
        json.output.forEach((item, i) => {
          if (item.type === 'message') assert.equal(text.get(i), (item.content as JsonObject[])[0]!.text);
          if (item.type === 'function_call') assert.equal(argsByIndex.get(i) ?? '', item.arguments);
        });
        assert.deepEqual((events.at(-1)!.data as JsonObject).response, json);
        assert.deepEqual(
          events.map((e) => (e.data as JsonObject).sequence_number),
          events.map((_, i) => i),
        );
      }),
    );
  });

  it('Gemini: the events together carry exactly the JSON answer parts', () => {
    fc.assert(
      fc.property(engineMessage, (message) => {
        const c = ctx('/v1beta/models/m:streamGenerateContent?alt=sse');
        const json = gemini.fromChat(answer(message), c) as { candidates: { content: { parts: unknown[] } }[] };
        const streamed = gemini.streamEvents(answer(message), c).flatMap((e) => (e.data as typeof json).candidates[0]!.content.parts);
        assert.deepEqual(streamed, json.candidates[0]!.content.parts);
      }),
    );
  });

  it('Chat Completions: the single chunk carries the message', () => {
    fc.assert(
      fc.property(engineMessage, (message) => {
        const [chunk, done] = chat.streamEvents(answer(message), ctx('/v1/chat/completions'));
        assert.equal(done!.data, '[DONE]');
        const delta = (chunk!.data as { choices: { delta: ChatMessage }[] }).choices[0]!.delta;
        assertSameTurn(message, delta, true);
      }),
    );
  });
});

// A harness-side conversation: user prompt, then rounds of (assistant turn with calls, results).
const round = fc.record({
  text: fc.option(text, { nil: null }),
  thinking: fc.option(text, { nil: undefined }),
  calls: uniqueCalls,
  result: text,
});
const conversation = fc.record({ prompt: text, rounds: fc.array(round, { maxLength: 3 }) }).map(({ prompt, rounds }) => {
  // Ids must be unique across the whole conversation, as harnesses make them.
  let n = 0;
  const fixed = rounds.map((r) => ({ ...r, calls: r.calls.map((c) => ({ ...c, id: `${c.id}_${n++}` })) }));
  return { prompt, rounds: fixed };
});
type Conversation = typeof conversation extends fc.Arbitrary<infer T> ? T : never;

function expectedCalls(conv: Conversation) {
  return conv.rounds.flatMap((r) =>
    r.calls.map((c) => ({ id: c.id, name: c.function.name, args: JSON.parse(c.function.arguments) as unknown })),
  );
}
function actualCalls(messages: ChatMessage[]) {
  return messages.flatMap((m) =>
    (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, args: JSON.parse(c.function.arguments) as unknown })),
  );
}
function toolResults(messages: ChatMessage[]) {
  return messages.filter((m) => m.role === 'tool').map((m) => [m.tool_call_id, m.content]);
}
function expectedResults(conv: Conversation, wrap: (s: string) => string = (s) => s) {
  return conv.rounds.flatMap((r) => r.calls.map((c) => [c.id, wrap(r.result)]));
}

describe('dialect request -> chat keeps tool names, ids, arguments and texts', () => {
  it('Anthropic', () => {
    fc.assert(
      fc.property(conversation, (conv) => {
        const messages: JsonObject[] = [{ role: 'user', content: conv.prompt }];
        for (const r of conv.rounds) {
          const blocks: JsonObject[] = [];
          if (r.thinking) blocks.push({ type: 'thinking', thinking: r.thinking, signature: 'x' });
          if (r.text) blocks.push({ type: 'text', text: r.text });
          for (const c of r.calls)
            blocks.push({ type: 'tool_use', id: c.id, name: c.function.name, input: JSON.parse(c.function.arguments) });
          messages.push({ role: 'assistant', content: blocks });
          if (r.calls.length)
            messages.push({ role: 'user', content: r.calls.map((c) => ({ type: 'tool_result', tool_use_id: c.id, content: r.result })) });
        }
        const body = { messages };
        const out = anthropic.toChat(body, ctx('/v1/messages', body)).messages;
        assert.equal(out[0]!.content, conv.prompt);
        assert.deepEqual(actualCalls(out), expectedCalls(conv));
        assert.deepEqual(toolResults(out), expectedResults(conv));
        assert.deepEqual(
          out.filter((m) => m.role === 'assistant').map((m) => [m.content ?? null, m.reasoning_content ?? undefined]),
          conv.rounds.map((r) => [r.text || null, r.thinking || undefined]),
        );
      }),
    );
  });

  it('Responses', () => {
    fc.assert(
      fc.property(conversation, (conv) => {
        const input: JsonObject[] = [{ role: 'user', content: conv.prompt }];
        for (const r of conv.rounds) {
          if (r.thinking)
            input.push({
              type: 'reasoning',
              summary: [{ type: 'summary_text', text: r.thinking }],
              encrypted_content: encryptReasoning(r.thinking),
            });
          if (r.text) input.push({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: r.text }] });
          for (const c of r.calls)
            input.push({ type: 'function_call', call_id: c.id, name: c.function.name, arguments: c.function.arguments });
          for (const c of r.calls) input.push({ type: 'function_call_output', call_id: c.id, output: r.result });
        }
        const body = { input };
        const out = responses.toChat(body, ctx('/v1/responses', body)).messages;
        assert.equal(out[0]!.content, conv.prompt);
        assert.deepEqual(actualCalls(out), expectedCalls(conv));
        assert.deepEqual(toolResults(out), expectedResults(conv));
        const arguments_ = out.flatMap((m) => (m.tool_calls ?? []).map((c) => c.function.arguments));
        assert.deepEqual(
          arguments_,
          conv.rounds.flatMap((r) => r.calls.map((c) => c.function.arguments)),
          'byte-identical',
        );
      }),
    );
  });

  it('Gemini', () => {
    fc.assert(
      fc.property(conversation, (conv) => {
        const contents: JsonObject[] = [{ role: 'user', parts: [{ text: conv.prompt }] }];
        for (const r of conv.rounds) {
          const parts: JsonObject[] = [];
          if (r.thinking) parts.push({ text: r.thinking, thought: true });
          if (r.text) parts.push({ text: r.text });
          for (const c of r.calls)
            parts.push({ functionCall: { id: c.id, name: c.function.name, args: JSON.parse(c.function.arguments) } });
          contents.push({ role: 'model', parts });
          if (r.calls.length)
            contents.push({
              role: 'user',
              parts: r.calls.map((c) => ({ functionResponse: { id: c.id, name: c.function.name, response: { output: r.result } } })),
            });
        }
        const body = { contents };
        const out = gemini.toChat(body, ctx('/v1beta/models/m:generateContent', body)).messages;
        assert.deepEqual(out[0]!.content, [{ type: 'text', text: conv.prompt }]);
        assert.deepEqual(actualCalls(out), expectedCalls(conv));
        assert.deepEqual(
          toolResults(out),
          expectedResults(conv, (s) => JSON.stringify({ output: s })),
        );
      }),
    );
  });
});

describe('reasoning encryption', () => {
  it('decrypts back to any text', () => {
    fc.assert(fc.property(fc.string({ unit: 'grapheme', maxLength: 200 }), (t) => assert.equal(decryptReasoning(encryptReasoning(t)), t)));
  });
});
