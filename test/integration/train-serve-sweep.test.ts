// `train cancel` removes what a rollout server killed before its own clean-up left (#30: failures
// contained). A server stopping on SIGTERM removes its capture proxy and rollout Jobs itself
// (train-serve-k8s proves it); one killed first (SIGKILL after its grace period, an OOM kill, a lost
// node) cannot. Everything it makes carries harness-lab/owner-run=RUN (`serve --run`, which the run's
// Deployment passes), so removeRolloutServer sweeps it once the server's pod is gone, kind by kind,
// and leaves another run's objects alone. On the API server double without its Docker node: the
// leftovers are made here as the server's k8s backend makes them.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { loadCluster, type Cluster } from '../../src/cluster/kube.js';
import { LABELS } from '../../src/cluster/manifests.js';
import { deleteSelected } from '../../src/cluster/sweep.js';
import { removeRolloutServer, rolloutServerManifests } from '../../src/training/rollout-server.js';
import { ServeSpecSchema } from '../../src/training/trainer-jobs.js';
import { KubeApiDouble } from '../k8s-double/api-server.js';
import { writeApiKubeconfig } from '../k8s-double/index.js';

const NS = 'sweep';
const RUN = 'grpo-days';
const OTHER = 'grpo-other';

/** The objects a server's batch makes (proxy Deployment, Service, NetworkPolicy, key Secret, PVC, tests ConfigMap, a rollout Job). */
function leftovers(run: string, batch: string): k8s.KubernetesObject[] {
  const labels = { [LABELS.managedBy]: 'harness-lab', [LABELS.batch]: batch, [LABELS.ownerRun]: run };
  const meta = (name: string) => ({ name, namespace: NS, labels });
  const pod = {
    metadata: { labels: { ...labels, [LABELS.role]: 'proxy' } },
    spec: { containers: [{ name: 'proxy', image: 'harness-lab/harness-lab:latest' }] },
  };
  return [
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: meta(`hl-proxy-${batch}`),
      spec: { replicas: 1, selector: { matchLabels: pod.metadata.labels }, template: pod },
    } as k8s.V1Deployment,
    { apiVersion: 'v1', kind: 'Service', metadata: meta(`hl-proxy-${batch}`), spec: { ports: [{ port: 8080 }] } } as k8s.V1Service,
    {
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: meta(`hl-proxy-ingress-${batch}`),
      spec: { podSelector: {}, policyTypes: ['Ingress'] },
    } as k8s.V1NetworkPolicy,
    { apiVersion: 'v1', kind: 'Secret', metadata: meta(`hl-proxy-${batch}`), stringData: { 'admin-key': 'k' } } as k8s.V1Secret,
    {
      apiVersion: 'v1',
      kind: 'PersistentVolumeClaim',
      metadata: meta(`hl-proxy-state-${batch}`),
      spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
    } as k8s.V1PersistentVolumeClaim,
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: meta(`hl-tests-${batch}`), data: { 'test.sh': 'exit 0' } } as k8s.V1ConfigMap,
    {
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: meta(`hl-${batch}-served-0-a0`),
      spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'agent', image: 'task:latest' }] } } },
    } as k8s.V1Job,
  ];
}

describe("train cancel sweeps what a killed rollout server left, and only its own run's", { timeout: 60_000 }, () => {
  let api: KubeApiDouble;
  let dir: string;
  let cluster: Cluster;
  let objects: k8s.KubernetesObjectApi;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hl-train-sweep-'));
    api = new KubeApiDouble({ bookmarkMs: 200 });
    const url = await api.listen();
    const kubeconfig = join(dir, 'kubeconfig');
    writeApiKubeconfig(kubeconfig, api, url, NS);
    cluster = loadCluster({ kubeconfig, context: 'double', namespace: NS });
    await cluster.core.createNamespace({ body: { metadata: { name: NS } } });
    objects = cluster.objects;
  });

  after(async () => {
    await api?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("the run's Deployment passes --run, so the server labels what it makes", () => {
    const manifests = rolloutServerManifests({
      run: RUN,
      namespace: NS,
      image: 'harness-lab/harness-lab:latest',
      splits: [],
      spec: ServeSpecSchema.parse({ datasets: { train: 'tasks' }, env: {} }),
      taskImages: new Map(),
      adminKey: 'k',
    });
    const deployment = manifests.find((o) => o.kind === 'Deployment') as k8s.V1Deployment;
    const command = deployment.spec!.template.spec!.containers[0]!.command!;
    assert.equal(command[command.indexOf('--run') + 1], RUN);
  });

  it('removes the leftovers of its run (every kind, owners first) and keeps the other run', async () => {
    for (const o of [...leftovers(RUN, 'serve-aaaa'), ...leftovers(OTHER, 'serve-bbbb')]) await objects.create(o);
    const lines: string[] = [];
    const removed = await removeRolloutServer(cluster, RUN, (l) => lines.push(l), { podGoneTimeoutMs: 1_000 });
    const swept = [
      'Deployment hl-proxy-serve-aaaa',
      'Job hl-serve-aaaa-served-0-a0',
      'Service hl-proxy-serve-aaaa',
      'NetworkPolicy hl-proxy-ingress-serve-aaaa',
      'Secret hl-proxy-serve-aaaa',
      'ConfigMap hl-tests-serve-aaaa',
      'PersistentVolumeClaim hl-proxy-state-serve-aaaa',
    ];
    assert.deepEqual(
      removed.filter((r) => r.includes('serve-aaaa')),
      swept,
    );
    assert.ok(
      lines.some((l) => l.startsWith(`removed what the rollout server left: ${swept[0]}`)),
      lines.join('\n'),
    );
    const left = async (run: string) => {
      const sel = `${LABELS.ownerRun}=${run}`;
      return [
        ...(await cluster.apps.listNamespacedDeployment({ namespace: NS, labelSelector: sel })).items,
        ...(await cluster.batch.listNamespacedJob({ namespace: NS, labelSelector: sel })).items,
        ...(await cluster.core.listNamespacedService({ namespace: NS, labelSelector: sel })).items,
        ...(await cluster.networking.listNamespacedNetworkPolicy({ namespace: NS, labelSelector: sel })).items,
        ...(await cluster.core.listNamespacedSecret({ namespace: NS, labelSelector: sel })).items,
        ...(await cluster.core.listNamespacedConfigMap({ namespace: NS, labelSelector: sel })).items,
        ...(await cluster.core.listNamespacedPersistentVolumeClaim({ namespace: NS, labelSelector: sel })).items,
      ].map((o) => o.metadata!.name!);
    };
    assert.deepEqual(await left(RUN), [], 'nothing of the cancelled run is left');
    assert.equal((await left(OTHER)).length, 7, "the other run's server objects stay");
    // A second cancel finds nothing more to remove, and says nothing of leftovers.
    lines.length = 0;
    assert.deepEqual(await deleteSelected(cluster, `${LABELS.ownerRun}=${RUN}`), []);
  });
});
