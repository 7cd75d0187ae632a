// `harness-lab batch submit --backend k8s --dry-run -o json|yaml`: the manifests the batch would
// apply, printed as kubectl prints them, validated, and nothing written or sent.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { loadAllYaml, type V1Job } from '@kubernetes/client-node';
import { DockerRuntime } from '../../src/sandbox/docker.js';
import { loadTask } from '../../src/tasks/task.js';
import { EXAMPLES, cli, dockerReady } from './sandbox-fixtures.js';

const ARGS = [
  'batch',
  'submit',
  '--tasks',
  join(EXAMPLES, 'hello-file'),
  '--harness',
  'react',
  '--group-size',
  '2',
  '--backend',
  'k8s',
  '--namespace',
  'rl',
  '--registry',
  'reg.example',
  '--queue',
  'team-a',
  '--engine-url',
  'http://engine.rl.svc:8000/v1',
  '--model',
  'Qwen/Qwen3-8B',
  '--timeout',
  '600',
  '--dry-run',
];

describe('batch submit --backend k8s --dry-run', { timeout: 180_000 }, () => {
  it('-o json prints a v1 List of every object, and nothing is written', async () => {
    await dockerReady();
    const out = join(mkdtempSync(join(tmpdir(), 'hl-dry-')), 'batch');
    const r = await cli([...ARGS, '-o', 'json', '--out', out], { env: { KUBECONFIG: '/nonexistent/kubeconfig' } });
    assert.equal(r.code, 0, r.stderr);
    const list = JSON.parse(r.stdout) as { kind: string; items: { kind: string; metadata: { name: string; namespace: string } }[] };
    assert.equal(list.kind, 'List');
    assert.deepEqual(
      list.items.map((i) => i.kind),
      ['Secret', 'PersistentVolumeClaim', 'Deployment', 'Service', 'NetworkPolicy', 'NetworkPolicy', 'ConfigMap', 'Job', 'Job'],
    );
    assert.ok(list.items.every((i) => i.metadata.namespace === 'rl'));
    const job = list.items.at(-1) as unknown as V1Job;
    assert.equal(job.spec?.backoffLimit, 0);
    assert.equal(job.spec?.activeDeadlineSeconds, 600 + 60 + 60);
    assert.equal(job.spec?.suspend, true);
    assert.equal(job.metadata?.labels?.['kueue.x-k8s.io/queue-name'], 'team-a');
    // The tag `harness-lab rollout` builds for this task, under the registry.
    const local = await (await DockerRuntime.connect()).prepareImage(loadTask(join(EXAMPLES, 'hello-file')));
    assert.equal(job.spec!.template.spec!.containers[0]!.image, `reg.example/${local}`);
    assert.equal(existsSync(out), false, 'a dry run writes no batch directory');
  });

  it('-o yaml prints --- separated documents that parse back', async () => {
    const r = await cli([...ARGS, '-o', 'yaml', '--out', join(mkdtempSync(join(tmpdir(), 'hl-dry-')), 'batch')], {
      env: { KUBECONFIG: '/nonexistent/kubeconfig' },
    });
    assert.equal(r.code, 0, r.stderr);
    const docs = loadAllYaml(r.stdout) as { kind: string }[];
    assert.deepEqual(
      docs.map((d) => d.kind),
      ['Secret', 'PersistentVolumeClaim', 'Deployment', 'Service', 'NetworkPolicy', 'NetworkPolicy', 'ConfigMap', 'Job', 'Job'],
    );
  });
});
