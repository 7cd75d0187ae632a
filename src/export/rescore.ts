// Drift between the sampler and the trainer: teacher-force a rollout's sampled tokens through an
// engine's current weights and compare each token's rescored logprob with the behaviour logprob the
// capture recorded. The ratio exp(rescored - behaviour) is the importance ratio a PPO/GRPO trainer
// would compute for that token; ratios far from 1 mean the rollout is stale or the two disagree.
//
// The engine is asked with vLLM's API: POST /v1/completions with the token ids of prompt + completion
// and `prompt_logprobs`, under the call's own sampling parameters (so processed logprobs match how
// they were captured). The embedded engine serves the same route.
import { z } from 'zod';
import { normaliseEngineUrl } from '../capture/engine-client.js';
import type { CallRecord } from '../capture/types.js';
import type { StoredRollout } from '../capture/rollout-file.js';

export const RESCORE_VERSION = 1;
/** PPO's clip range: a token is past the threshold when |ratio - 1| > 0.2. */
export const DEFAULT_DRIFT_THRESHOLD = 0.2;

export interface RescoredCall {
  call_id: string;
  index: number;
  behaviour: number[];
  /** Null where the engine gave no finite logprob (the token is impossible under its weights). */
  rescored: (number | null)[];
  /** exp(rescored - behaviour); 0 where rescored is null. */
  ratio: number[];
  mean_ratio: number;
  share_past: number;
}

export interface RescoreReport {
  version: typeof RESCORE_VERSION;
  session_id: string;
  source: string;
  engine_url: string;
  model: string | null;
  threshold: number;
  created_at: string;
  calls: RescoredCall[];
  /** Calls that were not rescored, with why. */
  skipped: { call_id: string; reason: string }[];
  summary: {
    calls: number;
    tokens: number;
    mean_ratio: number | null;
    share_past: number | null;
    mean_abs_log_ratio: number | null;
    max_abs_log_ratio: number | null;
  };
}

export class RescoreError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RescoreError';
  }
}

const PromptLogprobsSchema = z.array(z.record(z.string(), z.looseObject({ logprob: z.number().nullable() })).nullable());
const CompletionResponseSchema = z.looseObject({
  choices: z.array(z.looseObject({ prompt_logprobs: PromptLogprobsSchema.nullish() })).min(1),
  prompt_logprobs: PromptLogprobsSchema.nullish(),
});

function skipReason(c: CallRecord): string | null {
  if (!c.prompt_token_ids?.length) return 'no prompt token ids';
  if (!c.completion_token_ids?.length) return 'no sampled tokens';
  if (!c.logprobs || c.logprobs.length !== c.completion_token_ids.length) return 'no aligned behaviour logprobs';
  return null;
}

function samplingOf(c: CallRecord): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of ['temperature', 'top_p', 'top_k', 'min_p'] as const) {
    const v = c.sampling_params?.[k];
    if (typeof v === 'number') out[k] = v;
  }
  return out;
}

async function scoreCall(c: CallRecord, engineUrl: string, model: string | null): Promise<(number | null)[]> {
  const prompt = c.prompt_token_ids!;
  const sampled = c.completion_token_ids!;
  const body = {
    ...(model ? { model } : {}),
    prompt: [...prompt, ...sampled],
    max_tokens: 1,
    prompt_logprobs: 0,
    prompt_logprobs_start: prompt.length,
    ...samplingOf(c),
  };
  const url = `${normaliseEngineUrl(engineUrl)}/v1/completions`;
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(600_000),
    });
  } catch (err) {
    throw new RescoreError(`${url}: ${(err as Error).message}`);
  }
  const text = await res.text();
  if (res.status !== 200) throw new RescoreError(`${url} answered ${res.status} for call ${c.call_id}: ${text.slice(0, 300)}`);
  let parsed;
  try {
    parsed = CompletionResponseSchema.parse(JSON.parse(text));
  } catch (err) {
    throw new RescoreError(`${url}: not a completions answer with prompt_logprobs (${(err as Error).message.slice(0, 300)})`);
  }
  const lps = parsed.choices[0]!.prompt_logprobs ?? parsed.prompt_logprobs;
  if (!lps || lps.length !== prompt.length + sampled.length)
    throw new RescoreError(
      `${url}: prompt_logprobs has ${lps?.length ?? 0} positions for ${prompt.length + sampled.length} tokens (call ${c.call_id})`,
    );
  return sampled.map((id, i) => {
    const entry = lps[prompt.length + i];
    const lp = entry?.[String(id)]?.logprob;
    if (entry === null || entry === undefined || lp === undefined)
      throw new RescoreError(`${url}: no prompt logprob for token ${id} at position ${prompt.length + i} (call ${c.call_id})`);
    return lp;
  });
}

