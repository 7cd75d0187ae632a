// What a replay reads: a captured rollout (a rollout folder, its `session.rollout.json`, any rollout
// document) or a replay fixture (the same calls stripped to what a replay needs, gzipped). Both are
// external input: parsed with zod here, with errors that name the file.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { z } from 'zod';
import type { CallRecord, CaptureLevel, ChatRequest, ChatResponse, LogprobEntry } from '../capture/types.js';

export class ReplaySourceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReplaySourceError';
  }
}

const Ids = z.array(z.int().nonnegative()).nullable().optional();

const ReplayCallSchema = z.looseObject({
  call_id: z.string().min(1),
  index: z.int().nonnegative(),
  dialect: z.string(),
  path: z.string(),
  stream: z.boolean().optional(),
  started_at: z.string().optional(),
  latency_ms: z.number().optional(),
  engine_request: z.looseObject({ messages: z.array(z.looseObject({ role: z.string() })) }).nullable(),
  engine_response: z.looseObject({ choices: z.array(z.looseObject({ message: z.looseObject({ role: z.string() }) })) }).nullable(),
  requested_sampling_params: z.record(z.string(), z.unknown()).optional(),
  sampling_params: z.record(z.string(), z.unknown()).optional(),
  finish_reason: z.string().nullable().optional(),
  error: z.looseObject({ status: z.int(), message: z.string() }).nullable().optional(),
  prompt_token_ids: Ids,
  completion_token_ids: Ids,
  logprobs: z.array(z.number()).nullable().optional(),
  top_logprobs: z
    .array(z.array(z.looseObject({ token_id: z.int().nullable(), token: z.string(), logprob: z.number() })))
    .nullable()
    .optional(),
  token_bytes: z
    .array(z.array(z.int().min(0).max(255)).nullable())
    .nullable()
    .optional(),
  /** Set on calls captured in token-in mode (the proxy rendered the prompt ids): see render-info.ts. */
  render: z.looseObject({ mode: z.string(), engine_route: z.string().optional() }).optional(),
});

const ReplayDocSchema = z.looseObject({
  session_id: z.string().min(1),
  metadata: z.record(z.string(), z.unknown()),
  capture_level: z.enum(['tokens', 'logprobs', 'text']),
  calls: z.array(ReplayCallSchema),
});

/** One recorded call as a replay uses it. */
export type ReplayCall = z.infer<typeof ReplayCallSchema>;

export interface ReplaySource {
  /** The file it was read from. */
  path: string;
  /** The rollout folder next to it (rollout.json, agent/, verifier/), when there is one. */
  rolloutDir: string | null;
  session_id: string;
  metadata: Record<string, unknown>;
  capture_level: CaptureLevel;
  /** Every recorded call, in arrival order. */
  calls: ReplayCall[];
  /** The original run's reward (rollout.json next to the document, or the fixture's), when known. */
  reward: number | null;
  /** The model the calls were captured on (the engine requests' `model`). */
  model: string | null;
  /** The token route the proxy called when the calls were captured in token-in mode (null: chat completions). */
  token_route: '/v1/completions' | '/generate' | null;
}

export const FIXTURE_FORMAT = 'harness-lab-replay-fixture';

const FixtureSchema = ReplayDocSchema.extend({ format: z.literal(FIXTURE_FORMAT), version: z.literal(1), reward: z.number().nullable() });
export type ReplayFixture = z.infer<typeof FixtureSchema>;

const RolloutJsonSchema = z.looseObject({ reward: z.number().nullable().optional() });

/** The rollout document a path names: the file itself, or `session.rollout.json` in a rollout folder. */
export function resolveRolloutPath(arg: string): string {
  const path = resolve(arg);
  if (!existsSync(path)) throw new ReplaySourceError(`no such rollout: ${path}`);
  if (statSync(path).isDirectory()) {
    const doc = join(path, 'session.rollout.json');
    if (!existsSync(doc))
      throw new ReplaySourceError(
        `${path} is a folder without session.rollout.json (give a rollout folder of \`harness-lab rollout\`, or a *.rollout.json file)`,
      );
    return doc;
  }
  return path;
}

