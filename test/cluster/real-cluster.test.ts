// The cluster code against a REAL Kubernetes cluster: `npm run test:cluster`. It lives outside the
// default test folders because it needs what this machine does not have. It runs only when
// KUBECONFIG names a kubeconfig file; otherwise every test is reported SKIPPED with the reason (never
// passed). A KUBECONFIG whose context does not answer is a failure, named.
//
//   KUBECONFIG=~/.kube/config           required: the cluster (current context, or K8S_IT_CONTEXT)
//   K8S_IT_NAMESPACE=rl-rollouts        namespace to use (default: the context's, else "default")
//   K8S_IT_IMAGE=busybox:1.36           image for the plain Job test (pulled by the cluster)
//   For the full rollout (skipped, naming what is missing, unless all are set):
//   K8S_IT_REGISTRY, K8S_IT_TASK_IMAGE (hello-file's image with the harness under /opt/harness-lab, pushed),
//   K8S_IT_PROXY_IMAGE (an image with `harness-lab` on PATH), K8S_IT_ENGINE_URL, K8S_IT_MODEL
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type * as k8s from '@kubernetes/client-node';
import { K8S_PERMISSIONS, K8sBackend, k8sDryRunManifests, teardownBatch } from '../../src/batch/backends/k8s/index.js';
import { BATCH_SCHEMA_VERSION, trainingSampling, type BatchManifest } from '../../src/batch/state.js';
import { assertPermissions, checkReachable, clusterError, forClientSerializer, loadCluster, type Cluster } from '../../src/cluster/kube.js';
import { LABELS } from '../../src/cluster/manifests.js';
import { BatchWatch } from '../../src/cluster/watch.js';

const env = process.env;
const kubeconfig = env.KUBECONFIG?.split(':')[0];
const notRun = !kubeconfig
  ? 'KUBECONFIG is not set, so there is no cluster to test against (set KUBECONFIG to a kubeconfig file and run `npm run test:cluster`)'
  : !existsSync(kubeconfig)
    ? `KUBECONFIG names ${kubeconfig}, which does not exist`
    : undefined;
if (notRun) process.stderr.write(`\nreal-cluster suite NOT RUN: ${notRun}\n\n`);

const EXAMPLE = join(__dirname, '..', '..', 'examples', 'tasks', 'hello-file');
const runId = `it${Date.now().toString(36)}`;

function manifest(ns: string, over: Partial<BatchManifest> = {}): BatchManifest {
  return {
    schema_version: BATCH_SCHEMA_VERSION,
    batch_id: runId,
    created_at: new Date().toISOString(),
    backend: 'k8s',
    harnesses: ['react'],
    group_size: 2,
    tasks: [{ name: 'hello-file', dir: EXAMPLE }],
    groups: [{ group_id: 'g0', task: 'hello-file', harness: 'react', rollout_ids: ['g0-r0', 'g0-r1'] }],
    sampling: trainingSampling(1),
    policy_version: null,
    timeout_sec: 300,
    on_timeout: 'discard',
    parallel: 2,
    engine_url: env.K8S_IT_ENGINE_URL ?? 'http://engine.invalid/v1',
    model: env.K8S_IT_MODEL ?? 'model',
    k8s: {
      context: env.K8S_IT_CONTEXT ?? null,
      namespace: ns,
      registry: env.K8S_IT_REGISTRY ?? null,
      queue_name: env.K8S_IT_QUEUE ?? null,
    },
    ...over,
  };
}

