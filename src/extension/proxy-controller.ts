// Owns the in-process capture proxy: start/stop, its state for the status bar, where the trees read
// sessions from (the live proxy, or the durable store while it is stopped), and engine health.
// No vscode import: the extension wires it to the UI, the unit tests drive it with a fake proxy.
import { join } from 'node:path';
import { z } from 'zod';
import { isLoopbackHost, mintAdminKey } from '../capture/auth.js';
import { Emitter } from '../capture/events.js';
import { ProxyConfigError, type ProxyLogger, type ProxyOptions } from '../capture/proxy.js';
import { traceToJsonl, type RolloutDocument } from '../capture/rollout.js';
import { SessionRegistry } from '../capture/session-registry.js';
import type { RolloutReadOptions } from '../capture/sessions.js';
import { CaptureStore } from '../capture/store.js';
import type { CallRecord, CaptureLevel } from '../capture/types.js';
import { Disposable, toDisposable, type IDisposable } from './lifecycle.js';
import { NotConfiguredError, SET_ENGINE_URL, START_PROXY } from './not-configured.js';
import { InFlightCalls, type InFlightCall, type SessionRow, type SessionSource } from './sessions-model.js';
import type { HarnessLabSettings } from './settings.js';

/** The part of a SessionRegistry the extension uses: the running proxy's, or the data dir's read-only. */
export type SessionsLike = Pick<SessionRegistry, 'create' | 'list' | 'calls' | 'delete' | 'rollout' | 'onDidRecordCall' | 'onDidChange'> &
  Partial<Pick<SessionRegistry, 'onDidChangeCallActivity'>>;

/** The part of CaptureProxy the extension uses. */
export interface ProxyLike {
  readonly url: string;
  readonly port: number;
  readonly sessions: SessionsLike;
  /** The proxy grades its engine once at start (CaptureProxy); the Engines view shows that grade. */
  ensureProbed?(): Promise<unknown>;
  readonly engineReport?: { reachable: boolean; capture_level: CaptureLevel; findings: string[]; probed_at: string } | undefined;
  /** Points the running proxy at another engine (same port, same sessions). */
  retarget?(engineUrl: string): Promise<void>;
  close(): Promise<void>;
}

export type ProxyState =
  { kind: 'stopped' } | { kind: 'starting' } | { kind: 'running'; url: string; port: number } | { kind: 'failed'; message: string };

export type EngineReachability = 'unknown' | 'reachable' | 'unreachable';

export interface EngineStatus {
  url: string;
  reachability: EngineReachability;
  captureLevel: CaptureLevel | null;
  detail: string;
  checkedAt: string | null;
}

const SessionRowSchema = z.looseObject({
  session_id: z.string(),
  created_at: z.string().default(''),
  n_calls: z.number().int().nonnegative().default(0),
  model: z.string().optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
  keyed: z.boolean().optional(),
});

export function toSessionRows(raw: unknown[]): SessionRow[] {
  const rows: SessionRow[] = [];
  for (const item of raw) {
    const parsed = SessionRowSchema.safeParse(item);
    if (parsed.success) rows.push(parsed.data);
  }
  return rows;
}

export class NotRunningError extends NotConfiguredError {
  constructor(action: string) {
    super(`The Harness Lab proxy is not running; start it first ("Harness Lab: Start Proxy") to ${action}.`, START_PROXY);
  }
}

export interface ProxyControllerDeps<P extends ProxyLike> {
  startProxy(options: ProxyOptions): Promise<P>;
  logger: ProxyLogger;
  /** Used when the dataDir setting is empty (the extension passes globalStorageUri). */
  defaultDataDir: string;
  /** Probe results remembered from an earlier window; reachability is not carried over. */
  rememberedEngines?: readonly EngineStatus[];
  /**
   * The port the proxy had last (in this window or an earlier one): with proxyPort 0 the proxy binds
   * it again, so captured terminals and copied env snippets keep working across restarts.
   */
  rememberedPort?: number;
}

/** `P` is what `startProxy` makes: the extension's CaptureProxy, or a unit test's fake. */
export class ProxyController<P extends ProxyLike = ProxyLike> extends Disposable implements SessionSource {
  private _state: ProxyState = { kind: 'stopped' };
  private proxy: P | undefined;
  private model: string | undefined;
  private proxySubs: IDisposable[] = [];
  private readonly inFlightCalls = new InFlightCalls();
  private storedCache: SessionRegistry | undefined;
  private dataDir: string | undefined;
  private readonly engines = new Map<string, EngineStatus>();
  private pending: Promise<P> | undefined;
  private lastPort: number | undefined;
  private engineUrl: string | undefined;
  private runningAdminKey: string | undefined;

