// The kube contexts Submit Rollout Batch offers for a k8s batch: read from the user's kubeconfig
// ($KUBECONFIG, a path list, else ~/.kube/config) with @kubernetes/client-node's KubeConfig, loaded
// lazily (a docker batch never pays for the client library). No kubeconfig at all is an error that
// says where it looked: the client's fallback to an in-cluster or localhost config would offer a
// context the user never made.
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { kubeconfigFiles } from '../cluster/kubeconfig-files.js';

export interface KubeContexts {
  files: string[];
  contexts: { name: string; cluster: string; namespace: string | null }[];
  current: string | null;
}

export class NoKubeconfigError extends Error {}

export async function readKubeContexts(env: NodeJS.ProcessEnv = process.env, home = homedir()): Promise<KubeContexts> {
  const files = kubeconfigFiles(env, home);
  const present = files.filter((f) => existsSync(f));
  if (!present.length)
    throw new NoKubeconfigError(
      `No kubeconfig found (looked at ${files.join(', ')}); set KUBECONFIG or create ~/.kube/config to submit a k8s batch.`,
    );
  // The config module alone: the package's index pulls in every generated API client (~15 MB bundled).
  const { KubeConfig } = await import('@kubernetes/client-node/dist/config.js');
  // kubectl's merge: the first file that names a context (or sets current-context) wins; the
  // client's mergeConfig refuses duplicate users or clusters, which kubectl users have all the time.
  const seen = new Map<string, KubeContexts['contexts'][number]>();
  let current: string | null = null;
  for (const file of present) {
    const kc = new KubeConfig();
    try {
      kc.loadFromFile(file);
    } catch (err) {
      throw new Error(`Cannot read the kubeconfig ${file}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
    for (const c of kc.getContexts())
      if (!seen.has(c.name)) seen.set(c.name, { name: c.name, cluster: c.cluster, namespace: c.namespace ?? null });
    current ??= kc.getCurrentContext() || null;
  }
  const contexts = [...seen.values()];
  if (!contexts.length) throw new NoKubeconfigError(`The kubeconfig ${present.join(', ')} has no contexts.`);
  return { files: present, contexts, current: current && seen.has(current) ? current : null };
}
