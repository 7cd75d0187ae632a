import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AnthropicMessagesDialect } from '../../src/capture/dialects/anthropic-messages.js';
import { anthropicSignature } from '../../src/capture/dialects/reasoning.js';
import { DialectError, type JsonObject } from '../../src/capture/types.js';
import { ctxFor, eventTypes, exampleResponse, textResponse } from './dialect-fixtures.js';

const anthropic = new AnthropicMessagesDialect();
const PATH = '/v1/messages?beta=true';

// The §7.2 request as claude-code sends it, plus its non-standard fields (docs/harnesses.md).
const claudeRequest: JsonObject = {
  model: 'Qwen3.5-4B',
  max_tokens: 32000,
  stream: true,
  system: [
    { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1; cch=9f3a\n' },
    { type: 'text', text: 'You are Claude Code...', cache_control: { type: 'ephemeral' } },
  ],
  thinking: { type: 'adaptive' },
  context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
  output_config: { effort: 'high' },
  metadata: { user_id: '{"device_id":"d","session_id":"s"}' },
  messages: [
    { role: 'user', content: 'What is in /tmp?' },
    {
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'I should list it.', signature: 'sg_oe_Zk9' },
        { type: 'text', text: 'Listing.' },
        { type: 'tool_use', id: 'toolu_01', name: 'Bash', input: { command: 'ls /tmp' } },
      ],
    },
    {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'toolu_01', content: 'a.txt\nb.txt', is_error: false },
        { type: 'text', text: 'Now summarise.' },
      ],
    },
  ],
  tools: [
    {
      name: 'Bash',
      description: 'Run a shell command',
      input_schema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
    },
    { type: 'web_search_20250305', name: 'web_search' },
  ],
  tool_choice: { type: 'auto' },
  temperature: 1,
};

describe('AnthropicMessagesDialect request', () => {
  const out = anthropic.toChat(claudeRequest, ctxFor(PATH, claudeRequest));

  it('strips the billing-header line and flattens the system blocks', () => {
    assert.deepEqual(out.messages[0], { role: 'system', content: 'You are Claude Code...' });
  });

  it('strips the header whether it is a block of its own, the first line of a string, or unterminated', () => {
    const sys = (system: unknown) => {
      const body = { system, messages: [] };
      return anthropic.toChat(body, ctxFor(PATH, body)).messages[0]?.content;
    };
    assert.equal(
      sys([
        { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.197.1c0; cc_entrypoint=sdk-cli;' },
        { type: 'text', text: 'P' },
      ]),
      'P',
    );
    assert.equal(sys('x-anthropic-billing-header: cch=1;\nP\nQ'), 'P\nQ');
    assert.equal(sys('P\nx-anthropic-billing-header: cch=1;'), 'P\nx-anthropic-billing-header: cch=1;', 'only the first line');
    assert.equal(
      sys([
        { type: 'text', text: 'x-anthropic-billing-header: cch=2;' },
        { type: 'text', text: 'P' },
      ]),
      sys([
        { type: 'text', text: 'x-anthropic-billing-header: cch=1;' },
        { type: 'text', text: 'P' },
      ]),
    );
  });

  it('converts assistant thinking/text/tool_use and user tool_result with ids preserved', () => {
    assert.deepEqual(out.messages.slice(1), [
      { role: 'user', content: 'What is in /tmp?' },
      {
        role: 'assistant',
        content: 'Listing.',
        reasoning_content: 'I should list it.',
        tool_calls: [{ id: 'toolu_01', type: 'function', function: { name: 'Bash', arguments: '{"command":"ls /tmp"}' } }],
      },
      { role: 'tool', tool_call_id: 'toolu_01', content: 'a.txt\nb.txt' },
      { role: 'user', content: 'Now summarise.' },
    ]);
  });

  it('drops server-side tools, maps tool_choice, thinking and sampling fields', () => {
    assert.deepEqual(out.tools, [
      {
        type: 'function',
        function: {
          name: 'Bash',
          description: 'Run a shell command',
          parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
        },
      },
    ]);
    assert.equal(out.tool_choice, 'auto');
    assert.deepEqual(out.chat_template_kwargs, { enable_thinking: true });
    assert.equal(out.max_tokens, 32000);
    assert.equal(out.temperature, 1);
    assert.equal(out.stream, true);
    assert.equal(out.model, 'Qwen3.5-4B');
    for (const key of ['metadata', 'context_management', 'output_config', 'thinking', 'system']) assert.equal(key in out, false, key);
  });

  it('maps every tool_choice form and emits it only when tools remain', () => {
    const tools = [{ name: 'T', input_schema: { type: 'object' } }];
    const choice = (tool_choice: unknown, t: unknown[] = tools) => {
      const body = { messages: [], tools: t, tool_choice };
      return anthropic.toChat(body, ctxFor(PATH, body));
    };
    assert.equal(choice({ type: 'any' }).tool_choice, 'required');
    assert.equal(choice({ type: 'none' }).tool_choice, 'none');
    assert.deepEqual(choice({ type: 'tool', name: 'T' }).tool_choice, { type: 'function', function: { name: 'T' } });
    assert.equal(choice({ type: 'auto', disable_parallel_tool_use: true }).parallel_tool_calls, false);
    const empty = choice({ type: 'any' }, []);
    assert.equal('tools' in empty || 'tool_choice' in empty, false, 'claude-code compaction sends tools: []');
    const serverOnly = choice({ type: 'auto' }, [{ type: 'web_search_20250305', name: 'web_search' }]);
    assert.equal('tools' in serverOnly || 'tool_choice' in serverOnly, false);
  });

  it('handles images, documents, tool errors, tool-result images and mid-conversation system messages', () => {
    const body: JsonObject = {
      max_tokens: 100,
      stop_sequences: ['END'],
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look' },
            { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: '/9j/' } },
            { type: 'image', source: { type: 'url', url: 'https://x/y.png' } },
            { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'doc text' } },
            { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBER' } },
          ],
        },
        { role: 'system', content: [{ type: 'text', text: 'Agents: a, b' }] },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 't1', is_error: true, content: [{ type: 'text', text: 'boom' }] },
            {
              type: 'tool_result',
              tool_use_id: 't2',
              content: [
                { type: 'text', text: 'shot' },
                { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBOR' } },
              ],
            },
          ],
        },
      ],
    };
    const out = anthropic.toChat(body, ctxFor(PATH, body));
    assert.equal(out.stop, body.stop_sequences);
    assert.deepEqual(out.messages, [
      { role: 'system', content: 'Agents: a, b' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look' },
          { type: 'image_url', image_url: { url: 'data:image/jpeg;base64,/9j/' } },
          { type: 'image_url', image_url: { url: 'https://x/y.png' } },
          { type: 'text', text: 'doc text' },
        ],
      },
      { role: 'tool', tool_call_id: 't1', content: '[Tool Error] boom' },
      { role: 'tool', tool_call_id: 't2', content: 'shot' },
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,iVBOR' } }] },
    ]);
  });

  it('defaults max_tokens to 4096', () => {
    const body = { messages: [{ role: 'user', content: 'hi' }] };
    assert.equal(anthropic.toChat(body, ctxFor(PATH, body)).max_tokens, 4096);
  });

  it('rejects wrong types with a DialectError', () => {
    const bad: JsonObject[] = [
      {},
      { messages: {} },
      { messages: [{ role: 'user', content: 5 }] },
      { messages: [], system: 5 },
      { messages: [], tools: 'x' },
      { messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'n', input: 'str' }] }] },
      { messages: [{ role: 'user', content: [{ type: 'tool_result', content: 'x' }] }] },
    ];
    for (const body of bad) assert.throws(() => anthropic.toChat(body, ctxFor(PATH, body)), DialectError, JSON.stringify(body));
  });
});

