// Soak load client, run as its own process: N session slots for a fixed time. Each slot runs one
// session after another with no think time: a session is registered (proxy mode), runs a
// multi-turn agent-style conversation of a random length in one dialect, streaming or not, is
// checked against the proxy's own count of its calls, and ends; the slot then starts the next one,
// so N sessions stay concurrent for the whole run. Latencies are kept per time bucket (by the time
// each call ended). A worker thread polls `/health` meanwhile. Prints one JSON line (a
// SoakLoadResult) on stdout when done.
//
// Dialects (proxy mode): `chat` (OpenAI chat completions) and `anthropic` (Anthropic Messages);
// sessions alternate between the listed ones. In direct and pass-through mode every session sends
// the chat-completions request the proxy would forward (capture fields included, not streamed), so
// the engine does the same work on every path.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { Prng } from '../src/engine/prng.js';
import {
  BASH_TOOL,
  CAPTURE_FIELDS,
  assembleStream,
  errorKind,
  extractMessage,
  filler,
  startHealthPoller,
  type ChatMessage,
  type HealthResult,
  type LoadMode,
} from './load-generator.js';
import { countInto, summarize, type LatencySummary } from './stats.js';

export type SoakDialect = 'chat' | 'anthropic';
export const SOAK_DIALECTS: readonly SoakDialect[] = ['chat', 'anthropic'];

export interface SoakBucket {
  /** Seconds from the start of the run to the start of this bucket. */
  t_start_s: number;
  calls_ok: number;
  errors: Record<string, number>;
  latency: LatencySummary;
  sessions_started: number;
}

export interface SoakLoadResult {
  mode: LoadMode;
  sessions: number;
  duration_ms: number;
  bucket_ms: number;
  calls_ok: number;
  /** Answered calls per dialect and answer kind: chat_json, chat_stream, anthropic_json, anthropic_stream. */
  calls_by_kind: Record<string, number>;
  sessions_started: number;
  /** Sessions that ran every turn they planned (the rest were cut by the end of the run or by an error). */
  sessions_completed: number;
  /** Completed proxy sessions whose `GET /sessions/<id>` count matched the calls this client made. */
  sessions_verified: number;
  errors: Record<string, number>;
  latency: LatencySummary;
  buckets: SoakBucket[];
  health: HealthResult | null;
  /** Calls that ended after the warm-up (`--warmup-ms`). */
  after_warmup: LatencySummary;
  /** When the run's clock started (epoch ms), to line other samples up with the buckets. */
  started_at_ms: number;
  wall_ms: number;
  client_loop_delay_p99_ms: number;
  /** Raw latencies of the calls after the warm-up (with --keep-samples), so runs can be pooled. */
  samples_ms?: number[];
}

export interface SoakLoadOptions {
  mode: LoadMode;
  url: string;
  sessions: number;
  durationMs: number;
  bucketMs: number;
  /** Turns per session, drawn uniformly from [min, max]. */
  turns: [number, number];
  model: string;
  rampMs: number;
  systemBytes: number;
  streamShare: number;
  dialects: SoakDialect[];
  healthUrl?: string;
  healthIntervalMs: number;
  timeoutMs: number;
  keepSamples: boolean;
  seed: number;
  warmupMs: number;
  /**
   * Calls started per second across all sessions (0: as fast as answers come back). A paced run puts
   * a path under a given load instead of under whatever load it can sustain: see soak.ts's baseline.
   */
  ratePerS?: number;
}

interface AnthropicBlock {
  type: string;
  text?: string;
  id?: string;
  name?: string;
  input?: unknown;
  thinking?: string;
  signature?: string;
}

interface AnthropicMessage {
  role: 'user' | 'assistant';
  content: string | AnthropicBlock[] | { type: 'tool_result'; tool_use_id: string; content: string }[];
}

const ANTHROPIC_TOOL = {
  name: BASH_TOOL.function.name,
  description: BASH_TOOL.function.description,
  input_schema: BASH_TOOL.function.parameters,
};

