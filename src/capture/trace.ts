// TrainingTrace: what `harness-lab export` writes, one JSON object per line, one per root-to-leaf path.
// Field documentation: docs/training-trace.md. Consumers validate lines with TrainingTraceSchema, which
// checks the invariants a trainer relies on, not just the shape.
import { z } from 'zod';
import type { GraphNode } from './graph.js';
import { startsWithIds } from './token-ids.js';
import type { TrainingSequence } from './sequences.js';
import { turnLengths } from './sequences.js';

export const TRAINING_TRACE_SCHEMA_VERSION = 1;

const JsonObject = z.record(z.string(), z.unknown());
const Message = z.looseObject({ role: z.string() });
const TokenIds = z.array(z.int().nonnegative());
const Mask = z.array(z.union([z.literal(0), z.literal(1)]));

const TurnMetadata = z.strictObject({
  node_id: z.string().min(1),
  index: z.int().nonnegative(),
  model: z.string().nullable(),
  n_tools: z.int().nonnegative(),
  harness_session_id: z.string().nullable(),
  sampling_params: JsonObject,
  requested_sampling_params: JsonObject,
});

export const TrainingTurnSchema = z
  .strictObject({
    node_id: z.string().min(1),
    prompt_token_ids: TokenIds,
    completion_token_ids: TokenIds,
    per_token_logps: z.array(z.number().max(0)),
    loss_mask: Mask,
    request: z.strictObject({ messages: z.array(Message), tools: z.array(JsonObject).nullable() }),
    response: z.strictObject({ choices: z.array(z.strictObject({ message: Message, finish_reason: z.string().nullable() })) }),
    metadata: TurnMetadata,
  })
  .superRefine((t, ctx) => {
    const p = t.prompt_token_ids.length;
    const c = t.completion_token_ids.length;
    if (t.metadata.node_id !== t.node_id) ctx.addIssue({ code: 'custom', message: 'metadata.node_id must equal node_id' });
    if (t.per_token_logps.length !== c)
      ctx.addIssue({ code: 'custom', message: `per_token_logps has ${t.per_token_logps.length} entries for ${c} completion tokens` });
    if (t.loss_mask.length !== p + c) {
      ctx.addIssue({ code: 'custom', message: `loss_mask has ${t.loss_mask.length} entries for ${p} prompt + ${c} completion tokens` });
      return;
    }
    if (t.loss_mask.slice(0, p).some((m) => m !== 0)) ctx.addIssue({ code: 'custom', message: 'prompt positions of loss_mask must be 0' });
    for (let i = 0; i < c && i < t.per_token_logps.length; i++) {
      if (t.loss_mask[p + i] === 0 && t.per_token_logps[i] !== 0) {
        ctx.addIssue({ code: 'custom', message: `completion position ${i} is masked but carries logprob ${t.per_token_logps[i]}` });
        break;
      }
    }
  });

export const TrainingTraceSchema = z
  .strictObject({
    schema_version: z.literal(TRAINING_TRACE_SCHEMA_VERSION),
    session_id: z.string().min(1),
    trace_id: z.string().min(1),
    role: z.enum(['agent', 'auxiliary', 'discarded']),
    root_id: z.string().min(1),
    node_ids: z.array(z.string().min(1)).min(1),
    input_ids: TokenIds,
    loss_mask: Mask,
    logprobs: z.array(z.number().max(0)),
    turn_lengths: z.array(z.int().positive()),
    n_trainable: z.int().nonnegative(),
    trainable: z.boolean(),
    validation: z.array(z.string()),
    turns: z.array(TrainingTurnSchema).min(1),
  })
  .superRefine((t, ctx) => {
    const issue = (message: string) => ctx.addIssue({ code: 'custom', message });
    if (new Set(t.node_ids).size !== t.node_ids.length) issue('node_ids must be unique');
    if (t.turns.map((x) => x.node_id).join('\n') !== t.node_ids.join('\n')) issue('turns must be the nodes of node_ids, in order');
    if (t.root_id !== t.node_ids[0]) issue('root_id must be the first node id');
    const n = t.input_ids.length;
    if (t.loss_mask.length !== n || t.logprobs.length !== n) {
      issue(`input_ids=${n} loss_mask=${t.loss_mask.length} logprobs=${t.logprobs.length} must be equal`);
      return;
    }
    if (t.loss_mask.reduce<number>((a, b) => a + b, 0) !== t.n_trainable) issue('n_trainable must equal the number of mask-1 positions');
    if (turnLengths(t.loss_mask).join(',') !== t.turn_lengths.join(',')) issue('turn_lengths must be the runs of mask 1');
    // The flat arrays must be exactly the turns laid end to end: each prompt extends the previous
    // prompt+completion, and only the new part of each prompt is appended.
    let pos = 0;
    let prev: { prompt: number[]; completion: number[] } | null = null;
    for (const turn of t.turns) {
      const from = prev ? prev.prompt.length + prev.completion.length : 0;
      if (prev) {
        const ids = turn.prompt_token_ids;
        const extends_ =
          ids.length > prev.prompt.length &&
          startsWithIds(ids, prev.prompt) &&
          startsWithIds(ids.slice(prev.prompt.length, from), prev.completion);
        if (!extends_) {
          issue(`turn ${turn.node_id}: prompt does not extend the previous turn's prompt+completion`);
          return;
        }
      }
      const span = [...turn.prompt_token_ids.slice(from), ...turn.completion_token_ids];
      const mask = turn.loss_mask.slice(from);
      const lps = [...new Array<number>(turn.prompt_token_ids.length - from).fill(0), ...turn.per_token_logps];
      for (let i = 0; i < span.length; i++, pos++) {
        if (t.input_ids[pos] !== span[i] || t.loss_mask[pos] !== mask[i] || t.logprobs[pos] !== lps[i]) {
          issue(`turn ${turn.node_id}: flat arrays disagree with the turn at position ${pos}`);
          return;
        }
      }
      prev = { prompt: turn.prompt_token_ids, completion: turn.completion_token_ids };
    }
    if (pos !== n) issue(`flat arrays have ${n} positions but the turns cover ${pos}`);
  });

