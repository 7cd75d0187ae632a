// One recorded call as a replay reads it, from a rollout document, a replay fixture or a load file of
// `export --format replay`. Its own file so the load file (load.ts) and the replay's reader
// (source.ts) validate the same fields with the same schema, and neither imports the other's reader.
import { z } from 'zod';

export const TokenIds = z.array(z.int().nonnegative());

export const TopLogprobsSchema = z.array(z.array(z.looseObject({ token_id: z.int().nullable(), token: z.string(), logprob: z.number() })));

export const TokenBytesSchema = z.array(z.array(z.int().min(0).max(255)).nullable());

/**
 * `CallRecord.render` of a call captured in token-in mode (src/capture/render/render-info.ts), as a
 * token-in replay needs it: the route the prompt ids went to, and how they were made (the replayed
 * call's own `render` must come out the same). Descriptive fields stay open for later capture versions.
 */
export const RenderInfoSchema = z.looseObject({
  mode: z.literal('proxy'),
  family: z.string(),
  kind: z.enum(['bridge', 'full']),
  anchor_call_id: z.string().nullable(),
  anchor_tokens: z.int().nonnegative(),
  bridge_span: z.tuple([z.int().nonnegative(), z.int().nonnegative()]).nullable(),
  synthesized_close: z.boolean(),
  new_root_reason: z.string().nullable(),
  full_render: z.looseObject({ tokens: z.int(), common_prefix: z.int(), equal: z.boolean(), drift_tokens: z.int() }).nullable().optional(),
  tool_call_parse: z.enum(['none', 'ok', 'failed']).optional(),
  tool_call_statuses: z.array(z.string()).optional(),
  engine_route: z.enum(['/v1/completions', '/generate']),
  tokens_digest: z.string().optional(),
});

export const ReplayCallSchema = z.looseObject({
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
  prompt_token_ids: TokenIds.nullable().optional(),
  completion_token_ids: TokenIds.nullable().optional(),
  logprobs: z.array(z.number()).nullable().optional(),
  top_logprobs: TopLogprobsSchema.nullable().optional(),
  token_bytes: TokenBytesSchema.nullable().optional(),
  /** Set on calls captured in token-in mode (the proxy rendered the prompt ids): see render-info.ts. */
  render: z.looseObject({ mode: z.string(), engine_route: z.string().optional() }).optional(),
});

/** One recorded call as a replay uses it. */
export type ReplayCall = z.infer<typeof ReplayCallSchema>;

/**
 * The record a load file line of a token-in capture carries beside its chat request (`request`, the
 * call's engine request) and `index`: everything else a token-in replay reads of the call. The token
 * data must be consistent as the capture keeps it, since the replay compares and answers with it
 * token for token (a record without prompt ids is the replay's to report, as for a rollout document).
 */
export const LoadRecordSchema = ReplayCallSchema.omit({ index: true, engine_request: true })
  .extend({
    stream: z.boolean(),
    render: RenderInfoSchema,
    prompt_token_ids: TokenIds.nullable(),
    completion_token_ids: TokenIds.nullable(),
    logprobs: z.array(z.number()).nullable(),
    top_logprobs: TopLogprobsSchema.nullable(),
    finish_reason: z.string().nullable(),
    error: z.looseObject({ status: z.int(), message: z.string() }).nullable(),
  })
  .superRefine((r, ctx) => {
    // The capture keeps logprobs only when they align with the sampled ids (else null, a FATAL finding).
    if (r.logprobs && r.completion_token_ids && r.logprobs.length !== r.completion_token_ids.length)
      ctx.addIssue({
        code: 'custom',
        path: ['logprobs'],
        message: `${r.logprobs.length} logprob(s) for ${r.completion_token_ids.length} sampled id(s) (completion_token_ids)`,
      });
    const span = r.render.bridge_span;
    if (span && r.prompt_token_ids && (span[0] > span[1] || span[1] > r.prompt_token_ids.length))
      ctx.addIssue({ code: 'custom', path: ['render', 'bridge_span'], message: `[${span.join(', ')}] is not inside the prompt ids` });
  });

export type LoadRecord = z.infer<typeof LoadRecordSchema>;
