/* eslint-disable @typescript-eslint/no-explicit-any -- manifests printed by the CLI, checked field by field */
// `harness-lab train submit --dry-run` prints the validated manifest and sends nothing; a bad config
// names the file and the field; usage errors exit 2. No cluster: KUBECONFIG names nothing.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { loadAllYaml, loadYaml } from '@kubernetes/client-node';
import { ROLLOUT_PERMISSIONS, roleRules } from '../../src/cluster/permissions.js';
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

  it('submit --dry-run -o yaml with data.serve: the rollout server (RBAC, key Secret, tasks, state PVC, Deployment, Service) and the trainer wired to it', async () => {
    const r = await cli(
      [
        'train',
        'submit',
        '--trainer',
        'trl',
        '--config',
        join(EX, 'trl-rollout-server.yaml'),
        '--namespace',
        'rl',
        '--dry-run',
        '-o',
        'yaml',
      ],
      { env },
    );
    assert.equal(r.code, 0, r.stderr);
    const docs = JSON.parse(JSON.stringify(loadAllYaml(r.stdout))) as {
      apiVersion: string;
      kind: string;
      metadata: { name: string; namespace: string; labels: Record<string, string> };
    }[];
    assert.deepEqual(
      docs.map((d) => d.kind),
      ['ServiceAccount', 'Role', 'RoleBinding', 'Secret', 'ConfigMap', 'PersistentVolumeClaim', 'Deployment', 'Service', 'TrainJob'],
    );
    for (const d of docs) {
      assert.equal(d.metadata.namespace, 'rl', d.kind);
      assert.equal(d.metadata.labels['harness-lab/run'], 'trl-serve-01', d.kind);
    }
    const byKind = (k: string) => docs.find((d) => d.kind === k) as unknown as Record<string, any>;
    // The Role grants exactly what the k8s batch backend uses: no wildcard, no verb it does not call.
    const role = byKind('Role');
    assert.deepEqual(role.rules, roleRules(ROLLOUT_PERMISSIONS));
    assert.ok(!JSON.stringify(role.rules).includes('*'));
    assert.deepEqual(byKind('RoleBinding').subjects, [{ kind: 'ServiceAccount', name: 'trl-serve-01-serve', namespace: 'rl' }]);
    assert.deepEqual(byKind('Secret').stringData, { 'admin-key': '<generated at submit>' });
    const dep = byKind('Deployment');
    const pod = dep.spec.template.spec;
    assert.equal(dep.spec.strategy.type, 'Recreate');
    assert.equal(pod.serviceAccountName, 'trl-serve-01-serve');
    const c = pod.containers[0];
    assert.deepEqual(c.command.slice(0, 4), ['harness-lab', 'serve', '--backend', 'k8s']);
    assert.ok(c.command.join(' ').includes('--dataset train=/var/lib/harness-lab/tasks/train'), c.command.join(' '));
    assert.ok(c.command.join(' ').includes('--max-concurrent 8'));
    assert.deepEqual(
      c.env.find((e: { name: string }) => e.name === 'HARNESS_LAB_ADMIN_KEY'),
      { name: 'HARNESS_LAB_ADMIN_KEY', valueFrom: { secretKeyRef: { name: 'trl-serve-01-serve', key: 'admin-key' } } },
    );
    const images = JSON.parse(c.env.find((e: { name: string }) => e.name === 'HARNESS_LAB_K8S_TASK_IMAGES').value) as Record<
      string,
      string
    >;
    assert.deepEqual(Object.keys(images).sort(), ['fix-script', 'hello-file', 'sum-numbers']);
    for (const i of Object.values(images)) assert.ok(i.startsWith('registry.example.com/rl/'), i);
    assert.equal(pod.volumes.find((v: { name: string }) => v.name === 'state').persistentVolumeClaim.claimName, 'trl-serve-01-serve-state');
    // The tasks ConfigMap rebuilds every task file under the split's mount, byte for byte.
    const cm = byKind('ConfigMap');
    const items = pod.volumes.find((v: { configMap?: unknown }) => v.configMap).configMap.items as { key: string; path: string }[];
    const hello = items.find((i) => i.path === 'hello-file/task.toml')!;
    assert.equal(
      Buffer.from(cm.binaryData[hello.key], 'base64').toString('utf8'),
      readFileSync(join(REPO, 'examples', 'tasks', 'hello-file', 'task.toml'), 'utf8'),
    );
    assert.deepEqual(byKind('Service').spec.ports, [{ name: 'http', port: 8000, targetPort: 8000, protocol: 'TCP' }]);
    // The trainer gets the server's URL and its key only by secretKeyRef.
    const trainerEnv = byKind('TrainJob').spec.trainer.env as { name: string }[];
    assert.deepEqual(trainerEnv, [
      { name: 'HARNESS_LAB_ROLLOUT_SERVER_URL', value: 'http://trl-serve-01-serve.rl.svc:8000' },
      { name: 'HARNESS_LAB_ADMIN_KEY', valueFrom: { secretKeyRef: { name: 'trl-serve-01-serve', key: 'admin-key' } } },
    ]);
  });

  it('data.rollout-server takes url or serve, not both or neither; serve.env refuses a credential', async () => {
    const d = tmp();
    const both = join(d, 'both.yaml');
    writeFileSync(
      both,
      `image: x\ncommand: [x]\ndata: {source: rollout-server, url: "http://s:8000", serve: {datasets: {train: ${join(REPO, 'examples', 'tasks')}}}}\n`,
    );
    let r = await cli(['train', 'submit', '--trainer', 'trl', '--config', both, '--dry-run'], { env });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /data: give either url \(a running server\) or serve \(one to deploy\)/);
    const key = join(d, 'key.yaml');
    writeFileSync(key, `image: x\ncommand: [x]\ndata: {source: rollout-server, serve: {datasets: {train: ${d}}, env: {HF_TOKEN: t}}}\n`);
    r = await cli(['train', 'submit', '--trainer', 'trl', '--config', key, '--dry-run'], { env });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /data\.serve\.env\.HF_TOKEN: looks like a credential/);
    const empty = join(d, 'empty.yaml');
    writeFileSync(empty, `image: x\ncommand: [x]\ndata: {source: rollout-server, serve: {datasets: {train: ${d}}}}\n`);
    r = await cli(['train', 'submit', '--trainer', 'trl', '--config', empty, '--dry-run'], { env });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /data\.serve\.datasets\.train: no Harbor task \(task\.toml\) under /);
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
