// The bridge: builds each call's prompt ids so that a continuation extends the turn it continues token
// for token. The anchor is the deepest completed turn whose request messages and answered assistant
// message are a prefix of the new request (by message identity, with the tolerances below); the prompt
// is then anchor prompt ids + anchor sampled ids + the rendered tokens of only the new messages (the
// template's turn-close glue, tool results, user turns, the generation prompt). The glue is derived
// from the template by rendering a small stand-in conversation, never written per harness, and every
// bridge is compared with a full render of the same messages. Where continuation cannot be proven the
// call is a full render (a new root in the graph) with the reason recorded. See docs/token-in.md.
import { createHash } from 'node:crypto';
import type { NewRootReason, RenderInfo } from './render-info.js';
import type { TokenRenderer } from './renderer.js';

export type { NewRootReason, RenderInfo };
import { noteExtension } from '../token-ids.js';
import type { CallRecord, ChatContentPart, ChatMessage, ChatTool } from '../types.js';

export interface BridgePlan {
  promptIds: number[];
  /**
   * For a bridge: the parts promptIds is made of, in order (the anchor's prompt and sampled ids, the
   * bridge). `anchorPrompt` is the array the anchor's call had as its prompt: promptIds itself when
   * the bridge grew it in place (see Bridge.extend), so only its identity says which call it was.
   */
  parts?: { anchorPrompt: readonly number[]; anchorSampled: readonly number[]; bridge: readonly number[] };
  info: RenderInfo;
  /** Graded findings for the call record (why a new root, drift). */
  findings: string[];
}

/** One completed token-in turn of a session, as the bridge sees it. */
interface Turn {
  callId: string;
  index: number;
  /** Chain hashes of the request messages: chain[i] covers messages[0..i]. */
  chain: string[];
  /** Chain hash after the answered assistant message. */
  endHash: string;
  contextKey: string;
  /**
   * The turn's prompt ids: the first `length` of `ids`, which is the turn's own array until a later
   * turn bridges on it, then that turn's prompt (it starts with these ids; see Bridge.plan and
   * TurnIndex.share).
   */
  prompt: { ids: readonly number[]; length: number };
  sampledIds: readonly number[];
  answer: ChatMessage;
  firstRole: string | undefined;
  /** The call's record (its prompt is made its own copy before its array grows: keepOwnPrompt). */
  record: CallRecord;
}

/** A turn's prompt ids as an array (a copy only for a turn a later one has bridged on: a retry or a fork). */
function promptOf(turn: Turn): readonly number[] {
  const { ids, length } = turn.prompt;
  return ids.length === length ? ids : ids.slice(0, length);
}

/**
 * `record` holds `ids` as its prompt, and `ids` is about to grow (the next turn's prompt is built on
 * it in place): from now on the record reads its prompt as the first `length` ids, copied on the first
 * read. The hot path never reads an earlier turn's prompt, so the copy is made only for a reader that
 * wants it (a view, a trace); each record that a live reader touched then holds its own array, as
 * every record did before. Assigning the property makes it a plain value again.
 */
function keepOwnPrompt(record: CallRecord, ids: readonly number[], length: number): void {
  if (record.prompt_token_ids !== ids) return;
  let own: number[] | undefined;
  Object.defineProperty(record, 'prompt_token_ids', {
    configurable: true,
    enumerable: true,
    get: () => (own ??= ids.slice(0, length)),
    set: (value: number[] | null) =>
      Object.defineProperty(record, 'prompt_token_ids', { value, writable: true, configurable: true, enumerable: true }),
  });
}

const PROBE_USER = 'harness-lab bridge probe';
/** Contexts (tool sets and template arguments) whose probe render is kept: a batch uses a handful. */
const PROBE_TEXTS_KEPT = 256;
const PROBE_REASONING = 'harness-lab reasoning probe 7f3a';

function contentKey(content: ChatMessage['content']): string {
  if (content === undefined || content === null) return '';
  if (typeof content === 'string') return content;
  if (content.every((p: ChatContentPart) => p.type === 'text' && typeof p.text === 'string')) return content.map((p) => p.text).join('');
  return canonicalJson(content);
}