/** Anthropic's JSON answer: the content blocks, or undefined if it is not an assistant message. */
function anthropicBlocks(text: string): AnthropicBlock[] | undefined {
  const body = JSON.parse(text) as { type?: string; role?: string; content?: AnthropicBlock[] };
  return body.type === 'message' && body.role === 'assistant' && Array.isArray(body.content) ? body.content : undefined;
}

/** Joins an Anthropic Messages SSE stream back into its content blocks; undefined without message_stop or on an error event. */
export function assembleAnthropicStream(text: string): AnthropicBlock[] | undefined {
  const blocks: AnthropicBlock[] = [];
  const partialJson: string[] = [];
  let stopped = false;
  for (const frame of text.split('\n\n')) {
    const data = frame
      .split('\n')
      .find((l) => l.startsWith('data: '))
      ?.slice(6);
    if (!data) continue;
    const event = JSON.parse(data) as {
      type: string;
      index?: number;
      content_block?: AnthropicBlock;
      delta?: { type: string; text?: string; partial_json?: string; thinking?: string; signature?: string };
    };
    if (event.type === 'error') return undefined;
    if (event.type === 'message_stop') stopped = true;
    if (event.type === 'content_block_start' && event.content_block && event.index !== undefined) {
      blocks[event.index] = { ...event.content_block };
      partialJson[event.index] = '';
    }
    if (event.type === 'content_block_delta' && event.delta && event.index !== undefined) {
      const block = blocks[event.index];
      if (!block) return undefined;
      const d = event.delta;
      if (d.type === 'text_delta') block.text = (block.text ?? '') + (d.text ?? '');
      else if (d.type === 'input_json_delta') partialJson[event.index] += d.partial_json ?? '';
      else if (d.type === 'thinking_delta') block.thinking = (block.thinking ?? '') + (d.thinking ?? '');
      else if (d.type === 'signature_delta') block.signature = d.signature;
    }
  }
  if (!stopped) return undefined;
  blocks.forEach((block, i) => {
    if (block.type === 'tool_use') block.input = partialJson[i] ? JSON.parse(partialJson[i]!) : {};
  });
  return blocks;
}

