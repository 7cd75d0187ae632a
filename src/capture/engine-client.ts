// The proxy's only way to reach an engine: non-streamed chat completions over a private undici
// pool per engine. Never the global dispatcher (VS Code patches global fetch for its proxy support).
import { Readable } from 'node:stream';
import { Pool, errors as undiciErrors } from 'undici';
import type { ChatRequest } from './types.js';

export class EngineUnreachableError extends Error {
  constructor(
    readonly engineUrl: string,
    cause: unknown,
  ) {
    super(`inference engine at ${engineUrl} is unreachable: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.name = 'EngineUnreachableError';
  }
}

export interface EngineReply {
  status: number;
  /** Parsed JSON, or the raw text when the engine did not answer JSON. */
  body: unknown;
}

/** `http://host:8000/v1/` -> `http://host:8000`: every route is then built as `/v1/...`. */
export function normaliseEngineUrl(url: string): string {
  const trimmed = url.trim().replace(/\/+$/, '');
  return trimmed.replace(/\/v1$/, '');
}

/** Upstream sockets per engine; bounds file descriptors, not concurrency a harness fleet can reach. */
export const DEFAULT_ENGINE_CONNECTIONS = 4096;

/**
 * Where the proxy gets its answers: the HTTP engine (EngineClient), or another source with the same
 * shape (a recorded rollout answering a replay, src/replay/). Only what a model call and the proxy's
 * side routes use.
 */
export interface ChatEngine {
  readonly baseUrl: string;
  post(route: string, body: unknown, signal?: AbortSignal): Promise<EngineReply>;
  /**
   * POST a body already serialised, given as its parts in order (a token-in prompt's ids are kept as
   * bytes and sent between the body's head and tail, never joined into one buffer); the answer's
   * bytes unparsed: a 100k-token prompt and its echo are compared as bytes, never decoded.
   */
  postBytes(route: string, body: readonly Buffer[], signal?: AbortSignal): Promise<{ status: number; parts: Buffer[] }>;
  get(route: string, signal?: AbortSignal): Promise<EngineReply>;
  chatCompletion(request: ChatRequest, signal?: AbortSignal): Promise<EngineReply>;
  close(): Promise<void>;
}

export class EngineClient implements ChatEngine {
  readonly baseUrl: string;
  private readonly pool: Pool;

  constructor(engineUrl: string, options: { connections?: number; apiKey?: string } = {}) {
    this.baseUrl = normaliseEngineUrl(engineUrl);
    const origin = new URL(this.baseUrl);
    this.pathPrefix = origin.pathname.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
    this.pool = new Pool(origin.origin, {
      // Each harness session holds at most one call in flight, so a cap below the number of live
      // sessions only moves the engine's queue into the proxy: at 1,000 sessions a cap of 256 made
      // calls wait a whole think time for a socket. The engine (vLLM) queues and batches better.
      connections: options.connections ?? DEFAULT_ENGINE_CONNECTIONS,
      pipelining: 1,
      connectTimeout: 30_000,
      headersTimeout: 900_000,
      bodyTimeout: 900_000,
      keepAliveTimeout: 30_000,
    });
  }

  private readonly pathPrefix: string;
  private readonly apiKey: string | undefined;

  async post(route: string, body: unknown, signal?: AbortSignal): Promise<EngineReply> {
    return this.send('POST', route, JSON.stringify(body), signal);
  }

  async get(route: string, signal?: AbortSignal): Promise<EngineReply> {
    return this.send('GET', route, undefined, signal);
  }

  chatCompletion(request: ChatRequest, signal?: AbortSignal): Promise<EngineReply> {
    return this.post('/v1/chat/completions', request, signal);
  }

  /**
   * A POST whose body is already serialised JSON, answered as bytes: for token-in calls, whose body
   * reuses the previous prompt's serialised ids and whose answer's prompt echo is compared as bytes.
   * The answer comes back as the chunks it arrived in (byte-parts.ts).
   */
  async postBytes(route: string, body: readonly Buffer[], signal?: AbortSignal): Promise<{ status: number; parts: Buffer[] }> {
    // Several parts go out as one stream under one content-length (request): at 108k tokens, joining
    // them first copied 0.6 MB into a new buffer every turn. The answer is not joined either.
    const response = await this.request('POST', route, body, signal);
    const parts: Buffer[] = [];
    for await (const chunk of response.body) parts.push(chunk as Buffer);
    return { status: response.statusCode, parts };
  }

  private async request(method: 'GET' | 'POST', route: string, body: string | readonly Buffer[] | undefined, signal?: AbortSignal) {
    const headers: Record<string, string> = { accept: 'application/json', 'accept-encoding': 'identity' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let payload: string | Buffer | Readable | undefined;
    if (typeof body === 'string' || body === undefined) payload = body;
    else if (body.length === 1) payload = body[0]!;
    else {
      headers['content-length'] = String(body.reduce((n, b) => n + b.length, 0));
      payload = Readable.from(body, { objectMode: false });
    }
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    try {
      return await this.pool.request({ method, path: this.pathPrefix + route, headers, body: payload, signal });
    } catch (err) {
      if (err instanceof undiciErrors.RequestAbortedError || (err instanceof Error && err.name === 'AbortError')) throw err;
      throw new EngineUnreachableError(this.baseUrl, err);
    }
  }

  private async send(method: 'GET' | 'POST', route: string, body: string | undefined, signal?: AbortSignal): Promise<EngineReply> {
    const response = await this.request(method, route, body, signal);
    const text = await response.body.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // keep the text: an engine error page is still worth showing
    }
    return { status: response.statusCode, body: parsed };
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}

/** How the caller's user fixes a failed model lookup, in their own terms (a flag, a setting). */
export interface ServedModelHints {
  /** e.g. `--engine-url`. */
  checkUrl: string;
  /** e.g. `pass --model NAME`. */
  nameModel: string;
}

/**
 * The engine's only served model (GET /v1/models): the model name to use when none is configured.
 * Gives up after 10 s; an abort through `signal` is passed on as is.
 */
export async function servedModel(
  engineUrl: string,
  hints: ServedModelHints,
  opts: { signal?: AbortSignal; apiKey?: string } = {},
): Promise<string> {
  const { signal, apiKey } = opts;
  const client = new EngineClient(engineUrl, { connections: 1, ...(apiKey ? { apiKey } : {}) });
  const url = `${client.baseUrl}/v1/models`;
  let ids: string[];
  try {
    const reply = await client.get(
      '/v1/models',
      signal ? AbortSignal.any([signal, AbortSignal.timeout(10_000)]) : AbortSignal.timeout(10_000),
    );
    if (reply.status !== 200) throw new Error(`HTTP ${reply.status}`);
    const data = (reply.body as { data?: unknown } | null)?.data ?? [];
    if (!Array.isArray(data)) throw new Error('no list of models in the answer');
    ids = data.map((m: { id?: unknown } | null) => m?.id).filter((id): id is string => typeof id === 'string');
  } catch (err) {
    if (signal?.aborted) throw err;
    throw new Error(
      `the engine at ${engineUrl} did not list its models (${url}: ${err instanceof Error ? err.message : String(err)}); check ${hints.checkUrl}, or ${hints.nameModel}`,
    );
  } finally {
    await client.close();
  }
  if (ids.length === 1) return ids[0]!;
  throw new Error(
    ids.length
      ? `the engine at ${engineUrl} serves ${ids.join(', ')}; ${hints.nameModel} to choose one`
      : `the engine at ${engineUrl} lists no models; ${hints.nameModel}`,
  );
}

/** The message an engine error carries, whatever its shape (vLLM, OpenAI, plain text). */
export function engineErrorMessage(body: unknown): string {
  if (typeof body === 'string') return body.slice(0, 2000) || 'empty response';
  if (body && typeof body === 'object') {
    const o = body as Record<string, unknown>;
    const err = o.error;
    if (typeof err === 'string') return err;
    if (err && typeof err === 'object' && typeof (err as Record<string, unknown>).message === 'string')
      return (err as { message: string }).message;
    if (typeof o.message === 'string') return o.message;
    if (typeof o.detail === 'string') return o.detail;
  }
  return JSON.stringify(body).slice(0, 2000);
}
