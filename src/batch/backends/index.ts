// Opening a batch's backend and capture by the manifest's `backend`. Docker is in this build; the
// Kubernetes backend (`./k8s.ts`) is loaded lazily, so a docker batch never pays for the client
// library, and a build without it fails with a message instead of a stack trace.
import type { BatchBackend, BatchCapture } from '../backend.js';
import type { BatchPlan } from '../plan.js';
import type { BatchManifest } from '../state.js';

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
 * What a backend module exports. `./k8s.ts` is expected to export `k8sBackendModule` of this shape
 * (the docker one is `dockerBackendModule` in ./docker.ts).
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

export class BackendUnavailableError extends Error {}

async function loadK8s(): Promise<BackendModule> {
  let mod: { k8sBackendModule?: BackendModule };
  try {
    mod = (await import('./k8s.js')) as { k8sBackendModule?: BackendModule };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') throw new BackendUnavailableError('the Kubernetes backend (src/batch/backends/k8s.ts) is not part of this build; use --backend docker');
    throw err;
  }
  if (!mod.k8sBackendModule) throw new BackendUnavailableError('src/batch/backends/k8s.ts does not export k8sBackendModule; use --backend docker');
  return mod.k8sBackendModule;
}

export async function backendModule(kind: BatchManifest['backend']): Promise<BackendModule> {
  if (kind === 'docker') return (await import('./docker.js')).dockerBackendModule;
  return loadK8s();
}
