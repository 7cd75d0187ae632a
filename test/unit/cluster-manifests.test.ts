// Cluster manifests without a cluster: names and labels within Kubernetes' limits, the pod's entry
// script (verifier without the session key; the agent bounded in the pod only for --on-timeout keep),
// the result line parser, and kubernetes-models validation naming the object and the field.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  attemptSecret,
  dnsLabel,
  entryScript,
  formatManifests,
  inClusterProxyUrl,
  jobName,
  labelValue,
  parsePodResult,
  proxyManifests,
  rolloutJob,
  SESSION_KEY_PLACEHOLDER,
  testsConfigMap,
  validateManifests,
  type RolloutJobInput,
} from '../../src/cluster/manifests.js';
import { podSecurityViolations } from '../k8s-double/pod-security.js';
import { loadTask } from '../../src/tasks/task.js';

const TASK = loadTask(join(__dirname, '..', '..', 'examples', 'tasks', 'hello-file'));

function input(over: Partial<RolloutJobInput> = {}): RolloutJobInput {
  return {
    namespace: 'ns',
    batchId: 'b1',
    groupId: 'g0',
    rolloutId: 'g0-r0',
    attempt: 0,
    sessionId: 'sess-123',
    task: TASK,
    harness: 'react',
    image: 'reg.example/harness-lab/task-hello-file:abc',
    launch: {
      script: 'exec node /opt/harness-lab/bin/react-harness.js hi',
      env: { HARNESS_LAB_API_KEY: SESSION_KEY_PLACEHOLDER },
      files: [{ path: '/tmp/harness-home/.cfg', content: `key=${SESSION_KEY_PLACEHOLDER}` }],
      nativeLog: 'react.txt',
    },
    timeoutSec: 300,
    harnessFrom: { kind: 'image' },
    taskEnv: {},
    verifierEnv: { V: '1' },
    ...over,
  };
}

