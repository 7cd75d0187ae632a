// Training runs against a REAL cluster (`npm run test:cluster`), only when KUBECONFIG names a
// kubeconfig file (otherwise reported SKIPPED with the reason, never passed):
//   KUBECONFIG, K8S_IT_CONTEXT, K8S_IT_NAMESPACE   as in real-cluster.test.ts
//   K8S_IT_IMAGE=busybox:1.36                       the plain Job's image (pulled by the cluster)
// A plain Job run (--operator none) is submitted, followed by one watch to Succeeded, its log read,
// and cancelled; the RayJob and TrainJob manifests go through a server-side dry run where the
// cluster serves those CRDs (each case names the missing CRD when it does not).
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { before, describe, it } from 'node:test';
import { checkReachable, clusterError, loadCluster, type Cluster } from '../../src/cluster/kube.js';
import {
  cancelRun,
  parseTrainConfig,
  RunWatch,
  runManifest,
  serves,
  streamRunLogs,
  submitRun,
  TERMINAL,
  validateRunManifest,
  type RunKind,
} from '../../src/training/trainer-jobs.js';

const env = process.env;
const kubeconfig = env.KUBECONFIG?.split(':')[0];
const notRun = !kubeconfig
  ? 'KUBECONFIG is not set, so there is no cluster to test against (set KUBECONFIG to a kubeconfig file and run `npm run test:cluster`)'
  : !existsSync(kubeconfig)
    ? `KUBECONFIG names ${kubeconfig}, which does not exist`
    : undefined;
const runId = `hl-it-train-${Date.now().toString(36)}`;

describe('training runs on a real cluster', { skip: notRun ?? false, timeout: 600_000 }, () => {
  let cluster: Cluster;
  const records = mkdtempSync(join(tmpdir(), 'hl-it-runs-'));

  before(async () => {
    cluster = loadCluster({ kubeconfig: kubeconfig!, context: env.K8S_IT_CONTEXT ?? null, namespace: env.K8S_IT_NAMESPACE ?? null });
    await checkReachable(cluster);
  });

  it('a plain Job run: submitted, watched to Succeeded, its log streamed, cancelled with its pods', async () => {
    const config = parseTrainConfig(
      `name: ${runId}\nimage: ${env.K8S_IT_IMAGE ?? 'busybox:1.36'}\ncommand: [sh, -c, 'echo "trainer sees $HARNESS_LAB_ROLLOUT_SERVER_URL"']\nresources: {requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 100m, memory: 64Mi}}\nactiveDeadlineSeconds: 300\ndata: {source: rollout-server, url: "http://harness-lab-serve.invalid:8200"}\n`,
      'inline',
    );
    const { record } = await submitRun(cluster, { trainer: 'trl', config, configFile: 'inline', operator: 'none', recordsDir: records });
    try {
      const w = new RunWatch(cluster, record.kind, record.name);
      const phase = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${record.name} did not finish within 5 minutes`)), 300_000);
        void w.start((p) => {
          if (TERMINAL.has(p.phase)) {
            clearTimeout(timer);
            resolve(p.phase);
          }
        });
      }).finally(() => w.stop());
      assert.equal(phase, 'Succeeded');
      let log = '';
      await streamRunLogs(
        cluster,
        record.kind,
        record.name,
        new Writable({ write: (c: Buffer, _e, done) => ((log += c.toString()), done()) }),
        { follow: false },
      );
      assert.match(log, /trainer sees http:\/\/harness-lab-serve\.invalid:8200/);
    } finally {
      assert.equal(await cancelRun(cluster, record.kind, record.name, records), 'deleted');
    }
  });

  for (const [kind, trainer] of [
    ['RayJob', 'verl'],
    ['TrainJob', 'trl'],
  ] as [RunKind, 'verl' | 'trl'][]) {
    it(`the API server accepts the ${kind} (server-side dry run) where its CRD is installed`, async (t) => {
      if (!(await serves(cluster, kind)))
        return t.skip(`the cluster serves no ${kind} CRD (install ${kind === 'RayJob' ? 'KubeRay' : 'Kubeflow Trainer'} to run this case)`);
      const config = parseTrainConfig(
        'image: example.invalid/trainer:1\ncommand: [python3, -m, train]\nnumNodes: 2\ngpusPerNode: 1\ndata: {source: rollout-server, url: "http://harness-lab-serve.invalid:8200"}\n',
        'inline',
      );
      const obj = runManifest({ trainer, kind, config, name: `${runId}-${kind.toLowerCase()}`, namespace: cluster.namespace });
      await validateRunManifest(obj);
      try {
        await cluster.objects.create(obj, undefined, 'All');
      } catch (err) {
        throw clusterError(cluster, `server-side dry run of ${kind} ${obj.metadata.name}`, err);
      }
    });
  }
});