/** JSON with sorted keys: argument objects that differ only in key order or spacing are one identity. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
  entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

function argumentsKey(args: unknown): string {
  if (typeof args !== 'string') return canonicalJson(args);
  try {
    return canonicalJson(JSON.parse(args));
  } catch {
    return JSON.stringify(args);
  }
}

/**
 * A message's identity: role, text, tool calls as (name, parsed arguments). Not part of it: ids the
 * proxy minted (tool-call ids, tool_call_id), reasoning (a harness may drop it; the anchor keeps the
 * sampled tokens), whitespace around an assistant's text (the anchor's own tokens are used, never a
 * re-render of what the harness echoed).
 */
export function messageKey(m: ChatMessage): string {
  const role = m.role;
  let content = contentKey(m.content);
  if (role === 'assistant') content = content.trim();
  const calls = (m.tool_calls ?? []).map((c) => [c.function?.name ?? '', argumentsKey(c.function?.arguments)]);
  return canonicalJson([role, content, calls]);
}

/**
 * A digest of messageKey(m), computed without building the key: a long text is hashed as it is, not
 * copied into a JSON string first (a 128k-token system prompt is resent on every turn). Cached per
 * message object: the record of a call holds the same objects the bridge hashed for it.
 */
const digests = new WeakMap<ChatMessage, string>();
function messageDigest(m: ChatMessage): string {
  let d = digests.get(m);
  if (d !== undefined) return d;
  let content = contentKey(m.content);
  if (m.role === 'assistant') content = content.trim();
  const calls = (m.tool_calls ?? []).map((c) => [c.function?.name ?? '', argumentsKey(c.function?.arguments)]);
  const h = createHash('sha256')
    .update(JSON.stringify(m.role ?? null))
    .update(`\0${content.length}\0`);
  if (content.length >= LONG_TEXT) h.update('\0long\0').update(longTextDigest(content));
  else h.update(content);
  d = h.update('\0').update(canonicalJson(calls)).digest('hex');
  digests.set(m, d);
  return d;
}

/**
 * Texts this long are hashed once and found again by comparison: a harness resends its system prompt
 * with every request, as a new string: hashing 400 KB costs 0.27 ms, finding it in this map 0.04 ms
 * (V8 hashes a string this long by its length, so the lookup is one comparison with the text
 * remembered). The memory is bounded by LONG_TEXT_MEMORY characters, oldest first out.
 */
const LONG_TEXT = 16 * 1024;
const LONG_TEXT_MEMORY = 32 * 1024 * 1024;
const longTexts = new Map<string, string>();
let longTextChars = 0;
function longTextDigest(text: string): string {
  let d = longTexts.get(text);
  if (d !== undefined) {
    longTexts.delete(text);
    longTexts.set(text, d);
    return d;
  }
  d = createHash('sha256').update(text).digest('hex');
  if (text.length > LONG_TEXT_MEMORY / 4) return d;
  longTexts.set(text, d);
  longTextChars += text.length;
  for (const [old] of longTexts) {
    if (longTextChars <= LONG_TEXT_MEMORY) break;
    longTexts.delete(old);
    longTextChars -= old.length;
  }
  return d;
}

function chainHashes(messages: readonly ChatMessage[]): string[] {
  const out: string[] = [];
  let prev = '';
  for (const m of messages) {
    prev = extend(prev, m);
    out.push(prev);
  }
  return out;
}

function extend(prev: string, m: ChatMessage): string {
  return createHash('sha256').update(prev).update('\0').update(messageDigest(m)).digest('hex');
}

/** Tools and template arguments: a different set renders a different system prompt. */
export function contextKey(tools: readonly ChatTool[] | undefined, kwargs: unknown): string {
  return createHash('sha256')
    .update(canonicalJson([tools ?? [], kwargs ?? {}]))
    .digest('hex')
    .slice(0, 24);
}

const normaliseReasoning = (r: unknown): string => (typeof r === 'string' ? r.replace(/\s+/g, ' ').trim() : '');

