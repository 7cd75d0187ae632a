// Captured traffic as a load test: `export --format replay` writes every recorded engine request with
// its start time relative to the first one (JSONL, one request a line after a header), and
// `harness-lab replay-load FILE --engine-url URL --speed N` issues them again at N times the recorded
// pace, each at its own offset, concurrently as they were, and reports latency and throughput.
// Each request asks for as many tokens as were sampled then (`max_tokens`, and vLLM's `ignore_eos`), so
// the engine does the same work whatever it now samples.
//
// A rollout captured in token-in mode is exported whole (version 2): beside its chat request each line
// carries `record`, the rest of what a token-in replay reads of the call (the render info with the token
// route, the recorded prompt ids, the sampled ids and logprobs, the parsed answer), and the header names
// the rollout (`replay`: session, metadata, capture level, reward, call count), so `harness-lab replay
// FILE` replays it token in as it replays the capture itself (source.ts). Chat-mode rollouts are exported
// as before (version 1 when the file holds no token-in rollout): their lines are requests only.
import { readFileSync, writeFileSync } from 'node:fs';
import { Pool } from 'undici';
import { z } from 'zod';
import { normaliseEngineUrl } from '../capture/engine-client.js';
import type { CallRecord, CaptureLevel } from '../capture/types.js';
import { LoadRecordSchema, type LoadRecord } from './call-schema.js';

export const LOAD_FORMAT = 'harness-lab-replay-load';

export interface LoadRequest {
  /** Milliseconds after the first recorded request started. */
  t_ms: number;
  rollout_id: string;
  index: number;
  recorded_latency_ms: number;
  n_prompt: number | null;
  n_sampled: number | null;
  request: Record<string, unknown>;
  /** Version 2, the lines of a token-in rollout: the rest of the call as a token-in replay reads it. */
  record?: LoadRecord;
}

/** A rollout whose lines carry their records (a token-in capture): what `replay` needs beside the calls. */
export interface LoadRollout {
  rollout_id: string;
  session_id: string;
  /** The captured session file or rollout document it was exported from. */
  file: string;
  metadata: Record<string, unknown>;
  capture_level: CaptureLevel;
  /** The verifier's reward of the original, when known. */
  reward: number | null;
  /** Lines of this rollout in the file. */
  n_calls: number;
}

export interface LoadFile {
  version: 1 | 2;
  span_ms: number;
  requests: LoadRequest[];
  /** Rollouts a replay can run from this file (version 2); empty for version 1. */
  replay: LoadRollout[];
}

const HeaderV1Schema = z.looseObject({
  format: z.literal(LOAD_FORMAT),
  version: z.literal(1),
  n_requests: z.int().nonnegative(),
  span_ms: z.number().nonnegative(),
  sources: z.array(z.string()),
});
const LoadRolloutSchema = z.object({
  rollout_id: z.string().min(1),
  session_id: z.string().min(1),
  file: z.string(),
  metadata: z.record(z.string(), z.unknown()),
  capture_level: z.enum(['tokens', 'logprobs', 'text']),
  reward: z.number().nullable(),
  n_calls: z.int().nonnegative(),
});
const HeaderV2Schema = HeaderV1Schema.extend({ version: z.literal(2), replay: z.array(LoadRolloutSchema) });
const HeaderSchema = z.discriminatedUnion('version', [HeaderV1Schema, HeaderV2Schema]);
const LineSchema = z.object({
  t_ms: z.number().nonnegative(),
  rollout_id: z.string(),
  index: z.int().nonnegative(),
  recorded_latency_ms: z.number(),
  n_prompt: z.int().nullable(),
  n_sampled: z.int().nullable(),
  request: z.looseObject({ messages: z.array(z.unknown()) }),
  record: LoadRecordSchema.optional(),
});

export class LoadFileError extends Error {}

/** One rollout to export: its calls, and for a token-in capture what a replay needs beside them. */
export interface LoadSource {
  rollout_id: string;
  file: string;
  calls: readonly CallRecord[];
  session_id?: string;
  metadata?: Record<string, unknown>;
  capture_level?: CaptureLevel;
  reward?: number | null;
}

