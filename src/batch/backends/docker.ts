// The docker backend: the same sandbox code path as `harness-lab rollout` (runRollout), many at once,
// every container labelled with its batch, group and rollout so a later lab removes what a dead one
// left. The batch's capture is one in-process proxy on `<batch>/capture` in front of the given
// engine, or, without --engine-url, the embedded engine answering with each task's policy.json.
import { servedModel } from '../../capture/engine-client.js';
import { CaptureProxy } from '../../capture/proxy.js';
import { harnessEntry } from '../../harness/registry.js';
import { CLI_MODEL_HINTS } from '../../sandbox/lab.js';
import { LABEL, connectDocker } from '../../sandbox/docker-client.js';
import { DockerRuntime } from '../../sandbox/docker.js';
import { TaskRoutedPolicy, batchPolicyFile, startPolicyEngine, type PolicyEngine } from '../../sandbox/policy-engine.js';
import { ensureReactScript } from '../../sandbox/react-script.js';
import { runRollout, type RolloutResult } from '../../sandbox/rollout-runner.js';
import { loadTask, type HarborTask } from '../../tasks/task.js';
import type {
  AttemptFacts,
  AttemptSessionRequest,
  BackendContext,
  BackendModule,
  BatchBackend,
  BatchCapture,
  OpenedBackend,
  RolloutAttempt,
} from '../backend.js';
import { batchPaths, type BatchManifest } from '../state.js';

/** AttemptFacts from the sandbox's own record: facts only; classify.ts decides what they mean. */
export function factsFromResult(r: RolloutResult): AttemptFacts {
  const verifierRan = r.verifier !== null;
  // A failure before the agent's end or around the verifier that no other fact explains (image,
  // sandbox creation, the session key leaking into the verifier): the sandbox, not the policy.
  const unexplained =
    r.error !== null && !r.cancelled && !r.agent.timed_out && (!verifierRan || r.verifier?.session_key_absent === false) ? r.error : null;
  return {
    backendRef: r.sandbox_id,
    agent: { exitCode: r.agent.exit_code, timedOut: r.agent.timed_out, ms: r.agent.ms },
    verifier: r.verifier ? { exitCode: r.verifier.exit_code, timedOut: r.verifier.timed_out, ms: r.verifier.ms } : null,
    reward: r.reward === null ? null : { value: r.reward, scores: r.reward_scores },
    infraError: r.sandbox_lost ?? unexplained,
    cancelled: r.cancelled,
    // Failed before any container existed: the image would not build, or Docker refused the container.
    ...(r.sandbox_id === null && !r.cancelled && r.error !== null ? { setupFailure: r.error } : {}),
  };
}

/** The batch capture of a Docker batch: the lab's own proxy, in this process (exported for its test). */
export class InProcessCapture implements BatchCapture {
  constructor(
    readonly proxy: CaptureProxy,
    private readonly engine: PolicyEngine | undefined,
  ) {}

  /** Each attempt's minted session key, in this process only: the store keeps its hash, never the key. */
  private readonly keys = new Map<string, string>();

  async createSession(req: AttemptSessionRequest): Promise<void> {
    const left = this.proxy.sessions.get(req.sessionId);
    if (left && this.keys.has(req.sessionId)) return;
    if (left && !left.info.key_sha256) return; // a session from before keys: its id is its key
    if (left) {
      // Left from a lab killed right after creating it (the attempt never started): its key died with
      // that lab, so the attempt gets the session afresh with a new key.
      if (left.calls.length)
        throw new Error(
          `session ${req.sessionId} already holds ${left.calls.length} call(s) from a lab that is gone, and its key is not known here`,
        );
      await this.proxy.sessions.delete(req.sessionId);
    }
    // On disk before it resolves: the runner records the attempt (with this session id) next, and a
    // lab killed after that must leave the session's file behind for the resumed lab and for debugging.
    const created = await this.proxy.sessions.createStored({
      session_id: req.sessionId,
      mint_key: true,
      metadata: req.metadata as Record<string, never>,
      sampling: req.sampling,
      max_model_calls: req.maxModelCalls,
    });
    this.keys.set(req.sessionId, created.api_key!);
  }

  /** The key a harness presents for the session (for a session without one, its id). */
  sessionKeyOf(sessionId: string): string {
    return this.keys.get(sessionId) ?? sessionId;
  }

  async sessionFacts(sessionId: string): Promise<{ nCalls: number; trainable: boolean; findings: string[] }> {
    const doc = this.proxy.sessions.rollout(sessionId);
    if (!doc) return { nCalls: 0, trainable: false, findings: [`[FATAL] no_session: the proxy has no session ${sessionId}`] };
    return { nCalls: doc.calls.filter((c) => !c.error).length, trainable: doc.trainable, findings: doc.validation };
  }

  async close(): Promise<void> {
    await this.proxy.close();
    await this.engine?.close();
  }
}

class DockerBatchBackend implements BatchBackend {
  readonly kind = 'docker' as const;

