// `harness-lab verify`: a stored capture checked against the engine that produced it, token for token.
// For every recorded call with token data:
//   1. token in: the recorded prompt ids go back to the engine as they are (POST /v1/completions with
//      a token-id prompt); the engine must accept them (a refusal fails the call);
//   2. teacher forcing: the recorded sampled ids are scored after that prompt (`prompt_logprobs`, the
//      route `rescore` uses) under the call's own sampling, and each token's logprob must be within
//      the tolerance of the recorded one (the first position outside it is named);
//   3. greedy calls (temperature 0): the engine generates from the recorded prompt ids with
//      temperature 0 and must produce the recorded ids again (vLLM's /v1/completions with
//      `return_token_ids`, or `logprobs` tokens as `token_id:N`).
// The tolerance is absolute, in nats: the embedded engine scores a prompt the same way every time
// (differences ~1e-6), so the default is 1e-3; vLLM on a GPU batches differently from run to run and
// its bf16 logprobs move by up to ~1e-2, so pass --tolerance 0.05 there.
import { z } from 'zod';
import { normaliseEngineUrl } from '../capture/engine-client.js';
import type { ReplayCall, ReplaySource } from './source.js';

export const VERIFY_VERSION = 1;
export const DEFAULT_VERIFY_TOLERANCE = 1e-3;

export class VerifyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'VerifyError';
  }
}

export interface TokenMismatch {
  /** Position among the call's sampled tokens (0 = the first sampled token). */
  position: number;
  token_id: number;
  recorded: number;
  engine: number | null;
}

export interface VerifiedCall {
  call_id: string;
  index: number;
  n_prompt: number;
  n_sampled: number;
  /** Whether the engine took the recorded prompt ids (a refusal: `refusal` says why). */
  prompt_accepted: boolean;
  refusal: string | null;
  /** Largest |engine - recorded| over the sampled tokens (null when nothing was scored). */
  max_abs_diff: number | null;
  first_mismatch: TokenMismatch | null;
  n_mismatched: number;
  greedy:
    { checked: true; reproduced: boolean; first_difference: number | null; generated: number } | { checked: false; reason: string } | null;
  ok: boolean;
}

export interface VerifyReport {
  version: typeof VERIFY_VERSION;
  session_id: string;
  source: string;
  engine_url: string;
  model: string | null;
  tolerance: number;
  created_at: string;
  calls: VerifiedCall[];
  skipped: { call_id: string; index: number; reason: string }[];
  summary: {
    calls: number;
    tokens: number;
    mismatched_tokens: number;
    refused_prompts: number;
    greedy_checked: number;
    greedy_failed: number;
    max_abs_diff: number | null;
  };
  ok: boolean;
}

const PromptLogprobsSchema = z.array(z.record(z.string(), z.looseObject({ logprob: z.number().nullable() })).nullable());
const ScoreSchema = z.looseObject({
  choices: z.array(z.looseObject({ prompt_logprobs: PromptLogprobsSchema.nullish() })).min(1),
  prompt_logprobs: PromptLogprobsSchema.nullish(),
});
const GenerateSchema = z.looseObject({
  choices: z
    .array(
      z.looseObject({
        token_ids: z.array(z.int().nonnegative()).nullish(),
        logprobs: z.looseObject({ tokens: z.array(z.string()).nullish() }).nullish(),
      }),
    )
    .min(1),
});

function skipReason(c: ReplayCall): string | null {
  if (c.error) return `errored call (${c.error.status})`;
  if (!c.prompt_token_ids?.length) return 'no prompt token ids (a text-level capture, or a replay fixture)';
  if (!c.completion_token_ids?.length) return 'no sampled tokens';
  if (!c.logprobs || c.logprobs.length !== c.completion_token_ids.length) return 'no aligned behaviour logprobs';
  return null;
}

function samplingOf(c: ReplayCall): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of ['temperature', 'top_p', 'top_k', 'min_p'] as const) {
    const v = c.sampling_params?.[k];
    if (typeof v === 'number') out[k] = v;
  }
  return out;
}

async function post(url: string, body: unknown, apiKey: string | undefined): Promise<{ status: number; text: string }> {
  let res: Response;
  try {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (apiKey) headers.authorization = `Bearer ${apiKey}`;
    res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(600_000) });
  } catch (err) {
    throw new VerifyError(`${url}: ${(err as Error).message}`);
  }
  return { status: res.status, text: await res.text() };
}

