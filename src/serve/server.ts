// `harness-lab serve`'s HTTP + WebSocket server, speaking OpenEnv's Harbor protocol
// (docs/trainer-contracts.md §3) so TRL's HarborSessionFactory talks to it unchanged: the task API under /harbor_env,
// `/ws` sessions whose `step` frame calls the one tool `run_rollout`, and the JSON-RPC session
// methods on POST /mcp. Capacity is checked when a session opens (nothing queues), as OpenEnv does.
// /health answers from memory, never waiting on a rollout. The `ws` library answers the client's
// pings by itself, so a trainer sees a slow rollout as alive and a dead server as a dropped socket.
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import { adminKeyFromHeaders, secretsEqual } from '../capture/auth.js';
import { RequestGuard } from '../capture/request-guard.js';
import type { z } from 'zod';
import { BodyTooLargeError, readBody as readBoundedBody, sendJson } from '../capture/http-util.js';
import { EventLoopLag, METRICS_CONTENT_TYPE, MetricsText } from '../capture/metrics.js';
import { taskRef, type ServedSplit } from './datasets.js';
import {
  CallToolAction,
  JsonRpcRequest,
  RUN_ROLLOUT_TOOL,
  RunRolloutArgs,
  SplitBody,
  TaskBody,
  TaskRangeBody,
  WsFrame,
  errorFrame,
  observationData,
  zodMessage,
  type ErrorCode,
} from './protocol.js';
import { EnvironmentFactoryError, type RolloutService } from './rollouts.js';

const MAX_BODY_BYTES = 16 * 2 ** 20;

export interface ServeServerOptions {
  host: string;
  port: number;
  /** Names trainers reach the server by besides loopback and the bound address (request-guard.ts). */
  allowedHosts?: readonly string[];
  splits: ReadonlyMap<string, ServedSplit>;
  rollouts: RolloutService;
  maxConcurrent: number;
  /** When set, every route but /health wants it (Authorization: Bearer or Basic with it as the password, X-Admin-Key). */
  adminKey?: string;
  /** An /mcp-created session with no socket and no rollout is closed after this long (default 600 s, OpenEnv's). */
  sessionIdleMs?: number;
  log(line: string): void;
}

interface Session {
  id: string;
  /** A WebSocket attached to it (at most one). */
  socket: WebSocket | null;
  /** Created over /mcp (lives until openenv/session/close) rather than by a bare /ws connect. */
  explicit: boolean;
  busy: AbortController | null;
  steps: number;
  /** Last time anything happened on it (an explicit session nobody uses is reclaimed after sessionIdleMs). */
  lastActive: number;
}

interface StepError {
  code: ErrorCode;
  message: string;
  /** Beside code and message in the error frame (FACTORY_ERROR's factory_name). */
  extra?: Record<string, unknown>;
}

