// "Start Embedded Engine": `harness-lab engine` (the bundled CLI next to this bundle) as a child
// process of the extension host, owned by one Disposable. A separate process keeps llama.cpp's
// CPU work and its native addon out of the extension host. No vscode import (unit-tested).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
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
}

export function bundledCli(extensionPath: string): string {
  const cli = join(extensionPath, 'dist', 'cli.js');
  if (!existsSync(cli)) throw new Error(`the Harness Lab CLI ${cli} is missing from this installation; reinstall the extension (or run npm run build in a checkout)`);
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
  readonly whenExited = (): Promise<void> => (this.exited ? Promise.resolve() : new Promise((resolve) => this.child.once('exit', () => resolve())));

  private kill(): void {
    if (!this.exited) this.child.kill('SIGTERM');
  }

  static start(opts: EngineProcessOptions): Promise<EngineProcess> {
    const args = [opts.cliPath, 'engine', '--host', '127.0.0.1', '--port', '0', ...(opts.policy ? ['--policy', opts.policy] : [])];
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
      const timer = setTimeout(() => fail(`harness-lab engine did not start within ${Math.round((opts.startTimeoutMs ?? 180_000) / 1000)} s`), opts.startTimeoutMs ?? 180_000);
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

/** The one embedded engine this window started (a new start replaces it); disposed with the extension. */
export class EngineSlot extends Disposable {
  private engine: EngineProcess | undefined;

  get current(): EngineProcess | undefined {
    return this.engine && !this.engine.exited ? this.engine : undefined;
  }

  replace(next: EngineProcess | undefined): void {
    this.engine?.dispose();
    this.engine = next;
  }

  override dispose(): void {
    this.replace(undefined);
    super.dispose();
  }
}