/** A rollout captured in token-in mode: the proxy rendered its prompts (`render.mode` proxy). */
export function isTokenInCapture(calls: readonly CallRecord[]): boolean {
  return calls.some((c) => c.render?.mode === 'proxy');
}

/** What a token-in replay reads of a call beyond its engine request and index (LoadRecordSchema). */
function loadRecord(c: CallRecord): LoadRecord {
  return {
    call_id: c.call_id,
    dialect: c.dialect,
    path: c.path,
    stream: c.stream,
    started_at: c.started_at,
    latency_ms: c.latency_ms,
    engine_response: c.engine_response as LoadRecord['engine_response'],
    requested_sampling_params: c.requested_sampling_params,
    sampling_params: c.sampling_params,
    finish_reason: c.finish_reason,
    error: c.error ? { ...c.error } : null,
    prompt_token_ids: c.prompt_token_ids,
    completion_token_ids: c.completion_token_ids,
    logprobs: c.logprobs,
    top_logprobs: c.top_logprobs,
    token_bytes: c.token_bytes,
    render: c.render as LoadRecord['render'],
  };
}

/**
 * The load file from captured calls (any number of rollouts), ordered by start time. The calls of a
 * token-in capture carry their records, and the header names the rollout (version 2).
 */
export function writeLoadFile(out: string, rollouts: readonly LoadSource[]): { requests: number; span_ms: number; replayable: number } {
  const tokenIn = new Set(rollouts.filter((r) => isTokenInCapture(r.calls)));
  const all = rollouts.flatMap((r) => r.calls.filter((c) => c.engine_request).map((c) => ({ r, c, t: Date.parse(c.started_at) })));
  const valid = all.filter((x) => Number.isFinite(x.t)).sort((a, b) => a.t - b.t || a.c.index - b.c.index);
  const t0 = valid[0]?.t ?? 0;
  const lines: LoadRequest[] = valid.map(({ r, c, t }) => ({
    t_ms: t - t0,
    rollout_id: r.rollout_id,
    index: c.index,
    recorded_latency_ms: c.latency_ms,
    n_prompt: c.prompt_token_ids?.length ?? c.usage?.prompt_tokens ?? null,
    n_sampled: c.completion_token_ids?.length ?? c.usage?.completion_tokens ?? null,
    request: c.engine_request as unknown as Record<string, unknown>,
    ...(tokenIn.has(r) ? { record: loadRecord(c) } : {}),
  }));
  const span = lines.length ? lines[lines.length - 1]!.t_ms : 0;
  const replay: LoadRollout[] = [...tokenIn].map((r) => {
    if (!r.session_id || !r.metadata || !r.capture_level)
      throw new LoadFileError(`${r.file} was captured token in; its export needs its session id, metadata and capture level`);
    return {
      rollout_id: r.rollout_id,
      session_id: r.session_id,
      file: r.file,
      metadata: r.metadata,
      capture_level: r.capture_level,
      reward: r.reward ?? null,
      n_calls: lines.filter((l) => l.rollout_id === r.rollout_id).length,
    };
  });
  const header = {
    format: LOAD_FORMAT,
    version: replay.length ? 2 : 1,
    created_at: new Date().toISOString(),
    n_requests: lines.length,
    span_ms: span,
    sources: rollouts.map((r) => r.file),
    ...(replay.length ? { replay } : {}),
  };
  writeFileSync(out, [header, ...lines].map((l) => JSON.stringify(l)).join('\n') + '\n');
  return { requests: lines.length, span_ms: span, replayable: replay.length };
}

/** A zod issue as the user reads it: the field's path, then what is wrong with it. */
function issueText(err: z.ZodError): string {
  const issue = err.issues[0];
  if (!issue) return 'invalid';
  const path = issue.path.reduce<string>((p, k) => (typeof k === 'number' ? `${p}[${k}]` : p ? `${p}.${String(k)}` : String(k)), '');
  return `${path || '(line)'}: ${issue.message}`;
}

/** Whether a file's first line is the header of a load file (what `replay` and `verify` use to tell it from a rollout). */
export function isLoadFileHeader(firstLine: string): boolean {
  try {
    const head = JSON.parse(firstLine) as unknown;
    return typeof head === 'object' && head !== null && (head as { format?: unknown }).format === LOAD_FORMAT;
  } catch {
    return false;
  }
}

