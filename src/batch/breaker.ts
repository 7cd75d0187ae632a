// Failure containment for a run that lasts days. A sandbox backend that is down (Docker stopped, the
// task image failing to build, a quota, the API server refusing) fails every attempt at once; without
// a breaker a batch or the rollout server keeps starting sandboxes that die, and every one of them is
// a fake zero for somebody (open-instruct#1887 measured 5-15% of episodes on preemptions alone).
//
// Glossary:
//   infra failure  an attempt classified infra_error (classify.ts): the sandbox, not the policy.
//   streak         consecutive infra failures; any attempt that reaches the verifier resets it.
//   closed         attempts start freely.
//   open           after `threshold` failures in a row (default 10, prime-rl#2835's default): no
//                  sandbox starts; the backend's probe (its preflight) runs every `probeMs`.
//   half-open      the probe answered: exactly one attempt is let through; its success closes the
//                  breaker, its failure opens it again (an image that still does not build).
// While open, callers that cannot wait (the rollout server's trainers) get `openError()` at once.
import { Emitter } from '../capture/events.js';
import type { InfraCause } from './infra-cause.js';

export const DEFAULT_BREAKER_THRESHOLD = 10;
export const DEFAULT_BREAKER_PROBE_MS = 15_000;

export type BreakerState = 'closed' | 'open' | 'half-open';

export interface BreakerSnapshot {
  state: BreakerState;
  streak: number;
  threshold: number;
  /** The cause of the failure that opened it (or the last infra failure), in the user's terms. */
  cause: InfraCause | null;
  reason: string | null;
  openedAt: number | null;
  trips: number;
  /** The probe's last error while open. */
  probeError: string | null;
}

export class BreakerOpenError extends Error {
  constructor(readonly snapshot: BreakerSnapshot) {
    super(
      `sandboxes are paused: ${snapshot.threshold} rollouts in a row failed in the sandbox backend ` +
        `(${snapshot.cause}: ${snapshot.reason})${snapshot.probeError ? `; the last probe says: ${snapshot.probeError}` : ''}; ` +
        'they resume by themselves once the backend answers its probe',
    );
    this.name = 'BreakerOpenError';
  }
}

export interface BreakerOptions {
  /** Consecutive infra failures that open the breaker; 0 turns it off. */
  threshold?: number;
  probeMs?: number;
  /** Resolves when the backend can make sandboxes again (the backend module's preflight). */
  probe: () => Promise<void>;
  log?: (line: string) => void;
  now?: () => number;
}

export class CircuitBreaker {
  readonly threshold: number;
  private readonly probeMs: number;
  private state: BreakerState = 'closed';
  private streak = 0;
  private cause: InfraCause | null = null;
  private reason: string | null = null;
  private openedAt: number | null = null;
  private trips = 0;
  private probeError: string | null = null;
  /** The one attempt a half-open breaker lets through is out. */
  private trial = false;
  private probing: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private disposed = false;
  private readonly changed = new Emitter<BreakerSnapshot>();
  readonly onDidChange = this.changed.event;
  private readonly waiters = new Set<() => void>();

  constructor(private readonly opts: BreakerOptions) {
    this.threshold = Math.max(0, Math.floor(opts.threshold ?? DEFAULT_BREAKER_THRESHOLD));
    this.probeMs = opts.probeMs ?? DEFAULT_BREAKER_PROBE_MS;
  }

  snapshot(): BreakerSnapshot {
    return {
      state: this.state,
      streak: this.streak,
      threshold: this.threshold,
      cause: this.cause,
      reason: this.reason,
      openedAt: this.openedAt,
      trips: this.trips,
      probeError: this.probeError,
    };
  }

  /** True when an attempt may start now (and, half-open, takes the one trial). */
  tryAdmit(): boolean {
    if (this.state === 'closed') return true;
    if (this.state === 'half-open' && !this.trial) {
      this.trial = true;
      return true;
    }
    return false;
  }

  /** Throws BreakerOpenError instead of waiting (the rollout server answers its trainer at once). */
  admitOrThrow(): void {
    if (!this.tryAdmit()) throw new BreakerOpenError(this.snapshot());
  }

  /** Waits until an attempt may start; false when the signal aborted or the breaker was disposed. */
  async admit(signal?: AbortSignal): Promise<boolean> {
    while (!this.disposed && !signal?.aborted) {
      if (this.tryAdmit()) return true;
      await new Promise<void>((resolve) => {
        const done = () => {
          this.waiters.delete(done);
          signal?.removeEventListener('abort', done);
          resolve();
        };
        this.waiters.add(done);
        signal?.addEventListener('abort', done, { once: true });
      });
    }
    return false;
  }

  /** An attempt that reached its verdict without an infra failure: the backend works. */
  recordSuccess(): void {
    const wasHalfOpen = this.state === 'half-open';
    this.streak = 0;
    this.trial = false;
    if (this.state !== 'closed') {
      this.state = 'closed';
      this.openedAt = null;
      this.probeError = null;
      this.stopProbing();
      this.opts.log?.(`sandboxes resumed: the backend works again${wasHalfOpen ? ' (the trial rollout passed)' : ''}`);
      this.fire();
    }
  }

  /** An attempt whose sandbox failed. Returns true when this failure opened the breaker. */
  recordFailure(cause: InfraCause, reason: string): boolean {
    this.streak++;
    this.cause = cause;
    this.reason = reason;
    if (this.threshold === 0) return false;
    if (this.state === 'half-open') {
      this.trial = false;
      this.open(`the trial rollout failed too (${cause}: ${reason})`);
      return true;
    }
    if (this.state === 'closed' && this.streak >= this.threshold) {
      this.open(`${this.streak} rollouts in a row failed in the sandbox backend; last: ${cause}: ${reason}`);
      return true;
    }
    return false;
  }

  private open(why: string): void {
    this.state = 'open';
    this.openedAt = (this.opts.now ?? Date.now)();
    this.trips++;
    const every = this.probeMs >= 1000 ? `${Math.round(this.probeMs / 1000)} s` : `${this.probeMs} ms`;
    this.opts.log?.(`sandboxes paused: ${why}; probing the backend every ${every}`);
    this.fire();
    this.scheduleProbe();
  }

  private scheduleProbe(): void {
    if (this.disposed || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.probing = this.runProbe().finally(() => (this.probing = undefined));
    }, this.probeMs);
  }

  private async runProbe(): Promise<void> {
    if (this.state !== 'open' || this.disposed) return;
    try {
      await this.opts.probe();
      if (this.state !== 'open' || this.disposed) return;
      this.state = 'half-open';
      this.trial = false;
      this.probeError = null;
      this.opts.log?.('the backend answers its probe: one trial rollout may start');
      this.fire();
    } catch (err) {
      this.probeError = err instanceof Error ? err.message : String(err);
      this.scheduleProbe();
    }
  }

  private stopProbing(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private fire(): void {
    for (const w of [...this.waiters]) w();
    this.changed.fire(this.snapshot());
  }

  dispose(): void {
    this.disposed = true;
    this.stopProbing();
    for (const w of [...this.waiters]) w();
    this.changed.dispose();
  }
}
