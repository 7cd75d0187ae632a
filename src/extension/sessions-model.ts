// The Sessions tree as plain data: session -> calls, with the labels, descriptions, tooltips and
// context values the view shows. The vscode TreeDataProvider only maps these nodes to TreeItems.
import type { CallActivity } from '../capture/session-registry.js';
import type { CallRecord, CaptureLevel } from '../capture/types.js';
import type { RolloutOutcomeView } from '../protocol/viewer-data.js';

export interface SessionRow {
  session_id: string;
  created_at: string;
  n_calls: number;
  model?: string;
  metadata?: Record<string, unknown>;
  /** The session has its own secret key (its id opens nothing). */
  keyed?: boolean;
}

/** What the tree reads from the running proxy (or the durable store when it is stopped). */
export interface SessionSource {
  listSessions(): SessionRow[];
  getCalls(sessionId: string): CallRecord[];
  /** Calls the engine is still working on (a live proxy only). */
  inFlight?(sessionId: string): InFlightCall[];
}

/** A call sent to the engine and not yet answered. */
export type InFlightCall = Omit<CallActivity, 'state'>;

/** The calls in flight, kept from the registry's start/end events. */
export class InFlightCalls {
  private readonly calls = new Map<string, InFlightCall>();

  /** Applies one event; true when the set changed. */
  note(activity: CallActivity): boolean {
    const key = `${activity.session_id}#${activity.index}`;
    if (activity.state === 'ended') return this.calls.delete(key);
    const { state: _state, ...call } = activity;
    this.calls.set(key, call);
    return true;
  }

  of(sessionId: string): InFlightCall[] {
    return [...this.calls.values()].filter((c) => c.session_id === sessionId).sort((a, b) => a.index - b.index);
  }

  clear(): void {
    this.calls.clear();
  }
}

export type CallStatus = 'ok' | 'error';

export interface SessionNode {
  kind: 'session';
  id: string;
  sessionId: string;
  label: string;
  description: string;
  tooltip: string;
  contextValue: 'harnessLab.session';
  nCalls: number;
  nInFlight: number;
  /** The rollout's outcome (Run with Harness, Validate), once its verifier has scored it. */
  outcome?: RolloutOutcomeView;
}

export interface InFlightNode {
  kind: 'inflight';
  id: string;
  sessionId: string;
  index: number;
  label: string;
  description: string;
  tooltip: string;
  contextValue: 'harnessLab.inFlightCall';
}

export interface CallNode {
  kind: 'call';
  id: string;
  sessionId: string;
  callId: string;
  label: string;
  description: string;
  tooltip: string;
  contextValue: 'harnessLab.call';
  status: CallStatus;
  captureLevel: CaptureLevel;
}

export type SessionsTreeNode = SessionNode | CallNode | InFlightNode;

/** What this call's record can be used for (docs/capture-protocol.md §9.5): ids + aligned logprobs = tokens. */
export function callCaptureLevel(rec: Pick<CallRecord, 'prompt_token_ids' | 'completion_token_ids' | 'logprobs'>): CaptureLevel {
  const ids = rec.prompt_token_ids !== null && rec.completion_token_ids !== null;
  if (ids && rec.logprobs !== null && rec.logprobs.length === rec.completion_token_ids?.length) return 'tokens';
  if (rec.logprobs !== null && rec.logprobs.length > 0) return 'logprobs';
  return 'text';
}

export function callStatus(rec: Pick<CallRecord, 'error' | 'finish_reason'>): CallStatus {
  return rec.error ? 'error' : 'ok';
}

export function formatLatency(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '?';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  return `${Math.floor(ms / 60_000)} m ${Math.round((ms % 60_000) / 1000)} s`;
}

function tokenCounts(rec: CallRecord): { prompt: number | null; completion: number | null } {
  return {
    prompt: rec.usage?.prompt_tokens ?? rec.prompt_token_ids?.length ?? null,
    completion: rec.usage?.completion_tokens ?? rec.completion_token_ids?.length ?? null,
  };
}

export function callNode(rec: CallRecord): CallNode {
  const status = callStatus(rec);
  const level = callCaptureLevel(rec);
  const { prompt, completion } = tokenCounts(rec);
  const statusText = rec.error ? `${rec.error.status} ${rec.error.kind}` : (rec.finish_reason ?? 'ok');
  const tokens = `${prompt ?? '?'}→${completion ?? '?'} tok`;
  // A failed call has no tokens and no capture level worth showing: status and latency only.
  const description = (
    rec.error ? [statusText, formatLatency(rec.latency_ms)] : [statusText, tokens, formatLatency(rec.latency_ms), level]
  ).join(' · ');
  const tooltip = [
    `Call ${rec.call_id} (#${rec.index}) in session ${rec.session_id}`,
    `Dialect: ${rec.dialect}${rec.stream ? ' (streamed)' : ''}  ${rec.path}`,
    `Status: ${statusText}${rec.error ? ` — ${rec.error.message}` : ''}`,
    `Tokens: prompt ${prompt ?? '?'}, completion ${completion ?? '?'}`,
    `Latency: ${formatLatency(rec.latency_ms)}`,
    `Capture level: ${level}`,
    `Model: ${rec.model ?? '?'}  Tools offered: ${rec.n_tools}`,
    `Started: ${rec.started_at}`,
    ...(rec.findings.length ? ['Findings:', ...rec.findings.map((f) => `  ${f}`)] : []),
  ].join('\n');
  return {
    kind: 'call',
    id: `call:${rec.session_id}:${rec.call_id}`,
    sessionId: rec.session_id,
    callId: rec.call_id,
    label: `#${rec.index} ${rec.dialect}`,
    description,
    tooltip,
    contextValue: 'harnessLab.call',
    status,
    captureLevel: level,
  };
}

