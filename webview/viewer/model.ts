// Pure viewer logic (no DOM): logprob buckets, token texts, row layout of the token strip,
// navigation between turns and branches, and what the harness added between two turns.
import type { ViewerData, ViewerTurn } from '../../src/protocol/viewer-data.js';

/** Logprob buckets by probability: 0 >= 0.9, 1 >= 0.5, 2 >= 0.2, 3 >= 0.05, 4 below. */
export const BUCKET_FLOORS = [0.9, 0.5, 0.2, 0.05] as const;

export function logprobBucket(lp: number): number {
  const p = Math.exp(lp);
  for (let i = 0; i < BUCKET_FLOORS.length; i++) if (p >= BUCKET_FLOORS[i]!) return i;
  return BUCKET_FLOORS.length;
}

/**
 * Token kinds in the strip: inherited context, context the harness added, sampled; for a token-in
 * turn the added context is the proxy's bridge: the template's glue (turn close, role headers, the
 * generation prompt) and the tokens of the messages it adds (tool results, user turns).
 */
export const Kind = { Inherited: 0, Added: 1, Sampled: 2, Bridge: 3, Tool: 4 } as const;
export type Kind = (typeof Kind)[keyof typeof Kind];

/** One turn's tokens laid end to end: prompt, then sampled. Arrays are shared, not copied. */
export interface TurnTokens {
  turn: ViewerTurn;
  n: number;
  nPrompt: number;
  /** Prompt positions below this are the parent's prompt+completion (exact prefix). */
  inherited: number;
  id(i: number): number;
  kind(i: number): Kind;
  /** Logprob of position i, or null for context / missing. */
  logprob(i: number): number | null;
  /** Loss mask of position i. */
  mask(i: number): 0 | 1;
}

export function turnTokens(turn: ViewerTurn, inherited: number, bridge: BridgeKinds | null = null): TurnTokens {
  const nPrompt = turn.prompt_ids.length;
  const inBridge = (i: number) => bridge !== null && i >= bridge.start && i < bridge.start + bridge.kinds.length;
  return {
    turn,
    n: nPrompt + turn.sampled_ids.length,
    nPrompt,
    inherited,
    id: (i) => (i < nPrompt ? turn.prompt_ids[i]! : turn.sampled_ids[i - nPrompt]!),
    kind: (i) =>
      i >= nPrompt ? Kind.Sampled : inBridge(i) ? (bridge!.kinds[i - bridge!.start] as Kind) : i < inherited ? Kind.Inherited : Kind.Added,
    logprob: (i) => (i >= nPrompt && turn.logprobs ? turn.logprobs[i - nPrompt]! : null),
    mask: (i) => (i >= nPrompt && turn.trained ? 1 : 0),
  };
}

/** The bridge of a token-in turn, position by position from `start`: Kind.Bridge (glue) or Kind.Tool. */
export interface BridgeKinds {
  start: number;
  kinds: Uint8Array;
  /** Tokens of the added messages found in the bridge, and of the glue around them. */
  tool: number;
  glue: number;
}

/**
 * Splits a bridged turn's bridge into the template's glue and the tokens of the messages it adds, by
 * finding each message's text, in order, in the bridge's decoded text. Without every token's text the
 * whole bridge counts as glue (never guessed). Null for a turn the proxy did not bridge.
 */
export function bridgeKinds(turn: ViewerTurn, texts: TokenTexts): BridgeKinds | null {
  const b = turn.bridge;
  if (!b || b.kind !== 'bridge' || !b.span) return null;
  const [start, end] = b.span;
  const kinds = new Uint8Array(Math.max(0, end - start)).fill(Kind.Bridge);
  const pieces: string[] = [];
  for (let i = start; i < end; i++) {
    const t = texts.get(turn.prompt_ids[i]!);
    if (t === undefined) return { start, kinds, tool: 0, glue: kinds.length };
    pieces.push(t);
  }
  const offsets: number[] = [];
  let text = '';
  for (const p of pieces) {
    offsets.push(text.length);
    text += p;
  }
  let from = 0;
  let k = 0;
  for (const message of b.message_texts) {
    const at = text.indexOf(message, from);
    if (at < 0) continue;
    const stop = at + message.length;
    // Every token that overlaps the message's characters.
    while (k < pieces.length && offsets[k]! + pieces[k]!.length <= at) k++;
    for (let j = k; j < pieces.length && offsets[j]! < stop; j++) kinds[j] = Kind.Tool;
    from = stop;
  }
  let tool = 0;
  for (const x of kinds) if (x === Kind.Tool) tool++;
  return { start, kinds, tool, glue: kinds.length - tool };
}

/** Text for every token id the data knows: the engine's prompt-token texts, then sampled tokens' bytes. */
export class TokenTexts {
  private readonly byId = new Map<number, string>();
  constructor(data: ViewerData) {
    for (const t of data.turns) t.sampled_text?.forEach((s, i) => s !== null && this.byId.set(t.sampled_ids[i]!, s));
    this.add(data.token_texts);
  }
  add(texts: Record<string, string>): void {
    for (const [k, v] of Object.entries(texts)) if (!this.byId.has(Number(k))) this.byId.set(Number(k), v);
  }
  get(id: number): string | undefined {
    return this.byId.get(id);
  }
  get size(): number {
    return this.byId.size;
  }
}

