// `harness-lab train submit --dry-run` prints the validated manifest and sends nothing; a bad config
// names the file and the field; usage errors exit 2. No cluster: KUBECONFIG names nothing.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { loadYaml } from '@kubernetes/client-node';
import { REPO, cli } from './sandbox-fixtures.js';

const env = { KUBECONFIG: '/nonexistent/kubeconfig' };
const EX = join(REPO, 'examples', 'training');
const tmp = () => mkdtempSync(join(tmpdir(), 'hl-train-cli-'));

describe('harness-lab train (no cluster)', { timeout: 120_000 }, () => {
  it('submit --dry-run -o json: veRL is a RayJob with shutdownAfterJobFinishes and backoffLimit 0', async () => {
    const r = await cli(
      ['train', 'submit', '--trainer', 'verl', '--config', join(EX, 'verl-grpo.yaml'), '--namespace', 'rl', '--dry-run', '-o', 'json'],
      { env },
    );
    assert.equal(r.code, 0, r.stderr);
    const o = JSON.parse(r.stdout) as {
      apiVersion: string;
      kind: string;
      metadata: { name: string; namespace: string; labels: Record<string, string> };
      spec: Record<string, unknown> & { rayClusterSpec: { workerGroupSpecs: { replicas: number }[] } };
    };
    assert.deepEqual([o.apiVersion, o.kind, o.metadata.namespace, o.metadata.name], ['ray.io/v1', 'RayJob', 'rl', 'verl-grpo-01']);
    assert.equal(o.spec.shutdownAfterJobFinishes, true);
    assert.equal(o.spec.backoffLimit, 0);
    assert.equal(o.spec.entrypoint, 'python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=8');
    assert.equal(o.spec.rayClusterSpec.workerGroupSpecs[0]!.replicas, 2);
    assert.equal(o.metadata.labels['harness-lab/run'], 'verl-grpo-01');
  });

  it('submit --dry-run -o yaml: TRL is a TrainJob; --operator none a batch/v1 Job', async () => {
    const r = await cli(['train', 'submit', '--trainer', 'trl', '--config', join(EX, 'trl-grpo.yaml'), '--dry-run', '-o', 'yaml'], { env });
    assert.equal(r.code, 0, r.stderr);
    const o = loadYaml<{ apiVersion: string; kind: string; spec: { runtimeRef: { name: string }; trainer: { numNodes: number } } }>(
      r.stdout,
    );
    assert.deepEqual(
      [o.apiVersion, o.kind, o.spec.runtimeRef.name, o.spec.trainer.numNodes],
      ['trainer.kubeflow.org/v1alpha1', 'TrainJob', 'torch-distributed', 1],
    );
    const j = await cli(
      ['train', 'submit', '--trainer', 'trl', '--config', join(EX, 'trl-grpo.yaml'), '--operator', 'none', '--dry-run', '-o', 'json'],
      { env },
    );
    assert.equal(j.code, 0, j.stderr);
    const job = JSON.parse(j.stdout) as {
      kind: string;
      spec: {
        backoffLimit: number;
        template: { spec: { volumes: { persistentVolumeClaim: { claimName: string } }[]; containers: { resources: unknown }[] } };
      };
    };
    assert.equal(job.kind, 'Job');
    assert.equal(job.spec.backoffLimit, 0);
    assert.equal(job.spec.template.spec.volumes[0]!.persistentVolumeClaim.claimName, 'rollouts');
    assert.deepEqual(job.spec.template.spec.containers[0]!.resources, { limits: { 'nvidia.com/gpu': '8' } });
  });

  it('a bad config names the file and the field, exit 1', async () => {
    const d = tmp();
    const bad = join(d, 'bad.yaml');
    writeFileSync(
      bad,
      'name: Not_A_Label\ncommand: python3\ndata: {source: export, file: /abs.jsonl, volume: {pvc: {}}}\nnumNodes: 0\nbogus: 1\n',
    );
    const r = await cli(['train', 'submit', '--trainer', 'trl', '--config', bad, '--dry-run'], { env });
    assert.equal(r.code, 1);
    const msg = r.stderr;
    assert.ok(msg.startsWith(`harness-lab train submit: ${bad}: `), msg);
    for (const field of ['name: an RFC 1035 label', 'image:', 'command:', 'numNodes:', 'data.file: a path relative to the volume', 'bogus'])
      assert.ok(msg.includes(field), `${field} in ${msg}`);
    const multi = join(d, 'multi.yaml');
    writeFileSync(multi, 'image: x\ncommand: [x]\nnumNodes: 2\ndata: {source: rollout-server, url: "http://127.0.0.1:1"}\n');
    const m = await cli(['train', 'submit', '--trainer', 'trl', '--config', multi, '--operator', 'none', '--dry-run'], { env });
    assert.equal(m.code, 1);
    assert.match(m.stderr, /numNodes: 2 nodes need an operator/);
    const missing = await cli(['train', 'submit', '--trainer', 'trl', '--config', join(d, 'nope.yaml'), '--dry-run'], { env });
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /nope\.yaml: cannot read the trainer config: ENOENT/);
  });

  it('usage errors exit 2; status/logs/cancel without a kubeconfig say which file is missing', async () => {
    const t = await cli(['train', 'submit', '--trainer', 'sft', '--config', 'x.yaml'], { env });
    assert.equal(t.code, 2);
    assert.match(t.stderr, /--trainer must be one of trl, verl, got 'sft'/);
    const sub = await cli(['train', 'frob'], { env });
    assert.equal(sub.code, 2);
    assert.match(sub.stderr, /unknown train subcommand 'frob'/);
    for (const s of ['status', 'logs', 'cancel']) {
      const r = await cli(['train', s, 'some-run'], { env: { ...env, HARNESS_LAB_DATA_DIR: tmp() } });
      assert.equal(r.code, 1, `${s}: ${r.stderr}`);
      assert.match(r.stderr, new RegExp(`harness-lab train ${s}: No kubeconfig found \\(looked at /nonexistent/kubeconfig\\)`));
    }
    // No KUBECONFIG and no ~/.kube/config: the client library would invent a localhost:8080 context;
    // the command says where it looked instead.
    const home = tmp();
    const list = await cli(['train', 'list'], { env: { KUBECONFIG: '', HOME: home, HARNESS_LAB_DATA_DIR: tmp() } });
    assert.equal(list.code, 1, list.stderr);
    assert.ok(list.stderr.includes(`No kubeconfig found (looked at ${join(home, '.kube', 'config')})`), list.stderr);
    assert.doesNotMatch(list.stderr, /localhost:8080/);
    const given = await cli(['train', 'list', '--kubeconfig', join(home, 'nope')], { env: { KUBECONFIG: '', HOME: home } });
    assert.equal(given.code, 1);
    assert.match(given.stderr, /cannot read the kubeconfig .*nope/);
    const help = await cli(['train', '--help'], { env });
    assert.equal(help.code, 0);
    assert.match(help.stdout, /harness-lab train submit --trainer trl\|verl --config FILE/);
  });
});
