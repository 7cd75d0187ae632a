// Captured traffic as a load test: `export --format replay` writes every recorded engine request with
// its start time relative to the first one (JSONL, one request a line after a header), and
// `harness-lab replay-load FILE --engine-url URL --speed N` issues them again at N times the recorded
// pace, each at its own offset, concurrently as they were, and reports latency and throughput.
// Each request asks for as many tokens as were sampled then (`max_tokens`, and vLLM's `ignore_eos`), so
// the engine does the same work whatever it now samples.
import { readFileSync, writeFileSync } from 'node:fs';
import { Pool } from 'undici';
import { z } from 'zod';
import { normaliseEngineUrl } from '../capture/engine-client.js';
import type { CallRecord } from '../capture/types.js';

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
}

const HeaderSchema = z
  .object({
    format: z.literal(LOAD_FORMAT),
    version: z.literal(1),
    n_requests: z.int().nonnegative(),
    span_ms: z.number().nonnegative(),
    sources: z.array(z.string()),
  })
  .passthrough();
const LineSchema = z.object({
  t_ms: z.number().nonnegative(),
  rollout_id: z.string(),
  index: z.int().nonnegative(),
  recorded_latency_ms: z.number(),
  n_prompt: z.int().nullable(),
  n_sampled: z.int().nullable(),
  request: z.looseObject({ messages: z.array(z.unknown()) }),
});

export class LoadFileError extends Error {}

/** The load file from captured calls (any number of rollouts), ordered by start time. */
export function writeLoadFile(
  out: string,
  rollouts: { rollout_id: string; file: string; calls: readonly CallRecord[] }[],
): { requests: number; span_ms: number } {
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
  }));
  const span = lines.length ? lines[lines.length - 1]!.t_ms : 0;
  const header = {
    format: LOAD_FORMAT,
    version: 1,
    created_at: new Date().toISOString(),
    n_requests: lines.length,
    span_ms: span,
    sources: rollouts.map((r) => r.file),
  };
  writeFileSync(out, [header, ...lines].map((l) => JSON.stringify(l)).join('\n') + '\n');
  return { requests: lines.length, span_ms: span };
}

export function readLoadFile(file: string): { span_ms: number; requests: LoadRequest[] } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new LoadFileError(`${file}: ${(err as Error).message}`);
  }
  const rows = text.split('\n').filter((l) => l.trim());
  const parse = (line: string, n: number) => {
    try {
      return JSON.parse(line) as unknown;
    } catch {
      throw new LoadFileError(`${file}:${n + 1}: not JSON`);
    }
  };
  const header = HeaderSchema.safeParse(parse(rows[0] ?? '', 0));
  if (!header.success) throw new LoadFileError(`${file} is not a replay load file (write one with \`harness-lab export --format replay\`)`);
  const requests = rows.slice(1).map((l, i) => {
    const r = LineSchema.safeParse(parse(l, i + 1));
    if (!r.success) throw new LoadFileError(`${file}:${i + 2}: ${r.error.issues[0]?.path.join('.')}: ${r.error.issues[0]?.message}`);
    return r.data as LoadRequest;
  });
  return { span_ms: header.data.span_ms, requests };
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
