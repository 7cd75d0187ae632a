// #30's loop in the cluster from one command, on the Kubernetes API server double (pods run as
// Docker containers; RBAC enforced for ServiceAccounts; Secrets reach pods only by secretKeyRef):
// `train submit` with `data.serve` deploys `harness-lab serve --backend k8s` (Deployment, Service,
// key Secret, state PVC, tasks ConfigMap, ServiceAccount + Role + RoleBinding) and a trainer Job
// whose pod speaks to it exactly as TRL's HarborSessionFactory does (GET /harbor_env/splits, then a
// group of 3 over /ws: reset, step run_rollout, close; the key as the URL's password). The server,
// running as its ServiceAccount with only its Role's verbs, runs the group as real rollout Jobs
// through its own in-cluster capture proxy; every member comes back ok with reward 1 and the
// engine's own token ids. `train status` follows both (trainer phase, server health, rollouts,
// infra-failed rate, reward mean), `train logs` reaches both, and `train cancel` leaves nothing, not
// even the capture proxy the server made (it removes it on SIGTERM, within its pod's grace period).
/* eslint-disable @typescript-eslint/no-explicit-any -- wire JSON from the server under test */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import type Docker from 'dockerode';
import { harnessCacheRoot } from '../../src/harness/run-local.js';
import { ensureReactScript } from '../../src/sandbox/react-script.js';
import { startPolicyEngine, type PolicyEngine } from '../../src/sandbox/policy-engine.js';
import type { KubeDouble } from '../k8s-double/index.js';
import { buildProxyImage, clusterWithNamespace, taskCopy } from './k8s-fixtures.js';
import { REPO, cli, dockerReady, waitFor } from './sandbox-fixtures.js';
import { recordingFront, rolloutResult, runRolloutArgs } from './serve-fixtures.js';

const NS = 'train-serve';
const RUN = 'trl-e2e';
const LAB_IMAGE = `harness-lab/k8s-proxy-test:train-${process.pid}`;
const GROUP = 3;
const PINNED = { temperature: 0.7, top_p: 1, top_k: -1, min_p: 0, frequency_penalty: 0, presence_penalty: 0, repetition_penalty: 1 };
const POLICY = {
  name: 'hello',
  rules: [
    {
      when: { last_message: 'Create a file named `hello.txt`' },
      then: { call: { tool: '^bash$', input: "printf 'Hello, world!' > hello.txt" } },
    },
  ],
  fallback: { say: 'Done.' },
};

