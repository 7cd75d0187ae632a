// Shared setup for the cluster tests: the API server double with a Docker-backed node, a kubeconfig
// for the real client, a batch manifest for example tasks, the CLI bundle the in-cluster proxy runs,
// and a policy engine on the host that the namespace reaches through a Unix socket relay.
import { chmodSync, cpSync, mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { harnessCacheRoot } from '../../src/harness/run-local.js';
import { startPolicyEngine, type PolicyEngine } from '../../src/sandbox/policy-engine.js';
import { ensureReactScript } from '../../src/sandbox/react-script.js';
import * as k8s from '@kubernetes/client-node';
import type Docker from 'dockerode';
import { ensureLabImage } from '../../src/cluster/lab-image.js';
import { DockerRuntime } from '../../src/sandbox/docker.js';
import { loadTask, type HarborTask } from '../../src/tasks/task.js';
import {
  BATCH_SCHEMA_VERSION,
  queuedRolloutState,
  trainingSampling,
  type BatchManifest,
  type RolloutState,
} from '../../src/batch/state.js';
import type { K8sBackendOptions } from '../../src/batch/backends/k8s/index.js';
import type { RolloutAttempt } from '../../src/batch/backend.js';
import { startKubeDouble, type KubeDouble } from '../k8s-double/index.js';
import { EXAMPLES, REPO, dockerReady } from './sandbox-fixtures.js';

let bundle: Promise<string> | undefined;

/** The CLI as one file (what a harness-lab image would hold), mounted into the proxy pod. */
export function cliBundleDir(): Promise<string> {
  bundle ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hl-k8s-cli-'));
    // The in-cluster proxy runs as a non-root user (Pod Security "restricted"): it must read this mount.
    chmodSync(dir, 0o755);
    const specifier = 'esbuild';
    const esbuild = (await import(specifier)) as typeof import('esbuild');
    await esbuild.build({
      bundle: true,
      platform: 'node',
      format: 'cjs',
      target: 'node20',
      logLevel: 'warning',
      external: ['vscode', 'cpu-features', '*.node', 'node-llama-cpp', '@node-llama-cpp/*'],
      entryPoints: [join(REPO, 'src', 'cli', 'main.ts')],
      outfile: join(dir, 'cli.js'),
    });
    return dir;
  })();
  return bundle;
}

/** The lab's image (src/cluster/lab-image.ts) as `tag`, from a bundle of this checkout's source (never a stale dist/). */
export async function buildProxyImage(docker: Docker, tag: string): Promise<void> {
  await ensureLabImage(docker, { tag, bundleDir: await cliBundleDir() });
}

/** A test cluster with one namespace made, and the real client's core and batch APIs on it. */
export async function clusterWithNamespace(
  namespace: string,
): Promise<{ cluster: KubeDouble; core: k8s.CoreV1Api; batchApi: k8s.BatchV1Api; apps: k8s.AppsV1Api }> {
  const cluster = await testCluster();
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(cluster.kubeconfig);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  return { cluster, core, batchApi: kc.makeApiClient(k8s.BatchV1Api), apps: kc.makeApiClient(k8s.AppsV1Api) };
}

export async function testCluster(opts: Parameters<typeof startKubeDouble>[1] = {}): Promise<KubeDouble> {
  const docker = await dockerReady();
  return startKubeDouble(docker, { bookmarkMs: 200, ...opts });
}

/** A copy of an example task with task.toml and policy edits (the verifier's timeout, memory, ...). */
export function taskCopy(example: string, edit: { policy?: unknown; toml?: (text: string) => string }): string {
  const dir = join(mkdtempSync(join(tmpdir(), 'hl-k8s-task-')), example);
  cpSync(join(EXAMPLES, example), dir, { recursive: true });
  if (edit.policy) writeFileSync(join(dir, 'policy.json'), JSON.stringify(edit.policy));
  if (edit.toml) writeFileSync(join(dir, 'task.toml'), edit.toml(readFileSync(join(dir, 'task.toml'), 'utf8')));
  return dir;
}

export function manifestFor(o: {
  batchId: string;
  namespace: string;
  context?: string | null;
  tasks: string[];
  harness: string;
  engineUrl: string;
  model: string;
  timeoutSec: number;
  groupSize?: number;
  queueName?: string | null;
}): BatchManifest {
  const tasks = o.tasks.map((dir) => ({ name: loadTask(dir).name, dir }));
  const g = o.groupSize ?? 2;
  return {
    schema_version: BATCH_SCHEMA_VERSION,
    batch_id: o.batchId,
    created_at: new Date().toISOString(),
    backend: 'k8s',
    harnesses: [o.harness],
    group_size: g,
    tasks,
    groups: tasks.map((t, i) => ({
      group_id: `g${i}`,
      task: t.name,
      harness: o.harness,
      rollout_ids: Array.from({ length: g }, (_, k) => `g${i}-r${k}`),
    })),
    sampling: trainingSampling(1),
    policy_version: null,
    timeout_sec: o.timeoutSec,
    on_timeout: 'discard',
    parallel: 2,
    engine_url: o.engineUrl,
    model: o.model,
    k8s: { context: o.context ?? 'double', namespace: o.namespace, registry: null, queue_name: o.queueName ?? null },
  };
}

