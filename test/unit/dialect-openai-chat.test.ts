import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { OpenAIChatDialect } from '../../src/capture/dialects/openai-chat.js';
import { DialectError, type JsonObject } from '../../src/capture/types.js';
import { ctxFor, exampleResponse } from './dialect-fixtures.js';

const chat = new OpenAIChatDialect();

// The §7.1 request as opencode sends it.
const opencodeRequest: JsonObject = {
  model: 'intercepted/Qwen3.5-4B',
  stream: true,
  stream_options: { include_usage: true },
  messages: [
    { role: 'system', content: 'You are a coding agent.' },
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is in /tmp?' },
        { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBOR' } },
      ],
    },
    {
      role: 'assistant',
      content: null,
      reasoning_content: 'I should list it.',
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'bash', arguments: '{"command":"ls /tmp"}' } }],
    },
    { role: 'tool', tool_call_id: 'call_1', content: 'a.txt\nb.txt' },
  ],
  tools: [
    {
      type: 'function',
      function: {
        name: 'bash',
        description: 'Run a shell command',
        parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
      },
    },
  ],
  tool_choice: 'auto',
  max_completion_tokens: 4096,
  temperature: 0.7,
};

describe('OpenAIChatDialect request', () => {
  it('passes the request through and copies max_completion_tokens into max_tokens', () => {
    const out = chat.toChat(opencodeRequest, ctxFor('/v1/chat/completions', opencodeRequest));
    assert.equal(out.max_tokens, 4096);
    assert.equal(out.max_completion_tokens, 4096);
    assert.deepEqual(out.messages, opencodeRequest.messages);
    assert.deepEqual(out.tools, opencodeRequest.tools);
    assert.equal(out.temperature, 0.7);
    assert.deepEqual(out.chat_template_kwargs, { enable_thinking: false }, 'Qwen3.5 default');
  });

  it('keeps an explicit max_tokens and accepts harness extras (qwen-code tool content arrays, store, user)', () => {
    const body = {
      model: 'm',
      max_tokens: 10,
      max_completion_tokens: 99,
      store: false,
      user: 'u',
      _session_id: 'h1',
      messages: [{ role: 'tool', tool_call_id: 'call_1', content: [{ type: 'text', text: 'Output: TOOL_RAN_42' }] }],
    };
    const out = chat.toChat(body, ctxFor('/v1/chat/completions', body));
    assert.equal(out.max_tokens, 10);
    assert.equal(out.store, false);
    assert.equal('_session_id' in out, false, 'internal/underscore markers are not forwarded');
    assert.deepEqual(out.messages[0]!.content, [{ type: 'text', text: 'Output: TOOL_RAN_42' }]);
  });

  it('merges developer and system messages to the top (§7.0)', () => {
    const body = {
      messages: [
        { role: 'system', content: 'S' },
        { role: 'user', content: 'u' },
        { role: 'developer', content: 'D' },
      ],
    };
    assert.deepEqual(chat.toChat(body, ctxFor('/v1/chat/completions', body)).messages, [
      { role: 'system', content: 'S\n\nD' },
      { role: 'user', content: 'u' },
    ]);
  });

  it('rejects unconvertible input with a DialectError', () => {
    for (const body of [
      {},
      { messages: 'hi' },
      { messages: [1] },
      { messages: [{ content: 'x' }] },
      { messages: [{ role: 'user', content: 5 }] },
      { messages: [], tools: {} },
    ]) {
      assert.throws(
        () => chat.toChat(body as JsonObject, ctxFor('/v1/chat/completions', body as JsonObject)),
        DialectError,
        JSON.stringify(body),
      );
    }
  });

  it('wants a stream only for stream === true', () => {
    assert.equal(chat.wantsStream({ stream: true }), true);
    assert.equal(chat.wantsStream({ stream: 'true' }), false);
    assert.equal(chat.wantsStream({}), false);
  });
});

