import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { OpenAIResponsesDialect } from '../../src/capture/dialects/openai-responses.js';
import { DialectError, type JsonObject } from '../../src/capture/types.js';
import { ctxFor, eventTypes, exampleResponse, textResponse } from './dialect-fixtures.js';

const responses = new OpenAIResponsesDialect();
const PATH = '/v1/responses';
const convert = (body: JsonObject) => responses.toChat(body, ctxFor(PATH, body));

// The §7.3 request as codex sends it, with codex's extra fields (docs/harnesses.md).
const codexRequest: JsonObject = {
  model: 'Qwen3.5-4B',
  instructions: 'You are Codex...',
  stream: true,
  store: false,
  include: ['reasoning.encrypted_content'],
  prompt_cache_key: 'k',
  client_metadata: { a: 1 },
  reasoning: { effort: 'high', summary: 'auto' },
  parallel_tool_calls: false,
  input: [
    { type: 'message', role: 'developer', content: [{ type: 'input_text', text: '<permissions ...>' }] },
    {
      type: 'message',
      role: 'user',
      content: [
        { type: 'input_text', text: 'What is in /tmp?' },
        { type: 'input_image', image_url: 'data:image/png;base64,iVBOR', detail: 'original' },
      ],
    },
    { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'List it.' }], encrypted_content: 'oe:TGlzdCBpdC4' },
    { type: 'function_call', call_id: 'call_1', name: 'shell', arguments: '{"command":["ls","/tmp"]}' },
    { type: 'function_call_output', call_id: 'call_1', output: 'a.txt\nb.txt' },
  ],
  tools: [
    {
      type: 'function',
      name: 'shell',
      description: 'Runs a command',
      strict: false,
      parameters: { type: 'object', properties: { command: { type: 'array', items: { type: 'string' } } } },
    },
    { type: 'web_search', external_web_access: false },
    { type: 'namespace', name: 'multi_agent_v1', tools: [] },
  ],
  tool_choice: 'auto',
  max_output_tokens: 8192,
};

