// OpenEnv's Harbor rollout protocol as `harness-lab serve` speaks it (docs/trainer-contracts.md §3): the
// task API bodies, the WebSocket frames, the JSON-RPC methods on /mcp, the `run_rollout` arguments
// and the HarborRolloutResult it answers with. Every body a trainer sends is parsed here, at the
// boundary; nothing in this protocol is versioned, so unknown fields are accepted and ignored
// (OpenEnv's pydantic models do the same), while the fields we read are checked.
import { z } from 'zod';

export const ERROR_CODES = [
  'INVALID_JSON',
  'UNKNOWN_TYPE',
  'VALIDATION_ERROR',
  'EXECUTION_ERROR',
  'CAPACITY_REACHED',
  'FACTORY_ERROR',
  'SESSION_ERROR',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

export const RUN_ROLLOUT_TOOL = 'run_rollout';

export const SplitBody = z.looseObject({ split: z.string().min(1) });
export const TaskRangeBody = z.looseObject({
  split: z.string().min(1),
  start: z.int().nonnegative().default(0),
  stop: z.int().nonnegative().nullable().optional(),
});
export const TaskBody = z.looseObject({ split: z.string().min(1), index: z.int().nonnegative() });

export interface TaskRef {
  index: number;
  task_id: string;
  task_name: string;
  dataset: string;
  /** Exactly the prompt the harness is given: the client maps sha1(instruction.strip()) back to this task. */
  instruction: string;
}

const Sampling = z.record(z.string(), z.union([z.number(), z.null()]));

/** The arguments of `run_rollout`, as TRL's HarborSessionFactory sends them. */
export const RunRolloutArgs = z.looseObject({
  split: z.string().min(1),
  task_index: z.int().nonnegative(),
  harness: z.string().min(1),
  sandbox: z.string().nullish(),
  reward_key: z.string().nullish(),
  keep_sandbox: z.boolean().nullish(),
  force_build: z.boolean().nullish(),
  /** The engine (vLLM) the rollout samples from; absent or empty: the server's embedded engine. */
  llm_url: z.string().nullish(),
  model: z.string().nullish(),
  api_key: z.string().nullish(),
  auth_header: z.string().nullish(),
  agent_timeout_sec: z.number().positive().nullish(),
  agent_step_limit: z.int().positive().nullish(),
  sampling: Sampling.nullish(),
  provider: z.string().nullish(),
  purpose: z.enum(['train', 'eval']).nullish(),
  eval_sampling: Sampling.nullish(),
  policy_version: z.union([z.string(), z.number()]).nullish(),
});
export type RunRolloutArgs = z.infer<typeof RunRolloutArgs>;

export const CallToolAction = z.looseObject({
  type: z.literal('call_tool'),
  tool_name: z.string().min(1),
  arguments: z.record(z.string(), z.unknown()).default({}),
});

export const WsFrame = z.looseObject({ type: z.string().min(1), data: z.unknown().optional() });

export const JsonRpcRequest = z.looseObject({
  jsonrpc: z.literal('2.0').optional(),
  id: z.union([z.string(), z.number(), z.null()]).optional(),
  method: z.string().min(1),
  params: z.record(z.string(), z.unknown()).optional(),
});

export interface HarborTurn {
  turn: number;
  role: string;
  finish_reason: string | null;
  prompt_token_ids: number[];
  completion_token_ids: number[];
  per_token_logps: number[];
  /** Prompt + completion, prompt part 0; null when the capture has no usable tokens for the turn. */
  loss_mask: number[] | null;
  node_id: string;
  n_tools: number;
  discarded: boolean;
  trainable: boolean;
  sampling_params: Record<string, unknown>;
  requested_sampling_params: Record<string, unknown>;
  text: string;
  tool_calls: { name: string; arguments: unknown }[];
  request_messages: unknown[];
  request_tools: unknown[] | null;
}

export interface HarborRolloutResult {
  // identity
  task_id: string;
  task_name: string;
  dataset: string;
  harness: string;
  sandbox: string;
  trial_name: string;
  session_id: string;
  // outcome
  reward: number | null;
  rewards: Record<string, number>;
  reward_key: string | null;
  step_results: { name: string; rewards: Record<string, number>; passed: boolean }[];
  // tier
  rollout_type: 'train' | 'eval';
  capture_level: string;
  param_fixes: string[];
  // capture
  turns: HarborTurn[];
  conversations: unknown[][];
  n_turns: number;
  n_roots: number;
  budget_stop_count: number;
  n_trainable_tokens: number;
  multi_turn: boolean;
  atif: unknown;
  trace_source: string;
  findings: string[];
  // diagnostics
  wall_s: number;
  phase_timings: Record<string, number>;
  agent_log_tail: string;
  // failure
  ok: boolean;
  error: string | null;
  exception_type: string | null;
  // Harness Lab's own, beside OpenEnv's fields: the class the batch classifier gave the rollout.
  rollout_class: string | null;
  policy_version: string | null;
}

/** A message of a zod failure in the caller's terms: the field's path and what is wrong with it. */
export function zodMessage(err: z.ZodError): string {
  return err.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ');
}

export function errorFrame(code: ErrorCode, message: string, extra: Record<string, unknown> = {}) {
  return { type: 'error', data: { message, code, ...extra } };
}

export function observationData(toolName: string, result: unknown, error: { error_type: string; message: string } | null) {
  const text = typeof result === 'string' ? result : JSON.stringify(result);
  return {
    observation: {
      tool_name: toolName,
      result: error ? null : { content: [{ type: 'text', text }], structured_content: null, is_error: false },
      error,
    },
    reward: null,
    done: false,
    metadata: {},
  };
}
