// One model call, in the order docs/capture-protocol.md §5 prescribes: parse, side routes, session, dialect,
// budget, convert, forward (non-streamed), record durably, then answer in the caller's dialect.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { harnessSessionId, presentedKey } from './auth.js';
import { restoreGeminiCallIds } from './dialects/gemini-call-ids.js';
import { detectDialect } from './dialects/index.js';
import { renderStopAnswer } from './dialects/stop-answer.js';
import { answerTokenCount } from './dialects/token-count.js';
import { EngineUnreachableError, engineErrorMessage, type ChatEngine } from './engine-client.js';
import { TokenInUnavailableError } from './render/mode.js';
import { HistoryBodies } from './history-body.js';
import { ByteParts } from './byte-parts.js';
import { BodyTooLargeError, readBodyParts, redactHeaders, scrubSecret, sendJson } from './http-util.js';
import type { RenderInfo } from './render/bridge.js';
import type { TokenInEngine } from './render/token-engine.js';
import type { SessionRegistry } from './session-registry.js';
import type { CaptureSession } from './sessions.js';
import { randomHex } from './random-hex.js';
import { SseKeepalive, writeSse } from './sse.js';
import { StoreWriteError } from './store.js';
import {
  EngineResponseError,
  buildEngineRequest,
  distributionChangingField,
  isContextOverflow,
  normaliseEngineResponse,
  storedEngineResponse,
} from './upstream.js';
import {
  DialectError,
  type CallError,
  type CallRecord,
  type CaptureLevel,
  type ChatRequest,
  type ChatResponse,
  type Dialect,
  type DialectContext,
  type JsonObject,
} from './types.js';

/** A call's id: 12 hex digits (see types.ts). */
const newCallId = (): string => randomHex(12);

export interface ModelCallLimits {
  bodyLimit: number;
  maxOutputTokens: number;
  /** Streaming keepalive timings (tests shorten them). */
  keepaliveGraceMs?: number;
  keepaliveIntervalMs?: number;
}

/** The engine as a call sees it: where it goes, and its capture grade (probed on first contact). */
export interface GradedEngine {
  client: ChatEngine;
  grade(): Promise<CaptureLevel>;
  /**
   * The token-in adapter when the proxy renders (null: chat completions, the engine renders). Throws
   * TokenInUnavailableError when token-in was asked for and cannot be had.
   */
  tokenIn?(): Promise<TokenInEngine | null>;
}

export interface ModelCallDeps {
  sessions: SessionRegistry;
  /** The session a presented key opens: any of the registry's, or (a session socket) only its own. */
  findSession(key: string): CaptureSession | undefined;
  engine: GradedEngine;
  limits: ModelCallLimits;
  /** Parses request bodies, each session's resent history once. */
  bodies: HistoryBodies;
}

function replyError(res: ServerResponse, dialect: Dialect, status: number, message: string, keepalive?: SseKeepalive): void {
  if (keepalive?.isCommitted) {
    writeSse(res, [dialect.streamErrorEvent(status, message)], keepalive);
    return;
  }
  keepalive?.stop();
  sendJson(res, status, dialect.errorBody(status, message));
}

/** The synthetic stop answer (budget spent, context full), as JSON or SSE in the caller's dialect. */
function replyStop(res: ServerResponse, dialect: Dialect, ctx: DialectContext, stream: boolean, keepalive?: SseKeepalive): void {
  const rendered = renderStopAnswer(dialect, ctx, stream);
  if (rendered.stream) writeSse(res, rendered.events, keepalive);
  else sendJson(res, 200, rendered.body);
}

