// Removing every object a label selector names, kind by kind. A training run's rollout server
// removes what it made for its rollouts (capture proxy, Jobs, their Secrets) when it stops on
// SIGTERM; a server killed first (SIGKILL at the end of its grace period, an OOM kill, a node lost
// during `train cancel`) cannot. Everything it made carries LABELS.ownerRun, so `train cancel`
// sweeps what is left once the server's pod is gone.
import { apiStatus, clusterError, type Cluster } from './kube.js';

interface Named {
  metadata?: { name?: string };
}

/** One kind: how to list it by selector and delete one of it (404 is gone already). */
interface SweptKind {
  kind: string;
  list(cluster: Cluster, namespace: string, labelSelector: string): Promise<{ items: Named[] }>;
  remove(cluster: Cluster, namespace: string, name: string): Promise<unknown>;
}

// Owners before what they own (a Job before its pods' Secrets), so nothing is made again meanwhile.
const KINDS: SweptKind[] = [
  {
    kind: 'Deployment',
    list: (c, namespace, labelSelector) => c.apps.listNamespacedDeployment({ namespace, labelSelector }),
    remove: (c, namespace, name) => c.apps.deleteNamespacedDeployment({ namespace, name, propagationPolicy: 'Background' }),
  },
  {
    kind: 'Job',
    list: (c, namespace, labelSelector) => c.batch.listNamespacedJob({ namespace, labelSelector }),
    remove: (c, namespace, name) => c.batch.deleteNamespacedJob({ namespace, name, propagationPolicy: 'Background' }),
  },
  {
    kind: 'Service',
    list: (c, namespace, labelSelector) => c.core.listNamespacedService({ namespace, labelSelector }),
    remove: (c, namespace, name) => c.core.deleteNamespacedService({ namespace, name }),
  },
  {
    kind: 'NetworkPolicy',
    list: (c, namespace, labelSelector) => c.networking.listNamespacedNetworkPolicy({ namespace, labelSelector }),
    remove: (c, namespace, name) => c.networking.deleteNamespacedNetworkPolicy({ namespace, name }),
  },
  {
    kind: 'Secret',
    list: (c, namespace, labelSelector) => c.core.listNamespacedSecret({ namespace, labelSelector }),
    remove: (c, namespace, name) => c.core.deleteNamespacedSecret({ namespace, name }),
  },
  {
    kind: 'ConfigMap',
    list: (c, namespace, labelSelector) => c.core.listNamespacedConfigMap({ namespace, labelSelector }),
    remove: (c, namespace, name) => c.core.deleteNamespacedConfigMap({ namespace, name }),
  },
  {
    kind: 'PersistentVolumeClaim',
    list: (c, namespace, labelSelector) => c.core.listNamespacedPersistentVolumeClaim({ namespace, labelSelector }),
    remove: (c, namespace, name) => c.core.deleteNamespacedPersistentVolumeClaim({ namespace, name }),
  },
];

/**
 * Deletes every Deployment, Job (with its pods), Service, NetworkPolicy, Secret, ConfigMap and
 * PersistentVolumeClaim in the cluster's namespace that `labelSelector` selects; returns them as
 * "Kind name". A list or delete the API refuses (other than 404) throws in the cluster's terms.
 */
export async function deleteSelected(cluster: Cluster, labelSelector: string): Promise<string[]> {
  const ns = cluster.namespace;
  const removed: string[] = [];
  for (const k of KINDS) {
    const items = await k.list(cluster, ns, labelSelector).catch((err: unknown) => {
      throw clusterError(cluster, `listing the ${k.kind}s labelled ${labelSelector}`, err);
    });
    for (const item of items.items) {
      const name = item.metadata?.name;
      if (!name) continue;
      const gone = await k.remove(cluster, ns, name).then(
        () => true,
        (err: unknown) => {
          if (apiStatus(err)?.code === 404) return false;
          throw clusterError(cluster, `deleting ${k.kind} ${ns}/${name}`, err);
        },
      );
      if (gone) removed.push(`${k.kind} ${name}`);
    }
  }
  return removed;
}