  private readonly stateEmitter = this._register(new Emitter<ProxyState>());
  private readonly dataEmitter = this._register(new Emitter<CallRecord | undefined>());
  private readonly enginesEmitter = this._register(new Emitter<void>());
  readonly onDidChangeState = this.stateEmitter.event;
  /** A call was recorded (with the record) or sessions changed (undefined). */
  readonly onDidChangeData = this.dataEmitter.event;
  readonly onDidChangeEngines = this.enginesEmitter.event;

  constructor(private readonly deps: ProxyControllerDeps<P>) {
    super();
    for (const e of deps.rememberedEngines ?? []) {
      if (e.captureLevel)
        this.engines.set(e.url, { ...e, reachability: 'unknown', detail: `probed ${e.checkedAt ?? 'earlier'}: ${e.detail}` });
    }
    this.lastPort = deps.rememberedPort;
    this._register(toDisposable(() => void this.stop()));
  }

  /** The port the proxy listens on, or listened on last (it binds it again when proxyPort is 0). */
  get rememberedPort(): number | undefined {
    return this.lastPort;
  }

  /** The engine the running proxy forwards to. */
  get runningEngineUrl(): string | undefined {
    return this.running ? this.engineUrl : undefined;
  }

  get state(): ProxyState {
    return this._state;
  }

  get running(): P | undefined {
    return this._state.kind === 'running' ? this.proxy : undefined;
  }

  /** The model the running proxy announces (the setting, or the engine's only model). */
  get runningModel(): string | undefined {
    return this.running ? this.model : undefined;
  }

  resolveDataDir(settings: HarnessLabSettings): string {
    return settings.dataDir || this.deps.defaultDataDir;
  }

  private setState(state: ProxyState): void {
    this._state = state;
    this.stateEmitter.fire(state);
  }

  /**
   * The running proxy's admin key: the user's, or one minted for this start. The extension never runs
   * a proxy without one (its admin routes list every captured prompt), and whoever reads those
   * routes over HTTP gets it from here.
   */
  get adminKey(): string | undefined {
    return this.running ? this.runningAdminKey : undefined;
  }

  /** Starts the proxy (idempotent while starting or running); without a given admin key it mints one. */
  async start(settings: HarnessLabSettings, givenAdminKey: string | undefined): Promise<P> {
    if (this.proxy && this._state.kind === 'running') return this.proxy;
    if (this.pending) return this.pending;
    if (!settings.engineUrl) {
      const message = 'No engine URL configured. Run "Harness Lab: Set Engine URL" (setting harnessLab.engineUrl) first.';
      this.setState({ kind: 'failed', message });
      throw new NotConfiguredError(message, SET_ENGINE_URL);
    }
    this.setState({ kind: 'starting' });
    // Beyond loopback the user's own key is needed (clients elsewhere must know it): the proxy refuses
    // to start without one, and the failure names the command that sets it.
    const adminKey = givenAdminKey || (isLoopbackHost(settings.proxyHost) ? mintAdminKey() : undefined);
    this.runningAdminKey = adminKey;
    const dataDir = this.resolveDataDir(settings);
    const options = (port: number): ProxyOptions => ({
      engineUrl: settings.engineUrl,
      model: settings.model,
      host: settings.proxyHost,
      port,
      dataDir,
      maxModelCalls: settings.maxModelCalls,
      logger: this.deps.logger,
      ...(adminKey ? { adminKey } : {}),
    });
    // Any free port was asked for: the one it had before first, so what points at it keeps working.
    const again = settings.proxyPort === 0 && this.lastPort ? this.lastPort : undefined;
    const bind = again
      ? this.deps.startProxy(options(again)).catch((err: unknown) => {
          if (!isPortTaken(err)) throw err;
          this.deps.logger.warn(
            `port ${again} (the proxy's last) is taken now; listening on another, so captured terminals opened before must be opened again`,
          );
          return this.deps.startProxy(options(0));
        })
      : this.deps.startProxy(options(settings.proxyPort));
    this.pending = bind
      .then(
        (proxy) => {
          this.proxy = proxy;
          this.lastPort = proxy.port;
          this.engineUrl = settings.engineUrl;
          this.model = settings.model;
          this.dataDir = dataDir;
          this.storedCache = undefined;
          this.noteEngine(settings.engineUrl, {});
          this.proxySubs = [
            proxy.sessions.onDidRecordCall((rec) => this.onCall(settings.engineUrl, rec)),
            proxy.sessions.onDidChange(() => this.dataEmitter.fire(undefined)),
            ...(proxy.sessions.onDidChangeCallActivity
              ? [proxy.sessions.onDidChangeCallActivity((a) => this.inFlightCalls.note(a) && this.dataEmitter.fire(undefined))]
              : []),
          ];
          this.setState({ kind: 'running', url: proxy.url, port: proxy.port });
          this.dataEmitter.fire(undefined);
          this.deps.logger.info(`proxy listening on ${proxy.url}, engine ${settings.engineUrl}, data in ${dataDir}`);
          void this.showProxyGrade(proxy, settings.engineUrl);
          return proxy;
        },
        (err: unknown) => {
          const message = describeStartError(err, settings);
          this.setState({ kind: 'failed', message });
          this.deps.logger.error(`proxy failed to start: ${message}`);
          throw new Error(message);
        },
      )
      .finally(() => {
        this.pending = undefined;
      });
    return this.pending;
  }

