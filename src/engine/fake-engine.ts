// An in-repo stand-in for vLLM, for tests, benchmarks and the demo until the embedded engine is
// wired in. It reproduces vLLM's response shapes (top-level prompt_token_ids, choices[].token_ids
// ending in the stop token, `token_id:N` logprob entries), while its answers come from a script.
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { z } from 'zod';
import { RequestGuard } from '../capture/request-guard.js';
import type { ChatMessage, ChatRequest, ChatToolCall, JsonObject } from '../capture/types.js';
import type { Renderer } from '../capture/render/renderer.js';
import { renderAssistantText } from './assistant-output.js';
import { FAKE_SPECIALS, fakeEncode, renderAssistantBody, renderChatPrompt, tokenBytes } from './fake-tokenizer.js';
import { parseChatMlPrompt } from './prompt-messages.js';

export interface FakeAnswer {
  content?: string | null;
  /** Thinking text, returned as vLLM does (`message.reasoning`) and sampled as `<think>...</think>`. */
  reasoning?: string;
  tool_calls?: { name: string; arguments: unknown; id?: string }[];
  /** Force a finish reason (e.g. 'length'); defaults to tool_calls/stop. */
  finish_reason?: string;
}

export type FakeScript = (request: ChatRequest, turn: number) => FakeAnswer;

export interface FakeEngineOptions {
  host?: string;
  port?: number;
  /** Names clients reach the engine by besides loopback and the bound address (request-guard.ts). */
  allowedHosts?: readonly string[];
  model?: string;
  /** Decides each answer; `turn` counts the assistant messages already in the request. */
  script?: FakeScript;
  /** Think time per call in ms, fixed or a [min, max] range. */
  thinkMs?: number | [number, number];
  /** false: answer like a plain OpenAI-style server, without any token fields or logprobs. */
  tokenFields?: boolean;
  /** `processed` (default) scales the logprob gaps by 1/temperature, like vLLM's processed_logprobs. */
  logprobsMode?: 'processed' | 'raw';
  /** Make individual calls fail: return a status and message, or undefined to answer normally. */
  fail?: (request: ChatRequest) => { status: number; message: string } | undefined;
  /** The same for token-route calls (their bodies as sent). */
  failTokens?: (body: JsonObject) => { status: number; message: string } | undefined;
  /**
   * A real tokenizer and chat template (Qwen3 family): the engine then also takes token-id prompts,
   * reading them back into messages for the script and answering with the renderer's ids (token-in
   * tests of the proxy). `/v1/models` names the renderer's files as `root`, as vLLM names its model path.
   */
  renderer?: Renderer;
  /** Which token-in route it serves: vLLM's `/v1/completions` (default) or SGLang's `/generate` (+ `/get_model_info`). */
  flavour?: 'vllm' | 'sglang';
  /** The context window `/v1/models` reports and token routes enforce (default 32768). */
  maxModelLen?: number;
}

export interface FakeEngine {
  url: string;
  port: number;
  model: string;
  /** Every chat request the engine received, in order. */
  requests: ChatRequest[];
  /** Every completion it answered (JSON or streamed), in order. */
  responses: JsonObject[];
  /** Every token-in request (`/v1/completions` or `/generate` body), in order. */
  tokenRequests: JsonObject[];
  close(): Promise<void>;
}

/** Default script: call the first shell-like tool once, then answer. */
export const defaultFakeScript: FakeScript = (request, turn) => {
  const tool = request.tools?.find((t) => /bash|shell|exec|command/i.test(t.function.name)) ?? request.tools?.[0];
  if (tool && turn === 0) return { tool_calls: [{ name: tool.function.name, arguments: { command: 'echo hello' } }] };
  return { content: turn === 0 ? 'Hello from the fake engine.' : 'Done.' };
};

function countAssistantTurns(messages: ChatMessage[]): number {
  return messages.filter((m) => m.role === 'assistant').length;
}

