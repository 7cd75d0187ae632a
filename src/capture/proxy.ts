// The capture proxy: one loopback HTTP server in front of one engine, and its lifecycle. Sessions,
// their store and their events are the registry's (`proxy.sessions`, session-registry.ts).
// The same class runs under the CLI (`harness-lab proxy`) and inside the VS Code extension host.
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { AcceptorThread, ListenError } from './acceptor.js';
import { adminKeyFromHeaders, isLoopbackHost, secretsEqual } from './auth.js';
import { detectDialect } from './dialects/index.js';
import { EngineClient, type ChatEngine } from './engine-client.js';
import { probeEngine, type EngineProbeReport } from './engine-probe.js';
import { resolveRenderMode, TokenInUnavailableError, type RenderMode, type RenderModeReport } from './render/mode.js';
import type { TokenInEngine } from './render/token-engine.js';
import type { FullRenderCheck } from './render/bridge.js';
import {
  BodyTooLargeError,
  DEFAULT_BODY_LIMIT,
  decodePathSegment,
  loggableTarget,
  parseRequestTarget,
  readBody,
  sendJson,
} from './http-util.js';
import { METRICS_CONTENT_TYPE, ProxyMetrics } from './metrics.js';
import { HistoryBodies } from './history-body.js';
import { handleModelCall, type ModelCallDeps } from './model-call.js';
import { RequestGuard, type Refusal } from './request-guard.js';
import {
  SessionExistsError,
  SessionKeyInUseError,
  SessionRegistry,
  type CreatedSession,
  type DormancyLimits,
  type ResidentLimits,
} from './session-registry.js';
import { CreateSessionSchema, type CaptureSession } from './sessions.js';
import { StoreWriteError } from './store.js';
import type { CaptureLevel, ProxyLogger } from './types.js';
import { DEFAULT_MAX_OUTPUT_TOKENS } from './upstream.js';

export type { ProxyLogger } from './types.js';
export { SessionExistsError } from './session-registry.js';

export interface ProxyOptions {
  engineUrl: string;
  model: string;
  /** Sent to the engine as `Authorization: Bearer`; never recorded, logged or returned. */
  engineApiKey?: string;
  /**
   * The source of answers instead of the HTTP engine at `engineUrl` (a replay answers from a record);
   * pass `captureLevel` with it, since such a source is not probed. Closed with the proxy.
   */
  engine?: ChatEngine;
  host?: string;
  port?: number;
  /**
   * Names (or addresses) clients reach the proxy by besides loopback and the bound address, e.g. a
   * cluster Service name: any other `Host` is refused (DNS rebinding), see request-guard.ts.
   */
  allowedHosts?: readonly string[];
  adminKey?: string;
  /** Where sessions are stored durably; without it captures live in memory only. */
  dataDir?: string;
  /** Default per-session model-call budget (0 = unlimited). */
  maxModelCalls?: number;
  maxOutputTokens?: number;
  bodyLimit?: number;
  /** Fixes the capture level and skips the engine probe (tests, or an engine known to be text-only). */
  captureLevel?: CaptureLevel;
  logger?: ProxyLogger;
  /**
   * Accept connections on a dedicated thread (default true): see acceptor.ts. False listens on the
   * main thread, as a plain node:http server does.
   */
  acceptorThread?: boolean;
  keepaliveGraceMs?: number;
  keepaliveIntervalMs?: number;
  /** How many stored sessions keep their calls in memory at once (and roughly how many bytes); see SessionRegistry. */
  resident?: ResidentLimits;
  /** When idle sessions leave memory entirely, found again through their files; see SessionRegistry. */
  dormancy?: DormancyLimits;
  /**
   * Who renders the chat template: `proxy` (token in, token out; the proxy bridges each turn onto
   * the exact tokens of the turn it continues), `engine` (chat completions), or `auto` (default:
   * proxy where possible, else engine). See docs/token-in.md.
   */
  render?: RenderMode;
  /** The model folder (tokenizer.json, tokenizer_config.json) or GGUF to render with; default: found from the engine's /v1/models. */
  renderModel?: string;
  /** When a bridged prompt is compared with a full render of its messages (default `sampled`; see FullRenderCheck). */
  fullRenderCheck?: FullRenderCheck;
  /** A token-in engine built by the caller (a replay of a token-in capture answers the token route from its record). */
  tokenIn?: TokenInEngine;
}