/** A token's text for display on one line: newline and tab made visible, ids where no text exists. */
export function displayText(text: string | undefined, id: number): { text: string; breakAfter: boolean } {
  if (text === undefined) return { text: `⟨${id}⟩`, breakAfter: false };
  if (text === '') return { text: '∅', breakAfter: false };
  const breakAfter = text.endsWith('\n');
  return { text: text.replace(/\r/g, '␍').replace(/\n/g, '↵').replace(/\t/g, '→'), breakAfter };
}

/** Display width in monospace columns (wide East Asian characters and emoji count two). */
export function columns(s: string): number {
  let w = 0;
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    w +=
      c >= 0x1100 &&
      (c <= 0x115f ||
        (c >= 0x2e80 && c <= 0xa4cf) ||
        (c >= 0xac00 && c <= 0xd7a3) ||
        (c >= 0xf900 && c <= 0xfaff) ||
        (c >= 0xfe30 && c <= 0xfe4f) ||
        (c >= 0xff00 && c <= 0xff60) ||
        (c >= 0x1f300 && c <= 0x1faff) ||
        c >= 0x20000)
        ? 2
        : 1;
  }
  return w;
}

/**
 * Greedy row layout: tokens fill rows of `width` columns; a token whose text ends in a newline ends its
 * row. Returns the first token index of each row (plus n at the end). O(n), no DOM.
 */
export function layoutRows(n: number, widthOf: (i: number) => number, breakAfter: (i: number) => boolean, width: number): Int32Array {
  const starts: number[] = [0];
  let used = 0;
  for (let i = 0; i < n; i++) {
    const w = widthOf(i) + 1; // one column of gap between tokens
    if (used > 0 && used + w > width) {
      starts.push(i);
      used = 0;
    }
    used += w;
    if (breakAfter(i) && i + 1 < n) {
      starts.push(i + 1);
      used = 0;
    }
  }
  if (n === 0) return Int32Array.from([0, 0]);
  starts.push(n);
  return Int32Array.from(starts);
}

/** Length of the longest common prefix of two id arrays. */
export function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** Common prefix of a turn's prompt+completion with `ids`, without concatenating. */
export function prefixOfEnd(t: ViewerTurn, ids: readonly number[]): number {
  const p = commonPrefix(t.prompt_ids, ids);
  if (p < t.prompt_ids.length) return p;
  let i = 0;
  while (i < t.sampled_ids.length && p + i < ids.length && t.sampled_ids[i] === ids[p + i]) i++;
  return p + i;
}

export interface AddedByHarness {
  /** The turn compared against: the parent, or for a later root the earlier call sharing the longest prefix. */
  against: ViewerTurn | null;
  relation: 'parent' | 'closest' | 'none';
  /** Tokens of this prompt that match the reference's prompt+completion. */
  kept: number;
  referenceLength: number;
  /** Prompt positions from `kept` on: what the harness inserted (tool results, reminders, edits). */
  addedFrom: number;
  /** Set when the prompt does not extend the reference exactly. */
  prefixBreak: { at: number; expected: number | null; got: number | null } | null;
}

export function addedByHarness(data: ViewerData, turn: ViewerTurn, byId: Map<string, ViewerTurn>): AddedByHarness {
  let against: ViewerTurn | null = turn.parent_id ? (byId.get(turn.parent_id) ?? null) : null;
  let relation: AddedByHarness['relation'] = against ? 'parent' : 'none';
  if (!against && rootKind(data, turn, byId) === 'compaction') {
    // A continuation root: compare with the earlier call it shares the longest prefix with (the latest on
    // ties), which for a compaction or history rewrite is the call whose history was replaced. Other new
    // roots (the main chain after a title call, a subagent, a side call) start a conversation of their
    // own: sharing the chat template's first tokens with an earlier call rewrites nothing.
    let best = 0;
    for (const t of data.turns) {
      if (t === turn) break;
      if (t.role === 'auxiliary' && turn.role !== 'auxiliary') continue;
      const n = prefixOfEnd(t, turn.prompt_ids);
      if (n > 0 && n >= best) {
        best = n;
        against = t;
        relation = 'closest';
      }
    }
  }
  if (!against) return { against: null, relation, kept: 0, referenceLength: 0, addedFrom: 0, prefixBreak: null };
  const ref = against.prompt_ids.concat(against.sampled_ids);
  const kept = commonPrefix(ref, turn.prompt_ids);
  const prefixBreak = kept < ref.length ? { at: kept, expected: ref[kept] ?? null, got: turn.prompt_ids[kept] ?? null } : null;
  return { against, relation, kept, referenceLength: ref.length, addedFrom: kept, prefixBreak };
}