export type TrainingTrace = z.infer<typeof TrainingTraceSchema>;
export type TrainingTurn = z.infer<typeof TrainingTurnSchema>;

/** One turn in TrainingTurn form. Token arrays are shared with the record, not copied. */
export function trainingTurn(node: GraphNode): TrainingTurn {
  const r = node.record;
  const lps = node.sampled_logprobs;
  const usable = lps !== null && lps.length === node.sampled_ids.length;
  const mask = new Array<0 | 1>(node.promptLength + node.sampled_ids.length).fill(0);
  if (usable) mask.fill(1, node.promptLength);
  return {
    node_id: node.node_id,
    prompt_token_ids: node.prompt_ids as number[],
    completion_token_ids: node.sampled_ids as number[],
    per_token_logps: usable ? (lps as number[]) : node.sampled_ids.map(() => 0),
    loss_mask: mask,
    request: {
      messages: node.request_messages as TrainingTurn['request']['messages'],
      tools: (node.request_tools as TrainingTurn['request']['tools']) ?? null,
    },
    response: {
      choices: [
        {
          message: (node.response_message ?? {
            role: 'assistant',
            content: null,
          }) as TrainingTurn['response']['choices'][number]['message'],
          finish_reason: r.finish_reason,
        },
      ],
    },
    metadata: {
      node_id: node.node_id,
      index: node.index,
      model: r.model,
      n_tools: r.n_tools,
      harness_session_id: r.harness_session_id,
      sampling_params: r.sampling_params,
      requested_sampling_params: r.requested_sampling_params,
    },
  };
}

/**
 * A sequence and its path as a TrainingTrace. `validation` should already carry rollout-level findings.
 * Pass one `turnCache` for all paths of a rollout so shared turns are built once and shared.
 */
export function toTrainingTrace(
  sessionId: string,
  seq: TrainingSequence,
  path: readonly GraphNode[],
  turnCache: Map<string, TrainingTurn> = new Map(),
): TrainingTrace {
  const turn = (node: GraphNode): TrainingTurn => {
    let t = turnCache.get(node.node_id);
    if (!t) turnCache.set(node.node_id, (t = trainingTurn(node)));
    return t;
  };
  return {
    schema_version: TRAINING_TRACE_SCHEMA_VERSION,
    session_id: sessionId,
    trace_id: `${sessionId}/${seq.node_ids[seq.node_ids.length - 1]}`,
    role: seq.role,
    root_id: seq.root_id,
    node_ids: seq.node_ids,
    input_ids: seq.input_ids,
    loss_mask: seq.loss_mask as (0 | 1)[],
    logprobs: seq.logprobs,
    turn_lengths: seq.turn_lengths,
    n_trainable: seq.n_trainable,
    trainable: seq.trainable,
    validation: seq.validation,
    turns: path.map(turn),
  };
}

/** JSONL: one trace per line, newline-terminated; empty string for no traces. */
export function traceToJsonl(traces: readonly TrainingTrace[]): string {
  return traces.map((t) => `${JSON.stringify(t)}\n`).join('');
}
