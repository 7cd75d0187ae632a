// Everything a `run` or `validate` needs, opened in the right order with errors in the user's terms:
// task, harness, sandbox runtime (stale sandboxes removed), engine, capture proxy, signal handlers
// that remove this process's containers on Ctrl-C or SIGTERM. The proxy gets an admin key minted for
// this lab alone: it stays in this process and never enters a sandbox or a verifier, so even a
// sandbox that shares the host's loopback (the local runtime) cannot use the proxy's admin routes.
import { join } from 'node:path';
import { mintAdminKey } from '../capture/auth.js';
import { servedModel, type ServedModelHints } from '../capture/engine-client.js';
import { CaptureProxy } from '../capture/proxy.js';
import { removeStaleSessionSocketDirs } from '../capture/session-socket.js';
import { assertInstalled, harnessEntry } from '../harness/registry.js';
import { loadTask, type HarborTask } from '../tasks/task.js';
import { DockerRuntime } from './docker.js';
import { LocalRuntime } from './local.js';
import { startPolicyEngine } from './policy-engine.js';
import { ensureReactScript } from './react-script.js';
import type { RolloutOptions } from './rollout-runner.js';
import { processAlive, type SandboxRuntime } from './runtime.js';

export interface LabOptions {
  taskDir: string;
  harness: string;
  sandbox: 'docker' | 'local';
  engineUrl?: string;
  /** The engine's credential (Authorization: Bearer); only the proxy holds it. */
  engineApiKey?: string;
  /** Key for the proxy's admin routes (default: one minted for this lab); never enters a sandbox. */
  adminKey?: string;
  model?: string;
  outDir: string;
  log?: (line: string) => void;
  /** Install SIGINT/SIGTERM handlers that remove this process's sandboxes (default true). */
  handleSignals?: boolean;
  /**
   * A capture proxy that is already running (the VS Code extension's, with `model` the name it
   * announces): rollouts record into it and its engine; the lab neither starts an engine nor closes it.
   */
  proxy?: CaptureProxy;
}

export interface Lab {
  task: HarborTask;
  runtime: SandboxRuntime;
  proxy: CaptureProxy;
  engineDescription: string;
  rolloutOptions: Omit<RolloutOptions, 'timeoutSec'>;
  close(): Promise<void>;
}

/** What the CLI's user changes when the engine's model cannot be read. */
export const CLI_MODEL_HINTS: ServedModelHints = { checkUrl: '--engine-url', nameModel: 'pass --model NAME' };

export async function openLab(opts: LabOptions): Promise<Lab> {
  const task = loadTask(opts.taskDir);
  const entry = harnessEntry(opts.harness);
  assertInstalled(entry);
  const runtime: SandboxRuntime = opts.sandbox === 'docker' ? await DockerRuntime.connect() : new LocalRuntime();
  const stale = await runtime.cleanupStale();
  if (stale.length) opts.log?.(`removed ${stale.length} sandbox(es) left by lab processes that are gone: ${stale.join(', ')}`);
  const staleSockets = removeStaleSessionSocketDirs(processAlive);
  if (staleSockets.length) opts.log?.(`removed ${staleSockets.length} session socket folder(s) left by lab processes that are gone`);

  const closers: (() => Promise<void>)[] = [];
  const close = async () => {
    for (const c of closers.reverse()) await c().catch(() => {});
    closers.length = 0;
  };
  try {
    let engineUrl = opts.proxy?.engineUrl ?? opts.engineUrl;
    let model = opts.model;
    let engineDescription = `engine at ${engineUrl}`;
    if (!engineUrl) {
      if (!task.policyFile)
        throw new Error(`task ${task.name} has no policy.json for the embedded engine; pass --engine-url URL of an inference engine`);
      const engine = await startPolicyEngine(task.policyFile);
      closers.push(() => engine.close());
      engineUrl = engine.url;
      model ??= engine.model;
      engineDescription = engine.description;
    }
    model ??= await servedModel(engineUrl, CLI_MODEL_HINTS, { apiKey: opts.engineUrl ? opts.engineApiKey : undefined });
    let proxy = opts.proxy;
    // The lab's own proxy always has an admin key (the user's, else one minted for this lab); a
    // proxy handed in (the extension's) keeps its own.
    const adminKey = proxy ? undefined : (opts.adminKey ?? mintAdminKey());
    if (!proxy) {
      const own = await CaptureProxy.start({
        engineUrl,
        model,
        ...(opts.engineUrl && opts.engineApiKey ? { engineApiKey: opts.engineApiKey } : {}),
        adminKey,
        dataDir: join(opts.outDir, '.capture'),
        captureLevel: opts.engineUrl ? undefined : 'tokens',
      });
      closers.push(() => own.close());
      proxy = own;
    }
    const reactScript = entry.install.kind === 'bundled-script' ? await ensureReactScript() : undefined;

    if (opts.handleSignals !== false) {
      const onSignal = (signal: NodeJS.Signals) => {
        process.stderr.write(`\nharness-lab: ${signal}: removing this lab's sandboxes\n`);
        void runtime.removeOwned().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
      };
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      closers.unshift(async () => {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      });
    }
    closers.push(() => runtime.removeOwned());
    return {
      task,
      runtime,
      proxy,
      engineDescription,
      rolloutOptions: {
        task,
        harness: entry.name,
        runtime,
        proxy,
        adminKey,
        model: model.split('/').pop()!,
        outDir: opts.outDir,
        log: opts.log,
        reactScript,
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
