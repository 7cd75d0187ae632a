import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GoogleGeminiDialect, geminiModelFromPath } from '../../src/capture/dialects/google-gemini.js';
import { decodeGeminiThoughtSignature, anthropicSignature, geminiThoughtSignature } from '../../src/capture/dialects/reasoning.js';
import { DialectError, type JsonObject } from '../../src/capture/types.js';
import { ctxFor, exampleResponse, textResponse } from './dialect-fixtures.js';

const gemini = new GoogleGeminiDialect();
const STREAM = '/v1beta/models/Qwen3.5-4B:streamGenerateContent?alt=sse';
const PLAIN = '/v1beta/models/Qwen3.5-4B:generateContent';
const convert = (body: JsonObject, path = STREAM) =>
  gemini.toChat(body, { path, request: body, clientModel: gemini.clientModel(body, path) });

// The §7.4 request as gemini-cli sends it.
const cliRequest: JsonObject = {
  systemInstruction: { role: 'user', parts: [{ text: 'You are an interactive CLI agent...' }] },
  contents: [
    { role: 'user', parts: [{ text: 'What is in /tmp?' }, { inlineData: { mimeType: 'image/png', data: 'iVBOR' } }] },
    {
      role: 'model',
      parts: [
        { text: 'I should list it.', thought: true },
        {
          functionCall: { id: 'call_1', name: 'run_shell_command', args: { command: 'ls /tmp' } },
          thoughtSignature: 'skip_thought_signature_validator',
        },
      ],
    },
    { role: 'user', parts: [{ functionResponse: { id: 'call_1', name: 'run_shell_command', response: { output: 'a.txt\nb.txt' } } }] },
  ],
  tools: [
    {
      functionDeclarations: [
        {
          name: 'run_shell_command',
          description: 'Runs a shell command',
          parametersJsonSchema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
        },
      ],
    },
  ],
  toolConfig: { functionCallingConfig: { mode: 'AUTO' } },
  generationConfig: {
    temperature: 0.7,
    topP: 0.95,
    topK: 64,
    maxOutputTokens: 8192,
    thinkingConfig: { includeThoughts: true },
    thinkingLevel: 'HIGH',
  },
};

describe('GoogleGeminiDialect routing', () => {
  it('reads the model from the path and streaming from the URL, case-insensitively', () => {
    assert.equal(geminiModelFromPath(STREAM), 'Qwen3.5-4B');
    assert.equal(geminiModelFromPath('/v1beta/models/org%2Fm:generateContent'), 'org/m');
    assert.equal(gemini.clientModel({}, PLAIN), 'Qwen3.5-4B');
    assert.equal(gemini.wantsStream({ stream: false }, STREAM), true);
    assert.equal(gemini.wantsStream({}, '/v1beta/models/m:STREAMGENERATECONTENT'), true);
    assert.equal(gemini.wantsStream({}, '/v1beta/models/m:generateContent?alt=SSE'), true);
    assert.equal(gemini.wantsStream({ stream: true }, PLAIN), false, 'never from the body');
  });
});