const silentLogger: ProxyLogger = { info() {}, warn() {}, error() {} };

export class ProxyConfigError extends Error {}

export class CaptureProxy {
  readonly instance = randomBytes(8).toString('hex');
  /** Every session of this proxy: create, get, list, delete, rollout, and their events. */
  readonly sessions: SessionRegistry;
  /** `GET /metrics`: counters fed by the registry's events (metrics.ts). */
  private readonly metrics: ProxyMetrics;
  /** The source of answers: the HTTP engine (retarget swaps it), or a record for a replay. */
  private engine: ChatEngine;
  /** New sessions' defaults (the registry reads this object): retarget changes its engine URL. */
  private readonly sessionDefaults: { model: string; engineUrl: string; maxModelCalls: number };
  private readonly log: ProxyLogger;
  private captureLevel: CaptureLevel;
  private probeReport: EngineProbeReport | undefined;
  private probing: Promise<EngineProbeReport> | undefined;
  private renderResolved: { report: RenderModeReport; engine: TokenInEngine | null } | undefined;
  private renderResolving: Promise<{ report: RenderModeReport; engine: TokenInEngine | null; transient: boolean }> | undefined;
  private readonly modelCall: Omit<ModelCallDeps, 'findSession'>;
  private server!: Server;
  private guard!: RequestGuard;
  private acceptor: AcceptorThread | undefined;
  private closing = false;
  private address!: AddressInfo;

  private constructor(private readonly options: ProxyOptions) {
    this.engine = options.engine ?? new EngineClient(options.engineUrl, options.engineApiKey ? { apiKey: options.engineApiKey } : {});
    this.log = options.logger ?? silentLogger;
    this.captureLevel = options.captureLevel ?? 'tokens';
    this.sessionDefaults = { model: options.model, engineUrl: this.engine.baseUrl, maxModelCalls: options.maxModelCalls ?? 0 };
    this.sessions = SessionRegistry.open({
      defaults: this.sessionDefaults,
      dataDir: options.dataDir,
      engineLevel: () => ({ level: this.captureLevel, graded: Boolean(options.captureLevel) || Boolean(this.probeReport?.reachable) }),
      logger: this.log,
      resident: options.resident,
      dormancy: options.dormancy,
    });
    this.metrics = new ProxyMetrics(this.sessions);
    this.modelCall = {
      sessions: this.sessions,
      engine: { client: this.engine, grade: () => this.ensureProbed(), tokenIn: () => this.tokenInEngine() },
      bodies: new HistoryBodies(),
      limits: {
        bodyLimit: options.bodyLimit ?? DEFAULT_BODY_LIMIT,
        maxOutputTokens: options.maxOutputTokens ?? DEFAULT_MAX_OUTPUT_TOKENS,
        keepaliveGraceMs: options.keepaliveGraceMs,
        keepaliveIntervalMs: options.keepaliveIntervalMs,
      },
    };
  }

  static async start(options: ProxyOptions): Promise<CaptureProxy> {
    const host = options.host ?? '127.0.0.1';
    if (!isLoopbackHost(host) && !options.adminKey) {
      throw new ProxyConfigError(
        `refusing to bind ${host} without an admin key: anyone who can reach it could read captured token data ` +
          `and relay calls to the engine. Pass --admin-key (or set HARNESS_LAB_ADMIN_KEY), or bind 127.0.0.1.`,
      );
    }
    const proxy = new CaptureProxy(options);
    await proxy.listen(host, options.port ?? 0);
    if (!options.captureLevel) void proxy.ensureProbed();
    if (options.render !== 'engine') void proxy.tokenInEngine().catch(() => undefined);
    return proxy;
  }

  get url(): string {
    const host = this.address.family === 'IPv6' ? `[${this.address.address}]` : this.address.address;
    return `http://${host}:${this.address.port}`;
  }

  get port(): number {
    return this.address.port;
  }

