// How a token-in call's prompt was made, as its record keeps it (`CallRecord.render`). Its own file:
// capture/types.ts names it, and the bridge that fills it imports capture/types.ts.

/** Why a call starts a new root instead of bridging onto an earlier turn. */
export type NewRootReason =
  | 'retry'
  | 'nothing_new'
  | 'assistant_in_tail'
  | 'assistant_rewritten'
  | 'reasoning_edited'
  | 'history_edited'
  | 'system_prompt_changed'
  | 'different_conversation'
  | 'tools_changed'
  | 'template_drops_reasoning'
  | 'template_not_append_only'
  | 'no_turn_close';

/** What the record keeps about how its prompt was made (`CallRecord.render`). */
export interface RenderInfo {
  mode: 'proxy';
  family: string;
  /** `bridge`: anchor tokens + bridge; `full`: the whole conversation rendered (a new root). */
  kind: 'bridge' | 'full';
  anchor_call_id: string | null;
  /** Leading prompt tokens taken unchanged from the anchor (its prompt ++ sampled ids); 0 for a full render. */
  anchor_tokens: number;
  /** [start, end) of the bridge in prompt_token_ids: turn-close glue, new messages, generation prompt. */
  bridge_span: [number, number] | null;
  /** Whether the anchor's completion had no stop token, so a turn close was added as context. */
  synthesized_close: boolean;
  new_root_reason: NewRootReason | null;
  /** The bridged prompt against a full render of the same messages (null when not checked). */
  full_render: { tokens: number; common_prefix: number; equal: boolean; drift_tokens: number } | null;
  /** Filled after the answer: see ParsedAnswer. */
  tool_call_parse?: 'none' | 'ok' | 'failed';
  tool_call_statuses?: string[];
  /** The engine route the tokens went to (`/v1/completions`, `/generate`). */
  engine_route?: string;
  /** SHA-256 over prompt ids, sampled ids and logprobs as recorded: the contract check recomputes it. */
  tokens_digest?: string;
}

