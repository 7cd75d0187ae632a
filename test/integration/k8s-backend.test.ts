// The k8s backend end to end against the API server double with the real @kubernetes/client-node:
// the in-cluster proxy (Deployment + Service + Secret + NetworkPolicy) reached through a client-library
// port-forward, Jobs with the fields (checked on what the server received), pods run as real
// Docker containers with --network none, and the facts of a completed, an OOMKilled, an evicted, a
// deadline-exceeded (across a watch that had to re-list after 410 Gone) and a cancelled rollout.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { K8sBackend, k8sDryRunManifests } from '../../src/batch/backends/k8s/index.js';
import type { BatchManifest } from '../../src/batch/state.js';
import { loadSessionFile } from '../../src/capture/store.js';
import { jobName } from '../../src/cluster/manifests.js';
import type { KubeDouble } from '../k8s-double/index.js';
import {
  attemptFor,
  backendOptions,
  engineFor,
  manifestFor,
  taskCopy,
  taskImages,
  testCluster,
  type EngineInNamespace,
} from './k8s-fixtures.js';
import { dockerReady, waitFor } from './sandbox-fixtures.js';

const NS = 'rollouts';

const POLICY = {
  name: 'k8s-scenarios',
  rules: [
    {
      when: { last_message: 'Create a file named `hello.txt`' },
      then: { call: { tool: '^bash$', input: "printf 'Hello, world!' > hello.txt" } },
    },
    { when: { last_message: 'SLEEP_FOREVER' }, then: { call: { tool: '^bash$', input: 'sleep 600' } } },
    { when: { last_message: 'EAT_MEMORY' }, then: { call: { tool: '^bash$', input: 'head -c 3000m /dev/zero | tail' } } },
    // Steps that wait for the test (a file it creates in the container), so "before the attempt ends" is not a race.
    {
      when: { last_message: 'STEP_BY_STEP' },
      then: { call: { tool: '^bash$', input: 'until [ -f /tmp/hl-go-1 ]; do sleep 0.2; done; echo first-step-done' } },
    },
    {
      when: { last_message: 'first-step-done' },
      then: { call: { tool: '^bash$', input: 'until [ -f /tmp/hl-go-2 ]; do sleep 0.2; done; echo second-step-done' } },
    },
    { when: { last_message: 'second-step-done' }, then: { call: { tool: '^bash$', input: "printf 'Hello, world!' > hello.txt" } } },
  ],
  fallback: { say: 'Done.' },
};

function scenarioTask(name: string, instruction: string, toml: (t: string) => string = (t) => t): string {
  const dir = taskCopy('hello-file', { toml: (t) => toml(t.replace('name = "harness-lab/hello-file"', `name = "harness-lab/${name}"`)) });
  writeFileSync(join(dir, 'instruction.md'), `${instruction}\n`);
  return dir;
}

