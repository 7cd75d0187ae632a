// Fixtures for the fault matrix: an engine that misbehaves on request, one SDK client per dialect
// behind a common call shape, and small tmpfs mounts for a full or read-only data dir.
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { ApiError, GoogleGenAI } from '@google/genai';
import OpenAI from 'openai';
import { buildFakeCompletion } from '../../src/engine/fake-engine.js';
import type { ChatRequest } from '../../src/capture/types.js';

export type EngineFault = 'ok' | '500' | '400' | 'slow' | 'truncated' | 'reset';

/** Faults are chosen by a marker in the last message: `fault:500`, `fault:slow`, ... */
export function faultOf(request: ChatRequest): EngineFault {
  const last = JSON.stringify(request.messages.at(-1)?.content ?? '');
  const m = /fault:(500|400|slow|truncated|reset)/.exec(last);
  return (m?.[1] as EngineFault | undefined) ?? 'ok';
}

export interface FaultyEngine {
  url: string;
  model: string;
  slowMs: number;
  /** Stops listening and drops every connection: the engine is down. */
  stop(): Promise<void>;
  /** Listens again on the same port. */
  start(): Promise<void>;
  close(): Promise<void>;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** A vLLM-shaped engine (the fake engine's answers) that fails on request. */
export async function startFaultyEngine(opts: { slowMs?: number; requireKey?: string } = {}): Promise<FaultyEngine> {
  const model = 'fake/qwen3-tiny';
  const slowMs = opts.slowMs ?? 1500;
  const sockets = new Set<Socket>();
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const send = (status: number, body: unknown) => {
      const text = JSON.stringify(body);
      res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
      res.end(text);
    };
    if (opts.requireKey && req.headers.authorization !== `Bearer ${opts.requireKey}`)
      return send(401, { object: 'error', message: 'missing or wrong engine API key', code: 401 });
    if (req.method === 'GET' && req.url?.startsWith('/v1/models'))
      return send(200, { object: 'list', data: [{ id: model, object: 'model' }] });
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') return send(404, { object: 'error', message: 'no route' });
    const request = JSON.parse(await readBody(req)) as ChatRequest;
    const fault = faultOf(request);
    if (fault === '500') return send(500, { object: 'error', message: 'CUDA out of memory', type: 'InternalServerError', code: 500 });
    if (fault === '400')
      return send(400, {
        object: 'error',
        message: 'This model does not support the requested feature',
        type: 'BadRequestError',
        code: 400,
      });
    if (fault === 'slow') await new Promise((r) => setTimeout(r, slowMs));
    const text = JSON.stringify(buildFakeCompletion(request, {}, model));
    if (fault === 'truncated') {
      // A complete HTTP answer whose JSON stops half way (a proxy in between cut it, or the engine died while serialising).
      const cut = text.slice(0, Math.floor(text.length / 2));
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(cut) });
      return res.end(cut);
    }
    if (fault === 'reset') {
      // Headers and part of the body, then the connection is reset.
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
      res.write(text.slice(0, 200));
      setTimeout(() => res.socket?.resetAndDestroy(), 20);
      return;
    }
    send(200, JSON.parse(text));
  };
  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy());
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  let port = 0;
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        port = (server.address() as AddressInfo).port;
        resolve();
      });
    });
  const stop = () =>
    new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    });
  await listen();
  return {
    url: `http://127.0.0.1:${port}`,
    model,
    slowMs,
    stop,
    start: listen,
    close: async () => {
      if (server.listening) await stop();
    },
  };
}

// ---- one SDK client per dialect ----

export interface CallOptions {
  stream?: boolean;
  timeoutMs?: number;
  /** Aborted by the caller once the stream's headers arrived (a harness that goes away mid-stream). */
  abortAfterHeaders?: boolean;
}

/** How a call ended, as the harness saw it. */
export type Outcome =
  | { ok: true; text: string }
  | { ok: false; status: number | undefined; message: string; kind: 'api' | 'timeout' | 'aborted' | 'connection' };

export interface DialectClient {
  name: string;
  /** The dialect name calls are recorded under. */
  recorded: string;
  call(proxyUrl: string, key: string, content: string, opts?: CallOptions): Promise<Outcome>;
}

function classify(err: unknown): Outcome {
  if (err instanceof OpenAI.APIUserAbortError || err instanceof Anthropic.APIUserAbortError)
    return { ok: false, status: undefined, message: err.message, kind: 'aborted' };
  if (err instanceof OpenAI.APIConnectionTimeoutError || err instanceof Anthropic.APIConnectionTimeoutError)
    return { ok: false, status: undefined, message: err.message, kind: 'timeout' };
  if (err instanceof OpenAI.APIError || err instanceof Anthropic.APIError) {
    if (err.status === undefined) return { ok: false, status: undefined, message: err.message, kind: 'connection' };
    return { ok: false, status: err.status, message: err.message, kind: 'api' };
  }
  if (err instanceof ApiError) return { ok: false, status: err.status, message: err.message, kind: 'api' };
  const e = err as Error;
  if (e?.name === 'AbortError' || /abort/i.test(e?.message ?? ''))
    return { ok: false, status: undefined, message: e.message, kind: /timeout|timed out/i.test(e.message) ? 'timeout' : 'aborted' };
  return { ok: false, status: undefined, message: String(e?.message ?? err), kind: 'connection' };
}

