// The proxy's renderer off its event loop: a bounded pool of tokenizer threads
// (tokenizer-worker.ts), each holding the model's vocabulary and its piece cache. Building a
// Qwen-sized vocabulary takes seconds and tokenizing a 128k-token conversation from scratch about
// two; on the main thread either would stall every session's calls. The chat template is also kept
// here, to render the bridge's small stand-in conversations without a round trip. One pool per model
// path per process, shared by the proxies that use it and ended when the last one lets go.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { idList } from '../token-ids.js';
import type { ChatMessage, ChatTool } from '../types.js';
import { ChatTemplate } from './chat-template.js';
import type { FamilyInfo } from './families.js';
import type { ParsedAnswer, RenderComparison, RendererDescription, RenderTextOptions, TokenRenderer } from './renderer.js';
import type { SegmentCacheStats } from './segment-cache.js';
import type { WorkerReply } from './tokenizer-worker.js';

export class RenderWorkerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RenderWorkerError';
  }
}

/** The worker's file: next to the bundle (dist/tokenizer-worker.js) or, from source (tsx), the .ts. */
export function tokenizerWorkerFile(): string {
  return __filename.endsWith('.ts') ? join(__dirname, 'tokenizer-worker.ts') : join(__dirname, 'tokenizer-worker.js');
}

interface Pending {
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

class WorkerHandle {
  readonly pending = new Map<number, Pending>();
  failure: string | null = null;

  constructor(readonly worker: Worker) {
    worker.on('message', (m: WorkerReply) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.ok) p.resolve(m.value);
      else p.reject(new RenderWorkerError(m.message));
    });
    const fail = (why: string) => {
      this.failure ??= why;
      for (const p of this.pending.values()) p.reject(new RenderWorkerError(`the tokenizer thread ended: ${why}`));
      this.pending.clear();
    };
    worker.on('error', (err) => fail(err.message));
    worker.on('exit', (code) => fail(`exit code ${code}`));
  }
}

export interface RenderWorkersOptions {
  /** Tokenizer threads (default 1; each holds its own vocabulary and cache). */
  size?: number;
}

export class RenderWorkers implements TokenRenderer {
  readonly family: FamilyInfo;
  readonly stopIds: readonly number[];
  readonly source: string;
  readonly templateDigest: string;
  readonly turnCloseText: string;
  readonly turnCloseId: number | null;
  private readonly template: ChatTemplate;
  private nextId = 1;
  private disposed = false;

  private constructor(
    private readonly handles: WorkerHandle[],
    private readonly description: RendererDescription,
  ) {
    this.family = description.family;
    this.stopIds = description.stopIds;
    this.source = description.source;
    this.templateDigest = description.templateDigest;
    this.turnCloseText = description.eosToken;
    this.turnCloseId = description.turnCloseId;
    this.template = new ChatTemplate(description.chatTemplate);
  }

