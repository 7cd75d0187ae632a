// HTTP front of the embedded engine with vLLM's routes and shapes: POST /v1/chat/completions
// (JSON or SSE), POST /v1/completions (token-id prompts: generation, or prompt_logprobs scoring), POST /tokenize, POST /detokenize,
// GET /v1/models, GET /health. Loopback by default.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { RequestGuard } from '../capture/request-guard.js';
import { EventLoopLag, LabelledCounter, METRICS_CONTENT_TYPE, MetricsText } from '../capture/metrics.js';
import type { ChatChoice, ChatResponse } from '../capture/types.js';
import {
  chatRequestSchema,
  completionRequestSchema,
  describeIssues,
  detokenizeRequestSchema,
  EngineRequestError,
  tokenCompletionRequestSchema,
  tokenizeRequestSchema,
} from './chat-request.js';
import type { GeneratedToken, LlamaEngine } from './llama-engine.js';

const MAX_BODY = 32 * 1024 * 1024;
const KNOWN_ROUTES = new Set(['/health', '/v1/models', '/tokenize', '/detokenize', '/v1/chat/completions', '/v1/completions']);

export interface EngineServerOptions {
  host?: string;
  port?: number;
  /** Names clients reach the engine by besides loopback and the bound address (request-guard.ts). */
  allowedHosts?: readonly string[];
}

export class EngineServer {
  private readonly server: Server;
  private readonly created = Math.floor(Date.now() / 1000);
  private guard = new RequestGuard({ listenHost: '127.0.0.1' });
  /** `GET /metrics`: requests by route and status, requests in flight, event-loop lag. */
  private readonly requests = new LabelledCounter();
  private inFlight = 0;
  private readonly lag = new EventLoopLag();

  constructor(readonly engine: LlamaEngine) {
    this.server = createServer((req, res) => {
      const route = (req.url ?? '/').split('?')[0]!.replace(/\/+$/, '') || '/';
      this.inFlight++;
      res.once('close', () => {
        this.inFlight--;
        if (route !== '/metrics') this.requests.add({ route: KNOWN_ROUTES.has(route) ? route : 'other', status: res.statusCode });
      });
      this.route(req, res).catch((err: unknown) => this.fail(res, err));
    });
  }

  private metrics(): string {
    const out = new MetricsText();
    out.metric('harness_lab_engine_requests_total', 'counter', 'Requests answered, by route and HTTP status', this.requests.samples());
    out.metric(
      'harness_lab_engine_requests_in_flight',
      'gauge',
      'Requests being answered (the model runs one at a time)',
      Math.max(0, this.inFlight - 1),
    );
    this.lag.write(out, 'harness_lab_engine');
    return out.toString();
  }

  /** Starts listening; resolves with the base URL (`http://HOST:PORT`). */
  async listen(opts: EngineServerOptions = {}): Promise<string> {
    const host = opts.host ?? '127.0.0.1';
    this.guard = new RequestGuard({ listenHost: host, allowedHosts: opts.allowedHosts });
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(opts.port ?? 0, host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    return this.url;
  }

  get url(): string {
    const addr = this.server.address() as AddressInfo;
    const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
    return `http://${host}:${addr.port}`;
  }

  close(): Promise<void> {
    this.lag.dispose();
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0]!.replace(/\/+$/, '') || '/';
    const method = req.method ?? 'GET';
    const refusal = this.guard.check(req);
    if (refusal) throw new EngineRequestError(refusal.message, refusal.status);
    const routes: Record<string, [string, () => Promise<void> | void]> = {
      '/health': ['GET', () => json(res, 200, { status: 'ok', model: this.engine.modelName })],
      '/metrics': [
        'GET',
        () => {
          res.writeHead(200, { 'content-type': METRICS_CONTENT_TYPE, 'cache-control': 'no-store' });
          res.end(this.metrics());
        },
      ],
      '/v1/models': ['GET', () => json(res, 200, this.models())],
      '/tokenize': ['POST', async () => json(res, 200, this.engine.tokenize(parse(tokenizeRequestSchema, await readJson(req))))],
      '/detokenize': ['POST', async () => json(res, 200, this.engine.detokenize(parse(detokenizeRequestSchema, await readJson(req))))],
      '/v1/chat/completions': ['POST', () => this.chat(req, res)],
      '/v1/completions': ['POST', () => this.completions(req, res)],
    };
    const route = routes[path];
    if (!route) throw new EngineRequestError(`no route ${method} ${path}`, 404);
    if (method !== route[0]) throw new EngineRequestError(`${path} accepts ${route[0]}, not ${method}`, 405);
    await route[1]();
  }

  private models() {
    return {
      object: 'list',
      data: [
        {
          id: this.engine.modelName,
          object: 'model',
          created: this.created,
          owned_by: 'harness-lab',
          // vLLM writes the model's path here; the capture proxy finds the tokenizer and chat template by it.
          root: this.engine.modelPath,
          parent: null,
          max_model_len: this.engine.contextSize,
        },
      ],
    };
  }

