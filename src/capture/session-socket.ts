// A model-only listener for exactly one session, on a Unix socket that is bind-mounted into exactly
// one sandbox. It is the sandbox's only way to the capture: it answers the model routes of the four
// dialects and /v1/models for its own session key and nothing else. There is no admin route, no
// /sessions, no /health and no other session behind it, so nothing a policy sends through it can list,
// read, delete or mint sessions, whatever key it guesses; the engine is never addressed by the caller.
// The main proxy's listener stays on host loopback for the lab and its admin key.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { presentedKey } from './auth.js';
import { detectDialect } from './dialects/index.js';
import type { IDisposable } from './events.js';
import { loggableTarget, sendJson } from './http-util.js';
import { handleModelCall, type ModelCallDeps } from './model-call.js';
import type { SessionRegistry } from './session-registry.js';
import type { CaptureSession } from './sessions.js';

/** What the listener needs from the proxy. */
export interface SessionModelHost {
  readonly sessions: Pick<SessionRegistry, 'get' | 'findByKey'>;
  modelCallDeps(findSession: (key: string) => CaptureSession | undefined): ModelCallDeps;
  models(res: ServerResponse): Promise<void>;
}

export interface SessionSocketOptions {
  /** Directory for the socket (default: a fresh 0700 folder under the OS temp dir, removed on close). */
  dir?: string;
  log?: (line: string) => void;
}

// Paths the four dialects post to (docs/capture-protocol.md §6) and the two token-count side routes.
const MODEL_POST_ROUTES: readonly RegExp[] = [
  /^(?:\/v1)?\/chat\/completions$/,
  /^(?:\/v1)?\/responses$/,
  /^\/v1\/messages(?:\/count_tokens)?$/,
  /^\/v1(?:beta|alpha)?\/models\/[^/]+:(?:generateContent|streamGenerateContent|countTokens)$/,
];

/** Whether `method path` is a route a session socket serves (the key is checked separately). */
export function isSessionSocketRoute(method: string, pathname: string): 'model-call' | 'models' | 'root' | undefined {
  const path = pathname.replace(/\/+$/, '') || '/';
  if (path === '/' && (method === 'GET' || method === 'HEAD')) return 'root';
  if (path === '/v1/models' && method === 'GET') return 'models';
  if (method === 'POST' && MODEL_POST_ROUTES.some((r) => r.test(path))) return 'model-call';
  return undefined;
}

export class SessionSocket implements IDisposable {
  private stopping: Promise<void> | undefined;

  private constructor(
    private readonly server: Server,
    readonly sessionId: string,
    /** The socket file; bind-mount its directory (`dir`) into the sandbox. */
    readonly path: string,
    readonly dir: string,
    private readonly ownsDir: boolean,
  ) {}

  /** Listens on `<dir>/model.sock` for `sessionId`'s model calls. */
  static async open(host: SessionModelHost, sessionId: string, options: SessionSocketOptions = {}): Promise<SessionSocket> {
    if (!host.sessions.get(sessionId)) throw new Error(`cannot open a session socket for unknown session ${sessionId}`);
    const ownsDir = options.dir === undefined;
    const dir = options.dir ?? mkdtempSync(join(tmpdir(), `hl-sock-${process.pid}-`));
    const path = join(dir, 'model.sock');
    // sun_path holds 107 bytes; a longer path fails at bind with an unhelpful EINVAL.
    if (Buffer.byteLength(path) > 107)
      throw new Error(`the session socket path ${path} is longer than a Unix socket allows (107 bytes); use a shorter directory`);
    // The session's own key (for a session without one, its id); every other session's key or id is refused.
    const own = (key: string) => {
      const found = host.sessions.findByKey(key);
      return found && found.id === sessionId ? found : undefined;
    };
    const server = createServer((req, res) => {
      route(host, own, req, res).catch((err: unknown) => {
        options.log?.(
          `session socket ${sessionId}: ${req.method} ${loggableTarget(req.url)} failed: ${err instanceof Error ? err.message : String(err)}`,
        );
        if (!res.headersSent) sendJson(res, 500, { error: { message: 'internal error in the capture proxy', type: 'server_error' } });
        else res.destroy();
      });
    });
    server.keepAliveTimeout = 75_000;
    server.headersTimeout = 80_000;
    server.requestTimeout = 0; // engine calls may take many minutes
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(path, () => {
          server.off('error', reject);
          resolve();
        });
      });
    } catch (err) {
      if (ownsDir) rmSync(dir, { recursive: true, force: true });
      throw new Error(`could not listen on the session socket ${path}: ${(err as Error).message}`);
    }
    return new SessionSocket(server, sessionId, path, dir, ownsDir);
  }

  get closed(): boolean {
    return this.stopping !== undefined;
  }

  /**
   * Stops serving (calls in flight are cut) and removes the socket file, keeping the folder: a
   * container that still mounts it sees an empty folder (Docker would otherwise recreate a missing
   * bind source, as root, on the next copy into the container). Idempotent.
   */
  stop(): Promise<void> {
    this.stopping ??= new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    }).finally(() => rmSync(this.path, { force: true }));
    return this.stopping;
  }

  /** stop(), then removes the folder it created; call once nothing mounts it any more. Idempotent. */
  async close(): Promise<void> {
    await this.stop();
    if (this.ownsDir) rmSync(this.dir, { recursive: true, force: true });
  }

  dispose(): void {
    void this.close();
  }
}

/** Removes default socket folders of lab processes that are gone (a `kill -9` skips close()). */
export function removeStaleSessionSocketDirs(alive: (pid: number) => boolean, root = tmpdir()): string[] {
  const removed: string[] = [];
  for (const name of readdirSync(root)) {
    const m = /^hl-sock-(\d+)-/.exec(name);
    if (!m || alive(Number(m[1]))) continue;
    rmSync(join(root, name), { recursive: true, force: true });
    removed.push(name);
  }
  return removed;
}

async function route(
  host: SessionModelHost,
  own: (key: string) => CaptureSession | undefined,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://session.invalid');
  const method = req.method ?? 'GET';
  const kind = isSessionSocketRoute(method, url.pathname);
  if (kind === 'root') return sendJson(res, 200, { status: 'ok' });
  if (!kind)
    return sendJson(res, 404, {
      error: {
        message: `no route ${method} ${url.pathname}: this endpoint serves only model calls for its own session`,
        type: 'invalid_request_error',
      },
    });
  const key = presentedKey(req, url);
  if (key === undefined || !own(key)) {
    const why =
      key === undefined
        ? 'no API key; this endpoint needs its session key'
        : 'unknown API key; this endpoint accepts only its own session key';
    return sendJson(res, 401, detectDialect(url.pathname, req.headers, undefined).errorBody(401, why));
  }
  if (kind === 'models') return host.models(res);
  return handleModelCall(req, res, url, host.modelCallDeps(own));
}