  /** Starts the threads and waits until each has loaded the model folder or GGUF at `path`. */
  static async load(path: string, options: RenderWorkersOptions = {}): Promise<RenderWorkers> {
    const file = tokenizerWorkerFile();
    if (!existsSync(file)) throw new RenderWorkerError(`the tokenizer thread's code is missing (${file}); rebuild (npm run build)`);
    const size = Math.max(1, Math.min(8, Math.floor(options.size ?? 1)));
    const started = Array.from({ length: size }, () => startWorker(file, path));
    const settled = await Promise.allSettled(started);
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) {
      for (const s of settled) if (s.status === 'fulfilled') void s.value.worker.terminate();
      throw failed.reason as Error;
    }
    const ready = settled.map((s) => (s as PromiseFulfilledResult<{ worker: Worker; description: RendererDescription }>).value);
    return new RenderWorkers(
      ready.map((r) => new WorkerHandle(r.worker)),
      ready[0]!.description,
    );
  }

  get size(): number {
    return this.handles.length;
  }

  renderText(messages: ChatMessage[], opts: RenderTextOptions = {}): string {
    return this.template.render(messages, {
      tools: opts.tools,
      kwargs: opts.kwargs,
      addGenerationPrompt: opts.addGenerationPrompt ?? true,
      bosToken: this.description.bosToken,
      eosToken: this.description.eosToken,
    });
  }

  async encode(text: string): Promise<number[]> {
    if (text === '') return [];
    return idList((await this.call({ op: 'encode', text })) as Int32Array);
  }

  async renderIds(messages: ChatMessage[], opts: RenderTextOptions = {}): Promise<number[]> {
    return idList((await this.call({ op: 'renderIds', messages, opts })) as Int32Array);
  }

  /** The thread renders, tokenizes and compares: a 108k-id render never becomes a JS array here. */
  async compareRender(messages: ChatMessage[], opts: RenderTextOptions, ids: readonly number[]): Promise<RenderComparison> {
    const list = Int32Array.from(ids);
    return (await this.call({ op: 'compareRender', messages, opts, ids: list }, [list.buffer])) as RenderComparison;
  }

  async parseAnswer(ids: readonly number[], opts: { tools?: ChatTool[] | undefined; parseToolCalls: boolean }): Promise<ParsedAnswer> {
    const list = Int32Array.from(ids);
    return (await this.call({ op: 'parse', ids: list, tools: opts.tools, parseToolCalls: opts.parseToolCalls }, [
      list.buffer,
    ])) as ParsedAnswer;
  }

  /** Each thread's piece-cache counters. */
  async cacheStats(): Promise<SegmentCacheStats[]> {
    return (await Promise.all(this.handles.map((h) => this.callOn(h, { op: 'stats' })))) as SegmentCacheStats[];
  }

  /** The least busy live thread (the first on a tie, so one conversation's pieces tend to stay on one cache). */
  private call(req: Record<string, unknown>, transfer: ArrayBuffer[] = []): Promise<unknown> {
    if (this.disposed) return Promise.reject(new RenderWorkerError('the renderer was disposed'));
    let best: WorkerHandle | null = null;
    for (const h of this.handles) if (h.failure === null && (!best || h.pending.size < best.pending.size)) best = h;
    if (!best) return Promise.reject(new RenderWorkerError(`every tokenizer thread has ended (${this.handles[0]?.failure ?? 'disposed'})`));
    return this.callOn(best, req, transfer);
  }

  private callOn(h: WorkerHandle, req: Record<string, unknown>, transfer: ArrayBuffer[] = []): Promise<unknown> {
    if (this.disposed) return Promise.reject(new RenderWorkerError('the renderer was disposed'));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      h.pending.set(id, { resolve, reject });
      h.worker.postMessage({ ...req, id }, transfer);
    });
  }

  /** Ends the threads; calls still waiting are refused. */
  async close(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    await Promise.all(this.handles.map((h) => h.worker.terminate()));
  }
}

function startWorker(file: string, path: string): Promise<{ worker: Worker; description: RendererDescription }> {
  // From source (tests, bench under tsx) the .ts worker needs tsx's loader, which a worker thread
  // does not inherit; the bundle's worker is plain JavaScript.
  const worker = file.endsWith('.ts')
    ? new Worker(`require('tsx/cjs/api').register(); require(${JSON.stringify(file)});`, { eval: true, workerData: { path } })
    : new Worker(file, { workerData: { path } });
  // The threads never keep a process alive by themselves; their owner closes them.
  worker.unref();
  return new Promise((resolve, reject) => {
    const onMessage = (m: { t?: string; description?: RendererDescription; message?: string }) => {
      if (m.t === 'ready' && m.description) {
        cleanup();
        resolve({ worker, description: m.description });
      } else if (m.t === 'error') {
        cleanup();
        void worker.terminate();
        reject(new RenderWorkerError(m.message ?? 'the tokenizer thread could not load the model'));
      }
    };
    const onError = (err: Error) => {
      cleanup();
      reject(new RenderWorkerError(`the tokenizer thread failed to start: ${err.message}`));
    };
    const onExit = (code: number) => {
      cleanup();
      reject(new RenderWorkerError(`the tokenizer thread exited (${code}) before loading ${path}`));
    };
    const cleanup = () => {
      worker.off('message', onMessage);
      worker.off('error', onError);
      worker.off('exit', onExit);
    };
    worker.on('message', onMessage);
    worker.on('error', onError);
    worker.on('exit', onExit);
  });
}

/** One pool per model path in this process, counted by its users; the last release closes it. */
const shared = new Map<string, { pool: Promise<RenderWorkers>; users: number }>();

export interface RendererLease {
  renderer: RenderWorkers;
  release(): Promise<void>;
}

export async function acquireRenderWorkers(path: string, options: RenderWorkersOptions = {}): Promise<RendererLease> {
  let entry = shared.get(path);
  if (!entry) {
    entry = { pool: RenderWorkers.load(path, options), users: 0 };
    shared.set(path, entry);
    const mine = entry;
    mine.pool.catch(() => {
      if (shared.get(path) === mine) shared.delete(path);
    });
  }
  entry.users++;
  let renderer: RenderWorkers;
  try {
    renderer = await entry.pool;
  } catch (err) {
    entry.users--;
    throw err;
  }
  const held = entry;
  let released = false;
  return {
    renderer,
    release: async () => {
      if (released) return;
      released = true;
      if (--held.users > 0) return;
      if (shared.get(path) === held) shared.delete(path);
      await renderer.close();
    },
  };
}