export function rolloutState(m: BatchManifest, rolloutId: string): RolloutState {
  const g = m.groups.find((x) => x.rollout_ids.includes(rolloutId))!;
  const now = new Date().toISOString();
  return {
    ...queuedRolloutState({
      rollout_id: rolloutId,
      group_id: g.group_id,
      member: g.rollout_ids.indexOf(rolloutId),
      task: g.task,
      harness: g.harness,
      policy_version: null,
      queued_at: now,
    }),
    state: 'running',
    started_at: now,
  };
}

export function attemptFor(
  batchDir: string,
  m: BatchManifest,
  rolloutId: string,
  signal = new AbortController().signal,
  attempt = 0,
): RolloutAttempt & { lines: string[] } {
  const lines: string[] = [];
  return {
    batchDir,
    manifest: m,
    rollout: rolloutState(m, rolloutId),
    attempt,
    sessionId: `${m.batch_id}-${rolloutId}-${attempt}`,
    outDir: join(batchDir, 'attempts', rolloutId, String(attempt)),
    signal,
    log: (l) => lines.push(l),
    lines,
  };
}

/** Task images built locally (the double's node uses local Docker images). */
export async function taskImages(dirs: string[]): Promise<Map<string, string>> {
  const runtime = await DockerRuntime.connect();
  const out = new Map<string, string>();
  for (const d of dirs) {
    const t = loadTask(d);
    out.set(t.name, await runtime.prepareImage(t));
  }
  return out;
}

export interface EngineInNamespace {
  engine: PolicyEngine;
  port: number;
  url: string;
}

/** The policy engine on the host's loopback, reachable at the same 127.0.0.1 port inside the namespace. */
/** `serviceNames`: the names pods reach it by when a Service (and a relay pod) stands in front of it. */
export async function engineFor(
  cluster: KubeDouble,
  namespace: string,
  policyFile: string,
  serviceNames?: readonly string[],
): Promise<EngineInNamespace> {
  const engine = await startPolicyEngine(policyFile, 'fake', serviceNames);
  const port = Number(new URL(engine.url).port);
  await cluster.node.exposeHostPort(namespace, port);
  return { engine, port, url: engine.url };
}

export async function backendOptions(
  cluster: KubeDouble,
  m: BatchManifest,
  batchDir: string,
  images: Map<string, string>,
  extra: Partial<K8sBackendOptions> = {},
): Promise<K8sBackendOptions> {
  const cli = await cliBundleDir();
  return {
    manifest: m,
    batchDir,
    kubeconfig: cluster.kubeconfig,
    taskImage: (t: HarborTask) => images.get(t.name)!,
    harnessFrom: {
      kind: 'hostPath',
      nodeBinary: process.execPath,
      harnessCache: harnessCacheRoot(),
      reactScript: await ensureReactScript(),
    },
    proxy: {
      image: 'harness-lab/base-node:bookworm',
      command: ['node', '/opt/harness-lab/dist/cli.js'],
      volumes: [{ name: 'harness-lab-dist', hostPath: cli, mountPath: '/opt/harness-lab/dist' }],
    },
    proxyReadyTimeoutSec: 60,
    ...extra,
  };
}

/** A minted session key (mintSessionKey): never in a cluster object but its attempt's Secret, never in a file. */
export const MINTED_KEY = /hlk-[A-Za-z0-9_-]{32}/;

/** The admin key the lab put in a batch's proxy Secret, as the double received it. */
export function proxyAdminKeys(cluster: KubeDouble): string[] {
  return cluster.api
    .requests('POST', /\/secrets$/)
    .map((r) => (r.body as { stringData?: Record<string, string> } | undefined)?.stringData?.['admin-key'])
    .filter((k): k is string => Boolean(k));
}

/**
 * Every request body the double received, Secrets aside (the one place keys belong), holds none of
 * the keys; returns how many bodies were checked. Secrets hold them only under stringData/data.
 */
export function assertNoKeysSent(cluster: KubeDouble, keys: (string | RegExp)[]): number {
  let checked = 0;
  for (const r of cluster.api.received) {
    if (r.body === undefined) continue;
    const kind = (r.body as { kind?: string }).kind;
    const text = JSON.stringify(kind === 'Secret' ? { ...(r.body as object), stringData: undefined, data: undefined } : r.body);
    for (const k of keys) {
      const hit = typeof k === 'string' ? text.includes(k) : k.test(text);
      if (hit)
        throw new Error(
          `${r.method} ${r.path} (${kind ?? 'no kind'}) carries a key (${typeof k === 'string' ? `${k.slice(0, 6)}...` : k}) outside a Secret's data`,
        );
    }
    checked++;
  }
  return checked;
}

/** No file under dir holds any of the keys; returns how many files were read. */
export function assertNoKeysInFiles(dir: string, keys: (string | RegExp)[]): number {
  const files = (d: string): string[] =>
    readdirSync(d).flatMap((n) => (statSync(join(d, n)).isDirectory() ? files(join(d, n)) : [join(d, n)]));
  const all = files(dir);
  for (const f of all) {
    const text = readFileSync(f, 'latin1');
    for (const k of keys)
      if (typeof k === 'string' ? text.includes(k) : k.test(text))
        throw new Error(`${f} holds a key (${typeof k === 'string' ? `${k.slice(0, 6)}...` : k})`);
  }
  return all.length;
}