describe('GoogleGeminiDialect request', () => {
  it('converts the gemini-cli request (§7.4)', () => {
    const out = convert(cliRequest);
    assert.equal(out.model, 'Qwen3.5-4B');
    assert.deepEqual(out.messages, [
      { role: 'system', content: 'You are an interactive CLI agent...' },
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
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'run_shell_command', arguments: '{"command":"ls /tmp"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"output":"a.txt\\nb.txt"}' },
    ]);
    assert.deepEqual(out.tools, [
      {
        type: 'function',
        function: {
          name: 'run_shell_command',
          description: 'Runs a shell command',
          parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
        },
      },
    ]);
    assert.equal(out.tool_choice, 'auto');
    assert.deepEqual([out.temperature, out.top_p, out.top_k, out.max_tokens], [0.7, 0.95, 64, 8192]);
    assert.deepEqual(out.chat_template_kwargs, { enable_thinking: true });
    for (const key of ['contents', 'generationConfig', 'systemInstruction', 'toolConfig', 'thinkingLevel'])
      assert.equal(key in out, false, key);
  });

  it('falls back to call_id, then the name, for function ids', () => {
    const out = convert({
      contents: [
        { role: 'model', parts: [{ functionCall: { name: 'f', args: {} }, call_id: 'c9' }, { functionCall: { name: 'g' } }] },
        {
          role: 'user',
          parts: [
            { functionResponse: { name: 'f', response: {} }, call_id: 'c9' },
            { functionResponse: { name: 'g', response: { ok: 1 } } },
          ],
        },
      ],
    });
    assert.deepEqual(
      out.messages[0]!.tool_calls!.map((c) => c.id),
      ['c9', ''],
    );
    assert.deepEqual(
      out.messages.slice(1).map((m) => m.tool_call_id),
      ['c9', 'g'],
    );
  });

  it('joins model-turn fragments and keeps thoughts out of the visible text', () => {
    const out = convert({
      contents: [
        { role: 'model', parts: [{ text: 'Thin', thought: true }, { text: 'king', thought: true }, { text: 'Hel' }, { text: 'lo' }] },
      ],
    });
    assert.deepEqual(out.messages, [{ role: 'assistant', content: 'Hello', reasoning_content: 'Thinking' }]);
  });

  it('maps generationConfig (snake_case, under config, schema types) and tool choice', () => {
    const out = convert(
      {
        contents: 'hi',
        config: {
          system_instruction: 'S',
          stop_sequences: ['X'],
          candidate_count: 1,
          presencePenalty: 0.1,
          frequencyPenalty: 0.2,
          seed: 7,
          responseMimeType: 'application/json',
          responseSchema: { type: 'OBJECT', properties: { a: { type: 'STRING' } } },
        },
        tools: [
          {
            function_declarations: [
              { name: 'one', parameters: { type: 'OBJECT', properties: { p: { type: 'INTEGER' } } } },
              { name: 'two' },
            ],
          },
          { googleSearch: {} },
        ],
        tool_config: { function_calling_config: { mode: 'ANY', allowed_function_names: ['two'] } },
      },
      PLAIN,
    );
    assert.deepEqual(out.messages, [
      { role: 'system', content: 'S' },
      { role: 'user', content: [{ type: 'text', text: 'hi' }] },
    ]);
    assert.deepEqual([out.stop, out.n, out.presence_penalty, out.frequency_penalty, out.seed], [['X'], 1, 0.1, 0.2, 7]);
    assert.deepEqual(out.response_format, {
      type: 'json_schema',
      json_schema: { name: 'response', schema: { type: 'object', properties: { a: { type: 'string' } } } },
    });
    assert.deepEqual(
      out.tools!.map((t) => t.function.parameters),
      [
        { type: 'object', properties: { p: { type: 'integer' } } },
        { type: 'object', properties: {} },
      ],
    );
    assert.deepEqual(out.tool_choice, { type: 'function', function: { name: 'two' } });
    const any = convert({
      contents: [],
      tools: [{ functionDeclarations: [{ name: 'f' }] }],
      toolConfig: { functionCallingConfig: { mode: 'ANY' } },
    });
    assert.equal(any.tool_choice, 'required');
    const none = convert({
      contents: [],
      tools: [{ functionDeclarations: [{ name: 'f' }] }],
      toolConfig: { functionCallingConfig: { mode: 'NONE' } },
    });
    assert.equal(none.tool_choice, 'none');
    assert.equal(
      'tool_choice' in convert({ contents: [], tools: [{ googleSearch: {} }], toolConfig: { functionCallingConfig: { mode: 'ANY' } } }),
      false,
    );
  });

  it('maps the router call (JSON mime with responseJsonSchema) and candidateCount > 1 for the n check', () => {
    const out = convert(
      {
        contents: [{ role: 'user', parts: [{ text: 'q' }] }],
        generationConfig: { responseMimeType: 'application/json', responseJsonSchema: { type: 'object' }, candidateCount: 2 },
      },
      PLAIN,
    );
    assert.deepEqual(out.response_format, { type: 'json_schema', json_schema: { name: 'response', schema: { type: 'object' } } });
    assert.equal(out.n, 2);
  });

  it('rejects wrong types with a DialectError', () => {
    for (const body of [
      { contents: 5 },
      { contents: [3] },
      { contents: [{ role: 'robot', parts: [] }] },
      { contents: [{ role: 'model', parts: [{ functionCall: { name: 'f', args: 'x' } }] }] },
      { contents: [], tools: [{ functionDeclarations: [{}] }] },
      { contents: [], systemInstruction: 4 },
    ] as JsonObject[]) {
      assert.throws(() => convert(body), DialectError, JSON.stringify(body));
    }
  });
});