/** A rollout to rescore: its calls, the session they belong to and where it was read from (for the report). */
export type RescoreSource = Pick<StoredRollout, 'file' | 'calls'> & { info: Pick<StoredRollout['info'], 'session_id'> };

export async function rescoreRollout(
  rollout: RescoreSource,
  opts: { engineUrl: string; model?: string | null; threshold?: number },
): Promise<RescoreReport> {
  const threshold = opts.threshold ?? DEFAULT_DRIFT_THRESHOLD;
  const model = opts.model ?? null;
  const calls: RescoredCall[] = [];
  const skipped: RescoreReport['skipped'] = [];
  for (const c of [...rollout.calls].sort((a, b) => a.index - b.index)) {
    const why = skipReason(c);
    if (why) {
      skipped.push({ call_id: c.call_id, reason: why });
      continue;
    }
    const rescored = await scoreCall(c, opts.engineUrl, model);
    const behaviour = c.logprobs!;
    const ratio = rescored.map((lp, i) => (lp === null ? 0 : Math.exp(lp - behaviour[i]!)));
    calls.push({
      call_id: c.call_id,
      index: c.index,
      behaviour: [...behaviour],
      rescored,
      ratio,
      mean_ratio: ratio.reduce((a, b) => a + b, 0) / ratio.length,
      share_past: ratio.filter((r) => Math.abs(r - 1) > threshold).length / ratio.length,
    });
  }
  const all = calls.flatMap((c) => c.ratio);
  const logs = calls.flatMap((c) => c.rescored.map((lp, i) => (lp === null ? Infinity : Math.abs(lp - c.behaviour[i]!))));
  return {
    version: RESCORE_VERSION,
    session_id: rollout.info.session_id,
    source: rollout.file,
    engine_url: opts.engineUrl,
    model,
    threshold,
    created_at: new Date().toISOString(),
    calls,
    skipped,
    summary: {
      calls: calls.length,
      tokens: all.length,
      mean_ratio: all.length ? all.reduce((a, b) => a + b, 0) / all.length : null,
      share_past: all.length ? all.filter((r) => Math.abs(r - 1) > threshold).length / all.length : null,
      mean_abs_log_ratio: logs.length ? logs.reduce((a, b) => a + b, 0) / logs.length : null,
      max_abs_log_ratio: logs.length ? Math.max(...logs) : null,
    },
  };
}

export const RescoreReportSchema = z.looseObject({
  version: z.literal(RESCORE_VERSION),
  session_id: z.string(),
  threshold: z.number(),
  calls: z.array(z.looseObject({ call_id: z.string(), ratio: z.array(z.number()) })),
});

export function formatRescore(r: RescoreReport): string {
  const f = (x: number | null, d = 4) => (x === null ? '-' : x.toFixed(d));
  const lines = [
    `rescored ${r.summary.tokens} sampled token(s) in ${r.summary.calls} call(s) of session ${r.session_id} against ${r.engine_url}${r.model ? ` (${r.model})` : ''}`,
  ];
  for (const c of r.calls)
    lines.push(
      `  call ${c.call_id} (index ${c.index}): ${c.ratio.length} tokens, mean ratio ${f(c.mean_ratio)}, past ±${r.threshold}: ${(c.share_past * 100).toFixed(1)}%`,
    );
  for (const s of r.skipped) lines.push(`  skipped ${s.call_id}: ${s.reason}`);
  lines.push(
    `mean ratio ${f(r.summary.mean_ratio)}; share of tokens with |ratio - 1| > ${r.threshold}: ${r.summary.share_past === null ? '-' : `${(r.summary.share_past * 100).toFixed(1)}%`}; ` +
      `mean |log ratio| ${f(r.summary.mean_abs_log_ratio, 6)}, max ${f(r.summary.max_abs_log_ratio, 6)}`,
  );
  return `${lines.join('\n')}\n`;
}