  get engineUrl(): string {
    return this.engine.baseUrl;
  }

  private async listen(host: string, port: number): Promise<void> {
    this.guard = new RequestGuard({ listenHost: host, allowedHosts: this.options.allowedHosts });
    this.server = createServer((req, res) => {
      this.route(req, res).catch((err: unknown) => {
        this.log.error(
          `request ${req.method} ${loggableTarget(req.url)} failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`,
        );
        if (!res.headersSent) sendJson(res, 500, { error: { message: 'internal error in the capture proxy', type: 'server_error' } });
        else res.destroy();
      });
    });
    this.server.keepAliveTimeout = 75_000;
    this.server.headersTimeout = 80_000;
    this.server.requestTimeout = 0; // engine calls may legitimately take many minutes
    const inUse = () => new ProxyConfigError(`port ${port} on ${host} is already in use; pick another with --port, or 0 for any free port`);
    // A deep accept queue: a burst of new harness connections must queue, not be dropped (Node's default is 511).
    const backlog = 2048;
    if (this.options.acceptorThread !== false) {
      // `/health` counts sessions: the acceptor's copy changes with them, once per loop turn however
      // many sessions a burst creates (each copy wakes the acceptor thread).
      let healthQueued = false;
      this.sessions.onDidChange(() => {
        if (healthQueued) return;
        healthQueued = true;
        setImmediate(() => {
          healthQueued = false;
          this.acceptor?.publishHealth();
        });
      });
      try {
        this.acceptor = await this.startAcceptor(host, port, backlog);
      } catch (err) {
        throw err instanceof ListenError && err.code === 'EADDRINUSE' ? inUse() : err;
      }
      this.address = this.acceptor.address;
      return;
    }
    return new Promise((resolve, reject) => {
      const onError = (err: NodeJS.ErrnoException) => reject(err.code === 'EADDRINUSE' ? inUse() : err);
      this.server.once('error', onError);
      this.server.listen({ port, host, backlog }, () => {
        this.server.off('error', onError);
        this.address = this.server.address() as AddressInfo;
        resolve();
      });
    });
  }

  private startAcceptor(host: string, port: number, backlog: number): Promise<AcceptorThread> {
    return AcceptorThread.start({
      host,
      port,
      backlog,
      hostNames: this.guard.hostNames,
      health: () => JSON.stringify(this.health()),
      onConnection: (socket) => this.server.emit('connection', socket),
      onExit: (reason) => {
        // A crash of the acceptor would leave the port closed: say so, and listen again on the same port.
        this.log.error(`the acceptor thread stopped (${reason}); listening again on ${host}:${this.address.port}`);
        this.acceptor = undefined;
        this.startAcceptor(host, this.address.port, backlog).then(
          (acceptor) => {
            if (this.closing) void acceptor.close();
            else this.acceptor = acceptor;
          },
          (err: unknown) =>
            this.log.error(`could not listen again on ${host}:${this.address.port}: ${err instanceof Error ? err.message : String(err)}`),
        );
      },
    });
  }

  /**
   * Sends the next model calls to another engine serving the same model (the editor swaps its
   * embedded engine under a running proxy this way): calls in flight finish on the old engine, whose
   * connections close once they are done; the new one is graded again. The port and every session
   * (and its key) stay, so harnesses pointed at this proxy keep working.
   */
  async retarget(engineUrl: string): Promise<void> {
    const old = this.engine;
    this.engine = new EngineClient(engineUrl, this.options.engineApiKey ? { apiKey: this.options.engineApiKey } : {});
    this.modelCall.engine.client = this.engine;
    this.sessionDefaults.engineUrl = this.engine.baseUrl;
    this.probeReport = undefined;
    this.probing = undefined;
    // The render mode (token in) was resolved against the old engine: resolve it again on the next call.
    void this.renderResolved?.engine?.close();
    this.renderResolved = undefined;
    this.renderResolving = undefined;
    this.acceptor?.publishHealth();
    this.log.info(`engine ${old.baseUrl} -> ${this.engine.baseUrl}`);
    if (!this.options.captureLevel) void this.ensureProbed();
    await old.close();
  }