  /** The proxy's own grading of its engine (it probes at start), as the Engines view and status bar show it. */
  private async showProxyGrade(proxy: P, engineUrl: string): Promise<void> {
    try {
      await proxy.ensureProbed?.();
    } catch (err) {
      this.deps.logger.warn(`the proxy could not grade ${engineUrl}: ${err instanceof Error ? err.message : String(err)}`);
      return;
    }
    const report = proxy.engineReport;
    if (!report || this.proxy !== proxy || this.engineUrl !== engineUrl) return;
    // An engine that is down now keeps the level it was graded at before (the view says unreachable).
    if (!report.reachable) {
      this.noteEngine(engineUrl, { reachability: 'unreachable', detail: `the proxy could not reach it at start (${report.probed_at})` });
      return;
    }
    this.noteEngine(engineUrl, {
      reachability: 'reachable',
      captureLevel: report.capture_level,
      detail: `graded by the proxy at start${report.findings.length ? `: ${report.findings.join('; ')}` : ''}`,
      checkedAt: report.probed_at,
    });
  }

  /**
   * Points the running proxy at another engine without closing its port (an engine swap): new calls
   * go to `engineUrl`, calls in flight finish where they are. False when no proxy runs (nothing to do)
   * or the proxy cannot retarget (the caller restarts it).
   */
  async retarget(engineUrl: string): Promise<boolean> {
    const proxy = this.running;
    if (!proxy?.retarget) return false;
    if (this.engineUrl === engineUrl) return true;
    const previous = this.engineUrl;
    this.engineUrl = engineUrl;
    this.noteEngine(engineUrl, { reachability: 'unknown', detail: 'the proxy switched to it; grading' });
    if (previous) this.noteEngine(previous, { reachability: 'unknown', detail: 'the proxy no longer forwards to it' });
    await proxy.retarget(engineUrl);
    this.deps.logger.info(`proxy on ${proxy.url} now forwards to ${engineUrl}`);
    void this.showProxyGrade(proxy, engineUrl);
    return true;
  }

  async stop(): Promise<void> {
    if (this.pending) await this.pending.catch(() => undefined);
    const proxy = this.proxy;
    this.proxy = undefined;
    for (const sub of this.proxySubs.splice(0)) sub.dispose();
    this.inFlightCalls.clear();
    if (!proxy) {
      if (this._state.kind !== 'stopped') this.setState({ kind: 'stopped' });
      return;
    }
    try {
      await proxy.close();
      this.deps.logger.info('proxy stopped');
    } finally {
      this.storedCache = undefined;
      if (!this._store.isDisposed) {
        this.setState({ kind: 'stopped' });
        this.dataEmitter.fire(undefined);
      }
    }
  }

  requireRunning(action: string): P {
    const proxy = this.running;
    if (!proxy) throw new NotRunningError(action);
    return proxy;
  }

  private onCall(startedWith: string, rec: CallRecord): void {
    const engineUrl = this.engineUrl ?? startedWith;
    if (rec.error?.kind === 'engine') this.noteEngine(engineUrl, { reachability: 'unreachable', detail: rec.error.message });
    else if (!rec.error) this.noteEngine(engineUrl, { reachability: 'reachable', detail: `last call ${rec.call_id} answered` });
    this.dataEmitter.fire(rec);
  }

  // ---- sessions: live proxy, else the durable store (read lazily, never at activation) ----

  /** Reads stored sessions while the proxy is stopped; set the directory the UI should show. */
  useStoredSessions(dataDir: string): void {
    if (this.dataDir === dataDir && this.storedCache) return;
    this.dataDir = dataDir;
    this.storedCache = undefined;
    this.dataEmitter.fire(undefined);
  }

