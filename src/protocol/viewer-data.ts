// What the rollout viewer shows, derived once from a RolloutDocument (or TrainingTrace lines) on the
// host and handed to the webview as plain JSON. The webview never sees the raw document: traces and
// flattened sequences would repeat every token id several times over.
import type { AtifCheckResult } from '../harness/atif-check.js';
import type { RolloutDocument, RolloutGraphJson, RolloutGraphNodeJson, RolloutStats } from '../capture/rollout.js';
import type { CallRecord, ChatMessage, JsonObject } from '../capture/types.js';

export const VIEWER_DATA_VERSION = 1;

export interface ViewerTopAlt {
  id: number | null;
  text: string;
  logprob: number;
}

export interface ViewerRaw {
  dialect: string;
  path: string;
  /** The request as the harness sent it (its dialect). */
  request: unknown;
  /** The chat-completions request the engine received. */
  engine_request: unknown;
  /** The engine's answer. */
  engine_response: unknown;
  /** What the harness got back (non-streamed equivalent for streams). */
  response_body: unknown;
}

/**
 * How a token-in call's prompt was made (the proxy rendered it; `CallRecord.render`): the anchor's
 * exact tokens, then the bridge. Null for a chat-mode call (the engine rendered).
 */
export interface ViewerBridge {
  kind: 'bridge' | 'full';
  anchor_call_id: string | null;
  /** Leading prompt tokens that are the anchor's prompt + sampled ids, unchanged. */
  anchor_tokens: number;
  /** [start, end) of the bridge in the prompt: turn-close glue, the new messages, the generation prompt. */
  span: [number, number] | null;
  synthesized_close: boolean;
  /** Why the proxy rendered the whole conversation (a new root), when it did. */
  new_root_reason: string | null;
  /** Tokens a full render of the same messages would change against the bridge (null: not checked). */
  drift_tokens: number | null;
  /**
   * Texts of the messages the bridge adds (tool results, user turns), in order: the viewer marks their
   * tokens as tool tokens and the rest of the bridge as the template's glue.
   */
  message_texts: string[];
}

/** A graph node of the rollout document, plus what the viewer shows of its tokens. */
export interface ViewerTurn extends RolloutGraphNodeJson {
  prompt_ids: number[];
  sampled_ids: number[];
  /** Engine logprobs of the sampled tokens when aligned (one per sampled token), else null. */
  logprobs: number[] | null;
  /** Whether the sampled tokens carry loss mask 1 in the exported training data. */
  trained: boolean;
  /**
   * Drift from an attached `harness-lab rescore` report: per sampled token exp(rescored - behaviour)
   * logprob, with the report's threshold. Absent without a rescore.
   */
  drift?: { ratios: number[]; threshold: number } | null;
  /**
   * For a replay's rollout (`replay.json` beside it): the call's rung on the match ladder and the
   * recorded call that answered it; `live` for a fork's calls from its turn on. Absent otherwise.
   */
  match?: { level: 'exact' | 'tolerated' | 'none' | 'live'; recorded_index: number | null; notes: string[] } | null;
  top: ViewerTopAlt[][] | null;
  /** Text of each sampled token from the engine's bytes; null entries where bytes were missing. */
  sampled_text: (string | null)[] | null;
  /** Why the turn's tokens do not train or cannot be coloured (misaligned, missing logprobs, findings). */
  flags: string[];
  findings: string[];
  finish_reason: string | null;
  n_tools: number;
  model: string | null;
  latency_ms: number | null;
  started_at: string | null;
  request_messages: unknown[];
  response_message: unknown;
  raw: ViewerRaw | null;
  /** Token-in calls only (absent for chat-mode calls and training traces). */
  bridge?: ViewerBridge | null;
}

/** A rollout's outcome, for the viewer's header: task, reward, class and the verifier's last lines. */
export interface RolloutOutcomeView {
  task: string;
  harness: string;
  /** A batch's rollout classes, plus cancelled (a rollout stopped by its user). */
  class: 'completed' | 'policy_failure' | 'infra_error' | 'timeout' | 'cancelled';
  reward: number | null;
  error: string | null;
  /** The verifier's last non-empty output lines: its reason. */
  verifier: string[];
  out_dir: string;
}

export interface ViewerData {
  version: typeof VIEWER_DATA_VERSION;
  /** Stable key for remembered positions (session id, or the file path). */
  key: string;
  title: string;
  source: 'rollout' | 'trace';
  session_id: string;
  capture_level: string;
  rollout_type: string;
  metadata: JsonObject;
  stats: RolloutStats | null;
  validation: string[];
  graph: RolloutGraphJson;
  /** Arrival order. */
  turns: ViewerTurn[];
  /** Prompt-token texts by id ("123" -> " the"), from the engine's tokenizer; may arrive later. */
  token_texts: Record<string, string>;
  atif: AtifCheckResult | null;
  /** The run this rollout belongs to, when it was a run (Run with Harness, Validate, a batch member). */
  outcome?: RolloutOutcomeView | null;
}