/** Kind of a root for the graph: the first root, a subagent or side call, or a continuation (compaction, rewrite). */
/**
 * The root of the main chain: the first root that is not a side call. A harness that asks for a title
 * before it starts (opencode) makes an auxiliary call the first root; the agent's chain after it is the
 * main one, not a subagent.
 */
export function mainRoot(data: ViewerData, byId: Map<string, ViewerTurn>): ViewerTurn | undefined {
  const roots = data.graph.roots.map((id) => byId.get(id)).filter((t): t is ViewerTurn => t !== undefined);
  return roots.find((t) => t.role !== 'auxiliary') ?? roots[0];
}

export function rootKind(
  data: ViewerData,
  turn: ViewerTurn,
  byId: Map<string, ViewerTurn>,
): 'root' | 'subagent' | 'compaction' | 'auxiliary' | null {
  if (turn.parent_id !== null) return null;
  const first = mainRoot(data, byId);
  if (first === turn) return 'root';
  if (turn.role === 'auxiliary') return 'auxiliary';
  // A continuation keeps the start of the conversation (system prompt and task) but not the history.
  if (
    first &&
    first.prompt_ids.length > 0 &&
    commonPrefix(first.prompt_ids, turn.prompt_ids) >= Math.max(1, Math.floor(first.prompt_ids.length * 0.5))
  )
    return 'compaction';
  return 'subagent';
}

/** Navigation over turns in arrival order and over siblings (branches, retries). */
export class Navigator {
  readonly byId: Map<string, ViewerTurn>;
  constructor(readonly data: ViewerData) {
    this.byId = new Map(data.turns.map((t) => [t.node_id, t]));
  }
  at(i: number): ViewerTurn | undefined {
    return this.data.turns[i];
  }
  indexOf(nodeId: string): number {
    return this.data.turns.findIndex((t) => t.node_id === nodeId);
  }
  /** Children of the same parent (roots are siblings of each other), arrival order. */
  siblings(turn: ViewerTurn): ViewerTurn[] {
    const ids = turn.parent_id ? (this.byId.get(turn.parent_id)?.children ?? []) : this.data.graph.roots;
    return ids.map((id) => this.byId.get(id)).filter((t): t is ViewerTurn => t !== undefined);
  }
  /** The next (+1) or previous (-1) branch: a sibling, else a sibling of the nearest ancestor that has one. */
  branch(turn: ViewerTurn, dir: 1 | -1): ViewerTurn | null {
    let cur: ViewerTurn | undefined = turn;
    while (cur) {
      const sibs = this.siblings(cur);
      const k = sibs.indexOf(cur);
      const next = sibs[k + dir];
      if (next) return next;
      cur = cur.parent_id ? this.byId.get(cur.parent_id) : undefined;
    }
    return null;
  }
}

/**
 * A sampled token's drift colour from its importance ratio (rescored / behaviour probability):
 * dr0 within a quarter of the threshold of 1, dr1 within half, dr2 within the threshold, dr3 past it.
 */
export function driftClass(ratio: number | undefined, threshold: number): string {
  if (ratio === undefined) return 'nolp';
  const off = Math.abs(ratio - 1);
  return off <= threshold / 4 ? 'dr0' : off <= threshold / 2 ? 'dr1' : off <= threshold ? 'dr2' : 'dr3';
}

/** Everything the per-turn strip needs, including the mask and colour bucket of each position. */
export function positionClass(tt: TurnTokens, i: number): string {
  const k = tt.kind(i);
  if (k !== Kind.Sampled) return k === Kind.Inherited ? 't c' : k === Kind.Bridge ? 't br' : k === Kind.Tool ? 't tl' : 't a';
  const lp = tt.logprob(i);
  const drift = tt.turn.drift;
  if (drift) return `t s ${driftClass(drift.ratios[i - tt.nPrompt], drift.threshold)}${tt.mask(i) ? ' m1' : ''}`;
  return `t s ${lp === null ? 'nolp' : `b${logprobBucket(lp)}`}${tt.mask(i) ? ' m1' : ''}`;
}

/**
 * Where a viewer lands when a live session's rollout is shown again with new calls: a reader on the
 * newest call follows the next newest (like a log tail); anyone else stays on the call they were
 * reading, while it still exists.
 */
export function liveFocus(previous: { currentId: string; newestId: string | undefined }, next: ViewerData): string | null {
  const newest = next.turns[next.turns.length - 1]?.node_id ?? null;
  if (previous.currentId === previous.newestId) return newest;
  return next.turns.some((t) => t.node_id === previous.currentId) ? previous.currentId : newest;
}

/**
 * "1 training sample · token in (the proxy rendered)": the export's rows for this rollout (trainable
 * agent paths), and who rendered its prompts.
 */
export function samplesSummary(data: ViewerData): string {
  const n = data.stats?.n_trainable_sequences ?? null;
  const tokenIn = data.turns.some((t) => t.bridge);
  const how = tokenIn ? 'token in (the proxy rendered)' : data.source === 'rollout' ? 'chat (the engine rendered)' : null;
  return [n === null ? null : plural(n, 'training sample'), how].filter(Boolean).join(' · ');
}

/** `1 root`, `2 roots`: counts read as English. */
export function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}
