// The official SDKs of the other three dialects against the capture proxy (fake vLLM behind it):
// openai `responses`, @anthropic-ai/sdk and @google/genai, streamed and not, with a tool round trip,
// the token-count side routes, the budget stop answer and dialect-shaped errors.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { GoogleGenAI, type Content } from '@google/genai';
import OpenAI from 'openai';
import { anthropicSignature, decodeGeminiThoughtSignature, decryptReasoning } from '../../src/capture/dialects/reasoning.js';
import { STOP_ANSWER_TEXT } from '../../src/capture/dialects/stop-answer.js';
import { CaptureProxy } from '../../src/capture/proxy.js';
import type { ChatRequest } from '../../src/capture/types.js';
import { createSession, startLab, type Lab } from './helpers.js';

const shellSchema = { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] };

describe('official SDKs against the proxy', () => {
  let lab: Lab;
  before(async () => {
    lab = await startLab();
  });
  after(() => lab.close());

  const lastEngineRequest = () => lab.engine.requests.at(-1)!;

  describe('openai responses', () => {
    const client = (key: string) => new OpenAI({ baseURL: `${lab.proxy.url}/v1`, apiKey: key, maxRetries: 0 });
    const tools: OpenAI.Responses.Tool[] = [
      { type: 'function', name: 'exec_command', description: 'Run a command', parameters: shellSchema, strict: false },
      { type: 'web_search' },
    ];

    test('create: function_call, then the tool output round trip yields text; the engine sees one chained conversation', async () => {
      const { session_id } = await createSession(lab.proxy);
      const input: OpenAI.Responses.ResponseInputItem[] = [
        { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'You are Codex.' }] },
        { role: 'user', content: 'List files.' },
      ];
      const first = await client(session_id).responses.create({
        model: 'gpt-codex',
        input,
        tools,
        store: false,
        parallel_tool_calls: true,
      });
      assert.equal(first.status, 'completed');
      assert.equal(first.model, 'gpt-codex');
      const call = first.output.find((o) => o.type === 'function_call');
      assert.ok(call && call.type === 'function_call');
      assert.equal(call.name, 'exec_command');
      assert.deepEqual(JSON.parse(call.arguments), { command: 'echo hello' });
      assert.equal(first.usage?.input_tokens_details.cached_tokens, 0);

      const second = await client(session_id).responses.create({
        model: 'gpt-codex',
        tools,
        input: [
          ...input,
          ...(first.output as OpenAI.Responses.ResponseInputItem[]),
          { type: 'function_call_output', call_id: call.call_id, output: 'hello\n' },
        ],
      });
      assert.equal(second.output_text, 'Done.');
      const sent = lastEngineRequest();
      assert.deepEqual(
        sent.messages.map((m) => m.role),
        ['system', 'user', 'assistant', 'tool'],
      );
      assert.equal(sent.messages[2]!.tool_calls![0]!.id, call.call_id);
      assert.equal(sent.messages[2]!.tool_calls![0]!.function.arguments, call.arguments, 'arguments come back byte-identical');
      assert.equal(sent.messages[3]!.tool_call_id, call.call_id);
      assert.deepEqual(
        sent.tools!.map((t) => t.function.name),
        ['exec_command'],
        'hosted web_search dropped',
      );

      const calls = lab.proxy.sessions.calls(session_id);
      assert.deepEqual(
        calls.map((c) => c.dialect),
        ['openai_responses', 'openai_responses'],
      );
      assert.deepEqual(
        calls[1]!.prompt_token_ids!.slice(0, calls[0]!.prompt_token_ids!.length + calls[0]!.completion_token_ids!.length),
        [...calls[0]!.prompt_token_ids!, ...calls[0]!.completion_token_ids!],
        'the second prompt extends the first call exactly',
      );
    });

    test('responses.stream: the strict SDK accumulator accepts the replay', async () => {
      const { session_id } = await createSession(lab.proxy);
      const stream = client(session_id).responses.stream({ model: 'gpt-codex', input: 'List files.', tools });
      const types: string[] = [];
      let argsDelta = '';
      stream.on('event', (e) => types.push(e.type));
      stream.on('response.function_call_arguments.delta', (e) => (argsDelta = e.snapshot));
      const final = await stream.finalResponse();
      const call = final.output.find((o) => o.type === 'function_call');
      assert.ok(call && call.type === 'function_call');
      assert.deepEqual(JSON.parse(call.arguments), { command: 'echo hello' });
      assert.equal(argsDelta, call.arguments);
      assert.equal(types[0], 'response.created');
      assert.equal(types.at(-1), 'response.completed');
      assert.ok(types.includes('response.in_progress'));

      const text = client(session_id).responses.stream({
        model: 'gpt-codex',
        input: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: 'earlier' },
        ],
      });
      const done = await text.finalResponse();
      assert.equal(done.output_text, 'Done.');
    });

    test('errors arrive as OpenAI API errors', async () => {
      await assert.rejects(
        client('no-such-session').responses.create({ model: 'm', input: 'x' }),
        (err: unknown) => err instanceof OpenAI.AuthenticationError,
      );
      const { session_id } = await createSession(lab.proxy);
      await assert.rejects(
        client(session_id).responses.create({ model: 'm', input: 5 as unknown as string }),
        (err: unknown) => err instanceof OpenAI.BadRequestError && /input/.test(err.message),
      );
    });
  });

  describe('@anthropic-ai/sdk', () => {
    const client = (key: string) => new Anthropic({ apiKey: key, baseURL: lab.proxy.url, maxRetries: 0 });
    const tools: Anthropic.ToolUnion[] = [
      { name: 'Bash', description: 'Run a shell command', input_schema: shellSchema as Anthropic.Tool.InputSchema },
      { type: 'web_search_20250305', name: 'web_search' },
    ];
    const system = [
      { type: 'text' as const, text: 'x-anthropic-billing-header: cc_version=2.1; cch=abc;' },
      { type: 'text' as const, text: 'You are Claude Code.' },
    ];

    test('messages.create: tool_use, then tool_result round trip; billing header stripped', async () => {
      const { session_id } = await createSession(lab.proxy);
      const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'List files.' }];
      const first = await client(session_id).messages.create({ model: 'claude-test', max_tokens: 4096, system, tools, messages });
      assert.equal(first.stop_reason, 'tool_use');
      assert.equal(first.model, 'claude-test');
      const use = first.content.find((b) => b.type === 'tool_use');
      assert.ok(use && use.type === 'tool_use');
      assert.equal(use.name, 'Bash');
      assert.deepEqual(use.input, { command: 'echo hello' });
      assert.equal(lastEngineRequest().messages[0]!.content, 'You are Claude Code.');

      const second = await client(session_id).messages.create({
        model: 'claude-test',
        max_tokens: 1000,
        system,
        tools,
        messages: [
          ...messages,
          { role: 'assistant', content: first.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'hello' }] },
        ],
      });
      assert.equal(second.stop_reason, 'end_turn');
      assert.deepEqual(second.content, [{ type: 'text', text: 'Done.' }]);
      const sent = lastEngineRequest();
      assert.equal(sent.messages[2]!.tool_calls![0]!.id, use.id);
      assert.equal(sent.messages[3]!.tool_call_id, use.id);
      const calls = lab.proxy.sessions.calls(session_id);
      assert.deepEqual(
        calls[1]!.prompt_token_ids!.slice(0, calls[0]!.prompt_token_ids!.length),
        calls[0]!.prompt_token_ids,
        'stable system prompt across calls',
      );
    });

    test('messages.stream: the SDK assembles the replay into the same message', async () => {
      const { session_id } = await createSession(lab.proxy);
      const stream = client(session_id).messages.stream({
        model: 'claude-test',
        max_tokens: 1000,
        tools,
        messages: [{ role: 'user', content: 'List files.' }],
      });
      const jsonDeltas: string[] = [];
      stream.on('inputJson', (partial) => jsonDeltas.push(partial));
      const message = await stream.finalMessage();
      assert.equal(message.stop_reason, 'tool_use');
      const use = message.content.find((b) => b.type === 'tool_use');
      assert.ok(use && use.type === 'tool_use');
      assert.deepEqual(use.input, { command: 'echo hello' });
      assert.ok(message.usage.input_tokens > 0);
      assert.ok(message.usage.output_tokens > 0);
      assert.equal(jsonDeltas.length, 1);
    });

    test('countTokens is answered without a session and never recorded', async () => {
      const { session_id } = await createSession(lab.proxy);
      const count = await client('anything').messages.countTokens({
        model: 'claude-test',
        messages: [{ role: 'user', content: 'x'.repeat(400) }],
        tools,
      });
      assert.ok(count.input_tokens >= 100);
      assert.equal(lab.proxy.sessions.calls(session_id).length, 0);
    });

    test('errors arrive as Anthropic API errors of the right class', async () => {
      await assert.rejects(
        client('no-such-session').messages.create({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }),
        (err: unknown) => err instanceof Anthropic.AuthenticationError,
      );
      const { session_id } = await createSession(lab.proxy);
      await assert.rejects(
        client(session_id).messages.create({ model: 'm', max_tokens: 10, messages: 'oops' as unknown as Anthropic.MessageParam[] }),
        (err: unknown) =>
          err instanceof Anthropic.BadRequestError && (err.error as { error?: { type?: string } }).error?.type === 'invalid_request_error',
      );
    });
  });

  describe('@google/genai', () => {
    const client = (key: string) => new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: lab.proxy.url } });
    const config = {
      tools: [
        { functionDeclarations: [{ name: 'run_shell_command', description: 'Runs a shell command', parametersJsonSchema: shellSchema }] },
      ],
    };

    test('generateContent: functionCall with id, then functionResponse round trip', async () => {
      const { session_id } = await createSession(lab.proxy);
      const contents: Content[] = [{ role: 'user', parts: [{ text: 'List files.' }] }];
      const first = await client(session_id).models.generateContent({
        model: 'gemini-test',
        contents,
        config: { ...config, systemInstruction: 'You are Gemini CLI.' },
      });
      const call = first.functionCalls?.[0];
      assert.ok(call);
      assert.equal(call.name, 'run_shell_command');
      assert.deepEqual(call.args, { command: 'echo hello' });
      assert.ok(call.id, 'the engine call id reaches the client');
      assert.equal(first.candidates?.[0]?.finishReason, 'STOP');
      assert.ok((first.usageMetadata?.promptTokenCount ?? 0) > 0);

      const second = await client(session_id).models.generateContent({
        model: 'gemini-test',
        contents: [
          ...contents,
          first.candidates![0]!.content!,
          { role: 'user', parts: [{ functionResponse: { id: call.id, name: call.name, response: { output: 'hello' } } }] },
        ],
        config: { ...config, systemInstruction: 'You are Gemini CLI.' },
      });
      assert.equal(second.text, 'Done.');
      const sent = lastEngineRequest();
      assert.deepEqual(
        sent.messages.map((m) => m.role),
        ['system', 'user', 'assistant', 'tool'],
      );
      assert.equal(sent.messages[2]!.tool_calls![0]!.id, call.id);
      assert.equal(sent.messages[3]!.tool_call_id, call.id);
      assert.equal(lab.proxy.sessions.calls(session_id)[0]!.dialect, 'google_gemini');
    });

    test('generateContentStream: every event arrives', async () => {
      const { session_id } = await createSession(lab.proxy);
      const stream = await client(session_id).models.generateContentStream({ model: 'gemini-test', contents: 'List files.', config });
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      assert.ok(chunks.some((c) => c.functionCalls?.[0]?.name === 'run_shell_command'));
      const calls = lab.proxy.sessions.calls(session_id);
      assert.equal(calls[0]!.stream, true);

      const text = await client(session_id).models.generateContentStream({
        model: 'gemini-test',
        contents: [
          { role: 'user', parts: [{ text: 'hi' }] },
          { role: 'model', parts: [{ text: 'earlier' }] },
          { role: 'user', parts: [{ text: 'again' }] },
        ],
      });
      let all = '';
      for await (const chunk of text) all += chunk.text ?? '';
      assert.equal(all, 'Done.');
    });

    test('countTokens is answered without a session', async () => {
      const count = await client('anything').models.countTokens({ model: 'gemini-test', contents: 'y'.repeat(400) });
      assert.ok((count.totalTokens ?? 0) >= 100);
    });

    test('errors arrive as Google API errors', async () => {
      await assert.rejects(
        client('no-such-session').models.generateContent({ model: 'm', contents: 'x' }),
        (err: unknown) => err instanceof Error && 'status' in err && err.status === 401,
      );
    });
  });

  test('budget stop answer reaches every SDK as a normal non-empty answer', async () => {
    const { session_id } = await createSession(lab.proxy, { max_model_calls: 1 });
    await new OpenAI({ baseURL: `${lab.proxy.url}/v1`, apiKey: session_id, maxRetries: 0 }).responses.create({
      model: 'm',
      input: 'first',
    });
    const r = await new OpenAI({ baseURL: `${lab.proxy.url}/v1`, apiKey: session_id, maxRetries: 0 }).responses
      .stream({ model: 'm', input: 'again' })
      .finalResponse();
    assert.equal(r.output_text, STOP_ANSWER_TEXT);
    const a = await new Anthropic({ apiKey: session_id, baseURL: lab.proxy.url, maxRetries: 0 }).messages
      .stream({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] })
      .finalMessage();
    assert.equal(a.stop_reason, 'end_turn');
    assert.equal(a.content[0]?.type === 'text' ? a.content[0].text : '', STOP_ANSWER_TEXT);
    const g = await new GoogleGenAI({ apiKey: session_id, httpOptions: { baseUrl: lab.proxy.url } }).models.generateContent({
      model: 'm',
      contents: 'x',
    });
    assert.equal(g.text, STOP_ANSWER_TEXT);
    assert.equal(lab.proxy.sessions.calls(session_id).length, 1, 'stop answers are never recorded');
  });
});

