// Builds CallRecords from token arrays for the graph, sequence and rollout tests, and the facts of an
// attempt that went well for the batch tests.
import type { AttemptFacts } from '../../src/batch/backend.js';
import type { CallRecord, ChatMessage, SessionInfo } from '../../src/capture/types.js';

export interface CallSpec {
  id: string;
  index: number;
  prompt: number[] | null;
  sampled: number[] | null;
  /** Default: one -0.5 per sampled token. Pass null for "missing". */
  logprobs?: number[] | null;
  nTools?: number;
  finish?: string | null;
  messages?: ChatMessage[];
  reply?: ChatMessage | null;
  error?: boolean;
}

export function call(spec: CallSpec): CallRecord {
  const sampled = spec.sampled;
  const logprobs = spec.logprobs !== undefined ? spec.logprobs : sampled ? sampled.map(() => -0.5) : null;
  const reply = spec.reply === undefined ? { role: 'assistant', content: `reply ${spec.id}` } : spec.reply;
  const answered = !spec.error;
  return {
    call_id: spec.id,
    session_id: 'sess',
    index: spec.index,
    dialect: 'openai_chat',
    path: '/v1/chat/completions',
    stream: false,
    started_at: '2026-01-01T00:00:00.000Z',
    ended_at: '2026-01-01T00:00:01.000Z',
    latency_ms: 1000,
    harness_session_id: null,
    request: { headers: {}, body: {} },
    engine_url: 'http://127.0.0.1:1',
    engine_request: {
      model: 'm',
      messages: spec.messages ?? [{ role: 'user', content: `prompt ${spec.id}` }],
      ...(spec.nTools ? { tools: [] } : {}),
    },
    engine_response:
      answered && reply
        ? {
            id: `chatcmpl-${spec.id}`,
            object: 'chat.completion',
            created: 0,
            model: 'm',
            choices: [{ index: 0, message: reply, finish_reason: spec.finish ?? 'stop', token_ids: sampled }],
            prompt_token_ids: spec.prompt,
          }
        : null,
    response_body: null,
    model: 'm',
    finish_reason: answered ? (spec.finish ?? 'stop') : null,
    usage: null,
    n_tools: spec.nTools ?? 0,
    requested_sampling_params: { temperature: 0.8 },
    sampling_params: { temperature: 0.8, top_p: 1 },
    findings: [],
    error: spec.error ? { status: 502, message: 'engine down', kind: 'engine' } : null,
    prompt_token_ids: answered ? spec.prompt : null,
    completion_token_ids: answered ? sampled : null,
    logprobs: answered ? logprobs : null,
    top_logprobs: null,
    token_bytes: null,
  };
}

/**
 * A linear multi-turn chain: call k's prompt is call k-1's prompt+completion plus `glue` new tokens.
 * Token values are distinct per position so that nothing matches by accident.
 */
export function chain(
  n: number,
  opts: { first?: number; sampled?: number; glue?: number; prefix?: string; nTools?: number } = {},
): CallRecord[] {
  const first = opts.first ?? 8;
  const nSampled = opts.sampled ?? 3;
  const glue = opts.glue ?? 2;
  let next = 1000;
  const fresh = (k: number) => Array.from({ length: k }, () => next++);
  const out: CallRecord[] = [];
  let prompt = fresh(first);
  for (let i = 0; i < n; i++) {
    const sampled = fresh(nSampled);
    out.push(call({ id: `${opts.prefix ?? 'c'}${i}`, index: i, prompt, sampled, nTools: opts.nTools ?? 1 }));
    prompt = [...prompt, ...sampled, ...fresh(glue)];
  }
  return out;
}

export const session: SessionInfo = {
  session_id: 'sess',
  created_at: '2026-01-01T00:00:00.000Z',
  model: 'm',
  engine_url: 'http://127.0.0.1:1',
  max_model_calls: 0,
  metadata: { harness: 'test' },
};

export function parents(records: { call_id: string }[], parentOf: (id: string) => string | null): Record<string, string | null> {
  return Object.fromEntries(records.map((r) => [r.call_id, parentOf(r.call_id)]));
}

/** What a backend reports of an attempt that went well: the agent and the verifier exited 0, reward 1. */
export function solvedAttempt(): AttemptFacts {
  return {
    backendRef: null,
    agent: { exitCode: 0, timedOut: false, ms: 5 },
    verifier: { exitCode: 0, timedOut: false, ms: 1 },
    reward: { value: 1, scores: { reward: 1 } },
    infraError: null,
    cancelled: false,
  };
}
