// The rollout graph: every model call of a session, linked by exact prefix (docs/capture-protocol.md §10).
//
//   node    one call (CallRecord; call_id is the node id)
//   parent  the earlier call whose prompt+completion is the LONGEST exact prefix of this call's prompt
//   root    a call that extends nothing: the agent's first call, a subagent (own system prompt), a
//           title or summary call, or the continuation after compaction / a history rewrite
//   continuation  a call whose prompt extends an earlier call's prompt and reply except for the
//           reply's reasoning, which the harness did not send back (gemini-cli with a thinking
//           model): linked to that call with a finding instead of becoming a new root
//   path    segment -> leaf, which becomes one training sequence (sequences.ts); a continuation
//           link starts a new segment, since its tokens do not extend the parent's
//
// Linking is by engine token ids. A call without prompt ids (capture below `tokens`) is linked by its
// message list instead (10.2): the same longest-exact-prefix rule over interned message identities,
// with leading system messages dropped. Both domains share one algorithm (prefix-trie.ts), so ingest
// costs O(this call's length) in either, and arrival order never changes the result.
import { PrefixTrie, Seq, type TrieNode } from './prefix-trie.js';
import { reasoningText } from './dialects/common.js';
import { checkTurn, finding, isFatal } from './findings.js';
import { startsWithIds } from './token-ids.js';
import type { CallRecord, CaptureLevel, ChatMessage, ChatTool } from './types.js';

export type LinkDomain = 'tokens' | 'messages';

/** A node's entry in one trie, with its lengths in that trie's units (tokens or messages). */
interface Member {
  readonly node: GraphNode;
  readonly promptLen: number;
  readonly endLen: number;
  readonly promptAt: TrieNode<Member>;
}

/** Whether a record becomes a graph node: errored calls that never got an engine answer do not. */
export function isGraphRecord(record: CallRecord): boolean {
  if (!record.error) return true;
  return (record.completion_token_ids?.length ?? 0) > 0 || (record.engine_response?.choices?.length ?? 0) > 0;
}

export class GraphNode {
  readonly node_id: string;
  readonly index: number;
  /** `tokens` when the engine returned prompt ids; otherwise the node is linked by messages. */
  readonly domain: LinkDomain;
  /**
   * The prompt's token ids. The record's array may since have grown at its end (the token-in bridge
   * appends the next turn's ids to it: Bridge.extend), so the node keeps the length it had.
   */
  get prompt_ids(): readonly number[] {
    const ids = this.promptArray;
    if (ids.length === this.promptLength) return ids;
    const own = this.record.prompt_token_ids;
    return own && own.length === this.promptLength ? own : (this.promptCopy ??= ids.slice(0, this.promptLength));
  }
  readonly promptLength: number;
  private readonly promptArray: readonly number[];
  private promptCopy: number[] | undefined;
  readonly sampled_ids: readonly number[];
  /** Behaviour logprobs fit for training, or null: missing, misaligned, below `tokens`, or a FATAL turn finding. */
  readonly sampled_logprobs: readonly number[] | null;
  /** The record's own findings plus this turn's ingest checks (and the continuation's, if linked so). */
  get findings(): readonly string[] {
    return this.continuation ? [...this.ownFindings, this.continuation] : this.ownFindings;
  }
  private readonly ownFindings: readonly string[];
  /**
   * Set when the parent link is a continuation across stripped reasoning (the finding text): the
   * prompt extends the parent's prompt and reply as messages, but not as tokens.
   */
  continuation: string | null = null;
  readonly n_tools: number;
  readonly request_messages: readonly ChatMessage[];
  readonly request_tools: readonly ChatTool[] | null;
  readonly response_message: ChatMessage | null;
  /** Maintained by RolloutGraph; read-only for everyone else. */
  parent: GraphNode | null = null;
  readonly children: GraphNode[] = [];
  /** @internal */ tok: Member | null = null;
  /** @internal */ msg: Member | null = null;
  private systemKeyMemo: string | undefined;

