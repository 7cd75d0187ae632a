// The proxy's listening socket lives on its own thread.
//
// Why: libuv accepts one connection per event-loop turn (libuv#3696). Under a storm of new harness
// connections the proxy's busy loop turns ~100 times a second, so its accept queue drains at ~100
// connections/s and a supervisor's fresh `/health` connection waits seconds behind it (measured: 600
// queued, `/health` p99 4-6 s at 1,000 sessions, while the loop itself never lagged over 220 ms).
// An acceptor thread with an idle loop accepts at once. It answers a fresh connection's
// `GET /health` from a snapshot the main thread keeps current (503 when the main thread has gone
// silent, so a wedged proxy still fails its check), and relays every other connection's bytes to the
// main thread's HTTP server, which sees an ordinary Duplex socket.
import type { AddressInfo } from 'node:net';
import { Duplex } from 'node:stream';
import { Worker } from 'node:worker_threads';

/** The main thread is reported stalled when it has not refreshed the health snapshot for this long. */
export const HEALTH_STALL_MS = 10_000;
/** How often the main thread refreshes the snapshot when nothing changed. */
const HEALTH_REFRESH_MS = 1_000;
/**
 * New connections handed to the main thread per turn of its event loop. Admitting a whole storm at
 * once made one turn of ~700 ms that every call waited behind (added p50 4-8x the pass-through's at
 * 1,000 sessions); pacing admissions by loop turns, as libuv's own accept does, lets calls already
 * in flight finish first.
 */
const ADMIT_PER_TURN = 4;

type FromAcceptor =
  | { t: 'listening'; address: AddressInfo }
  | { t: 'error'; code?: string; message: string }
  | { t: 'open'; id: number; ra?: string; rp?: number; rf?: string; la?: string; lp?: number }
  | { t: 'data'; id: number; chunk: Uint8Array }
  | { t: 'end'; id: number }
  | { t: 'close'; id: number };

// Plain JavaScript run with `eval: true`, so the same code works from the CLI bundle, the extension
// bundle and tsx without a second entry point.
const ACCEPTOR_SOURCE = String.raw`
const { parentPort, workerData } = require('node:worker_threads');
const net = require('node:net');
const { host, port, backlog, stallMs, hostNames } = workerData;
// Host values this thread answers /health for by itself (RequestGuard's names, with and without the
// port); anything else (another name, an Origin) goes to the main thread, whose guard decides.
let healthHosts = new Set();
let health = workerData.health;
let beat = Date.now();
const sockets = new Map();
let nextId = 1;
const HEALTH_LINE = /^(GET|HEAD) \/health\/?(?:\?[^ ]*)? HTTP\/1\.[01]\r\n/;
const HOST_HEADER = /\r\nhost:[ \t]*([^\r\n]*?)[ \t]*\r\n/i;
const ORIGIN_HEADER = /\r\norigin:/i;

/** A plain local /health request: a Host this server serves, and no Origin (no web page). */
function localHealthRequest(head) {
  const hostLine = HOST_HEADER.exec(head);
  return hostLine !== null && healthHosts.has(hostLine[1].toLowerCase()) && !ORIGIN_HEADER.test(head);
}

function answerHealth(socket, method) {
  const silent = Date.now() - beat;
  const stalled = silent > stallMs;
  const body = stalled ? JSON.stringify({ status: 'stalled', main_thread_silent_ms: silent }) : health;
  const head = 'HTTP/1.1 ' + (stalled ? '503 Service Unavailable' : '200 OK') + '\r\ncontent-type: application/json\r\ncontent-length: ' + Buffer.byteLength(body) + '\r\nconnection: close\r\n\r\n';
  socket.end(method === 'HEAD' ? head : head + body);
}

// Admission: new connections go to the main thread only as fast as its loop turns (it grants
// credits once per turn), as a main-thread listener would admit them; the rest wait here, paused.
let credits = workerData.admitPerTurn;
const waiting = [];

function admit(entry) {
  const { id, socket, first } = entry;
  sockets.set(id, socket);
  parentPort.postMessage({ t: 'open', id, ra: socket.remoteAddress, rp: socket.remotePort, rf: socket.remoteFamily, la: socket.localAddress, lp: socket.localPort });
  relay(id, first);
  socket.on('data', (chunk) => relay(id, chunk));
  socket.on('end', () => parentPort.postMessage({ t: 'end', id }));
  socket.resume();
}

// A chunk moves to the main thread by transfer, never by clone (a cloned view copies its whole
// ArrayBuffer). A socket read's chunk owns its ArrayBuffer (one per read, nothing else refers to
// it once emitted), so it is transferred as it is: a 0.55 MB request was copied once more here, into
// fresh pages, on every long-context turn. Any other chunk (the first, sliced for the /health check,
// or a pooled slab) is copied first.
function relay(id, chunk) {
  if (chunk.byteOffset === 0 && chunk.byteLength === chunk.buffer.byteLength) {
    try {
      parentPort.postMessage({ t: 'data', id, chunk }, [chunk.buffer]);
      return;
    } catch {
      // not transferable (a pooled slab): copy
    }
  }
  const copy = new Uint8Array(chunk);
  parentPort.postMessage({ t: 'data', id, chunk: copy }, [copy.buffer]);
}

const server = net.createServer({ allowHalfOpen: true, noDelay: true }, (socket) => {
  const id = nextId++;
  let relayed = false;
  socket.on('error', () => {});
  socket.once('data', (first) => {
    const match = HEALTH_LINE.exec(first.toString('latin1', 0, Math.min(first.length, 128)));
    const headEnd = first.indexOf('\r\n\r\n');
    if (match && headEnd >= 0 && localHealthRequest(first.toString('latin1', 0, headEnd + 2))) return answerHealth(socket, match[1]);
    relayed = true;
    socket.pause();
    const entry = { id, socket, first };
    if (credits > 0) {
      credits--;
      admit(entry);
    } else waiting.push(entry);
  });
  socket.on('close', () => {
    if (!relayed) return;
    const queued = waiting.findIndex((e) => e.id === id);
    if (queued >= 0) return void waiting.splice(queued, 1);
    sockets.delete(id);
    parentPort.postMessage({ t: 'close', id });
  });
});
server.on('error', (err) => parentPort.postMessage({ t: 'error', code: err.code, message: err.message }));
server.listen({ host, port, backlog }, () => {
  const bound = server.address().port;
  healthHosts = new Set(hostNames.flatMap((name) => [name, name + ':' + bound]));
  parentPort.postMessage({ t: 'listening', address: server.address() });
});

parentPort.on('message', (m) => {
  const socket = m.id === undefined ? undefined : sockets.get(m.id);
  switch (m.t) {
    case 'w': if (socket) socket.write(m.chunk); break;
    case 'e': if (socket) socket.end(); break;
    case 'd': if (socket) socket.destroy(); break;
    case 'h': health = m.body; beat = Date.now(); break;
    case 'c':
      credits = m.n;
      while (credits > 0 && waiting.length) {
        credits--;
        admit(waiting.shift());
      }
      break;
    case 'x':
      // Admitted and still-waiting connections alike: server.close() waits for every one.
      for (const s of sockets.values()) s.destroy();
      for (const e of waiting) e.socket.destroy();
      server.close(() => process.exit(0));
      break;
  }
});
`;

