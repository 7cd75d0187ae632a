// `harness-lab serve --backend k8s` for real: a serve process on the Kubernetes API server double
// (pods run as real Docker containers; the capture proxy runs in the cluster from a local
// harness-lab image, reached through a port-forward), a policy engine on the host behind a front
// that records what it was asked and what it answered, reachable from the namespace through a
// relay. A client sends OpenEnv's frames exactly as TRL's HarborSessionFactory does (reset, step
// call_tool run_rollout, close over /ws) for a GRPO group of 3 rollouts of hello-file in parallel:
// every member comes back ok with reward 1, turns whose token ids are exactly the ones the engine
// sampled (prompt and completion) with the trainer's pinned sampling on every engine call; the
// finished rollouts leave no Job, pod or container, and a stopped server leaves nothing at all.
/* eslint-disable @typescript-eslint/no-explicit-any -- wire JSON from the server under test, checked field by field as a Python client reads it */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import type Docker from 'dockerode';
import { TrainingTurnSchema } from '../../src/capture/trace.js';
import { startPolicyEngine, type PolicyEngine } from '../../src/sandbox/policy-engine.js';
import type { KubeDouble } from '../k8s-double/index.js';
import {
  MINTED_KEY,
  assertNoKeysInFiles,
  assertNoKeysSent,
  buildProxyImage,
  clusterWithNamespace,
  proxyAdminKeys,
  taskCopy,
} from './k8s-fixtures.js';
import { dockerReady, waitFor } from './sandbox-fixtures.js';
import {
  asTrainingTurn,
  recordingFront,
  rolloutResult,
  startServe,
  stepFrame,
  tempDir,
  wsSession,
  type ServeProcess,
  runRolloutArgs,
} from './serve-fixtures.js';

const NS = 'serve-k8s';
const PROXY_IMAGE = `harness-lab/k8s-proxy-test:serve-${process.pid}`;
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

