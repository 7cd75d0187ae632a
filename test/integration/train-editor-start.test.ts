// The editor's Start Training Run and Cancel (src/extension/training-runs-actions.ts, what the
// Training Runs view calls once its three picks are made) on the Kubernetes API server double, driven
// by the real @kubernetes/client-node: a config with `data.serve` deploys the run's rollout server
// (ServiceAccount, Role, RoleBinding, key Secret, tasks ConfigMap, state PVC, Deployment, Service)
// and only once its pod is ready the trainer Job, wired to it by URL and secretKeyRef; the view's row
// for the server reads its health and its /metrics (through a port-forward, with the key from the
// Secret) as `train status` does; Cancel removes both. A server that never gets ready fails the start
// with the reason and leaves nothing behind.
//
// The double runs here without its Docker node: this test is the server's ReplicaSet controller and
// kubelet (the Deployment's pod is made Ready, its port 8000 is a loopback stand-in answering
// /metrics in serve's format). That the real server runs a group for a TRL-speaking trainer is
// train-serve-k8s.test.ts's proof; this one proves the editor takes the same way in.
/* eslint-disable @typescript-eslint/no-explicit-any -- request bodies as the API server received them */
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { loadCluster, type Cluster } from '../../src/cluster/kube.js';
import { cancelFromEditor, serverStatuses, startFromEditor } from '../../src/extension/training-runs-actions.js';
import { runNodes } from '../../src/extension/training-runs-model.js';
import { listRunRecords, listRuns, readRunRecord } from '../../src/training/trainer-jobs.js';
import { KubeApiDouble } from '../k8s-double/api-server.js';
import { writeApiKubeconfig } from '../k8s-double/index.js';
import { EXAMPLES } from './sandbox-fixtures.js';

const NS = 'editor-train';
const RUN = 'editor-run';
const STUCK = 'editor-stuck';
const METRICS = [
  'harness_lab_serve_sandboxes{state="running"} 1',
  'harness_lab_serve_rollouts_total{class="completed"} 3',
  'harness_lab_serve_rollouts_total{class="infra_error"} 1',
  'harness_lab_serve_infra_failures_total{cause="image_pull"} 1',
  'harness_lab_serve_reward_sum 2',
  'harness_lab_serve_scored_total 3',
  'harness_lab_serve_breaker_state{state="closed"} 1',
  '',
].join('\n');