export async function handleModelCall(req: IncomingMessage, res: ServerResponse, url: URL, deps: ModelCallDeps): Promise<void> {
  const path = url.pathname + url.search;
  const headerDialect = detectDialect(url.pathname, req.headers, undefined);
  let raw: ByteParts;
  try {
    raw = new ByteParts(await readBodyParts(req, deps.limits.bodyLimit));
  } catch (err) {
    if (err instanceof BodyTooLargeError) return replyError(res, headerDialect, 413, err.message);
    throw err;
  }
  // The key is read before the body so that a session's resent history is parsed once (history-body.ts);
  // the order of the answers is unchanged (a body that is not JSON is refused before an unknown key).
  const key = presentedKey(req, url);
  const session = key ? deps.findSession(key) : undefined;
  let parsed: unknown;
  try {
    parsed = deps.bodies.parse(raw, session ? key : undefined);
  } catch {
    return replyError(res, headerDialect, 400, 'body must be JSON');
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
    return replyError(res, headerDialect, 400, 'body must be a JSON object');
  const body = parsed as JsonObject;

  const counted = answerTokenCount(url.pathname, body);
  if (counted) return sendJson(res, counted.status, counted.body);

  const dialect = detectDialect(url.pathname, req.headers, body);
  if (!session) {
    const why = key ? 'unknown API key' : 'no API key';
    return replyError(
      res,
      dialect,
      401,
      `${why}; register a session via POST /sessions and use its api_key (or, for a session created without ` +
        `one, its session_id) as the API key (Authorization: Bearer <key>, x-api-key or x-goog-api-key)`,
    );
  }
  // A keyed session's key is a credential: nothing recorded may carry it, wherever the harness echoed it.
  const secret = session.info.key_sha256 ? key : undefined;
  const bodyHasSecret = secret !== undefined && raw.includes(Buffer.from(secret));
  const recorded = <T>(value: T, inBody: boolean): T =>
    secret !== undefined && (!inBody || bodyHasSecret) ? scrubSecret(value, secret) : value;
  session.touch();
  const stream = dialect.wantsStream(body, path);
  const ctx: DialectContext = {
    path,
    clientModel: dialect.clientModel(body, url.pathname) ?? session.info.model,
    request: body,
    servedModel: session.info.model,
  };

  // Gemini harnesses may replay history without the call ids the proxy answered with.
  const ids = dialect.name === 'google_gemini' ? restoreGeminiCallIds(body, () => session.calls) : undefined;
  let chat: ChatRequest;
  try {
    chat = dialect.toChat(ids?.body ?? body, ctx);
  } catch (err) {
    if (err instanceof DialectError) return replyError(res, dialect, err.status, err.message);
    return replyError(res, dialect, 400, `could not read the request: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (chat.n !== undefined && chat.n !== null && chat.n !== 1)
    return replyError(res, dialect, 400, 'capture supports exactly one completion per request (n=1)');
  if (session.info.sampling) {
    const field = distributionChangingField(chat);
    if (field)
      return replyError(
        res,
        dialect,
        400,
        `${field} is not allowed on a training session with pinned sampling: it changes the distribution the tokens are sampled from, so their logprobs would not be the policy's`,
      );
  }

  let level: CaptureLevel;
  let tokenIn: TokenInEngine | null = null;
  try {
    level = await deps.sessions.captureLevel(session, await deps.engine.grade());
    tokenIn = deps.engine.tokenIn ? await deps.engine.tokenIn() : null;
  } catch (err) {
    if (err instanceof StoreWriteError) return replyError(res, dialect, err.status, err.message);
    if (err instanceof TokenInUnavailableError) return replyError(res, dialect, 503, err.message);
    throw err;
  }
  // Budget check and reservation happen in the same tick: no await between them.
  if (!session.tryReserveCall()) {
    await deps.sessions.recordBudgetStop(session);
    replyStop(res, dialect, ctx, stream);
    return;
  }

  const engine = deps.engine.client;
  const plan = buildEngineRequest(chat, {
    model: session.info.model,
    captureLevel: level,
    maxOutputTokens: deps.limits.maxOutputTokens,
    pinnedSampling: session.info.sampling,
  });
  const started = new Date();
  const index = session.takeIndex();
  const abort = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) abort.abort();
  };
  res.on('close', onClose);
  const keepalive = stream
    ? new SseKeepalive(res, deps.limits.keepaliveGraceMs, deps.limits.keepaliveIntervalMs, dialect.sseComments !== false)
    : undefined;

  const base: Omit<
    CallRecord,
    | 'ended_at'
    | 'latency_ms'
    | 'engine_response'
    | 'response_body'
    | 'model'
    | 'finish_reason'
    | 'usage'
    | 'findings'
    | 'error'
    | 'prompt_token_ids'
    | 'completion_token_ids'
    | 'logprobs'
    | 'top_logprobs'
    | 'token_bytes'
  > = {
    call_id: newCallId(),
    session_id: session.id,
    index,
    dialect: dialect.name,
    path: recorded(path, false),
    stream,
    started_at: started.toISOString(),
    harness_session_id: recorded(harnessSessionId(req, body), false),
    request: { headers: recorded(redactHeaders(req.headers), false), body: recorded(body, true) },
    engine_url: engine.baseUrl,
    engine_request: recorded(plan.request, true),
    n_tools: Array.isArray(plan.request.tools) ? plan.request.tools.length : 0,
    requested_sampling_params: plan.requestedSampling,
    sampling_params: plan.sampling,
  };
  let render: RenderInfo | undefined;
  let renderFindings: string[] = [];
  const finish = (fields: Partial<CallRecord>): CallRecord => {
    const ended = new Date();
    return {
      ...base,
      ...(render ? { render } : {}),
      ended_at: ended.toISOString(),
      latency_ms: ended.getTime() - started.getTime(),
      engine_response: null,
      response_body: null,
      model: null,
      finish_reason: null,
      usage: null,
      findings: [],
      error: null,
      prompt_token_ids: null,
      completion_token_ids: null,
      logprobs: null,
      top_logprobs: null,
      token_bytes: null,
      ...fields,
    };
  };
  /** Stores a call; once stored, a token-in bridge takes it in (so it never reads the session back). */
  const recordCall = async (record: CallRecord): Promise<void> => {
    await deps.sessions.record(session, record);
    tokenIn?.callRecorded(session, record);
  };
  /** Records; a store failure is swallowed here (the registry logged it) when `quiet`, else rethrown. */
  const store = async (record: CallRecord, quiet: boolean): Promise<void> => {
    try {
      await recordCall(record);
    } catch (err) {
      if (!(quiet && err instanceof StoreWriteError)) throw err;
    }
  };
  const fail = async (error: CallError, engineResponse: unknown = null) => {
    // The harness gets the engine's error either way; an unstored errored call loses no answer.
    await store(finish({ error, engine_response: engineResponse as ChatResponse | null }), true);
    replyError(res, dialect, error.status, error.message, keepalive);
  };

  const activity = { session_id: session.id, index, started_at: base.started_at };
  deps.sessions.noteCallActivity({ ...activity, state: 'started' });
  try {
    let engineReply;
    try {
      if (tokenIn) {
        const reply = await tokenIn.complete(session, session, plan.request, abort.signal);
        render = reply.render;
        renderFindings = reply.findings;
        engineReply = reply;
      } else engineReply = await engine.chatCompletion(plan.request, abort.signal);
    } catch (err) {
      if (abort.signal.aborted) {
        keepalive?.stop();
        await store(
          finish({ error: { status: 499, message: 'client closed the connection before the engine answered', kind: 'client' } }),
          true,
        );
        return;
      }
      const message = err instanceof EngineUnreachableError ? err.message : `inference engine at ${engine.baseUrl} failed: ${String(err)}`;
      return await fail({ status: 502, message, kind: 'engine' });
    }
    if (engineReply.status !== 200) {
      if (isContextOverflow(engineReply.status, engineReply.body)) {
        session.addFinding(`[WARN] context_budget_exhausted: ${engineErrorMessage(engineReply.body).slice(0, 300)}`);
        keepalive?.stop();
        replyStop(res, dialect, ctx, stream, keepalive);
        return;
      }
      const passThrough = [400, 413, 422].includes(engineReply.status) ? engineReply.status : 502;
      return await fail(
        { status: passThrough, message: `engine answered ${engineReply.status}: ${engineErrorMessage(engineReply.body)}`, kind: 'engine' },
        engineReply.body,
      );
    }
    let answer;
    try {
      answer = normaliseEngineResponse(engineReply.body, { clientLogprobs: chat.logprobs === true });
    } catch (err) {
      if (err instanceof EngineResponseError)
        return await fail({ status: 502, message: `engine at ${engine.baseUrl}: ${err.message}`, kind: 'engine' }, engineReply.body);
      throw err;
    }
    const clientAnswer = answer.response;
    const responseBody = dialect.fromChat(clientAnswer, ctx);
    const choice = clientAnswer.choices[0]!;
    const record = finish({
      ...answer.capture,
      engine_response: storedEngineResponse(engineReply.body as ChatResponse),
      response_body: responseBody,
      model: typeof clientAnswer.model === 'string' ? clientAnswer.model : null,
      finish_reason: choice.finish_reason,
      usage: clientAnswer.usage ?? null,
      findings: [
        ...(ids?.finding ? [ids.finding] : []),
        ...renderFindings,
        ...(level === 'tokens' ? answer.findings : answer.findings.filter((f) => !f.startsWith('[FATAL] no_'))),
      ],
    });
    // Only token in renders: its digest goes on from the anchor's state, hashing the turn's new ids.
    if (record.render && tokenIn)
      record.render = {
        ...record.render,
        tokens_digest: tokenIn.tokensDigest(record.prompt_token_ids, record.completion_token_ids, record.logprobs),
      };
    // Durable before the harness sees the answer: a crash after this loses nothing answered, and an
    // answer that could not be stored is not given (507 disk full, 503 otherwise, in the dialect).
    try {
      await recordCall(record);
    } catch (err) {
      if (err instanceof StoreWriteError) return replyError(res, dialect, err.status, err.message, keepalive);
      throw err;
    }
    if (stream) writeSse(res, dialect.streamEvents(clientAnswer, ctx), keepalive);
    else sendJson(res, 200, responseBody);
  } finally {
    keepalive?.stop();
    res.off('close', onClose);
    deps.sessions.noteCallActivity({ ...activity, state: 'ended' });
  }
}