describe('harness-lab serve --backend k8s on the API server double, driven by OpenEnv frames', { timeout: 900_000 }, () => {
  let docker: Docker;
  let cluster: KubeDouble;
  let engine: PolicyEngine;
  let front: Awaited<ReturnType<typeof recordingFront>>;
  let core: k8s.CoreV1Api;
  let batchApi: k8s.BatchV1Api;
  let apps: k8s.AppsV1Api;
  let serve: ServeProcess | undefined;
  const stateDir = tempDir('hl-serve-k8s-state-');

  before(async () => {
    docker = await dockerReady();
    await buildProxyImage(docker, PROXY_IMAGE);
    ({ cluster, core, batchApi, apps } = await clusterWithNamespace(NS));
    const policyFile = join(mkdtempSync(join(tmpdir(), 'hl-serve-k8s-policy-')), 'policy.json');
    writeFileSync(policyFile, JSON.stringify(POLICY));
    engine = await startPolicyEngine(policyFile, 'fake');
    front = await recordingFront(engine.url);
    // The in-cluster proxy reaches the front at the same 127.0.0.1 port inside the namespace.
    await cluster.node.exposeHostPort(NS, Number(new URL(front.url).port));
  });

  after(async () => {
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGTERM');
      await serve.exited;
    }
    front?.server.close();
    await engine?.close();
    await cluster?.close();
    await docker
      ?.getImage(PROXY_IMAGE)
      .remove({ force: true })
      .catch(() => undefined);
  });

  it("a group of 3 over /ws (reset, step run_rollout, close): rewards, the engine's exact token ids, pinned sampling, no pod left", async () => {
    const task = taskCopy('hello-file', {});
    serve = await startServe(
      [
        '--dataset',
        `train=${task}`,
        '--backend',
        'k8s',
        '--context',
        'double',
        '--namespace',
        NS,
        '--max-concurrent',
        String(GROUP),
        '--parallel',
        String(GROUP),
        '--state-dir',
        stateDir,
      ],
      {
        KUBECONFIG: cluster.kubeconfig,
        HARNESS_LAB_K8S_PROXY_IMAGE: PROXY_IMAGE,
        HARNESS_LAB_K8S_HARNESS_FROM: 'hostPath',
      },
    );
    const args = runRolloutArgs({ llm_url: `${front.url}/v1`, model: engine.model, sampling: PINNED });
    const outcomes = await Promise.all(
      Array.from({ length: GROUP }, () => wsSession(serve!.url, [{ type: 'reset', data: {} }, stepFrame(args)])),
    );
    const results = outcomes.map((o) => {
      assert.equal(o.closeCode, 1000, 'the session closed normally after its result');
      assert.equal(o.frames[0].type, 'observation', 'reset answers with an observation');
      return rolloutResult(o.frames[1]);
    });
    for (const r of results) {
      assert.equal(r.ok, true, `${r.error}\n${serve.stderr().slice(-3000)}`);
      assert.equal(r.reward, 1);
      assert.equal(r.reward_key, 'reward');
      assert.equal(r.capture_level, 'tokens');
      assert.equal(r.task_id, 'harness-lab/hello-file');
      assert.ok(r.n_trainable_tokens > 0);
      const kept = r.turns.filter((t: any) => t.role === 'agent' && !t.discarded && t.completion_token_ids.length > 0);
      assert.ok(kept.length >= 2, `hello-file takes a tool call and an answer: ${kept.length} trainable turn(s)`);
      for (const t of kept) {
        assert.equal(t.trainable, true);
        assert.equal(t.loss_mask.length, t.prompt_token_ids.length + t.completion_token_ids.length);
        assert.ok(
          t.loss_mask.slice(0, t.prompt_token_ids.length).every((m: number) => m === 0),
          'prompt part of the mask is 0',
        );
        assert.equal(t.sampling_params.temperature, PINNED.temperature);
        // Exactly what the engine answered for this prompt: the same prompt ids, completion ids and logprobs.
        const answer = front.answers.find((a) => JSON.stringify(a.prompt_token_ids) === JSON.stringify(t.prompt_token_ids));
        assert.ok(answer, `the engine answered a call with the prompt of turn ${t.node_id}`);
        assert.deepEqual(t.completion_token_ids, answer.choices[0].token_ids);
        assert.deepEqual(
          t.per_token_logps,
          answer.choices[0].logprobs.content.map((c: any) => c.logprob),
        );
        const parsed = TrainingTurnSchema.safeParse(asTrainingTurn(t));
        assert.ok(parsed.success, parsed.success ? '' : JSON.stringify(parsed.error.issues));
      }
    }
    assert.equal(new Set(results.map((r) => r.session_id)).size, GROUP, 'one capture session per member');
    const seen = front.bodies.filter((b) => JSON.stringify(b.messages ?? '').includes('hello.txt'));
    assert.ok(seen.length >= 2 * GROUP, `the engine saw ${seen.length} harness calls`);
    for (const b of seen) for (const [k, v] of Object.entries(PINNED)) assert.equal(b[k], v, `engine saw ${k}=${b[k]}`);

    // No key in any object serve sent to the cluster (Secrets' data aside) or any file in its state dir.
    const admin = proxyAdminKeys(cluster);
    assert.equal(admin.length, 1);
    assert.ok(assertNoKeysSent(cluster, [MINTED_KEY, admin[0]!]) > 10);
    assert.ok(assertNoKeysInFiles(stateDir, [MINTED_KEY, admin[0]!]) > 0);

    // A finished rollout leaves nothing running in the cluster (the server keeps only its proxy).
    const rolloutPods = async () =>
      (await core.listNamespacedPod({ namespace: NS, labelSelector: 'harness-lab/role!=proxy' })).items.map((p) => p.metadata!.name!);
    assert.deepEqual(
      (await batchApi.listNamespacedJob({ namespace: NS })).items.map((j) => j.metadata!.name),
      [],
      'no Job left',
    );
    await waitFor('no rollout pods', async () => ((await rolloutPods()).length === 0 ? true : undefined), 60_000);

    // A stopped server leaves nothing at all: proxy, Secret, ConfigMaps, pods, containers.
    serve.child.kill('SIGTERM');
    assert.equal((await serve.exited).code, 0, serve.stderr().slice(-3000));
    assert.equal((await apps.listNamespacedDeployment({ namespace: NS })).items.length, 0, 'the proxy Deployment was removed');
    assert.equal((await core.listNamespacedConfigMap({ namespace: NS, labelSelector: 'harness-lab/batch' })).items.length, 0);
    await waitFor('no pods', async () => ((await core.listNamespacedPod({ namespace: NS })).items.length === 0 ? true : undefined), 60_000);
    await waitFor(
      'no containers',
      async () => ((await cluster.node.containers()).some((x) => x.Labels['io.kubernetes.pod.namespace'] === NS) ? undefined : true),
      60_000,
    );
  });
});