export interface VerifyOptions {
  engineUrl: string;
  model?: string | null;
  tolerance?: number;
  apiKey?: string;
  /** Told after each call (progress). */
  onCall?: (call: VerifiedCall) => void;
}

async function verifyCall(c: ReplayCall, url: string, opts: VerifyOptions, tolerance: number): Promise<VerifiedCall> {
  const prompt = c.prompt_token_ids!;
  const sampled = c.completion_token_ids!;
  const recorded = c.logprobs!;
  const model = opts.model ? { model: opts.model } : {};
  const out: VerifiedCall = {
    call_id: c.call_id,
    index: c.index,
    n_prompt: prompt.length,
    n_sampled: sampled.length,
    prompt_accepted: false,
    refusal: null,
    max_abs_diff: null,
    first_mismatch: null,
    n_mismatched: 0,
    greedy: null,
    ok: false,
  };
  const scored = await post(
    url,
    {
      ...model,
      prompt: [...prompt, ...sampled],
      max_tokens: 1,
      prompt_logprobs: 0,
      prompt_logprobs_start: prompt.length,
      ...samplingOf(c),
    },
    opts.apiKey,
  );
  if (scored.status !== 200) {
    out.refusal = `HTTP ${scored.status}: ${scored.text.slice(0, 300)}`;
    return out;
  }
  out.prompt_accepted = true;
  let parsed;
  try {
    parsed = ScoreSchema.parse(JSON.parse(scored.text));
  } catch (err) {
    throw new VerifyError(`${url}: not a completions answer with prompt_logprobs (${(err as Error).message.slice(0, 300)})`);
  }
  const lps = parsed.choices[0]!.prompt_logprobs ?? parsed.prompt_logprobs;
  if (!lps || lps.length !== prompt.length + sampled.length)
    throw new VerifyError(
      `${url}: prompt_logprobs has ${lps?.length ?? 0} positions for ${prompt.length + sampled.length} tokens (call ${c.call_id})`,
    );
  let max = 0;
  sampled.forEach((id, i) => {
    const engine = lps[prompt.length + i]?.[String(id)]?.logprob ?? null;
    const diff = engine === null ? Infinity : Math.abs(engine - recorded[i]!);
    max = Math.max(max, diff);
    if (diff > tolerance) {
      out.n_mismatched++;
      out.first_mismatch ??= { position: i, token_id: id, recorded: recorded[i]!, engine };
    }
  });
  out.max_abs_diff = max;
  if (c.sampling_params?.temperature === 0) out.greedy = await greedyCheck(c, url, opts);
  out.ok = out.n_mismatched === 0 && (out.greedy === null || !out.greedy.checked || out.greedy.reproduced);
  return out;
}

/** Token-in generation at temperature 0 from the recorded prompt; the recorded ids must come back. */
async function greedyCheck(c: ReplayCall, url: string, opts: VerifyOptions): Promise<VerifiedCall['greedy']> {
  const sampled = c.completion_token_ids!;
  const body = {
    ...(opts.model ? { model: opts.model } : {}),
    prompt: c.prompt_token_ids,
    max_tokens: sampled.length,
    temperature: 0,
    logprobs: 0,
    return_token_ids: true,
    return_tokens_as_token_ids: true,
  };
  const reply = await post(url, body, opts.apiKey);
  if (reply.status !== 200)
    return {
      checked: false,
      reason: `the engine does not generate from a token-id prompt (HTTP ${reply.status}: ${reply.text.slice(0, 200)})`,
    };
  let ids: number[] | null = null;
  try {
    const choice = GenerateSchema.parse(JSON.parse(reply.text)).choices[0]!;
    ids =
      choice.token_ids ??
      choice.logprobs?.tokens?.map((t) => (/^token_id:\d+$/.test(t) ? Number(t.slice(9)) : NaN)).filter((n) => !Number.isNaN(n)) ??
      null;
  } catch {
    ids = null;
  }
  if (!ids) return { checked: false, reason: 'the engine answered without token ids (return_token_ids / token_id:N logprob tokens)' };
  let first: number | null = null;
  for (let i = 0; i < Math.max(ids.length, sampled.length) && first === null; i++) if (ids[i] !== sampled[i]) first = i;
  return { checked: true, reproduced: first === null, first_difference: first, generated: ids.length };
}