function reasoningOf(m: ChatMessage): string | null {
  const r = m.reasoning_content ?? (typeof m.reasoning === 'string' ? m.reasoning : null);
  return typeof r === 'string' ? r : null;
}

/**
 * A session's completed calls as the bridge reads them: the records themselves, or a session that
 * says how many it has recorded and reads them (`calls` may load them from the store) only when asked.
 * The bridge sees each call it planned as it is recorded (Bridge.observe), so it reads a session's
 * calls only when it has missed some (a restart, a session another proxy process recorded): with
 * 1,000 concurrent sessions and 64 kept in memory, reading them on every call reloaded the session's
 * file each time (0.26 ms a call in the hot-path bench's profile, and O(session) at long contexts).
 */
export type CallSource = readonly CallRecord[] | { readonly callCount: number; readonly calls: readonly CallRecord[] };

/** Per session: the completed token-in turns, indexed by their end hash; fed call by call as they are recorded. */
class TurnIndex {
  /** Ids of the calls taken in (turns or not): a call is taken in once, however it arrives. */
  private readonly seen = new Set<string>();
  /** How many recorded calls this index accounts for (a read that finds fewer is not read again). */
  private known = 0;
  readonly turns: Turn[] = [];
  readonly byEnd = new Map<string, Turn[]>();
  /** Bridged calls planned for this session (the full-render check samples by it). */
  bridged = 0;
  /** The session's last full-render check: its bridged-call number and its prompt's length. */
  lastCheck: { nth: number; tokens: number } | undefined;

  sync(source: CallSource): void {
    if (isCallList(source)) {
      for (const call of source) this.add(call);
      return;
    }
    const count = source.callCount;
    if (this.known >= count) return;
    for (const call of source.calls) this.add(call);
    this.known = Math.max(this.known, count);
  }

  add(call: CallRecord, planned?: PlannedKeys): void {
    if (this.seen.has(call.call_id)) return;
    this.seen.add(call.call_id);
    this.known++;
    const turn = turnOf(call, planned);
    if (!turn) return;
    if (planned?.bridged && planned.bridged.promptIds === call.prompt_token_ids) this.share(planned.bridged.anchor, turn.prompt.ids);
    this.turns.push(turn);
    const list = this.byEnd.get(turn.endHash);
    if (list) list.push(turn);
    else this.byEnd.set(turn.endHash, [turn]);
  }

  /**
   * `ids` was built as the anchor's prompt ++ its sampled ids ++ a bridge (the record holds the array
   * plan built): the anchor's prompt, and every earlier prompt kept inside it, becomes a prefix of
   * `ids`, so the index holds one array per branch instead of one per turn. At 108k tokens a turn's
   * prompt is 864 KB: 24 turns held 20 MB per session, and the garbage collector walked all of it.
   * Only an anchor whose prompt is still its own array moves (then every turn kept in it is a prefix
   * of it, so of `ids`); a turn bridged on an older turn (a retry, a fork) keeps its own array.
   */
  private share(anchor: Turn, ids: readonly number[]): void {
    const own = anchor.prompt.ids;
    if (own.length !== anchor.prompt.length || own === ids) return;
    for (const t of this.turns) if (t.prompt.ids === own) t.prompt = { ids, length: t.prompt.length };
  }

  /** Distinct prompt arrays the index holds (tests: one per branch once turns bridge on each other). */
  get promptArrays(): number {
    return new Set(this.turns.map((t) => t.prompt.ids)).size;
  }
}

/** The keys plan computed for a call's messages, tools and template arguments (its record reuses them). */
interface PlannedKeys {
  chain: string[];
  ctxKey: string;
  /** A bridged call: its anchor and the prompt array built on it. */
  bridged?: { anchor: Turn; promptIds: readonly number[] };
}

const isCallList = (source: CallSource): source is readonly CallRecord[] => Array.isArray(source);

