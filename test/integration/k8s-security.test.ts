// The cluster path played as an attacker, on the API server double with the real client: a rollout's
// agent (a scripted policy) that tries, during its turn, to read the verifier's tests, to forge their
// release, to use the proxy's admin routes and another session with its own key, and to reach the
// engine past the proxy; a pod outside the batch that tries the proxy; then what the lab makes of a
// Job that Pod Security admission refuses, a pod the scheduler cannot place, a proxy pod deleted
// mid-batch, and a port-forward it may not `get`. Every refusal is asserted where it happens.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { K8sBackend } from '../../src/batch/backends/k8s/index.js';
import { loadSessionFile } from '../../src/capture/store.js';
import { jobName, proxyName } from '../../src/cluster/manifests.js';
import type { KubeDouble } from '../k8s-double/index.js';
import { ScriptedPolicy } from '../../src/engine/policy.js';
import { startPolicyEngine } from '../../src/sandbox/policy-engine.js';
import {
  attemptFor,
  backendOptions,
  buildProxyImage,
  manifestFor,
  taskCopy,
  taskImages,
  testCluster,
  type EngineInNamespace,
} from './k8s-fixtures.js';
import { dockerReady, waitFor } from './sandbox-fixtures.js';

const NS = 'sec';
const BATCH = 'b-sec';
const PROXY_HOST = `${proxyName(BATCH)}.${NS}.svc`;

/** The agent's one tool call: every probe prints NAME=<what came back>, then PROBED. */
function probeScript(enginePort: number, otherSession: string): string {
  return [
    // A refused connection can close before printf writes its second line: without this, SIGPIPE
    // would end the whole script (printf is a builtin) and the lines after it would be missing.
    'trap "" PIPE',
    'req() { if exec 3<>"/dev/tcp/$1/$2"; then printf "$4" >&3; r=$(timeout 5 head -c 12 <&3 | tr -d "\\r\\n"); exec 3>&-; echo "$3=[$r]"; else echo "$3=[connect-failed]"; fi; }',
    'ls /opt/harness-lab/task-tests /tests 2>&1 | head -3 | sed "s/^/TESTS_LS=/"',
    'echo "HANDOFF=[$(ls -A /opt/harness-lab/handoff | tr "\\n" " ")]"',
    'echo "TOKEN_IN_ENV=[$(cat /proc/*/environ 2>/dev/null | tr "\\0" "\\n" | grep -c tests_token)]"',
    'printf forged > /opt/harness-lab/handoff/release; sleep 1.5',
    'echo "AFTER_FORGE=[$(ls /opt/harness-lab/handoff/tests 2>&1 | head -1)]"',
    `req ${PROXY_HOST} 8100 ADMIN "GET /sessions HTTP/1.0\\r\\nAuthorization: Bearer $HARNESS_LAB_API_KEY\\r\\n\\r\\n"`,
    `req ${PROXY_HOST} 8100 OTHER "GET /sessions/${otherSession}/calls HTTP/1.0\\r\\nAuthorization: Bearer $HARNESS_LAB_API_KEY\\r\\n\\r\\n"`,
    `req 127.0.0.1 ${enginePort} ENGINE "GET /v1/models HTTP/1.0\\r\\n\\r\\n"`,
    // Split so the script's own text (in the tool call) never reads as its output.
    'echo "PRO""BED"',
  ].join('\n');
}

