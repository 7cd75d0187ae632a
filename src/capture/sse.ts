// Server-sent events for replaying a (non-streamed) engine answer in the caller's dialect.
import type { ServerResponse } from 'node:http';
import type { SseEvent } from './types.js';

export const SSE_HEADERS = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
} as const;

export function formatSseEvent(event: SseEvent): string {
  const data = typeof event.data === 'string' ? event.data : JSON.stringify(event.data);
  return `${event.event ? `event: ${event.event}\n` : ''}data: ${data}\n\n`;
}

/**
 * Holds a streaming client while the engine works. If the answer comes within `graceMs` the caller
 * can still reply with a real status; after that the stream is committed (200) and a comment line
 * is written every `intervalMs`, so relays that drop idle connections keep this one.
 */
export class SseKeepalive {
  private timer: NodeJS.Timeout | undefined;
  private committed = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly graceMs = 10_000,
    private readonly intervalMs = 10_000,
    /** False for clients whose SSE parser fails on comment lines (Gemini): ping with a bare newline. */
    private readonly comments = true,
  ) {
    this.timer = setTimeout(() => this.commitAndPing(), graceMs);
  }

  get isCommitted(): boolean {
    return this.committed;
  }

  private commitAndPing(): void {
    this.commit();
    // A blank line is an empty SSE dispatch every parser skips; it still keeps relays from idling out.
    this.res.write(this.comments ? ': harness-lab keepalive\n\n' : '\n');
    this.timer = setTimeout(() => this.commitAndPing(), this.intervalMs);
  }

  commit(): void {
    if (this.committed || this.res.headersSent) {
      this.committed = true;
      return;
    }
    this.committed = true;
    this.res.writeHead(200, SSE_HEADERS);
    this.res.flushHeaders();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** Writes a whole event sequence and ends the response. */
export function writeSse(res: ServerResponse, events: SseEvent[], keepalive?: SseKeepalive): void {
  keepalive?.stop();
  if (keepalive) keepalive.commit();
  else if (!res.headersSent) res.writeHead(200, SSE_HEADERS);
  res.end(events.map(formatSseEvent).join(''));
}