/** One relayed connection, as the main thread's HTTP server sees it. */
export class RelayedSocket extends Duplex {
  readonly remoteAddress: string | undefined;
  readonly remotePort: number | undefined;
  readonly remoteFamily: string | undefined;
  readonly localAddress: string | undefined;
  readonly localPort: number | undefined;
  private timeoutMs = 0;
  private timer: NodeJS.Timeout | undefined;
  private peerClosed = false;

  constructor(
    private readonly id: number,
    private readonly send: (message: object, transfer?: ArrayBuffer[]) => void,
    info: Extract<FromAcceptor, { t: 'open' }>,
  ) {
    super({ allowHalfOpen: true });
    this.remoteAddress = info.ra;
    this.remotePort = info.rp;
    this.remoteFamily = info.rf;
    this.localAddress = info.la;
    this.localPort = info.lp;
  }

  /** Bytes from the client (the acceptor thread pushes as they arrive). */
  received(chunk: Uint8Array): void {
    this.touch();
    this.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
  }

  peerEnded(): void {
    this.push(null);
  }

  peerClosedSocket(): void {
    this.peerClosed = true;
    this.destroy();
  }

  override _read(): void {
    // push-driven: the acceptor thread sends data as the client writes it
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.sendBytes([chunk]);
    callback();
  }

  override _writev(chunks: { chunk: Buffer }[], callback: (error?: Error | null) => void): void {
    this.sendBytes(chunks.map((c) => c.chunk));
    callback();
  }

  /** One message per write, with its own transferred ArrayBuffer (small Buffers share a pool slab). */
  private sendBytes(chunks: Buffer[]): void {
    this.touch();
    const bytes = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
    let offset = 0;
    for (const c of chunks) {
      bytes.set(c, offset);
      offset += c.length;
    }
    this.send({ t: 'w', id: this.id, chunk: bytes }, [bytes.buffer]);
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.send({ t: 'e', id: this.id });
    callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    clearTimeout(this.timer);
    if (!this.peerClosed) this.send({ t: 'd', id: this.id });
    callback(error);
  }

  // The parts of net.Socket that node:http calls.
  setTimeout(ms: number, callback?: () => void): this {
    if (callback) this.once('timeout', callback);
    if (ms !== this.timeoutMs || !this.timer) {
      clearTimeout(this.timer);
      this.timeoutMs = ms;
      this.timer = ms > 0 && !this.destroyed ? setTimeout(() => this.emit('timeout'), ms).unref() : undefined;
    } else this.touch();
    return this;
  }