export function loadReplaySource(arg: string): ReplaySource {
  const path = resolveRolloutPath(arg);
  let text: string;
  try {
    const raw = readFileSync(path);
    text = (path.endsWith('.gz') ? gunzipSync(raw) : raw).toString('utf8');
  } catch (err) {
    throw new ReplaySourceError(`${path}: could not read (${err instanceof Error ? err.message : String(err)})`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ReplaySourceError(`${path}: not JSON (${err instanceof Error ? err.message : String(err)})`);
  }
  const isFixture = typeof value === 'object' && value !== null && (value as { format?: unknown }).format === FIXTURE_FORMAT;
  const parsed = (isFixture ? FixtureSchema : ReplayDocSchema).safeParse(value);
  if (!parsed.success) {
    const issues = parsed.error.issues
      .slice(0, 4)
      .map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`)
      .join('; ');
    throw new ReplaySourceError(`${path} is not a rollout document or replay fixture: ${issues}`);
  }
  const doc = parsed.data;
  const calls = [...doc.calls].sort((a, b) => a.index - b.index);
  const rolloutDir = existsSync(join(dirname(path), 'rollout.json')) ? dirname(path) : null;
  let reward: number | null = isFixture ? (doc as ReplayFixture).reward : null;
  if (!isFixture && rolloutDir) {
    try {
      const record = RolloutJsonSchema.safeParse(JSON.parse(readFileSync(join(rolloutDir, 'rollout.json'), 'utf8')));
      if (record.success) reward = record.data.reward ?? null;
    } catch {
      reward = null; // a rollout record that cannot be read only loses the reward comparison
    }
  }
  const model = calls.map((c) => c.engine_request?.model).find((m): m is string => typeof m === 'string') ?? null;
  const rendered = calls.find((c) => c.render?.mode === 'proxy');
  const token_route = rendered ? (rendered.render?.engine_route === '/generate' ? '/generate' : '/v1/completions') : null;
  return {
    path,
    rolloutDir,
    session_id: doc.session_id,
    metadata: doc.metadata,
    capture_level: doc.capture_level,
    calls,
    reward,
    model,
    token_route,
  };
}

/** A recorded call with the fields a replay answers from; `full` keeps the token data too. */
function fixtureCall(c: ReplayCall): ReplayCall {
  return {
    call_id: c.call_id,
    index: c.index,
    dialect: c.dialect,
    path: c.path,
    stream: c.stream,
    started_at: c.started_at,
    latency_ms: c.latency_ms,
    engine_request: c.engine_request,
    engine_response: c.engine_response,
    requested_sampling_params: c.requested_sampling_params,
    finish_reason: c.finish_reason,
    error: c.error ?? null,
  };
}

/**
 * A replay fixture from a captured rollout: the calls' engine requests and answers, without token data,
 * native bodies, headers or graph (a replay needs none of them), gzipped. Metadata keeps the task,
 * the harness and the sandbox only (the original's out_dir is a path on the recording machine).
 */
export function fixtureFromSource(source: ReplaySource, taskDir: string): Buffer {
  const meta = source.metadata;
  const fixture: ReplayFixture = {
    format: FIXTURE_FORMAT,
    version: 1,
    session_id: source.session_id,
    metadata: { task: meta.task, harness: meta.harness, sandbox: meta.sandbox, task_dir: taskDir },
    capture_level: source.capture_level,
    reward: source.reward,
    calls: source.calls.map(fixtureCall),
  };
  return gzipSync(`${JSON.stringify(fixture)}\n`, { level: 9 });
}

/**
 * The engine's answer as it arrived: the stored body with the token data the record moved out of it
 * (prompt and sampled ids, logprobs as `token_id:N` entries) put back, so the proxy reads it again
 * exactly as it read the original. A record without token data gives a text answer.
 */
export function recordedEngineBody(call: ReplayCall): ChatResponse {
  const stored = structuredClone(call.engine_response) as unknown as ChatResponse & { _token_data?: unknown };
  delete stored._token_data;
  if (call.prompt_token_ids) stored.prompt_token_ids = call.prompt_token_ids;
  const choice = stored.choices[0];
  if (choice) {
    const ids = call.completion_token_ids;
    if (ids) choice.token_ids = ids;
    const lps = call.logprobs;
    if (ids && lps && lps.length === ids.length) {
      const content: LogprobEntry[] = ids.map((id, i) => ({
        token: `token_id:${id}`,
        logprob: lps[i]!,
        bytes: call.token_bytes?.[i] ?? null,
        top_logprobs: (call.top_logprobs?.[i] ?? []).map((t) => ({ token: t.token, logprob: t.logprob })),
      }));
      choice.logprobs = { content };
    } else choice.logprobs = null;
  }
  return stored;
}

/** The record's request and answer, typed for the capture layer. */
export function recordedRequest(call: ReplayCall): ChatRequest | null {
  return call.engine_request as ChatRequest | null;
}

export type { CallRecord };
