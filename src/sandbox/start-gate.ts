// Pacing of sandbox start-ups. At scale the dominant failure is too many sandboxes starting at once
// (image pulls, container creates and the daemon's or API server's own queue all at once; Uni-Agent
// caps the starting ones and gives start-up its own wall budget). A StartGate is that cap, apart from
// the batch's --parallel (how many run at once): a rollout holds a start slot only from "starting
// sandbox" until its agent is launched, and a start-up that outlasts its budget is an infra failure
// (classified startup_timeout), never an agent timeout.

export interface StartGate {
  /** Waits for a start slot; the result releases it (idempotent). Rejects when the signal aborts first. */
  acquire(signal?: AbortSignal): Promise<() => void>;
  /** Wall budget of one start-up (create until the agent is launched), in ms; undefined: none. */
  readonly budgetMs?: number;
  /** Start-ups in progress and waiting, for status and /metrics. */
  readonly starting: number;
  readonly waiting: number;
}

export class StartupBudgetError extends Error {
  constructor(budgetMs: number) {
    super(`the sandbox did not start within its start-up budget of ${Math.round(budgetMs / 1000)} s`);
    this.name = 'StartupBudgetError';
  }
}

/** A FIFO counting semaphore; `limit` 0 or less means no cap. */
export class StartSemaphore implements StartGate {
  private active = 0;
  private readonly queue: {
    resolve: (release: () => void) => void;
    reject: (err: Error) => void;
    signal?: AbortSignal;
    onAbort?: () => void;
  }[] = [];

  constructor(
    readonly limit: number,
    readonly budgetMs?: number,
  ) {}

  get starting(): number {
    return this.active;
  }

  get waiting(): number {
    return this.queue.length;
  }

  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(new Error('cancelled before the sandbox started'));
    if (this.limit <= 0 || this.active < this.limit) {
      this.active++;
      return Promise.resolve(this.releaser());
    }
    return new Promise((resolve, reject) => {
      const entry: (typeof this.queue)[number] = { resolve, reject, signal };
      if (signal) {
        entry.onAbort = () => {
          const i = this.queue.indexOf(entry);
          if (i >= 0) this.queue.splice(i, 1);
          reject(new Error('cancelled before the sandbox started'));
        };
        signal.addEventListener('abort', entry.onAbort, { once: true });
      }
      this.queue.push(entry);
    });
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.queue.shift();
      if (next) {
        if (next.onAbort) next.signal?.removeEventListener('abort', next.onAbort);
        next.resolve(this.releaser()); // the slot passes straight to the next waiter
      } else this.active--;
    };
  }
}

/**
 * Resolves with `work`'s result, or rejects with StartupBudgetError once `budgetMs` has passed; a
 * result that arrives after the deadline is handed to `late` (to remove a sandbox made too late).
 */
export async function withinStartBudget<T>(work: Promise<T>, budgetMs: number | undefined, late: (value: T) => void): Promise<T> {
  if (!budgetMs || budgetMs <= 0) return work;
  let timer: NodeJS.Timeout | undefined;
  let expired = false;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      expired = true;
      reject(new StartupBudgetError(budgetMs));
    }, budgetMs);
  });
  work.then(
    (v) => {
      if (expired) late(v);
    },
    () => {},
  );
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