  setNoDelay(): this {
    return this;
  }

  setKeepAlive(): this {
    return this;
  }

  ref(): this {
    return this;
  }

  unref(): this {
    return this;
  }

  address(): AddressInfo | Record<string, never> {
    return this.localAddress ? { address: this.localAddress, port: this.localPort ?? 0, family: this.remoteFamily ?? 'IPv4' } : {};
  }

  /** Activity restarts the idle timer (one timer per socket, refreshed rather than recreated). */
  private touch(): void {
    this.timer?.refresh();
  }
}

export interface AcceptorOptions {
  host: string;
  port: number;
  backlog: number;
  /** Host names (as in a Host header, no port) whose plain `/health` this thread answers; see RequestGuard. */
  hostNames: readonly string[];
  /** The `/health` body, as JSON text; called on every refresh. */
  health(): string;
  /** Silence after which `/health` answers 503 (default HEALTH_STALL_MS). */
  healthStallMs?: number;
  /** A relayed connection for the main thread's HTTP server (`server.emit('connection', socket)`). */
  onConnection(socket: RelayedSocket): void;
  /** The thread ended without close(): nothing accepts connections until a new acceptor starts. */
  onExit?(reason: string): void;
}

export class ListenError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
  ) {
    super(message);
  }
}

export class AcceptorThread {
  private readonly sockets = new Map<number, RelayedSocket>();
  private readonly refresher: NodeJS.Timeout;
  private closed = false;
  private creditPending = false;

  private constructor(
    private readonly worker: Worker,
    readonly address: AddressInfo,
    private readonly options: AcceptorOptions,
  ) {
    worker.on('message', (m: FromAcceptor) => this.onMessage(m));
    let failure = '';
    worker.on('error', (err) => (failure = err.message));
    worker.once('exit', (code) => {
      if (this.closed) return;
      this.closed = true;
      clearInterval(this.refresher);
      for (const socket of this.sockets.values()) socket.destroy();
      options.onExit?.(failure || `exit code ${code}`);
    });
    // Refresh well inside the stall limit, so only a main thread that really stopped trips it.
    this.refresher = setInterval(
      () => this.publishHealth(),
      Math.min(HEALTH_REFRESH_MS, (options.healthStallMs ?? HEALTH_STALL_MS) / 4),
    ).unref();
  }

  static start(options: AcceptorOptions): Promise<AcceptorThread> {
    const worker = new Worker(ACCEPTOR_SOURCE, {
      eval: true,
      workerData: {
        host: options.host,
        port: options.port,
        backlog: options.backlog,
        hostNames: [...options.hostNames],
        stallMs: options.healthStallMs ?? HEALTH_STALL_MS,
        admitPerTurn: ADMIT_PER_TURN,
        health: options.health(),
      },
    });
    return new Promise((resolve, reject) => {
      const onMessage = (m: FromAcceptor) => {
        if (m.t === 'listening') {
          worker.off('message', onMessage);
          worker.off('error', onError);
          resolve(new AcceptorThread(worker, m.address, options));
        } else if (m.t === 'error') {
          void worker.terminate();
          reject(new ListenError(m.message, m.code));
        }
      };
      const onError = (err: Error) => reject(err);
      worker.on('message', onMessage);
      worker.once('error', onError);
    });
  }

  /** Sends the current `/health` body to the acceptor (on changes, and every second as a heartbeat). */
  publishHealth(): void {
    if (!this.closed) this.worker.postMessage({ t: 'h', body: this.options.health() });
  }

  private onMessage(m: FromAcceptor): void {
    if (m.t === 'open') {
      const socket = new RelayedSocket(m.id, (message, transfer) => !this.closed && this.worker.postMessage(message, transfer), m);
      this.sockets.set(m.id, socket);
      socket.once('close', () => this.sockets.delete(m.id));
      this.options.onConnection(socket);
      // Grant the next admissions once this loop turn is over.
      if (!this.creditPending) {
        this.creditPending = true;
        setImmediate(() => {
          this.creditPending = false;
          if (!this.closed) this.worker.postMessage({ t: 'c', n: ADMIT_PER_TURN });
        });
      }
    } else if (m.t === 'data') this.sockets.get(m.id)?.received(m.chunk);
    else if (m.t === 'end') this.sockets.get(m.id)?.peerEnded();
    else if (m.t === 'close') this.sockets.get(m.id)?.peerClosedSocket();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    clearInterval(this.refresher);
    for (const socket of this.sockets.values()) socket.destroy();
    this.worker.postMessage({ t: 'x' });
    this.closed = true;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => void this.worker.terminate().then(() => resolve()), 2_000);
      this.worker.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
