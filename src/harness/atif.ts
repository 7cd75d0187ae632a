// ATIF (Agent Trajectory Interchange Format) v1.x: the trajectory a harness writes about itself
// (Harbor's `<trial>/agent/trajectory.json`). Parsed with zod at the boundary; every model forbids
// unknown keys, as Harbor's validator does, because anything non-standard belongs under `extra`.
// Pure: no Node APIs here, so the webview bundle and the sandbox runner can both import it.
import { z } from 'zod';

const Extra = z.record(z.string(), z.unknown());
const Int0 = z.int().nonnegative();

const TextPart = z.strictObject({ type: z.literal('text'), text: z.string() });
const ImagePart = z.strictObject({
  type: z.literal('image'),
  source: z.strictObject({ media_type: z.enum(['image/jpeg', 'image/png', 'image/gif', 'image/webp']), path: z.string().min(1) }),
});
export const AtifContentPartSchema = z.discriminatedUnion('type', [TextPart, ImagePart]);
const Content = z.union([z.string(), z.array(AtifContentPartSchema)]);

export const AtifSubagentRefSchema = z
  .strictObject({
    trajectory_id: z.string().min(1).optional(),
    trajectory_path: z.string().min(1).optional(),
    session_id: z.string().optional(),
    extra: Extra.optional(),
  })
  .refine((r) => r.trajectory_id !== undefined || r.trajectory_path !== undefined, {
    message: 'a subagent reference needs trajectory_id or trajectory_path',
  });

export const AtifToolCallSchema = z.strictObject({
  tool_call_id: z.string(),
  function_name: z.string(),
  arguments: z.record(z.string(), z.unknown()),
  extra: Extra.optional(),
});

export const AtifObservationSchema = z.strictObject({
  results: z.array(
    z.strictObject({
      source_call_id: z.string().nullish(),
      content: Content.nullish(),
      subagent_trajectory_ref: z.array(AtifSubagentRefSchema).nullish(),
      extra: Extra.optional(),
    }),
  ),
});

export const AtifMetricsSchema = z
  .strictObject({
    prompt_tokens: Int0.nullish(),
    completion_tokens: Int0.nullish(),
    cached_tokens: Int0.nullish(),
    cost_usd: z.number().nullish(),
    prompt_token_ids: z.array(Int0).nullish(),
    completion_token_ids: z.array(Int0).nullish(),
    logprobs: z.array(z.number()).nullish(),
    extra: Extra.nullish(),
  })
  .superRefine((m, ctx) => {
    if (m.logprobs && m.completion_token_ids && m.logprobs.length !== m.completion_token_ids.length) {
      ctx.addIssue({
        code: 'custom',
        path: ['logprobs'],
        message: `${m.logprobs.length} logprobs for ${m.completion_token_ids.length} completion_token_ids`,
      });
    }
  });

export const AtifStepSchema = z
  .strictObject({
    step_id: z.int().min(1),
    timestamp: z.string().nullish(),
    source: z.enum(['system', 'user', 'agent']),
    model_name: z.string().nullish(),
    reasoning_effort: z.union([z.string(), z.number()]).nullish(),
    message: Content,
    reasoning_content: z.string().nullish(),
    tool_calls: z.array(AtifToolCallSchema).nullish(),
    observation: AtifObservationSchema.nullish(),
    metrics: AtifMetricsSchema.nullish(),
    is_copied_context: z.boolean().nullish(),
    llm_call_count: Int0.nullish(),
    extra: Extra.nullish(),
  })
  .superRefine((s, ctx) => {
    if (s.source !== 'agent') {
      for (const key of ['model_name', 'reasoning_effort', 'reasoning_content', 'tool_calls', 'metrics'] as const) {
        if (s[key] !== undefined && s[key] !== null)
          ctx.addIssue({ code: 'custom', path: [key], message: `only agent steps may have ${key} (this step's source is "${s.source}")` });
      }
    }
    const ids = new Set((s.tool_calls ?? []).map((t) => t.tool_call_id));
    s.observation?.results.forEach((r, i) => {
      if (r.source_call_id && !ids.has(r.source_call_id)) {
        ctx.addIssue({
          code: 'custom',
          path: ['observation', 'results', i, 'source_call_id'],
          message: `"${r.source_call_id}" is not a tool_call_id of this step`,
        });
      }
    });
  });

export const AtifAgentSchema = z.strictObject({
  name: z.string().min(1),
  version: z.string(),
  model_name: z.string().nullish(),
  tool_definitions: z.array(z.record(z.string(), z.unknown())).nullish(),
  extra: Extra.nullish(),
});

export const AtifFinalMetricsSchema = z.strictObject({
  total_prompt_tokens: Int0.nullish(),
  total_completion_tokens: Int0.nullish(),
  total_cached_tokens: Int0.nullish(),
  total_cost_usd: z.number().nullish(),
  total_steps: Int0.nullish(),
  extra: Extra.nullish(),
});

