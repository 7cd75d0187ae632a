// A cluster batch's sessions, followed while their rollouts run: the in-cluster proxy is read through
// the port-forward (one session listing per tick, then only the new calls of the sessions that grew,
// `GET /sessions/<id>/calls?from=K`) and every call not yet mirrored is appended to `<batch>/capture`
// with the capture store's own durable append, so the Batches view, the rollout viewer and the
// exports read a running cluster rollout as they read a local one.
//
// Idempotent by call id: a session's mirrored ids are read back from its file the first time it is
// followed (a resumed lab, or a lab that mirrored it before), so a re-mirror at the attempt's end, a
// retry after a dropped port-forward or an older proxy that ignores `from` never writes a call
// twice; the arrival-position cursor only saves traffic. Memory per followed session is its call ids
// and one page of calls; a session leaves memory when its attempt ends.
import { existsSync } from 'node:fs';
import { z } from 'zod';
import { CaptureStore, loadSessionFile, type StoreLine } from '../../../capture/store.js';
import type { CallRecord, SessionInfo } from '../../../capture/types.js';

/** A GET on the in-cluster proxy's admin routes (through the port-forward), JSON body back. */
export type ProxyGet = (path: string) => Promise<unknown>;

const SummarySchema = z
  .object({
    session_id: z.string(),
    created_at: z.string(),
    model: z.string(),
    max_model_calls: z.number(),
    metadata: z.record(z.string(), z.unknown()),
    capture_level: z.enum(['tokens', 'logprobs', 'text']).nullable().optional(),
    sampling: z.record(z.string(), z.number()).optional(),
    n_calls: z.number().int().nonnegative().optional(),
  })
  .loose();
const ListingSchema = z.object({ sessions: z.array(SummarySchema) }).loose();
const CallSchema = z.object({ call_id: z.string().min(1), index: z.number().int().nonnegative() }).loose();
const PageSchema = z
  .object({ calls: z.array(CallSchema), from: z.number().int().nonnegative().optional(), total: z.number().int().nonnegative().optional() })
  .loose();

/** Calls fetched per request: bounds what one response holds in memory. */
export const MIRROR_PAGE = 64;

interface Followed {
  /** Calls already mirrored (from the file and from this lab). */
  ids: Set<string>;
  /** Arrival positions on the proxy already read. */
  cursor: number;
  /** The header line written (or found in the file), and the capture level it carries. */
  header: { level: string | null } | null;
  /** Syncs of one session run one after another. */
  chain: Promise<unknown>;
}

export class SessionMirror {
  private readonly store: CaptureStore;
  private readonly followed = new Map<string, Followed>();
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private stopped = false;

  constructor(
    dataDir: string,
    private readonly get: ProxyGet,
    private readonly engineUrl: string,
    private readonly log: (line: string) => void = () => {},
  ) {
    this.store = new CaptureStore(dataDir);
  }

  /** The mirrored file of a session. */
  fileOf(sessionId: string): string {
    return this.store.fileOf(sessionId);
  }

  /** Starts following a session (its attempt is about to run). */
  follow(sessionId: string): void {
    if (this.followed.has(sessionId)) return;
    const file = this.store.fileOf(sessionId);
    const known: Followed = { ids: new Set(), cursor: 0, header: null, chain: Promise.resolve() };
    if (existsSync(file)) {
      const loaded = loadSessionFile(file);
      if (loaded) {
        for (const c of loaded.calls) known.ids.add(c.call_id);
        known.header = { level: loaded.info.capture_level ?? null };
      }
    }
    this.followed.set(sessionId, known);
  }

  /** Polls every `intervalMs` until stopped; a failed tick is logged and the next one retries from where the last left off. */
  start(intervalMs: number): void {
    if (this.timer || this.stopped) return;
    const loop = () => {
      this.timer = setTimeout(() => {
        this.ticking = this.tick()
          .catch((err: unknown) =>
            this.log(`following the cluster's sessions: ${err instanceof Error ? err.message : String(err)} (retrying)`),
          )
          .finally(() => {
            this.ticking = undefined;
            if (!this.stopped) loop();
          });
      }, intervalMs);
      this.timer.unref();
    };
    loop();
  }

