// `harness-lab train submit|status|logs|cancel|list` against the Kubernetes API server double: without
// the operators' CRDs a run is a plain batch/v1 Job that the double's Docker node really runs (a node
// script reading an export from a hostPath volume, its log streamed by `train logs`); with the RayJob
// and TrainJob CRDs registered, runs are those objects, and the test plays the operator by writing
// their status subresource while `train status --watch` follows it.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { loadCluster } from '../../src/cluster/kube.js';
import { RUN_LABEL, listRuns, runsDir } from '../../src/training/trainer-jobs.js';
import type { KubeDouble } from '../k8s-double/index.js';
import { testCluster } from './k8s-fixtures.js';
import { spawn } from 'node:child_process';
import { REPO, cli, waitFor } from './sandbox-fixtures.js';

const NS = 'train';
const ROWS = 7;

/** A CLI run whose stdout is read as it comes (to act on the cluster after the watch is up). */
function streamingCli(args: string[], env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, ['--import', 'tsx', join(REPO, 'src', 'cli', 'main.ts'), ...args], {
    cwd: REPO,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on('close', (code) => resolve({ code, stdout, stderr })),
  );
  return {
    done,
    printed: (re: RegExp) => waitFor(`output matching ${re}`, async () => (re.test(stdout) ? true : undefined), 60_000),
    kill: () => child.kill(),
  };
}

function spawnCli(args: string[], env: NodeJS.ProcessEnv) {
  return cli(args, { env, timeoutMs: 180_000 });
}