describe('k8s backend against the API server double', { timeout: 600_000 }, () => {
  let cluster: KubeDouble;
  let engine: EngineInNamespace;
  let images: Map<string, string>;
  let core: k8s.CoreV1Api;
  const tasks = {
    hello: taskCopy('hello-file', {}),
    sleeper: scenarioTask('sleeper', 'SLEEP_FOREVER: wait.'),
    hog: scenarioTask('hog', 'EAT_MEMORY: allocate.', (t) => t.replace('memory_mb = 2048', 'memory_mb = 160')),
    stuck: scenarioTask('stuck', 'SLEEP_FOREVER: wait.', (t) => t.replace('timeout_sec = 60.0', 'timeout_sec = 1.0')),
    stepper: scenarioTask('stepper', 'STEP_BY_STEP: create hello.txt.'),
  };
  let batchA: { m: BatchManifest; dir: string; backend: K8sBackend };
  const policyFile = join(mkdtempSync(join(tmpdir(), 'hl-k8s-policy-')), 'policy.json');

  before(async () => {
    writeFileSync(policyFile, JSON.stringify(POLICY));
    cluster = await testCluster();
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(cluster.kubeconfig);
    core = kc.makeApiClient(k8s.CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: NS } } });
    engine = await engineFor(cluster, NS, policyFile);
    images = await taskImages(Object.values(tasks));
    const m = manifestFor({
      batchId: 'b-main',
      namespace: NS,
      tasks: [tasks.hello, tasks.sleeper, tasks.hog, tasks.stepper],
      harness: 'react',
      engineUrl: `${engine.url}/v1`,
      model: engine.engine.model,
      timeoutSec: 120,
    });
    const dir = mkdtempSync(join(tmpdir(), 'hl-k8s-batch-'));
    batchA = { m, dir, backend: await K8sBackend.open(await backendOptions(cluster, m, dir, images)) };
  });

  after(async () => {
    await batchA?.backend.close();
    await engine?.engine.close();
    await cluster?.close();
  });

  it('runs the capture proxy in the cluster and reaches it through a port-forward', async () => {
    const received = (kind: string) =>
      cluster.api.requests('POST', new RegExp(`/namespaces/${NS}/${kind}$`)).map((r) => r.body as { metadata: { name: string } });
    assert.deepEqual(
      received('deployments').map((b) => b.metadata.name),
      ['hl-proxy-b-main'],
    );
    assert.deepEqual(
      received('services').map((b) => b.metadata.name),
      ['hl-proxy-b-main'],
    );
    assert.deepEqual(
      received('secrets').map((b) => b.metadata.name),
      ['hl-proxy-b-main'],
    );
    const np = received('networkpolicies')[0] as unknown as { spec: { podSelector: unknown; egress: { ports: { port: number }[] }[] } };
    assert.deepEqual(np.spec.podSelector, { matchLabels: { 'harness-lab/batch': 'b-main', 'harness-lab/role': 'rollout' } });
    assert.equal(np.spec.egress[0]!.ports[0]!.port, 8100);
    const dep = received('deployments')[0] as unknown as { spec: { template: { spec: { containers: { env: unknown[] }[] } } } };
    assert.deepEqual(dep.spec.template.spec.containers[0]!.env, [
      { name: 'HOME', value: '/tmp' },
      { name: 'HARNESS_LAB_ADMIN_KEY', valueFrom: { secretKeyRef: { name: 'hl-proxy-b-main', key: 'admin-key' } } },
    ]);
    // The port-forward went through the WebSocket subresource and reached the proxy's /health.
    assert.ok(cluster.api.received.some((r) => /\/pods\/hl-proxy-b-main-[a-z0-9]+\/portforward$/.test(r.path) && r.query.ports === '8100'));
    const health = (await (await fetch(`${batchA.backend.proxyUrl}/health`)).json()) as {
      status: string;
      admin_key: boolean;
      upstream: string;
    };
    assert.equal(health.status, 'ok');
    assert.equal(health.admin_key, true);
    assert.equal(health.upstream, engine.url, 'the proxy in the cluster forwards to the engine the batch names');
  });

  it('completes a rollout: Job fields as received, a real container, reward through the pod log, calls captured', async () => {
    const { m, dir, backend } = batchA;
    const a = attemptFor(dir, m, 'g0-r0');
    await backend.capture.createSession({
      sessionId: a.sessionId,
      metadata: { batch: m.batch_id, group: 'g0', rollout: 'g0-r0' },
      sampling: m.sampling,
      maxModelCalls: 20,
    });
    const facts = await backend.run(a);
    assert.equal(facts.infraError, null, JSON.stringify(facts));
    assert.equal(facts.cancelled, false);
    assert.equal(facts.agent.exitCode, 0);
    assert.equal(facts.agent.timedOut, false);
    assert.equal(facts.verifier?.exitCode, 0);
    assert.deepEqual(facts.reward, { value: 1, scores: {} });
    const name = jobName(m.batch_id, 'g0-r0', 0);
    assert.equal(facts.backendRef, name);

    const posted = cluster.api
      .requests('POST', new RegExp(`/apis/batch/v1/namespaces/${NS}/jobs$`))
      .map((r) => r.body as k8s.V1Job)
      .find((j) => j.metadata?.name === name)!;
    assert.ok(posted, 'the Job was POSTed');
    const spec = posted.spec!;
    assert.equal(spec.backoffLimit, 0);
    assert.equal(spec.activeDeadlineSeconds, 120 + 60 + 60);
    assert.equal(spec.ttlSecondsAfterFinished, 3600);
    assert.equal(spec.suspend, undefined, 'no queue: not suspended');
    assert.deepEqual(spec.podFailurePolicy?.rules?.[0], {
      action: 'Ignore',
      onPodConditions: [{ type: 'DisruptionTarget', status: 'True' }],
    });
    assert.equal(spec.template.spec?.restartPolicy, 'Never');
    const c = spec.template.spec!.containers[0]!;
    assert.deepEqual(c.resources?.requests, { cpu: '1', memory: '2048Mi' });
    assert.deepEqual(c.resources?.limits, c.resources?.requests);
    assert.equal(c.image, images.get('hello-file'));
    for (const [k, v] of Object.entries({
      'harness-lab/batch': 'b-main',
      'harness-lab/group': 'g0',
      'harness-lab/rollout': 'g0-r0',
      'harness-lab/task': 'hello-file',
      'harness-lab/harness': 'react',
    })) {
      assert.equal(posted.metadata?.labels?.[k], v, k);
      assert.equal(spec.template.metadata?.labels?.[k], v, `template ${k}`);
    }
    // The pod ran as a real Docker container, on no network but its own loopback.
    const pod = (await core.listNamespacedPod({ namespace: NS, labelSelector: `job-name=${name}` })).items[0]!;
    const id = pod.status!.containerStatuses![0]!.containerID!.replace('docker://', '');
    const info = await (await dockerReady()).getContainer(id).inspect();
    assert.equal(info.Config.Image, images.get('hello-file'));
    assert.match(String(info.HostConfig.NetworkMode), /^container:/);
    assert.equal(info.HostConfig.Memory, 2048 * 1024 * 1024);
    assert.equal(info.HostConfig.NanoCpus, 1e9);
    assert.equal(info.Config.Labels['k8s.label/harness-lab/rollout'], 'g0-r0');
    const netns = await (await dockerReady()).getContainer(String(info.HostConfig.NetworkMode).slice('container:'.length)).inspect();
    assert.equal(netns.HostConfig.NetworkMode, 'none');
    // The verifier's output and the pod log were saved; the capture saw the harness's calls.
    assert.match(readFileSync(join(a.outDir, 'verifier', 'test-stdout.txt'), 'utf8'), /hello.txt is correct/);
    const sf = await backend.capture.sessionFacts(a.sessionId);
    assert.ok(sf.nCalls >= 2, `calls: ${sf.nCalls}`);
    const mirrored = readFileSync(join(dir, 'capture', 'sessions', `${a.sessionId}.jsonl`), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string });
    assert.equal(mirrored[0]!.type, 'session');
    assert.equal(mirrored.filter((l) => l.type === 'call').length, sf.nCalls);
    // The capture store reads the mirror like any local session (exports and the viewer see one format).
    const loaded = loadSessionFile(join(dir, 'capture', 'sessions', `${a.sessionId}.jsonl`))!;
    assert.equal(loaded.info.session_id, a.sessionId);
    assert.equal(loaded.calls.length, sf.nCalls);
    assert.equal(loaded.skipped, 0);
    assert.ok(
      loaded.calls.every((c) => c.prompt_token_ids?.length),
      'token ids came through',
    );
  });

  const adminKeyOf = async (secret: string) =>
    Buffer.from((await core.readNamespacedSecret({ namespace: NS, name: secret })).data!['admin-key']!, 'base64').toString('utf8');

  it('follows a running rollout: calls in <batch>/capture before the attempt ends; a killed port-forward loses and duplicates nothing', async () => {
    const { m, dir, backend } = batchA;
    const a = attemptFor(dir, m, 'g3-r0');
    await backend.capture.createSession({
      sessionId: a.sessionId,
      metadata: { batch: m.batch_id, group: 'g3', rollout: 'g3-r0' },
      sampling: m.sampling,
      maxModelCalls: 20,
    });
    let ended = false;
    const running = backend.run(a).then((f) => ((ended = true), f));
    const file = join(dir, 'capture', 'sessions', `${a.sessionId}.jsonl`);
    const mirrored = () => (existsSync(file) ? (loadSessionFile(file)?.calls ?? []) : []);
    const docker = await dockerReady();
    const release = async (flag: string) => {
      const [c] = await docker.listContainers({
        filters: JSON.stringify({
          label: ['k8s.label/harness-lab/rollout=g3-r0', 'io.kubernetes.container.name=rollout'],
          status: ['running'],
        }),
      });
      assert.ok(c, 'the rollout container runs');
      const exec = await docker.getContainer(c.Id).exec({ Cmd: ['touch', flag], User: '0' });
      await exec.start({ hijack: false, stdin: false });
    };
    // The harness waits in its first tool call: the call that asked for it is already on disk.
    await waitFor('the first call mirrored', async () => (mirrored().length >= 1 ? true : undefined), 180_000);
    assert.equal(ended, false, 'mirrored while the attempt runs');
    assert.equal(loadSessionFile(file)!.info.metadata.rollout, 'g3-r0');
    // Kill the port-forward: the API server cuts every stream, and the lab's listener is closed too.
    const before = backend.portForward.url;
    cluster.api.dropPortForwards();
    await backend.portForward.close();
    await release('/tmp/hl-go-1');
    await waitFor('the second call mirrored after the drop', async () => (mirrored().length >= 2 ? true : undefined), 120_000);
    assert.equal(ended, false, 'still running: the harness waits in its second tool call');
    assert.notEqual(backend.portForward.url, before, 'the port-forward was made again');
    // Once more, the streams only (the listener stays), then let the rollout finish.
    cluster.api.dropPortForwards();
    await release('/tmp/hl-go-2');
    const facts = await running;
    assert.equal(facts.infraError, null, JSON.stringify(facts));
    assert.deepEqual(facts.reward, { value: 1, scores: {} });
    const sf = await backend.capture.sessionFacts(a.sessionId);
    assert.ok(sf.nCalls >= 4, `calls: ${sf.nCalls}`);
    // Exactly the proxy's calls, in its order, each once.
    const proxyCalls = (await (
      await fetch(`${backend.proxyUrl}/sessions/${a.sessionId}/calls`, {
        headers: { authorization: `Bearer ${await adminKeyOf('hl-proxy-b-main')}` },
      })
    ).json()) as { calls: { call_id: string }[] };
    assert.deepEqual(
      mirrored().map((c) => c.call_id),
      proxyCalls.calls.map((c) => c.call_id),
    );
    assert.equal(new Set(mirrored().map((c) => c.call_id)).size, sf.nCalls, 'no call twice');
  });

  it('reports OOMKilled as an infrastructure error naming pod and limit, and evictions likewise', async () => {
    const { m, dir, backend } = batchA;
    const oom = attemptFor(dir, m, 'g2-r0');
    const evict = attemptFor(dir, m, 'g1-r0');
    const evictedJob = jobName(m.batch_id, 'g1-r0', 0);
    for (const a of [oom, evict])
      await backend.capture.createSession({ sessionId: a.sessionId, metadata: {}, sampling: m.sampling, maxModelCalls: 20 });
    const evictor = (async () => {
      const podName = await waitFor(
        'the sleeper pod running',
        async () => backend.watch.podsOfJob(evictedJob).find((p) => p.status?.phase === 'Running')?.metadata?.name,
        120_000,
      );
      // Let the harness reach its sleeping tool call, then evict through the Eviction API.
      await waitFor(
        'a model call',
        async () => ((await backend.capture.sessionFacts(evict.sessionId)).nCalls > 0 ? true : undefined),
        120_000,
      );
      await core.createNamespacedPodEviction({
        namespace: NS,
        name: podName,
        body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: podName, namespace: NS } },
      });
    })();
    const [oomFacts, evictFacts] = await Promise.all([backend.run(oom), backend.run(evict), evictor]);
    assert.match(
      oomFacts.infraError ?? '',
      /^OOMKilled: container rollout of pod rollouts\/hl-b-main-g2-r0-a0-[a-z0-9]+ exceeded its memory limit \(160Mi\)$/,
    );
    assert.equal(oomFacts.reward, null);
    assert.match(evictFacts.infraError ?? '', /was evicted \(DisruptionTarget: EvictionByEvictionAPI\)/);
    // Both Jobs were deleted with their pods.
    await waitFor(
      'no pods of the two Jobs',
      async () =>
        (await core.listNamespacedPod({ namespace: NS, labelSelector: 'harness-lab/rollout in (g2-r0,g1-r0)' })).items.length === 0
          ? true
          : undefined,
      30_000,
    );
  });

  it('cancel deletes the Job and its pods (Background propagation); cleanupBatch removes what is left', async () => {
    const { m, dir, backend } = batchA;
    const ac = new AbortController();
    const a = attemptFor(dir, m, 'g1-r1', ac.signal);
    await backend.capture.createSession({ sessionId: a.sessionId, metadata: {}, sampling: m.sampling, maxModelCalls: 20 });
    const running = backend.run(a);
    const name = jobName(m.batch_id, 'g1-r1', 0);
    await waitFor(
      'the pod running',
      async () => (backend.watch.podsOfJob(name).some((p) => p.status?.phase === 'Running') ? true : undefined),
      120_000,
    );
    ac.abort();
    const facts = await running;
    assert.equal(facts.cancelled, true);
    const del = cluster.api.requests('DELETE', new RegExp(`/jobs/${name}$`));
    assert.equal(del.length, 1);
    assert.equal(del[0]!.query.propagationPolicy ?? (del[0]!.body as { propagationPolicy?: string }).propagationPolicy, 'Background');
    await waitFor(
      'pods gone',
      async () =>
        (await core.listNamespacedPod({ namespace: NS, labelSelector: `job-name=${name}` })).items.length === 0 ? true : undefined,
      30_000,
    );
    await waitFor(
      'containers gone',
      async () => ((await cluster.node.containers()).some((c) => c.Labels['io.kubernetes.pod.name']?.startsWith(name)) ? undefined : true),
      30_000,
    );
    // What a dead lab would leave: a Job nobody watches. cleanupBatch deletes it (one deletecollection).
    const leftover = attemptFor(dir, m, 'g1-r1', new AbortController().signal, 1);
    const orphan = backend.run(leftover);
    const orphanJob = jobName(m.batch_id, 'g1-r1', 1);
    await waitFor(
      'the orphan pod running',
      async () => (backend.watch.podsOfJob(orphanJob).some((p) => p.status?.phase === 'Running') ? true : undefined),
      120_000,
    );
    const removed = await backend.cleanupBatch(m.batch_id);
    assert.ok(removed.includes(orphanJob), removed.join(','));
    const dc = cluster.api.requests('DELETE', new RegExp(`/namespaces/${NS}/jobs$`)).at(-1)!;
    assert.equal(dc.query.labelSelector, 'harness-lab/batch=b-main');
    assert.equal(dc.query.propagationPolicy, 'Background');
    assert.match((await orphan).infraError ?? '', /was deleted from outside the lab/);
    await waitFor(
      'no rollout pods',
      async () =>
        (await core.listNamespacedPod({ namespace: NS, labelSelector: 'harness-lab/role=rollout' })).items.length === 0 ? true : undefined,
      30_000,
    );
  });

  it('a deadline-exceeded rollout is an agent timeout, seen through a watch that re-listed after 410 Gone', async () => {
    const ns2 = 'rollouts-deadline';
    await core.createNamespace({ body: { metadata: { name: ns2 } } });
    await cluster.node.exposeHostPort(ns2, engine.port);
    const m = manifestFor({
      batchId: 'b-deadline',
      namespace: ns2,
      tasks: [tasks.stuck],
      harness: 'react',
      engineUrl: `${engine.url}/v1`,
      model: engine.engine.model,
      timeoutSec: 8,
    });
    const dir = mkdtempSync(join(tmpdir(), 'hl-k8s-batch-'));
    const backend = await K8sBackend.open(await backendOptions(cluster, m, dir, images, { startupSlackSec: 0 }));
    try {
      const a = attemptFor(dir, m, 'g0-r0');
      await backend.capture.createSession({ sessionId: a.sessionId, metadata: {}, sampling: m.sampling, maxModelCalls: 20 });
      const running = backend.run(a);
      const name = jobName(m.batch_id, 'g0-r0', 0);
      await waitFor(
        'the pod running',
        async () => (backend.watch.podsOfJob(name).some((p) => p.status?.phase === 'Running') ? true : undefined),
        60_000,
      );
      const listsBefore = backend.watch.jobs.stats.lists;
      // History compacted and every watch cut: the resume from the old resourceVersion gets 410 Gone.
      cluster.api.store.compact();
      cluster.api.dropWatches();
      const facts = await running;
      assert.equal(facts.agent.timedOut, true, JSON.stringify(facts));
      assert.equal(facts.agent.exitCode, null);
      assert.equal(facts.verifier, null);
      assert.equal(facts.infraError, null);
      assert.ok(backend.watch.jobs.stats.expired >= 1, JSON.stringify(backend.watch.jobs.stats));
      assert.ok(backend.watch.jobs.stats.lists > listsBefore, 'the Job watch re-listed');
      assert.ok(backend.watch.jobs.stats.bookmarks >= 1, 'bookmarks were asked for and received');
      const job = cluster.api.store.get(cluster.api.store.resource('batch', 'jobs')!, ns2, name);
      const failed = (job.status as { conditions: { type: string; reason: string }[] }).conditions.find((c) => c.type === 'Failed');
      assert.equal(failed?.reason, 'DeadlineExceeded');
      assert.equal((job.spec as { activeDeadlineSeconds: number }).activeDeadlineSeconds, 9);
    } finally {
      await backend.close();
    }
  });

  it('a Kueue-queued Job starts suspended; the watchdog starts at admission, not at creation', async () => {
    const ns3 = 'rollouts-queued';
    await core.createNamespace({ body: { metadata: { name: ns3 } } });
    await cluster.node.exposeHostPort(ns3, engine.port);
    const m = manifestFor({
      batchId: 'b-queued',
      namespace: ns3,
      tasks: [tasks.stuck],
      harness: 'react',
      engineUrl: `${engine.url}/v1`,
      model: engine.engine.model,
      timeoutSec: 3,
      queueName: 'team-a',
    });
    const dir = mkdtempSync(join(tmpdir(), 'hl-k8s-batch-'));
    // Deadline 3 + 1 (verifier) s, watchdog 1 s later: both far shorter than the time the Job waits in the queue.
    const backend = await K8sBackend.open(await backendOptions(cluster, m, dir, images, { startupSlackSec: 0, watchdogGraceSec: 1 }));
    try {
      const a = attemptFor(dir, m, 'g0-r0');
      await backend.capture.createSession({ sessionId: a.sessionId, metadata: {}, sampling: m.sampling, maxModelCalls: 20 });
      const running = backend.run(a);
      const name = jobName(m.batch_id, 'g0-r0', 0);
      const batchApi = new k8s.KubeConfig();
      batchApi.loadFromFile(cluster.kubeconfig);
      const batch = batchApi.makeApiClient(k8s.BatchV1Api);
      await waitFor(
        'the Job suspended',
        async () =>
          (await batch.readNamespacedJob({ namespace: ns3, name }).catch(() => undefined))?.status?.conditions?.some(
            (c) => c.type === 'Suspended' && c.status === 'True',
          )
            ? true
            : undefined,
        30_000,
      );
      const posted = cluster.api.requests('POST', new RegExp(`/namespaces/${ns3}/jobs$`)).map((r) => r.body as k8s.V1Job)[0]!;
      assert.equal(posted.spec?.suspend, true);
      assert.equal(posted.metadata?.labels?.['kueue.x-k8s.io/queue-name'], 'team-a');
      await new Promise((r) => setTimeout(r, 6000));
      assert.equal(
        (await core.listNamespacedPod({ namespace: ns3, labelSelector: `job-name=${name}` })).items.length,
        0,
        'no pod while queued',
      );
      const admittedAt = Date.now();
      // Kueue admits the Job by unsuspending it.
      await batch.patchNamespacedJob(
        { namespace: ns3, name, body: { spec: { suspend: false } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
      const facts = await running;
      assert.equal(facts.agent.timedOut, true, JSON.stringify(facts));
      const job = cluster.api.store.get(cluster.api.store.resource('batch', 'jobs')!, ns3, name);
      const st = job.status as { startTime: string; conditions: { type: string; reason: string }[] };
      assert.equal(
        st.conditions.find((c) => c.type === 'Failed')?.reason,
        'DeadlineExceeded',
        'the Job deadline ended it, not a watchdog armed while queued',
      );
      assert.ok(Date.parse(st.startTime) >= Math.floor(admittedAt / 1000) * 1000, 'the deadline counted from admission');
      assert.equal(cluster.api.requests('DELETE', new RegExp(`/jobs/${name}$`)).length, 0, 'the watchdog never deleted it');
    } finally {
      await backend.close();
    }
  });

  it("the lab's own watchdog ends a rollout whose Job it can no longer see", async () => {
    const ns4 = 'rollouts-blind';
    await core.createNamespace({ body: { metadata: { name: ns4 } } });
    await cluster.node.exposeHostPort(ns4, engine.port);
    const m = manifestFor({
      batchId: 'b-blind',
      namespace: ns4,
      tasks: [tasks.stuck],
      harness: 'react',
      engineUrl: `${engine.url}/v1`,
      model: engine.engine.model,
      timeoutSec: 6,
    });
    const dir = mkdtempSync(join(tmpdir(), 'hl-k8s-batch-'));
    const backend = await K8sBackend.open(await backendOptions(cluster, m, dir, images, { startupSlackSec: 0, watchdogGraceSec: 1 }));
    try {
      const a = attemptFor(dir, m, 'g0-r0');
      await backend.capture.createSession({ sessionId: a.sessionId, metadata: {}, sampling: m.sampling, maxModelCalls: 20 });
      const running = backend.run(a);
      const name = jobName(m.batch_id, 'g0-r0', 0);
      await waitFor(
        'the pod running',
        async () => (backend.watch.podsOfJob(name).some((p) => p.status?.phase === 'Running') ? true : undefined),
        60_000,
      );
      // From now on the lab cannot list or watch Jobs here: it never learns of DeadlineExceeded.
      cluster.api.deny({ namespace: ns4, verb: 'watch', resource: 'jobs', group: 'batch' });
      cluster.api.deny({ namespace: ns4, verb: 'list', resource: 'jobs', group: 'batch' });
      cluster.api.dropWatches();
      const facts = await running;
      assert.equal(facts.agent.timedOut, true, JSON.stringify(facts));
      assert.equal(facts.infraError, null);
      const del = cluster.api.requests('DELETE', new RegExp(`/namespaces/${ns4}/jobs/${name}$`));
      assert.equal(del.length, 1, 'the watchdog deleted the Job');
      assert.equal(del[0]!.query.propagationPolicy, 'Background');
    } finally {
      await backend.close();
    }
  });

  it('teardown removes the proxy objects, and Background propagation its pod and containers', async () => {
    const { m, backend } = batchA;
    await backend.teardown();
    const sel = `harness-lab/batch=${m.batch_id}`;
    const apps = (() => {
      const kc = new k8s.KubeConfig();
      kc.loadFromFile(cluster.kubeconfig);
      return { apps: kc.makeApiClient(k8s.AppsV1Api), net: kc.makeApiClient(k8s.NetworkingV1Api) };
    })();
    assert.equal((await apps.apps.listNamespacedDeployment({ namespace: NS, labelSelector: sel })).items.length, 0);
    assert.equal((await core.listNamespacedService({ namespace: NS, labelSelector: sel })).items.length, 0);
    assert.equal((await core.listNamespacedSecret({ namespace: NS, labelSelector: sel })).items.length, 0);
    assert.equal((await core.listNamespacedConfigMap({ namespace: NS, labelSelector: sel })).items.length, 0);
    assert.equal((await apps.net.listNamespacedNetworkPolicy({ namespace: NS, labelSelector: sel })).items.length, 0);
    assert.equal((await core.listNamespacedPersistentVolumeClaim({ namespace: NS, labelSelector: sel })).items.length, 0);
    await waitFor(
      'no pods of the batch',
      async () => ((await core.listNamespacedPod({ namespace: NS, labelSelector: sel })).items.length === 0 ? true : undefined),
      30_000,
    );
    await waitFor(
      'no pod containers of the namespace',
      async () => ((await cluster.node.containers()).some((c) => c.Labels['io.kubernetes.pod.namespace'] === NS) ? undefined : true),
      30_000,
    );
  });

  it('dry run: every manifest the backend would apply, validated, with nothing sent', async () => {
    const before = cluster.api.received.length;
    const m = manifestFor({
      batchId: 'b-dry',
      namespace: NS,
      tasks: [tasks.hello],
      harness: 'react',
      engineUrl: `${engine.url}/v1`,
      model: 'm',
      timeoutSec: 60,
      queueName: 'team-a',
    });
    const objs = await k8sDryRunManifests({
      manifest: m,
      taskImage: () => 'harness-lab/task-hello-file:x',
      proxy: { image: 'reg.example/harness-lab:1' },
    });
    assert.deepEqual(
      objs.map((o) => o.kind),
      ['Secret', 'PersistentVolumeClaim', 'Deployment', 'Service', 'NetworkPolicy', 'NetworkPolicy', 'ConfigMap', 'Job', 'Job'],
    );
    const job = objs.at(-1) as k8s.V1Job;
    assert.equal(job.metadata?.labels?.['kueue.x-k8s.io/queue-name'], 'team-a');
    assert.equal(job.spec?.suspend, true, 'queued Jobs start suspended for Kueue to admit');
    assert.equal(cluster.api.received.length, before);
  });
});