/** A load file's text (either version), every line checked; errors name the file, the line and the field. */
export function parseLoadFile(text: string, file: string): LoadFile {
  const rows = text.split('\n').filter((l) => l.trim());
  const parse = (line: string, n: number) => {
    try {
      return JSON.parse(line) as unknown;
    } catch {
      throw new LoadFileError(`${file}:${n + 1}: not JSON`);
    }
  };
  const head = parse(rows[0] ?? '', 0);
  if (!isLoadFileHeader(rows[0] ?? ''))
    throw new LoadFileError(`${file} is not a replay load file (write one with \`harness-lab export --format replay\`)`);
  const header = HeaderSchema.safeParse(head);
  if (!header.success) throw new LoadFileError(`${file}:1: replay load file header: ${issueText(header.error)}`);
  const replay = header.data.version === 2 ? header.data.replay : [];
  const replayable = new Map(replay.map((r) => [r.rollout_id, r]));
  const seen = new Map<string, Set<number>>();
  const requests = rows.slice(1).map((l, i) => {
    const at = `${file}:${i + 2}`;
    const r = LineSchema.safeParse(parse(l, i + 1));
    if (!r.success) throw new LoadFileError(`${at}: ${issueText(r.error)}`);
    const line = r.data as LoadRequest;
    const rollout = replayable.get(line.rollout_id);
    if (line.record && header.data.version === 1) throw new LoadFileError(`${at}: record: a version 1 load file carries no records`);
    if (line.record && !rollout)
      throw new LoadFileError(`${at}: rollout_id: '${line.rollout_id}' carries a record but the header's replay list does not name it`);
    if (rollout && !line.record)
      throw new LoadFileError(`${at}: record: missing (rollout '${line.rollout_id}' was exported for replay, every call of it has one)`);
    if (rollout) {
      const indexes = seen.get(line.rollout_id) ?? new Set<number>();
      if (indexes.has(line.index)) throw new LoadFileError(`${at}: index: call ${line.index} of rollout '${line.rollout_id}' twice`);
      seen.set(line.rollout_id, indexes.add(line.index));
    }
    return line;
  });
  if (requests.length !== header.data.n_requests)
    throw new LoadFileError(
      `${file}:1: n_requests: the header says ${header.data.n_requests}, the file holds ${requests.length} (cut short?)`,
    );
  for (const r of replay) {
    const n = seen.get(r.rollout_id)?.size ?? 0;
    if (n !== r.n_calls)
      throw new LoadFileError(`${file}:1: replay.n_calls: rollout '${r.rollout_id}' has ${r.n_calls} call(s) in the header, ${n} line(s)`);
  }
  return { version: header.data.version, span_ms: header.data.span_ms, requests, replay };
}

export function readLoadFile(file: string): LoadFile {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new LoadFileError(`${file}: ${(err as Error).message}`);
  }
  return parseLoadFile(text, file);
}

export interface LoadOptions {
  engineUrl: string;
  speed: number;
  /** Replaces each request's model (default: the engine's, as recorded). */
  model?: string;
  apiKey?: string;
  /** Ask for the recorded number of sampled tokens with ignore_eos (default true). */
  sameWork?: boolean;
  signal?: AbortSignal;
  onResult?: (r: LoadResult) => void;
}

export interface LoadResult {
  rollout_id: string;
  index: number;
  scheduled_ms: number;
  started_ms: number;
  latency_ms: number;
  status: number;
  error: string | null;
  completion_tokens: number | null;
}

export interface LoadReport {
  engine_url: string;
  speed: number;
  requests: number;
  ok: number;
  failed: number;
  wall_ms: number;
  recorded_span_ms: number;
  /** How late requests started against their schedule (ms): the re-issuer keeping up. */
  max_start_lag_ms: number;
  latency_ms: { p50: number | null; p95: number | null; max: number | null };
  completion_tokens: number;
  tokens_per_s: number | null;
  results: LoadResult[];
}