describe('GoogleGeminiDialect response', () => {
  it('converts the §7.4 answer with thought signature, text, functionCall and usage', () => {
    const response = exampleResponse({
      usage: { prompt_tokens: 812, completion_tokens: 41, total_tokens: 853, prompt_tokens_details: { cached_tokens: 5 } },
    });
    const out = gemini.fromChat(response, ctxFor(PLAIN, {}, 'Qwen3.5-4B'));
    const call = { name: 'bash', args: { command: 'wc -l notes.txt' }, id: 'call_2' };
    assert.deepEqual(out, {
      candidates: [
        {
          index: 0,
          finishReason: 'STOP',
          safetyRatings: [],
          content: {
            role: 'model',
            parts: [
              { text: 'Count lines next.', thought: true, thoughtSignature: geminiThoughtSignature('Count lines next.') },
              { text: 'Checking a.txt.' },
              { functionCall: call },
            ],
          },
        },
      ],
      usageMetadata: { promptTokenCount: 812, candidatesTokenCount: 41, totalTokenCount: 853, cachedContentTokenCount: 5 },
      modelVersion: 'Qwen3.5-4B',
      responseId: 'chatcmpl-8f2',
      functionCalls: [call],
    });
    const parts = ((out.candidates as JsonObject[])[0]!.content as { parts: JsonObject[] }).parts;
    assert.equal(decodeGeminiThoughtSignature(parts[0]!.thoughtSignature), anthropicSignature('Count lines next.'));
  });

  it('maps finish reasons and wraps non-object arguments', () => {
    const finish = (f: string) => (gemini.fromChat(textResponse('x', f), ctxFor(PLAIN, {})).candidates as JsonObject[])[0]!.finishReason;
    assert.deepEqual(['stop', 'tool_calls', 'length', 'content_filter'].map(finish), ['STOP', 'STOP', 'MAX_TOKENS', 'SAFETY']);
    const r = textResponse(null, 'tool_calls', {
      tool_calls: [
        { id: 'a', type: 'function', function: { name: 'f', arguments: 'not json' } },
        { id: 'b', type: 'function', function: { name: 'g', arguments: '[1,2]' } },
      ],
    });
    assert.deepEqual(
      (gemini.fromChat(r, ctxFor(PLAIN, {})).functionCalls as JsonObject[]).map((c) => c.args),
      [{ raw: 'not json' }, { value: [1, 2] }],
    );
  });
});

describe('GoogleGeminiDialect stream (§8.3)', () => {
  const partsOf = (e: { data: unknown }) =>
    (((e.data as JsonObject).candidates as JsonObject[])[0]!.content as { parts: JsonObject[] }).parts;

  it('emits text/thought parts first and the function calls in a second event, bare, without [DONE]', () => {
    const events = gemini.streamEvents(exampleResponse(), ctxFor(STREAM, {}, 'Qwen3.5-4B'));
    assert.equal(events.length, 2);
    assert.equal(
      events.every((e) => e.event === undefined && e.data !== '[DONE]'),
      true,
    );
    assert.deepEqual(
      partsOf(events[0]!).map((p) => Object.keys(p).sort().join(',')),
      ['text,thought,thoughtSignature', 'text'],
    );
    assert.deepEqual(partsOf(events[1]!), [{ functionCall: { name: 'bash', args: { command: 'wc -l notes.txt' }, id: 'call_2' } }]);
    assert.deepEqual((events[1]!.data as JsonObject).functionCalls, [{ name: 'bash', args: { command: 'wc -l notes.txt' }, id: 'call_2' }]);
    for (const e of events) assert.equal(((e.data as JsonObject).candidates as JsonObject[])[0]!.finishReason, 'STOP');
  });

  it('emits a single event for tool calls only, and one empty event for nothing', () => {
    const tools = textResponse(null, 'tool_calls', {
      tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: '{}' } }],
    });
    assert.equal(gemini.streamEvents(tools, ctxFor(STREAM, {})).length, 1);
    const empty = gemini.streamEvents(textResponse(''), ctxFor(STREAM, {}));
    assert.equal(empty.length, 1);
    assert.deepEqual(partsOf(empty[0]!), []);
  });
});

describe('GoogleGeminiDialect errors', () => {
  it('uses the Google error shape with a status name per code', () => {
    assert.deepEqual(gemini.errorBody(400, 'bad'), { error: { code: 400, message: 'bad', status: 'INVALID_ARGUMENT' } });
    const status = (s: number) => ((gemini.errorBody(s, '') as JsonObject).error as JsonObject).status;
    assert.deepEqual([401, 403, 404, 413, 429, 500, 502, 503].map(status), [
      'UNAUTHENTICATED',
      'PERMISSION_DENIED',
      'NOT_FOUND',
      'INVALID_ARGUMENT',
      'RESOURCE_EXHAUSTED',
      'INTERNAL',
      'INTERNAL',
      'UNAVAILABLE',
    ]);
    assert.deepEqual(gemini.streamErrorEvent(502, 'late'), { data: { error: { code: 502, message: 'late', status: 'INTERNAL' } } });
  });
});