  /**
   * vLLM's /v1/completions over a token-id prompt: with `prompt_logprobs`, teacher-forced scoring
   * (what `rescore` asks for); without, generation (what the proxy sends in token-in mode).
   */
  private async completions(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const raw = await readJson(req);
    const scoring = typeof raw === 'object' && raw !== null && (raw as { prompt_logprobs?: unknown }).prompt_logprobs != null;
    if (!scoring) {
      json(res, 200, await this.engine.completeTokens(parse(tokenCompletionRequestSchema, raw)));
      return;
    }
    const body = parse(completionRequestSchema, raw);
    const promptLogprobs = await this.engine.scorePrompt(body);
    json(res, 200, {
      id: `cmpl-${Date.now().toString(16)}${Math.floor(Math.random() * 1e9).toString(16)}`,
      object: 'text_completion',
      created: Math.floor(Date.now() / 1000),
      model: this.engine.modelName,
      choices: [{ index: 0, text: '', logprobs: null, finish_reason: 'length', stop_reason: null, prompt_logprobs: promptLogprobs }],
      usage: { prompt_tokens: body.prompt.length, completion_tokens: 0, total_tokens: body.prompt.length },
    });
  }

  private async chat(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = parse(chatRequestSchema, await readJson(req));
    if (!body.stream) {
      json(res, 200, await this.engine.complete(body));
      return;
    }
    // Stream: vLLM-style chunks. prompt_token_ids ride on the first chunk, token_ids are per-chunk deltas.
    const id = `chatcmpl-${Date.now().toString(16)}${Math.floor(Math.random() * 1e9).toString(16)}`;
    const created = Math.floor(Date.now() / 1000);
    const wantIds = body.return_token_ids === true;
    const wantLogprobs = body.logprobs === true || (body.top_logprobs !== undefined && body.top_logprobs !== null);
    const asIds = body.return_tokens_as_token_ids === true;
    const chunk = (choice: Partial<ChatChoice> & { delta: unknown }, extra: Record<string, unknown> = {}) =>
      sse(res, {
        id,
        object: 'chat.completion.chunk',
        created,
        model: this.engine.modelName,
        choices: [{ index: 0, logprobs: null, finish_reason: null, ...choice }],
        ...extra,
      });
    let progressive = false;
    let emitted = '';
    const ids: number[] = [];
    let headersSent = false;
    const start = () => {
      headersSent = true;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    };
    let final: ChatResponse;
    try {
      final = await this.engine.complete(body, {
        onStart: (info) => {
          start();
          progressive = !info.parseToolCalls && info.stop.length === 0;
          chunk({ delta: { role: 'assistant', content: '' } }, wantIds ? { prompt_token_ids: info.promptIds } : {});
        },
        onToken: (t: GeneratedToken) => {
          ids.push(t.id);
          let delta: Record<string, unknown> = {};
          if (progressive) {
            const text = this.engine.decode(ids);
            if (!text.endsWith('\uFFFD') && text.startsWith(emitted) && text.length > emitted.length) {
              delta = { content: text.slice(emitted.length) };
              emitted = text;
            }
          }
          chunk({
            delta,
            ...(wantLogprobs ? { logprobs: { content: [this.engine.logprobEntry(t, asIds)] } } : {}),
            ...(wantIds ? { token_ids: [t.id] } : {}),
          });
        },
      });
    } catch (err) {
      if (!headersSent) throw err;
      const e = errorBody(err);
      sse(res, e.body);
      res.end('data: [DONE]\n\n');
      return;
    }
    const choice = final.choices[0]!;
    const message = choice.message;
    const delta: Record<string, unknown> = {};
    if (progressive) {
      const rest = (message.content ?? '') as string;
      if (rest.startsWith(emitted) && rest.length > emitted.length) delta.content = rest.slice(emitted.length);
    } else {
      if (message.content) delta.content = message.content;
      if (message.reasoning) delta.reasoning = message.reasoning;
      if (message.tool_calls?.length) delta.tool_calls = message.tool_calls.map((c, index) => ({ index, ...c }));
    }
    chunk({ delta, finish_reason: choice.finish_reason });
    if (body.stream_options?.include_usage)
      sse(res, { id, object: 'chat.completion.chunk', created, model: this.engine.modelName, choices: [], usage: final.usage });
    res.end('data: [DONE]\n\n');
  }

  private fail(res: ServerResponse, err: unknown): void {
    const { status, body } = errorBody(err);
    if (status >= 500) process.stderr.write(`engine: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    if (res.headersSent) {
      res.end();
      return;
    }
    json(res, status, body);
  }
}

function errorBody(err: unknown): { status: number; body: unknown } {
  const status = err instanceof EngineRequestError ? err.status : 500;
  const type =
    status === 404
      ? 'NotFoundError'
      : status === 403
        ? 'PermissionDeniedError'
        : status === 415
          ? 'UnsupportedMediaTypeError'
          : status < 500
            ? 'BadRequestError'
            : 'InternalServerError';
  const message = err instanceof Error ? err.message : String(err);
  return { status, body: { error: { message, type, param: err instanceof EngineRequestError ? err.param : null, code: status } } };
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function sse(res: ServerResponse, data: unknown): void {
  res.write(`data: ${JSON.stringify(data)}\n\n`);
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > MAX_BODY) throw new EngineRequestError(`request body exceeds ${MAX_BODY} bytes`, 413);
    chunks.push(c as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch (err) {
    throw new EngineRequestError(`request body is not valid JSON: ${(err as Error).message}`, 400);
  }
}

function parse<T>(
  schema: { safeParse(v: unknown): { success: true; data: T } | { success: false; error: import('zod').ZodError } },
  value: unknown,
): T {
  const r = schema.safeParse(value);
  if (!r.success) throw new EngineRequestError(describeIssues(r.error), 400);
  return r.data;
}
