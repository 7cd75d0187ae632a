// The API server double speaks what the real client expects, and the cluster module's preflight
// names what is wrong in Kubernetes terms: Status errors (404/409/422/403), list + watch with
// resourceVersion, bookmarks, 410 Gone after compaction, label selectors, the Job delete default
// (Orphan, with the real server's warning) vs Background, CRDs registered generically, Kueue-style
// suspend (no pods while suspended, deadline reset on admission), graceful pod deletion (Terminating,
// SIGTERM, SIGKILL after the grace period), and SelfSubjectAccessReview.
import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { K8sBackend, k8sBackendModule } from '../../src/batch/backends/k8s/index.js';
import { ClusterError, assertPermissions, checkReachable, clusterError, createOrKeep, loadCluster } from '../../src/cluster/kube.js';
import { ObjectWatch, JOBS } from '../../src/cluster/watch.js';
import type { KubeDouble } from '../k8s-double/index.js';
import { manifestFor, taskCopy, testCluster } from './k8s-fixtures.js';
import { waitFor } from './sandbox-fixtures.js';

const NS = 'double';

function job(name: string, extra: Partial<k8s.V1JobSpec> = {}, labels: Record<string, string> = {}): k8s.V1Job {
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name, labels },
    spec: {
      backoffLimit: 0,
      template: {
        spec: {
          restartPolicy: 'Never',
          containers: [{ name: 'main', image: 'harness-lab/base:bookworm', command: ['bash', '-c', 'echo started; sleep 1; echo done'] }],
        },
      },
      ...extra,
    },
  };
}

function status(err: unknown): { code: number; reason: string; message: string; details?: { name?: string; kind?: string } } {
  assert.ok(err instanceof k8s.ApiException, `not an ApiException: ${String(err)}`);
  return JSON.parse(err.body as string) as never;
}