describe('real cluster', { skip: notRun ?? false, timeout: 900_000 }, () => {
  let cluster: Cluster;

  before(async () => {
    cluster = loadCluster({ kubeconfig: kubeconfig!, context: env.K8S_IT_CONTEXT ?? null, namespace: env.K8S_IT_NAMESPACE ?? null });
    await checkReachable(cluster);
  });
  after(async () => {
    if (cluster)
      await cluster.batch
        .deleteCollectionNamespacedJob({
          namespace: cluster.namespace,
          labelSelector: `${LABELS.batch}=${runId}`,
          propagationPolicy: 'Background',
        })
        .catch(() => {});
  });

  it('may do what a cluster batch needs in the namespace (SelfSubjectAccessReview)', async () => {
    await assertPermissions(cluster, K8S_PERMISSIONS);
  });

  it('the real API server accepts every manifest of a batch (server-side dry run)', async () => {
    const objs = await k8sDryRunManifests({
      manifest: manifest(cluster.namespace),
      taskImage: () => env.K8S_IT_TASK_IMAGE ?? 'harness-lab/task-hello-file:dry-run',
      proxy: { image: env.K8S_IT_PROXY_IMAGE ?? 'harness-lab/proxy:dry-run' },
    });
    for (const o of objs) {
      try {
        await cluster.objects.create(forClientSerializer(o), undefined, 'All');
      } catch (err) {
        throw clusterError(cluster, `server-side dry run of ${o.kind} ${o.metadata?.name}`, err);
      }
    }
  });

  it('runs a labelled Job, follows it with one watch, reads its log, deletes it with its pods', async () => {
    const name = `${runId}-plain`;
    const watch = new BatchWatch(cluster, `${LABELS.batch}=${runId}`);
    await watch.start();
    try {
      const job: k8s.V1Job = {
        apiVersion: 'batch/v1',
        kind: 'Job',
        metadata: { name, labels: { [LABELS.batch]: runId } },
        spec: {
          backoffLimit: 0,
          activeDeadlineSeconds: 300,
          ttlSecondsAfterFinished: 600,
          template: {
            metadata: { labels: { [LABELS.batch]: runId } },
            spec: {
              restartPolicy: 'Never',
              containers: [
                {
                  name: 'main',
                  image: env.K8S_IT_IMAGE ?? 'busybox:1.36',
                  command: ['sh', '-c', 'echo harness-lab-it'],
                  resources: { requests: { cpu: '100m', memory: '64Mi' }, limits: { cpu: '100m', memory: '64Mi' } },
                },
              ],
            },
          },
        },
      };
      await cluster.batch.createNamespacedJob({ namespace: cluster.namespace, body: job });
      const done = await new Promise<k8s.V1Job>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`Job ${name} did not finish within 5 minutes`)), 300_000);
        watch.jobs.on((_t, j) => {
          if (j.metadata?.name !== name) return;
          if ((j.status?.conditions ?? []).some((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True')) {
            clearTimeout(timer);
            resolve(j);
          }
        });
      });
      assert.ok(
        done.status?.conditions?.some((c) => c.type === 'Complete'),
        JSON.stringify(done.status),
      );
      const pod = watch.podsOfJob(name)[0]!;
      assert.match(await cluster.core.readNamespacedPodLog({ namespace: cluster.namespace, name: pod.metadata!.name! }), /harness-lab-it/);
      await cluster.batch.deleteNamespacedJob({ namespace: cluster.namespace, name, propagationPolicy: 'Background' });
      const deadline = Date.now() + 120_000;
      while (watch.podsOfJob(name).length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1000));
      assert.equal(watch.podsOfJob(name).length, 0, 'the pods went with their Job');
    } finally {
      watch.stop();
    }
  });

  const missing = ['K8S_IT_REGISTRY', 'K8S_IT_TASK_IMAGE', 'K8S_IT_PROXY_IMAGE', 'K8S_IT_ENGINE_URL', 'K8S_IT_MODEL'].filter(
    (k) => !env[k],
  );
  it(
    'one real rollout: in-cluster proxy, port-forward, Job, reward through the pod log',
    { skip: missing.length ? `needs ${missing.join(', ')}` : false },
    async () => {
      const m = manifest(cluster.namespace);
      const dir = mkdtempSync(join(tmpdir(), 'hl-k8s-it-'));
      const backend = await K8sBackend.open({
        manifest: m,
        batchDir: dir,
        kubeconfig: kubeconfig!,
        taskImage: () => env.K8S_IT_TASK_IMAGE!.replace(`${env.K8S_IT_REGISTRY}/`, ''),
        proxy: { image: env.K8S_IT_PROXY_IMAGE! },
      });
      try {
        const sessionId = `${runId}-g0-r0-0`;
        await backend.capture.createSession({ sessionId, metadata: { batch: runId }, sampling: m.sampling, maxModelCalls: 20 });
        const facts = await backend.run({
          batchDir: dir,
          manifest: m,
          rollout: {
            rollout_id: 'g0-r0',
            group_id: 'g0',
            member: 0,
            task: 'hello-file',
            harness: 'react',
            state: 'running',
            class: null,
            reward: null,
            rewards: {},
            trainable: false,
            session_id: sessionId,
            attempts: [],
            policy_version: null,
            queued_at: '',
            started_at: null,
            ended_at: null,
            duration_ms: null,
            error: null,
            backend_ref: null,
            n_calls: 0,
          },
          attempt: 0,
          sessionId,
          outDir: join(dir, 'runs', 'g0-r0', '0'),
          signal: new AbortController().signal,
          log: () => {},
        });
        assert.equal(facts.infraError, null, JSON.stringify(facts));
        assert.ok(facts.verifier, 'the verifier ran');
        assert.ok((await backend.capture.sessionFacts(sessionId)).nCalls > 0);
      } finally {
        await backend.cleanupBatch(runId);
        await teardownBatch(backend.cluster, runId);
        await backend.close();
      }
    },
  );
});
