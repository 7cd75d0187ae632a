// The session registry: every capture session, its durable store file and its events. The proxy
// (proxy.ts) serves HTTP and owns the engine; model calls (model-call.ts) change a session only
// through the methods here, which write the store before the harness sees an answer. Opened
// read-only over a data dir it gives offline readers (export, report, the stopped extension) the
// same sessions, and so the same rollout(), that the live proxy has.
//
// With a store, the store is the source of truth: a session's calls and graph are loaded when read
// and held in a small least-recently-used set (by count and estimated bytes), so memory follows the
// sessions being read, not everything ever recorded. Opening reads each file's header and tally
// line (store-read.ts), never its calls.
//
// Past a count of known sessions (4,096 by default), idle ones go *dormant*: the registry forgets
// them and their file is all that remembers (a keyed one also gets a key index entry, key-index.ts).
// A call, a read or a listing finds a dormant session through its file again. So memory follows the
// active sessions, not every session a days-long training run ever opened (each kept about 1.4 KB
// of counters, info and closures: 88 MiB after the soak bench's 63,000 sessions).
import { existsSync } from 'node:fs';
import { Emitter } from './events.js';
import { readKeyIndex, removeKeyIndex, writeKeyIndex } from './key-index.js';
import type { RolloutDocument } from './rollout.js';
import {
  CaptureSession,
  SESSION_ID_PATTERN,
  mintSessionId,
  mintSessionKey,
  sessionKeyHash,
  type CreateSessionRequest,
  type RolloutReadOptions,
} from './sessions.js';
import {
  CaptureStore,
  StoreWriteError,
  emptyTally,
  loadSessionFile,
  readSessionIndex,
  readStoredIndex,
  sessionFileOf,
  type SessionIndexEntry,
} from './store.js';
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
  /** How many stored sessions keep their calls in memory at once, and roughly how many bytes. */
  resident?: ResidentLimits;
  /** When idle sessions go dormant (forgotten in memory, found again through their file). */
  dormancy?: DormancyLimits;
}

export interface DormancyLimits {
  /** Sessions held in memory before idle ones go dormant. */
  known?: number;
  /** How long a session must be idle (no call) before it may go dormant. */
  idleMs?: number;
}

const DEFAULT_KNOWN_SESSIONS = 4096;
const DEFAULT_DORMANT_AFTER_MS = 60_000;
/** How often creations trigger a dormancy sweep, and how often the timer does (for a registry that stopped creating). */
const SWEEP_EVERY_CREATES = 64;
const SWEEP_INTERVAL_MS = 30_000;

export interface ResidentLimits {
  sessions?: number;
  bytes?: number;
}

const DEFAULT_RESIDENT_SESSIONS = 64;
const DEFAULT_RESIDENT_BYTES = 512 * 1024 * 1024;

/** A model call going to the engine (`started`) or over, answered or failed (`ended`, after its record). */
export interface CallActivity {
  session_id: string;
  index: number;
  started_at: string;
  state: 'started' | 'ended';
}

export class SessionExistsError extends Error {
  constructor(id: string) {
    super(`session ${id} already exists`);
  }
}

export class SessionKeyInUseError extends Error {
  constructor() {
    super('that api_key is already the key of another session');
  }
}

export class ReadOnlyRegistryError extends Error {
  constructor(action: string, dataDir: string) {
    super(`cannot ${action}: the sessions of ${dataDir} were opened read-only`);
  }
}

/** A new session as its creator sees it: `api_key` (its secret key) only for a keyed session, and only here. */
export type CreatedSession = SessionInfo & { api_key?: string };

const silentLogger: ProxyLogger = { info() {}, warn() {}, error() {} };