  constructor(
    private readonly runtime: DockerRuntime,
    private readonly capture: InProcessCapture,
    private readonly tasks: Map<string, HarborTask>,
    private readonly model: string,
    private readonly reactScript: string | undefined,
  ) {}

  async run(a: RolloutAttempt): Promise<AttemptFacts> {
    const task = this.tasks.get(a.rollout.task);
    if (!task)
      return {
        backendRef: null,
        agent: { exitCode: null, timedOut: false, ms: 0 },
        verifier: null,
        reward: null,
        infraError: `task ${a.rollout.task} is not in the batch manifest`,
        cancelled: false,
      };
    const r = await runRollout({
      task,
      harness: a.rollout.harness,
      runtime: this.runtime,
      proxy: this.capture.proxy,
      model: this.model,
      outDir: a.outDir,
      exactOutDir: a.outDir,
      sessionId: a.sessionId,
      sessionKey: this.capture.sessionKeyOf(a.sessionId),
      signal: a.signal,
      labels: { [LABEL.batch]: a.manifest.batch_id, [LABEL.group]: a.rollout.group_id, [LABEL.rollout]: a.rollout.rollout_id },
      timeoutSec: a.manifest.timeout_sec,
      timeoutMode: a.manifest.on_timeout === 'keep' ? 'verify' : 'stop',
      onSandbox: (id) => a.setBackendRef?.(id),
      startGate: a.startGate,
      reactScript: this.reactScript,
      log: a.log,
    });
    return factsFromResult(r);
  }

  cleanupBatch(batchId: string): Promise<string[]> {
    return this.runtime.removeLabelled(LABEL.batch, batchId);
  }

  async close(): Promise<void> {
    await this.runtime.removeOwned();
  }
}

async function open(ctx: BackendContext): Promise<OpenedBackend> {
  const { manifest } = ctx;
  const tasks = new Map(manifest.tasks.map((t) => [t.name, loadTask(t.dir)] as const));
  for (const name of manifest.harnesses) harnessEntry(name);
  const runtime = await DockerRuntime.connect();
  const stale = await runtime.cleanupStale();
  if (stale.length) ctx.log(`removed ${stale.length} sandbox(es) left by lab processes that are gone: ${stale.join(', ')}`);
  let engine: PolicyEngine | undefined;
  let engineUrl = manifest.engine_url;
  let model = manifest.model;
  if (!engineUrl) {
    const routes = [...tasks.values()].map((t) => {
      const policyFile = batchPolicyFile(t);
      if (!policyFile) throw new Error(`task ${t.name} has no policy.json for the embedded engine; the batch needs --engine-url`);
      return { instruction: t.instruction, policyFile };
    });
    engine = await startPolicyEngine(new TaskRoutedPolicy(routes));
    engineUrl = engine.url;
    model ??= engine.model;
    ctx.log(`engine: ${engine.description}`);
  }
  try {
    const apiKey = manifest.engine_url ? ctx.engineApiKey : undefined;
    model ??= await servedModel(engineUrl, CLI_MODEL_HINTS, { apiKey });
    const proxy = await CaptureProxy.start({
      engineUrl,
      model,
      dataDir: batchPaths(ctx.batchDir).capture,
      captureLevel: manifest.engine_url ? undefined : 'tokens',
      ...(apiKey ? { engineApiKey: apiKey } : {}),
    });
    const capture = new InProcessCapture(proxy, engine);
    ctx.log(`capture proxy ${proxy.url} (data ${batchPaths(ctx.batchDir).capture})`);
    // Every task image once, before any group starts: rollouts then only create containers (a task
    // whose image fails is left to its rollouts, which fail as infra errors and feed the breaker).
    for (const task of tasks.values())
      await runtime
        .prepareImage(task, ctx.log)
        .catch((err: unknown) => ctx.log(`task ${task.name}: its image is not ready: ${err instanceof Error ? err.message : String(err)}`));
    const needsReact = manifest.harnesses.some((h) => harnessEntry(h).install.kind === 'bundled-script');
    const reactScript = needsReact ? await ensureReactScript() : undefined;
    return { backend: new DockerBatchBackend(runtime, capture, tasks, model.split('/').pop()!, reactScript), capture };
  } catch (err) {
    await engine?.close();
    throw err;
  }
}

async function cleanup(manifest: BatchManifest): Promise<string[]> {
  const runtime = await DockerRuntime.connect();
  return runtime.removeLabelled(LABEL.batch, manifest.batch_id);
}

async function preflight(): Promise<void> {
  await connectDocker(); // pings the daemon, and says how to start it when it does not answer
}

async function reapStale(manifest: BatchManifest): Promise<string[]> {
  const runtime = await DockerRuntime.connect();
  return runtime.removeStaleLabelled(LABEL.batch, manifest.batch_id);
}

export const dockerBackendModule: BackendModule = { open, cleanup, preflight, reapStale };