  /** One listing, then the new calls of every followed session that has more calls than mirrored. */
  async tick(): Promise<void> {
    if (!this.followed.size) return;
    const { sessions } = ListingSchema.parse(await this.get('/sessions'));
    const grown = sessions.filter((s) => {
      const f = this.followed.get(s.session_id);
      return f && (s.n_calls === undefined || s.n_calls > f.cursor || !f.header || (s.capture_level ?? null) !== f.header.level);
    });
    for (const s of grown) {
      const f = this.followed.get(s.session_id);
      // Unfollowed while the listing was on its way: its attempt's end already synced it.
      if (f) await this.queue(s.session_id, f, s);
    }
  }

  /** Mirrors everything the proxy has of one session now (the attempt's end calls this); returns the mirrored call count. */
  sync(sessionId: string, summary?: z.infer<typeof SummarySchema>): Promise<number> {
    this.follow(sessionId);
    return this.queue(sessionId, this.followed.get(sessionId)!, summary);
  }

  private queue(sessionId: string, f: Followed, summary?: z.infer<typeof SummarySchema>): Promise<number> {
    const run = f.chain.then(() => this.syncNow(sessionId, f, summary));
    f.chain = run.catch(() => {});
    return run;
  }

  /** Stops following a session (its attempt ended and was synced). */
  async unfollow(sessionId: string): Promise<void> {
    const f = this.followed.get(sessionId);
    if (!f) return;
    this.followed.delete(sessionId);
    await f.chain;
  }

  private async syncNow(sessionId: string, f: Followed, known?: z.infer<typeof SummarySchema>): Promise<number> {
    const id = encodeURIComponent(sessionId);
    const info = known ?? SummarySchema.parse(await this.get(`/sessions/${id}`));
    const level = info.capture_level ?? null;
    // A header first; again when the proxy fixed the capture level after it (the last session line wins on load).
    if (!f.header || f.header.level !== level) {
      const header: SessionInfo = {
        session_id: info.session_id,
        created_at: info.created_at,
        model: info.model,
        engine_url: this.engineUrl,
        max_model_calls: info.max_model_calls,
        metadata: info.metadata as SessionInfo['metadata'],
        ...(level ? { capture_level: level } : {}),
        ...(info.sampling ? { sampling: info.sampling } : {}),
      };
      await this.store.append(sessionId, { type: 'session', ...header });
      f.header = { level };
    }
    for (;;) {
      const page = PageSchema.parse(await this.get(`/sessions/${id}/calls?from=${f.cursor}&limit=${MIRROR_PAGE}`));
      // An older proxy ignores `from` and `limit` and answers every call: the ids still keep it exact.
      const start = page.from ?? 0;
      const fresh = page.calls.filter((c) => !f.ids.has(c.call_id));
      // Queued together, in order, so the page shares the store's durable writes (group commit); an
      // id counts as mirrored only once its own append is on disk, so a failed write is retried, never doubled.
      const written = await Promise.allSettled(
        fresh.map((c) => this.store.append(sessionId, { type: 'call', ...(c as unknown as CallRecord) } as StoreLine)),
      );
      written.forEach((w, i) => w.status === 'fulfilled' && f.ids.add(fresh[i]!.call_id));
      const failed = written.find((w): w is PromiseRejectedResult => w.status === 'rejected');
      if (failed) throw failed.reason;
      f.cursor = Math.max(f.cursor, start + page.calls.length);
      const total = page.total ?? start + page.calls.length;
      if (page.from === undefined || page.calls.length === 0 || f.cursor >= total) break;
    }
    return f.ids.size;
  }

  /** Stops polling, waits for a tick under way, closes the store's files. */
  async close(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.ticking;
    await Promise.all([...this.followed.values()].map((f) => f.chain));
    await this.store.close();
  }
}
