// Load generator, run as its own process: N concurrent sessions, each a multi-turn agent-style
// chat-completions conversation with growing history, timing every call; a worker thread polls
// `/health` meanwhile. Prints one JSON line (a LoadResult) on stdout when done.
//
// Modes:
//   direct, passthrough  POST <url>/v1/chat/completions with the request the proxy would forward
//                        (capture fields included), so the engine does the same work on every path.
//   proxy                POST <url>/sessions once per session, then harness-style requests with the
//                        session id as Bearer key; a share of the sessions asks for SSE streams.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Worker } from 'node:worker_threads';
import { Agent, request } from 'undici';
import { countInto, summarize, type LatencySummary } from './stats.js';

/** pipe: the byte-piping pass-through; passthrough: the one that parses (see passthrough.ts). Neither asks for SSE. */
export type LoadMode = 'direct' | 'pipe' | 'passthrough' | 'proxy';

export interface HealthResult {
  url: string;
  polls: number;
  errors: Record<string, number>;
  latency: LatencySummary;
  /** Raw latencies, so runs can be merged; the orchestrator drops them from its report. */
  samples_ms?: number[];
}

export interface LoadResult {
  mode: LoadMode;
  sessions: number;
  turns: number;
  /** How many runs were pooled into this result (1 for a single run). */
  runs?: number;
  /** Connections the kernel dropped on full listen queues during the run (set by the orchestrator). */
  listen_overflows?: number;
  calls_ok: number;
  errors: Record<string, number>;
  latency: LatencySummary;
  /**
   * Calls after a session's first: their connections are already open. The first call of every
   * session also pays for connection setup (two of them through a hop), which on a busy VM costs
   * more than the hop itself.
   */
  later_turns: LatencySummary;
  health: HealthResult | null;
  wall_ms: number;
  /** Event-loop delay of the load generator itself: if high, the client (not the server) was slow. */
  client_loop_delay_p99_ms: number;
  /** Raw call latencies, so runs can be merged; the orchestrator drops them from its report. */
  samples_ms?: number[];
  later_samples_ms?: number[];
}

