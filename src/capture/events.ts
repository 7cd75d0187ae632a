// A minimal typed event emitter with disposable subscriptions (the shape VS Code's Event uses).
/** Anything with a `dispose()`: an event subscription here, a vscode.Disposable in the extension. */
export interface IDisposable {
  dispose(): void;
}

export type Listener<T> = (event: T) => void;

export class Emitter<T> {
  private listeners = new Set<Listener<T>>();

  /** Subscribe; dispose the result to unsubscribe. */
  readonly event = (listener: Listener<T>): IDisposable => {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  };

  fire(event: T): void {
    for (const listener of [...this.listeners]) {
      try {
        listener(event);
      } catch {
        // a listener's failure must never reach the request path
      }
    }
  }

  dispose(): void {
    this.listeners.clear();
  }
}