describe(
  "the editor's Start Training Run deploys the run's rollout server, shows it, and Cancel removes both",
  { timeout: 120_000 },
  () => {
    let api: KubeApiDouble;
    let dir: string;
    let cluster: Cluster;
    let kc: k8s.KubeConfig;
    let metrics: Server;
    const scrapes: string[] = [];
    /** The runs whose server pod this test's stand-in controller makes ready. */
    const schedulable = new Set([RUN]);
    /** Each trainer Job as it was created, and whether its run's server pod was ready then. */
    const jobsCreated: { run: string; serverReady: boolean }[] = [];
    const ready = new Set<string>();
    const lines: string[] = [];
    const log = (line: string) => lines.push(line);

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'hl-train-editor-'));
      api = new KubeApiDouble({ bookmarkMs: 200 });
      const url = await api.listen();
      const kubeconfig = join(dir, 'kubeconfig');
      writeApiKubeconfig(kubeconfig, api, url, NS);
      kc = new k8s.KubeConfig();
      kc.loadFromFile(kubeconfig);
      await kc.makeApiClient(k8s.CoreV1Api).createNamespace({ body: { metadata: { name: NS } } });
      cluster = loadCluster({ kubeconfig, context: 'double', namespace: NS });

      // The pod's port 8000: serve's /metrics, for the run's admin key only (read from the Secret the start made).
      metrics = createServer((req, res) => {
        const secret = api.store.tryGet(api.store.resource('', 'secrets')!, NS, `${RUN}-serve`) as any;
        const key = Buffer.from(secret?.data?.['admin-key'] ?? '', 'base64').toString('utf8');
        scrapes.push(`${req.method} ${req.url}`);
        if (!key || req.headers.authorization !== `Bearer ${key}`) return void res.writeHead(401).end('bad key');
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(METRICS);
      });
      await new Promise<void>((resolve) => metrics.listen(0, '127.0.0.1', resolve));
      const metricsPort = (metrics.address() as AddressInfo).port;
      api.hooks = {
        portForward: async (_ns, _pod, port) => {
          assert.equal(port, 8000, 'the port-forward goes to serve');
          const socket = connect(metricsPort, '127.0.0.1');
          await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
          return socket;
        },
        logs: () => Promise.reject(new Error('no logs in this test')),
        evict: () => Promise.reject(new Error('no evictions in this test')),
      };

      // The Deployment's pod, owned by it (it goes when the Deployment is deleted), Ready once created.
      const pods = api.store.resource('', 'pods')!;
      api.store.onChange((e) => {
        const run = (e.object.metadata.labels ?? {})['harness-lab/run'] ?? '';
        if (e.res.plural === 'jobs' && e.type === 'ADDED') jobsCreated.push({ run, serverReady: ready.has(run) });
        if (e.res.plural !== 'deployments' || e.type !== 'ADDED') return;
        const d = e.object as any;
        if (!schedulable.has(d.metadata.labels['harness-lab/run'])) return;
        setImmediate(() => {
          const pod = api.store.create(pods, NS, {
            apiVersion: 'v1',
            kind: 'Pod',
            metadata: {
              generateName: `${d.metadata.name}-`,
              labels: { ...d.spec.template.metadata.labels },
              ownerReferences: [
                { apiVersion: 'apps/v1', kind: 'Deployment', name: d.metadata.name, uid: d.metadata.uid, controller: true },
              ],
            },
            spec: structuredClone(d.spec.template.spec),
          });
          setTimeout(
            () =>
              api.store.mutate(
                pods,
                NS,
                pod.metadata.name!,
                (o) => {
                  o.status = { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] };
                  ready.add(run);
                },
                'status',
              ),
            300,
          );
        });
      });
    });

    after(async () => {
      await new Promise((resolve) => metrics?.close(resolve));
      await api?.close();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    /** A split of one task (hello-file, run on the lab's base image) and a TRL config that deploys its server. */
    function config(name: string): string {
      const tasks = join(dir, `${name}-tasks`);
      cpSync(join(EXAMPLES, 'hello-file'), join(tasks, 'hello-file'), { recursive: true });
      rmSync(join(tasks, 'hello-file', 'environment'), { recursive: true, force: true });
      const file = join(dir, `${name}.yaml`);
      writeFileSync(
        file,
        JSON.stringify({
          name,
          image: 'ghcr.io/example/trl:1',
          command: ['python', 'train.py'],
          data: {
            source: 'rollout-server',
            serve: { datasets: { train: tasks }, image: 'harness-lab/harness-lab:editor-test', maxConcurrent: 2 },
          },
        }),
      );
      return file;
    }

    const ofRun = (name: string) =>
      api.received.filter(
        (r) => ['POST', 'DELETE'].includes(r.method) && JSON.stringify(r.body ?? {}).includes(`"harness-lab/run":"${name}"`),
      );

    it('start: the server first, the trainer once it is ready, wired by URL and secretKeyRef; the view shows the server; cancel removes both', async () => {
      const records = join(dir, 'records');
      const { started, message } = await startFromEditor(cluster, { trainer: 'trl', configFile: config(RUN), recordsDir: records }, log);

      // What was created, in order: the server's objects, then (after its pod was ready) the trainer.
      const posted = ofRun(RUN)
        .filter((r) => r.method === 'POST')
        .map((r) => (r.body as any).kind);
      assert.deepEqual(posted, [
        'ServiceAccount',
        'Role',
        'RoleBinding',
        'Secret',
        'ConfigMap',
        'PersistentVolumeClaim',
        'Deployment',
        'Service',
        'Job',
      ]);
      assert.deepEqual(jobsCreated, [{ run: RUN, serverReady: true }], 'the trainer was created only once its server was ready');
      assert.ok(
        lines.some((l) => /^rollout server editor-run-serve is ready \(pod editor-run-serve-\S+ ready\)$/.test(l)),
        `the start waited for the server to be ready:\n${lines.join('\n')}`,
      );
      const job = api.requests('POST', new RegExp(`/apis/batch/v1/namespaces/${NS}/jobs$`)).at(-1)!.body as any;
      const env = job.spec.template.spec.containers[0].env;
      assert.deepEqual(env, [
        { name: 'HARNESS_LAB_ROLLOUT_SERVER_URL', value: `http://${RUN}-serve.${NS}.svc:8000` },
        { name: 'HARNESS_LAB_ADMIN_KEY', valueFrom: { secretKeyRef: { name: `${RUN}-serve`, key: 'admin-key' } } },
      ]);
      assert.deepEqual(started.server, { name: `${RUN}-serve`, url: `http://${RUN}-serve.${NS}.svc:8000`, splits: ['train'] });
      assert.match(
        message,
        new RegExp(
          `^Training run ${RUN} created as Job \\(a plain batch/v1 Job: no trainer operator\\) with its rollout server ${RUN}-serve `,
        ),
      );
      assert.deepEqual(readRunRecord(RUN, records)?.rollout_server, started.server, 'the run record names its server');
      // The key is in the Secret only: neither the Job, nor the Deployment, nor the record carries it.
      const secret = api.requests('POST', /\/secrets$/).at(-1)!.body as any;
      const key = secret.stringData['admin-key'] as string;
      assert.ok(key.length >= 32);
      for (const r of ofRun(RUN).filter((x) => (x.body as any).kind !== 'Secret')) assert.ok(!JSON.stringify(r.body).includes(key), r.path);

      // The Training Runs view: the run, and under it its server with what its /metrics say.
      const runs = await listRuns(cluster);
      const servers = await serverStatuses(cluster, runs, listRunRecords(records), log);
      assert.equal(servers.get(RUN)?.health.state, 'Ready', lines.join('\n'));
      assert.equal(servers.get(RUN)?.error, undefined);
      assert.deepEqual(scrapes.at(-1), 'GET /metrics');
      const [node] = runNodes(runs, Date.now(), { context: cluster.context, namespace: NS }, new Map(), new Map(), servers);
      assert.equal(node?.kind, 'run');
      assert.equal(
        node.kind === 'run' ? node.server?.description : '',
        'Ready · 4 done (completed 3, infra_error 1) · infra-failed 25.0% · reward 0.667',
      );

      // Cancel from the view: the trainer and the whole server go, and the record with them.
      const { stopped, message: cancelled } = await cancelFromEditor(cluster, { kind: 'Job', name: RUN }, log, records);
      assert.equal(stopped.trainer, 'deleted');
      assert.deepEqual(stopped.server, [
        `Deployment ${RUN}-serve`,
        `Service ${RUN}-serve`,
        `Secret ${RUN}-serve`,
        `ConfigMap ${RUN}-tasks-train`,
        `PersistentVolumeClaim ${RUN}-serve-state`,
        `RoleBinding ${RUN}-serve`,
        `Role ${RUN}-serve`,
        `ServiceAccount ${RUN}-serve`,
      ]);
      assert.match(cancelled, new RegExp(`^Training run ${RUN}: deleted Job ${RUN}; rollout server: removed Deployment ${RUN}-serve, `));
      assert.deepEqual(left(RUN), [], 'nothing of the run is left');
      assert.equal(readRunRecord(RUN, records), undefined);
      assert.deepEqual(await serverStatuses(cluster, await listRuns(cluster), [], log), new Map(), 'no run, no server row');
    });

    it('a server that never gets ready fails the start with its state, creates no trainer and leaves nothing', async () => {
      const records = join(dir, 'records-stuck');
      await assert.rejects(
        startFromEditor(cluster, { trainer: 'trl', configFile: config(STUCK), recordsDir: records, serverReadyTimeoutMs: 1500 }, log),
        new RegExp(`the rollout server ${STUCK}-serve was not ready within 2 s: no pod yet`),
      );
      assert.ok(!ofRun(STUCK).some((r) => r.method === 'POST' && (r.body as any).kind === 'Job'), 'no trainer was created');
      assert.ok(
        ofRun(STUCK).some((r) => r.method === 'POST' && (r.body as any).kind === 'Deployment'),
        'the server was deployed',
      );
      assert.deepEqual(left(STUCK), [], 'what was deployed for it is gone again');
      assert.ok(!existsSync(join(records, `${STUCK}.json`)), 'no record of a run that did not start');
    });

    /** Every object in the namespace labelled with the run, as kind/name. */
    function left(run: string): string[] {
      return api.store
        .allResources()
        .filter((r) => r.namespaced)
        .flatMap((r) => api.store.list(r, NS).filter((o) => o.metadata.labels?.['harness-lab/run'] === run))
        .map((o) => `${o.kind}/${o.metadata.name}`);
    }
  },
);