describe('the cluster path against an attacker, on the API server double', { timeout: 900_000 }, () => {
  let cluster: KubeDouble;
  let engine: EngineInNamespace;
  let core: k8s.CoreV1Api;
  let images: Map<string, string>;
  let backend: K8sBackend;
  let dir: string;
  const tasks = {
    hello: taskCopy('hello-file', {}),
    // Eight CPUs on a six-CPU node: the scheduler can never place it.
    big: taskCopy('hello-file', {
      toml: (t) => t.replace('name = "harness-lab/hello-file"', 'name = "harness-lab/big"').replace(/cpus = [0-9.]+/, 'cpus = 8'),
    }),
    probe: taskCopy('hello-file', { toml: (t) => t.replace('name = "harness-lab/hello-file"', 'name = "harness-lab/probe"') }),
    stepper: taskCopy('hello-file', { toml: (t) => t.replace('name = "harness-lab/hello-file"', 'name = "harness-lab/stepper"') }),
  };
  writeFileSync(join(tasks.probe, 'instruction.md'), 'PROBE_THE_CLUSTER\n');
  writeFileSync(join(tasks.stepper, 'instruction.md'), 'WAIT_FOR_GO\n');

  before(async () => {
    assert.match(readFileSync(join(tasks.big, 'task.toml'), 'utf8'), /cpus = 8/, 'the big task asks for 8 CPUs');
    cluster = await testCluster({ capacity: { cpu: 6 } });
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(cluster.kubeconfig);
    core = kc.makeApiClient(k8s.CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: NS } } });
    // The probe names the engine's port, known once it listens: its rule joins the policy then.
    const policy = ScriptedPolicy.parse(
      {
        name: 'k8s-attacker',
        rules: [
          { when: { last_message: 'PROBED' }, then: { call: { tool: '^bash$', input: "printf 'Hello, world!' > hello.txt" } } },
          {
            when: { last_message: 'WAIT_FOR_GO' },
            then: { call: { tool: '^bash$', input: 'until [ -f /tmp/hl-go ]; do sleep 0.2; done; echo went' } },
          },
          { when: { last_message: 'went' }, then: { call: { tool: '^bash$', input: "printf 'Hello, world!' > hello.txt" } } },
          {
            when: { last_message: 'Create a file named `hello.txt`' },
            then: { call: { tool: '^bash$', input: "printf 'Hello, world!' > hello.txt" } },
          },
        ],
        fallback: { say: 'Done.' },
      },
      'k8s-attacker',
    );
    const started = await startPolicyEngine(policy, 'fake');
    engine = { engine: started, port: Number(new URL(started.url).port), url: started.url };
    await cluster.node.exposeHostPort(NS, engine.port);
    policy.spec.rules!.unshift({
      when: { last_message: 'PROBE_THE_CLUSTER' },
      then: { call: { tool: '^bash$', input: probeScript(engine.port, `${BATCH}-g1-r1-0`) } },
    } as NonNullable<typeof policy.spec.rules>[number]);
    images = await taskImages(Object.values(tasks));
    const m = manifestFor({
      batchId: BATCH,
      namespace: NS,
      tasks: [tasks.probe, tasks.hello, tasks.big, tasks.stepper],
      harness: 'react',
      engineUrl: `${engine.url}/v1`,
      model: engine.engine.model,
      timeoutSec: 120,
    });
    dir = mkdtempSync(join(tmpdir(), 'hl-k8s-sec-batch-'));
    backend = await K8sBackend.open(await backendOptions(cluster, m, dir, images, { unschedulableGraceSec: 2 }));
  });

  after(async () => {
    await backend?.close();
    await engine?.engine.close();
    await cluster?.close();
  });

  it("refuses the agent's turn the tests, their release, the admin routes, another session and the engine", async () => {
    const m = backend['opts'].manifest;
    const a = attemptFor(dir, m, 'g0-r0');
    await backend.capture.createSession({
      sessionId: a.sessionId,
      metadata: { rollout: 'g0-r0' },
      sampling: m.sampling,
      maxModelCalls: 20,
    });
    // The session the probe names, so "another session" exists.
    await backend.capture.createSession({ sessionId: `${BATCH}-g1-r1-0`, metadata: {}, sampling: m.sampling, maxModelCalls: 20 });
    const facts = await backend.run(a);
    // The forged release was counted and never answered: the rollout is not trusted.
    assert.match(
      facts.infraError ?? '',
      /asked the tests sidecar of pod sec\/hl-b-sec-g0-r0-a0-[a-z0-9]+ for tests\/ 1 time\(s\) and was refused/,
    );
    await backend.capture.sessionFacts(a.sessionId);
    const calls = loadSessionFile(join(dir, 'capture', 'sessions', `${a.sessionId}.jsonl`))!.calls;
    const seen = JSON.stringify(calls.map((c) => c.request.body));
    // The last match: the script's own text (in the assistant's tool call) comes before its output.
    const probe = (name: string) => [...seen.matchAll(new RegExp(`${name}=\\[([^\\]$]*)\\]`, 'g'))].at(-1)?.[1];
    assert.ok(seen.includes('PROBED'), 'the probe ran');
    // No tests anywhere in the rollout container; the handoff holds no token while the agent runs.
    assert.match(seen, /TESTS_LS=ls: cannot access '\/opt\/harness-lab\/task-tests': No such file or directory/);
    assert.match(seen, /TESTS_LS=ls: cannot access '\/tests': No such file or directory/);
    assert.equal(probe('HANDOFF')?.trim(), '.issued', "only the sidecar's marker: the token was taken before the agent started");
    assert.equal(probe('TOKEN_IN_ENV'), '0');
    assert.match(probe('AFTER_FORGE') ?? '', /No such file or directory/);
    // The proxy answers the agent's own key on admin routes and on another session with 401.
    assert.equal(probe('ADMIN'), 'HTTP/1.1 401');
    assert.equal(probe('OTHER'), 'HTTP/1.1 401');
    // The engine is not reachable from a rollout pod: the egress policy refused the connection.
    assert.equal(probe('ENGINE'), '');
    const refused = cluster.node.network.log.filter((r) => r.from.startsWith(`${NS}/hl-b-sec-g0-r0-a0-`) && !r.allowed);
    assert.ok(
      refused.some((r) => r.to === 'host 127.0.0.1' && r.port === engine.port && /egress of pod .* is not allowed/.test(r.why)),
      JSON.stringify(refused),
    );
    assert.ok(
      cluster.node.network.log.some(
        (r) => r.from.startsWith(`${NS}/hl-b-sec-g0-r0-a0-`) && r.allowed && r.to.startsWith(`service ${NS}/${proxyName(BATCH)}`),
      ),
      'the proxy itself was reachable',
    );
  });

  it('completes an honest rollout: the tests reach the verifier after the agent; the key never reaches the cluster outside its Secret', async () => {
    const m = backend['opts'].manifest;
    const a = attemptFor(dir, m, 'g1-r0');
    await backend.capture.createSession({ sessionId: a.sessionId, metadata: {}, sampling: m.sampling, maxModelCalls: 20 });
    const facts = await backend.run(a);
    assert.equal(facts.infraError, null, JSON.stringify(facts));
    assert.deepEqual(facts.reward, { value: 1, scores: {} });
    // The agent ran without the capabilities the entry script kept (setpriv in the task image).
    assert.match(readFileSync(join(a.outDir, 'pod.log'), 'utf8'), /"tests_requests_refused":0,"agent_isolated":true/);
    const key = backend.capture.keyOf(a.sessionId);
    assert.notEqual(key, a.sessionId, 'a minted key');
    const name = jobName(BATCH, 'g1-r0', 0);
    // Only the attempt's Secret carried the key; the Job referenced it; the Secret was owned by the Job and is gone now.
    const carrying = cluster.api.received.filter((r) => JSON.stringify(r.body ?? '').includes(key));
    assert.deepEqual(
      carrying.map((r) => `${r.method} ${r.path}`),
      [`POST /api/v1/namespaces/${NS}/secrets`],
    );
    assert.equal((carrying[0]!.body as { metadata: { name: string } }).metadata.name, `${name}-key`);
    const patch = cluster.api.requests('PATCH', new RegExp(`/namespaces/${NS}/secrets/${name}-key$`))[0]!.body as {
      metadata: { ownerReferences: { kind: string; name: string }[] };
    };
    assert.deepEqual(
      patch.metadata.ownerReferences.map((o) => `${o.kind}/${o.name}`),
      [`Job/${name}`],
    );
    assert.equal(cluster.api.requests('DELETE', new RegExp(`/namespaces/${NS}/secrets/${name}-key$`)).length, 1);
    await assert.rejects(core.readNamespacedSecret({ namespace: NS, name: `${name}-key` }), /404|not found/i);
    // Nor in any file the lab wrote.
    const files = (d: string): string[] =>
      readdirSync(d).flatMap((n) => (statSync(join(d, n)).isDirectory() ? files(join(d, n)) : [join(d, n)]));
    for (const f of files(dir)) assert.ok(!readFileSync(f, 'utf8').includes(key), `${f} holds the session key`);
  });

  it('a pod outside the batch cannot reach the proxy (its ingress NetworkPolicy)', async () => {
    const script = `trap '' PIPE; if exec 3<>/dev/tcp/${PROXY_HOST}/8100; then printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3; echo "PROXY=[$(timeout 5 head -c 12 <&3)]"; else echo PROXY=[connect-failed]; fi`;
    await core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: 'stranger', labels: { app: 'stranger' } },
        spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: images.get('hello-file')!, command: ['bash', '-c', script] }] },
      },
    });
    // Three containers (pause, relay, the script) start before the 5 s read: on a busy CI machine
    // that took over a minute once, so the wait is generous and its failure names the pod's state.
    let phase: string | undefined;
    await waitFor(
      'the stranger done',
      async () => {
        phase = (await core.readNamespacedPod({ namespace: NS, name: 'stranger' })).status?.phase;
        return phase === 'Succeeded' || phase === 'Failed' ? true : undefined;
      },
      180_000,
    );
    assert.equal(
      phase,
      'Succeeded',
      `the stranger pod ${phase}: ${await core.readNamespacedPodLog({ namespace: NS, name: 'stranger' }).catch(String)}`,
    );
    assert.equal(
      (await core.readNamespacedPodLog({ namespace: NS, name: 'stranger' })).trim(),
      'PROXY=[]',
      JSON.stringify(cluster.node.network.log),
    );
    // The rule's `from` reached the API server (client-node's serializer drops a plain `from`: an open door).
    const sent = cluster.api
      .requests('POST', new RegExp(`/namespaces/${NS}/networkpolicies$`))
      .map((x) => x.body as { metadata: { name: string }; spec: { ingress: { from?: unknown[] }[] } });
    assert.deepEqual(sent.find((x) => x.metadata.name === `hl-proxy-ingress-${BATCH}`)?.spec.ingress[0]?.from, [
      { podSelector: { matchLabels: { 'harness-lab/batch': BATCH, 'harness-lab/role': 'rollout' } } },
    ]);
    const r = cluster.node.network.log.find((x) => x.from === `${NS}/stranger`)!;
    assert.equal(r.allowed, false);
    assert.match(r.why, /^ingress to pod sec\/hl-proxy-b-sec-[a-z0-9]+:8100 from pod sec\/stranger is not allowed/);
  });

  it('a pod the scheduler cannot place is an infra error naming the reason, not an agent timeout', async () => {
    const m = backend['opts'].manifest;
    const a = attemptFor(dir, m, 'g2-r0');
    await backend.capture.createSession({ sessionId: a.sessionId, metadata: {}, sampling: m.sampling, maxModelCalls: 20 });
    const facts = await backend.run(a);
    assert.equal(
      facts.agent.timedOut,
      false,
      JSON.stringify({ facts, pods: backend.watch.podsOfJob(jobName(BATCH, 'g2-r0', 0)).map((p) => p.status) }),
    );
    assert.match(facts.infraError ?? '', /cannot start: Unschedulable \(0\/1 nodes are available: 1 Insufficient cpu\./);
    const events = (await core.listNamespacedEvent({ namespace: NS, fieldSelector: 'reason=FailedScheduling' })).items;
    assert.ok(
      events.some((e) => e.involvedObject.name?.startsWith(jobName(BATCH, 'g2-r0', 0))),
      'a FailedScheduling Event',
    );
  });

  it('a proxy pod deleted mid-batch: the rollout it held runs again, a finished rollout keeps every call', async () => {
    const m = backend['opts'].manifest;
    const done = attemptFor(dir, m, 'g1-r1', new AbortController().signal, 1);
    await backend.capture.createSession({ sessionId: done.sessionId, metadata: {}, sampling: m.sampling, maxModelCalls: 20 });
    assert.equal((await backend.run(done)).infraError, null);
    const doneFacts = await backend.capture.sessionFacts(done.sessionId);
    const file = join(dir, 'capture', 'sessions', `${done.sessionId}.jsonl`);
    const before = loadSessionFile(file)!.calls.map((c) => c.call_id);
    assert.equal(before.length, doneFacts.nCalls);

    const held = attemptFor(dir, m, 'g3-r0');
    await backend.capture.createSession({ sessionId: held.sessionId, metadata: {}, sampling: m.sampling, maxModelCalls: 20 });
    const running = backend.run(held);
    await waitFor(
      'the held rollout in its tool call',
      async () => ((await backend.capture.sessionFacts(held.sessionId).catch(() => ({ nCalls: 0 }))).nCalls > 0 ? true : undefined),
      120_000,
    );
    const proxyPod = [...backend.watch.pods.objects.values()].find((p) => p.metadata?.labels?.['harness-lab/role'] === 'proxy')!.metadata!
      .name!;
    await core.deleteNamespacedPod({ namespace: NS, name: proxyPod });
    const facts = await running;
    assert.equal(facts.rerun, true, JSON.stringify(facts));
    assert.match(facts.infraError ?? '', /the capture proxy restarted/);
    // A new proxy pod on the same claim: the finished rollout's session and calls are still there.
    const after = await backend.capture.sessionFacts(done.sessionId);
    assert.equal(after.nCalls, before.length);
    assert.deepEqual(
      loadSessionFile(file)!.calls.map((c) => c.call_id),
      before,
      'the mirror lost and doubled nothing',
    );
    const newPod = [...backend.watch.pods.objects.values()].find(
      (p) => p.metadata?.labels?.['harness-lab/role'] === 'proxy' && !p.metadata?.deletionTimestamp,
    )!.metadata!.name!;
    assert.notEqual(newPod, proxyPod);
  });

  it('refuses to start when the port-forward may not be had with `get` (as the API server authorizes the WebSocket)', async () => {
    const ns = 'sec-noforward';
    await core.createNamespace({ body: { metadata: { name: ns } } });
    cluster.api.deny({ namespace: ns, verb: 'get', resource: 'pods/portforward' });
    const m = manifestFor({
      batchId: 'b-noforward',
      namespace: ns,
      tasks: [tasks.hello],
      harness: 'react',
      engineUrl: `${engine.url}/v1`,
      model: engine.engine.model,
      timeoutSec: 60,
    });
    const posted = cluster.api.received.filter((r) => r.method === 'POST' && r.path.includes(`/namespaces/${ns}/`)).length;
    await assert.rejects(
      K8sBackend.open(await backendOptions(cluster, m, mkdtempSync(join(tmpdir(), 'hl-k8s-sec-')), images)),
      /you may not get pods\/portforward/,
    );
    assert.equal(
      cluster.api.received.filter((r) => r.method === 'POST' && r.path.includes(`/namespaces/${ns}/`)).length,
      posted,
      'nothing created',
    );
  });

  it('a Job whose pods Pod Security admission refuses is an infra error with the admission message', async () => {
    const ns = 'sec-baseline';
    await core.createNamespace({ body: { metadata: { name: ns, labels: { 'pod-security.kubernetes.io/enforce': 'baseline' } } } });
    await cluster.node.exposeHostPort(ns, engine.port);
    // The proxy from an image (no hostPath: it meets "restricted"); the rollouts mount the harness from the node (hostPath: not "baseline").
    const tag = 'harness-lab/harness-lab:k8s-sec-test';
    await buildProxyImage(await dockerReady(), tag);
    const m = manifestFor({
      batchId: 'b-psa',
      namespace: ns,
      tasks: [tasks.hello],
      harness: 'react',
      engineUrl: `${engine.url}/v1`,
      model: engine.engine.model,
      timeoutSec: 60,
    });
    const d = mkdtempSync(join(tmpdir(), 'hl-k8s-sec-'));
    const b = await K8sBackend.open(await backendOptions(cluster, m, d, images, { proxy: { image: tag, command: ['harness-lab'] } }));
    try {
      const a = attemptFor(d, m, 'g0-r0');
      await b.capture.createSession({ sessionId: a.sessionId, metadata: {}, sampling: m.sampling, maxModelCalls: 20 });
      const facts = await b.run(a);
      assert.equal(facts.agent.timedOut, false);
      assert.match(
        facts.infraError ?? '',
        /^Job sec-baseline\/hl-b-psa-g0-r0-a0 could not create its pod: FailedCreate: Error creating: pods "hl-b-psa-g0-r0-a0-[a-z0-9]+" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes \(volumes "node-binary", "harness-cache", "react-harness"\)$/,
      );
      assert.equal(facts.setupFailure, facts.infraError);
    } finally {
      await b.close();
    }
  });
});