describe('cluster manifests', () => {
  it('keeps names and label values inside Kubernetes limits', () => {
    assert.equal(labelValue('harness-lab/hello-file'), 'harness-lab-hello-file');
    const long = labelValue('x'.repeat(100));
    assert.ok(long.length <= 63 && /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/.test(long), long);
    assert.notEqual(labelValue(`${'a'.repeat(70)}1`), labelValue(`${'a'.repeat(70)}2`), 'long values stay distinct');
    const name = jobName('batch-with-a-very-long-id-0123456789', 'group-with-a-long-name-r12', 3);
    assert.ok(name.length <= 63 && /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(name), name);
    assert.equal(dnsLabel('Hello_World'), 'hello-world');
  });

  it('the verifier runs with a clean environment and the result line parses back', () => {
    const script = entryScript(input());
    const verifierLine = script.split('\n').find((l) => l.includes('/tests/test.sh'))!;
    assert.match(verifierLine, /env -i /);
    assert.ok(!verifierLine.includes('sess-123'), 'no session key in the verifier command');
    assert.ok(!script.includes('timeout -k 30'), 'discard: only the Job deadline bounds the agent');
    assert.match(entryScript(input({ agentTimeoutInPod: true })), /timeout -k 30 300 /);
    const line =
      'HARNESS_LAB_RESULT {"agent_exit":0,"agent_ms":12,"verifier_exit":0,"verifier_ms":3,"session_key_absent":true,"tests_requests_refused":0,"agent_isolated":true,"reward_json":"","reward_txt":"MQo="}';
    assert.deepEqual(parsePodResult(`noise\n${line}\n`)?.reward_txt, 'MQo=');
    assert.equal(parsePodResult('HARNESS_LAB_RESULT {"agent_exit":"x"}'), undefined);
    assert.equal(parsePodResult('no marker'), undefined);
  });

  it('prints manifests as kubectl does for -o json and -o yaml', async () => {
    const { loadAllYaml } = await import('@kubernetes/client-node');
    const objs = [rolloutJob(input()), testsConfigMap('ns', 'b1', TASK)];
    const list = JSON.parse(formatManifests(objs, 'json')) as { kind: string; items: { kind: string }[] };
    assert.equal(list.kind, 'List');
    assert.deepEqual(
      list.items.map((i) => i.kind),
      ['Job', 'ConfigMap'],
    );
    const docs = loadAllYaml(formatManifests(objs, 'yaml')) as { kind: string; spec?: { backoffLimit?: number } }[];
    assert.deepEqual(
      docs.map((d) => d.kind),
      ['Job', 'ConfigMap'],
    );
    assert.equal(docs[0]!.spec?.backoffLimit, 0);
  });

  it('a Job and a tests ConfigMap validate; a broken Job is rejected naming object and field', async () => {
    const job = rolloutJob(input());
    await validateManifests([job, testsConfigMap('ns', 'b1', TASK)]);
    const spec = job.spec as { backoffLimit: unknown; template: { spec: { containers: Record<string, unknown>[] } } };
    spec.backoffLimit = 'zero';
    delete spec.template.spec.containers[0]!.name;
    await assert.rejects(validateManifests([job]), {
      name: 'ClusterError',
      message:
        'Job ns/hl-b1-g0-r0-a0 is not a valid manifest: /spec/backoffLimit must be integer; /spec/template/spec/containers/0 must have required property name',
    });
  });

  it('keeps the session key out of the Job: a per-attempt Secret, read through secretKeyRef', async () => {
    const key = 'hlk-Zm9vYmFyYmF6cXV4cXV1eF9zZWNyZXRrZXk';
    const job = rolloutJob(input());
    const secret = attemptSecret(job, key);
    await validateManifests([job, secret]);
    assert.ok(!JSON.stringify(job).includes(key), 'no key in the Job');
    assert.ok(JSON.stringify(secret).includes(key));
    const rollout = (
      job.spec as {
        template: {
          spec: { containers: { name: string; env: { name: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[] }[] };
        };
      }
    ).template.spec.containers[0]!;
    assert.deepEqual(rollout.env.find((e) => e.name === 'HL_SESSION_KEY')?.valueFrom?.secretKeyRef, {
      name: `${job.metadata!.name}-key`,
      key: 'session-key',
    });
    assert.equal((secret.metadata as { name: string }).name, `${job.metadata!.name}-key`);
  });

  it('mounts the tests only into the sidecar, never into the rollout container', () => {
    const spec = (
      rolloutJob(input()).spec as {
        template: {
          spec: {
            containers: { volumeMounts: { name: string }[] }[];
            initContainers: { name: string; restartPolicy: string; volumeMounts: { name: string }[] }[];
          };
        };
      }
    ).template.spec;
    assert.ok(!spec.containers[0]!.volumeMounts.some((m) => m.name === 'task-tests'));
    assert.equal(spec.initContainers[0]!.restartPolicy, 'Always');
    assert.ok(spec.initContainers[0]!.volumeMounts.some((m) => m.name === 'task-tests'));
  });

  it('rollout pods meet Pod Security baseline (not restricted), the proxy restricted', () => {
    const pod = (rolloutJob(input()).spec as { template: { spec: never } }).template.spec;
    assert.deepEqual(podSecurityViolations(pod, 'baseline'), []);
    assert.match(podSecurityViolations(pod, 'restricted').join('; '), /runAsNonRoot != true \(pod or container "rollout"/);
    const objs = proxyManifests({
      namespace: 'ns',
      batchId: 'b1',
      image: 'reg/harness-lab:1',
      engineUrl: 'http://e/v1',
      model: 'm',
      adminKey: 'k',
    });
    const dep = objs.find((o) => o.kind === 'Deployment')!;
    assert.deepEqual(podSecurityViolations((dep.spec as { template: { spec: never } }).template.spec, 'restricted'), []);
    const ingress = objs
      .filter((o) => o.kind === 'NetworkPolicy')
      .find((o) => (o.spec as { policyTypes: string[] }).policyTypes.join() === 'Ingress')!;
    assert.deepEqual((ingress.spec as { podSelector: unknown }).podSelector, {
      matchLabels: { 'app.kubernetes.io/name': 'harness-lab-proxy', 'harness-lab/batch': 'b1', 'harness-lab/role': 'proxy' },
    });
    assert.ok(objs.some((o) => o.kind === 'PersistentVolumeClaim'));
  });
});

describe('proxy manifests', () => {
  it('tell the in-cluster proxy the Service names rollout pods reach it by (it refuses any other Host)', () => {
    const objects = proxyManifests({
      batchId: 'b1',
      namespace: 'lab',
      image: 'img',
      engineUrl: 'http://e/v1',
      model: 'm',
      adminKey: 'k',
    } as Parameters<typeof proxyManifests>[0]);
    const deployment = objects.find((o) => o.kind === 'Deployment') as unknown as {
      spec: { template: { spec: { containers: { command: string[] }[] } } };
    };
    const command = deployment.spec.template.spec.containers[0]!.command;
    const allowed = command.flatMap((arg, i) => (arg === '--allowed-host' ? [command[i + 1]] : []));
    const url = new URL(inClusterProxyUrl('lab', 'b1'));
    assert.ok(allowed.includes(url.hostname), `${url.hostname} in ${allowed.join(', ')}`);
    assert.ok(allowed.includes(`${url.hostname}.cluster.local`));
  });
});