  constructor(
    readonly record: CallRecord,
    level: CaptureLevel,
  ) {
    this.node_id = record.call_id;
    this.index = record.index;
    this.promptArray = record.prompt_token_ids ?? [];
    this.promptLength = this.promptArray.length;
    this.sampled_ids = record.completion_token_ids ?? [];
    this.domain = this.promptLength > 0 ? 'tokens' : 'messages';
    this.request_messages = record.engine_request?.messages ?? [];
    this.request_tools = record.engine_request?.tools ?? null;
    this.response_message = record.engine_response?.choices?.[0]?.message ?? null;
    this.n_tools = record.n_tools;
    const own = checkTurn(
      {
        index: record.index,
        prompt_token_ids: record.prompt_token_ids,
        completion_token_ids: record.completion_token_ids,
        logprobs: record.logprobs,
        finish_reason: record.finish_reason,
        response_message: this.response_message,
      },
      level,
    );
    // The proxy may have graded the turn already (in its own words): keep one finding per grade+code.
    const key = (f: string) => f.slice(0, f.indexOf(':'));
    const had = new Set(record.findings.map(key));
    // Logprobs the proxy rejected (and nulled) are not also "missing".
    if (['logprob_misalign', 'invalid_logprob', 'positive_logprob'].some((c) => had.has(`[FATAL] ${c}`))) had.add('[FATAL] no_logprobs');
    this.ownFindings = [...record.findings, ...own.filter((f) => !had.has(key(f)))];
    const lps = record.logprobs;
    const usable =
      level === 'tokens' && lps !== null && lps.length === this.sampled_ids.length && lps.length > 0 && !this.ownFindings.some(isFatal);
    this.sampled_logprobs = usable ? lps : null;
  }

  /**
   * @internal identity of the leading system messages, to tell retried first calls from subagents.
   * Computed when first asked (by `discarded()` for roots, and across reasoning): a harness's system
   * prompt can be 100k tokens, and building this key for every call cost 0.8 ms a turn at 108k
   * (bench/token-in-cost.ts, session 15) while it also held a copy of that prompt per call.
   */
  get systemKey(): string {
    if (this.systemKeyMemo === undefined) {
      const s = leadingSystemCount(this.request_messages);
      this.systemKeyMemo = this.request_messages.slice(0, s).map(messageIdentity).join('\n');
    }
    return this.systemKeyMemo;
  }
}

/** Arrival order; call_id breaks ties so that the result never depends on the order of add() calls. */
export function byArrival(a: GraphNode, b: GraphNode): number {
  return a.index - b.index || (a.node_id < b.node_id ? -1 : a.node_id > b.node_id ? 1 : 0);
}

// Longer end wins (attach a deep chain to its immediate predecessor); identical ends go to the earliest.
function better(a: Member, b: Member): boolean {
  return a.endLen > b.endLen || (a.endLen === b.endLen && byArrival(a.node, b.node) < 0);
}

export interface RolloutGraphOptions {
  /** Decides how turns are graded and whether any logprob is usable (only at `tokens`). Default `tokens`. */
  captureLevel?: CaptureLevel;
}

export interface Fork {
  parent_id: string;
  children: string[];
}

/**
 * All calls of one session, linked by prefix. Feed it with `add` as calls arrive (the proxy keeps one
 * per live session) or build it from stored records with `fromRecords`; both give the same graph.
 */
export class RolloutGraph {
  readonly captureLevel: CaptureLevel;
  private readonly byId = new Map<string, GraphNode>();
  private readonly tokTrie = new PrefixTrie<Member>();
  // Opened by the first call without token ids; until then message identities are never computed.
  private msgTrie: PrefixTrie<Member> | null = null;
  private readonly messageIds = new Map<string, number>();
  private ordered: GraphNode[] | null = null;
  /** The node that arrived last so far (by arrival order, not by add order). */
  private latest: GraphNode | null = null;
  /** Token nodes whose reply had reasoning: the only possible parents across stripped reasoning (a scan of every node per root made long sessions quadratic). */
  private readonly reasoningParents: GraphNode[] = [];

  constructor(opts: RolloutGraphOptions = {}) {
    this.captureLevel = opts.captureLevel ?? 'tokens';
  }

  static fromRecords(records: Iterable<CallRecord>, opts: RolloutGraphOptions = {}): RolloutGraph {
    const graph = new RolloutGraph(opts);
    for (const record of records) graph.add(record);
    return graph;
  }

  /** Deterministic cost meter: token (or message) comparisons and trie steps spent on linking so far. */
  get work(): number {
    return this.tokTrie.work + (this.msgTrie?.work ?? 0);
  }