export interface ChatMessage {
  role: string;
  content: string | null;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

export const BASH_TOOL = {
  type: 'function',
  function: {
    name: 'bash',
    description: 'Run a shell command in the task container and return its output.',
    parameters: { type: 'object', properties: { command: { type: 'string', description: 'The command line' } }, required: ['command'] },
  },
};

/** The fields the proxy adds at capture level `tokens` (src/capture/upstream.ts buildEngineRequest). */
export const CAPTURE_FIELDS = {
  stream: false,
  max_tokens: 8192,
  logprobs: true,
  top_logprobs: 0,
  top_p: 1,
  top_k: -1,
  min_p: 0,
  frequency_penalty: 0,
  presence_penalty: 0,
  repetition_penalty: 1,
  return_token_ids: true,
  return_tokens_as_token_ids: true,
};

export function filler(label: string, bytes: number): string {
  const sentence = `${label}: the agent reads files, runs commands and edits code until the tests pass. `;
  return sentence.repeat(Math.ceil(bytes / sentence.length)).slice(0, bytes);
}

/**
 * `choices[0].message` of a chat completion without parsing the rest: the direct and pass-through
 * answers carry thousands of prompt token ids and logprobs, and parsing them all would make this
 * client, not the server under test, the bottleneck. Falls back to a full parse when unsure.
 */
export function extractMessage(text: string): ChatMessage | undefined {
  const choices = text.indexOf('"choices":');
  const start = choices < 0 ? -1 : text.indexOf('"message":', choices);
  const open = start < 0 ? -1 : text.indexOf('{', start);
  if (open >= 0) {
    let depth = 0;
    let inString = false;
    for (let i = open; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (inString) {
        if (c === 92 /* \ */) i++;
        else if (c === 34 /* " */) inString = false;
      } else if (c === 34) inString = true;
      else if (c === 123 /* { */) depth++;
      else if (c === 125 /* } */ && --depth === 0) {
        const message = JSON.parse(text.slice(open, i + 1)) as ChatMessage;
        if (message && message.role === 'assistant') return message;
        break;
      }
    }
  }
  return (JSON.parse(text) as { choices?: { message?: ChatMessage }[] }).choices?.[0]?.message;
}

/** Joins a chat-completions SSE stream back into the assistant message. */
export function assembleStream(text: string): ChatMessage | undefined {
  let content: string | null = null;
  const calls: NonNullable<ChatMessage['tool_calls']> = [];
  let sawChunk = false;
  for (const frame of text.split('\n\n')) {
    const data = frame
      .split('\n')
      .find((l) => l.startsWith('data: '))
      ?.slice(6);
    if (!data || data === '[DONE]') continue;
    const chunk = JSON.parse(data) as {
      choices?: {
        delta?: {
          content?: string | null;
          tool_calls?: { index: number; id?: string; function?: { name?: string; arguments?: string } }[];
        };
      }[];
    };
    const delta = chunk.choices?.[0]?.delta;
    if (!delta) continue;
    sawChunk = true;
    if (typeof delta.content === 'string') content = (content ?? '') + delta.content;
    for (const part of delta.tool_calls ?? []) {
      const call = (calls[part.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
      if (part.id) call.id = part.id;
      if (part.function?.name) call.function.name += part.function.name;
      if (part.function?.arguments) call.function.arguments += part.function.arguments;
    }
  }
  if (!sawChunk) return undefined;
  const message: ChatMessage = { role: 'assistant', content };
  if (calls.length) message.tool_calls = calls;
  return message;
}

const round1 = (v: number) => Math.round(v * 10) / 10;

export function errorKind(err: unknown): string {
  if (err && typeof err === 'object') {
    const e = err as { code?: unknown; name?: unknown; cause?: { code?: unknown } };
    if (typeof e.code === 'string') return e.code;
    if (typeof e.cause?.code === 'string') return e.cause.code;
    if (typeof e.name === 'string') return e.name;
  }
  return 'unknown';
}

/** Polls `/health` from a worker thread, so the generator's own busy loop cannot delay the probes. */
const HEALTH_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const { url, intervalMs, timeoutMs } = workerData;
const samples = [];
const errors = {};
let inflight = 0;
const count = (kind) => { errors[kind] = (errors[kind] || 0) + 1; };
const poll = () => {
  inflight++;
  const t0 = performance.now();
  let settled = false;
  const done = (kind) => { if (settled) return; settled = true; inflight--; if (kind) count(kind); else samples.push(performance.now() - t0); };
  // A fresh connection per probe, like a supervisor's health check.
  const req = http.get(url, { agent: false, timeout: timeoutMs }, (res) => {
    res.resume();
    res.on('end', () => done(res.statusCode === 200 ? undefined : 'http_' + res.statusCode));
    res.on('error', (e) => done(e.code || 'response_error'));
  });
  req.on('timeout', () => { req.destroy(); done('timeout'); });
  req.on('error', (e) => done(e.code || 'request_error'));
};
const timer = setInterval(poll, intervalMs);
poll();
parentPort.on('message', () => {
  clearInterval(timer);
  const finish = () => (inflight > 0 ? setTimeout(finish, 10) : parentPort.postMessage({ samples, errors }));
  finish();
});
`;

export function startHealthPoller(url: string, intervalMs: number, timeoutMs: number): { stop(): Promise<HealthResult> } {
  const worker = new Worker(HEALTH_WORKER, { eval: true, workerData: { url, intervalMs, timeoutMs } });
  return {
    stop: () =>
      new Promise((resolve, reject) => {
        worker.once('error', reject);
        worker.once('message', (msg: { samples: number[]; errors: Record<string, number> }) => {
          void worker.terminate();
          const polls = msg.samples.length + Object.values(msg.errors).reduce((a, b) => a + b, 0);
          resolve({ url, polls, errors: msg.errors, latency: summarize(msg.samples), samples_ms: msg.samples.map(round1) });
        });
        worker.postMessage('stop');
      }),
  };
}

export interface LoadOptions {
  mode: LoadMode;
  url: string;
  sessions: number;
  turns: number;
  model: string;
  rampMs: number;
  systemBytes: number;
  streamShare: number;
  healthUrl?: string;
  healthIntervalMs: number;
  timeoutMs: number;
  /**
   * Called once the proxy's sessions are registered, before the first call; the load starts when it
   * resolves (the orchestrator measures the calls' CPU apart from the registrations').
   */
  gate?: () => Promise<void>;
}

export async function runLoad(o: LoadOptions): Promise<LoadResult> {
  const agent = new Agent({
    connections: o.sessions + 8,
    pipelining: 1,
    headersTimeout: o.timeoutMs,
    bodyTimeout: o.timeoutMs,
    keepAliveTimeout: 60_000,
    connectTimeout: o.timeoutMs,
  });
  const errors: Record<string, number> = {};
  const latencies: number[] = [];
  const later: number[] = [];
  const system = filler('System prompt', o.systemBytes);

  // Sessions are registered before the clock starts; their creation is not what is measured.
  const keys: (string | undefined)[] = new Array(o.sessions).fill(undefined);
  if (o.mode === 'proxy') {
    let next = 0;
    const create = async () => {
      while (next < o.sessions) {
        const i = next++;
        try {
          const res = await request(`${o.url}/sessions`, {
            method: 'POST',
            dispatcher: agent,
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ metadata: { bench: 'proxy-load', session: i } }),
          });
          const body = (await res.body.json()) as { session_id?: string };
          if (res.statusCode !== 201 || !body.session_id) countInto(errors, `create_session_http_${res.statusCode}`);
          else keys[i] = body.session_id;
        } catch (err) {
          countInto(errors, `create_session_${errorKind(err)}`);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(32, o.sessions) }, create));
  }
  await o.gate?.();

  const call = async (session: number, messages: ChatMessage[], stream: boolean, turn: number): Promise<ChatMessage | undefined> => {
    const body =
      o.mode === 'proxy'
        ? { model: 'bench/agent-model', messages, tools: [BASH_TOOL], temperature: 0.7, stream }
        : { model: o.model, messages, tools: [BASH_TOOL], temperature: 0.7, ...CAPTURE_FIELDS };
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (o.mode === 'proxy') headers.authorization = `Bearer ${keys[session]}`;
    const payload = JSON.stringify(body);
    const t0 = performance.now();
    let status: number;
    let text: string;
    try {
      const res = await request(`${o.url}/v1/chat/completions`, { method: 'POST', dispatcher: agent, headers, body: payload });
      status = res.statusCode;
      text = await res.body.text();
    } catch (err) {
      countInto(errors, errorKind(err));
      return undefined;
    }
    const elapsed = performance.now() - t0;
    if (status !== 200) {
      countInto(errors, `http_${status}`);
      return undefined;
    }
    let message: ChatMessage | undefined;
    try {
      message = stream ? assembleStream(text) : extractMessage(text);
    } catch {
      message = undefined;
    }
    if (!message) {
      countInto(errors, 'bad_answer');
      return undefined;
    }
    latencies.push(elapsed);
    if (turn > 0) later.push(elapsed);
    return message;
  };

  const converse = async (session: number) => {
    await new Promise((r) => setTimeout(r, (o.rampMs * session) / o.sessions));
    if (o.mode === 'proxy' && !keys[session]) return;
    const stream = o.mode === 'proxy' && session % 100 < o.streamShare * 100;
    const messages: ChatMessage[] = [
      { role: 'system', content: system },
      { role: 'user', content: `Task ${session}: make the failing test in tests/test_parser.py pass. Use the bash tool.` },
    ];
    for (let turn = 0; turn < o.turns; turn++) {
      const answer = await call(session, messages, stream, turn);
      if (!answer) return; // a failed call ends the session, as it would end a harness run
      messages.push({
        role: 'assistant',
        content: answer.content ?? null,
        ...(answer.tool_calls?.length ? { tool_calls: answer.tool_calls } : {}),
      });
      const toolCall = answer.tool_calls?.[0];
      if (toolCall) messages.push({ role: 'tool', tool_call_id: toolCall.id, content: filler(`Output of ${toolCall.function.name}`, 600) });
      else messages.push({ role: 'user', content: `Good. Now continue with step ${turn + 2}: run the full test suite and report.` });
    }
  };

  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const health = o.healthUrl ? startHealthPoller(o.healthUrl, o.healthIntervalMs, 5_000) : undefined;
  const started = performance.now();
  await Promise.all(Array.from({ length: o.sessions }, (_, i) => converse(i)));
  const wall = performance.now() - started;
  loop.disable();
  const healthResult = health ? await health.stop() : null;
  await agent.close();
  return {
    mode: o.mode,
    sessions: o.sessions,
    turns: o.turns,
    calls_ok: latencies.length,
    errors,
    latency: summarize(latencies),
    later_turns: summarize(later),
    health: healthResult,
    wall_ms: Math.round(wall),
    client_loop_delay_p99_ms: Math.round(loop.percentile(99) / 1e5) / 10,
    samples_ms: latencies.map(round1),
    later_samples_ms: later.map(round1),
  };
}

/** Pools several runs of one path (same sessions and turns) into one result, samples included. */
export function mergeLoadResults(runs: LoadResult[]): LoadResult {
  const first = runs[0];
  if (!first) throw new Error('mergeLoadResults needs at least one run');
  const errors: Record<string, number> = {};
  for (const r of runs) for (const [kind, n] of Object.entries(r.errors)) countInto(errors, kind, n);
  const samples = runs.flatMap((r) => r.samples_ms ?? []);
  let health: HealthResult | null = null;
  if (runs.every((r) => r.health)) {
    const healthErrors: Record<string, number> = {};
    for (const r of runs) for (const [kind, n] of Object.entries(r.health!.errors)) countInto(healthErrors, kind, n);
    const healthSamples = runs.flatMap((r) => r.health!.samples_ms ?? []);
    health = {
      url: first.health!.url,
      polls: runs.reduce((n, r) => n + r.health!.polls, 0),
      errors: healthErrors,
      latency: summarize(healthSamples),
    };
  }
  return {
    mode: first.mode,
    sessions: first.sessions,
    turns: first.turns,
    runs: runs.reduce((n, r) => n + (r.runs ?? 1), 0),
    listen_overflows: runs.reduce((n, r) => n + (r.listen_overflows ?? 0), 0),
    calls_ok: runs.reduce((n, r) => n + r.calls_ok, 0),
    errors,
    latency: summarize(samples),
    later_turns: summarize(runs.flatMap((r) => r.later_samples_ms ?? [])),
    health,
    wall_ms: runs.reduce((n, r) => n + r.wall_ms, 0),
    client_loop_delay_p99_ms: Math.max(...runs.map((r) => r.client_loop_delay_p99_ms)),
  };
}

/** Prints the `registered` line and resolves at the first `go` line on stdin. */
function gateOnStdin(): Promise<void> {
  process.stdout.write(`${JSON.stringify({ registered: true })}\n`);
  return new Promise((resolve) => {
    let buffered = '';
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      if (!buffered.split('\n').some((l) => l.trim() === 'go')) return;
      process.stdin.off('data', onData);
      process.stdin.destroy(); // an open stdin would keep this process alive after the load
      resolve();
    };
    process.stdin.on('data', onData);
  });
}

function positiveInt(text: string, name: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer, got '${text}'`);
  return n;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      mode: { type: 'string' },
      url: { type: 'string' },
      sessions: { type: 'string', default: '64' },
      turns: { type: 'string', default: '3' },
      model: { type: 'string', default: 'fake/qwen3-tiny' },
      'ramp-ms': { type: 'string', default: '1000' },
      'system-bytes': { type: 'string', default: '2000' },
      'stream-share': { type: 'string', default: '0.5' },
      'health-url': { type: 'string' },
      'health-interval-ms': { type: 'string', default: '50' },
      'timeout-ms': { type: 'string', default: '120000' },
      gate: { type: 'boolean', default: false },
    },
  });
  const mode = values.mode as LoadMode;
  if (!['direct', 'pipe', 'passthrough', 'proxy'].includes(mode) || !values.url)
    throw new Error(
      'usage: load-generator.ts --mode direct|pipe|passthrough|proxy --url URL [--sessions N] [--turns T] [--health-url URL]',
    );
  const result = await runLoad({
    mode,
    url: values.url.replace(/\/+$/, ''),
    sessions: positiveInt(values.sessions, 'sessions'),
    turns: positiveInt(values.turns, 'turns'),
    model: values.model,
    rampMs: positiveInt(values['ramp-ms'], 'ramp-ms'),
    systemBytes: positiveInt(values['system-bytes'], 'system-bytes'),
    streamShare: Number(values['stream-share']),
    healthUrl: values['health-url'],
    healthIntervalMs: positiveInt(values['health-interval-ms'], 'health-interval-ms'),
    timeoutMs: positiveInt(values['timeout-ms'], 'timeout-ms'),
    // --gate: say `{"registered":true}` on stdout once the sessions exist, then wait for `go` on stdin.
    ...(values.gate ? { gate: gateOnStdin } : {}),
  });
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

if (process.argv[1]?.endsWith('load-generator.ts')) {
  main().catch((err: unknown) => {
    process.stderr.write(`load generator: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
}