export async function runSoakLoad(o: SoakLoadOptions): Promise<SoakLoadResult> {
  if (o.mode !== 'proxy' && o.dialects.some((d) => d !== 'chat')) throw new Error(`${o.mode} mode speaks the engine's dialect only (chat)`);
  const agent = new Agent({
    connections: o.sessions + 8,
    pipelining: 1,
    headersTimeout: o.timeoutMs,
    bodyTimeout: o.timeoutMs,
    keepAliveTimeout: 60_000,
    connectTimeout: o.timeoutMs,
  });
  const system = filler('System prompt', o.systemBytes);
  const toolOutput = filler('Output of bash', 600);
  // Whole buckets only: calls that end in a last partial bucket (or after the deadline) count in the last whole one.
  const nBuckets = Math.max(1, Math.floor(o.durationMs / o.bucketMs));
  const bucketLatencies: number[][] = Array.from({ length: nBuckets }, () => []);
  const bucketErrors: Record<string, number>[] = Array.from({ length: nBuckets }, () => ({}));
  const bucketStarts = new Array<number>(nBuckets).fill(0);
  const errors: Record<string, number> = {};
  const callsByKind: Record<string, number> = {};
  const all: number[] = [];
  const afterWarmup: number[] = [];
  let started = 0;
  let completed = 0;
  let verified = 0;

  const t0 = performance.now();
  const startedAtMs = Date.now();
  const deadline = t0 + o.durationMs;
  const bucketOf = (t: number) => Math.min(nBuckets - 1, Math.max(0, Math.floor((t - t0) / o.bucketMs)));
  const fail = (kind: string) => {
    countInto(errors, kind);
    countInto(bucketErrors[bucketOf(performance.now())]!, kind);
  };
  const jsonHeaders = (key?: string): Record<string, string> => ({
    'content-type': 'application/json',
    ...(key ? { authorization: `Bearer ${key}` } : {}),
  });

  /** One HTTP exchange; the body text, or undefined after counting the failure. */
  const exchange = async (
    path: string,
    method: 'GET' | 'POST',
    body: string | undefined,
    key: string | undefined,
    okStatus: number,
    prefix = '',
  ): Promise<string | undefined> => {
    try {
      const res = await request(`${o.url}${path}`, { method, dispatcher: agent, headers: jsonHeaders(key), body });
      const text = await res.body.text();
      if (res.statusCode !== okStatus) {
        fail(`${prefix}http_${res.statusCode}`);
        return undefined;
      }
      return text;
    } catch (err) {
      fail(`${prefix}${errorKind(err)}`);
      return undefined;
    }
  };

  // Pacing: call starts are spaced 1/rate apart; a session waits for its slot before its clock
  // starts, so the wait is arrival time, not latency. No credit builds up while calls are slow.
  // A slot that falls after the deadline is not used (the session loops check the deadline after
  // waiting), so a paced phase starts at most rate x duration + 1 calls.
  let nextStart = 0;
  const pace = async () => {
    if (!o.ratePerS) return;
    const now = performance.now();
    const at = Math.max(now, nextStart);
    nextStart = at + 1000 / o.ratePerS;
    if (at > now) await new Promise((r) => setTimeout(r, at - now));
  };

  const timed = async (
    path: string,
    payload: string,
    key: string | undefined,
    kind: string,
    read: (text: string) => boolean,
  ): Promise<boolean> => {
    const start = performance.now();
    const text = await exchange(path, 'POST', payload, key, 200);
    if (text === undefined) return false;
    const end = performance.now();
    let ok = false;
    try {
      ok = read(text);
    } catch {
      ok = false;
    }
    if (!ok) {
      fail('bad_answer');
      return false;
    }
    const ms = end - start;
    bucketLatencies[bucketOf(end)]!.push(ms);
    if (end - t0 >= o.warmupMs) {
      afterWarmup.push(ms);
      if (o.keepSamples) all.push(Math.round(ms * 10) / 10);
    }
    countInto(callsByKind, kind);
    return true;
  };

  /** One chat-completions conversation; returns the calls answered. */
  const chatSession = async (n: number, turns: number, stream: boolean, key: string | undefined): Promise<number> => {
    const messages: ChatMessage[] = [
      { role: 'system', content: system },
      { role: 'user', content: `Task ${n}: make the failing test in tests/test_parser.py pass. Use the bash tool.` },
    ];
    const kind = `chat_${stream ? 'stream' : 'json'}`;
    for (let turn = 0; turn < turns; turn++) {
      // Paced: wait for this call's slot first; a slot past the deadline means the call is not made.
      await pace();
      if (performance.now() >= deadline) return turn;
      const body =
        o.mode === 'proxy'
          ? { model: 'bench/agent-model', messages, tools: [BASH_TOOL], temperature: 0.7, stream }
          : { model: o.model, messages, tools: [BASH_TOOL], temperature: 0.7, ...CAPTURE_FIELDS };
      let answer: ChatMessage | undefined;
      const ok = await timed('/v1/chat/completions', JSON.stringify(body), key, kind, (text) =>
        Boolean((answer = stream ? assembleStream(text) : extractMessage(text))),
      );
      if (!ok || !answer) return -1;
      messages.push({
        role: 'assistant',
        content: answer.content ?? null,
        ...(answer.tool_calls?.length ? { tool_calls: answer.tool_calls } : {}),
      });
      const toolCall = answer.tool_calls?.[0];
      if (toolCall) messages.push({ role: 'tool', tool_call_id: toolCall.id, content: toolOutput });
      else messages.push({ role: 'user', content: `Good. Now continue with step ${turn + 2}: run the full test suite and report.` });
    }
    return turns;
  };

  /** One Anthropic Messages conversation (proxy mode only); returns the calls answered. */
  const anthropicSession = async (n: number, turns: number, stream: boolean, key: string | undefined): Promise<number> => {
    const messages: AnthropicMessage[] = [
      { role: 'user', content: `Task ${n}: make the failing test in tests/test_parser.py pass. Use the bash tool.` },
    ];
    const kind = `anthropic_${stream ? 'stream' : 'json'}`;
    for (let turn = 0; turn < turns; turn++) {
      await pace();
      if (performance.now() >= deadline) return turn;
      const body = { model: 'bench/agent-model', max_tokens: 1024, system, messages, tools: [ANTHROPIC_TOOL], temperature: 0.7, stream };
      let blocks: AnthropicBlock[] | undefined;
      const ok = await timed('/v1/messages', JSON.stringify(body), key, kind, (text) =>
        Boolean((blocks = stream ? assembleAnthropicStream(text) : anthropicBlocks(text))),
      );
      if (!ok || !blocks) return -1;
      messages.push({ role: 'assistant', content: blocks });
      const toolUse = blocks.find((b) => b.type === 'tool_use');
      if (toolUse?.id) messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: toolUse.id, content: toolOutput }] });
      else messages.push({ role: 'user', content: `Good. Now continue with step ${turn + 2}: run the full test suite and report.` });
    }
    return turns;
  };

  const slot = async (index: number) => {
    await new Promise((r) => setTimeout(r, (o.rampMs * index) / o.sessions));
    while (performance.now() < deadline) {
      const n = started++;
      bucketStarts[bucketOf(performance.now())]!++;
      // Each session's shape comes from its own number, so every path runs the same sessions.
      const rng = new Prng(o.seed * 1_000_003 + n);
      const turns = o.turns[0] + Math.floor(rng.next() * (o.turns[1] - o.turns[0] + 1));
      const dialect = o.dialects[n % o.dialects.length]!;
      const stream = o.mode === 'proxy' && rng.next() < o.streamShare;
      let key: string | undefined;
      let id: string | undefined;
      if (o.mode === 'proxy') {
        const text = await exchange(
          '/sessions',
          'POST',
          JSON.stringify({ metadata: { bench: 'soak', session: n, dialect, stream } }),
          undefined,
          201,
          'create_session_',
        );
        id = text === undefined ? undefined : (JSON.parse(text) as { session_id?: string }).session_id;
        if (!id) {
          if (text !== undefined) fail('create_session_no_id');
          // Do not spin on a proxy that refuses sessions.
          await new Promise((r) => setTimeout(r, 100));
          continue;
        }
        key = id;
      }
      const answered = dialect === 'anthropic' ? await anthropicSession(n, turns, stream, key) : await chatSession(n, turns, stream, key);
      if (answered !== turns) continue; // cut by the deadline, or ended by a failed call
      completed++;
      if (id !== undefined) {
        // The session ends: its count of calls must be what this client was answered.
        const text = await exchange(`/sessions/${id}`, 'GET', undefined, undefined, 200, 'summary_');
        if (text === undefined) continue;
        const summary = JSON.parse(text) as { n_calls?: number; turns?: number };
        if (summary.n_calls !== turns || summary.turns !== turns) fail('summary_mismatch');
        else verified++;
      }
    }
  };

  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const health = o.healthUrl ? startHealthPoller(o.healthUrl, o.healthIntervalMs, 5_000) : undefined;
  await Promise.all(Array.from({ length: o.sessions }, (_, i) => slot(i)));
  const wall = performance.now() - t0;
  loop.disable();
  const healthResult = health ? await health.stop() : null;
  await agent.close();
  const buckets: SoakBucket[] = bucketLatencies.map((latencies, i) => ({
    t_start_s: Math.round((i * o.bucketMs) / 100) / 10,
    calls_ok: latencies.length,
    errors: bucketErrors[i]!,
    latency: summarize(latencies),
    sessions_started: bucketStarts[i] ?? 0,
  }));
  if (healthResult) delete healthResult.samples_ms;
  return {
    mode: o.mode,
    sessions: o.sessions,
    duration_ms: o.durationMs,
    bucket_ms: o.bucketMs,
    calls_ok: buckets.reduce((n, b) => n + b.calls_ok, 0),
    calls_by_kind: callsByKind,
    sessions_started: started,
    sessions_completed: completed,
    sessions_verified: verified,
    errors,
    latency: summarize(bucketLatencies.flat()),
    buckets,
    health: healthResult,
    after_warmup: summarize(afterWarmup),
    started_at_ms: startedAtMs,
    wall_ms: Math.round(wall),
    client_loop_delay_p99_ms: Math.round(loop.percentile(99) / 1e5) / 10,
    ...(o.keepSamples ? { samples_ms: all } : {}),
  };
}

