// The webview's side of the viewer protocol (src/protocol/messages.ts): the VS Code API, commands,
// one `sendRequest` (one sequence counter, one table of pending replies) and the notifications.
import {
  isCompletion,
  isHostMessage,
  type IpcCommand,
  type MessageOf,
  type NotificationMessage,
  type ParamsOf,
  type ResponseOf,
  type WebviewMessage,
  type WebviewRequest,
} from '../../src/protocol/messages.js';

export interface VsCodeApi {
  postMessage(msg: WebviewMessage): void;
  getState(): unknown;
  setState(state: unknown): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

/** The API inside a VS Code webview; null in a report page or a plain browser. */
export function vsCodeApi(): VsCodeApi | null {
  return typeof acquireVsCodeApi === 'function' ? acquireVsCodeApi() : null;
}

export class HostTransport {
  private seq = 0;
  private readonly pending = new Map<number, { completion: string; resolve: (res: unknown) => void; reject: (err: Error) => void }>();

  /** Starts listening; `onNotification` gets every host message that is not a reply. */
  constructor(
    private readonly api: VsCodeApi,
    onNotification: (msg: NotificationMessage) => void,
  ) {
    window.addEventListener('message', (e: MessageEvent<unknown>) => {
      const msg = e.data;
      if (!isHostMessage(msg)) return;
      if (!isCompletion(msg)) return onNotification(msg);
      const waiting = this.pending.get(msg.seq);
      // A reply nothing waits for (unknown seq, or another request's) is dropped.
      if (!waiting || waiting.completion !== msg.type) return;
      this.pending.delete(msg.seq);
      if ('err' in msg) waiting.reject(new Error(msg.err));
      else waiting.resolve(msg.res);
    });
  }

  sendCommand<D extends IpcCommand>(desc: D, params: ParamsOf<D>): void {
    this.api.postMessage({ ...params, type: desc.method } as unknown as WebviewMessage);
  }

  /** Resolves with the host's response, or rejects with the error it answered. */
  sendRequest<D extends WebviewRequest>(desc: D, params: ParamsOf<D>): Promise<ResponseOf<D>> {
    const seq = ++this.seq;
    return new Promise<ResponseOf<D>>((resolve, reject) => {
      this.pending.set(seq, { completion: desc.completion, resolve: resolve as (res: unknown) => void, reject });
      this.api.postMessage({ ...params, type: desc.method, seq } as MessageOf<D> as WebviewMessage);
    });
  }
}