export class SessionRegistry {
  private readonly sessions = new Map<string, CaptureSession>();
  /** Stored sessions whose calls are in memory, least recently used first. */
  private readonly residents = new Map<string, CaptureSession>();
  private readonly maxResident: number;
  private readonly maxResidentBytes: number;
  /** Keyed sessions by the SHA-256 of their key: the model routes find them here, never by id. */
  private readonly byKeyHash = new Map<string, CaptureSession>();
  /** Read-only: every session file has been read (after `list`). */
  private allRead = false;
  /** Sessions stored but not held (dormant): found again through their file. */
  private dormant = 0;
  private readonly maxKnown: number;
  private readonly dormantAfterMs: number;
  private createdSinceSweep = 0;
  private sweepTimer: NodeJS.Timeout | undefined;
  private readonly recordEmitter = new Emitter<CallRecord>();
  private readonly changeEmitter = new Emitter<void>();
  /** Fires after a call is durably recorded (answered or failed). */
  readonly onDidRecordCall = this.recordEmitter.event;
  /** Fires when a session is created or deleted. */
  readonly onDidChange = this.changeEmitter.event;
  private readonly activityEmitter = new Emitter<CallActivity>();
  /** Fires when a call starts and ends, so live views can show the calls the engine is still working on. */
  readonly onDidChangeCallActivity = this.activityEmitter.event;

  private constructor(
    private readonly defaults: SessionDefaults | undefined,
    private readonly store: CaptureStore | undefined,
    /** Set when opened read-only: sessions are read from here on first use. */
    private readonly readOnlyDir: string | undefined,
    private readonly engineLevel: EngineLevel,
    private readonly log: ProxyLogger,
    limits: ResidentLimits = {},
    dormancy: DormancyLimits = {},
  ) {
    this.maxResident = Math.max(1, limits.sessions ?? DEFAULT_RESIDENT_SESSIONS);
    this.maxResidentBytes = limits.bytes ?? DEFAULT_RESIDENT_BYTES;
    this.maxKnown = Math.max(1, dormancy.known ?? DEFAULT_KNOWN_SESSIONS);
    this.dormantAfterMs = Math.max(0, dormancy.idleMs ?? DEFAULT_DORMANT_AFTER_MS);
  }

  /** A registry that records; with a data dir it first restores what the store holds. */
  static open(options: SessionRegistryOptions): SessionRegistry {
    const store = options.dataDir
      ? new CaptureStore(options.dataDir, (message) => (options.logger ?? silentLogger).warn(message))
      : undefined;
    const registry = new SessionRegistry(
      options.defaults,
      store,
      undefined,
      options.engineLevel,
      options.logger ?? silentLogger,
      options.resident,
      options.dormancy,
    );
    if (store) {
      for (const entry of store.readIndex((message) => registry.log.warn(message))) registry.adopt(entry).markRestored();
      if (registry.sessions.size) registry.log.info(`restored ${registry.sessions.size} session(s) from ${store.dataDir}`);
      registry.sweepDormant();
      registry.sweepTimer = setInterval(() => registry.sweepDormant(), SWEEP_INTERVAL_MS).unref();
    }
    return registry;
  }

  /**
   * The sessions stored under a data dir, for readers that never record: nothing is written, and a
   * session file is read when it is first asked for (all of them for `list`). A session that never
   * fixed its capture level is read at `tokens`, as the store's readers always did.
   */
  static openReadOnly(dataDir: string, logger?: ProxyLogger, resident?: ResidentLimits): SessionRegistry {
    return new SessionRegistry(undefined, undefined, dataDir, () => ({ level: 'tokens', graded: false }), logger ?? silentLogger, resident);
  }

  private adopt(entry: SessionIndexEntry): CaptureSession {
    const session = CaptureSession.stored(entry.info, entry.tally, this.loaderOf(entry.file));
    this.sessions.set(session.id, session);
    if (session.info.key_sha256) this.byKeyHash.set(session.info.key_sha256, session);
    return session;
  }

