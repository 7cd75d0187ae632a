// The one message protocol between the rollout viewer's host (extension) and its webview. Each
// message is declared once, below, as a typed descriptor (after GitLens's IpcCommand / IpcRequest /
// IpcNotification): a command (webview -> host, no answer), a request (webview -> host, answered by
// its completion with the response type) or a notification (host -> webview). The wire unions, the
// host's dispatch with its replies, the webview's envelope check and (in webview-schema.ts, kept apart
// so the webview bundle carries no zod) the host's zod check are all derived from these descriptors.
//
// On the wire every message is `{ type: method, ...params }`; a request adds `seq`, and its reply is
// `{ type: '<method>/completion', seq, res }` or `{ ..., seq, err }`. Nothing is posted to the
// webview before it sends `ready`.
import type { AtifCheckResult } from '../harness/atif-check.js';
import type { GroupViewData } from './group-data.js';
import type { TurnDetails, ViewerWire } from './viewer-data.js';

/** Where a group view's data comes from: a batch directory and one of its groups. */
export interface GroupViewRestore {
  dir: string;
  group_id: string;
}

export interface IpcCommand<M extends string = string, P extends object = object> {
  readonly kind: 'command';
  readonly method: M;
  /** Type carrier only. */
  readonly _params?: P;
}

export interface IpcRequest<M extends string = string, P extends object = object, R = unknown> {
  readonly kind: 'request';
  readonly method: M;
  readonly completion: `${M}/completion`;
  /** Type carriers only. */
  readonly _params?: P;
  readonly _response?: R;
}

export interface IpcNotification<M extends string = string, P extends object = object> {
  readonly kind: 'notification';
  readonly method: M;
  /** Type carrier only. */
  readonly _params?: P;
}

/** Names a type for a descriptor (the value is never read). */
const type = <T>(): T => undefined as T;

function command<M extends string, P extends object>(method: M, _params: P): IpcCommand<M, P> {
  return { kind: 'command', method };
}
function request<M extends string, P extends object, R>(method: M, _params: P, _response: R): IpcRequest<M, P, R> {
  return { kind: 'request', method, completion: `${method}/completion` };
}
function notification<M extends string, P extends object>(method: M, _params: P): IpcNotification<M, P> {
  return { kind: 'notification', method };
}

// ---- the messages ----

/** The webview listens now (sent again after every reload). */
export const ReadyCommand = command('ready', type<{ version: 1 }>());
/** Pick a trajectory.json and run the ATIF cross-check; null when the user cancels the pick. */
export const AttachTrajectoryRequest = request('attachTrajectory', type<object>(), type<AtifCheckResult | null>());
/** Raw I/O and messages of one turn, fetched when the turn is shown. */
export const DetailsRequest = request('details', type<{ node_id: string }>(), type<TurnDetails>());

/** Open one member of the group shown (by rollout id) in the rollout viewer. */
export const OpenGroupMemberCommand = command('openGroupMember', type<{ rollout_id: string }>());

/** Run the harness again against the rollout shown, every call answered from the record (`harness-lab replay`). */
export const ReplayRolloutCommand = command('replayRollout', type<object>());
/** Fork the rollout shown at one turn: the calls before it from the record, it and the rest from a live engine. */
export const ForkFromTurnCommand = command('forkFromTurn', type<{ node_id: string }>());

/** The rollout to show (again on a live refresh), optionally at one turn. */
export const LoadNotification = notification('load', type<{ wire: ViewerWire; focus?: string | null }>());
/** Prompt-token texts from the engine, after the first paint; `done`: no more will come for this load. */
export const TokenTextsNotification = notification('tokenTexts', type<{ texts: Record<string, string>; done?: boolean }>());
export const FocusTurnNotification = notification('focusTurn', type<{ node_id: string }>());
export const ErrorNotification = notification('error', type<{ message: string }>());
/**
 * One GRPO group of a batch to show side by side (the group view, webview/viewer/group.ts).
 * `restore`: what the webview keeps as its state, so the panel serializer can reopen the group after a reload.
 */
export const LoadGroupNotification = notification('loadGroup', type<{ group: GroupViewData; restore?: GroupViewRestore }>());

/** Webview -> host, by method. */
export const WEBVIEW_MESSAGES = {
  [ReadyCommand.method]: ReadyCommand,
  [AttachTrajectoryRequest.method]: AttachTrajectoryRequest,
  [DetailsRequest.method]: DetailsRequest,
  [OpenGroupMemberCommand.method]: OpenGroupMemberCommand,
  [ReplayRolloutCommand.method]: ReplayRolloutCommand,
  [ForkFromTurnCommand.method]: ForkFromTurnCommand,
} as const;

/** Host -> webview, by method (request completions come on top). */
export const HOST_NOTIFICATIONS = {
  [LoadNotification.method]: LoadNotification,
  [TokenTextsNotification.method]: TokenTextsNotification,
  [FocusTurnNotification.method]: FocusTurnNotification,
  [ErrorNotification.method]: ErrorNotification,
  [LoadGroupNotification.method]: LoadGroupNotification,
} as const;

// ---- derived types ----