describe('Kubernetes API server double with the real client', { timeout: 300_000 }, () => {
  let cluster: KubeDouble;
  let kc: k8s.KubeConfig;
  let batch: k8s.BatchV1Api;
  let core: k8s.CoreV1Api;

  before(async () => {
    cluster = await testCluster();
    kc = new k8s.KubeConfig();
    kc.loadFromFile(cluster.kubeconfig);
    batch = kc.makeApiClient(k8s.BatchV1Api);
    core = kc.makeApiClient(k8s.CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: NS } } });
  });
  after(async () => cluster?.close());

  it('answers 404, 409 AlreadyExists, 409 Conflict and 422 Invalid as Status objects', async () => {
    const nf = await batch.readNamespacedJob({ namespace: NS, name: 'nope' }).catch((e: unknown) => e);
    assert.deepEqual(
      { code: status(nf).code, reason: status(nf).reason, message: status(nf).message },
      { code: 404, reason: 'NotFound', message: 'jobs.batch "nope" not found' },
    );
    await batch.createNamespacedJob({ namespace: NS, body: job('dup') });
    const dup = await batch.createNamespacedJob({ namespace: NS, body: job('dup') }).catch((e: unknown) => e);
    assert.equal(status(dup).reason, 'AlreadyExists');
    assert.equal(status(dup).code, 409);
    const cur = await batch.readNamespacedJob({ namespace: NS, name: 'dup' });
    const stale = { ...cur, metadata: { ...cur.metadata, resourceVersion: '1' } };
    const conflict = await batch.replaceNamespacedJob({ namespace: NS, name: 'dup', body: stale }).catch((e: unknown) => e);
    assert.equal(status(conflict).reason, 'Conflict');
    const bad = await batch.createNamespacedJob({ namespace: NS, body: job('Bad_Name') }).catch((e: unknown) => e);
    assert.equal(status(bad).code, 422);
    assert.match(
      status(bad).message,
      /^Job\.batch "Bad_Name" is invalid: metadata\.name: Invalid value: "Bad_Name": a lowercase RFC 1123 label/,
    );
    const noNs = await batch.createNamespacedJob({ namespace: 'missing', body: job('x') }).catch((e: unknown) => e);
    assert.equal(status(noNs).message, 'namespaces "missing" not found');
    const restart = await batch
      .createNamespacedJob({
        namespace: NS,
        body: { ...job('always'), spec: { template: { spec: { restartPolicy: 'Always', containers: [{ name: 'a', image: 'b' }] } } } },
      })
      .catch((e: unknown) => e);
    assert.match(status(restart).message, /spec\.template\.spec\.restartPolicy: Unsupported value: "Always"/);
    await batch.deleteNamespacedJob({ namespace: NS, name: 'dup', propagationPolicy: 'Background' });
  });

  it('lists with a resourceVersion and label selectors; watches from it with bookmarks; 410 Gone after compaction', async () => {
    await batch.createNamespacedJob({ namespace: NS, body: job('sel-a', {}, { team: 'a', tier: 'x' }) });
    await batch.createNamespacedJob({ namespace: NS, body: job('sel-b', {}, { team: 'b' }) });
    const names = async (labelSelector: string) =>
      (await batch.listNamespacedJob({ namespace: NS, labelSelector })).items.map((j) => j.metadata!.name).sort();
    assert.deepEqual(await names('team=a'), ['sel-a']);
    assert.deepEqual(await names('team!=a,team'), ['sel-b']);
    assert.deepEqual(await names('team in (a,b)'), ['sel-a', 'sel-b']);
    assert.deepEqual(await names('team notin (a),team'), ['sel-b']);
    assert.deepEqual(await names('!tier,team'), ['sel-b']);
    const list = await batch.listNamespacedJob({ namespace: NS, labelSelector: 'team' });
    const rv = list.metadata!.resourceVersion!;
    const events: string[] = [];
    const w = new k8s.Watch(kc);
    const ctl = await w.watch(
      `/apis/batch/v1/namespaces/${NS}/jobs`,
      { labelSelector: 'team=a', allowWatchBookmarks: true, resourceVersion: rv },
      (type, obj) => events.push(`${type}:${(obj as k8s.V1Job).metadata?.name ?? ''}`),
      () => {},
    );
    await batch.patchNamespacedJob(
      { namespace: NS, name: 'sel-a', body: { metadata: { annotations: { touched: 'yes' } } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    await waitFor(
      'a MODIFIED and a BOOKMARK',
      async () => (events.includes('MODIFIED:sel-a') && events.some((e) => e.startsWith('BOOKMARK')) ? true : undefined),
      20_000,
    );
    assert.ok(!events.some((e) => e.endsWith(':sel-b')), 'the selector filters the watch');
    ctl.abort();
    cluster.api.store.compact();
    const done = await new Promise<{ type: string; code?: number; err: unknown }>((resolve) => {
      let seen: { type: string; code?: number } = { type: '' };
      void w.watch(
        `/apis/batch/v1/namespaces/${NS}/jobs`,
        { resourceVersion: rv },
        (type, obj) => (seen = { type, code: (obj as { code?: number }).code }),
        (err) => resolve({ ...seen, err }),
      );
    });
    assert.deepEqual({ type: done.type, code: done.code }, { type: 'ERROR', code: 410 });
  });

  it('the lab watch resumes after a dropped connection and re-lists after 410', async () => {
    const cl = loadCluster({ kubeconfig: cluster.kubeconfig, namespace: NS });
    const watch = new ObjectWatch(cl, JOBS, 'team');
    const seen: string[] = [];
    watch.on((type, j) => seen.push(`${type}:${j.metadata?.name}`));
    await watch.start();
    try {
      assert.ok(seen.includes('ADDED:sel-a'));
      cluster.api.dropWatches();
      await batch.createNamespacedJob({ namespace: NS, body: job('sel-c', {}, { team: 'c' }) });
      await waitFor('sel-c after a plain reconnect', async () => (seen.includes('ADDED:sel-c') ? true : undefined), 20_000);
      assert.equal(watch.stats.lists, 1, 'a dropped stream resumes without re-listing');
      cluster.api.store.compact();
      cluster.api.dropWatches();
      await batch.deleteNamespacedJob({ namespace: NS, name: 'sel-c', propagationPolicy: 'Background' });
      await waitFor('the delete seen through a re-list', async () => (seen.includes('DELETED:sel-c') ? true : undefined), 20_000);
      assert.ok(watch.stats.expired >= 1 && watch.stats.lists >= 2, JSON.stringify(watch.stats));
    } finally {
      watch.stop();
    }
  });

  it('deleting a Job without a propagationPolicy orphans its pods (with the warning); Background removes them', async () => {
    await batch.createNamespacedJob({
      namespace: NS,
      body: job('orph', {
        template: {
          spec: { restartPolicy: 'Never', containers: [{ name: 'm', image: 'harness-lab/base:bookworm', command: ['sleep', '600'] }] },
        },
      }),
    });
    const podOf = async (name: string) => (await core.listNamespacedPod({ namespace: NS, labelSelector: `job-name=${name}` })).items;
    await waitFor('a pod', async () => ((await podOf('orph')).length ? true : undefined), 30_000);
    const res = await fetch(`${cluster.url}/apis/batch/v1/namespaces/${NS}/jobs/orph`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${cluster.api.token}` },
    });
    assert.equal(res.status, 200);
    assert.match(
      res.headers.get('warning') ?? '',
      /child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them/,
    );
    await new Promise((r) => setTimeout(r, 300));
    const orphans = await podOf('orph');
    assert.equal(orphans.length, 1, 'the pod survives its Job');
    assert.equal(orphans[0]!.metadata?.ownerReferences, undefined);
    await core.deleteNamespacedPod({ namespace: NS, name: orphans[0]!.metadata!.name! });
    await batch.createNamespacedJob({
      namespace: NS,
      body: job('bg', {
        template: {
          spec: { restartPolicy: 'Never', containers: [{ name: 'm', image: 'harness-lab/base:bookworm', command: ['sleep', '600'] }] },
        },
      }),
    });
    await waitFor('a pod', async () => ((await podOf('bg')).length ? true : undefined), 30_000);
    await batch.deleteNamespacedJob({ namespace: NS, name: 'bg', propagationPolicy: 'Background' });
    await waitFor('the pod deleted with its Job', async () => ((await podOf('bg')).length === 0 ? true : undefined), 30_000);
  });

  it('registers CRDs generically: a RayJob and a TrainJob are created, listed and watched', async () => {
    const ext = kc.makeApiClient(k8s.ApiextensionsV1Api);
    const crd = (group: string, version: string, kind: string, plural: string): k8s.V1CustomResourceDefinition => ({
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: `${plural}.${group}` },
      spec: {
        group,
        scope: 'Namespaced',
        names: { kind, plural, singular: kind.toLowerCase() },
        versions: [
          {
            name: version,
            served: true,
            storage: true,
            schema: { openAPIV3Schema: { type: 'object', x_kubernetes_preserve_unknown_fields: true } },
            subresources: { status: {} },
          },
        ],
      },
    });
    await ext.createCustomResourceDefinition({ body: crd('ray.io', 'v1', 'RayJob', 'rayjobs') });
    await ext.createCustomResourceDefinition({ body: crd('trainer.kubeflow.org', 'v1alpha1', 'TrainJob', 'trainjobs') });
    await waitFor(
      'Established',
      async () =>
        (await ext.readCustomResourceDefinition({ name: 'rayjobs.ray.io' })).status?.conditions?.some(
          (c) => c.type === 'Established' && c.status === 'True',
        )
          ? true
          : undefined,
      10_000,
    );
    const custom = kc.makeApiClient(k8s.CustomObjectsApi);
    const events: string[] = [];
    const w = new k8s.Watch(kc);
    const ctl = await w.watch(
      `/apis/ray.io/v1/namespaces/${NS}/rayjobs`,
      {},
      (type, obj) => events.push(`${type}:${(obj as { metadata: { name: string } }).metadata.name}`),
      () => {},
    );
    await custom.createNamespacedCustomObject({
      group: 'ray.io',
      version: 'v1',
      namespace: NS,
      plural: 'rayjobs',
      body: {
        apiVersion: 'ray.io/v1',
        kind: 'RayJob',
        metadata: { name: 'verl-grpo' },
        spec: { entrypoint: 'python3 -m verl.trainer.main_ppo' },
      },
    });
    await custom.createNamespacedCustomObject({
      group: 'trainer.kubeflow.org',
      version: 'v1alpha1',
      namespace: NS,
      plural: 'trainjobs',
      body: {
        apiVersion: 'trainer.kubeflow.org/v1alpha1',
        kind: 'TrainJob',
        metadata: { name: 'trl-grpo' },
        spec: { runtimeRef: { name: 'torch-distributed' } },
      },
    });
    await waitFor('the RayJob watched', async () => (events.includes('ADDED:verl-grpo') ? true : undefined), 10_000);
    ctl.abort();
    const tj = (await custom.listNamespacedCustomObject({
      group: 'trainer.kubeflow.org',
      version: 'v1alpha1',
      namespace: NS,
      plural: 'trainjobs',
    })) as { items: { kind: string; metadata: { name: string } }[] };
    assert.deepEqual(
      tj.items.map((i) => `${i.kind}/${i.metadata.name}`),
      ['TrainJob/trl-grpo'],
    );
    const unknown = await custom
      .listNamespacedCustomObject({ group: 'volcano.sh', version: 'v1', namespace: NS, plural: 'jobs' })
      .catch((e: unknown) => e);
    assert.equal(status(unknown).code, 404);
  });

  it('a suspended Job (Kueue) gets no pod until admitted; its deadline starts at admission', async () => {
    await batch.createNamespacedJob({ namespace: NS, body: job('queued', { suspend: true, activeDeadlineSeconds: 30 }) });
    await waitFor(
      'Suspended',
      async () =>
        (await batch.readNamespacedJob({ namespace: NS, name: 'queued' })).status?.conditions?.some(
          (c) => c.type === 'Suspended' && c.status === 'True',
        )
          ? true
          : undefined,
      10_000,
    );
    await new Promise((r) => setTimeout(r, 500));
    assert.equal((await core.listNamespacedPod({ namespace: NS, labelSelector: 'job-name=queued' })).items.length, 0);
    assert.equal((await batch.readNamespacedJob({ namespace: NS, name: 'queued' })).status?.startTime, undefined);
    await batch.patchNamespacedJob(
      { namespace: NS, name: 'queued', body: { spec: { suspend: false } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    const done = await waitFor(
      'Complete',
      async () => {
        const j = await batch.readNamespacedJob({ namespace: NS, name: 'queued' });
        return j.status?.conditions?.some((c) => c.type === 'Complete') ? j : undefined;
      },
      60_000,
    );
    assert.ok(done.status?.startTime, 'startTime set at admission');
    assert.ok(done.status?.conditions?.some((c) => c.type === 'Suspended' && c.status === 'False' && c.reason === 'JobResumed'));
    const pod = (await core.listNamespacedPod({ namespace: NS, labelSelector: 'job-name=queued' })).items[0]!;
    assert.equal(await core.readNamespacedPodLog({ namespace: NS, name: pod.metadata!.name! }), 'started\ndone\n');
  });

  it('deleting a running pod is graceful: Terminating, SIGTERM, SIGKILL after the grace period, then gone; grace 0 is at once', async () => {
    const out = mkdtempSync(join(tmpdir(), 'hl-double-grace-'));
    chmodSync(out, 0o777);
    const pod = (name: string, script: string, grace?: number): k8s.V1Pod => ({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name },
      spec: {
        restartPolicy: 'Never',
        ...(grace !== undefined ? { terminationGracePeriodSeconds: grace } : {}),
        volumes: [{ name: 'out', hostPath: { path: out } }],
        containers: [
          {
            name: 'm',
            image: 'harness-lab/base:bookworm',
            command: ['bash', '-c', script],
            volumeMounts: [{ name: 'out', mountPath: '/out' }],
          },
        ],
      },
    });
    const up = (file: string) => waitFor(`${file} up`, async () => (existsSync(join(out, file)) ? true : undefined), 60_000);
    const gone = (name: string) =>
      waitFor(
        `${name} gone`,
        async () =>
          await core.readNamespacedPod({ namespace: NS, name }).then(
            () => undefined,
            () => true,
          ),
        60_000,
      );
    const loop = 'while true; do sleep 0.2; done';
    // A server that cleans up on SIGTERM: it has the time to, and the pod stays until it is done.
    await core.createNamespacedPod({
      namespace: NS,
      body: pod('graceful', `trap 'sleep 1; echo bye > /out/term; exit 0' TERM; touch /out/up1; ${loop}`, 20),
    });
    await up('up1');
    const t0 = Date.now();
    const deleted = await core.deleteNamespacedPod({ namespace: NS, name: 'graceful' });
    assert.ok(deleted.metadata?.deletionTimestamp, 'the answer is the pod, Terminating');
    assert.equal(deleted.metadata?.deletionGracePeriodSeconds, 20);
    const terminating = await core.readNamespacedPod({ namespace: NS, name: 'graceful' });
    assert.ok(terminating.metadata?.deletionTimestamp, 'still there while its container stops');
    await gone('graceful');
    assert.equal(readFileSync(join(out, 'term'), 'utf8'), 'bye\n', 'its SIGTERM handler ran to its end');
    assert.ok(Date.now() - t0 < 15_000, 'gone when its process exited, not at the end of the grace period');
    // A process that ignores SIGTERM is killed when the grace period (here the request's 2 s) ends.
    await core.createNamespacedPod({ namespace: NS, body: pod('stubborn', `trap '' TERM; touch /out/up2; ${loop}`) });
    await up('up2');
    const t1 = Date.now();
    await core.deleteNamespacedPod({ namespace: NS, name: 'stubborn', gracePeriodSeconds: 2 });
    await gone('stubborn');
    assert.ok(Date.now() - t1 >= 1_900, 'it had its grace period');
    // Grace 0: at once.
    await core.createNamespacedPod({ namespace: NS, body: pod('now', `touch /out/up3; ${loop}`) });
    await up('up3');
    await core.deleteNamespacedPod({ namespace: NS, name: 'now', gracePeriodSeconds: 0 });
    await assert.rejects(core.readNamespacedPod({ namespace: NS, name: 'now' }), (err: unknown) => status(err).code === 404);
    rmSync(out, { recursive: true, force: true });
  });

  it('pods/log follows a running container to its end', async () => {
    await batch.createNamespacedJob({ namespace: NS, body: job('follow') });
    const podName = await waitFor(
      'running',
      async () =>
        (await core.listNamespacedPod({ namespace: NS, labelSelector: 'job-name=follow' })).items.find((p) => p.status?.phase === 'Running')
          ?.metadata?.name,
      30_000,
    );
    const res = await fetch(`${cluster.url}/api/v1/namespaces/${NS}/pods/${podName}/log?follow=true`, {
      headers: { authorization: `Bearer ${cluster.api.token}` },
    });
    assert.equal(await res.text(), 'started\ndone\n');
  });

  it("batch cancel without a lab: the k8s module deletes the batch's Jobs by label, from $KUBECONFIG", async () => {
    const saved = process.env.KUBECONFIG;
    process.env.KUBECONFIG = cluster.kubeconfig;
    try {
      await batch.createNamespacedJob({ namespace: NS, body: job('left-behind', {}, { 'harness-lab/batch': 'b-cancel' }) });
      await batch.createNamespacedJob({ namespace: NS, body: job('other-batch', {}, { 'harness-lab/batch': 'b-other' }) });
      const m = manifestFor({
        batchId: 'b-cancel',
        namespace: NS,
        tasks: [taskCopy('hello-file', {})],
        harness: 'react',
        engineUrl: 'http://127.0.0.1:9/v1',
        model: 'm',
        timeoutSec: 60,
      });
      const lines: string[] = [];
      assert.deepEqual(await k8sBackendModule.cleanup(m, (l) => lines.push(l)), ['left-behind']);
      assert.match(lines.join('\n'), /deleted 1 Job\(s\) of batch b-cancel in double \(propagationPolicy Background\): left-behind/);
      assert.deepEqual(
        (await batch.listNamespacedJob({ namespace: NS, labelSelector: 'harness-lab/batch' })).items.map((j) => j.metadata?.name),
        ['other-batch'],
      );
      await assert.rejects(
        k8sBackendModule.cleanup({ ...m, k8s: { ...m.k8s!, context: 'unreachable' } }, () => {}),
        /kube context "unreachable" is unreachable/,
      );
    } finally {
      if (saved === undefined) delete process.env.KUBECONFIG;
      else process.env.KUBECONFIG = saved;
    }
  });

  it('names an unreachable context, an unknown context, and a namespace where Jobs may not be created (403)', async () => {
    const unreachable = loadCluster({ kubeconfig: cluster.kubeconfig, context: 'unreachable' });
    await assert.rejects(checkReachable(unreachable), (err: Error) => {
      assert.ok(err instanceof ClusterError);
      assert.match(
        err.message,
        /^kube context "unreachable" is unreachable: the API server http:\/\/127\.0\.0\.1:1 did not answer \(.*ECONNREFUSED.*\) while asking for the server version; check it with `kubectl --context unreachable cluster-info`$/,
      );
      return true;
    });
    assert.throws(
      () => loadCluster({ kubeconfig: cluster.kubeconfig, context: 'prod' }),
      /kube context "prod" is not in the kubeconfig .*; its contexts: double, unreachable/,
    );

    await core.createNamespace({ body: { metadata: { name: 'locked' } } });
    cluster.api.deny({ namespace: 'locked', verb: 'create', resource: 'jobs', group: 'batch' });
    const locked = loadCluster({ kubeconfig: cluster.kubeconfig, namespace: 'locked' });
    await assert.rejects(
      assertPermissions(locked, [{ verb: 'create', group: 'batch', resource: 'jobs' }]),
      /kube context "double": you may not create jobs\.batch .* in namespace "locked" \(SelfSubjectAccessReview denied it\)/,
    );
    // The API server's own 403, as a create would get it, keeps verb, resource and namespace.
    await assert.rejects(createOrKeep(locked, { ...job('denied'), metadata: { name: 'denied', namespace: 'locked' } }), (err: Error) => {
      assert.match(
        err.message,
        /^creating Job locked\/denied: the API server at http:\/\/127\.0\.0\.1:\d+ answered 403 Forbidden: jobs\.batch is forbidden: User "harness-lab-tester" cannot create resource "jobs" in API group "batch" in the namespace "locked"/,
      );
      return true;
    });
    // The backend refuses before creating anything.
    const before = cluster.api.received.filter((r) => r.method === 'POST' && r.path.startsWith('/api/v1/namespaces/locked')).length;
    const m = manifestFor({
      batchId: 'b-locked',
      namespace: 'locked',
      tasks: [taskCopy('hello-file', {})],
      harness: 'react',
      engineUrl: 'http://127.0.0.1:9/v1',
      model: 'm',
      timeoutSec: 60,
    });
    await assert.rejects(
      K8sBackend.open({
        manifest: m,
        batchDir: '/nonexistent',
        kubeconfig: cluster.kubeconfig,
        taskImage: () => 'x',
        proxy: { image: 'x' },
      }),
      /you may not create jobs\.batch/,
    );
    assert.equal(cluster.api.received.filter((r) => r.method === 'POST' && r.path.startsWith('/api/v1/namespaces/locked')).length, before);
    // A harness the registry does not know fails before anything is created, naming it.
    const m3 = manifestFor({
      batchId: 'b-badharness',
      namespace: NS,
      tasks: [taskCopy('hello-file', {})],
      harness: 'no-such-harness',
      engineUrl: 'http://127.0.0.1:9/v1',
      model: 'm',
      timeoutSec: 60,
    });
    const posts = cluster.api.received.filter((r) => r.method === 'POST' && !r.path.includes('selfsubjectaccessreviews')).length;
    await assert.rejects(
      K8sBackend.open({
        manifest: m3,
        batchDir: '/nonexistent',
        kubeconfig: cluster.kubeconfig,
        taskImage: () => 'x',
        proxy: { image: 'x' },
      }),
      /unknown harness 'no-such-harness'/,
    );
    assert.equal(
      cluster.api.received.filter((r) => r.method === 'POST' && !r.path.includes('selfsubjectaccessreviews')).length,
      posts,
      'nothing created',
    );
    const m2 = { ...m, k8s: { ...m.k8s!, context: 'unreachable' } };
    await assert.rejects(
      K8sBackend.open({
        manifest: m2,
        batchDir: '/nonexistent',
        kubeconfig: cluster.kubeconfig,
        taskImage: () => 'x',
        proxy: { image: 'x' },
      }),
      /kube context "unreachable" is unreachable/,
    );
    // 401: a wrong token is named as the context's credentials.
    const err401 = clusterError(
      { context: 'double', server: cluster.url },
      'listing Jobs',
      new k8s.ApiException(
        401,
        'Unauthorized',
        JSON.stringify({ kind: 'Status', code: 401, reason: 'Unauthorized', message: 'Unauthorized' }),
        {},
      ),
    );
    assert.match(err401.message, /credentials of kube context "double" were rejected/);
  });
});