  get size(): number {
    return this.byId.size;
  }

  /**
   * Link one call into the graph. Returns its node, or null when the record is not a node (an error
   * without an engine answer). Adding a call_id twice returns the existing node unchanged.
   */
  add(record: CallRecord): GraphNode | null {
    if (!isGraphRecord(record)) return null;
    const existing = this.byId.get(record.call_id);
    if (existing) return existing;
    const node = new GraphNode(record, this.captureLevel);
    this.byId.set(node.node_id, node);
    if (node.response_message && reasoningText(node.response_message)) this.reasoningParents.push(node);
    this.ordered = null;
    if (node.domain === 'tokens') {
      node.tok = this.link(this.tokTrie, node, new Seq(node.prompt_ids, node.sampled_ids), true, (n) => n.tok);
      if (this.msgTrie) node.msg = this.link(this.msgTrie, node, this.messageSeq(node), false, (n) => n.msg);
      this.linkContinuations(node);
    } else {
      this.msgTrie ??= this.openMessageTrie();
      node.msg = this.link(this.msgTrie, node, this.messageSeq(node), true, (n) => n.msg);
    }
    return node;
  }

  /**
   * Insert `node` into `trie`, find its parent (when `linkSelf`; nodes of the other domain are only
   * candidates here) and hand it any later-arrived node it is now the best parent of.
   *
   * Invariant kept after every add: each node's parent is its best candidate among all nodes present.
   * A new node N can only become a better parent for nodes X whose prompt starts with N's end, which are
   * the prompt markers in the subtree below N's end. Inside that subtree, a trie node carrying any end
   * marker is a valid parent, with a longer end than N, for every prompt strictly below it, so by the
   * invariant nothing below it needs a look: the walk stops there. What is visited is N's own path plus
   * the region between N's end and the next ends, i.e. the nodes actually re-parented (and N's exact
   * duplicates' children), never the session's other calls.
   */
  private link(trie: PrefixTrie<Member>, node: GraphNode, seq: Seq, linkSelf: boolean, memberOf: (n: GraphNode) => Member | null): Member {
    const promptLen = seq.headLength;
    let best: Member | null = null;
    const promptAt = trie.descend(
      seq,
      promptLen,
      linkSelf
        ? (t) => {
            if (!t.enders) return;
            for (const c of t.enders) if (c.promptLen < promptLen && (best === null || better(c, best))) best = c;
          }
        : undefined,
    );
    const endAt = trie.descend(seq, seq.length, undefined, promptAt);
    const me: Member = { node, promptLen, endLen: seq.length, promptAt };
    if (linkSelf) {
      (promptAt.prompts ??= []).push(me);
      if (best) attach(node, (best as Member).node);
    }
    (endAt.enders ??= []).push(me);
    trie.walkBelow(endAt, (t) => {
      if (t.prompts) {
        for (const x of t.prompts) {
          if (x.node === node || x.promptLen <= promptLen) continue; // a parent's prompt is strictly shorter
          // An exact prefix always beats a continuation across stripped reasoning.
          const current = x.node.parent && !x.node.continuation ? memberOf(x.node.parent) : null;
          if (current === null || better(me, current)) {
            x.node.continuation = null;
            reparent(x.node, node);
          }
        }
      }
      return t === endAt || t.enders === null;
    });
    return me;
  }

  /**
   * Continuations across stripped reasoning, both ways: `node` (when it found no exact parent) may
   * continue an earlier call, and later-arrived calls without an exact parent may continue `node`.
   * Only calls whose reply had reasoning can be such parents, so sessions without reasoning pay nothing.
   */
  private linkContinuations(node: GraphNode): void {
    // Calls arrive in order (live, and from sorted records): then nothing later can continue `node`.
    const last = this.latest;
    const isLatest = last === null || byArrival(last, node) < 0;
    if (isLatest) this.latest = node;
    const canParentLater = !isLatest && Boolean(reasoningText(node.response_message ?? { role: 'assistant' }));
    if (node.parent !== null && !canParentLater) return;
    if (node.parent === null) {
      let best: GraphNode | null = null;
      for (const p of this.reasoningParents)
        if (p !== node) if (continuesAcrossReasoning(node, p) && (best === null || p.promptLength > best.promptLength)) best = p;
      if (best) linkContinuation(node, best);
    }
    if (!canParentLater) return;
    const candidates = [...this.byId.values()].filter((n) => n !== node && n.domain === 'tokens');
    for (const x of candidates) {
      if (x.parent !== null && !x.continuation) continue;
      if (x.continuation && x.parent && x.parent.promptLength >= node.promptLength) continue;
      if (continuesAcrossReasoning(x, node)) linkContinuation(x, node);
    }
  }