describe('OpenAIResponsesDialect request', () => {
  it('converts the codex request (§7.3)', () => {
    const out = convert(codexRequest);
    assert.deepEqual(out.messages, [
      { role: 'system', content: 'You are Codex...\n\n<permissions ...>' },
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
        reasoning_content: 'List it.',
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'shell', arguments: '{"command":["ls","/tmp"]}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'a.txt\nb.txt' },
    ]);
    assert.deepEqual(out.tools, [
      {
        type: 'function',
        function: {
          name: 'shell',
          description: 'Runs a command',
          strict: false,
          parameters: { type: 'object', properties: { command: { type: 'array', items: { type: 'string' } } } },
        },
      },
    ]);
    assert.equal(out.tool_choice, 'auto');
    assert.equal(out.max_tokens, 8192);
    assert.equal(out.parallel_tool_calls, false);
    assert.equal(out.stream, true);
    assert.deepEqual(out.chat_template_kwargs, { enable_thinking: true });
    for (const key of ['store', 'include', 'prompt_cache_key', 'client_metadata', 'input', 'instructions'])
      assert.equal(key in out, false, key);
  });

  it('keeps only image detail auto/low/high', () => {
    const body = {
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_image', image_url: 'https://x/a.png', detail: 'low' },
            { type: 'input_image', image_url: 'https://x/b.png', detail: 'original' },
          ],
        },
      ],
    };
    assert.deepEqual(convert(body).messages[0]!.content, [
      { type: 'image_url', image_url: { url: 'https://x/a.png', detail: 'low' } },
      { type: 'image_url', image_url: { url: 'https://x/b.png' } },
    ]);
  });

  it('takes a string input as one user message', () => {
    assert.deepEqual(convert({ input: 'hi', model: 'm' }).messages, [{ role: 'user', content: 'hi' }]);
  });

  it('gathers consecutive function_call items into one assistant message, joining the preceding text', () => {
    const out = convert({
      input: [
        { role: 'user', content: 'go' },
        { type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: 'R1' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Checking.' }] },
        { type: 'function_call', call_id: 'a', name: 'f', arguments: '{}' },
        { type: 'function_call', call_id: 'b', name: 'g', arguments: '{"x":1}' },
        { type: 'function_call_output', call_id: 'a', output: 'A' },
        {
          type: 'function_call_output',
          call_id: 'b',
          output: [
            { type: 'input_text', text: 'B' },
            { type: 'input_image', image_url: 'data:image/png;base64,QQ' },
          ],
        },
        { type: 'reasoning', summary: [{ type: 'summary_text', text: 'R2' }] },
        { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c', output: { output: 'C' } },
      ],
    });
    assert.deepEqual(out.messages, [
      { role: 'user', content: 'go' },
      {
        role: 'assistant',
        content: 'Checking.',
        reasoning_content: 'R1',
        tool_calls: [
          { id: 'a', type: 'function', function: { name: 'f', arguments: '{}' } },
          { id: 'b', type: 'function', function: { name: 'g', arguments: '{"x":1}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'a', content: 'A' },
      { role: 'tool', tool_call_id: 'b', content: 'B' },
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,QQ' } }] },
      {
        role: 'assistant',
        content: null,
        reasoning_content: 'R2',
        tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: 'c', content: 'C' },
    ]);
  });

  it('attaches per-call reasoning to its own call even without outputs in between', () => {
    const out = convert({
      input: [
        { type: 'reasoning', summary: [{ text: 'R1' }] },
        { type: 'function_call', call_id: 'a', name: 'f', arguments: '{}' },
        { type: 'reasoning', summary: [{ text: 'R2' }] },
        { type: 'function_call', call_id: 'b', name: 'f', arguments: '{}' },
      ],
    });
    assert.deepEqual(
      out.messages.map((m) => [m.reasoning_content, m.tool_calls?.map((c) => c.id)]),
      [
        ['R1', ['a']],
        ['R2', ['b']],
      ],
    );
  });

  it('turns trailing reasoning into an assistant message with null content', () => {
    const out = convert({
      input: [
        { role: 'user', content: 'q' },
        { type: 'reasoning', encrypted_content: 'oe:TGlzdCBpdC4' },
      ],
    });
    assert.deepEqual(out.messages[1], { role: 'assistant', content: null, reasoning_content: 'List it.' });
  });

  it('converts local_shell / shell calls and outputs to the synthetic shell function', () => {
    const out = convert({
      tools: [{ type: 'local_shell' }],
      input: [
        {
          type: 'local_shell_call',
          call_id: 'ls1',
          status: 'completed',
          action: { type: 'exec', command: ['bash', '-lc', 'ls /tmp'], timeout_ms: 1000, env: {} },
        },
        { type: 'local_shell_call_output', call_id: 'ls1', output: 'a.txt' },
        { type: 'shell_call', call_id: 'sh1', action: { commands: ['pwd', 'ls'], timeout_ms: 5, max_output_length: 9 } },
        { type: 'shell_call_output', call_id: 'sh1', output: [{ stdout: '/w', stderr: '', outcome: { type: 'exit', exit_code: 0 } }] },
      ],
    });
    assert.deepEqual(out.messages, [
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'ls1', type: 'function', function: { name: 'shell', arguments: '{"cmd":"ls /tmp","timeout_ms":1000,"env":{}}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'ls1', content: 'a.txt' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'sh1',
            type: 'function',
            function: { name: 'shell', arguments: '{"commands":["pwd","ls"],"timeout_ms":5,"max_output_length":9}' },
          },
        ],
      },
      { role: 'tool', tool_call_id: 'sh1', content: '/w' },
    ]);
    assert.equal(out.tools![0]!.function.name, 'shell');
  });

  it('converts tool definitions (nested, flat, inputSchema.jsonSchema) and tool_choice forms', () => {
    const out = convert({
      input: 'x',
      tools: [
        { type: 'function', function: { name: 'nested', parameters: {} } },
        { type: 'function', name: 'mcp_tool', inputSchema: { jsonSchema: { type: 'object', properties: { q: { type: 'string' } } } } },
        { type: 'file_search' },
        { type: 'mcp', server_label: 's' },
        { type: 'custom', name: 'apply_patch' },
        { type: 'image_generation' },
      ],
      tool_choice: { type: 'function', name: 'mcp_tool' },
    });
    assert.deepEqual(
      out.tools!.map((t) => t.function.name),
      ['nested', 'mcp_tool'],
    );
    assert.deepEqual(out.tools![1]!.function.parameters, { type: 'object', properties: { q: { type: 'string' } } });
    assert.deepEqual(out.tool_choice, { type: 'function', function: { name: 'mcp_tool' } });
    const none = convert({ input: 'x', tools: [{ type: 'web_search' }], tool_choice: 'required', parallel_tool_calls: true });
    assert.equal('tools' in none || 'tool_choice' in none, false);
  });

  it('maps text.format and reasoning effort none', () => {
    const out = convert({
      input: 'x',
      text: { format: { type: 'json_schema', name: 'n', schema: { type: 'object' }, strict: true } },
      reasoning: { effort: 'none' },
    });
    assert.deepEqual(out.response_format, { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'object' }, strict: true } });
    assert.equal(out.chat_template_kwargs, undefined);
    assert.deepEqual(convert({ input: 'x', text: { format: { type: 'json_object' } } }).response_format, { type: 'json_object' });
    assert.equal(convert({ input: 'x', text: { format: { type: 'text' } } }).response_format, undefined);
  });

  it('rejects wrong types with a DialectError', () => {
    for (const body of [
      { input: 5 },
      { input: [1] },
      { input: [{ type: 'function_call', call_id: 'a', arguments: '{}' }] },
      { input: [{ type: 'function_call', name: 'f', arguments: {} }] },
      { input: 'x', tools: {} },
    ] as JsonObject[]) {
      assert.throws(() => convert(body), DialectError, JSON.stringify(body));
    }
  });
});