function percentile(sorted: number[], p: number): number | null {
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export async function reissue(requests: readonly LoadRequest[], span: number, opts: LoadOptions): Promise<LoadReport> {
  if (!(opts.speed > 0)) throw new LoadFileError('speed must be above 0');
  const base = new URL(normaliseEngineUrl(opts.engineUrl));
  const pool = new Pool(base.origin, { connections: 256 });
  const prefix = base.pathname.replace(/\/+$/, '');
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (opts.apiKey) headers.authorization = `Bearer ${opts.apiKey}`;
  const start = performance.now();
  const results: LoadResult[] = [];
  const one = async (r: LoadRequest): Promise<void> => {
    const scheduled = r.t_ms / opts.speed;
    const wait = scheduled - (performance.now() - start);
    if (wait > 0) await new Promise((res) => setTimeout(res, wait));
    if (opts.signal?.aborted) return;
    const body: Record<string, unknown> = { ...r.request, stream: false };
    if (opts.model) body.model = opts.model;
    if (opts.sameWork !== false && r.n_sampled) {
      body.max_tokens = r.n_sampled;
      body.ignore_eos = true;
    }
    const began = performance.now();
    const result: LoadResult = {
      rollout_id: r.rollout_id,
      index: r.index,
      scheduled_ms: scheduled,
      started_ms: began - start,
      latency_ms: 0,
      status: 0,
      error: null,
      completion_tokens: null,
    };
    try {
      const res = await pool.request({
        method: 'POST',
        path: `${prefix}/v1/chat/completions`,
        headers,
        body: JSON.stringify(body),
        signal: opts.signal,
      });
      const text = await res.body.text();
      result.status = res.statusCode;
      if (res.statusCode === 200) {
        const usage = (JSON.parse(text) as { usage?: { completion_tokens?: number } }).usage;
        result.completion_tokens = typeof usage?.completion_tokens === 'number' ? usage.completion_tokens : null;
      } else result.error = text.slice(0, 300);
    } catch (err) {
      result.error = (err as Error).message;
    }
    result.latency_ms = performance.now() - began;
    results.push(result);
    opts.onResult?.(result);
  };
  try {
    await Promise.all(requests.map(one));
  } finally {
    await pool.close();
  }
  const wall = performance.now() - start;
  const ok = results.filter((r) => r.status === 200);
  const lat = ok.map((r) => r.latency_ms).sort((a, b) => a - b);
  const tokens = ok.reduce((n, r) => n + (r.completion_tokens ?? 0), 0);
  return {
    engine_url: opts.engineUrl,
    speed: opts.speed,
    requests: requests.length,
    ok: ok.length,
    failed: results.length - ok.length,
    wall_ms: wall,
    recorded_span_ms: span,
    max_start_lag_ms: Math.max(0, ...results.map((r) => r.started_ms - r.scheduled_ms)),
    latency_ms: { p50: percentile(lat, 50), p95: percentile(lat, 95), max: lat.length ? lat[lat.length - 1]! : null },
    completion_tokens: tokens,
    tokens_per_s: wall > 0 ? (tokens * 1000) / wall : null,
    results: results.sort((a, b) => a.scheduled_ms - b.scheduled_ms),
  };
}

export function formatLoadReport(r: LoadReport): string {
  const ms = (x: number | null) => (x === null ? '-' : `${x.toFixed(0)} ms`);
  const failures = r.results
    .filter((x) => x.status !== 200)
    .slice(0, 3)
    .map((x) => `  ${x.rollout_id}#${x.index}: ${x.status || 'no answer'} ${x.error ?? ''}`);
  return [
    `re-issued ${r.requests} request(s) against ${r.engine_url} at ${r.speed}x: ${r.ok} ok, ${r.failed} ` +
      `failed, in ${(r.wall_ms / 1000).toFixed(1)} s (recorded span ${(r.recorded_span_ms / 1000).toFixed(1)} s)`,
    `latency p50 ${ms(r.latency_ms.p50)}, p95 ${ms(r.latency_ms.p95)}, max ${ms(r.latency_ms.max)}; ${r.completion_tokens} ` +
      `sampled tokens${r.tokens_per_s === null ? '' : `, ${r.tokens_per_s.toFixed(1)} tokens/s`}; started at ` +
      `most ${ms(r.max_start_lag_ms)} late`,
    ...failures,
  ].join('\n');
}
