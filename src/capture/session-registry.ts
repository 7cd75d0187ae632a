// The session registry: every capture session, its durable store file and its events. The proxy
// (proxy.ts) serves HTTP and owns the engine; model calls (model-call.ts) change a session only
// through the methods here, which write the store before the harness sees an answer. Opened
// read-only over a data dir it gives offline readers (export, report, the stopped extension) the
// same sessions, and so the same rollout(), that the live proxy has.
import { existsSync } from 'node:fs';
import { Emitter } from './events.js';
import type { RolloutDocument } from './rollout.js';
import { CaptureSession, SESSION_ID_PATTERN, mintSessionId, type CreateSessionRequest, type RolloutReadOptions } from './sessions.js';
import { CaptureStore, loadSessionFile, loadStoredSessions, sessionFileOf, type LoadedSession } from './store.js';
import type { CallRecord, CaptureLevel, JsonObject, ProxyLogger, SessionInfo } from './types.js';

/** What a new session gets unless its request says otherwise. */
export interface SessionDefaults {
  model: string;
  engineUrl: string;
  /** Per-session model-call budget (0 = unlimited). */
  maxModelCalls: number;
}

/** The engine's grade as the proxy knows it; `graded` stays false until a probe reached the engine (or the level was fixed). */
export type EngineLevel = () => { level: CaptureLevel; graded: boolean };

export interface SessionRegistryOptions {
  defaults: SessionDefaults;
  /** Where sessions are stored durably; without it they live in memory only. */
  dataDir?: string;
  engineLevel: EngineLevel;
  logger?: ProxyLogger;
}

export class SessionExistsError extends Error {
  constructor(id: string) {
    super(`session ${id} already exists`);
  }
}

export class ReadOnlyRegistryError extends Error {
  constructor(action: string, dataDir: string) {
    super(`cannot ${action}: the sessions of ${dataDir} were opened read-only`);
  }
}

const silentLogger: ProxyLogger = { info() {}, warn() {}, error() {} };

export class SessionRegistry {
  private readonly sessions = new Map<string, CaptureSession>();
  /** Read-only: every session file has been read (after `list`). */
  private allRead = false;
  private readonly recordEmitter = new Emitter<CallRecord>();
  private readonly changeEmitter = new Emitter<void>();
  /** Fires after a call is durably recorded (answered or failed). */
  readonly onDidRecordCall = this.recordEmitter.event;
  /** Fires when a session is created or deleted. */
  readonly onDidChange = this.changeEmitter.event;

  private constructor(
    private readonly defaults: SessionDefaults | undefined,
    private readonly store: CaptureStore | undefined,
    /** Set when opened read-only: sessions are read from here on first use. */
    private readonly readOnlyDir: string | undefined,
    private readonly engineLevel: EngineLevel,
    private readonly log: ProxyLogger,
  ) {}

  /** A registry that records; with a data dir it first restores what the store holds. */
  static open(options: SessionRegistryOptions): SessionRegistry {
    const store = options.dataDir ? new CaptureStore(options.dataDir) : undefined;
    const registry = new SessionRegistry(options.defaults, store, undefined, options.engineLevel, options.logger ?? silentLogger);
    if (store) {
      for (const loaded of store.loadAll()) registry.adopt(loaded);
      if (registry.sessions.size) registry.log.info(`restored ${registry.sessions.size} session(s) from ${store.dataDir}`);
    }
    return registry;
  }

  /**
   * The sessions stored under a data dir, for readers that never record: nothing is written, and a
   * session file is read when it is first asked for (all of them for `list`). A session that never
   * fixed its capture level is read at `tokens`, as the store's readers always did.
   */
  static openReadOnly(dataDir: string, logger?: ProxyLogger): SessionRegistry {
    return new SessionRegistry(undefined, undefined, dataDir, () => ({ level: 'tokens', graded: false }), logger ?? silentLogger);
  }

  private adopt(loaded: LoadedSession): CaptureSession {
    const session = CaptureSession.fromStore(loaded);
    this.sessions.set(session.id, session);
    if (loaded.skipped) this.log.warn(`session ${session.id}: skipped ${loaded.skipped} unreadable line(s) in its store file`);
    return session;
  }

