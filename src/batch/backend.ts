// Where a batch's rollouts run. The batch runner (queue, durable state, classes) is the same for
// every backend; a backend only runs one attempt of one rollout to its end and says what happened,
// in facts (exit codes, deadline, OOM, eviction, the verifier's reward), never in classes: the one
// place that turns facts into a class is classify.ts, so docker and k8s rollouts are judged alike.
// The whole contract a backend module meets is in this file; ./backends/index.ts only loads one by kind.
import type { StartGate } from '../sandbox/start-gate.js';
import type { BatchPlan } from './plan.js';
import type { BatchManifest, RolloutState } from './state.js';

/** One attempt of one rollout, as the runner hands it to a backend. */
export interface RolloutAttempt {
  batchDir: string;
  manifest: BatchManifest;
  rollout: RolloutState;
  attempt: number;
  /** The capture session already created for this attempt, carrying the batch's metadata and pinned sampling. */
  sessionId: string;
  /** Absolute directory of this attempt's logs and results (`<batch>/runs/<rollout>/<attempt>`). */
  outDir: string;
  /** Aborted by `batch cancel` or the lab's shutdown: the backend stops and removes the sandbox. */
  signal: AbortSignal;
  log(line: string): void;
  /** Records the container id or Job name in the rollout's state as soon as the backend has it (optional for backends). */
  setBackendRef?(ref: string): void;
  /** The cap on sandboxes starting at once and the start-up budget; a backend holds a slot from create until the agent runs. */
  startGate?: StartGate;
}

/** What one attempt did, in facts. */
export interface AttemptFacts {
  /** Container id or Job name, written to the rollout's state before the sandbox starts. */
  backendRef: string | null;
  agent: { exitCode: number | null; timedOut: boolean; ms: number };
  /** Null when the verifier never ran. */
  verifier: { exitCode: number | null; timedOut: boolean; ms: number } | null;
  /** The verifier's reward file, when it wrote one. */
  reward: { value: number; scores: Record<string, number> } | null;
  /** A sandbox-level failure the policy did not cause (crash, OOMKilled, evicted, image missing, killed from outside), in the user's terms. */
  infraError: string | null;
  /** Stopped by the signal. */
  cancelled: boolean;
  /**
   * The sandbox never started because the backend could not make it (the task image would not
   * build, the container or Job was refused, the pod cannot start), in the user's terms; also in
   * infraError. Optional: `harness-lab serve` answers it as the environment failing (FACTORY_ERROR).
   */
  setupFailure?: string | null;
  /**
   * The lab's own infrastructure spoiled the attempt (the cluster's capture proxy restarted under
   * it): an infra error for this attempt, and the runner queues the rollout for another attempt.
   */
  rerun?: boolean;
}

export interface BatchBackend {
  readonly kind: 'docker' | 'k8s';
  /** Runs one attempt to its end; never throws for what happened inside the sandbox (that is a fact). */
  run(attempt: RolloutAttempt): Promise<AttemptFacts>;
  /** Removes every sandbox (container, Job and its pods) of this batch left by a lab process that is gone. */
  cleanupBatch(batchId: string): Promise<string[]>;
  /**
   * Removes what one finished attempt left behind (a k8s Job and its pod, kept until their TTL so a
   * batch's can be looked at); `harness-lab serve` calls it once a result is read, since a server
   * has no batch end. Optional: a backend whose sandboxes are gone when `run` returns has nothing to do.
   */
  removeAttempt?(backendRef: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * The batch's capture proxy as the runner sees it: in-process for docker (data dir `<batch>/capture`),
 * the cluster's proxy through a port-forward for k8s (whose calls are mirrored into `<batch>/capture`
 * while the attempt runs and once more when it ends, so exports and the viewer read every batch the same way).
 */
export interface BatchCapture {
  /** Creates the attempt's session; metadata carries batch, group, rollout, task, harness, sampling and policy version. */
  createSession(req: {
    sessionId: string;
    metadata: Record<string, unknown>;
    sampling: Record<string, number>;
    maxModelCalls: number;
  }): Promise<void>;
  /** What the capture saw: calls answered, and whether the tokens are trainable (aligned ids, logprobs and mask). */
  sessionFacts(sessionId: string): Promise<{ nCalls: number; trainable: boolean; findings: string[] }>;
  close(): Promise<void>;
}

export interface BackendContext {
  batchDir: string;
  manifest: BatchManifest;
  log(line: string): void;
  /** Credential for the manifest's engine_url; never written to the batch directory, a sandbox or a log. */
  engineApiKey?: string;
}

export interface OpenedBackend {
  backend: BatchBackend;
  capture: BatchCapture;
}

/**
 * What a backend module exports. `./backends/k8s/index.ts` is expected to export `k8sBackendModule` of this shape
 * (the docker one is `dockerBackendModule` in ./backends/docker.ts).
 */
export interface BackendModule {
  /** The backend that runs attempts and the batch's capture proxy (started, or reached through a port-forward). */
  open(ctx: BackendContext): Promise<OpenedBackend>;
  /** Removes the batch's sandboxes without starting a capture (a `batch cancel` with no lab running); `finished`: also what only a running batch needs (the k8s proxy). */
  cleanup(manifest: BatchManifest, log: (line: string) => void, opts?: { finished?: boolean }): Promise<string[]>;
  /** `batch submit --dry-run -o json|yaml`: what would be created, as text; nothing is applied. */
  dryRun?(plan: BatchPlan, format: 'json' | 'yaml'): Promise<string>;
  /**
   * Throws, in the user's terms, when this backend cannot make sandboxes at all right now (no Docker
   * daemon; the cluster unreachable, or a permission a batch needs denied). Cheap, read-only.
   */
  preflight?(k8s: BatchManifest['k8s']): Promise<void>;
  /**
   * Removes the batch's sandboxes whose owning lab process is gone, leaving a live one's alone (a
   * container whose create the daemon finished after its lab was killed). Returns what it removed.
   */
  reapStale?(manifest: BatchManifest): Promise<string[]>;
}