/** Token bytes -> text; bytes that are not valid UTF-8 on their own (split characters) show as \xNN. */
export function bytesToText(bytes: readonly number[]): string {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array(bytes));
  } catch {
    let out = '';
    for (const b of bytes) out += b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`;
    return out;
  }
}

/** Reasons a turn's sampled tokens cannot be coloured or trained, in the user's terms. */
export function turnFlags(
  call: Pick<CallRecord, 'completion_token_ids' | 'logprobs' | 'prompt_token_ids'>,
  findings: readonly string[],
  trained: boolean,
  untrainedWhy?: string,
): string[] {
  const flags: string[] = [];
  const n = call.completion_token_ids?.length ?? 0;
  if (!call.prompt_token_ids || call.prompt_token_ids.length === 0)
    flags.push('no prompt token ids: the engine did not return them, so the context is shown from messages only');
  if (n > 0 && call.logprobs === null)
    flags.push('missing logprobs: the engine returned none for this call, so its tokens stay context (mask 0)');
  else if (n > 0 && call.logprobs && call.logprobs.length !== n)
    flags.push(`misaligned logprobs: ${call.logprobs.length} logprobs for ${n} sampled tokens, so its tokens stay context (mask 0)`);
  for (const f of findings) if (f.startsWith('[FATAL]') || f.startsWith('[WARN]')) flags.push(f);
  if (n > 0 && !trained && flags.length === 0) flags.push(untrainedWhy ?? 'not trained: the turn is not on a trainable agent path');
  return flags;
}

function messageContentText(m: ChatMessage): string {
  if (typeof m.content === 'string') return m.content;
  if (Array.isArray(m.content)) return m.content.map((p) => (typeof p.text === 'string' ? p.text : '')).join('');
  return '';
}

/** The bridge of a token-in call, with the texts of the messages it adds after its anchor's answer. */
export function viewerBridge(c: CallRecord, byId: ReadonlyMap<string, CallRecord>): ViewerBridge | null {
  const r = c.render;
  if (!r) return null;
  const anchor = r.anchor_call_id ? byId.get(r.anchor_call_id) : undefined;
  const seen = anchor ? (anchor.engine_request?.messages.length ?? 0) + 1 : Infinity;
  const added = r.kind === 'bridge' ? (c.engine_request?.messages ?? []).slice(seen) : [];
  return {
    kind: r.kind,
    anchor_call_id: r.anchor_call_id,
    anchor_tokens: r.anchor_tokens,
    span: r.bridge_span,
    synthesized_close: r.synthesized_close,
    new_root_reason: r.new_root_reason,
    drift_tokens: r.full_render?.drift_tokens ?? null,
    message_texts: added.map(messageContentText).filter((t) => t.length > 0),
  };
}

function rawOf(c: CallRecord): ViewerRaw {
  return {
    dialect: c.dialect,
    path: c.path,
    request: c.request.body,
    engine_request: c.engine_request,
    engine_response: c.engine_response,
    response_body: c.response_body,
  };
}

export interface BuildViewerOptions {
  key?: string;
  title?: string;
  tokenTexts?: Record<string, string>;
  atif?: AtifCheckResult | null;
}

export function viewerDataFromRollout(
  doc: Pick<
    RolloutDocument,
    'session_id' | 'metadata' | 'capture_level' | 'rollout_type' | 'calls' | 'graph' | 'turns' | 'stats' | 'sequences' | 'validation'
  >,
  opts: BuildViewerOptions = {},
): ViewerData {
  const byId = new Map(doc.calls.map((c) => [c.call_id, c]));
  const graphNode = new Map(doc.graph.nodes.map((n) => [n.node_id, n]));
  const trainedNodes = new Set<string>();
  for (const s of doc.sequences) if (s.trainable) for (const id of s.node_ids) trainedNodes.add(id);
  const turns: ViewerTurn[] = [...doc.turns]
    .sort((a, b) => a.index - b.index)
    .map((t) => {
      const c = byId.get(t.node_id)!;
      const sampled = c.completion_token_ids ?? [];
      const aligned = c.logprobs && c.logprobs.length === sampled.length && sampled.length > 0 ? c.logprobs : null;
      const trained = t.sampled_logprobs !== null && trainedNodes.has(t.node_id);
      const g = graphNode.get(t.node_id);
      return {
        node_id: t.node_id,
        index: t.index,
        parent_id: t.parent_id,
        root_id: t.root_id,
        children: g?.children ?? [],
        discarded: t.discarded,
        role: g?.role ?? 'discarded',
        prompt_ids: c.prompt_token_ids ?? [],
        sampled_ids: sampled,
        logprobs: aligned,
        trained,
        top:
          c.top_logprobs && c.top_logprobs.length === sampled.length
            ? c.top_logprobs.map((alts) => alts.map((a) => ({ id: a.token_id, text: a.token, logprob: a.logprob })))
            : null,
        sampled_text:
          c.token_bytes && c.token_bytes.length === sampled.length ? c.token_bytes.map((b) => (b ? bytesToText(b) : null)) : null,
        flags: turnFlags(
          c,
          t.findings,
          trained,
          t.discarded
            ? 'not trained: a discarded retry (a sibling with the same prompt was continued instead)'
            : g?.role === 'auxiliary'
              ? 'not trained: an auxiliary call (no tools, beside the agent chain: titles, summaries, checks)'
              : doc.rollout_type === 'eval'
                ? 'not trained: an evaluation rollout'
                : undefined,
        ),
        findings: [...t.findings],
        finish_reason: t.finish_reason,
        n_tools: t.n_tools,
        model: c.model,
        latency_ms: c.latency_ms,
        started_at: c.started_at,
        request_messages: c.engine_request?.messages ?? [],
        response_message: c.engine_response?.choices?.[0]?.message ?? null,
        raw: rawOf(c),
        bridge: viewerBridge(c, byId),
      };
    });
  return {
    version: VIEWER_DATA_VERSION,
    key: opts.key ?? doc.session_id,
    title: opts.title ?? `Rollout ${doc.session_id}`,
    source: 'rollout',
    session_id: doc.session_id,
    capture_level: doc.capture_level,
    rollout_type: doc.rollout_type,
    metadata: doc.metadata,
    stats: doc.stats,
    validation: [...doc.validation],
    graph: doc.graph,
    turns,
    token_texts: opts.tokenTexts ?? {},
    atif: opts.atif ?? null,
  };
}

/** Every distinct prompt-token id of the data that has no text yet (sampled tokens' own bytes count). */
export function idsWithoutText(data: ViewerData): number[] {
  const known = new Set<number>();
  for (const t of data.turns) t.sampled_text?.forEach((s, i) => s !== null && known.add(t.sampled_ids[i]!));
  const out = new Set<number>();
  for (const t of data.turns) for (const id of t.prompt_ids) if (!known.has(id) && data.token_texts[id] === undefined) out.add(id);
  return [...out].sort((a, b) => a - b);
}

// ---- Wire form -------------------------------------------------------------------------------
// What crosses postMessage and what a report embeds. Each prompt is sent as "the first `keep` tokens
// of turn `ref`'s prompt+completion, then `tail`", so a chain's shared history travels once and the
// payload grows with the distinct tokens, not with the sum of all prompts. Raw I/O and message lists
// (which repeat the whole conversation per call) are split off and fetched per turn when shown.

export interface WireTurn extends Omit<ViewerTurn, 'prompt_ids' | 'raw' | 'request_messages' | 'response_message'> {
  prompt_ref: string | null;
  prompt_keep: number;
  prompt_tail: number[];
}

export interface ViewerWire extends Omit<ViewerData, 'turns'> {
  wire: 1;
  turns: WireTurn[];
}

/** Per-turn details fetched on demand: raw I/O and the message lists. */
export interface TurnDetails {
  raw: ViewerRaw | null;
  request_messages: unknown[];
  response_message: unknown;
}

function prefixWithEnd(ref: ViewerTurn, ids: readonly number[]): number {
  const p = ref.prompt_ids;
  let i = 0;
  while (i < p.length && i < ids.length && p[i] === ids[i]) i++;
  if (i < p.length) return i;
  let k = 0;
  while (k < ref.sampled_ids.length && i + k < ids.length && ref.sampled_ids[k] === ids[i + k]) k++;
  return i + k;
}

export function toWire(data: ViewerData): { wire: ViewerWire; details: Record<string, TurnDetails> } {
  const byId = new Map(data.turns.map((t) => [t.node_id, t]));
  const details: Record<string, TurnDetails> = {};
  const turns = data.turns.map((t): WireTurn => {
    const { prompt_ids, raw, request_messages, response_message, ...rest } = t;
    details[t.node_id] = { raw, request_messages, response_message };
    const parent = t.parent_id ? byId.get(t.parent_id) : undefined;
    const keep = parent ? prefixWithEnd(parent, prompt_ids) : 0;
    return { ...rest, prompt_ref: keep > 0 ? parent!.node_id : null, prompt_keep: keep, prompt_tail: prompt_ids.slice(keep) };
  });
  return { wire: { ...data, wire: 1, turns }, details };
}

/** Expand the wire form; turns refer only to earlier turns (a parent arrives before its children). */
export function fromWire(wire: ViewerWire): ViewerData {
  const byId = new Map<string, ViewerTurn>();
  const turns = wire.turns.map((w): ViewerTurn => {
    const { prompt_ref, prompt_keep, prompt_tail, ...rest } = w;
    let prompt_ids = prompt_tail;
    if (prompt_ref !== null) {
      const ref = byId.get(prompt_ref);
      if (!ref) throw new Error(`turn ${w.node_id} refers to ${prompt_ref}, which is not an earlier turn`);
      const end =
        ref.prompt_ids.length >= prompt_keep
          ? ref.prompt_ids.slice(0, prompt_keep)
          : ref.prompt_ids.concat(ref.sampled_ids.slice(0, prompt_keep - ref.prompt_ids.length));
      prompt_ids = end.concat(prompt_tail);
    }
    const t: ViewerTurn = { ...rest, prompt_ids, raw: null, request_messages: [], response_message: null };
    byId.set(t.node_id, t);
    return t;
  });
  const { wire: _w, ...meta } = wire;
  return { ...meta, turns };
}
