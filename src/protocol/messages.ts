// The one message protocol between the rollout viewer's host (extension) and its webview.
// Webview -> host messages are untrusted and validated with zod on the host (webview-schema.ts, kept
// apart so the webview bundle carries no zod); host -> webview messages are checked by type on arrival. Nothing is posted to the webview before it sends `ready`.
// Requests carry a `seq`; their reply echoes it as `{type: '<method>/completion', seq, res | err}`.
import type { AtifCheckResult } from '../harness/atif-check.js';
import type { TurnDetails, ViewerWire } from './viewer-data.js';

export const MSG = {
  ready: 'ready',
  attachTrajectory: 'attachTrajectory',
  attachTrajectoryCompletion: 'attachTrajectory/completion',
  details: 'details',
  detailsCompletion: 'details/completion',
  load: 'load',
  tokenTexts: 'tokenTexts',
  atif: 'atif',
  focusTurn: 'focusTurn',
  error: 'error',
} as const;

/** Webview -> host (validated on the host by WebviewMessageSchema in webview-schema.ts). */
export type WebviewMessage =
  | { type: typeof MSG.ready; version: 1 }
  /** Ask the host to pick a trajectory.json and run the ATIF cross-check. */
  | { type: typeof MSG.attachTrajectory; seq: number }
  /** Raw I/O and messages of one turn, fetched when the turn is shown. */
  | { type: typeof MSG.details; seq: number; node_id: string };

/** Host -> webview. */
export type HostMessage =
  | { type: typeof MSG.load; wire: ViewerWire; focus?: string | null }
  | { type: typeof MSG.detailsCompletion; seq: number; node_id: string; res?: TurnDetails; err?: string }
  | { type: typeof MSG.tokenTexts; texts: Record<string, string> }
  | { type: typeof MSG.atif; result: AtifCheckResult }
  | { type: typeof MSG.focusTurn; node_id: string }
  | { type: typeof MSG.attachTrajectoryCompletion; seq: number; res?: AtifCheckResult | null; err?: string }
  | { type: typeof MSG.error; message: string };

const HOST_TYPES = new Set<string>([MSG.load, MSG.detailsCompletion, MSG.tokenTexts, MSG.atif, MSG.focusTurn, MSG.attachTrajectoryCompletion, MSG.error]);

/** Envelope check on the webview side (the payload is built by our own host). */
export function isHostMessage(value: unknown): value is HostMessage {
  return typeof value === 'object' && value !== null && HOST_TYPES.has((value as { type?: unknown }).type as string);
}

/**
 * Holds host -> webview messages until the webview says `ready`, then flushes them in order.
 * A reloaded webview (hidden and shown again) sends `ready` again: `reset` re-arms the queue.
 */
export class ReadyQueue<M> {
  private ready = false;
  private queue: M[] = [];
  constructor(private readonly post: (msg: M) => void) {}
  send(msg: M): void {
    if (this.ready) this.post(msg);
    else this.queue.push(msg);
  }
  /** The webview is listening now. */
  open(): void {
    this.ready = true;
    const pending = this.queue;
    this.queue = [];
    for (const m of pending) this.post(m);
  }
  reset(): void {
    this.ready = false;
  }
  get isReady(): boolean {
    return this.ready;
  }
}