  /** The engine's grade; probed once on first contact, again after a probe that could not reach it. */
  async ensureProbed(): Promise<CaptureLevel> {
    if (this.options.captureLevel) return this.options.captureLevel;
    if (this.probeReport?.reachable) return this.captureLevel;
    const engine = this.engine;
    this.probing ??= probeEngine(engine, this.options.model).then((report) => {
      if (engine !== this.engine) return report; // retargeted meanwhile: this grade is the old engine's
      this.probeReport = report;
      this.acceptor?.publishHealth();
      this.captureLevel = report.capture_level;
      this.probing = undefined;
      const level = `${report.capture_level}${report.capture_level === 'tokens' ? ` (logprobs ${report.logprobs_mode})` : ''}`;
      if (report.reachable)
        this.log.info(`engine ${report.engine_url} graded ${level}${report.findings.length ? `: ${report.findings.join('; ')}` : ''}`);
      else this.log.warn(`engine ${report.engine_url} is unreachable; will probe again on the next call`);
      return report;
    });
    await this.probing;
    return this.captureLevel;
  }

  /**
   * The render mode, resolved once against a reachable engine (again while the engine cannot be
   * reached). Null: chat completions. Throws when `--render proxy` was asked for and is impossible.
   */
  async tokenInEngine(): Promise<TokenInEngine | null> {
    if (this.options.tokenIn) return this.options.tokenIn;
    const requested = this.options.render ?? 'auto';
    // Another source of answers than an HTTP engine (a replay's record) answers chat completions only.
    const engine = this.engine;
    if (requested === 'engine' || !(engine instanceof EngineClient)) return null;
    if (!this.renderResolved) {
      this.renderResolving ??= (async () => {
        await this.ensureProbed();
        const resolved = await resolveRenderMode(engine, {
          requested,
          model: this.options.model,
          modelFiles: this.options.renderModel,
          fullRenderCheck: this.options.fullRenderCheck,
        });
        const r = resolved.report;
        if (r.mode === 'proxy')
          this.log.info(
            `render: the proxy renders (token in) with ${r.model_files} (${r.family}), engine route ${r.route}, max_model_len ${r.max_model_len ?? 'unknown'}`,
          );
        else this.log[requested === 'proxy' ? 'error' : 'info'](`render: the engine renders (chat completions): ${r.problem}`);
        if (!resolved.transient && this.probeReport?.reachable !== false) this.renderResolved = resolved;
        return resolved;
      })().finally(() => (this.renderResolving = undefined));
    }
    const resolved = this.renderResolved ?? (await this.renderResolving!);
    if (resolved.engine) return resolved.engine;
    if (requested === 'proxy')
      throw new TokenInUnavailableError(`the capture proxy was started with --render proxy but cannot render: ${resolved.report.problem}`);
    return null;
  }

  /** How calls are rendered, once resolved. */
  get renderReport(): RenderModeReport | undefined {
    return this.renderResolved?.report;
  }

  get engineReport(): EngineProbeReport | undefined {
    return this.probeReport;
  }

  // ---- HTTP ----

  private isAdmin(req: IncomingMessage): boolean {
    const adminKey = this.options.adminKey;
    if (!adminKey) return true;
    // Headers only: a key in a URL ends up in logs, shell history and Referer headers.
    return adminKeyFromHeaders(req).some((key) => secretsEqual(key, adminKey));
  }