/** A record the bridge may anchor on: a token-in call whose tokens are fully accounted for. */
function turnOf(call: CallRecord, planned?: PlannedKeys): Turn | null {
  const render = (call as CallRecord & { render?: RenderInfo }).render;
  if (!render || render.mode !== 'proxy' || call.error) return null;
  if (call.findings.some((f) => f.startsWith('[FATAL]'))) return null;
  const req = call.engine_request;
  const answer = call.engine_response?.choices?.[0]?.message;
  if (
    !req ||
    !Array.isArray(req.messages) ||
    !answer ||
    !call.prompt_token_ids ||
    !call.completion_token_ids ||
    call.completion_token_ids.length === 0
  )
    return null;
  const chain = planned?.chain ?? chainHashes(req.messages);
  const tools = Array.isArray(req.tools) && req.tools.length ? req.tools : undefined;
  return {
    callId: call.call_id,
    index: call.index,
    chain,
    endHash: extend(chain[chain.length - 1] ?? '', answer),
    contextKey: planned?.ctxKey ?? contextKey(tools, req.chat_template_kwargs),
    prompt: { ids: call.prompt_token_ids, length: call.prompt_token_ids.length },
    sampledIds: call.completion_token_ids,
    answer,
    firstRole: req.messages[0]?.role,
    record: call,
  };
}

export interface BridgeRequest {
  messages: ChatMessage[];
  tools: ChatTool[] | undefined;
  kwargs: Record<string, unknown> | undefined;
}

/**
 * When a bridged prompt is compared with a full render of the same messages (its drift recorded in
 * `render.full_render`): `always` (every bridge: a full render and tokenization per call, the cost
 * follows the context), `sampled` (the first bridge of each session, then again once both
 * FULL_RENDER_SAMPLE_EVERY bridges have passed and the prompt has grown by FULL_RENDER_SAMPLE_GROWTH
 * since the last check: a harness's drift shows on its first bridged turn, and the rest cost what
 * the new messages cost), `off`.
 */
export type FullRenderCheck = 'always' | 'sampled' | 'off';
export const FULL_RENDER_CHECKS: readonly FullRenderCheck[] = ['always', 'sampled', 'off'];
export const FULL_RENDER_SAMPLE_EVERY = 16;
/**
 * A check renders and tokenizes the whole context, so checks are spaced by the context's growth as
 * well as by turns: their cost per turn then follows the new tokens. With a 108k-token system prompt
 * and 90 new tokens a turn, a check every 16 turns cost about 110 ms each, 4.6 ms a turn (the largest
 * item that grew with the context, bench/token-in-cost.ts, session 15); now one comes every ~300
 * turns. A small context grows by a quarter within 16 turns, so there nothing changes.
 */
export const FULL_RENDER_SAMPLE_GROWTH = 0.25;

export interface BridgeOptions {
  /** Default `sampled`. */
  fullRenderCheck?: FullRenderCheck;
}

export class Bridge {
  private readonly indexes = new WeakMap<object, TurnIndex>();
  /** What plan computed for a call, by its messages list: the record of that call holds the same list. */
  private readonly planned = new WeakMap<readonly ChatMessage[], PlannedKeys>();
  /** probeRender's texts by the exact JSON of the tools and template arguments, oldest first out. */
  private readonly probeTexts = new Map<string, string>();
  /** Prompt arrays this bridge built (nothing else has them before their call's record): see extend. */
  private readonly growable = new WeakSet<readonly number[]>();

  constructor(
    readonly renderer: TokenRenderer,
    private readonly options: BridgeOptions = {},
  ) {}

  /**
   * A call of `owner` was recorded: the index takes it in now, so the next plan need not read the
   * session's calls (a session that is not resident would load them from the store).
   */
  observe(owner: object, record: CallRecord): void {
    const messages = record.engine_request?.messages;
    this.indexOf(owner).add(record, Array.isArray(messages) ? this.planned.get(messages) : undefined);
  }

  /** Distinct prompt-id arrays the bridge holds for `owner` (0 if none): see TurnIndex.share. */
  promptArrays(owner: object): number {
    return this.indexes.get(owner)?.promptArrays ?? 0;
  }

  private indexOf(owner: object): TurnIndex {
    let index = this.indexes.get(owner);
    if (!index) this.indexes.set(owner, (index = new TurnIndex()));
    return index;
  }

