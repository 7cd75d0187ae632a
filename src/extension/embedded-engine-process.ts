// "Start Embedded Engine": `harness-lab engine` (the bundled CLI next to this bundle) as a child
// process of the extension host, owned by one Disposable. A separate process keeps llama.cpp's
// CPU work and its native addon out of the extension host. No vscode import (unit-tested).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { Emitter } from '../capture/events.js';
import { Disposable, toDisposable } from './lifecycle.js';

export interface EngineProcessOptions {
  /** dist/cli.js of this extension. */
  cliPath: string;
  /** A policy file or a shipped policy name; unset: the model samples freely. */
  policy?: string;
  log: { info(m: string): void; warn(m: string): void };
  /** Where the tiny model is built and cached (HARNESS_LAB_DATA_DIR). */
  dataDir?: string;
  /** Give up waiting for "engine listening on" after this long (first start builds the model). */
  startTimeoutMs?: number;
  /** Listen on this port (the one it had before a reload); default 0, any free port. */
  port?: number;
}

export function bundledCli(extensionPath: string): string {
  const cli = join(extensionPath, 'dist', 'cli.js');
  if (!existsSync(cli))
    throw new Error(
      `the Harness Lab CLI ${cli} is missing from this installation; reinstall the extension (or run npm run build in a checkout)`,
    );
  return cli;
}

export class EngineProcess extends Disposable {
  private constructor(
    private readonly child: ChildProcess,
    readonly url: string,
    readonly policy: string | undefined,
  ) {
    super();
    this._register(toDisposable(() => this.kill()));
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get exited(): boolean {
    return this.child.exitCode !== null || this.child.signalCode !== null;
  }

  /** Resolves when the engine's process is gone. */
  readonly whenExited = (): Promise<void> =>
    this.exited ? Promise.resolve() : new Promise((resolve) => this.child.once('exit', () => resolve()));

  private kill(): void {
    if (!this.exited) this.child.kill('SIGTERM');
  }

  static start(opts: EngineProcessOptions): Promise<EngineProcess> {
    const args = [
      opts.cliPath,
      'engine',
      '--host',
      '127.0.0.1',
      '--port',
      String(opts.port ?? 0),
      ...(opts.policy ? ['--policy', opts.policy] : []),
    ];
    // In desktop VS Code process.execPath is Electron; ELECTRON_RUN_AS_NODE makes it plain Node.
    const child = spawn(process.execPath, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ELECTRON_RUN_AS_NODE: '1', ...(opts.dataDir ? { HARNESS_LAB_DATA_DIR: opts.dataDir } : {}) },
    });
    return new Promise((resolve, reject) => {
      let stderr = '';
      let stdout = '';
      let settled = false;
      const fail = (message: string) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (child.exitCode === null) child.kill('SIGTERM');
        reject(new Error(`${message}${stderr.trim() ? `\n${stderr.trim()}` : ''}`));
      };
      const timer = setTimeout(
        () => fail(`harness-lab engine did not start within ${Math.round((opts.startTimeoutMs ?? 180_000) / 1000)} s`),
        opts.startTimeoutMs ?? 180_000,
      );
      child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
        stderr += chunk;
        for (const line of chunk.split('\n')) if (line.trim()) opts.log.info(`engine: ${line.trim()}`);
      });
      child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
        stdout += chunk;
        const m = /engine listening on (http:\/\/\S+)/.exec(stdout);
        if (m && !settled) {
          settled = true;
          clearTimeout(timer);
          opts.log.info(`embedded engine (pid ${child.pid}) listening on ${m[1]}${opts.policy ? `, policy ${opts.policy}` : ''}`);
          resolve(new EngineProcess(child, m[1]!, opts.policy));
        }
      });
      child.once('error', (err) => fail(`could not start harness-lab engine: ${err.message}`));
      child.once('exit', (code, signal) => {
        if (settled) opts.log.warn(`embedded engine (pid ${child.pid}) exited (${signal ?? `code ${code}`})`);
        fail(`harness-lab engine exited before listening (${signal ?? `code ${code}`})`);
      });
    });
  }
}

/** What a window remembers of the embedded engine it owns, to start it again after a reload. */
export const OwnedEngineSchema = z.object({
  url: z.string().regex(/^http:\/\/127\.0\.0\.1:\d+/),
  port: z.number().int().min(1).max(65535),
  /** The policy file or shipped name it follows; null: none (the model samples freely). */
  policy: z.string().nullable(),
});
export type OwnedEngine = z.infer<typeof OwnedEngineSchema>;

/** Where the slot keeps its record (the extension passes workspaceState; never the user's settings). */
export interface OwnedEngineMemory {
  get(): unknown;
  set(value: OwnedEngine | undefined): void;
}

/**
 * The one embedded engine this window owns (a new start replaces it); disposed with the extension.
 * It remembers the engine (URL, port, policy) in workspace state, not in the Engine URL setting, so a
 * reload can start it again on the same port and no ephemeral port outlives it in User settings.
 */
export class EngineSlot extends Disposable {
  private engine: EngineProcess | undefined;
  private readonly exitEmitter = this._register(new Emitter<{ url: string; pid: number | undefined }>());
  private readonly changeEmitter = this._register(new Emitter<void>());
  /** The owned engine's process ended without being stopped (crash, kill): its port is dead. */
  readonly onDidExit = this.exitEmitter.event;
  /** An engine was started, replaced or stopped. */
  readonly onDidChange = this.changeEmitter.event;

  constructor(private readonly memory: OwnedEngineMemory = { get: () => undefined, set: () => undefined }) {
    super();
  }

  get current(): EngineProcess | undefined {
    return this.engine && !this.engine.exited ? this.engine : undefined;
  }

  /** The engine this workspace owned, as remembered (the running one, or the one before a reload). */
  remembered(): OwnedEngine | undefined {
    const parsed = OwnedEngineSchema.safeParse(this.memory.get());
    return parsed.success ? parsed.data : undefined;
  }

  /** The URL of the engine in use: the running one, else none (a remembered one is not running). */
  get url(): string | undefined {
    return this.current?.url;
  }

  /** Makes `next` the owned engine; the previous one is stopped (after the caller moved traffic off it). */
  replace(next: EngineProcess | undefined): void {
    const previous = this.engine;
    this.engine = next;
    if (next) {
      this.memory.set({ url: next.url, port: Number(new URL(next.url).port), policy: next.policy ?? null });
      void next.whenExited().then(() => {
        if (this.engine === next) this.exitEmitter.fire({ url: next.url, pid: next.pid });
      });
    } else this.memory.set(undefined);
    previous?.dispose();
    if (!this._store.isDisposed) this.changeEmitter.fire();
  }

  override dispose(): void {
    // The record stays: the next window (a reload) starts the engine again.
    const engine = this.engine;
    this.engine = undefined;
    engine?.dispose();
    super.dispose();
  }
}