  private health(): Record<string, unknown> {
    return {
      status: 'ok',
      instance: this.instance,
      upstream: this.engine.baseUrl,
      model: this.options.model,
      sessions: this.sessions.size,
      capture_level: this.options.captureLevel ?? (this.probeReport ? this.captureLevel : 'unknown'),
      rollout_type: this.captureLevel === 'tokens' ? 'train' : 'eval',
      logprobs_mode: this.probeReport?.logprobs_mode ?? 'unknown',
      engine_reachable: this.probeReport?.reachable ?? null,
      require_registered: true,
      admin_key: Boolean(this.options.adminKey),
      render: this.renderResolved?.report.mode ?? (this.options.render === 'engine' ? 'engine' : 'unknown'),
    };
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = parseRequestTarget(req.url);
    if (!url) return sendJson(res, 400, { error: { message: 'malformed request target', type: 'invalid_request_error' } });
    const path = url.pathname.replace(/\/+$/, '') || '/';
    const method = req.method ?? 'GET';
    const refusal = this.guard.check(req);
    if (refusal) return this.refuse(req, res, url, path, refusal);
    if (path === '/health' && (method === 'GET' || method === 'HEAD')) return sendJson(res, 200, this.health());
    if (path === '/' && (method === 'GET' || method === 'HEAD'))
      return sendJson(res, 200, { status: 'ok', service: 'harness-lab capture proxy' });
    if (path === '/v1/models' && method === 'GET') return this.models(res);
    if (path === '/metrics' && method === 'GET') {
      if (!this.isAdmin(req))
        return sendJson(res, 401, { error: { message: 'this route requires the capture admin key', type: 'invalid_request_error' } });
      res.writeHead(200, { 'content-type': METRICS_CONTENT_TYPE, 'cache-control': 'no-store' });
      return void res.end(this.metrics.render());
    }
    if (path === '/engines' && method === 'GET') {
      if (!this.isAdmin(req))
        return sendJson(res, 401, { error: { message: 'this route requires the capture admin key', type: 'invalid_request_error' } });
      await this.ensureProbed();
      return sendJson(res, 200, { engines: this.probeReport ? [this.probeReport] : [] });
    }
    if (path === '/sessions' || path.startsWith('/sessions/')) {
      if (!this.isAdmin(req))
        return sendJson(res, 401, {
          error: {
            message: 'this route requires the capture admin key (Authorization: Bearer <key> or x-admin-key)',
            type: 'invalid_request_error',
          },
        });
      return this.sessionRoute(req, res, method, path, url);
    }
    if (method === 'POST')
      return handleModelCall(
        req,
        res,
        url,
        this.modelCallDeps((key) => this.sessions.findByKey(key)),
      );
    sendJson(res, 404, { error: { message: `no route ${method} ${url.pathname}`, type: 'invalid_request_error' } });
  }

  /** A refused request (foreign Host or Origin, a body that is not JSON), answered in the caller's dialect. */
  private refuse(req: IncomingMessage, res: ServerResponse, url: URL, path: string, refusal: Refusal): void {
    const control =
      path === '/' ||
      path === '/health' ||
      path === '/metrics' ||
      path === '/engines' ||
      path === '/sessions' ||
      path.startsWith('/sessions/');
    this.log.warn(`refused ${req.method} ${loggableTarget(req.url)}: ${refusal.message}`);
    if (control) return sendJson(res, refusal.status, { error: { message: refusal.message, type: 'invalid_request_error' } });
    const dialect = detectDialect(url.pathname, req.headers, undefined);
    sendJson(res, refusal.status, dialect.errorBody(refusal.status, refusal.message));
  }

  /**
   * What a model call needs, with the session lookup chosen by the listener: the main server finds
   * any registered key, a session socket (session-socket.ts) only its own.
   */
  modelCallDeps(findSession: (key: string) => CaptureSession | undefined): ModelCallDeps {
    return { ...this.modelCall, findSession };
  }

  /** GET /v1/models: the engine's list, or the served model when the engine cannot be reached. */
  async models(res: ServerResponse): Promise<void> {
    try {
      const reply = await this.engine.get('/v1/models');
      if (reply.status === 200) return sendJson(res, 200, reply.body);
    } catch {
      // an unreachable engine still gets an answer: harnesses list models before their first call
    }
    sendJson(res, 200, { object: 'list', data: [{ id: this.options.model, object: 'model', owned_by: 'harness-lab' }] });
  }

