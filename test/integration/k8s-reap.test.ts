// A lab killed with -9 leaves its rollout Jobs running; the next lab on the same batch (a restarted
// `serve`, whose reaper runs every few seconds) deletes exactly those: Jobs labelled with another lab
// process as owner. Its own Jobs, and Jobs of other batches, stay. On the API server double.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type * as k8s from '@kubernetes/client-node';
import { loadCluster } from '../../src/cluster/kube.js';
import { LABELS, rolloutSelector } from '../../src/cluster/manifests.js';
import { LAB_INSTANCE, OWNER_LABEL, k8sBackendModule, reapStaleJobs } from '../../src/batch/backends/k8s/index.js';
import type { BatchManifest } from '../../src/batch/state.js';
import type { KubeDouble } from '../k8s-double/index.js';
import { clusterWithNamespace } from './k8s-fixtures.js';

const NS = 'reap';

function job(name: string, batch: string, owner: string | null): k8s.V1Job {
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name,
      namespace: NS,
      labels: { [LABELS.batch]: batch, [LABELS.managedBy]: 'harness-lab', ...(owner ? { [OWNER_LABEL]: owner } : {}) },
    },
    // Suspended: the double makes no pod, so the test needs no image.
    spec: { suspend: true, backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'x' }] } } },
  };
}

describe('k8s reapStale: the Jobs of a lab killed with -9', { timeout: 120_000 }, () => {
  let cluster: KubeDouble;
  let batchApi: k8s.BatchV1Api;

  before(async () => {
    ({ cluster, batchApi } = await clusterWithNamespace(NS));
    for (const j of [
      job('dead-a0', 'b1', 'deadbeef0001'),
      job('dead-a1', 'b1', 'deadbeef0001'),
      job('mine-a0', 'b1', LAB_INSTANCE),
      job('other-batch', 'b2', 'deadbeef0001'),
    ])
      await batchApi.createNamespacedJob({ namespace: NS, body: j });
  });
  after(async () => cluster?.close());

  const names = async (selector: string) =>
    (await batchApi.listNamespacedJob({ namespace: NS, labelSelector: selector })).items.map((j) => j.metadata!.name!).sort();

  it("deletes the batch's Jobs another lab made, keeps its own and other batches'", async () => {
    const c = loadCluster({ kubeconfig: cluster.kubeconfig, namespace: NS });
    assert.deepEqual((await reapStaleJobs(c, 'b1')).sort(), ['dead-a0', 'dead-a1']);
    // Background propagation: the double removes them (no finalizers on a suspended Job).
    for (let i = 0; i < 50 && (await names(rolloutSelector('b1'))).length > 1; i++) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(await names(rolloutSelector('b1')), ['mine-a0']);
    assert.deepEqual(await names(rolloutSelector('b2')), ['other-batch']);
    assert.deepEqual(await reapStaleJobs(c, 'b1'), [], 'a second pass finds nothing');
  });

  it("is the module hook serve calls (reapStale), on the batch manifest's target", async () => {
    process.env.KUBECONFIG = cluster.kubeconfig;
    const manifest = { batch_id: 'b2', backend: 'k8s', k8s: { context: 'double', namespace: NS, registry: null, queue_name: null } };
    assert.deepEqual(await k8sBackendModule.reapStale!(manifest as unknown as BatchManifest), ['other-batch']);
  });
});