/** A stable, peaky pseudo-logprob for a token at a position: always < 0, mostly near 0. */
function pseudoLogprob(promptLength: number, position: number, id: number): number {
  const digest = createHash('sha256').update(`${promptLength}:${position}:${id}`).digest();
  const u = digest.readUInt32BE(0) / 0xffffffff;
  return -(u * u * 3 + 1e-4);
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function thinkDelay(thinkMs: FakeEngineOptions['thinkMs']): number {
  if (thinkMs === undefined) return 0;
  if (typeof thinkMs === 'number') return thinkMs;
  return thinkMs[0] + Math.random() * (thinkMs[1] - thinkMs[0]);
}

export function buildFakeCompletion(request: ChatRequest, options: FakeEngineOptions, model: string): JsonObject {
  const script = options.script ?? defaultFakeScript;
  const answer = script(request, countAssistantTurns(request.messages));
  const toolCalls: ChatToolCall[] = (answer.tool_calls ?? []).map((call, i) => ({
    id: call.id ?? `chatcmpl-tool-${randomBytes(4).toString('hex')}${i}`,
    type: 'function',
    function: { name: call.name, arguments: typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments) },
  }));
  const message: ChatMessage = {
    role: 'assistant',
    content: answer.content ?? (toolCalls.length ? null : ''),
    reasoning: answer.reasoning ?? null,
  };
  if (toolCalls.length) message.tool_calls = toolCalls;
  const finish = answer.finish_reason ?? (toolCalls.length ? 'tool_calls' : 'stop');
  const promptIds = fakeEncode(renderChatPrompt(request.messages, request.tools));
  const sampledIds = [...fakeEncode(renderAssistantBody(message)), FAKE_SPECIALS.imEnd];
  const id = `chatcmpl-${randomBytes(8).toString('hex')}`;
  const usage = {
    prompt_tokens: promptIds.length,
    completion_tokens: sampledIds.length,
    total_tokens: promptIds.length + sampledIds.length,
    prompt_tokens_details: null,
  };
  const choice: JsonObject = { index: 0, message, finish_reason: finish, stop_reason: null };
  const body: JsonObject = { id, object: 'chat.completion', created: Math.floor(Date.now() / 1000), model, choices: [choice], usage };
  if (options.tokenFields === false) return body;
  if (request.return_token_ids === true) {
    body.prompt_token_ids = promptIds;
    choice.token_ids = sampledIds;
  }
  if (request.logprobs === true) {
    const asIds = request.return_tokens_as_token_ids !== false;
    const top = typeof request.top_logprobs === 'number' ? request.top_logprobs : 0;
    const temperature = typeof request.temperature === 'number' && request.temperature > 0 ? request.temperature : 1;
    const gapScale = options.logprobsMode === 'raw' ? 1 : 1 / temperature;
    choice.logprobs = {
      content: sampledIds.map((tokenId, position) => {
        const logprob = pseudoLogprob(promptIds.length, position, tokenId);
        const alternatives = Array.from({ length: top }, (_, k) => {
          const altId = k === 0 ? tokenId : (tokenId + 7919 * k) % 151643;
          const altLogprob = k === 0 ? logprob : logprob - (1 + k) * gapScale;
          return { token: asIds ? `token_id:${altId}` : String.fromCharCode(altId & 0xff), logprob: altLogprob, bytes: tokenBytes(altId) };
        });
        return {
          token: asIds ? `token_id:${tokenId}` : Buffer.from(tokenBytes(tokenId)).toString('utf8'),
          logprob,
          bytes: tokenBytes(tokenId),
          top_logprobs: alternatives,
        };
      }),
    };
  }
  return body;
}

/** A token-id prompt answered from the script, through the renderer: sampled ids, pseudo logprobs, finish. */
function tokenAnswer(
  prompt: number[],
  maxTokens: number,
  renderer: Renderer,
  options: FakeEngineOptions,
): { ids: number[]; logprobs: number[]; finish: 'stop' | 'length'; text: string } {
  const conversation = parseChatMlPrompt(renderer.decode(prompt));
  if (!conversation) throw new Error('the token prompt is not in ChatML form');
  const request: ChatRequest = { messages: conversation.messages, ...(conversation.tools ? { tools: conversation.tools } : {}) };
  const answer = (options.script ?? defaultFakeScript)(request, countAssistantTurns(request.messages));
  const text = renderAssistantText({
    ...(answer.reasoning !== undefined ? { reasoning: answer.reasoning } : {}),
    ...(answer.content ? { content: answer.content } : {}),
    toolCalls: (answer.tool_calls ?? []).map((c) => ({
      name: c.name,
      arguments: (typeof c.arguments === 'string' ? JSON.parse(c.arguments) : c.arguments) as Record<string, unknown>,
    })),
  });
  const full = [...renderer.encode(text), renderer.stopIds.includes(FAKE_SPECIALS.imEnd) ? FAKE_SPECIALS.imEnd : renderer.stopIds[0]!];
  const ids = full.slice(0, maxTokens);
  return {
    ids,
    logprobs: ids.map((id, i) => pseudoLogprob(prompt.length, i, id)),
    finish: ids.length === full.length ? 'stop' : 'length',
    text,
  };
}

const tokenPromptSchema = z.looseObject({
  prompt: z.array(z.number().int().nonnegative()).min(1),
  max_tokens: z.number().int().nonnegative().optional(),
});
const generateSchema = z.looseObject({
  input_ids: z.array(z.number().int().nonnegative()).min(1),
  sampling_params: z.looseObject({ max_new_tokens: z.number().int().nonnegative().optional() }).optional(),
});