  /** The prompt ids for a call of the session whose completed calls are `calls` (`owner` keys the cache). */
  async plan(owner: object, calls: CallSource, req: BridgeRequest): Promise<BridgePlan> {
    const index = this.indexOf(owner);
    index.sync(calls);
    const chain = chainHashes(req.messages);
    const ctxKey = contextKey(req.tools, req.kwargs);
    this.planned.set(req.messages, { chain, ctxKey });
    let found: { turn: Turn; at: number } | null = null;
    let otherContext: Turn | null = null;
    for (let k = chain.length - 1; k >= 1 && !found; k--) {
      const candidates = index.byEnd.get(chain[k]!);
      if (!candidates) continue;
      for (let i = candidates.length - 1; i >= 0; i--) {
        const t = candidates[i]!;
        if (t.chain.length !== k) continue;
        if (t.contextKey === ctxKey) {
          found = { turn: t, at: k };
          break;
        }
        otherContext ??= t;
      }
    }
    if (!found) {
      if (otherContext)
        return this.full(
          req,
          'tools_changed',
          `the messages continue call ${otherContext.callId}, but the tools or chat_template_kwargs differ`,
        );
      const why = this.whyNoAnchor(index.turns, chain, req.messages);
      return this.full(req, why?.reason ?? null, why?.detail ?? null);
    }
    const { turn, at } = found;
    const tail = req.messages.slice(at + 1);
    if (tail.length === 0) return this.full(req, 'nothing_new', `the request ends with the answer of call ${turn.callId}`);
    const foreign = tail.findIndex((m) => m.role === 'assistant');
    if (foreign >= 0)
      return this.full(req, 'assistant_in_tail', `message ${at + 1 + foreign} is an assistant message the proxy did not answer`);
    const echoed = reasoningOf(req.messages[at]!);
    const sampledReasoning = reasoningOf(turn.answer);
    if (echoed !== null && echoed.trim() !== '' && normaliseReasoning(echoed) !== normaliseReasoning(sampledReasoning)) {
      return this.full(req, 'reasoning_edited', `message ${at} carries reasoning that differs from what call ${turn.callId} sampled`);
    }
    const bridge = this.bridgeText(turn, tail, req);
    if ('reason' in bridge) return this.full(req, bridge.reason, bridge.detail);
    const bridgeIds = await this.renderer.encode(bridge.text);
    // After the await: another call may have grown the anchor's array meanwhile (then it is not the tip).
    const { promptIds, anchorPrompt } = this.extend(turn, bridgeIds);
    const anchorTokens = turn.prompt.length + turn.sampledIds.length;
    noteExtension(promptIds, anchorPrompt, turn.sampledIds);
    const keys = this.planned.get(req.messages);
    if (keys) keys.bridged = { anchor: turn, promptIds };
    const info: RenderInfo = {
      mode: 'proxy',
      family: this.renderer.family.name,
      kind: 'bridge',
      anchor_call_id: turn.callId,
      anchor_tokens: anchorTokens,
      bridge_span: [anchorTokens, promptIds.length],
      synthesized_close: bridge.synthesizedClose,
      new_root_reason: null,
      full_render: null,
    };
    const findings: string[] = [];
    if (bridge.synthesizedClose)
      findings.push(
        `[INFO] bridge_synthesized_close: call ${turn.callId} ended without a stop token; its turn close is bridge context (mask 0)`,
      );
    const check = this.options.fullRenderCheck ?? 'sampled';
    const nth = index.bridged++;
    const last = index.lastCheck;
    const due =
      check === 'always' ||
      (check === 'sampled' &&
        (last === undefined ||
          (nth - last.nth >= FULL_RENDER_SAMPLE_EVERY && promptIds.length - last.tokens >= last.tokens * FULL_RENDER_SAMPLE_GROWTH)));
    if (due) {
      index.lastCheck = { nth, tokens: promptIds.length };
      const full = await this.renderer.compareRender(req.messages, { tools: req.tools, kwargs: req.kwargs }, promptIds);
      const lcp = full.commonPrefix;
      const equal = lcp === full.tokens && lcp === promptIds.length;
      const drift = equal ? 0 : Math.max(0, anchorTokens - lcp);
      info.full_render = { tokens: full.tokens, common_prefix: lcp, equal, drift_tokens: drift };
      if (!equal)
        findings.push(
          `[INFO] render_drift: a full render of these messages differs from the bridged prompt at token ${lcp} ` +
            `(${drift} of the anchor's ${anchorTokens} tokens would be re-rendered; full ${full.tokens}, bridged ` +
            `${promptIds.length})`,
        );
    }
    return { promptIds, parts: { anchorPrompt, anchorSampled: turn.sampledIds, bridge: bridgeIds }, info, findings };
  }