  /** Reads a session's calls from its file and makes room for them among the resident sessions. */
  private loaderOf(file: string): (session: CaptureSession) => CallRecord[] {
    return (session) => {
      const warn = (message: string) => this.log.warn(message);
      let loaded;
      try {
        loaded = loadSessionFile(file, warn);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        loaded = undefined; // its header is still being written
      }
      if (loaded?.skipped)
        warn(
          `${file}: skipped ${loaded.skipped} unreadable line(s) (line ${loaded.skippedLines.join(', ')}), a torn write from a crash or a full disk`,
        );
      this.residents.delete(session.id);
      this.residents.set(session.id, session);
      queueMicrotask(() => this.evict());
      return loaded?.calls ?? [];
    };
  }

  /** Unloads the least recently used sessions beyond the limits (the newest always stays). */
  private evict(): void {
    let bytes = 0;
    for (const s of this.residents.values()) bytes += s.residentBytesEstimate;
    for (const [id, s] of this.residents) {
      if (this.residents.size <= 1 || (this.residents.size <= this.maxResident && bytes <= this.maxResidentBytes)) break;
      bytes -= s.residentBytesEstimate;
      s.unload();
      this.residents.delete(id);
    }
  }

  /**
   * Forgets idle sessions beyond the known limit, oldest first; their files (and, for keyed ones, a
   * key index entry) find them again. Public for tests; the registry runs it on its own.
   */
  sweepDormant(): number {
    const store = this.store;
    if (!store || this.sessions.size <= this.maxKnown) return 0;
    const now = Date.now();
    let forgotten = 0;
    for (const [id, s] of this.sessions) {
      if (this.sessions.size <= this.maxKnown) break;
      if (!s.canGoDormant(this.dormantAfterMs, now)) continue;
      if (s.info.key_sha256) {
        try {
          writeKeyIndex(store.dataDir, s.info.key_sha256, id);
        } catch (err) {
          this.log.warn(
            `session ${id} stays in memory: its key index entry could not be written (${err instanceof Error ? err.message : String(err)})`,
          );
          continue;
        }
        this.byKeyHash.delete(s.info.key_sha256);
      }
      this.sessions.delete(id);
      this.residents.delete(id);
      this.dormant++;
      forgotten++;
    }
    return forgotten;
  }

  /** Sessions held in memory (the rest of `size` is dormant). */
  get knownCount(): number {
    return this.sessions.size;
  }

  /** A dormant session read back from its file (undefined when there is none). */
  private wake(id: string): CaptureSession | undefined {
    if (!this.store || this.dormant === 0 || !SESSION_ID_PATTERN.test(id)) return undefined;
    const entry = readSessionIndex(this.store.fileOf(id), (message) => this.log.warn(message));
    if (!entry || entry.info.session_id !== id) return undefined;
    this.dormant--;
    return this.adopt(entry);
  }

  /** How many stored sessions hold their calls in memory now. */
  get residentCount(): number {
    return this.residents.size;
  }

  private readAll(): void {
    if (this.readOnlyDir === undefined || this.allRead) return;
    this.allRead = true;
    for (const entry of readStoredIndex(
      this.readOnlyDir,
      (message) => this.log.warn(message),
      (id) => this.sessions.has(id),
    ))
      if (!this.sessions.has(entry.info.session_id)) this.adopt(entry);
  }

  private writable(action: string): void {
    if (this.readOnlyDir !== undefined) throw new ReadOnlyRegistryError(action, this.readOnlyDir);
  }

  /** The store file a session lives in (undefined for an in-memory registry); throws for an id outside the id pattern. */
  fileOf(id: string): string | undefined {
    const dataDir = this.readOnlyDir ?? this.store?.dataDir;
    return dataDir === undefined ? undefined : sessionFileOf(dataDir, id);
  }

  get size(): number {
    this.readAll();
    return this.sessions.size + this.dormant;
  }

  /** Creates a session; its header line is written behind (a failure is logged, and its calls will fail to store too). */
  create(request: CreateSessionRequest = {}): CreatedSession {
    const { info, written } = this.add(request);
    void written.catch(() => {
      // logged by add()
    });
    return info;
  }