function nonNegativeInt(text: string, name: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer, got '${text}'`);
  return n;
}

function nonNegativeNumber(text: string, name: string): number {
  const n = Number(text);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} must be a number >= 0, got '${text}'`);
  return n;
}

export function parseTurnRange(text: string): [number, number] {
  const parts = text.split(',').map((p) => Number(p.trim()));
  const [min, max] = parts.length === 1 ? [parts[0]!, parts[0]!] : [parts[0]!, parts[1]!];
  if (parts.length > 2 || !Number.isInteger(min) || !Number.isInteger(max) || min < 1 || max < min)
    throw new Error(`--turns must be "N" or "min,max" with 1 <= min <= max, got '${text}'`);
  return [min, max];
}

export function parseDialects(text: string): SoakDialect[] {
  const list = text.split(',').map((d) => d.trim());
  const bad = list.filter((d) => !SOAK_DIALECTS.includes(d as SoakDialect));
  if (list.length === 0 || bad.length)
    throw new Error(`--dialects must be a comma-separated list of ${SOAK_DIALECTS.join(', ')}, got '${text}'`);
  return list as SoakDialect[];
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      mode: { type: 'string' },
      url: { type: 'string' },
      sessions: { type: 'string', default: '100' },
      'duration-ms': { type: 'string', default: '60000' },
      'bucket-ms': { type: 'string', default: '60000' },
      turns: { type: 'string', default: '2,10' },
      model: { type: 'string', default: 'fake/qwen3-tiny' },
      'ramp-ms': { type: 'string', default: '1000' },
      'system-bytes': { type: 'string', default: '2000' },
      'stream-share': { type: 'string', default: '0.5' },
      dialects: { type: 'string', default: 'chat' },
      'health-url': { type: 'string' },
      'health-interval-ms': { type: 'string', default: '50' },
      'timeout-ms': { type: 'string', default: '120000' },
      'keep-samples': { type: 'boolean', default: false },
      seed: { type: 'string', default: '1' },
      'warmup-ms': { type: 'string', default: '0' },
      rate: { type: 'string', default: '0' },
    },
  });
  const mode = values.mode as LoadMode;
  if (!['direct', 'passthrough', 'proxy'].includes(mode) || !values.url)
    throw new Error(
      'usage: soak-load.ts --mode direct|passthrough|proxy --url URL [--sessions N] [--duration-ms MS] [--turns min,max] [--dialects chat,anthropic]',
    );
  const result = await runSoakLoad({
    mode,
    url: values.url.replace(/\/+$/, ''),
    sessions: Math.max(1, nonNegativeInt(values.sessions, 'sessions')),
    durationMs: nonNegativeInt(values['duration-ms'], 'duration-ms'),
    bucketMs: Math.max(1, nonNegativeInt(values['bucket-ms'], 'bucket-ms')),
    turns: parseTurnRange(values.turns),
    model: values.model,
    rampMs: nonNegativeInt(values['ramp-ms'], 'ramp-ms'),
    systemBytes: nonNegativeInt(values['system-bytes'], 'system-bytes'),
    streamShare: Number(values['stream-share']),
    dialects: parseDialects(values.dialects),
    healthUrl: values['health-url'],
    healthIntervalMs: nonNegativeInt(values['health-interval-ms'], 'health-interval-ms'),
    timeoutMs: nonNegativeInt(values['timeout-ms'], 'timeout-ms'),
    keepSamples: values['keep-samples'],
    seed: nonNegativeInt(values.seed, 'seed'),
    warmupMs: nonNegativeInt(values['warmup-ms'], 'warmup-ms'),
    ratePerS: nonNegativeNumber(values.rate, 'rate'),
  });
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

if (process.argv[1]?.endsWith('soak-load.ts')) {
  main().catch((err: unknown) => {
    process.stderr.write(`soak load: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
}