  /**
   * The prompt ids of a bridge on `turn`: its prompt ++ its sampled ids ++ the bridge's ids. When the
   * turn's prompt is the whole of an array this bridge built (the branch's newest turn), the ids are
   * appended to that array and it becomes this call's prompt. A fresh 108k-element array per turn
   * cost 3.3 ms at 108k tokens on a host with slow page faults (V8 gives every array that large its
   * own pages, which the copy then faults in; bench/token-in-cost.ts), and every record held one. The turn's record keeps its own prompt (keepOwnPrompt).
   * An array only grows at its end, so every earlier view of it (a turn, a graph node, a trie edge,
   * the encoder's serials) still reads the same ids. Otherwise (a retry or fork of an older turn, a
   * prompt read back from the store) the ids are copied into a new array, which the next turn grows.
   */
  private extend(turn: Turn, bridgeIds: readonly number[]): { promptIds: number[]; anchorPrompt: readonly number[] } {
    const { ids, length } = turn.prompt;
    if (ids.length === length && this.growable.has(ids)) {
      const branch = ids as number[];
      keepOwnPrompt(turn.record, branch, length);
      for (const id of turn.sampledIds) branch.push(id);
      for (const id of bridgeIds) branch.push(id);
      return { promptIds: branch, anchorPrompt: branch };
    }
    const anchorPrompt = promptOf(turn);
    const promptIds = (anchorPrompt as number[]).concat(turn.sampledIds, bridgeIds);
    this.growable.add(promptIds);
    return { promptIds, anchorPrompt };
  }

  /**
   * The text after the anchor's sampled ids: the template's close of that turn (only what the
   * completion lacks), the new messages and the generation prompt, read off a render of a stand-in
   * conversation (a probe user turn, the anchor's answer, the new messages).
   */
  private bridgeText(
    turn: Turn,
    tail: ChatMessage[],
    req: BridgeRequest,
  ): { text: string; synthesizedClose: boolean } | { reason: NewRootReason; detail: string } {
    const r = this.renderer;
    const close = r.turnCloseText;
    if (!close) return { reason: 'no_turn_close', detail: 'the tokenizer names no end-of-turn token' };
    const ctx: ChatMessage[] = [{ role: 'user', content: PROBE_USER }];
    const hadReasoning = (reasoningOf(turn.answer) ?? '').trim() !== '';
    const answer: ChatMessage = { ...turn.answer, role: 'assistant', content: turn.answer.content ?? '' };
    delete answer.reasoning;
    if (hadReasoning) answer.reasoning_content = PROBE_REASONING;
    else delete answer.reasoning_content;
    const opts = { tools: req.tools, kwargs: req.kwargs };
    const before = this.probeRender(req, () => r.renderText(ctx, { ...opts, addGenerationPrompt: false }));
    const after = r.renderText([...ctx, answer, ...tail], { ...opts, addGenerationPrompt: true });
    if (!after.startsWith(before))
      return { reason: 'template_not_append_only', detail: 'the template renders earlier messages differently once later ones follow' };
    if (hadReasoning && !after.includes(PROBE_REASONING)) {
      return {
        reason: 'template_drops_reasoning',
        detail: `the template drops the reasoning of call ${turn.callId} once these messages follow (e.g. a new user turn), so the prompt follows the template`,
      };
    }
    const closeAt = after.indexOf(close, before.length);
    if (closeAt < 0) return { reason: 'no_turn_close', detail: `the template does not close an assistant turn with ${close}` };
    const last = turn.sampledIds[turn.sampledIds.length - 1];
    const closedBySample = last !== undefined && last === r.turnCloseId;
    const rest = after.slice(closeAt + close.length);
    return { text: closedBySample ? rest : close + rest, synthesizedClose: !closedBySample };
  }