export async function verifyRollout(
  source: Pick<ReplaySource, 'path' | 'session_id' | 'calls'>,
  opts: VerifyOptions,
): Promise<VerifyReport> {
  const tolerance = opts.tolerance ?? DEFAULT_VERIFY_TOLERANCE;
  const url = `${normaliseEngineUrl(opts.engineUrl)}/v1/completions`;
  const calls: VerifiedCall[] = [];
  const skipped: VerifyReport['skipped'] = [];
  for (const c of source.calls) {
    const why = skipReason(c);
    if (why) {
      skipped.push({ call_id: c.call_id, index: c.index, reason: why });
      continue;
    }
    const v = await verifyCall(c, url, opts, tolerance);
    calls.push(v);
    opts.onCall?.(v);
  }
  const diffs = calls.map((c) => c.max_abs_diff).filter((d): d is number => d !== null);
  const greedy = calls.filter((c) => c.greedy?.checked);
  const summary = {
    calls: calls.length,
    tokens: calls.reduce((n, c) => n + c.n_sampled, 0),
    mismatched_tokens: calls.reduce((n, c) => n + c.n_mismatched, 0),
    refused_prompts: calls.filter((c) => !c.prompt_accepted).length,
    greedy_checked: greedy.length,
    greedy_failed: greedy.filter((c) => c.greedy?.checked && !c.greedy.reproduced).length,
    max_abs_diff: diffs.length ? Math.max(...diffs) : null,
  };
  return {
    version: VERIFY_VERSION,
    session_id: source.session_id,
    source: source.path,
    engine_url: opts.engineUrl,
    model: opts.model ?? null,
    tolerance,
    created_at: new Date().toISOString(),
    calls,
    skipped,
    summary,
    // Nothing verified is not a pass: a capture without token data cannot be checked.
    ok: calls.length > 0 && calls.every((c) => c.ok),
  };
}

const fmt = (x: number | null) => (x === null ? '-' : x === Infinity ? 'inf' : x.toExponential(2));

export function formatVerify(r: VerifyReport): string {
  const lines = [
    `verified ${r.summary.tokens} sampled token(s) in ${r.summary.calls} call(s) of session ${r.session_id} against ${r.engine_url}${r.model ? ` (${r.model})` : ''}, tolerance ${r.tolerance} nats`,
  ];
  for (const c of r.calls) {
    let line = `  call ${c.call_id} (index ${c.index}): `;
    if (!c.prompt_accepted) line += `FAILED: the engine refused the recorded prompt (${c.n_prompt} ids): ${c.refusal}`;
    else if (c.first_mismatch) {
      const m = c.first_mismatch;
      line +=
        `FAILED: ${c.n_mismatched} of ${c.n_sampled} token(s) off; first at sampled position ${m.position} (token ` +
        `${m.token_id}): recorded ${m.recorded.toFixed(6)}, engine ${m.engine === null ? 'none' : m.engine.toFixed(6)}`;
    } else line += `ok, ${c.n_sampled} tokens, max |diff| ${fmt(c.max_abs_diff)}`;
    if (c.greedy?.checked)
      line += c.greedy.reproduced ? '; greedy: reproduced' : `; greedy: FAILED, differs at position ${c.greedy.first_difference}`;
    else if (c.greedy) line += `; greedy: not checked (${c.greedy.reason})`;
    lines.push(line);
  }
  for (const s of r.skipped) lines.push(`  skipped ${s.call_id} (index ${s.index}): ${s.reason}`);
  const s = r.summary;
  lines.push(
    `${s.mismatched_tokens} token(s) outside tolerance, ${s.refused_prompts} prompt(s) refused, greedy ${s.greedy_checked - s.greedy_failed}/${s.greedy_checked} ` +
      `reproduced; max |diff| ${fmt(s.max_abs_diff)}`,
  );
  lines.push(r.ok ? 'verify: ok' : r.calls.length ? 'verify: FAILED' : 'verify: FAILED (no call with token data to verify)');
  return `${lines.join('\n')}\n`;
}