describe('train submit deploys the rollout server beside a TRL-speaking trainer on the API server double', { timeout: 1_200_000 }, () => {
  let docker: Docker;
  let cluster: KubeDouble;
  let engine: PolicyEngine;
  let front: Awaited<ReturnType<typeof recordingFront>>;
  let kc: k8s.KubeConfig;
  const env = () => ({ KUBECONFIG: cluster.kubeconfig, HARNESS_LAB_DATA_DIR: mkdtempSync(join(tmpdir(), 'hl-train-serve-data-')) });
  let runEnv: Record<string, string>;

  before(async () => {
    docker = await dockerReady();
    await buildProxyImage(docker, LAB_IMAGE);
    ({ cluster } = await clusterWithNamespace(NS));
    kc = new k8s.KubeConfig();
    kc.loadFromFile(cluster.kubeconfig);
    const policyFile = join(mkdtempSync(join(tmpdir(), 'hl-train-serve-policy-')), 'policy.json');
    writeFileSync(policyFile, JSON.stringify(POLICY));
    engine = await startPolicyEngine(policyFile, 'fake');
    front = await recordingFront(engine.url);
    await cluster.node.exposeHostPort(NS, Number(new URL(front.url).port));
    runEnv = env();
  });

  after(async () => {
    front?.server.close();
    await engine?.close();
    await cluster?.close();
    await docker
      ?.getImage(LAB_IMAGE)
      .remove({ force: true })
      .catch(() => undefined);
  });

  it('submit, follow, logs of both, cancel: a group of real rollouts, nothing left', async () => {
    const task = taskCopy('hello-file', {});
    const dir = mkdtempSync(join(tmpdir(), 'hl-train-serve-cfg-'));
    const config = join(dir, 'run.yaml');
    const args = runRolloutArgs({ llm_url: `${front.url}/v1`, model: engine.model, sampling: PINNED });
    writeFileSync(
      config,
      JSON.stringify({
        name: RUN,
        image: LAB_IMAGE,
        command: ['node', '-e', readFileSync(join(REPO, 'test', 'fixtures', 'trainer', 'harbor-client.cjs'), 'utf8')],
        env: { GROUP_SIZE: String(GROUP), ROLLOUT_ARGS: JSON.stringify(args) },
        data: {
          source: 'rollout-server',
          serve: {
            datasets: { train: task },
            image: LAB_IMAGE,
            maxConcurrent: GROUP,
            parallel: GROUP,
            // The double's node is this machine: rollout pods mount its node binary, harness cache and react script.
            env: {
              HARNESS_LAB_K8S_HARNESS_FROM: 'hostPath',
              HARNESS_LAB_K8S_NODE_BINARY: process.execPath,
              HARNESS_LAB_K8S_HARNESS_CACHE: harnessCacheRoot(),
              HARNESS_LAB_K8S_REACT_SCRIPT: await ensureReactScript(),
            },
          },
        },
      }),
    );
    const submit = await cli(['train', 'submit', '--trainer', 'trl', '--config', config, '--operator', 'none', '--namespace', NS], {
      env: runEnv,
    });
    assert.equal(submit.code, 0, submit.stderr);
    assert.match(submit.stdout, /deployed rollout server trl-e2e-serve \(http:\/\/trl-e2e-serve\.train-serve\.svc:8000; splits train\)/);
    assert.match(submit.stdout, /created Job train-serve\/trl-e2e/);

    // Followed as one thing: the trainer's phase until it ends, then the server's account.
    const status = await cli(['train', 'status', RUN, '--watch', '--json', '--namespace', NS], { env: runEnv, timeoutMs: 900_000 });
    const logs = await cli(['train', 'logs', RUN, '--no-follow', '--namespace', NS], { env: runEnv });
    const serverLog = await cli(['train', 'logs', RUN, '--server', '--no-follow', '--namespace', NS], { env: runEnv });
    const st = JSON.parse(status.stdout.trim().split('\n').at(-1)!);
    assert.equal(
      st.phase,
      'Succeeded',
      `${status.stdout}\n${status.stderr}\ntrainer:\n${logs.stdout.slice(-3000)}\nserver:\n${serverLog.stdout.slice(-5000)}\nnetwork:\n${JSON.stringify(cluster.node.network.log.slice(-20))}`,
    );
    assert.equal(st.rollout_server.state, 'Ready');
    assert.equal(st.rollout_server.progress.done, GROUP);
    assert.equal(st.rollout_server.progress.rollouts.completed, GROUP);
    assert.equal(st.rollout_server.progress.infraFailedRate, 0);
    assert.equal(st.rollout_server.progress.rewardMean, 1);
    assert.equal(st.rollout_server.progress.breaker, 'closed');

    // The trainer pod's own record of the protocol: the split, and each member's result with the engine's token ids.
    assert.equal(logs.code, 0, logs.stderr);
    const splits = JSON.parse(/HARNESS_LAB_TRAINER_SPLITS (.*)/.exec(logs.stdout)![1]!);
    assert.deepEqual(
      splits.map((s: any) => [s.name, s.num_tasks]),
      [['train', 1]],
    );
    const members = [...logs.stdout.matchAll(/HARNESS_LAB_TRAINER_FRAMES (.*)/g)].map((m) => JSON.parse(m[1]!));
    assert.equal(members.length, GROUP);
    const sessions = new Set<string>();
    for (const frames of members) {
      assert.equal(frames[0].type, 'observation', 'reset answers with an observation');
      const r = rolloutResult(frames[1]);
      assert.equal(r.ok, true, r.error);
      assert.equal(r.reward, 1);
      assert.equal(r.task_id, 'harness-lab/hello-file');
      sessions.add(r.session_id);
      const kept = r.turns.filter((t: any) => t.role === 'agent' && !t.discarded && t.completion_token_ids.length > 0);
      assert.ok(kept.length >= 2, `${kept.length} trainable turn(s)`);
      for (const t of kept) {
        const answer = front.answers.find((a) => JSON.stringify(a.prompt_token_ids) === JSON.stringify(t.prompt_token_ids));
        assert.ok(answer, `the engine answered the prompt of turn ${t.node_id}`);
        assert.deepEqual(t.completion_token_ids, answer.choices[0].token_ids);
        assert.equal(t.sampling_params.temperature, PINNED.temperature);
      }
    }
    assert.equal(sessions.size, GROUP, 'one capture session per member');
    assert.equal(serverLog.code, 0, serverLog.stderr);
    assert.match(serverLog.stdout, /harness-lab serve: http:\/\/\S+:8000 \(train: 1 task\(s\)/);

    // The server ran as its ServiceAccount: its token was accepted, and RBAC (its Role only) let it work.
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const rbac = kc.makeApiClient(k8s.RbacAuthorizationV1Api);
    const role = await rbac.readNamespacedRole({ namespace: NS, name: `${RUN}-serve` });
    assert.ok(!JSON.stringify(role.rules).includes('*'), 'no wildcard in the Role');
    const serverPod = (await core.listNamespacedPod({ namespace: NS, labelSelector: 'harness-lab/role=rollout-server' })).items[0]!;
    assert.equal(serverPod.spec?.serviceAccountName, `${RUN}-serve`);

    // The server's admin key is in the run's Secret and nowhere else: no other object any client sent
    // to the cluster (the lab's or the server's own), no file the lab wrote.
    const keySecret = await core.readNamespacedSecret({ namespace: NS, name: `${RUN}-serve` });
    const adminKey = Buffer.from(Object.values(keySecret.data ?? {})[0] ?? '', 'base64').toString('utf8');
    assert.ok(adminKey.length >= 16, 'the run has a minted admin key');
    const carriers = ['POST', 'PUT', 'PATCH']
      .flatMap((m) => cluster.api.requests(m, /./))
      .filter((r) => JSON.stringify(r.body ?? null).includes(adminKey))
      .map((r) => `${r.method} ${r.path}`);
    assert.deepEqual(carriers, [`POST /api/v1/namespaces/${NS}/secrets`], 'only the Secret carries the key');
    const files = (d: string): string[] =>
      readdirSync(d).flatMap((n) => (statSync(join(d, n)).isDirectory() ? files(join(d, n)) : [join(d, n)]));
    for (const f of [...files(runEnv.HARNESS_LAB_DATA_DIR!), ...files(dir)])
      assert.ok(!readFileSync(f, 'utf8').includes(adminKey), `${f} holds the admin key`);

    const apps = kc.makeApiClient(k8s.AppsV1Api);
    const batchApi = kc.makeApiClient(k8s.BatchV1Api);
    // What the server made for its rollouts, besides the run's own objects: its batch's capture proxy.
    const deployments = async () => (await apps.listNamespacedDeployment({ namespace: NS })).items.map((d) => d.metadata!.name!);
    const serverMade = (await deployments()).filter((n) => n !== `${RUN}-serve`);
    assert.equal(serverMade.length, 1, `the server's capture proxy runs beside it: ${(await deployments()).join(', ')}`);
    const proxyLabels = (await apps.readNamespacedDeployment({ namespace: NS, name: serverMade[0]! })).metadata?.labels ?? {};
    assert.equal(proxyLabels['harness-lab/owner-run'], RUN, 'what the server makes is labelled with its run (train cancel sweeps it)');
    const serverMadeServices = (await core.listNamespacedService({ namespace: NS })).items
      .map((x) => x.metadata!.name!)
      .filter((n) => n !== `${RUN}-serve`);
    assert.ok(serverMadeServices.length, "the server's capture proxy has its Service");

    const cancel = await cli(['train', 'cancel', RUN, '--namespace', NS], { env: runEnv, timeoutMs: 300_000 });
    assert.equal(cancel.code, 0, cancel.stderr);
    assert.match(cancel.stdout, /deleted Job train-serve\/trl-e2e/);
    assert.match(cancel.stdout, /removed Deployment trl-e2e-serve, Service trl-e2e-serve, Secret trl-e2e-serve, ConfigMap /);
    // The run's own objects are gone, and what the server made: the double deletes a pod as a cluster
    // does (SIGTERM, then SIGKILL after its grace period), and the server, stopping on SIGTERM, removed
    // its capture proxy before its pod went.
    assert.deepEqual(await deployments(), [], 'no Deployment in the namespace: neither the server nor its capture proxy');
    assert.deepEqual(
      (await core.listNamespacedService({ namespace: NS })).items.map((x) => x.metadata?.name),
      [],
      'no Service in the namespace',
    );
    assert.deepEqual(
      (await core.listNamespacedSecret({ namespace: NS })).items.map((x) => x.metadata?.name),
      [],
      "no Secret in the namespace (the server's key, its proxy's key)",
    );
    assert.deepEqual(
      (await apps.listNamespacedDeployment({ namespace: NS, labelSelector: 'harness-lab/run' })).items.map((d) => d.metadata?.name),
      [],
      'no Deployment of the run',
    );
    assert.deepEqual(
      (await core.listNamespacedService({ namespace: NS, labelSelector: 'harness-lab/run' })).items.map((d) => d.metadata?.name),
      [],
    );
    assert.deepEqual(
      (await core.listNamespacedSecret({ namespace: NS, labelSelector: 'harness-lab/run' })).items.map((d) => d.metadata?.name),
      [],
    );
    assert.deepEqual(
      (await core.listNamespacedConfigMap({ namespace: NS, labelSelector: 'harness-lab/run' })).items.map((d) => d.metadata?.name),
      [],
    );
    assert.deepEqual(
      (await core.listNamespacedPersistentVolumeClaim({ namespace: NS, labelSelector: 'harness-lab/run' })).items.map(
        (d) => d.metadata?.name,
      ),
      [],
    );
    assert.deepEqual(
      (await core.listNamespacedServiceAccount({ namespace: NS })).items.map((d) => d.metadata?.name),
      [],
    );
    assert.deepEqual(
      (await rbac.listNamespacedRole({ namespace: NS })).items.map((d) => d.metadata?.name),
      [],
    );
    assert.deepEqual(
      (await rbac.listNamespacedRoleBinding({ namespace: NS })).items.map((d) => d.metadata?.name),
      [],
    );
    await waitFor(
      'no Jobs',
      async () => ((await batchApi.listNamespacedJob({ namespace: NS })).items.length === 0 ? true : undefined),
      60_000,
    );
    await waitFor(
      'no pods',
      async () =>
        (await core.listNamespacedPod({ namespace: NS, labelSelector: 'harness-lab/run' })).items.length === 0 ? true : undefined,
      120_000,
    );
    await waitFor(
      'no containers',
      async () =>
        (await cluster.node.containers()).some(
          (x) => x.Labels['io.kubernetes.pod.namespace'] === NS && x.Labels['k8s.label/harness-lab/run'],
        )
          ? undefined
          : true,
      120_000,
    );
  });
});