describe('train submit/status/logs/cancel against the API server double', { timeout: 600_000 }, () => {
  let cluster: KubeDouble;
  let kc: k8s.KubeConfig;
  let env: NodeJS.ProcessEnv;
  let dir: string;
  let dataDir: string;
  const config = (name: string, body: string) => {
    const f = join(dir, name);
    writeFileSync(f, body);
    return f;
  };

  before(async () => {
    cluster = await testCluster();
    kc = new k8s.KubeConfig();
    kc.loadFromFile(cluster.kubeconfig);
    await kc.makeApiClient(k8s.CoreV1Api).createNamespace({ body: { metadata: { name: NS } } });
    dir = mkdtempSync(join(tmpdir(), 'hl-train-'));
    dataDir = join(dir, 'lab');
    env = { KUBECONFIG: cluster.kubeconfig, HARNESS_LAB_DATA_DIR: dataDir };
    // An export on the "node": ROWS JSONL rows, mounted by hostPath.
    const exportDir = join(dir, 'exports');
    await import('node:fs').then((fs) => fs.mkdirSync(join(exportDir, 'batch-01'), { recursive: true }));
    writeFileSync(
      join(exportDir, 'batch-01', 'trl.jsonl'),
      Array.from({ length: ROWS }, (_, i) =>
        JSON.stringify({ prompt_ids: [1, 2], completion_ids: [3 + i], logprobs: [-0.5], env_mask: [1], reward: i % 2 }),
      ).join('\n') + '\n',
    );
  });
  after(async () => cluster?.close());

  it('without the operator CRDs, auto submits a plain Job that reads the export from a hostPath and `train logs` streams its output', async () => {
    const script =
      "const f=process.env.HARNESS_LAB_EXPORT;const rows=require('fs').readFileSync(f,'utf8').split('\\n').filter(Boolean).map(JSON.parse);console.log('export '+f+' rows='+rows.length+' reward_sum='+rows.reduce((s,r)=>s+r.reward,0));";
    const file = config(
      'trl-job.yaml',
      `name: trl-plain\nimage: harness-lab/base-node:bookworm\ncommand: [node, -e, ${JSON.stringify(script)}]\ndata:\n  source: export\n  file: batch-01/trl.jsonl\n  volume: {hostPath: {path: ${join(dir, 'exports')}}}\n`,
    );
    const sub = await spawnCli(['train', 'submit', '--trainer', 'trl', '--config', file, '--namespace', NS], env);
    assert.equal(sub.code, 0, sub.stderr);
    assert.match(
      sub.stdout,
      /created Job train\/trl-plain in kube context "double" \(the cluster has no trainjobs\.trainer\.kubeflow\.org CRD/,
    );
    const rec = JSON.parse(readFileSync(join(runsDir({ HARNESS_LAB_DATA_DIR: dataDir }), 'trl-plain.json'), 'utf8')) as {
      kind: string;
      namespace: string;
    };
    assert.deepEqual([rec.kind, rec.namespace], ['Job', NS]);
    const job = await kc.makeApiClient(k8s.BatchV1Api).readNamespacedJob({ namespace: NS, name: 'trl-plain' });
    assert.equal(job.spec?.backoffLimit, 0);
    assert.equal(job.metadata?.labels?.[RUN_LABEL], 'trl-plain');
    assert.equal(job.spec?.template.spec?.volumes?.[0]?.hostPath?.path, join(dir, 'exports'));

    const logs = await spawnCli(['train', 'logs', 'trl-plain', '--namespace', NS], env);
    assert.equal(logs.code, 0, logs.stderr);
    assert.equal(logs.stdout.trim(), `export /data/batch-01/trl.jsonl rows=${ROWS} reward_sum=3`);

    const st = await spawnCli(['train', 'status', 'trl-plain', '--namespace', NS, '--watch'], env);
    assert.equal(st.code, 0, st.stderr);
    assert.match(st.stdout.trim().split('\n').at(-1)!, /Job trl-plain: Succeeded \(Complete/);
    const json = await spawnCli(['train', 'status', 'trl-plain', '--namespace', NS, '--json'], env);
    assert.deepEqual((({ kind, phase, trainer }) => ({ kind, phase, trainer }))(JSON.parse(json.stdout) as Record<string, unknown>), {
      kind: 'Job',
      phase: 'Succeeded',
      trainer: 'trl',
    });

    const runs = await listRuns(loadCluster({ kubeconfig: cluster.kubeconfig, namespace: NS }));
    assert.deepEqual(
      runs.map((r) => [r.name, r.trainer, r.kind, r.phase]),
      [['trl-plain', 'trl', 'Job', 'Succeeded']],
    );

    const c = await spawnCli(['train', 'cancel', 'trl-plain', '--namespace', NS], env);
    assert.equal(c.code, 0, c.stderr);
    assert.match(c.stdout, /deleted Job train\/trl-plain/);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    await waitFor(
      'the Job and its pod gone (Background)',
      async () => {
        const jobs = await kc.makeApiClient(k8s.BatchV1Api).listNamespacedJob({ namespace: NS, labelSelector: `${RUN_LABEL}=trl-plain` });
        const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: `${RUN_LABEL}=trl-plain` });
        return jobs.items.length + pods.items.length === 0 ? true : undefined;
      },
      30_000,
    );
    assert.equal(existsSync(join(dataDir, 'runs', 'trl-plain.json')), false, 'cancel forgets the local record');
    const again = await spawnCli(['train', 'status', 'trl-plain', '--namespace', NS], env);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /training run "trl-plain" is not in namespace "train" of kube context "double"/);
  });

  describe('with the RayJob and TrainJob CRDs registered', () => {
    let custom: k8s.CustomObjectsApi;
    before(async () => {
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
          (await ext.readCustomResourceDefinition({ name: 'trainjobs.trainer.kubeflow.org' })).status?.conditions?.some(
            (c) => c.type === 'Established' && c.status === 'True',
          )
            ? true
            : undefined,
        10_000,
      );
      custom = kc.makeApiClient(k8s.CustomObjectsApi);
    });

    const setStatus = (group: string, version: string, plural: string, name: string, status: unknown) =>
      custom.patchNamespacedCustomObjectStatus(
        { group, version, namespace: NS, plural, name, body: { status } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );

    it('veRL becomes a RayJob; `train status --watch` follows the status the operator writes until SUCCEEDED', async () => {
      const file = config(
        'verl.yaml',
        'name: verl-grpo\nimage: verlai/verl:latest\ncommand: [python3, -m, verl.trainer.main_ppo]\nargs: [algorithm.adv_estimator=grpo]\nnumNodes: 2\ngpusPerNode: 8\ndata: {source: rollout-server, url: "http://harness-lab-serve.train.svc:8200"}\n',
      );
      const sub = await spawnCli(['train', 'submit', '--trainer', 'verl', '--config', file, '--namespace', NS], env);
      assert.equal(sub.code, 0, sub.stderr);
      assert.match(sub.stdout, /created RayJob train\/verl-grpo .*serves rayjobs\.ray\.io/);
      const rj = (await custom.getNamespacedCustomObject({
        group: 'ray.io',
        version: 'v1',
        namespace: NS,
        plural: 'rayjobs',
        name: 'verl-grpo',
      })) as {
        spec: Record<string, unknown> & {
          rayClusterSpec: {
            workerGroupSpecs: {
              replicas: number;
              template: { spec: { containers: { env: { name: string; value: string }[]; resources: unknown }[] } };
            }[];
          };
        };
      };
      assert.equal(rj.spec.entrypoint, 'python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo');
      assert.equal(rj.spec.shutdownAfterJobFinishes, true);
      assert.equal(rj.spec.backoffLimit, 0);
      const worker = rj.spec.rayClusterSpec.workerGroupSpecs[0]!;
      assert.equal(worker.replicas, 2);
      assert.deepEqual(worker.template.spec.containers[0]!.resources, { limits: { 'nvidia.com/gpu': '8' } });
      assert.deepEqual(worker.template.spec.containers[0]!.env, [
        { name: 'HARNESS_LAB_ROLLOUT_SERVER_URL', value: 'http://harness-lab-serve.train.svc:8200' },
      ]);

      const watching = streamingCli(['train', 'status', 'verl-grpo', '--namespace', NS, '--watch'], env);
      // Play KubeRay once the watch has reported the first state: Initializing, Running, then SUCCEEDED.
      await watching.printed(/verl-grpo: Pending/);
      await setStatus('ray.io', 'v1', 'rayjobs', 'verl-grpo', { jobDeploymentStatus: 'Initializing' });
      await watching.printed(/deployment Initializing/);
      await setStatus('ray.io', 'v1', 'rayjobs', 'verl-grpo', { jobDeploymentStatus: 'Running', jobStatus: 'RUNNING' });
      await watching.printed(/verl-grpo: Running/);
      await setStatus('ray.io', 'v1', 'rayjobs', 'verl-grpo', { jobDeploymentStatus: 'Complete', jobStatus: 'SUCCEEDED' });
      const st = await watching.done;
      const watched = st.stdout;
      assert.equal(st.code, 0, st.stderr);
      const phases = watched
        .trim()
        .split('\n')
        .map((l) => l.replace(/^\S+\s+/, ''));
      assert.equal(phases.at(-1), 'RayJob verl-grpo: Succeeded (deployment Complete, job SUCCEEDED)');
      assert.ok(phases.includes('RayJob verl-grpo: Running (deployment Running, job RUNNING)'), watched);

      const c = await spawnCli(['train', 'cancel', 'verl-grpo', '--namespace', NS], env);
      assert.equal(c.code, 0, c.stderr);
      const gone = await custom
        .getNamespacedCustomObject({ group: 'ray.io', version: 'v1', namespace: NS, plural: 'rayjobs', name: 'verl-grpo' })
        .catch((e: unknown) => e);
      assert.equal((gone as k8s.ApiException<unknown>).code, 404);
    });

    it('TRL becomes a TrainJob with runtimeRef and the export volume; a Failed condition is status exit 1', async () => {
      // A key in plain env is refused, naming the file and the field; secretEnv takes it from a Secret.
      const leaky = config(
        'trl-leaky.yaml',
        'name: trl-leaky\nimage: trl:latest\ncommand: [accelerate, launch]\nenv: {HF_TOKEN: hf_0123456789abcdef}\ndata: {source: rollout-server, url: "http://serve:8200"}\n',
      );
      const refused = await spawnCli(['train', 'submit', '--trainer', 'trl', '--config', leaky, '--namespace', NS], env);
      assert.equal(refused.code, 1);
      assert.match(
        refused.stderr,
        /trl-leaky\.yaml: env\.HF_TOKEN: looks like a credential: put it in a Kubernetes Secret and name it under secretEnv/,
      );
      assert.ok(!cluster.api.received.some((r) => JSON.stringify(r.body ?? '').includes('hf_0123456789abcdef')), 'nothing was sent');
      const file = config(
        'trl.yaml',
        `name: trl-grpo\nimage: trl:latest\ncommand: [accelerate, launch]\nargs: [-m, trl.scripts.grpo]\nnumNodes: 2\ngpusPerNode: 4\nruntimeRef: {name: torch-distributed}\nsecretEnv: {HF_TOKEN: {secret: hf-credentials, key: token}}\ndata:\n  source: export\n  file: batch-01/trl.jsonl\n  volume: {pvc: {claimName: rollouts}}\n`,
      );
      const sub = await spawnCli(['train', 'submit', '--trainer', 'trl', '--config', file, '--namespace', NS], env);
      assert.equal(sub.code, 0, sub.stderr);
      const tj = (await custom.getNamespacedCustomObject({
        group: 'trainer.kubeflow.org',
        version: 'v1alpha1',
        namespace: NS,
        plural: 'trainjobs',
        name: 'trl-grpo',
      })) as {
        metadata: { labels: Record<string, string> };
        spec: {
          runtimeRef: unknown;
          trainer: { numNodes: number; resourcesPerNode: unknown; env: unknown };
          podTemplateOverrides: { spec: { volumes: unknown[] } }[];
        };
      };
      assert.deepEqual(tj.spec.runtimeRef, { name: 'torch-distributed', kind: 'ClusterTrainingRuntime', apiGroup: 'trainer.kubeflow.org' });
      assert.equal(tj.spec.trainer.numNodes, 2);
      assert.deepEqual(tj.spec.trainer.resourcesPerNode, { limits: { 'nvidia.com/gpu': '4' } });
      assert.deepEqual(tj.spec.trainer.env, [
        { name: 'HF_TOKEN', valueFrom: { secretKeyRef: { name: 'hf-credentials', key: 'token' } } },
        { name: 'HARNESS_LAB_EXPORT', value: '/data/batch-01/trl.jsonl' },
      ]);
      assert.deepEqual(tj.spec.podTemplateOverrides[0]!.spec.volumes, [
        { name: 'export', persistentVolumeClaim: { claimName: 'rollouts', readOnly: true } },
      ]);
      assert.equal(tj.metadata.labels[RUN_LABEL], 'trl-grpo');

      const pending = await spawnCli(['train', 'status', 'trl-grpo', '--namespace', NS], env);
      assert.equal(pending.code, 0, pending.stderr);
      assert.equal(pending.stdout.trim(), 'TrainJob train/trl-grpo (trl): Pending');
      await setStatus('trainer.kubeflow.org', 'v1alpha1', 'trainjobs', 'trl-grpo', {
        conditions: [{ type: 'Failed', status: 'True', reason: 'JobSetFailed', message: 'node-0 OOMKilled' }],
      });
      const failed = await spawnCli(['train', 'status', 'trl-grpo', '--namespace', NS], env);
      assert.equal(failed.code, 1);
      assert.equal(failed.stdout.trim(), 'TrainJob train/trl-grpo (trl): Failed (Failed (JobSetFailed): node-0 OOMKilled)');

      const list = await spawnCli(['train', 'list', '--namespace', NS, '--json'], env);
      assert.equal(list.code, 0, list.stderr);
      assert.deepEqual(
        (JSON.parse(list.stdout) as { name: string; kind: string; phase: string }[]).map((r) => `${r.kind}/${r.name}:${r.phase}`),
        ['TrainJob/trl-grpo:Failed'],
      );

      const c = await spawnCli(['train', 'cancel', 'trl-grpo', '--namespace', NS], env);
      assert.equal(c.code, 0, c.stderr);
      assert.match(c.stdout, /deleted TrainJob train\/trl-grpo/);
      const c2 = await spawnCli(['train', 'cancel', 'trl-grpo', '--namespace', NS], env);
      assert.equal(c2.code, 1, 'no record and nothing labelled: not found');
      assert.match(c2.stderr, /is not in namespace "train"/);
    });

    it('--operator none forces a plain Job even where the CRD exists', async () => {
      const file = config(
        'verl-one.yaml',
        'name: verl-plain\nimage: harness-lab/base-node:bookworm\ncommand: [node, -e, "console.log(process.env.HARNESS_LAB_ROLLOUT_SERVER_URL)"]\ndata: {source: rollout-server, url: "http://127.0.0.1:8200"}\n',
      );
      const sub = await spawnCli(['train', 'submit', '--trainer', 'verl', '--config', file, '--namespace', NS, '--operator', 'none'], env);
      assert.equal(sub.code, 0, sub.stderr);
      assert.match(sub.stdout, /created Job train\/verl-plain .*\(--operator none\)/);
      const logs = await spawnCli(['train', 'logs', 'verl-plain', '--namespace', NS], env);
      assert.equal(logs.code, 0, logs.stderr);
      assert.equal(logs.stdout.trim(), 'http://127.0.0.1:8200');
      assert.equal((await spawnCli(['train', 'cancel', 'verl-plain', '--namespace', NS], env)).code, 0);
    });
  });
});