  private openMessageTrie(): PrefixTrie<Member> {
    const trie = new PrefixTrie<Member>();
    // The nodes already present all have token ids (else the trie would exist): in the message domain
    // they are candidate parents only. The caller links the message node that opened the trie.
    for (const n of this.nodes()) {
      if (n.domain === 'tokens') n.msg = this.link(trie, n, this.messageSeq(n), false, (m) => m.msg);
    }
    return trie;
  }

  private messageSeq(node: GraphNode): Seq {
    const msgs = node.request_messages;
    const prompt = msgs.slice(leadingSystemCount(msgs)).map((m) => this.intern(messageIdentity(m)));
    // The reply may omit its role; the harness always names it when echoing the turn back.
    const r = node.response_message;
    const reply = r ? [this.intern(messageIdentity({ ...r, role: r.role || 'assistant' }))] : [];
    return new Seq(prompt, reply);
  }

  private intern(identity: string): number {
    let id = this.messageIds.get(identity);
    if (id === undefined) this.messageIds.set(identity, (id = this.messageIds.size));
    return id;
  }

  // --- structure ---------------------------------------------------------------------------------

  get(nodeId: string): GraphNode | undefined {
    return this.byId.get(nodeId);
  }

  /** All nodes in arrival order. */
  nodes(): readonly GraphNode[] {
    return (this.ordered ??= [...this.byId.values()].sort(byArrival));
  }

  roots(): GraphNode[] {
    return this.nodes().filter((n) => n.parent === null);
  }

  leaves(): GraphNode[] {
    return this.nodes().filter((n) => n.children.length === 0);
  }

  /** Children in arrival order. */
  childrenOf(node: GraphNode): GraphNode[] {
    return [...node.children].sort(byArrival);
  }

  /** Nodes with more than one child: retries, resamples or parallel branches. */
  forks(): Fork[] {
    return this.nodes()
      .filter((n) => n.children.length > 1)
      .map((n) => ({ parent_id: n.node_id, children: this.childrenOf(n).map((c) => c.node_id) }));
  }

  rootOf(node: GraphNode): GraphNode {
    let n = node;
    while (n.parent) n = n.parent;
    return n;
  }

  pathTo(leaf: GraphNode): GraphNode[] {
    const path: GraphNode[] = [];
    for (let n: GraphNode | null = leaf; n; n = n.parent) path.push(n);
    return path.reverse();
  }

  /**
   * Every path whose tokens are one exact sequence, by last-node arrival order: root-to-leaf, except
   * that a continuation across stripped reasoning ends the path at its parent and starts a new one.
   */
  paths(): GraphNode[][] {
    const ends = this.nodes().filter((n) => !n.children.some((c) => !c.continuation));
    return ends.map((end) => {
      const path: GraphNode[] = [];
      for (let n: GraphNode | null = end; n; n = n.continuation ? null : n.parent) path.push(n);
      return path.reverse();
    });
  }

  /**
   * Sampled turns that led nowhere (10.3). Sibling groups are the children of each fork and the roots
   * with an identical prompt (a retried first call has no parent to fork from). In a group where at
   * least one member continued, the childless members are discarded; if all are terminal the case is
   * ambiguous and all are kept.
   */
  discarded(): Set<string> {
    const groups: GraphNode[][] = this.nodes()
      .filter((n) => n.children.length > 1)
      .map((n) => n.children);
    const rootGroups = new Map<TrieNode<Member>, Map<string, GraphNode[]>>();
    for (const root of this.roots()) {
      const member = root.domain === 'tokens' ? root.tok : root.msg;
      if (!member) continue;
      // Message lists are compared without system messages, so the system text has to match separately:
      // a subagent with the same first user message is not a retry.
      const key = root.domain === 'tokens' ? '' : root.systemKey;
      let bySystem = rootGroups.get(member.promptAt);
      if (!bySystem) rootGroups.set(member.promptAt, (bySystem = new Map()));
      const group = bySystem.get(key);
      if (group) group.push(root);
      else bySystem.set(key, [root]);
    }
    for (const bySystem of rootGroups.values()) for (const g of bySystem.values()) if (g.length > 1) groups.push(g);
    const out = new Set<string>();
    for (const group of groups) {
      if (!group.some((n) => n.children.length > 0)) continue;
      for (const n of group) if (n.children.length === 0) out.add(n.node_id);
    }
    return out;
  }
}