  /**
   * Creates a session and resolves once its header line is on disk. If it cannot be written the
   * session is not created (a restart would not know it) and this rejects with the store's error.
   */
  async createStored(request: CreateSessionRequest = {}): Promise<CreatedSession> {
    const { info, written } = this.add(request);
    try {
      await written;
    } catch (err) {
      this.sessions.delete(info.session_id);
      if (info.key_sha256) this.byKeyHash.delete(info.key_sha256);
      this.changeEmitter.fire();
      throw err;
    }
    return info;
  }

  private add(request: CreateSessionRequest): { info: CreatedSession; written: Promise<void> } {
    this.writable('create a session');
    const defaults = this.defaults!;
    const id = request.session_id ?? mintSessionId();
    if (this.sessions.has(id) || (this.dormant > 0 && this.store && existsSync(this.store.fileOf(id)))) throw new SessionExistsError(id);
    const apiKey = request.api_key ?? (request.mint_key ? mintSessionKey() : undefined);
    const keySha256 = apiKey === undefined ? undefined : sessionKeyHash(apiKey);
    if (
      keySha256 !== undefined &&
      (this.byKeyHash.has(keySha256) || (this.dormant > 0 && this.store && readKeyIndex(this.store.dataDir, keySha256) !== undefined))
    )
      throw new SessionKeyInUseError();
    const engine = this.engineLevel();
    const info: SessionInfo = {
      session_id: id,
      created_at: new Date().toISOString(),
      model: request.model ?? defaults.model,
      engine_url: defaults.engineUrl,
      max_model_calls: request.max_model_calls ?? defaults.maxModelCalls,
      metadata: request.metadata ?? {},
      ...(request.sampling ? { sampling: request.sampling } : {}),
      capture_level: engine.graded ? engine.level : undefined,
      ...(keySha256 ? { key_sha256: keySha256 } : {}),
    };
    const session = this.store ? CaptureSession.stored(info, emptyTally(), this.loaderOf(this.store.fileOf(id))) : new CaptureSession(info);
    this.sessions.set(id, session);
    if (keySha256) this.byKeyHash.set(keySha256, session);
    const written = (this.store?.append(id, { type: 'session', ...info }) ?? Promise.resolve()).catch((err: unknown) => {
      this.log.error(`could not store session ${id}: ${err instanceof Error ? err.message : String(err)}`);
      throw err;
    });
    this.changeEmitter.fire();
    if (++this.createdSinceSweep >= SWEEP_EVERY_CREATES) {
      this.createdSinceSweep = 0;
      this.sweepDormant();
    }
    return { info: apiKey === undefined ? info : { ...info, api_key: apiKey }, written };
  }

  get(id: string): CaptureSession | undefined {
    const known = this.sessions.get(id);
    if (known) {
      if (known.isResident && this.residents.delete(id)) this.residents.set(id, known);
      return known;
    }
    if (this.store) return this.wake(id);
    if (this.readOnlyDir === undefined || this.allRead || !SESSION_ID_PATTERN.test(id)) return undefined;
    const entry = readSessionIndex(sessionFileOf(this.readOnlyDir, id), (message) => this.log.warn(message));
    return entry ? this.adopt(entry) : undefined;
  }

  /**
   * The session a model call's key opens: a keyed session by its key only; a session without a key
   * by its id (OpenEnv's convention, where the id is the key). A keyed session's id opens nothing.
   */
  findByKey(key: string): CaptureSession | undefined {
    const hash = sessionKeyHash(key);
    const keyed = this.byKeyHash.get(hash);
    if (keyed) return this.sessions.get(keyed.id) === keyed ? keyed : undefined;
    if (this.dormant > 0 && this.store) {
      const id = readKeyIndex(this.store.dataDir, hash);
      const woken = id === undefined ? undefined : this.get(id);
      if (woken?.info.key_sha256 === hash) return woken;
    }
    const byId = this.get(key);
    return byId && !byId.info.key_sha256 ? byId : undefined;
  }

