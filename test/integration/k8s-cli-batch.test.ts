// `harness-lab batch submit --backend k8s` from the CLI, end to end on the API server double: a
// local proxy image (base-node + the CLI bundle, built with dockerode from a tar context) runs the
// in-cluster proxy, the reference harness `react` runs one task with group size 2 as real
// containers, `batch status --json` shows both rollouts classified with rewards; the lab tears the
// finished batch down (no Job, Deployment, Service, Secret, ConfigMap, pod or container is left) and
// `batch delete` removes its directory.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import type Docker from 'dockerode';
import type { KubeDouble } from '../k8s-double/index.js';
import {
  MINTED_KEY,
  assertNoKeysInFiles,
  assertNoKeysSent,
  buildProxyImage,
  clusterWithNamespace,
  engineFor,
  proxyAdminKeys,
  taskCopy,
  type EngineInNamespace,
} from './k8s-fixtures.js';
import { cli, dockerReady, waitFor } from './sandbox-fixtures.js';

const NS = 'cli-batch';
const PROXY_IMAGE = `harness-lab/k8s-proxy-test:${process.pid}`;
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

describe('batch submit --backend k8s from the CLI on the double', { timeout: 900_000 }, () => {
  let docker: Docker;
  let cluster: KubeDouble;
  let engine: EngineInNamespace;
  let core: k8s.CoreV1Api;
  let batchApi: k8s.BatchV1Api;
  const out = join(mkdtempSync(join(tmpdir(), 'hl-k8s-cli-')), 'batch');
  const ENGINE_KEY = 'engine-secret-k8s-7c2d9e4b1a';
  const env = () => ({
    KUBECONFIG: cluster.kubeconfig,
    HARNESS_LAB_K8S_PROXY_IMAGE: PROXY_IMAGE,
    HARNESS_LAB_K8S_HARNESS_FROM: 'hostPath',
    HARNESS_LAB_ENGINE_API_KEY: ENGINE_KEY,
  });

  before(async () => {
    docker = await dockerReady();
    await buildProxyImage(docker, PROXY_IMAGE);
    ({ cluster, core, batchApi } = await clusterWithNamespace(NS));
    const policyFile = join(mkdtempSync(join(tmpdir(), 'hl-k8s-cli-policy-')), 'policy.json');
    writeFileSync(policyFile, JSON.stringify(POLICY));
    engine = await engineFor(cluster, NS, policyFile);
  });

  after(async () => {
    await engine?.engine.close();
    await cluster?.close();
    await docker
      ?.getImage(PROXY_IMAGE)
      .remove({ force: true })
      .catch(() => undefined);
  });

  it('submit runs the group; status --json classifies both rollouts with rewards; the finished batch is torn down; delete removes it', async () => {
    const task = taskCopy('hello-file', {});
    const r = await cli(
      [
        'batch',
        'submit',
        '--tasks',
        task,
        '--harness',
        'react',
        '--group-size',
        '2',
        '--backend',
        'k8s',
        '--context',
        'double',
        '--namespace',
        NS,
        '--engine-url',
        `${engine.url}/v1`,
        '--model',
        engine.engine.model,
        '--timeout',
        '120',
        '--out',
        out,
      ],
      { env: env() },
    );
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    // The proxy ran from the image, as `harness-lab proxy`; the Jobs came from the CLI.
    const dep = cluster.api.requests('POST', new RegExp(`/namespaces/${NS}/deployments$`)).map((x) => x.body as k8s.V1Deployment)[0]!;
    assert.equal(dep.spec?.template.spec?.containers[0]?.image, PROXY_IMAGE);
    assert.equal(dep.spec?.template.spec?.containers[0]?.command?.[0], 'harness-lab');
    const jobs = cluster.api.requests('POST', new RegExp(`/apis/batch/v1/namespaces/${NS}/jobs$`));
    assert.equal(jobs.length, 2, 'one Job per rollout');

    const st = await cli(['batch', 'status', out, '--json'], { env: env() });
    assert.equal(st.code, 0, st.stderr);
    const status = JSON.parse(st.stdout) as {
      backend: string;
      groups: {
        size: number;
        rewards: number[];
        rollouts: { id: string; class: string; reward: number | null; duration_ms: number | null }[];
      }[];
    };
    assert.equal(status.backend, 'k8s');
    assert.equal(status.groups.length, 1);
    const g = status.groups[0]!;
    assert.equal(g.rollouts.length, 2);
    for (const ro of g.rollouts) {
      assert.equal(ro.class, 'completed', JSON.stringify(ro));
      assert.equal(ro.reward, 1);
      assert.ok((ro.duration_ms ?? 0) > 0);
    }
    assert.deepEqual(g.rewards, [1, 1]);

    // No key in any object the lab sent to the cluster (Secrets' data aside) or any file it wrote.
    const admin = proxyAdminKeys(cluster);
    assert.equal(admin.length, 1, 'the proxy Secret carried the admin key');
    const keyed = cluster.api
      .requests('POST', new RegExp(`/namespaces/${NS}/secrets$`))
      .map((x) => x.body as { metadata: { name: string }; stringData: Record<string, string> });
    assert.equal(
      keyed.filter((x) => MINTED_KEY.test(x.stringData['session-key'] ?? '')).length,
      2,
      'one attempt Secret per rollout held its minted key',
    );
    assert.equal(
      keyed.find((x) => x.stringData['engine-api-key'])?.stringData['engine-api-key'],
      ENGINE_KEY,
      'the engine key went in the proxy Secret',
    );
    assert.ok(assertNoKeysSent(cluster, [MINTED_KEY, admin[0]!, ENGINE_KEY]) > 10);
    assert.ok(assertNoKeysInFiles(out, [MINTED_KEY, admin[0]!, ENGINE_KEY]) > 5);
    for (const text of [r.stdout, r.stderr, st.stdout])
      for (const k of [MINTED_KEY, admin[0]!, ENGINE_KEY])
        assert.ok(!(typeof k === 'string' ? text.includes(k) : k.test(text)), 'no key in the CLI output');

    const c = await cli(['batch', 'cancel', out], { env: env() });
    assert.equal(c.code, 0, c.stderr);
    assert.match(c.stdout + c.stderr, /has finished/);
    assert.match(r.stdout, /tore down what batch \S+ left on k8s/, 'the lab tore the finished batch down');
    assert.equal((await batchApi.listNamespacedJob({ namespace: NS })).items.length, 0, 'no Job left');
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(cluster.kubeconfig);
    assert.equal(
      (await kc.makeApiClient(k8s.AppsV1Api).listNamespacedDeployment({ namespace: NS })).items.length,
      0,
      "the finished batch's proxy Deployment was removed",
    );
    assert.equal((await core.listNamespacedService({ namespace: NS, labelSelector: 'harness-lab/batch' })).items.length, 0, 'its Service');
    assert.equal((await core.listNamespacedSecret({ namespace: NS, labelSelector: 'harness-lab/batch' })).items.length, 0, 'its Secret');
    assert.equal((await core.listNamespacedConfigMap({ namespace: NS, labelSelector: 'harness-lab/batch' })).items.length, 0);
    const t = await cli(['batch', 'teardown', out], { env: env() });
    assert.equal(t.code, 0, t.stderr);
    assert.match(t.stdout, /tore down batch \S+ on k8s: 0 Job\(s\) or container\(s\) removed/);
    await waitFor('no pods', async () => ((await core.listNamespacedPod({ namespace: NS })).items.length === 0 ? true : undefined), 60_000);
    await waitFor(
      'no containers',
      async () => ((await cluster.node.containers()).some((x) => x.Labels['io.kubernetes.pod.namespace'] === NS) ? undefined : true),
      60_000,
    );
    const d = await cli(['batch', 'delete', out], { env: env() });
    assert.equal(d.code, 0, d.stderr);
    assert.ok(!existsSync(out), 'batch delete removed the directory');
  });
});