describe('OpenAIChatDialect response', () => {
  it('echoes the client model, strips token ids and unrequested logprobs, fills usage details', () => {
    const out = chat.fromChat(exampleResponse(), ctxFor('/v1/chat/completions', { model: 'intercepted/Qwen3.5-4B' }));
    assert.equal(out.model, 'intercepted/Qwen3.5-4B');
    assert.equal('prompt_token_ids' in out, false);
    assert.equal('token_ids' in out.choices[0]!, false);
    assert.equal(out.choices[0]!.logprobs, null);
    assert.deepEqual(out.usage!.prompt_tokens_details, { cached_tokens: 0, audio_tokens: 0 });
    assert.equal((out.usage!.completion_tokens_details as JsonObject).reasoning_tokens, 0);
    assert.equal(out.choices[0]!.message.tool_calls![0]!.id, 'call_2');
  });

  it('returns logprobs when the client asked, without the internal token_id stamp', () => {
    const out = chat.fromChat(exampleResponse(), ctxFor('/v1/chat/completions', { logprobs: true }));
    assert.deepEqual(out.choices[0]!.logprobs!.content![0], { token: 'token_id:151657', logprob: -0.0012 });
  });

  it('renames vLLM reasoning to reasoning_content', () => {
    const response = exampleResponse();
    response.choices[0]!.message = { role: 'assistant', content: 'x', reasoning: 'think' };
    const message = chat.fromChat(response, ctxFor('/v1/chat/completions', {})).choices[0]!.message;
    assert.equal(message.reasoning_content, 'think');
    assert.equal('reasoning' in message, false);
  });

  it('streams exactly one chunk then [DONE] (§8.3)', () => {
    const events = chat.streamEvents(exampleResponse(), ctxFor('/v1/chat/completions', { model: 'client-m' }));
    assert.equal(events.length, 2);
    assert.equal(events[1]!.data, '[DONE]');
    assert.equal(
      events.every((e) => e.event === undefined),
      true,
    );
    assert.deepEqual(events[0]!.data, {
      id: 'chatcmpl-8f2',
      object: 'chat.completion.chunk',
      created: 1730000000,
      model: 'client-m',
      choices: [
        {
          index: 0,
          finish_reason: 'tool_calls',
          delta: {
            role: 'assistant',
            content: 'Checking a.txt.',
            reasoning_content: 'Count lines next.',
            tool_calls: [
              { index: 0, id: 'call_2', type: 'function', function: { name: 'bash', arguments: '{"command":"wc -l notes.txt"}' } },
            ],
          },
        },
      ],
      usage: {
        prompt_tokens: 812,
        completion_tokens: 41,
        total_tokens: 853,
        prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
      },
    });
  });

  it('includes empty-string content in the chunk but not null content', () => {
    const withEmpty = exampleResponse();
    withEmpty.choices[0]!.message = { role: 'assistant', content: '' };
    const delta = (e: unknown) => (e as { choices: { delta: JsonObject }[] }).choices[0]!.delta;
    assert.equal(delta(chat.streamEvents(withEmpty, ctxFor('/', {}))[0]!.data).content, '');
    withEmpty.choices[0]!.message = { role: 'assistant', content: null };
    assert.equal('content' in delta(chat.streamEvents(withEmpty, ctxFor('/', {}))[0]!.data), false);
  });
});

describe('OpenAIChatDialect errors', () => {
  it('uses the OpenAI error shape', () => {
    assert.deepEqual(chat.errorBody(400, 'bad'), { error: { message: 'bad', type: 'invalid_request_error', param: null, code: null } });
    assert.deepEqual(chat.errorBody(502, 'engine down'), {
      error: { message: 'engine down', type: 'server_error', param: null, code: 'server_error' },
    });
    assert.deepEqual(chat.streamErrorEvent(502, 'late'), { data: { error: { message: 'late', code: 502 } } });
  });
});