// The fake engine has no reasoning; this one answers like vLLM with a reasoning parser (`message.reasoning`),
// so the SDKs' strict accumulators see thinking blocks, reasoning items and thought parts.
describe('reasoning through the official SDKs', () => {
  const seen: ChatRequest[] = [];
  let engine: Server;
  let proxy: CaptureProxy;
  let dataDir: string;
  before(async () => {
    engine = createServer((req, res) => {
      let raw = '';
      req.on('data', (c: Buffer) => (raw += c.toString()));
      req.on('end', () => {
        res.setHeader('content-type', 'application/json');
        if (req.method === 'GET') return res.end(JSON.stringify({ object: 'list', data: [{ id: 'reasoner', object: 'model' }] }));
        const request = JSON.parse(raw) as ChatRequest;
        seen.push(request);
        const followUp = request.messages.at(-1)?.role === 'tool';
        const message = followUp
          ? { role: 'assistant', content: 'Done.', reasoning: 'Finished.' }
          : {
              role: 'assistant',
              content: 'Checking a.txt.',
              reasoning: 'Count lines next.',
              tool_calls: [{ id: 'call_2', type: 'function', function: { name: 'bash', arguments: '{"command":"wc -l notes.txt"}' } }],
            };
        res.end(
          JSON.stringify({
            id: `chatcmpl-${seen.length}`,
            object: 'chat.completion',
            created: 1730000000,
            model: 'reasoner',
            choices: [{ index: 0, message, finish_reason: followUp ? 'stop' : 'tool_calls' }],
            usage: { prompt_tokens: 20, completion_tokens: 9, total_tokens: 29, prompt_tokens_details: null },
          }),
        );
      });
    });
    await new Promise<void>((resolve) => engine.listen(0, '127.0.0.1', resolve));
    dataDir = mkdtempSync(join(tmpdir(), 'hl-sdk-'));
    proxy = await CaptureProxy.start({
      engineUrl: `http://127.0.0.1:${(engine.address() as AddressInfo).port}`,
      model: 'reasoner',
      dataDir,
      captureLevel: 'logprobs',
    });
  });
  after(async () => {
    await proxy.close();
    await new Promise((resolve) => engine.close(resolve));
    rmSync(dataDir, { recursive: true, force: true });
  });
  const bash = { name: 'bash', description: 'Run a shell command', schema: shellSchema };
  const engineSawReasoning = () => seen.at(-1)!.messages.find((m) => m.role === 'assistant')?.reasoning;

  test('Anthropic: the stream yields a signed thinking block that survives the next request', async () => {
    const { session_id } = await createSession(proxy);
    const client = new Anthropic({ apiKey: session_id, baseURL: proxy.url, maxRetries: 0 });
    const tools: Anthropic.Tool[] = [
      { name: bash.name, description: bash.description, input_schema: bash.schema as Anthropic.Tool.InputSchema },
    ];
    const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'Count lines.' }];
    const first = await client.messages
      .stream({ model: 'claude-test', max_tokens: 2000, thinking: { type: 'enabled', budget_tokens: 1024 }, tools, messages })
      .finalMessage();
    assert.deepEqual(
      first.content.map((b) => b.type),
      ['thinking', 'text', 'tool_use'],
    );
    const thinking = first.content[0]!;
    assert.ok(thinking.type === 'thinking');
    assert.equal(thinking.thinking, 'Count lines next.');
    assert.equal(thinking.signature, anthropicSignature('Count lines next.'));
    assert.deepEqual(seen.at(-1)!.chat_template_kwargs, { enable_thinking: true });
    const use = first.content[2]!;
    assert.ok(use.type === 'tool_use');
    const second = await client.messages.create({
      model: 'claude-test',
      max_tokens: 2000,
      tools,
      messages: [
        ...messages,
        { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '3 notes.txt' }] },
      ],
    });
    assert.equal(engineSawReasoning(), 'Count lines next.');
    assert.deepEqual(
      second.content.map((b) => b.type),
      ['thinking', 'text'],
    );
  });

  test('Responses: the stream yields a reasoning item whose encrypted_content carries the text back', async () => {
    const { session_id } = await createSession(proxy);
    const client = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: session_id, maxRetries: 0 });
    const tools: OpenAI.Responses.Tool[] = [{ type: 'function', name: bash.name, parameters: bash.schema, strict: false }];
    const input: OpenAI.Responses.ResponseInputItem[] = [{ role: 'user', content: 'Count lines.' }];
    const first = await client.responses
      .stream({
        model: 'gpt-codex',
        input,
        tools,
        reasoning: { effort: 'high', summary: 'auto' },
        include: ['reasoning.encrypted_content'],
      })
      .finalResponse();
    assert.deepEqual(
      first.output.map((o) => o.type),
      ['reasoning', 'message', 'function_call'],
    );
    const reasoning = first.output[0]!;
    assert.ok(reasoning.type === 'reasoning');
    assert.equal(reasoning.summary[0]?.text, 'Count lines next.');
    assert.equal(decryptReasoning(reasoning.encrypted_content), 'Count lines next.');
    assert.equal(first.output_text, 'Checking a.txt.');
    const call = first.output[2]!;
    assert.ok(call.type === 'function_call');
    // codex resends reasoning with only summary + encrypted_content.
    const resent = { type: 'reasoning' as const, id: reasoning.id, summary: [], encrypted_content: reasoning.encrypted_content };
    await client.responses.create({
      model: 'gpt-codex',
      tools,
      input: [
        ...input,
        resent,
        first.output[1] as OpenAI.Responses.ResponseInputItem,
        call,
        { type: 'function_call_output', call_id: call.call_id, output: '3' },
      ],
    });
    assert.equal(engineSawReasoning(), 'Count lines next.');
    const assistant = seen.at(-1)!.messages.filter((m) => m.role === 'assistant');
    assert.equal(assistant.length, 1, 'reasoning, text and call are one engine turn again');
    assert.equal(assistant[0]!.content, 'Checking a.txt.');
  });

  test('Gemini: the stream yields a thought part with our signature, and it returns as reasoning', async () => {
    const { session_id } = await createSession(proxy);
    const ai = new GoogleGenAI({ apiKey: session_id, httpOptions: { baseUrl: proxy.url } });
    const config = {
      tools: [{ functionDeclarations: [{ name: bash.name, description: bash.description, parametersJsonSchema: bash.schema }] }],
      thinkingConfig: { includeThoughts: true },
    };
    const contents: Content[] = [{ role: 'user', parts: [{ text: 'Count lines.' }] }];
    const parts = [];
    for await (const chunk of await ai.models.generateContentStream({ model: 'gemini-test', contents, config }))
      parts.push(...(chunk.candidates?.[0]?.content?.parts ?? []));
    const thought = parts.find((p) => p.thought);
    assert.equal(thought?.text, 'Count lines next.');
    assert.equal(decodeGeminiThoughtSignature(thought?.thoughtSignature), anthropicSignature('Count lines next.'));
    const call = parts.find((p) => p.functionCall)?.functionCall;
    assert.ok(call);
    await ai.models.generateContent({
      model: 'gemini-test',
      config,
      contents: [
        ...contents,
        { role: 'model', parts },
        { role: 'user', parts: [{ functionResponse: { id: call.id, name: call.name, response: { output: '3' } } }] },
      ],
    });
    assert.equal(engineSawReasoning(), 'Count lines next.');
  });
});