function factoryError(err: EnvironmentFactoryError): StepError {
  return { code: 'FACTORY_ERROR', message: err.message, extra: { factory_name: err.factoryName } };
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const TOOL_DESCRIPTION = {
  name: RUN_ROLLOUT_TOOL,
  description: 'Run one Harbor task in a sandbox with a real harness against the given engine; returns a HarborRolloutResult JSON.',
  inputSchema: {
    type: 'object',
    properties: {
      split: { type: 'string' },
      task_index: { type: 'integer' },
      harness: { type: 'string' },
      llm_url: { type: 'string' },
      model: { type: 'string' },
      sampling: { type: 'object' },
    },
    required: ['split', 'task_index', 'harness'],
  },
};

export class ServeServer {
  private readonly sessions = new Map<string, Session>();
  /** The event-loop delay reported on `/metrics`. */
  private readonly lag = new EventLoopLag();
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: 64 * 2 ** 20 });
  private readonly sweep: NodeJS.Timeout;
  private readonly guard: RequestGuard;

  private constructor(
    private readonly opts: ServeServerOptions,
    private readonly http: Server,
  ) {
    this.guard = new RequestGuard({ listenHost: opts.host, allowedHosts: opts.allowedHosts });
    const idleMs = opts.sessionIdleMs ?? 600_000;
    // A trainer that created a session and went away must not hold a slot for the server's life.
    this.sweep = setInterval(
      () => {
        const now = Date.now();
        for (const s of [...this.sessions.values()])
          if (s.explicit && !s.socket && !s.busy && now - s.lastActive > idleMs) {
            this.opts.log(`session ${s.id} idle for ${Math.round((now - s.lastActive) / 1000)} s: closed`);
            this.closeSession(s);
          }
      },
      Math.min(30_000, idleMs),
    );
    this.sweep.unref();
  }

  static async start(opts: ServeServerOptions): Promise<ServeServer> {
    const http = createServer();
    const server = new ServeServer(opts, http);
    http.on('request', (req, res) => void server.onRequest(req, res));
    http.on('upgrade', (req, socket, head) => server.onUpgrade(req, socket as import('node:net').Socket, head));
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen(opts.port, opts.host, () => resolve());
    });
    return server;
  }

  get url(): string {
    const a = this.http.address() as AddressInfo;
    const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
    return `http://${host}:${a.port}`;
  }

  get activeSessions(): number {
    return this.sessions.size;
  }

  private authorized(req: IncomingMessage): boolean {
    const key = this.opts.adminKey;
    if (!key) return true;
    return adminKeyFromHeaders(req).some((given) => secretsEqual(given, key));
  }

  private openSession(explicit: boolean): Session | { capacity: true } {
    if (this.sessions.size >= this.opts.maxConcurrent) return { capacity: true };
    const s: Session = { id: randomBytes(12).toString('hex'), socket: null, explicit, busy: null, steps: 0, lastActive: Date.now() };
    this.sessions.set(s.id, s);
    return s;
  }

  /**
   * Where OpenEnv's server runs its environment factory: a session being created. Here that is the
   * backend's preflight (can it make sandboxes at all); on failure the session is gone again and the
   * caller answers FACTORY_ERROR. A session's own sandbox is made per rollout, in its step.
   */
  private async createEnvironment(s: Session): Promise<StepError | null> {
    try {
      await this.opts.rollouts.preflight();
      return null;
    } catch (err) {
      this.sessions.delete(s.id);
      if (err instanceof EnvironmentFactoryError) {
        this.opts.log(`session ${s.id}: FACTORY_ERROR: ${err.message}`);
        return factoryError(err);
      }
      throw err;
    }
  }

  private closeSession(s: Session): void {
    s.busy?.abort();
    this.sessions.delete(s.id);
    if (s.socket && s.socket.readyState === s.socket.OPEN) s.socket.close(1000, 'session closed');
  }

  private capacityData() {
    return { active_sessions: this.sessions.size, max_sessions: this.opts.maxConcurrent };
  }

  // ---- HTTP ---------------------------------------------------------------------------------

  private async onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    try {
      const refusal = this.guard.check(req);
      if (refusal) {
        this.opts.log(`refused ${req.method} ${path}: ${refusal.message}`);
        return json(res, refusal.status, { detail: refusal.message });
      }
      if (req.method === 'GET' && path === '/health')
        return json(res, 200, {
          status: 'healthy',
          ...this.capacityData(),
          running_rollouts: this.opts.rollouts.runningCount,
          queued_rollouts: this.opts.rollouts.queuedCount,
        });
      if (!this.authorized(req))
        return json(res, 401, {
          detail:
            'this rollout server wants its admin key: Authorization: Bearer KEY, or the key in the server URL as http://trainer:KEY@host:port (what an unchanged TRL client sends)',
        });
      if (req.method === 'GET' && path === '/metrics') {
        const out = new MetricsText();
        out.metric('harness_lab_serve_sessions', 'gauge', 'OpenEnv sessions open, and the cap (--max-concurrent)', [
          [{ state: 'active' }, this.sessions.size],
          [{ state: 'max' }, this.opts.maxConcurrent],
        ]);
        this.opts.rollouts.writeMetrics(out);
        this.lag.write(out, 'harness_lab_serve');
        res.writeHead(200, { 'content-type': METRICS_CONTENT_TYPE, 'cache-control': 'no-store' });
        return void res.end(out.toString());
      }
      if (req.method === 'GET' && path === '/harbor_env/splits')
        return json(
          res,
          200,
          [...this.opts.splits.values()].map((s) => ({ name: s.name, num_tasks: s.tasks.length, ...(s.error ? { error: s.error } : {}) })),
        );
      if (req.method === 'POST' && path === '/harbor_env/num_tasks') {
        const body = await parseBody(req, SplitBody);
        return json(res, 200, { num_tasks: this.split(body.split).tasks.length });
      }
      if (req.method === 'POST' && path === '/harbor_env/task_range') {
        const body = await parseBody(req, TaskRangeBody);
        const split = this.split(body.split);
        const stop = Math.min(body.stop ?? split.tasks.length, split.tasks.length);
        const tasks = [];
        for (let i = body.start; i < stop; i++) tasks.push(taskRef(split, i));
        return json(res, 200, { tasks });
      }
      if (req.method === 'POST' && path === '/harbor_env/task') {
        const body = await parseBody(req, TaskBody);
        const split = this.split(body.split);
        if (body.index >= split.tasks.length)
          throw new HttpError(404, `split '${split.name}' has ${split.tasks.length} task(s); index ${body.index} is out of range`);
        return json(res, 200, { task: taskRef(split, body.index) });
      }
      if (req.method === 'POST' && path === '/mcp') return json(res, 200, await this.onJsonRpc(req));
      throw new HttpError(404, `no route ${req.method} ${path}`);
    } catch (err) {
      if (err instanceof HttpError) return json(res, err.status, { detail: err.message });
      this.opts.log(`${req.method} ${path}: ${String(err)}`);
      return json(res, 500, { detail: err instanceof Error ? err.message : String(err) });
    }
  }

  private split(name: string): ServedSplit {
    const s = this.opts.splits.get(name);
    if (!s) throw new HttpError(404, `unknown split '${name}'; served splits: ${[...this.opts.splits.keys()].join(', ')}`);
    return s;
  }

  private async onJsonRpc(req: IncomingMessage): Promise<unknown> {
    let raw: unknown;
    try {
      raw = JSON.parse(await readBody(req));
    } catch (err) {
      if (err instanceof HttpError) throw err;
      return rpcError(null, -32700, 'Parse error: the body is not JSON', { code: 'INVALID_JSON' });
    }
    const parsed = JsonRpcRequest.safeParse(raw);
    if (!parsed.success) return rpcError(null, -32600, `Invalid request: ${zodMessage(parsed.error)}`, { code: 'VALIDATION_ERROR' });
    const { id = null, method, params = {} } = parsed.data;
    const sessionId =
      typeof params.session_id === 'string'
        ? params.session_id
        : typeof req.headers['x-openenv-session-id'] === 'string'
          ? req.headers['x-openenv-session-id']
          : undefined;
    const session = sessionId ? this.sessions.get(sessionId) : undefined;
    if (session) session.lastActive = Date.now();
    if (sessionId && !session && method !== 'openenv/session/create')
      return rpcError(id, -32000, `no session ${sessionId} (closed, or from a server that restarted)`, { code: 'SESSION_ERROR' });
    switch (method) {
      case 'openenv/session/create': {
        const s = this.openSession(true);
        if ('capacity' in s)
          return rpcError(id, -32000, `capacity reached: ${this.sessions.size} of ${this.opts.maxConcurrent} sessions in use`, {
            code: 'CAPACITY_REACHED',
            ...this.capacityData(),
          });
        const failed = await this.createEnvironment(s);
        if (failed) return rpcError(id, -32000, failed.message, { code: failed.code, ...failed.extra });
        return { jsonrpc: '2.0', id, result: { session_id: s.id } };
      }
      case 'openenv/session/close': {
        if (!session) return rpcError(id, -32602, 'openenv/session/close needs params.session_id', { code: 'VALIDATION_ERROR' });
        this.closeSession(session);
        return { jsonrpc: '2.0', id, result: { session_id: session.id, closed: true } };
      }
      case 'openenv/session/reset':
        return { jsonrpc: '2.0', id, result: { observation: { metadata: {} }, reward: null, done: false } };
      case 'openenv/session/state':
        return { jsonrpc: '2.0', id, result: { episode_id: session?.id ?? null, step_count: session?.steps ?? 0 } };
      case 'tools/list':
        return { jsonrpc: '2.0', id, result: { tools: [TOOL_DESCRIPTION] } };
      case 'openenv/session/step':
      case 'tools/call': {
        const action =
          method === 'tools/call' ? { type: 'call_tool', tool_name: params.name, arguments: params.arguments ?? {} } : params.action;
        // A stateless tools/call (no session) holds a capacity slot only while it runs.
        let s = session;
        let temporary = false;
        if (!s) {
          const opened = this.openSession(false);
          if ('capacity' in opened)
            return rpcError(id, -32000, `capacity reached: ${this.sessions.size} of ${this.opts.maxConcurrent} sessions in use`, {
              code: 'CAPACITY_REACHED',
              ...this.capacityData(),
            });
          s = opened;
          temporary = true;
          const failed = await this.createEnvironment(s);
          if (failed) return rpcError(id, -32000, failed.message, { code: failed.code, ...failed.extra });
        }
        try {
          const out = await this.step(s, action);
          if ('error' in out) return rpcError(id, -32000, out.error.message, { code: out.error.code, ...out.error.extra });
          if (method === 'tools/call')
            return { jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: out.text }], isError: false } };
          return { jsonrpc: '2.0', id, result: observationData(RUN_ROLLOUT_TOOL, out.text, null) };
        } finally {
          if (temporary) this.sessions.delete(s.id);
        }
      }
      default:
        return rpcError(id, -32601, `Method not found: ${method}`, { code: 'UNKNOWN_TYPE' });
    }
  }

  // ---- a step: the one tool ------------------------------------------------------------------

  /** Runs a step's action on a session; a rollout's own failure is a result (ok false), never an error. */
  private async step(s: Session, action: unknown): Promise<{ text: string } | { error: StepError }> {
    const a = CallToolAction.safeParse(action);
    if (!a.success)
      return {
        error: {
          code: 'VALIDATION_ERROR',
          message: `step data must be {"type":"call_tool","tool_name":"${RUN_ROLLOUT_TOOL}","arguments":{...}}: ${zodMessage(a.error)}`,
        },
      };
    if (a.data.tool_name !== RUN_ROLLOUT_TOOL)
      return {
        error: { code: 'VALIDATION_ERROR', message: `unknown tool '${a.data.tool_name}'; this server has one tool, ${RUN_ROLLOUT_TOOL}` },
      };
    const args = RunRolloutArgs.safeParse(a.data.arguments);
    if (!args.success) return { error: { code: 'VALIDATION_ERROR', message: `${RUN_ROLLOUT_TOOL} arguments: ${zodMessage(args.error)}` } };
    if (s.busy)
      return {
        error: { code: 'SESSION_ERROR', message: 'this session is already running a rollout; open another session for another rollout' },
      };
    const ctrl = new AbortController();
    s.busy = ctrl;
    s.steps++;
    try {
      const result = await this.opts.rollouts.run(args.data, ctrl.signal);
      return { text: JSON.stringify(result) };
    } catch (err) {
      if (err instanceof EnvironmentFactoryError) return { error: factoryError(err) };
      return { error: { code: 'EXECUTION_ERROR', message: err instanceof Error ? err.message : String(err) } };
    } finally {
      s.busy = null;
      s.lastActive = Date.now();
    }
  }

  // ---- WebSocket --------------------------------------------------------------------------------

  private onUpgrade(req: IncomingMessage, socket: import('node:net').Socket, head: Buffer): void {
    const url = new URL(req.url ?? '/', 'http://x');
    // A browser may open a WebSocket to any origin: the upgrade is where a web page is stopped.
    const refusal = this.guard.checkOrigin(req);
    if (refusal) {
      this.opts.log(`refused upgrade ${url.pathname}: ${refusal.message}`);
      const body = JSON.stringify({ detail: refusal.message });
      socket.end(
        `HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
      return;
    }
    if (url.pathname !== '/ws') {
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n');
      return;
    }
    if (!this.authorized(req)) {
      socket.end('HTTP/1.1 401 Unauthorized\r\nConnection: close\r\n\r\n');
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.onSocket(ws, url.searchParams.get('session_id')));
  }

  private onSocket(ws: WebSocket, sessionId: string | null): void {
    const send = (frame: unknown) => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(frame));
    };
    let session: Session;
    let ready: Promise<boolean> = Promise.resolve(true);
    if (sessionId) {
      const s = this.sessions.get(sessionId);
      if (!s) {
        send(
          errorFrame(
            'SESSION_ERROR',
            `no session ${sessionId} (closed, or from a server that restarted); create one with openenv/session/create`,
          ),
        );
        ws.close(1008, 'unknown session');
        return;
      }
      if (s.socket) {
        send(errorFrame('SESSION_ERROR', `session ${sessionId} already has a WebSocket attached`));
        ws.close(1008, 'session in use');
        return;
      }
      session = s;
    } else {
      const opened = this.openSession(false);
      if ('capacity' in opened) {
        send(
          errorFrame(
            'CAPACITY_REACHED',
            `capacity reached: ${this.sessions.size} of ${this.opts.maxConcurrent} sessions in use`,
            this.capacityData(),
          ),
        );
        ws.close(1013, 'capacity reached');
        return;
      }
      session = opened;
      // The environment is made at connect, as OpenEnv does: a failure is one FACTORY_ERROR frame,
      // then the socket closes. Frames that arrive meanwhile wait for it (below), in order.
      ready = this.createEnvironment(opened).then(
        (failed) => {
          if (!failed) return true;
          send(errorFrame(failed.code, failed.message, failed.extra));
          ws.close(1011, 'environment factory failed');
          return false;
        },
        (err: unknown) => {
          send(errorFrame('SESSION_ERROR', err instanceof Error ? err.message : String(err)));
          ws.close(1011, 'session error');
          return false;
        },
      );
    }
    session.socket = ws;
    ws.on('close', () => {
      session.socket = null;
      session.lastActive = Date.now();
      // A socket that goes away takes its rollout with it (nobody is left to read the result).
      session.busy?.abort();
      if (!session.explicit) this.sessions.delete(session.id);
    });
    ws.on('error', (err) => this.opts.log(`ws ${session.id}: ${err.message}`));
    ws.on('message', (data, isBinary) => {
      const frame = isBinary ? data : data.toString();
      void ready.then((ok) => (ok ? this.onFrame(session, frame, send, ws) : undefined));
    });
  }

  private async onFrame(session: Session, data: unknown, send: (frame: unknown) => void, ws: WebSocket): Promise<void> {
    let raw: unknown;
    try {
      raw = JSON.parse(String(data));
    } catch {
      return send(errorFrame('INVALID_JSON', 'the frame is not JSON'));
    }
    const frame = WsFrame.safeParse(raw);
    if (!frame.success) return send(errorFrame('VALIDATION_ERROR', `a frame is {"type": ..., "data": {...}}: ${zodMessage(frame.error)}`));
    switch (frame.data.type) {
      case 'reset':
        return send({ type: 'observation', data: { observation: { metadata: {} }, reward: null, done: false } });
      case 'state':
        return send({ type: 'state', data: { episode_id: session.id, step_count: session.steps } });
      case 'close':
        if (session.explicit) session.socket = null;
        else this.sessions.delete(session.id);
        ws.close(1000, 'closed by client');
        return;
      case 'step': {
        const d = frame.data.data as { type?: unknown } | undefined;
        if (d && d.type === 'list_tools')
          return send({ type: 'observation', data: { observation: { tools: [TOOL_DESCRIPTION] }, reward: null, done: false } });
        const out = await this.step(session, d);
        if ('error' in out) return send(errorFrame(out.error.code, out.error.message, out.error.extra));
        return send({ type: 'observation', data: observationData(RUN_ROLLOUT_TOOL, out.text, null) });
      }
      default:
        return send(errorFrame('UNKNOWN_TYPE', `unknown frame type '${frame.data.type}'; this server takes reset, step, state and close`));
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweep);
    for (const s of [...this.sessions.values()]) this.closeSession(s);
    for (const ws of this.wss.clients) ws.terminate();
    this.wss.close();
    this.lag.dispose();
    await new Promise<void>((resolve) => this.http.close(() => resolve()));
  }
}

/** The JSON answers of this server (the proxy's sendJson: nothing is written to a response already sent). */
const json = sendJson;

function rpcError(id: unknown, code: number, message: string, data: Record<string, unknown>) {
  return { jsonrpc: '2.0', id, error: { code, message, data } };
}

/** The whole body as text, through the proxy's bounded reader; past MAX_BODY_BYTES it is a 413. */
async function readBody(req: IncomingMessage): Promise<string> {
  try {
    return (await readBoundedBody(req, MAX_BODY_BYTES)).toString('utf8');
  } catch (err) {
    if (err instanceof BodyTooLargeError) throw new HttpError(413, `body over ${MAX_BODY_BYTES} bytes`);
    throw err;
  }
}

async function parseBody<T>(req: IncomingMessage, schema: z.ZodType<T>): Promise<T> {
  let raw: unknown;
  try {
    raw = JSON.parse(await readBody(req));
  } catch (err) {
    if (err instanceof HttpError) throw err;
    throw new HttpError(422, 'the body is not JSON');
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new HttpError(422, zodMessage(parsed.error));
  return parsed.data;
}