describe('OpenAIResponsesDialect response', () => {
  it('converts the §7.3 answer with reasoning, message and function_call items and full usage', () => {
    const out = responses.fromChat(exampleResponse(), ctxFor(PATH, { model: 'Qwen3.5-4B' }));
    assert.match(out.id as string, /^resp_[0-9a-f]{24}$/);
    assert.equal(out.object, 'response');
    assert.equal(out.status, 'completed');
    assert.equal(out.model, 'Qwen3.5-4B');
    assert.equal(out.created_at, 1730000000);
    const [rs, msg, fc] = out.output as JsonObject[];
    assert.deepEqual(
      { ...rs, id: undefined },
      {
        type: 'reasoning',
        id: undefined,
        status: 'completed',
        summary: [{ type: 'summary_text', text: 'Count lines next.' }],
        content: [{ type: 'reasoning_text', text: 'Count lines next.' }],
        encrypted_content: 'oe:Q291bnQgbGluZXMgbmV4dC4',
      },
    );
    assert.deepEqual(
      { ...msg, id: undefined },
      {
        type: 'message',
        id: undefined,
        role: 'assistant',
        status: 'completed',
        content: [{ type: 'output_text', text: 'Checking a.txt.', annotations: [] }],
      },
    );
    assert.deepEqual(
      { ...fc, id: undefined },
      {
        type: 'function_call',
        id: undefined,
        call_id: 'call_2',
        name: 'bash',
        arguments: '{"command":"wc -l notes.txt"}',
        status: 'completed',
      },
    );
    assert.match(rs!.id as string, /^rs_/);
    assert.match(msg!.id as string, /^msg_/);
    assert.match(fc!.id as string, /^fc_/);
    assert.deepEqual(out.usage, {
      input_tokens: 812,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 41,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 853,
    });
  });

  it('emits a shell item only when the request declared a shell tool', () => {
    const r = textResponse(null, 'tool_calls', {
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'execute', arguments: '{"cmd":"ls"}' } }],
    });
    const plain = responses.fromChat(r, ctxFor(PATH, { tools: [{ type: 'function', name: 'execute' }] }));
    assert.equal((plain.output as JsonObject[])[0]!.type, 'function_call');
    const local = (responses.fromChat(r, ctxFor(PATH, { tools: [{ type: 'local_shell' }] })).output as JsonObject[])[0]!;
    assert.deepEqual(
      { type: local.type, call_id: local.call_id, action: local.action },
      { type: 'local_shell_call', call_id: 'c1', action: { type: 'exec', command: ['bash', '-lc', 'ls'], env: {} } },
    );
    const shell = (responses.fromChat(r, ctxFor(PATH, { tools: [{ type: 'shell' }] })).output as JsonObject[])[0]!;
    assert.deepEqual({ type: shell.type, action: shell.action }, { type: 'shell_call', action: { commands: ['ls'] } });
    // ...and the shell item converts back to the same arguments on the next request.
    const back = convert({ tools: [{ type: 'local_shell' }], input: [local] });
    assert.equal(back.messages[0]!.tool_calls![0]!.function.arguments, '{"cmd":"ls","env":{}}');
  });

  it('omits the message item for empty content', () => {
    assert.deepEqual(responses.fromChat(textResponse(''), ctxFor(PATH, {})).output, []);
  });
});