describe('AnthropicMessagesDialect response', () => {
  it('converts the §7.2 answer: thinking with signature, text, tool_use; stop reason and usage', () => {
    const response = exampleResponse({
      usage: { prompt_tokens: 812, completion_tokens: 41, total_tokens: 853, prompt_tokens_details: { cached_tokens: 12 } },
    });
    assert.deepEqual(anthropic.fromChat(response, ctxFor(PATH, { model: 'Qwen3.5-4B' })), {
      id: 'msg_chatcmpl-8f2',
      type: 'message',
      role: 'assistant',
      model: 'Qwen3.5-4B',
      content: [
        { type: 'thinking', thinking: 'Count lines next.', signature: anthropicSignature('Count lines next.') },
        { type: 'text', text: 'Checking a.txt.' },
        { type: 'tool_use', id: 'call_2', name: 'bash', input: { command: 'wc -l notes.txt' } },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: { input_tokens: 800, output_tokens: 41, cache_read_input_tokens: 12 },
    });
  });

  it('maps finish reasons and reports a matched stop sequence', () => {
    const reason = (finish: string, extra: JsonObject = {}, request: JsonObject = {}) => {
      const r = textResponse('x', finish);
      Object.assign(r.choices[0]!, extra);
      return anthropic.fromChat(r, ctxFor(PATH, request));
    };
    assert.equal(reason('stop').stop_reason, 'end_turn');
    assert.equal(reason('length').stop_reason, 'max_tokens');
    assert.equal(reason('content_filter').stop_reason, 'refusal');
    assert.equal(reason('weird').stop_reason, 'end_turn');
    const matched = reason('stop', { stop_reason: 'END' }, { stop_sequences: ['END'] });
    assert.deepEqual([matched.stop_reason, matched.stop_sequence], ['stop_sequence', 'END']);
  });

  it('emits an empty text block for an empty answer and defaults the model name', () => {
    const out = anthropic.fromChat(textResponse(null), ctxFor(PATH, {}));
    assert.deepEqual(out.content, [{ type: 'text', text: '' }]);
    assert.equal(out.model, 'claude-3');
  });

  it('gives id-less engine calls distinct tool_use ids', () => {
    const r = textResponse(null, 'tool_calls', {
      tool_calls: [0, 1].map(() => ({ id: '', type: 'function', function: { name: 'n', arguments: '{}' } })),
    });
    const ids = (anthropic.fromChat(r, ctxFor(PATH, {})).content as JsonObject[]).map((b) => b.id);
    assert.equal(new Set(ids).size, 2);
  });

  it('parses unparsable arguments to {}', () => {
    const r = textResponse(null, 'tool_calls', {
      tool_calls: [{ id: 'c', type: 'function', function: { name: 'n', arguments: '{oops' } }],
    });
    assert.deepEqual((anthropic.fromChat(r, ctxFor(PATH, {})).content as JsonObject[])[0], {
      type: 'tool_use',
      id: 'c',
      name: 'n',
      input: {},
    });
  });
});

describe('AnthropicMessagesDialect stream (§8.3)', () => {
  it('emits the exact event sequence with block indices 0 thinking, 1 text, 2 tool_use', () => {
    const events = anthropic.streamEvents(exampleResponse(), ctxFor(PATH, { model: 'Qwen3.5-4B' }));
    assert.deepEqual(eventTypes(events), [
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    for (const e of events) assert.equal((e.data as JsonObject).type, e.event, 'payload carries its type');
    const data = events.map((e) => e.data as JsonObject);
    assert.deepEqual((data[0]!.message as JsonObject).content, []);
    assert.equal((data[0]!.message as JsonObject).stop_reason, null);
    assert.equal(((data[0]!.message as JsonObject).usage as JsonObject).output_tokens, 0);
    assert.deepEqual(data[1], { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } });
    assert.deepEqual(data[2]!.delta, { type: 'thinking_delta', thinking: 'Count lines next.' });
    assert.deepEqual(data[3]!.delta, { type: 'signature_delta', signature: anthropicSignature('Count lines next.') });
    assert.deepEqual(data[6]!.delta, { type: 'text_delta', text: 'Checking a.txt.' });
    assert.deepEqual(data[8], {
      type: 'content_block_start',
      index: 2,
      content_block: { type: 'tool_use', id: 'call_2', name: 'bash', input: {} },
    });
    assert.deepEqual(data[9]!.delta, { type: 'input_json_delta', partial_json: '{"command":"wc -l notes.txt"}' });
    assert.deepEqual(data[11]!.delta, { stop_reason: 'tool_use', stop_sequence: null });
    assert.equal((data[11]!.usage as JsonObject).output_tokens, 41);
    assert.equal(
      events.some((e) => e.data === '[DONE]' || e.event === 'ping'),
      false,
    );
  });

  it('emits an empty text block (start + stop) when there is nothing to say', () => {
    const events = anthropic.streamEvents(textResponse(null), ctxFor(PATH, {}));
    assert.deepEqual(eventTypes(events), ['message_start', 'content_block_start', 'content_block_stop', 'message_delta', 'message_stop']);
  });

  it('gives one tool_use block per call, in order', () => {
    const r = textResponse(null, 'tool_calls', {
      tool_calls: [
        { id: 'a', type: 'function', function: { name: 'f', arguments: '{"x":1}' } },
        { id: 'b', type: 'function', function: { name: 'g', arguments: '{}' } },
      ],
    });
    const starts = anthropic
      .streamEvents(r, ctxFor(PATH, {}))
      .filter((e) => e.event === 'content_block_start')
      .map((e) => (e.data as JsonObject).content_block);
    assert.deepEqual(starts, [
      { type: 'tool_use', id: 'a', name: 'f', input: {} },
      { type: 'tool_use', id: 'b', name: 'g', input: {} },
    ]);
  });
});

describe('AnthropicMessagesDialect errors', () => {
  it('uses the Anthropic error shape with a type per status', () => {
    const type = (s: number) => ((anthropic.errorBody(s, 'm') as JsonObject).error as JsonObject).type;
    assert.deepEqual(anthropic.errorBody(400, 'bad'), { type: 'error', error: { type: 'invalid_request_error', message: 'bad' } });
    assert.deepEqual(
      [type(401), type(413), type(429), type(500), type(502), type(422)],
      ['authentication_error', 'request_too_large', 'rate_limit_error', 'api_error', 'api_error', 'invalid_request_error'],
    );
    assert.deepEqual(anthropic.streamErrorEvent(502, 'late'), {
      event: 'error',
      data: { type: 'error', error: { type: 'api_error', message: 'late' } },
    });
  });
});