async function handleTokenRoute(
  req: IncomingMessage,
  res: ServerResponse,
  options: FakeEngineOptions,
  model: string,
  tokenRequests: JsonObject[],
): Promise<void> {
  const renderer = options.renderer!;
  const limit = options.maxModelLen ?? 32768;
  const raw = JSON.parse(await readBody(req)) as JsonObject;
  tokenRequests.push(raw);
  const sglang = options.flavour === 'sglang';
  const parsed = sglang ? generateSchema.safeParse(raw) : tokenPromptSchema.safeParse(raw);
  if (!parsed.success)
    return sendJson(res, 400, { object: 'error', message: parsed.error.issues[0]!.message, type: 'BadRequestError', code: 400 });
  const prompt = sglang ? (raw.input_ids as number[]) : (raw.prompt as number[]);
  const maxTokens = sglang
    ? ((raw.sampling_params as { max_new_tokens?: number } | undefined)?.max_new_tokens ?? 128)
    : ((raw.max_tokens as number | undefined) ?? 16);
  if (prompt.length + maxTokens > limit) {
    const message = `This model's maximum context length is ${limit} tokens. However, you requested ${prompt.length + maxTokens} tokens.`;
    return sendJson(res, 400, { object: 'error', message, type: 'BadRequestError', code: 400 });
  }
  const delay = thinkDelay(options.thinkMs);
  if (delay > 0) await new Promise((r) => setTimeout(r, delay));
  const failure = options.failTokens?.(raw);
  if (failure)
    return sendJson(res, failure.status, { object: 'error', message: failure.message, type: 'InternalServerError', code: failure.status });
  const answer = tokenAnswer(prompt, maxTokens, renderer, options);
  if (sglang) {
    return sendJson(res, 200, {
      text: answer.text,
      output_ids: answer.ids,
      meta_info: {
        id: `fake-${randomBytes(4).toString('hex')}`,
        finish_reason: answer.finish === 'stop' ? { type: 'stop', matched: answer.ids.at(-1) } : { type: 'length', length: maxTokens },
        prompt_tokens: prompt.length,
        completion_tokens: answer.ids.length,
        output_token_logprobs: answer.ids.map((id, i) => [answer.logprobs[i], id, null]),
      },
    });
  }
  const asIds = raw.return_tokens_as_token_ids === true;
  const withIds = raw.return_token_ids === true;
  const token = (id: number) => (asIds ? `token_id:${id}` : renderer.decode([id]));
  const choice: JsonObject = {
    index: 0,
    text: answer.text,
    finish_reason: answer.finish,
    stop_reason: null,
    logprobs:
      typeof raw.logprobs === 'number'
        ? {
            tokens: answer.ids.map(token),
            token_logprobs: answer.logprobs,
            top_logprobs: answer.ids.map((id, i) => ({ [token(id)]: answer.logprobs[i] })),
            text_offset: answer.ids.map(() => 0),
          }
        : null,
  };
  if (withIds) {
    choice.token_ids = answer.ids;
    choice.prompt_token_ids = prompt;
  }
  return sendJson(res, 200, {
    id: `cmpl-${randomBytes(6).toString('hex')}`,
    object: 'text_completion',
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [choice],
    usage: { prompt_tokens: prompt.length, completion_tokens: answer.ids.length, total_tokens: prompt.length + answer.ids.length },
  });
}