  private async sessionRoute(req: IncomingMessage, res: ServerResponse, method: string, path: string, url: URL): Promise<void> {
    const parts = path.split('/').filter(Boolean); // ['sessions', id?, 'rollout'?]
    if (parts.length === 1) {
      if (method === 'GET') return sendJson(res, 200, { sessions: this.sessions.list() });
      if (method === 'POST') return this.createSessionRoute(req, res);
    }
    const id = decodePathSegment(parts[1] ?? '');
    if (id === undefined)
      return sendJson(res, 404, { error: { message: `unknown session ${parts[1]}: malformed percent escape`, type: 'not_found_error' } });
    const session = this.sessions.get(id);
    if (parts.length === 2 && method === 'DELETE') return sendJson(res, 200, { deleted: await this.sessions.delete(id) });
    if (!session) return sendJson(res, 404, { error: { message: `unknown session ${id}`, type: 'not_found_error' } });
    if (parts.length === 2 && method === 'GET') return sendJson(res, 200, session.summary());
    if (parts.length === 3 && parts[2] === 'rollout' && method === 'GET') return sendJson(res, 200, this.sessions.rollout(id));
    if (parts.length === 3 && parts[2] === 'calls' && method === 'GET') {
      // `?from=K&limit=L`: the calls from arrival position K on, at most L of them, so a follower
      // (a cluster batch's mirror) fetches only what it has not seen; `total` says how many there are.
      const from = pageParam(url, 'from', 0);
      const limit = pageParam(url, 'limit', Number.MAX_SAFE_INTEGER);
      if (from === undefined || limit === undefined)
        return sendJson(res, 400, {
          error: { message: 'from and limit must be whole numbers (limit 1 or more)', type: 'invalid_request_error' },
        });
      const all = session.calls;
      return sendJson(res, 200, { session_id: id, from, total: all.length, calls: all.slice(from, from + limit) });
    }
    sendJson(res, 404, { error: { message: `no route ${method} ${path}`, type: 'invalid_request_error' } });
  }

  private async createSessionRoute(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw: string;
    try {
      raw = (await readBody(req, 1024 * 1024)).toString('utf8').trim();
    } catch (err) {
      if (err instanceof BodyTooLargeError) return sendJson(res, 413, { error: { message: err.message, type: 'invalid_request_error' } });
      throw err;
    }
    let body: unknown = {};
    if (raw) {
      try {
        body = JSON.parse(raw);
      } catch {
        return sendJson(res, 400, { error: { message: 'body must be JSON', type: 'invalid_request_error' } });
      }
    }
    const parsed = CreateSessionSchema.safeParse(body);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      return sendJson(res, 400, {
        error: { message: `${issue?.path.join('.') || 'body'}: ${issue?.message ?? 'invalid'}`, type: 'invalid_request_error' },
      });
    }
    await this.ensureProbed();
    let info: CreatedSession;
    try {
      info = await this.sessions.createStored(parsed.data);
    } catch (err) {
      if (err instanceof SessionExistsError || err instanceof SessionKeyInUseError)
        return sendJson(res, 409, { error: { message: err.message, type: 'invalid_request_error' } });
      // Not stored, so not created: a restart would not know it.
      const status = err instanceof StoreWriteError ? err.status : 503;
      return sendJson(res, status, { error: { message: err instanceof Error ? err.message : String(err), type: 'server_error' } });
    }
    // The key goes out once, here, and only when it was minted (a given key is the caller's already).
    sendJson(res, 201, {
      session_id: info.session_id,
      ...(parsed.data.mint_key && info.api_key ? { api_key: info.api_key } : {}),
      base_url: `${this.url}/v1`,
      model: info.model,
      max_model_calls: info.max_model_calls,
      capture_level: info.capture_level ?? 'unknown',
      rollout_type: info.capture_level === 'tokens' ? 'train' : 'eval',
      engine_reachable: this.probeReport?.reachable ?? null,
    });
  }

  async close(): Promise<void> {
    this.closing = true;
    this.server.closeAllConnections();
    if (this.acceptor) await this.acceptor.close();
    else await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.engine.close();
    await this.renderResolved?.engine?.close(); // the tokenizer threads
    this.metrics.dispose();
    await this.sessions.close();
  }
}

/** A whole-number query parameter (`fallback` when absent; undefined when malformed, or a limit below 1). */
function pageParam(url: URL, name: 'from' | 'limit', fallback: number): number | undefined {
  const raw = url.searchParams.get(name);
  if (raw === null) return fallback;
  if (!/^\d{1,15}$/.test(raw)) return undefined;
  const n = Number(raw);
  return name === 'limit' && n < 1 ? undefined : n;
}