async function settle(run: (signal: AbortSignal, headersArrived: () => void) => Promise<string>, opts: CallOptions): Promise<Outcome> {
  const controller = new AbortController();
  try {
    const text = await run(controller.signal, () => {
      if (opts.abortAfterHeaders) controller.abort();
    });
    return { ok: true, text };
  } catch (err) {
    return classify(err);
  }
}

export const DIALECT_CLIENTS: DialectClient[] = [
  {
    name: 'openai chat',
    recorded: 'openai_chat',
    call: (proxyUrl, key, content, opts = {}) =>
      settle(async (signal, headersArrived) => {
        const client = new OpenAI({
          baseURL: `${proxyUrl}/v1`,
          apiKey: key,
          maxRetries: 0,
          ...(opts.timeoutMs ? { timeout: opts.timeoutMs } : {}),
        });
        const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content }];
        if (!opts.stream)
          return (await client.chat.completions.create({ model: 'm', messages }, { signal })).choices[0]?.message.content ?? '';
        const stream = await client.chat.completions.create({ model: 'm', messages, stream: true }, { signal });
        headersArrived();
        let text = '';
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
        return text;
      }, opts),
  },
  {
    name: 'openai responses',
    recorded: 'openai_responses',
    call: (proxyUrl, key, content, opts = {}) =>
      settle(async (signal, headersArrived) => {
        const client = new OpenAI({
          baseURL: `${proxyUrl}/v1`,
          apiKey: key,
          maxRetries: 0,
          ...(opts.timeoutMs ? { timeout: opts.timeoutMs } : {}),
        });
        if (!opts.stream) return (await client.responses.create({ model: 'gpt-codex', input: content }, { signal })).output_text;
        const stream = await client.responses.create({ model: 'gpt-codex', input: content, stream: true }, { signal });
        headersArrived();
        let text = '';
        for await (const event of stream) if (event.type === 'response.output_text.delta') text += event.delta;
        return text;
      }, opts),
  },
  {
    name: '@anthropic-ai/sdk',
    recorded: 'anthropic_messages',
    call: (proxyUrl, key, content, opts = {}) =>
      settle(async (signal, headersArrived) => {
        const client = new Anthropic({
          baseURL: proxyUrl,
          apiKey: key,
          maxRetries: 0,
          ...(opts.timeoutMs ? { timeout: opts.timeoutMs } : {}),
        });
        const params = { model: 'claude-test', max_tokens: 256, messages: [{ role: 'user' as const, content }] };
        if (!opts.stream) {
          const message = await client.messages.create(params, { signal });
          return message.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
        }
        const stream = await client.messages.create({ ...params, stream: true }, { signal });
        headersArrived();
        let text = '';
        for await (const event of stream)
          if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
        return text;
      }, opts),
  },
  {
    name: '@google/genai',
    recorded: 'google_gemini',
    call: (proxyUrl, key, content, opts = {}) =>
      settle(async (signal, headersArrived) => {
        const ai = new GoogleGenAI({
          apiKey: key,
          httpOptions: { baseUrl: proxyUrl, ...(opts.timeoutMs ? { timeout: opts.timeoutMs } : {}) },
        });
        const config = { abortSignal: signal };
        if (!opts.stream) return (await ai.models.generateContent({ model: 'gemini-test', contents: content, config })).text ?? '';
        const stream = await ai.models.generateContentStream({ model: 'gemini-test', contents: content, config });
        headersArrived();
        let text = '';
        for await (const chunk of stream) text += chunk.text ?? '';
        return text;
      }, opts),
  },
];

// ---- small file systems for disk-full and read-only faults (root only) ----

export interface SmallDisk {
  dir: string;
  /** Writes a filler file until the file system has no space left. */
  fill(): void;
  /** Removes the filler. */
  free(): void;
  readOnly(on: boolean): void;
  unmount(): void;
}

/** A tmpfs of `sizeKiB`; tests that need it fail (not skip) when not run as root. */
export function mountSmallDisk(sizeKiB: number): SmallDisk {
  if (process.getuid?.() !== 0)
    throw new Error(
      'the disk-full and read-only fault tests mount a small tmpfs and need root (run the suite as root, or in the CI container)',
    );
  const dir = mkdtempSync(join(tmpdir(), 'hl-smalldisk-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeKiB}k,mode=0755`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `could not mount a ${sizeKiB} KiB tmpfs at ${dir} for the disk-full and read-only fault tests (they need root with CAP_SYS_ADMIN, e.g. a privileged CI container): ${(err as Error).message}`,
    );
  }
  const filler = join(dir, 'filler.bin');
  let mounted = true;
  return {
    dir,
    fill() {
      const fd = openSync(filler, 'a');
      const chunk = Buffer.alloc(64 * 1024, 1);
      try {
        for (;;) writeSync(fd, chunk);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
      }
      // Short writes can leave a few bytes; fill them one by one.
      try {
        for (;;) writeSync(fd, chunk, 0, 1);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
      } finally {
        closeSync(fd);
      }
    },
    free() {
      rmSync(filler, { force: true });
    },
    readOnly(on) {
      execFileSync('mount', ['-o', `remount,${on ? 'ro' : 'rw'}`, dir]);
    },
    unmount() {
      if (!mounted) return;
      mounted = false;
      execFileSync('umount', ['-l', dir]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
