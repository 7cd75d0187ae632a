// Loading a batch's backend module by the manifest's `backend` (the contract: ../backend.ts).
// Docker is in this build; the Kubernetes backend (`./k8s/`) is loaded lazily, so a docker batch never pays for the client
// library, and a build without it fails with a message instead of a stack trace.
import type { BackendModule } from '../backend.js';
import type { BatchManifest } from '../state.js';

export class BackendUnavailableError extends Error {}

async function loadK8s(): Promise<BackendModule> {
  let mod: { k8sBackendModule?: BackendModule };
  try {
    mod = (await import('./k8s/index.js')) as { k8sBackendModule?: BackendModule };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND')
      throw new BackendUnavailableError('the Kubernetes backend (src/batch/backends/k8s/) is not part of this build; use --backend docker');
    throw err;
  }
  if (!mod.k8sBackendModule)
    throw new BackendUnavailableError('src/batch/backends/k8s/ does not export k8sBackendModule; use --backend docker');
  return mod.k8sBackendModule;
}

export async function backendModule(kind: BatchManifest['backend']): Promise<BackendModule> {
  if (kind === 'docker') return (await import('./docker.js')).dockerBackendModule;
  return loadK8s();
}