export type IpcDescriptor = IpcCommand | IpcRequest | IpcNotification;
export type ParamsOf<D> = D extends { readonly _params?: infer P } ? P : never;
export type ResponseOf<D> = D extends IpcRequest<string, object, infer R> ? R : never;

/** A descriptor's message on the wire. */
export type MessageOf<D> =
  D extends IpcRequest<infer M, infer P>
    ? { type: M; seq: number } & P
    : D extends IpcCommand<infer M, infer P> | IpcNotification<infer M, infer P>
      ? { type: M } & P
      : never;
/** A request's reply on the wire. */
export type CompletionOf<D> =
  D extends IpcRequest<infer M, object, infer R>
    ? { type: `${M}/completion`; seq: number; res: R } | { type: `${M}/completion`; seq: number; err: string }
    : never;

type WebviewDescriptor = (typeof WEBVIEW_MESSAGES)[keyof typeof WEBVIEW_MESSAGES];
export type WebviewRequest = Extract<WebviewDescriptor, IpcRequest>;
export type HostNotification = (typeof HOST_NOTIFICATIONS)[keyof typeof HOST_NOTIFICATIONS];

/** Webview -> host (validated on the host by WebviewMessageSchema in webview-schema.ts). */
export type WebviewMessage = {
  [K in keyof typeof WEBVIEW_MESSAGES]: MessageOf<(typeof WEBVIEW_MESSAGES)[K]>;
}[keyof typeof WEBVIEW_MESSAGES];
export type NotificationMessage = {
  [K in keyof typeof HOST_NOTIFICATIONS]: MessageOf<(typeof HOST_NOTIFICATIONS)[K]>;
}[keyof typeof HOST_NOTIFICATIONS];
export type CompletionMessage = { [K in WebviewRequest['method']]: CompletionOf<(typeof WEBVIEW_MESSAGES)[K]> }[WebviewRequest['method']];
/** Host -> webview. */
export type HostMessage = NotificationMessage | CompletionMessage;

// ---- building and recognising messages ----

export function notify<D extends HostNotification>(desc: D, params: ParamsOf<D>): MessageOf<D> {
  return { ...params, type: desc.method } as MessageOf<D>;
}

const REQUEST_OF_COMPLETION = new Map<string, WebviewRequest>(
  Object.values(WEBVIEW_MESSAGES).flatMap((d) => (d.kind === 'request' ? [[d.completion, d] as const] : [])),
);
const HOST_TYPES = new Set<string>([...Object.keys(HOST_NOTIFICATIONS), ...REQUEST_OF_COMPLETION.keys()]);

/** Envelope check on the webview side (the payload is built by our own host). */
export function isHostMessage(value: unknown): value is HostMessage {
  return typeof value === 'object' && value !== null && HOST_TYPES.has((value as { type?: unknown }).type as string);
}

export function isCompletion(msg: HostMessage): msg is CompletionMessage {
  return REQUEST_OF_COMPLETION.has(msg.type);
}

/** Narrows a message to one descriptor's (GitLens's `IpcNotification.is`). */
export function isMessage<D extends IpcDescriptor>(desc: D, msg: { type: string }): msg is MessageOf<D> {
  return msg.type === desc.method;
}

// ---- the host side: one handler per webview message, replies derived ----

/** A command's handler returns nothing; a request's handler returns (or throws instead of) its response. */
export type WebviewHandlers = {
  [K in keyof typeof WEBVIEW_MESSAGES]: (typeof WEBVIEW_MESSAGES)[K] extends IpcRequest<string, infer P, infer R>
    ? (params: P) => R | Promise<R>
    : (params: ParamsOf<(typeof WEBVIEW_MESSAGES)[K]>) => void | Promise<void>;
};

/**
 * Runs the handler of one (validated) webview message. A request is answered through `reply` with
 * its completion: `res` when the handler returns, `err` with the message when it throws.
 */
export async function dispatchWebviewMessage(
  msg: WebviewMessage,
  handlers: WebviewHandlers,
  reply: (msg: CompletionMessage) => void,
): Promise<void> {
  const desc: WebviewDescriptor = WEBVIEW_MESSAGES[msg.type];
  const handler = handlers[msg.type] as (params: object) => unknown;
  if (desc.kind !== 'request') {
    await handler(msg);
    return;
  }
  const seq = (msg as { seq: number }).seq;
  let answer: CompletionMessage;
  try {
    answer = { type: desc.completion, seq, res: await handler(msg) } as CompletionMessage;
  } catch (err) {
    answer = { type: desc.completion, seq, err: err instanceof Error ? err.message : String(err) } as CompletionMessage;
  }
  reply(answer);
}

/**
 * Holds host -> webview messages until the webview says `ready`, then flushes them in order.
 * A reloaded webview (hidden and shown again) sends `ready` again: `reset` re-arms the queue.
 */
export class ReadyQueue<M> {
  private ready = false;
  private queue: M[] = [];
  constructor(private readonly post: (msg: M) => void) {}
  send(msg: M): void {
    if (this.ready) this.post(msg);
    else this.queue.push(msg);
  }
  /** The webview is listening now. */
  open(): void {
    this.ready = true;
    const pending = this.queue;
    this.queue = [];
    for (const m of pending) this.post(m);
  }
  reset(): void {
    this.ready = false;
  }
  get isReady(): boolean {
    return this.ready;
  }
}