describe('OpenAIResponsesDialect stream (§8.3 plus OpenAI fields)', () => {
  const events = responses.streamEvents(exampleResponse(), ctxFor(PATH, { model: 'Qwen3.5-4B' }));
  const data = events.map((e) => e.data as JsonObject);

  it('emits the exact event sequence', () => {
    assert.deepEqual(eventTypes(events), [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.reasoning_summary_part.added',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.done',
      'response.reasoning_summary_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
  });

  it('numbers every event, carries the type in the payload and item_id on deltas', () => {
    data.forEach((d, i) => {
      assert.equal(d.sequence_number, i);
      assert.equal(d.type, events[i]!.event);
    });
    for (const d of data.filter((x) => String(x.type).endsWith('.delta') || String(x.type).includes('content_part')))
      assert.match(d.item_id as string, /^(rs|msg|fc)_/);
    assert.equal(
      events.some((e) => e.data === '[DONE]'),
      false,
    );
  });

  it('uses consistent output indices and ends with the same response fromChat returns', () => {
    const added = data.filter((d) => d.type === 'response.output_item.added').map((d) => [d.output_index, (d.item as JsonObject).type]);
    assert.deepEqual(added, [
      [0, 'reasoning'],
      [1, 'message'],
      [2, 'function_call'],
    ]);
    const messageDone = data.find((d) => d.type === 'response.output_item.done' && (d.item as JsonObject).type === 'message')!;
    assert.match((messageDone.item as JsonObject).id as string, /^msg_/);
    const completed = data.at(-1)!.response as JsonObject;
    assert.deepEqual(completed, responses.fromChat(exampleResponse(), ctxFor(PATH, { model: 'Qwen3.5-4B' })));
    assert.deepEqual((completed.usage as JsonObject).input_tokens_details, { cached_tokens: 0 });
    const created = data[0]!.response as JsonObject;
    assert.equal(created.status, 'in_progress');
    assert.deepEqual(created.output, []);
    assert.equal(created.id, completed.id);
  });

  it('streams a tool-only answer without message events', () => {
    const r = textResponse(null, 'tool_calls', { tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '' } }] });
    assert.deepEqual(eventTypes(responses.streamEvents(r, ctxFor(PATH, {}))), [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
  });
});

describe('OpenAIResponsesDialect errors', () => {
  it('uses the OpenAI error shape and the Responses stream error event', () => {
    assert.deepEqual(responses.errorBody(401, 'no key'), {
      error: { message: 'no key', type: 'invalid_request_error', param: null, code: null },
    });
    assert.deepEqual(responses.streamErrorEvent(502, 'late'), {
      event: 'error',
      data: { type: 'error', code: 'server_error', message: 'late', param: null, sequence_number: 0 },
    });
  });
});