  /** Every session's summary (calls, tokens, budget, errors), as `GET /sessions` lists them. */
  list(): JsonObject[] {
    this.readAll();
    const held = [...this.sessions.values()].map((s) => s.summary());
    if (this.dormant === 0 || !this.store) return held;
    // Dormant sessions are listed from their files' first and last lines, and stay dormant.
    const dormant = readStoredIndex(
      this.store.dataDir,
      (message) => this.log.warn(message),
      (id) => this.sessions.has(id),
    )
      .filter((e) => !this.sessions.has(e.info.session_id))
      .map((e) => CaptureSession.stored(e.info, e.tally, () => []).summary());
    return [...held, ...dormant];
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
    let keyHash = this.sessions.get(id)?.info.key_sha256;
    if (keyHash) this.byKeyHash.delete(keyHash);
    let existed = this.sessions.delete(id);
    if (!existed && this.store && this.dormant > 0 && SESSION_ID_PATTERN.test(id)) {
      const entry = readSessionIndex(this.store.fileOf(id));
      if (entry) {
        existed = true;
        this.dormant--;
        keyHash = entry.info.key_sha256;
      }
    }
    if (keyHash && this.store) removeKeyIndex(this.store.dataDir, keyHash);
    this.residents.delete(id);
    await this.store?.delete(id);
    if (existed) this.changeEmitter.fire();
    return existed;
  }

  // ---- what a model call changes ----

  /**
   * The level the session captures at: fixed at its first forwarded call, and only once its header
   * line with that level is on disk (a failed write rejects with StoreWriteError and leaves it open).
   */
  async captureLevel(session: CaptureSession, engineLevel: CaptureLevel): Promise<CaptureLevel> {
    if (!session.captureLevelOpen(engineLevel)) return session.info.capture_level!;
    await this.store?.append(session.id, { type: 'session', ...session.info, capture_level: engineLevel });
    session.fixCaptureLevel(engineLevel);
    return engineLevel;
  }

  /** Counts a call answered with the budget stop; not training data, so a failed write is only logged. */
  async recordBudgetStop(session: CaptureSession): Promise<void> {
    session.countBudgetStop();
    await this.store
      ?.append(session.id, { type: 'budget_stop', at: new Date().toISOString() })
      .catch((err: unknown) => this.log.error(`session ${session.id}: could not store a budget stop: ${String(err)}`));
  }

  /**
   * Durably records a call (answered or failed); resolves once it is on disk. If it cannot be stored
   * this rejects with StoreWriteError, and nothing claims the call was stored (a session finding says so).
   */
  async record(session: CaptureSession, record: CallRecord): Promise<void> {
    if (this.store) {
      try {
        await this.store.append(session.id, { type: 'call', ...record });
      } catch (err) {
        session.settleCall();
        const message = err instanceof Error ? err.message : String(err);
        this.log.error(`could not store call ${record.call_id} of session ${session.id}: ${message}`);
        session.addFinding(`[WARN] store_failed: call ${record.call_id} (index ${record.index}) was not stored: ${message}`);
        throw err instanceof StoreWriteError ? err : new StoreWriteError(this.store.dataDir, err);
      }
    }
    session.settleCall();
    if (this.sessions.get(session.id) === session) session.addCall(record);
    this.recordEmitter.fire(record);
  }

  /** model-call.ts reports each call's start and end here; nothing is stored. */
  noteCallActivity(activity: CallActivity): void {
    this.activityEmitter.fire(activity);
  }

  /** Stops events and waits for queued appends to land. */
  async close(): Promise<void> {
    clearInterval(this.sweepTimer);
    this.recordEmitter.dispose();
    this.activityEmitter.dispose();
    this.changeEmitter.dispose();
    await this.store?.close();
  }
}