/**
 * Whether `child` continues `parent` but for the parent's reasoning: same system prompt, the child's
 * prompt tokens start with the parent's prompt, and as messages the child's history is the parent's
 * history plus its reply (message identity ignores reasoning), while the parent's reply had reasoning.
 */
function continuesAcrossReasoning(child: GraphNode, parent: GraphNode): boolean {
  if (byArrival(parent, child) >= 0 || child.domain !== 'tokens' || parent.domain !== 'tokens') return false;
  const reply = parent.response_message;
  if (!reply || !reasoningText(reply)) return false;
  if (parent.systemKey !== child.systemKey || parent.promptLength >= child.promptLength) return false;
  if (!startsWithIds(child.prompt_ids, parent.prompt_ids)) return false;
  const history = (n: GraphNode) => n.request_messages.slice(leadingSystemCount(n.request_messages)).map(messageIdentity);
  const expected = [...history(parent), messageIdentity({ ...reply, role: reply.role || 'assistant' })];
  const got = history(child);
  return got.length > expected.length && expected.every((m, i) => m === got[i]);
}

/** How many messages at the start of a request are system messages (compared apart from the history). */
function leadingSystemCount(messages: readonly ChatMessage[]): number {
  let s = 0;
  while (s < messages.length && messages[s]?.role === 'system') s++;
  return s;
}

function linkContinuation(child: GraphNode, parent: GraphNode): void {
  child.continuation = finding(
    'WARN',
    'reasoning_stripped',
    `turn ${child.index} continues turn ${parent.index} (${parent.node_id}) but its prompt lacks that turn's ` +
      `reasoning (the harness did not send it back); linked as a continuation, trained as a new segment`,
  );
  reparent(child, parent);
}

function attach(node: GraphNode, parent: GraphNode): void {
  node.parent = parent;
  parent.children.push(node);
}

function reparent(node: GraphNode, parent: GraphNode): void {
  if (node.parent) {
    const siblings = node.parent.children;
    siblings.splice(siblings.indexOf(node), 1);
  }
  attach(node, parent);
}

// --- message identity (10.2) ------------------------------------------------------------------------

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj)
      .filter((k) => obj[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

// Harnesses echo arguments back re-serialised ({"a": 1} vs {"a":1}, other key order): compare parsed.
function canonicalArguments(args: unknown): string {
  if (args === null || args === undefined) return '';
  if (typeof args !== 'string') return canonicalJson(args);
  try {
    return canonicalJson(JSON.parse(args));
  } catch {
    return args.trim(); // malformed arguments: two different strings are two different calls
  }
}

/**
 * What decides whether two messages are the same turn: role, trimmed text (text parts only), and tool
 * calls as (name, canonical arguments). Ids, refusal, annotations and null-vs-empty content are ignored,
 * because providers add them and harnesses drop or rewrite them on the way back.
 */
export function messageIdentity(message: unknown): string {
  if (!message || typeof message !== 'object') return JSON.stringify(['', String(message), []]);
  const m = message as ChatMessage;
  const c = m.content;
  const text =
    typeof c === 'string'
      ? c
      : Array.isArray(c)
        ? c
            .filter((p) => p && (p.type === 'text' || p.type === 'input_text'))
            .map((p) => String(p.text ?? ''))
            .join('')
        : '';
  const calls = (Array.isArray(m.tool_calls) ? m.tool_calls : [])
    .filter((tc) => tc && typeof tc === 'object')
    .map((tc) => [String(tc.function?.name ?? ''), canonicalArguments(tc.function?.arguments)]);
  return JSON.stringify([String(m.role ?? ''), text.trim(), calls]);
}