  /**
   * The stand-in's first part (the probe user turn, rendered with the call's tools and template
   * arguments), kept by the exact JSON of those: it is the same for every bridge that sends them, and
   * rendering it with one tool cost ~80 us of a bridge's ~230 (the template interpreter,
   * bench/hot-path.ts). Not by the context key: that ignores key order, which `tojson` writes, so a
   * harness that reorders its tools' keys would be cut against another order's text.
   */
  private probeRender(req: BridgeRequest, render: () => string): string {
    const key = JSON.stringify([req.tools ?? null, req.kwargs ?? null]);
    let text = this.probeTexts.get(key);
    if (text !== undefined) return text;
    text = render();
    if (this.probeTexts.size >= PROBE_TEXTS_KEPT) this.probeTexts.delete(this.probeTexts.keys().next().value!);
    this.probeTexts.set(key, text);
    return text;
  }

  private async full(req: BridgeRequest, reason: NewRootReason | null, detail: string | null): Promise<BridgePlan> {
    const promptIds = await this.renderer.renderIds(req.messages, { tools: req.tools, kwargs: req.kwargs });
    this.growable.add(promptIds);
    const findings: string[] = [];
    if (reason) {
      const grade = reason === 'retry' || reason === 'template_drops_reasoning' ? 'INFO' : 'WARN';
      findings.push(`[${grade}] bridge_new_root: ${reason}${detail ? `: ${detail}` : ''}`);
    }
    return {
      promptIds,
      info: {
        mode: 'proxy',
        family: this.renderer.family.name,
        kind: 'full',
        anchor_call_id: null,
        anchor_tokens: 0,
        bridge_span: null,
        synthesized_close: false,
        new_root_reason: reason,
        full_render: null,
      },
      findings,
    };
  }

  /** The nearest earlier turn and where the request leaves it: why a call starts a new root. */
  private whyNoAnchor(
    turns: readonly Turn[],
    chain: readonly string[],
    messages: readonly ChatMessage[],
  ): { reason: NewRootReason; detail: string } | null {
    if (turns.length === 0) return null;
    let best: Turn | null = null;
    let bestP = -1;
    for (const t of turns) {
      let p = 0;
      const n = Math.min(t.chain.length, chain.length);
      while (p < n && t.chain[p] === chain[p]) p++;
      if (p > bestP || (p === bestP && best !== null && t.index > best.index)) {
        best = t;
        bestP = p;
      }
    }
    if (!best) return { reason: 'different_conversation', detail: 'no earlier turn shares a message with it' };
    const id = best.callId;
    if (bestP === best.chain.length && chain.length === best.chain.length)
      return { reason: 'retry', detail: `the same messages as call ${id}` };
    if (bestP === best.chain.length) {
      return messages[bestP]?.role === 'assistant'
        ? { reason: 'assistant_rewritten', detail: `message ${bestP} is not the answer call ${id} gave (the harness changed it)` }
        : { reason: 'history_edited', detail: `message ${bestP} follows the request of call ${id} where its answer should be` };
    }
    if (bestP === 0) {
      return messages[0]?.role === 'system' && best.firstRole === 'system'
        ? {
            reason: 'system_prompt_changed',
            detail: `the system prompt differs from every earlier turn's (a subagent, or a rewritten system prompt)`,
          }
        : { reason: 'different_conversation', detail: "the first message differs from every earlier turn's" };
    }
    const shorter = chain.length <= bestP + 1 ? ' (the request is shorter: compaction?)' : '';
    return { reason: 'history_edited', detail: `message ${bestP} differs from call ${id}'s request${shorter}` };
  }
}