  private readAll(): void {
    if (this.readOnlyDir === undefined || this.allRead) return;
    this.allRead = true;
    for (const loaded of loadStoredSessions(this.readOnlyDir)) if (!this.sessions.has(loaded.info.session_id)) this.adopt(loaded);
  }

  private writable(action: string): void {
    if (this.readOnlyDir !== undefined) throw new ReadOnlyRegistryError(action, this.readOnlyDir);
  }

  /** The store file a session lives in (undefined for an in-memory registry). */
  fileOf(id: string): string | undefined {
    const dataDir = this.readOnlyDir ?? this.store?.dataDir;
    return dataDir === undefined ? undefined : sessionFileOf(dataDir, id);
  }

  get size(): number {
    this.readAll();
    return this.sessions.size;
  }

  create(request: CreateSessionRequest = {}): SessionInfo {
    this.writable('create a session');
    const defaults = this.defaults!;
    const id = request.session_id ?? mintSessionId();
    if (this.sessions.has(id)) throw new SessionExistsError(id);
    const engine = this.engineLevel();
    const info: SessionInfo = {
      session_id: id,
      created_at: new Date().toISOString(),
      model: request.model ?? defaults.model,
      engine_url: defaults.engineUrl,
      max_model_calls: request.max_model_calls ?? defaults.maxModelCalls,
      metadata: request.metadata ?? {},
      capture_level: engine.graded ? engine.level : undefined,
    };
    this.sessions.set(id, new CaptureSession(info));
    void this.store?.append(id, { type: 'session', ...info }).catch((err: unknown) => this.log.error(`could not store session ${id}: ${String(err)}`));
    this.changeEmitter.fire();
    return info;
  }

  get(id: string): CaptureSession | undefined {
    const known = this.sessions.get(id);
    if (known || this.readOnlyDir === undefined || this.allRead || !SESSION_ID_PATTERN.test(id)) return known;
    const file = sessionFileOf(this.readOnlyDir, id);
    const loaded = existsSync(file) ? loadSessionFile(file) : undefined;
    return loaded ? this.adopt(loaded) : undefined;
  }

  /** Every session's summary (calls, tokens, budget, errors), as `GET /sessions` lists them. */
  list(): JsonObject[] {
    this.readAll();
    return [...this.sessions.values()].map((s) => s.summary());
  }

  calls(id: string): CallRecord[] {
    return this.get(id)?.calls ?? [];
  }

  /** The session's rollout document (see CaptureSession.rollout), or undefined for an unknown session. */
  rollout(id: string, opts: RolloutReadOptions = {}): RolloutDocument | undefined {
    return this.get(id)?.rollout(opts, this.engineLevel().level);
  }

  async delete(id: string): Promise<boolean> {
    this.writable('delete a session');
    const existed = this.sessions.delete(id);
    await this.store?.delete(id);
    if (existed) this.changeEmitter.fire();
    return existed;
  }

  // ---- what a model call changes ----

  /** The level the session captures at: fixed at its first forwarded call, stored with the session. */
  async captureLevel(session: CaptureSession, engineLevel: CaptureLevel): Promise<CaptureLevel> {
    if (session.fixCaptureLevel(engineLevel)) await this.store?.append(session.id, { type: 'session', ...session.info });
    return session.info.capture_level!;
  }

  /** Counts a call answered with the budget stop, durably (stop answers themselves are not recorded). */
  async recordBudgetStop(session: CaptureSession): Promise<void> {
    session.countBudgetStop();
    await this.store?.append(session.id, { type: 'budget_stop', at: new Date().toISOString() });
  }

  /** Durably records a call (answered or failed); resolves once it is on disk. */
  async record(session: CaptureSession, record: CallRecord): Promise<void> {
    if (this.store) {
      try {
        await this.store.append(session.id, { type: 'call', ...record });
      } catch (err) {
        // Still answer the harness, but loudly: the call is only in memory now.
        this.log.error(`could not store call ${record.call_id} of session ${session.id}: ${String(err)}`);
      }
    }
    if (this.sessions.get(session.id) === session) session.addCall(record);
    this.recordEmitter.fire(record);
  }

  /** Stops events and waits for queued appends to land. */
  async close(): Promise<void> {
    this.recordEmitter.dispose();
    this.changeEmitter.dispose();
    await this.store?.close();
  }
}