export interface AtifTrajectory {
  schema_version: string;
  session_id?: string | null | undefined;
  trajectory_id?: string | null | undefined;
  agent: z.infer<typeof AtifAgentSchema>;
  steps: AtifStep[];
  notes?: string | null | undefined;
  final_metrics?: z.infer<typeof AtifFinalMetricsSchema> | null | undefined;
  continued_trajectory_ref?: string | null | undefined;
  subagent_trajectories?: AtifTrajectory[] | null | undefined;
  extra?: Record<string, unknown> | null | undefined;
}
export type AtifStep = z.infer<typeof AtifStepSchema>;
export type AtifMetrics = z.infer<typeof AtifMetricsSchema>;

const trajectoryShape = (embedded: boolean): z.ZodType<AtifTrajectory> =>
  z
    .strictObject({
      schema_version: z.string().regex(/^ATIF-v1\.\d+$/, 'schema_version must be "ATIF-v1.x" (e.g. "ATIF-v1.7")'),
      session_id: z.string().nullish(),
      trajectory_id: embedded ? z.string().min(1, 'embedded subagent trajectories need a trajectory_id') : z.string().nullish(),
      agent: AtifAgentSchema,
      steps: z.array(AtifStepSchema).min(1, 'a trajectory has at least one step'),
      notes: z.string().nullish(),
      final_metrics: AtifFinalMetricsSchema.nullish(),
      continued_trajectory_ref: z.string().nullish(),
      subagent_trajectories: z.array(z.lazy(() => trajectoryShape(true))).nullish(),
      extra: Extra.nullish(),
    })
    .superRefine((t, ctx) => {
      // Consecutive without gaps; a continuation file (after a summarisation split) may go on numbering
      // where its predecessor stopped, so only the increments are checked.
      t.steps.forEach((s, i) => {
        const want = i === 0 ? s.step_id : t.steps[i - 1]!.step_id + 1;
        if (s.step_id !== want)
          ctx.addIssue({
            code: 'custom',
            path: ['steps', i, 'step_id'],
            message: `step_id must run without gaps: expected ${want}, got ${s.step_id}`,
          });
      });
    });

export const AtifTrajectorySchema: z.ZodType<AtifTrajectory> = trajectoryShape(false);

/** Bad ATIF input; the message lists each problem with its JSON path (e.g. `steps[2].metrics.logprobs`). */
export class AtifParseError extends Error {
  constructor(
    message: string,
    readonly issues: readonly string[] = [],
  ) {
    super(message);
    this.name = 'AtifParseError';
  }
}

function pathText(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : `${out ? '.' : ''}${String(p)}`;
  return out || '(root)';
}

/** Parse a trajectory from JSON text or an already-parsed value. `source` names it in errors. */
export function parseAtif(input: string | unknown, source = 'trajectory'): AtifTrajectory {
  let value: unknown = input;
  if (typeof input === 'string') {
    try {
      value = JSON.parse(input);
    } catch (err) {
      throw new AtifParseError(`${source}: not JSON (${err instanceof Error ? err.message : String(err)})`);
    }
  }
  const res = AtifTrajectorySchema.safeParse(value);
  if (res.success) return res.data;
  const issues = res.error.issues.map((i) => `${pathText(i.path)}: ${i.message}`);
  const shown = issues.slice(0, 8).join('; ') + (issues.length > 8 ? `; and ${issues.length - 8} more` : '');
  throw new AtifParseError(`${source} is not a valid ATIF v1.x trajectory: ${shown}`, issues);
}

/** The step's message as plain text (image parts become `[image: path]`). */
export function atifMessageText(content: AtifStep['message'] | null | undefined): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  return content.map((p) => (p.type === 'text' ? p.text : `[image: ${p.source.path}]`)).join('');
}

/**
 * Join a trajectory with its continuations (context-summarisation splits, `continued_trajectory_ref`)
 * into one step list, renumbered 1..N. `load` returns the referenced document, or null when absent.
 */
export async function joinContinuations(
  first: AtifTrajectory,
  load: (ref: string) => Promise<AtifTrajectory | null>,
): Promise<AtifTrajectory> {
  const steps: AtifStep[] = [...first.steps];
  const subagents = [...(first.subagent_trajectories ?? [])];
  const seen = new Set<string>();
  let ref = first.continued_trajectory_ref ?? null;
  while (ref && !seen.has(ref)) {
    seen.add(ref);
    const next = await load(ref);
    if (!next) break;
    steps.push(...next.steps);
    subagents.push(...(next.subagent_trajectories ?? []));
    ref = next.continued_trajectory_ref ?? null;
  }
  return {
    ...first,
    steps: steps.map((s, i) => ({ ...s, step_id: i + 1 })),
    subagent_trajectories: subagents.length > 0 ? subagents : first.subagent_trajectories,
    continued_trajectory_ref: null,
  };
}