  /** The sessions the UI shows: the live proxy's, else the data dir's. */
  private sessions(): SessionsLike | undefined {
    return this.running?.sessions ?? this.stored();
  }

  /** The data dir's sessions, opened read-only. */
  private stored(): SessionRegistry | undefined {
    if (!this.dataDir) return undefined;
    if (!this.storedCache) {
      this.storedCache = SessionRegistry.openReadOnly(this.dataDir, this.deps.logger);
      try {
        // Every file now: a store that cannot be read is said once, not at each refresh.
        this.storedCache.list();
      } catch (err) {
        this.deps.logger.warn(`could not read stored sessions in ${join(this.dataDir, 'sessions')}: ${String(err)}`);
      }
    }
    return this.storedCache;
  }

  listSessions(): SessionRow[] {
    return toSessionRows(this.sessions()?.list() ?? []);
  }

  getCalls(sessionId: string): CallRecord[] {
    return this.sessions()?.calls(sessionId) ?? [];
  }

  inFlight(sessionId: string): InFlightCall[] {
    return this.running ? this.inFlightCalls.of(sessionId) : [];
  }

  /** Deletes from the live proxy, or from the store while stopped. */
  async deleteSession(sessionId: string): Promise<boolean> {
    if (this.running) return await this.running.sessions.delete(sessionId);
    if (!this.dataDir) return false;
    const existed = this.stored()?.get(sessionId) !== undefined;
    await new CaptureStore(this.dataDir).delete(sessionId);
    this.storedCache = undefined;
    this.dataEmitter.fire(undefined);
    return existed;
  }

  /** The session's rollout document, from the live proxy or the store; throws for an unknown session. */
  rollout(sessionId: string, opts?: RolloutReadOptions): RolloutDocument {
    const doc = this.sessions()?.rollout(sessionId, opts);
    if (!doc) throw new Error(`No session '${sessionId}' (it may have been deleted).`);
    return doc;
  }

  /** The session's TrainingTrace JSONL (one line per root-to-leaf path), from the live proxy or the store. */
  exportTraces(sessionId: string): { jsonl: string; traces: number; trainable: number; calls: number } {
    const doc = this.rollout(sessionId);
    return {
      jsonl: traceToJsonl(doc.traces),
      traces: doc.traces.length,
      trainable: doc.traces.filter((t) => t.trainable).length,
      calls: doc.calls.length,
    };
  }

  // ---- engines ----

  engineStatuses(configured: string[]): EngineStatus[] {
    return configured
      .filter(Boolean)
      .map(
        (url) => this.engines.get(url) ?? { url, reachability: 'unknown', captureLevel: null, detail: 'not probed yet', checkedAt: null },
      );
  }

  noteEngine(url: string, patch: Partial<Omit<EngineStatus, 'url'>>): void {
    const prev = this.engines.get(url) ?? {
      url,
      reachability: 'unknown' as const,
      captureLevel: null,
      detail: 'not probed yet',
      checkedAt: null,
    };
    const next = { ...prev, ...patch, url };
    this.engines.set(url, next);
    this.enginesEmitter.fire();
  }

  /** Engines with a probed capture level, for remembering across windows. */
  probedEngines(): EngineStatus[] {
    return [...this.engines.values()].filter((e) => e.captureLevel !== null);
  }

  engineReachability(url: string): EngineReachability {
    return this.engines.get(url)?.reachability ?? 'unknown';
  }
}

function isPortTaken(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'EADDRINUSE' || (err instanceof ProxyConfigError && /already in use/.test(err.message));
}

function describeStartError(err: unknown, settings: HarnessLabSettings): string {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === 'EADDRINUSE')
    return `Port ${settings.proxyPort} on ${settings.proxyHost} is already in use. Set harnessLab.proxyPort to 0 (any free port) or another port.`;
  if (code === 'EADDRNOTAVAIL') return `Cannot bind ${settings.proxyHost}: no such local address. Check harnessLab.proxyHost.`;
  if (code === 'EACCES') return `Not allowed to bind ${settings.proxyHost}:${settings.proxyPort}. Use a port above 1024 or 0.`;
  if (err instanceof ProxyConfigError && /admin key/i.test(err.message)) {
    return (
      `Binding ${settings.proxyHost} (beyond loopback) needs an admin key, or anyone who can reach the port ` +
      `could read captured token data. Run "Harness Lab: Set Admin Key", or set harnessLab.proxyHost to 127.0.0.1.`
    );
  }
  return err instanceof Error ? err.message : String(err);
}