async function handle(
  req: IncomingMessage,
  res: ServerResponse,
  options: FakeEngineOptions,
  model: string,
  requests: ChatRequest[],
  responses: JsonObject[],
  tokenRequests: JsonObject[],
): Promise<void> {
  const url = req.url ?? '/';
  if (req.method === 'GET' && url === '/health') return sendJson(res, 200, { status: 'ok' });
  if (req.method === 'GET' && url.startsWith('/v1/models')) {
    const root = options.renderer ? { root: options.renderer.source } : {};
    return sendJson(res, 200, {
      object: 'list',
      data: [{ id: model, object: 'model', owned_by: 'harness-lab-fake', max_model_len: options.maxModelLen ?? 32768, ...root }],
    });
  }
  if (options.renderer && options.flavour === 'sglang' && req.method === 'GET' && url === '/get_model_info') {
    return sendJson(res, 200, { model_path: options.renderer.source, tokenizer_path: options.renderer.source, is_generation: true });
  }
  if (options.renderer && req.method === 'POST' && url === (options.flavour === 'sglang' ? '/generate' : '/v1/completions')) {
    return handleTokenRoute(req, res, options, model, tokenRequests);
  }
  if (req.method === 'POST' && url === '/tokenize') {
    const body = JSON.parse(await readBody(req)) as { prompt?: string; messages?: ChatMessage[]; tools?: unknown[] };
    const tokens = fakeEncode(body.messages ? renderChatPrompt(body.messages, body.tools) : (body.prompt ?? ''));
    return sendJson(res, 200, { count: tokens.length, max_model_len: 32768, tokens });
  }
  if (req.method === 'POST' && url === '/v1/chat/completions') {
    let request: ChatRequest;
    try {
      request = JSON.parse(await readBody(req)) as ChatRequest;
    } catch {
      return sendJson(res, 400, { object: 'error', message: 'invalid JSON body', type: 'BadRequestError', code: 400 });
    }
    requests.push(request);
    const invalid = validateChatRequest(request);
    if (invalid) return sendJson(res, 400, { object: 'error', message: invalid, type: 'BadRequestError', code: 400 });
    if (Array.isArray(request.tools) && request.tools.length === 0) {
      return sendJson(res, 400, { object: 'error', message: '`tools` must not be an empty array', type: 'BadRequestError', code: 400 });
    }
    if (request.stream_options !== undefined && request.stream !== true) {
      return sendJson(res, 400, {
        object: 'error',
        message: 'Stream options can only be defined when `stream=True`.',
        type: 'BadRequestError',
        code: 400,
      });
    }
    const failure = options.fail?.(request);
    const delay = thinkDelay(options.thinkMs);
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    if (failure)
      return sendJson(res, failure.status, { object: 'error', message: failure.message, type: 'BadRequestError', code: failure.status });
    const completion = buildFakeCompletion(request, options, model);
    responses.push(completion);
    if (request.stream === true) return streamCompletion(res, completion);
    return sendJson(res, 200, completion);
  }
  sendJson(res, 404, { object: 'error', message: `no route ${req.method} ${url}`, type: 'NotFoundError', code: 404 });
}

const ContentPartSchema = z.looseObject({ type: z.string(), text: z.string().optional() });
const ChatRequestSchema = z.looseObject({
  messages: z.array(
    z.looseObject({
      role: z.enum(['system', 'user', 'assistant', 'tool', 'developer']),
      content: z.union([z.string(), z.array(ContentPartSchema), z.null()]).optional(),
      tool_calls: z
        .array(z.looseObject({ id: z.string().optional(), function: z.looseObject({ name: z.string(), arguments: z.string() }) }))
        .nullish(),
    }),
  ),
  tools: z.array(z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string() }) })).optional(),
});

/** Like vLLM's request validation: a malformed request is a 400 with the field named, never a 500. */
function validateChatRequest(request: unknown): string | undefined {
  const result = ChatRequestSchema.safeParse(request);
  if (result.success) return undefined;
  const issue = result.error.issues[0]!;
  return `${issue.path.join('.') || 'body'}: ${issue.message}`;
}

/** vLLM-style streaming: prompt ids in the first chunk, token ids as deltas, then [DONE]. */
function streamCompletion(res: ServerResponse, completion: JsonObject): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const choice = (completion.choices as JsonObject[])[0] as JsonObject;
  const chunk = {
    id: completion.id,
    object: 'chat.completion.chunk',
    created: completion.created,
    model: completion.model,
    prompt_token_ids: completion.prompt_token_ids,
    choices: [
      { index: 0, delta: choice.message, logprobs: choice.logprobs, token_ids: choice.token_ids, finish_reason: choice.finish_reason },
    ],
    usage: completion.usage,
  };
  res.write(`data: ${JSON.stringify(chunk)}\n\n`);
  res.end('data: [DONE]\n\n');
}

export async function startFakeEngine(options: FakeEngineOptions = {}): Promise<FakeEngine> {
  const model = options.model ?? 'fake/qwen3-tiny';
  const requests: ChatRequest[] = [];
  const responses: JsonObject[] = [];
  const tokenRequests: JsonObject[] = [];
  // A loopback server like the others (request-guard.ts): the lab starts this one for task policies.
  const guard = new RequestGuard({ listenHost: options.host ?? '127.0.0.1', allowedHosts: options.allowedHosts });
  const server: Server = createServer((req, res) => {
    const refusal = guard.check(req);
    if (refusal) {
      const type = refusal.status === 403 ? 'PermissionDeniedError' : 'UnsupportedMediaTypeError';
      return sendJson(res, refusal.status, { error: { message: refusal.message, type, param: null, code: refusal.status } });
    }
    handle(req, res, options, model, requests, responses, tokenRequests).catch((err: unknown) => {
      if (!res.headersSent) sendJson(res, 500, { object: 'error', message: String(err), type: 'InternalServerError', code: 500 });
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const host = options.host ?? '127.0.0.1';
  return {
    url: `http://${host}:${port}`,
    port,
    model,
    requests,
    responses,
    tokenRequests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