/** A call the engine is still working on, shown after the session's recorded calls. */
export function inFlightNode(call: InFlightCall): InFlightNode {
  return {
    kind: 'inflight',
    id: `inflight:${call.session_id}:${call.index}`,
    sessionId: call.session_id,
    index: call.index,
    label: `#${call.index} calling engine…`,
    description: `since ${shortTime(call.started_at)}`,
    tooltip: `Call #${call.index} in session ${call.session_id}: sent to the engine at ${call.started_at}, not answered yet`,
    contextValue: 'harnessLab.inFlightCall',
  };
}

const OUTCOME_WORDS: Record<RolloutOutcomeView['class'], string> = {
  completed: 'solved',
  policy_failure: 'not solved',
  infra_error: 'failed',
  timeout: 'timed out',
  cancelled: 'cancelled',
};

export function sessionNode(
  row: SessionRow,
  calls?: readonly CallRecord[],
  inFlight: readonly InFlightCall[] = [],
  outcome?: RolloutOutcomeView,
): SessionNode {
  const n = calls?.length ?? row.n_calls;
  const errors = calls?.filter((c) => c.error).length ?? 0;
  const label = typeof row.metadata?.label === 'string' && row.metadata.label ? row.metadata.label : row.session_id;
  const origin = sessionOrigin(row.metadata);
  const reward = outcome
    ? `${outcome.reward === null ? 'no reward' : `reward ${outcome.reward.toFixed(2)}`} · ${OUTCOME_WORDS[outcome.class]}`
    : undefined;
  const parts = [...(reward ? [reward] : []), ...(origin ? [origin] : []), `${n} call${n === 1 ? '' : 's'}`];
  if (inFlight.length) parts.push(`${inFlight.length} in flight`);
  if (errors) parts.push(`${errors} failed`);
  parts.push(shortTime(row.created_at));
  return {
    kind: 'session',
    id: `session:${row.session_id}`,
    sessionId: row.session_id,
    label,
    description: parts.join(' · '),
    tooltip: [
      `Session ${row.session_id}`,
      ...(origin ? [`From ${origin}`] : []),
      ...(outcome
        ? [
            `Outcome: ${reward} (${outcome.class}) on task ${outcome.task}`,
            ...(outcome.error ? [`Error: ${outcome.error.split('\n')[0]}`] : []),
            ...(outcome.verifier.length ? ['Verifier (last lines):', ...outcome.verifier.map((l) => `  ${l}`)] : []),
          ]
        : []),
      `Created ${row.created_at}`,
      ...(row.model ? [`Model ${row.model}`] : []),
      `${n} calls, ${errors} failed${inFlight.length ? `, ${inFlight.length} in flight` : ''}`,
    ].join('\n'),
    contextValue: 'harnessLab.session',
    nCalls: n,
    nInFlight: inFlight.length,
    ...(outcome ? { outcome } : {}),
  };
}

/**
 * Where a session came from, from its metadata: a rollout's harness and task (`react on hello-file`),
 * a captured terminal, a session made in VS Code, or any caller-set `harness`/`source`.
 */
export function sessionOrigin(metadata: Record<string, unknown> | undefined): string | undefined {
  const str = (k: string) => (typeof metadata?.[k] === 'string' && metadata[k] ? (metadata[k] as string) : undefined);
  const harness = str('harness');
  const task = str('task');
  if (harness && task) return `${harness} on ${task.split('/').pop()}`;
  if (harness) return harness;
  const source = str('source');
  if (source === 'terminal') return 'captured terminal';
  if (source === 'vscode') return 'VS Code session';
  return source;
}

function shortTime(iso: string): string {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return d.toISOString().slice(11, 19);
}

/** In-flight calls without a record yet: a recorded call is no longer in flight, even before its end event. */
function pendingCalls(src: SessionSource, sessionId: string, calls: readonly CallRecord[]): InFlightCall[] {
  const recorded = new Set(calls.map((c) => c.index));
  return (src.inFlight?.(sessionId) ?? []).filter((c) => !recorded.has(c.index));
}

/** The tree, newest session first, calls in arrival order. */
export class SessionsTreeModel {
  /** `outcomeOf`: the rollout outcome a session's metadata leads to (rollout-outcome.ts OutcomeCache), if any. */
  constructor(
    private readonly source: () => SessionSource | undefined,
    private readonly outcomeOf: (metadata: Record<string, unknown> | undefined) => RolloutOutcomeView | undefined = () => undefined,
  ) {}

  roots(): SessionNode[] {
    const src = this.source();
    if (!src) return [];
    return [...src.listSessions()]
      .sort((a, b) => (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : a.session_id.localeCompare(b.session_id)))
      .map((row) => {
        const calls = src.getCalls(row.session_id);
        return sessionNode(row, calls, pendingCalls(src, row.session_id, calls), this.outcomeOf(row.metadata));
      });
  }

  children(node?: SessionsTreeNode): SessionsTreeNode[] {
    if (!node) return this.roots();
    if (node.kind !== 'session') return [];
    const src = this.source();
    if (!src) return [];
    const calls = [...src.getCalls(node.sessionId)].sort((a, b) => a.index - b.index);
    return [...calls.map(callNode), ...pendingCalls(src, node.sessionId, calls).map(inFlightNode)];
  }

  parentOf(node: SessionsTreeNode): SessionNode | undefined {
    if (node.kind === 'session') return undefined;
    return this.roots().find((s) => s.sessionId === node.sessionId);
  }
}
