// What a replay reads: a captured rollout (a rollout folder, its `session.rollout.json`, any rollout
// document), a replay fixture (the same calls stripped to what a replay needs, gzipped) or one
// token-in rollout of a load file of `export --format replay` (load.ts). All are external input:
// parsed with zod here (a load file in load.ts), with errors that name the file.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { z } from 'zod';
import type { CallRecord, CaptureLevel, ChatRequest, ChatResponse, LogprobEntry } from '../capture/types.js';
import { ReplayCallSchema, type ReplayCall } from './call-schema.js';
import { isLoadFileHeader, LoadFileError, parseLoadFile, type LoadFile, type LoadRollout } from './load.js';

export type { ReplayCall };

export class ReplaySourceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReplaySourceError';
  }
}

const ReplayDocSchema = z.looseObject({
  session_id: z.string().min(1),
  metadata: z.record(z.string(), z.unknown()),
  capture_level: z.enum(['tokens', 'logprobs', 'text']),
  calls: z.array(ReplayCallSchema),
});

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

/** The reward in the rollout.json beside a rollout document, or null (none there, or unreadable: only the reward comparison is lost). */
export function rewardBeside(docPath: string): number | null {
  const file = join(dirname(docPath), 'rollout.json');
  if (!existsSync(file)) return null;
  try {
    const record = RolloutJsonSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
    return record.success ? (record.data.reward ?? null) : null;
  } catch {
    return null;
  }
}

/** Which token route the calls went to, when they were captured in token-in mode. */
function tokenRouteOf(calls: readonly ReplayCall[]): ReplaySource['token_route'] {
  const rendered = calls.find((c) => c.render?.mode === 'proxy');
  if (!rendered) return null;
  return rendered.render?.engine_route === '/generate' ? '/generate' : '/v1/completions';
}

function modelOf(calls: readonly ReplayCall[]): string | null {
  return calls.map((c) => c.engine_request?.model).find((m): m is string => typeof m === 'string') ?? null;
}

export interface LoadReplayOptions {
  /** Which rollout of a load file (`export --format replay`) to replay, when it holds more than one. */
  rollout?: string;
}

export function loadReplaySource(arg: string, opts: LoadReplayOptions = {}): ReplaySource {
  const path = resolveRolloutPath(arg);
  let text: string;
  try {
    const raw = readFileSync(path);
    text = (path.endsWith('.gz') ? gunzipSync(raw) : raw).toString('utf8');
  } catch (err) {
    throw new ReplaySourceError(`${path}: could not read (${err instanceof Error ? err.message : String(err)})`);
  }
  const newline = text.indexOf('\n');
  if (isLoadFileHeader(newline < 0 ? text : text.slice(0, newline))) return sourceFromLoadFile(path, text, opts.rollout);
  if (opts.rollout !== undefined)
    throw new ReplaySourceError(`${path} is one rollout; --rollout picks one rollout of a load file of \`export --format replay\``);
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
  const reward = isFixture ? (doc as ReplayFixture).reward : rewardBeside(path);
  return {
    path,
    rolloutDir,
    session_id: doc.session_id,
    metadata: doc.metadata,
    capture_level: doc.capture_level,
    calls,
    reward,
    model: modelOf(calls),
    token_route: tokenRouteOf(calls),
  };
}

/**
 * One rollout of a load file as a replay source. Only a token-in capture's lines carry their records
 * (the answers, the token data); a chat-mode rollout's lines are its requests only, and the message
 * says to replay its capture instead.
 */
function sourceFromLoadFile(path: string, text: string, rolloutId: string | undefined): ReplaySource {
  let file: LoadFile;
  try {
    file = parseLoadFile(text, path);
  } catch (err) {
    if (err instanceof LoadFileError) throw new ReplaySourceError(err.message);
    throw err;
  }
  const exported = [...new Set(file.requests.map((r) => r.rollout_id))];
  const chatOnly = (id: string) =>
    new ReplaySourceError(
      `${path}: rollout '${id}' was captured in chat mode, and a load file keeps only the requests of a chat-mode capture ` +
        `(the answers and token data are exported for token-in captures); replay its capture (the rollout folder or session file) instead`,
    );
  const pick = (): LoadRollout => {
    if (rolloutId !== undefined) {
      const found = file.replay.find((r) => r.rollout_id === rolloutId);
      if (found) return found;
      if (exported.includes(rolloutId)) throw chatOnly(rolloutId);
      throw new ReplaySourceError(`${path} holds no rollout '${rolloutId}' (it holds ${exported.join(', ') || 'none'})`);
    }
    if (file.replay.length === 1) return file.replay[0]!;
    if (file.replay.length > 1)
      throw new ReplaySourceError(
        `${path} holds ${file.replay.length} replayable rollouts (${file.replay.map((r) => r.rollout_id).join(', ')}); pick one with --rollout ID`,
      );
    if (exported.length === 1) throw chatOnly(exported[0]!);
    throw new ReplaySourceError(
      `${path} holds no rollout captured token in, so nothing a replay can answer from (chat-mode exports keep requests only)`,
    );
  };
  const chosen = pick();
  const calls: ReplayCall[] = file.requests
    .filter((r) => r.rollout_id === chosen.rollout_id)
    .map((r) => ({ ...r.record!, index: r.index, engine_request: r.request as ReplayCall['engine_request'] }))
    .sort((a, b) => a.index - b.index);
  return {
    path,
    rolloutDir: null,
    session_id: chosen.session_id,
    metadata: chosen.metadata,
    capture_level: chosen.capture_level,
    calls,
    reward: chosen.reward,
    model: modelOf(calls),
    token_route: tokenRouteOf(calls),
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
