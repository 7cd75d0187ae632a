// The double's node: a job controller, a deployment controller and a kubelet that runs every pod's
// containers as real Docker containers (image, command/args, env incl. secretKeyRef/fieldRef,
// workingDir, resources.limits -> memory/cpu limits, labels, hostPath/emptyDir/secret/configMap
// volumes) and reports pod and Job status back through the store, as the real components do
// through the API server.
//
// Networking (network.ts): pods never get a bridge. Every pod has a network namespace of its own (a
// `--network none` pause container: loopback only); Services are virtual IPs served by a relay that
// enforces the NetworkPolicies. A test can expose a host loopback port inside a namespace (an engine
// running on the host); egress policies decide which pods reach it.
//
// Also as the real components do it: securityContext (user, capabilities, no_new_privs, seccomp,
// read-only root, runAsNonRoot), native sidecars (init containers with restartPolicy Always), a
// scheduler that leaves a pod Pending/Unschedulable when its requests do not fit the node's
// capacity, Events (Scheduled, Pulled, Created, Started, Killing, FailedScheduling, FailedCreate),
// and PersistentVolumeClaims whose data outlives the pods that mount them.
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Duplex, PassThrough, type Readable } from 'node:stream';
import type Docker from 'dockerode';
import type { KubeApiDouble } from './api-server.js';
import { ApiError, clone, parseQuantity, type KObject, type OwnerReference, type ResourceDef } from './objects.js';
import type { StoreEvent } from './store.js';
import { processAlive } from '../../src/sandbox/runtime.js';
import { API_SERVICE_IP, API_SERVICE_PORT, PodNetwork } from './network.js';

const SA_PATH = '/var/run/secrets/kubernetes.io/serviceaccount';

/** The test process owning a node's containers: a later node removes those whose process is gone. */
const OWNER = `${hostname()}/${process.pid}`;

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: {
    secretKeyRef?: { name: string; key: string; optional?: boolean };
    configMapKeyRef?: { name: string; key: string };
    fieldRef?: { fieldPath: string };
  };
}
interface VolumeMount {
  name: string;
  mountPath: string;
  readOnly?: boolean;
  subPath?: string;
}
interface SecurityContext {
  runAsUser?: number;
  runAsGroup?: number;
  runAsNonRoot?: boolean;
  fsGroup?: number;
  privileged?: boolean;
  allowPrivilegeEscalation?: boolean;
  readOnlyRootFilesystem?: boolean;
  seccompProfile?: { type?: string };
  capabilities?: { add?: string[]; drop?: string[] };
}
interface ContainerSpec {
  name: string;
  image: string;
  restartPolicy?: string;
  securityContext?: SecurityContext;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  workingDir?: string;
  resources?: { limits?: Record<string, string>; requests?: Record<string, string> };
  volumeMounts?: VolumeMount[];
  ports?: { containerPort: number }[];
  readinessProbe?: { httpGet?: { path?: string; port: number }; periodSeconds?: number };
}
interface Volume {
  name: string;
  hostPath?: { path: string; type?: string };
  emptyDir?: Record<string, unknown>;
  secret?: { secretName: string; items?: { key: string; path: string }[] };
  configMap?: { name: string; items?: { key: string; path: string }[] };
  persistentVolumeClaim?: { claimName: string; readOnly?: boolean };
}
interface PodSpec {
  containers: ContainerSpec[];
  serviceAccountName?: string;
  automountServiceAccountToken?: boolean;
  initContainers?: ContainerSpec[];
  securityContext?: SecurityContext;
  restartPolicy?: string;
  volumes?: Volume[];
  activeDeadlineSeconds?: number;
}
interface ContainerStatus {
  name: string;
  image: string;
  imageID: string;
  containerID?: string;
  ready: boolean;
  started: boolean;
  restartCount: number;
  state: Record<string, unknown>;
  lastState: Record<string, unknown>;
}
interface PodCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}
interface JobCondition extends PodCondition {
  lastProbeTime?: string;
}

interface RunningPod {
  uid: string;
  ns: string;
  name: string;
  containers: Map<string, Docker.Container>;
  dirs: string[];
  stopped: boolean;
  evicted: boolean;
  /** The regular containers ended: native sidecars are being stopped, not restarted. */
  mainDone: boolean;
}

export interface KubeletOptions {
  /** Simulated scheduling + image pull time before a pod's containers start (default 0). */
  startDelayMs?: number;
  /** The node's allocatable CPU (cores) and memory (a quantity); pods whose requests do not fit stay Unschedulable. Default: unbounded. */
  capacity?: { cpu?: number; memory?: string };
}

const now = () => new Date().toISOString().replace(/\.\d+Z$/, 'Z');

export class SimulatedNode {
  private readonly pods = new Map<string, RunningPod>();
  /** Pods the scheduler has not placed yet (their requests do not fit now). */
  private readonly unscheduled = new Map<string, KObject>();
  /** Pods deleted with a grace period whose containers are being stopped. */
  private readonly terminating = new Set<string>();
  /** Requests of the pods placed on this node and not finished. */
  private readonly placed = new Map<string, { cpu: number; memory: number }>();
  private readonly claimDirs = new Map<string, string>();
  readonly network: PodNetwork;
  private readonly jobTimers = new Map<string, NodeJS.Timeout[]>();
  private readonly jobLedger = new Map<
    string,
    { failedCounted: number; ignored: number; failJob: string | null; succeeded: number; seen: Set<string> }
  >();
  private unsubscribe: (() => void) | undefined;
  private eventsStream: NodeJS.ReadableStream | undefined;
  private closed = false;
  readonly dockerLabel: string;

  constructor(
    private readonly api: KubeApiDouble,
    private readonly docker: Docker,
    readonly id: string,
    private readonly opts: KubeletOptions = {},
  ) {
    this.dockerLabel = `harness-lab.k8s-double=${id}`;
    this.network = new PodNetwork(api, docker, { 'harness-lab.k8s-double': id });
  }

  private res(group: string, plural: string): ResourceDef {
    return this.api.store.resource(group, plural)!;
  }

  async start(): Promise<void> {
    // Containers of a node whose test process was killed (no close()) would otherwise stay forever.
    for (const c of await this.docker.listContainers({ all: true, filters: JSON.stringify({ label: ['harness-lab.k8s-double.owner'] }) })) {
      const [host, pid] = (c.Labels['harness-lab.k8s-double.owner'] ?? '').split('/');
      if (host === hostname() && !processAlive(Number(pid)))
        await this.docker
          .getContainer(c.Id)
          .remove({ force: true })
          .catch(() => {});
    }
    this.api.hooks = {
      logs: (ns, pod, o) => this.logs(ns, pod, o),
      portForward: (ns, pod, port) => this.portForward(ns, pod, port),
      evict: (ns, pod) => this.evict(ns, pod),
    };
    // k8s >= 1.28 kills the whole container when one of its processes hits the memory limit.
    this.eventsStream = (await this.docker.getEvents({
      filters: JSON.stringify({ type: ['container'], event: ['oom'], label: [this.dockerLabel] }),
    })) as NodeJS.ReadableStream;
    this.eventsStream.on('data', (b: Buffer) => {
      for (const line of b.toString('utf8').split('\n').filter(Boolean)) {
        try {
          const ev = JSON.parse(line) as { id?: string };
          if (ev.id)
            void this.docker
              .getContainer(ev.id)
              .kill()
              .catch(() => {});
        } catch {
          /* partial line */
        }
      }
    });
    this.eventsStream.on('error', () => {});
    this.unsubscribe = this.api.store.onChange((e) => this.onEvent(e));
  }

  async close(): Promise<void> {
    this.closed = true;
    this.unsubscribe?.();
    (this.eventsStream as unknown as { destroy?: () => void } | undefined)?.destroy?.();
    for (const timers of this.jobTimers.values()) timers.forEach(clearTimeout);
    await this.network.close();
    for (const d of this.claimDirs.values()) rmSync(d, { recursive: true, force: true });
    const all = await this.docker.listContainers({ all: true, filters: JSON.stringify({ label: [this.dockerLabel] }) });
    await Promise.all(
      all.map((c) =>
        this.docker
          .getContainer(c.Id)
          .remove({ force: true })
          .catch(() => {}),
      ),
    );
    for (const p of this.pods.values()) for (const d of p.dirs) rmSync(d, { recursive: true, force: true });
  }

  /** Docker containers this node runs (pods and namespace plumbing). */
  async containers(): Promise<Docker.ContainerInfo[]> {
    return this.docker.listContainers({
      all: true,
      filters: JSON.stringify({ label: [this.dockerLabel, 'harness-lab.k8s-double.role=pod'] }),
    });
  }

  private onEvent(e: StoreEvent): void {
    if (this.closed) return;
    const k = `${e.res.group}/${e.res.plural}`;
    const ns = e.object.metadata.namespace!;
    const name = e.object.metadata.name!;
    if (k === '/pods') {
      // Not inside the store's dispatch of ADDED: a status written now would reach watchers before the ADDED.
      if (e.type === 'ADDED') setImmediate(() => this.schedule(e.object));
      if (e.type === 'DELETED') {
        this.unscheduled.delete(e.object.metadata.uid!);
        this.terminating.delete(e.object.metadata.uid!);
        void this.stopPod(e.object.metadata.uid!, true).finally(() => this.release(e.object.metadata.uid!));
      }
      const phase = (e.object.status as { phase?: string } | undefined)?.phase;
      if (e.type === 'MODIFIED' && (phase === 'Succeeded' || phase === 'Failed')) this.release(e.object.metadata.uid!);
      if (e.type === 'MODIFIED' && e.object.metadata.deletionTimestamp) void this.terminatePod(e.object);
      for (const ref of e.object.metadata.ownerReferences ?? []) {
        if (ref.kind === 'Job') setImmediate(() => this.syncJob(ns, ref.name));
        if (ref.kind === 'Deployment') setImmediate(() => this.syncDeployment(ns, ref.name));
      }
    } else if (k === 'batch/jobs') {
      if (e.type === 'DELETED') {
        (this.jobTimers.get(e.object.metadata.uid!) ?? []).forEach(clearTimeout);
        this.jobTimers.delete(e.object.metadata.uid!);
      } else setImmediate(() => this.syncJob(ns, name));
    } else if (k === 'apps/deployments' && e.type !== 'DELETED') setImmediate(() => this.syncDeployment(ns, name));
    else if (k === '/services') setImmediate(() => void this.network.refreshNamespace(ns).catch(() => {}));
  }

  // ---- controllers ----

  private ownedPods(ns: string, uid: string): KObject[] {
    return this.api.store.list(this.res('', 'pods'), ns).filter((p) => (p.metadata.ownerReferences ?? []).some((r) => r.uid === uid));
  }

  /** As the Job and ReplicaSet controllers do: a refused create (Pod Security admission, ...) is a FailedCreate Event on the owner. */
  private createOwnedPod(
    owner: KObject,
    template: { metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> }; spec?: unknown },
    ref: OwnerReference,
  ): void {
    try {
      const pod = this.api.store.create(this.res('', 'pods'), owner.metadata.namespace, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          generateName: `${owner.metadata.name}-`,
          labels: clone(template.metadata?.labels ?? {}),
          annotations: clone(template.metadata?.annotations ?? {}),
          ownerReferences: [ref],
        },
        spec: clone(template.spec as object),
      });
      this.api.recordEvent(
        owner as never,
        'Normal',
        'SuccessfulCreate',
        `Created pod: ${pod.metadata.name}`,
        ref.kind === 'Job' ? 'job-controller' : 'replicaset-controller',
      );
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      this.api.recordEvent(
        owner as never,
        'Warning',
        'FailedCreate',
        `Error creating: ${err.message}`,
        ref.kind === 'Job' ? 'job-controller' : 'replicaset-controller',
      );
    }
  }

  private syncDeployment(ns: string, name: string): void {
    const d = this.api.store.tryGet(this.res('apps', 'deployments'), ns, name);
    if (!d || d.metadata.deletionTimestamp) return;
    const spec = d.spec as { replicas?: number; template?: { metadata?: { labels?: Record<string, string> }; spec?: unknown } };
    const pods = this.ownedPods(ns, d.metadata.uid!).filter((p) => !p.metadata.deletionTimestamp);
    const want = spec.replicas ?? 1;
    for (let i = pods.length; i < want; i++)
      this.createOwnedPod(d, spec.template ?? {}, {
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        name,
        uid: d.metadata.uid!,
        controller: true,
        blockOwnerDeletion: true,
      });
    for (const extra of pods.slice(want)) this.api.store.delete(this.res('', 'pods'), ns, extra.metadata.name!);
    const ready = pods.filter((p) =>
      ((p.status as { conditions?: PodCondition[] } | undefined)?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'),
    ).length;
    this.api.store.mutate(
      this.res('apps', 'deployments'),
      ns,
      name,
      (o) => {
        o.status = {
          observedGeneration: o.metadata.generation,
          replicas: pods.length,
          readyReplicas: ready,
          availableReplicas: ready,
          updatedReplicas: pods.length,
          conditions: [
            {
              type: 'Available',
              status: ready >= want ? 'True' : 'False',
              reason: ready >= want ? 'MinimumReplicasAvailable' : 'MinimumReplicasUnavailable',
            },
          ],
        };
      },
      'status',
    );
  }

  private ledger(uid: string) {
    let l = this.jobLedger.get(uid);
    if (!l) this.jobLedger.set(uid, (l = { failedCounted: 0, ignored: 0, failJob: null, succeeded: 0, seen: new Set() }));
    return l;
  }

  private timer(uid: string, ms: number, fn: () => void): void {
    const t = setTimeout(fn, Math.max(0, ms));
    (this.jobTimers.get(uid) ?? this.jobTimers.set(uid, []).get(uid)!).push(t);
  }

  private clearTimers(uid: string): void {
    (this.jobTimers.get(uid) ?? []).forEach(clearTimeout);
    this.jobTimers.delete(uid);
  }

  private syncJob(ns: string, name: string): void {
    if (this.closed) return;
    const jobs = this.res('batch', 'jobs');
    const job = this.api.store.tryGet(jobs, ns, name);
    if (!job || job.metadata.deletionTimestamp) return;
    const uid = job.metadata.uid!;
    const spec = job.spec as {
      suspend?: boolean;
      activeDeadlineSeconds?: number;
      backoffLimit?: number;
      completions?: number;
      ttlSecondsAfterFinished?: number;
      podFailurePolicy?: { rules?: PodFailureRule[] };
      template: { metadata?: { labels?: Record<string, string> }; spec?: unknown };
    };
    const status = (job.status ?? {}) as {
      conditions?: JobCondition[];
      startTime?: string;
      completionTime?: string;
      active?: number;
      succeeded?: number;
      failed?: number;
      ready?: number;
    };
    const finished = (status.conditions ?? []).find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
    const pods = this.ownedPods(ns, uid);
    const l = this.ledger(uid);
    for (const p of pods) {
      const phase = (p.status as { phase?: string } | undefined)?.phase;
      if (l.seen.has(p.metadata.uid!) || (phase !== 'Succeeded' && phase !== 'Failed')) continue;
      l.seen.add(p.metadata.uid!);
      if (phase === 'Succeeded') l.succeeded++;
      else {
        const action = podFailureAction(spec.podFailurePolicy?.rules ?? [], p);
        if (action.action === 'Ignore') l.ignored++;
        else if (action.action === 'FailJob') l.failJob = action.message;
        else l.failedCounted++;
      }
    }
    const active = pods.filter(
      (p) => !['Succeeded', 'Failed'].includes((p.status as { phase?: string } | undefined)?.phase ?? '') && !p.metadata.deletionTimestamp,
    );
    const setStatus = (fn: (s: typeof status) => void) =>
      this.api.store.mutate(
        jobs,
        ns,
        name,
        (o) => {
          const s = (o.status ?? {}) as typeof status;
          fn(s);
          o.status = s;
        },
        'status',
      );
    const cond = (s: typeof status, type: string, st: string, reason: string, message: string) => {
      s.conditions = (s.conditions ?? []).filter((c) => c.type !== type);
      s.conditions.push({ type, status: st, reason, message, lastProbeTime: now(), lastTransitionTime: now() });
    };
    if (finished) {
      if (spec.ttlSecondsAfterFinished !== undefined && !this.jobTimers.has(uid)) {
        const at = Date.parse(status.completionTime ?? finished.lastTransitionTime ?? now()) + spec.ttlSecondsAfterFinished * 1000;
        this.timer(uid, at - Date.now(), () => {
          try {
            this.api.store.delete(jobs, ns, name, { propagationPolicy: 'Background' });
          } catch {
            /* already gone */
          }
        });
      }
      return;
    }
    const fail = (reason: string, message: string) => {
      for (const p of active) this.deletePod(ns, p.metadata.name!);
      this.clearTimers(uid);
      setStatus((s) => {
        cond(s, 'FailureTarget', 'True', reason, message);
        cond(s, 'Failed', 'True', reason, message);
        s.active = 0;
        s.ready = 0;
        s.failed = l.failedCounted + (l.failJob ? 0 : 0) + active.length;
      });
    };
    if (spec.suspend) {
      for (const p of active) this.deletePod(ns, p.metadata.name!);
      this.clearTimers(uid);
      setStatus((s) => {
        if (!(s.conditions ?? []).some((c) => c.type === 'Suspended' && c.status === 'True'))
          cond(s, 'Suspended', 'True', 'JobSuspended', 'Job suspended');
        delete s.startTime;
        s.active = 0;
      });
      return;
    }
    let startTime = status.startTime;
    if (!startTime) {
      startTime = now();
      const resumed = (status.conditions ?? []).some((c) => c.type === 'Suspended' && c.status === 'True');
      setStatus((s) => {
        s.startTime = startTime;
        if (resumed) cond(s, 'Suspended', 'False', 'JobResumed', 'Job resumed');
      });
      if (spec.activeDeadlineSeconds !== undefined) this.timer(uid, spec.activeDeadlineSeconds * 1000, () => this.syncJob(ns, name));
    }
    if (spec.activeDeadlineSeconds !== undefined && Date.now() >= Date.parse(startTime) + spec.activeDeadlineSeconds * 1000 - 5)
      return fail('DeadlineExceeded', 'Job was active longer than specified deadline');
    if (l.failJob) return fail('PodFailurePolicy', l.failJob);
    if (l.failedCounted > (spec.backoffLimit ?? 6)) return fail('BackoffLimitExceeded', 'Job has reached the specified backoff limit');
    if (l.succeeded >= (spec.completions ?? 1)) {
      for (const p of active) this.deletePod(ns, p.metadata.name!);
      setStatus((s) => {
        cond(s, 'SuccessCriteriaMet', 'True', 'CompletionsReached', 'Reached expected number of succeeded pods');
        cond(s, 'Complete', 'True', 'CompletionsReached', 'Reached expected number of succeeded pods');
        s.completionTime = now();
        s.succeeded = l.succeeded;
        s.active = 0;
        s.ready = 0;
      });
      return;
    }
    if (active.length === 0)
      this.createOwnedPod(job, spec.template, {
        apiVersion: 'batch/v1',
        kind: 'Job',
        name,
        uid,
        controller: true,
        blockOwnerDeletion: true,
      });
    const ready = active.filter((p) =>
      ((p.status as { conditions?: PodCondition[] } | undefined)?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'),
    ).length;
    setStatus((s) => {
      s.active = Math.max(active.length, 1);
      s.ready = ready;
      s.failed = l.failedCounted || undefined;
      if (!s.failed) delete s.failed;
      s.succeeded = l.succeeded || undefined;
      if (!s.succeeded) delete s.succeeded;
    });
  }

  private deletePod(ns: string, name: string): void {
    try {
      this.api.store.delete(this.res('', 'pods'), ns, name);
    } catch {
      /* gone */
    }
  }

  // ---- kubelet ----

  private podError(ns: string, name: string, err: unknown): void {
    this.api.store.mutate(
      this.res('', 'pods'),
      ns,
      name,
      (o) => {
        const s = (o.status ?? {}) as Record<string, unknown>;
        s.phase = 'Failed';
        s.reason = 'KubeletError';
        s.message = (err as Error).message;
        o.status = s;
      },
      'status',
    );
  }

  private setPodStatus(
    ns: string,
    name: string,
    fn: (s: Record<string, unknown> & { conditions?: PodCondition[]; containerStatuses?: ContainerStatus[] }) => void,
  ): void {
    this.api.store.mutate(
      this.res('', 'pods'),
      ns,
      name,
      (o) => {
        const s = (o.status ?? {}) as Record<string, unknown>;
        fn(s);
        o.status = s;
      },
      'status',
    );
  }

  /** Makes the host's 127.0.0.1:port reachable as 127.0.0.1:port inside a namespace's pods (those egress policy lets out). */
  async exposeHostPort(ns: string, port: number): Promise<void> {
    await this.network.exposeHostPort(ns, port);
  }

  private async env(ns: string, pod: KObject, c: ContainerSpec): Promise<string[]> {
    const out: string[] = [];
    for (const e of c.env ?? []) {
      if (e.value !== undefined) out.push(`${e.name}=${e.value}`);
      else if (e.valueFrom?.secretKeyRef) {
        const ref = e.valueFrom.secretKeyRef;
        const secret = this.api.store.tryGet(this.res('', 'secrets'), ns, ref.name);
        const v = (secret?.data as Record<string, string> | undefined)?.[ref.key];
        if (v === undefined) {
          if (ref.optional) continue;
          throw new CreateConfigError(
            secret ? `couldn't find key ${ref.key} in Secret ${ns}/${ref.name}` : `secret "${ref.name}" not found`,
          );
        }
        out.push(`${e.name}=${Buffer.from(v, 'base64').toString('utf8')}`);
      } else if (e.valueFrom?.configMapKeyRef) {
        const ref = e.valueFrom.configMapKeyRef;
        const cm = this.api.store.tryGet(this.res('', 'configmaps'), ns, ref.name);
        const v = (cm?.data as Record<string, string> | undefined)?.[ref.key];
        if (v === undefined) throw new CreateConfigError(`configmap "${ref.name}" key ${ref.key} not found`);
        out.push(`${e.name}=${v}`);
      } else if (e.valueFrom?.fieldRef) {
        const path = e.valueFrom.fieldRef.fieldPath;
        const v =
          path === 'metadata.name'
            ? pod.metadata.name
            : path === 'metadata.namespace'
              ? ns
              : path === 'metadata.uid'
                ? pod.metadata.uid
                : path === 'status.podIP'
                  ? '127.0.0.1'
                  : /^metadata\.labels\['(.+)'\]$/.exec(path)?.[1]
                    ? pod.metadata.labels?.[/^metadata\.labels\['(.+)'\]$/.exec(path)![1]!]
                    : undefined;
        out.push(`${e.name}=${v ?? ''}`);
      }
    }
    return out;
  }

  /** Polls each probed container's readiness httpGet through the pod's network; marks the pod Ready when all answer < 400. */
  private async probeUntilReady(run: RunningPod, probed: ContainerSpec[]): Promise<void> {
    const pending = new Set(probed.map((c) => c.name));
    while (pending.size && !run.stopped && !run.mainDone) {
      for (const c of probed) {
        if (!pending.has(c.name)) continue;
        const get = c.readinessProbe!.httpGet!;
        const code = await this.network.httpGet(run.uid, get.port, get.path ?? '/');
        if (code !== undefined && code < 400) pending.delete(c.name);
      }
      if (pending.size) await new Promise((r) => setTimeout(r, 500));
    }
    if (pending.size || run.stopped) return;
    const at = now();
    this.setPodStatus(run.ns, run.name, (s) => {
      s.conditions = ((s.conditions ?? []) as PodCondition[]).map((x) =>
        x.type === 'Ready' || x.type === 'ContainersReady' ? { ...x, status: 'True', lastTransitionTime: at } : x,
      );
      s.containerStatuses = ((s.containerStatuses ?? []) as ContainerStatus[]).map((cs) => ({ ...cs, ready: true }));
    });
  }

  /**
   * A pod that names its ServiceAccount runs as it, as on a real node: the account must exist, its
   * token (one the API server authenticates as system:serviceaccount:NS:NAME and authorizes by RBAC),
   * the namespace and the API server's CA are mounted at the well-known path, and KUBERNETES_SERVICE_HOST/PORT
   * point at the API server's HTTPS endpoint (network.ts relays it). A pod
   * that names none, or turns automounting off, gets nothing (the double has no default account).
   */
  private serviceAccountMount(ns: string, spec: PodSpec, run: RunningPod): { dir: string; env: string[] } | undefined {
    const name = spec.serviceAccountName;
    if (!name) return undefined;
    const account = this.api.store.tryGet(this.res('', 'serviceaccounts'), ns, name);
    if (!account) throw new CreateConfigError(`error looking up service account ${ns}/${name}: serviceaccount "${name}" not found`);
    if ((spec.automountServiceAccountToken ?? account.automountServiceAccountToken) === false) return undefined;
    const dir = mkdtempSync(join(tmpdir(), 'hl-k8s-sa-'));
    chmodSync(dir, 0o755);
    run.dirs.push(dir);
    writeFileSync(join(dir, 'token'), this.api.issueToken(ns, name), { mode: 0o644 });
    writeFileSync(join(dir, 'namespace'), ns, { mode: 0o644 });
    writeFileSync(join(dir, 'ca.crt'), this.api.tls?.ca ?? '', { mode: 0o644 });
    return { dir, env: [`KUBERNETES_SERVICE_HOST=${API_SERVICE_IP}`, `KUBERNETES_SERVICE_PORT=${API_SERVICE_PORT}`] };
  }

  private volumeDirs(ns: string, pod: KObject, spec: PodSpec, run: RunningPod): Map<string, string> {
    const out = new Map<string, string>();
    const fsGroup = spec.securityContext?.fsGroup;
    for (const v of spec.volumes ?? []) {
      if (v.hostPath) {
        out.set(v.name, v.hostPath.path);
        continue;
      }
      if (v.persistentVolumeClaim) {
        // The claim's data lives as long as the claim, not the pod (a restarted proxy finds its store).
        const claim = this.api.store.tryGet(this.res('', 'persistentvolumeclaims'), ns, v.persistentVolumeClaim.claimName);
        if (!claim) throw new CreateConfigError(`persistentvolumeclaim "${v.persistentVolumeClaim.claimName}" not found`);
        let dir = this.claimDirs.get(claim.metadata.uid!);
        if (!dir) {
          dir = mkdtempSync(join(tmpdir(), `hl-k8s-pvc-${v.persistentVolumeClaim.claimName}-`));
          chmodSync(dir, 0o755);
          this.claimDirs.set(claim.metadata.uid!, dir);
        }
        if (fsGroup !== undefined) {
          chownSync(dir, 0, fsGroup);
          chmodSync(dir, 0o2775);
        }
        out.set(v.name, dir);
        continue;
      }
      const dir = mkdtempSync(join(tmpdir(), `hl-k8s-vol-${v.name}-`));
      run.dirs.push(dir);
      out.set(v.name, dir);
      // emptyDir is world-writable as the kubelet makes it; projected data is world-readable.
      chmodSync(dir, v.emptyDir ? 0o777 : 0o755);
      const files = (
        data: Record<string, string> | undefined,
        binary: boolean,
        items: { key: string; path: string }[] | undefined,
        what: string,
      ) => {
        if (!data) throw new CreateConfigError(`${what} not found`);
        const entries = items ? items.map((i) => [i.path, data[i.key]] as const) : Object.entries(data);
        for (const [path, value] of entries) {
          if (value === undefined) throw new CreateConfigError(`${what}: missing key for ${path}`);
          const file = join(dir, path);
          mkdirSync(dirname(file), { recursive: true, mode: 0o755 });
          writeFileSync(file, binary ? Buffer.from(value, 'base64') : value, { mode: 0o644 });
        }
      };
      if (v.secret)
        files(
          this.api.store.tryGet(this.res('', 'secrets'), ns, v.secret.secretName)?.data as Record<string, string> | undefined,
          true,
          v.secret.items,
          `secret "${v.secret.secretName}"`,
        );
      if (v.configMap) {
        const cm = this.api.store.tryGet(this.res('', 'configmaps'), ns, v.configMap.name);
        if (!cm) throw new CreateConfigError(`configmap "${v.configMap.name}" not found`);
        const text = (cm.data ?? {}) as Record<string, string>;
        const bin = (cm.binaryData ?? {}) as Record<string, string>;
        const merged: Record<string, string> = {
          ...Object.fromEntries(Object.entries(text).map(([k, s]) => [k, Buffer.from(s).toString('base64')])),
          ...bin,
        };
        files(merged, true, v.configMap.items, `configmap "${v.configMap.name}"`);
      }
    }
    void pod;
    return out;
  }

  // ---- scheduler ----

  private requestsOf(spec: PodSpec): { cpu: number; memory: number } {
    const all = [...(spec.initContainers ?? []).filter((c) => c.restartPolicy === 'Always'), ...spec.containers];
    return all.reduce(
      (t, c) => ({
        cpu: t.cpu + (parseQuantity(c.resources?.requests?.cpu ?? c.resources?.limits?.cpu) ?? 0),
        memory: t.memory + (parseQuantity(c.resources?.requests?.memory ?? c.resources?.limits?.memory) ?? 0),
      }),
      { cpu: 0, memory: 0 },
    );
  }

  /** Places a pod when its requests fit what is left of the node; otherwise PodScheduled=False (Unschedulable) and a FailedScheduling Event. */
  private schedule(pod: KObject): void {
    if (this.closed || !this.api.store.tryGet(this.res('', 'pods'), pod.metadata.namespace, pod.metadata.name!)) return;
    const uid = pod.metadata.uid!;
    const ns = pod.metadata.namespace!;
    const name = pod.metadata.name!;
    const want = this.requestsOf(pod.spec as PodSpec);
    const cap = { cpu: this.opts.capacity?.cpu ?? Infinity, memory: parseQuantity(this.opts.capacity?.memory) ?? Infinity };
    const used = [...this.placed.values()].reduce((t, r) => ({ cpu: t.cpu + r.cpu, memory: t.memory + r.memory }), { cpu: 0, memory: 0 });
    const short = [want.cpu > cap.cpu - used.cpu ? 'cpu' : '', want.memory > cap.memory - used.memory ? 'memory' : ''].filter(Boolean);
    if (short.length) {
      const first = !this.unscheduled.has(uid);
      this.unscheduled.set(uid, pod);
      const message = `0/1 nodes are available: ${short.map((r) => `1 Insufficient ${r}`).join(', ')}. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.`;
      this.setPodStatus(ns, name, (s) => {
        s.conditions = [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message, lastTransitionTime: now() }];
      });
      if (first) this.api.recordEvent(pod as never, 'Warning', 'FailedScheduling', message, 'default-scheduler');
      return;
    }
    this.unscheduled.delete(uid);
    this.placed.set(uid, want);
    this.api.store.mutate(this.res('', 'pods'), ns, name, (o) => {
      (o.spec as Record<string, unknown>).nodeName = `double-${this.id}`;
    });
    this.api.recordEvent(
      pod as never,
      'Normal',
      'Scheduled',
      `Successfully assigned ${ns}/${name} to double-${this.id}`,
      'default-scheduler',
    );
    void this.runPod(this.api.store.tryGet(this.res('', 'pods'), ns, name) ?? pod).catch((err) => this.podError(ns, name, err));
  }

  /** A pod finished or went away: its requests are free, and pods waiting for room are tried again. */
  private release(uid: string): void {
    if (!this.placed.delete(uid)) return;
    for (const p of [...this.unscheduled.values()]) {
      const cur = this.api.store.tryGet(this.res('', 'pods'), p.metadata.namespace, p.metadata.name!);
      if (!cur) this.unscheduled.delete(p.metadata.uid!);
      else this.schedule(cur);
    }
  }

  // ---- kubelet ----

  /** The Docker options a container's securityContext (over the pod's) becomes. */
  private async securityOptions(
    ns: string,
    podName: string,
    spec: PodSpec,
    c: ContainerSpec,
  ): Promise<Partial<Docker.ContainerCreateOptions> & { HostConfig: Docker.HostConfig }> {
    const pod = spec.securityContext ?? {};
    const sc = c.securityContext ?? {};
    const user = sc.runAsUser ?? pod.runAsUser;
    const group = sc.runAsGroup ?? pod.runAsGroup;
    if ((sc.runAsNonRoot ?? pod.runAsNonRoot) === true) {
      if (user === 0)
        throw new CreateConfigError(`container's runAsUser breaks non-root policy (pod: "${podName}_${ns}", container: ${c.name})`);
      if (user === undefined) {
        const imageUser = (await this.docker.getImage(c.image).inspect()).Config.User ?? '';
        if (imageUser === '' || imageUser === 'root' || imageUser.startsWith('0'))
          throw new CreateConfigError(
            `container has runAsNonRoot and image will run as root (pod: "${podName}_${ns}", container: ${c.name})`,
          );
      }
    }
    const securityOpt: string[] = [];
    if (sc.allowPrivilegeEscalation === false) securityOpt.push('no-new-privileges');
    const seccomp = sc.seccompProfile?.type ?? pod.seccompProfile?.type;
    if (seccomp === 'Unconfined') securityOpt.push('seccomp=unconfined');
    return {
      ...(user !== undefined ? { User: `${user}${group !== undefined ? `:${group}` : ''}` } : {}),
      HostConfig: {
        ...(sc.capabilities?.drop?.length ? { CapDrop: sc.capabilities.drop } : {}),
        ...(sc.capabilities?.add?.length ? { CapAdd: sc.capabilities.add } : {}),
        ...(securityOpt.length ? { SecurityOpt: securityOpt } : {}),
        ...(sc.readOnlyRootFilesystem ? { ReadonlyRootfs: true } : {}),
        ...(sc.privileged ? { Privileged: true } : {}),
        ...(pod.fsGroup !== undefined ? { GroupAdd: [String(pod.fsGroup)] } : {}),
      },
    };
  }

  private async runPod(pod: KObject): Promise<void> {
    const ns = pod.metadata.namespace!;
    const name = pod.metadata.name!;
    const uid = pod.metadata.uid!;
    const spec = pod.spec as PodSpec;
    const run: RunningPod = { uid, ns, name, containers: new Map(), dirs: [], stopped: false, evicted: false, mainDone: false };
    this.pods.set(uid, run);
    const sidecars = (spec.initContainers ?? []).filter((c) => c.restartPolicy === 'Always');
    const inits = (spec.initContainers ?? []).filter((c) => c.restartPolicy !== 'Always');
    if (inits.length)
      throw new Error('the test double runs native sidecars (restartPolicy: Always) only, not run-to-completion init containers');
    const all = [...sidecars, ...spec.containers];
    const waitingStatus = (c: ContainerSpec) => ({
      name: c.name,
      image: c.image,
      imageID: '',
      ready: false,
      started: false,
      restartCount: 0,
      state: { waiting: { reason: 'ContainerCreating' } },
      lastState: {},
    });
    this.setPodStatus(ns, name, (s) => {
      s.conditions = [{ type: 'PodScheduled', status: 'True', lastTransitionTime: now() }];
      s.hostIP = '127.0.0.1';
      s.containerStatuses = spec.containers.map(waitingStatus);
      if (sidecars.length) s.initContainerStatuses = sidecars.map(waitingStatus);
    });
    if (this.opts.startDelayMs) await new Promise((r) => setTimeout(r, this.opts.startDelayMs));
    if (run.stopped) return;
    for (const c of all) {
      const exists = await this.docker
        .getImage(c.image)
        .inspect()
        .then(
          () => true,
          () => false,
        );
      if (!exists) {
        const waiting = (w: Record<string, unknown>) => (cs: ContainerStatus) =>
          cs.name === c.name ? { ...cs, state: { waiting: w } } : cs;
        const set = (w: Record<string, unknown>) =>
          this.setPodStatus(ns, name, (s) => {
            s.containerStatuses = (s.containerStatuses ?? []).map(waiting(w));
            if (s.initContainerStatuses) s.initContainerStatuses = (s.initContainerStatuses as ContainerStatus[]).map(waiting(w));
          });
        set({
          reason: 'ErrImagePull',
          message: `rpc error: code = NotFound desc = failed to pull and unpack image "${c.image}": not found (the test double's node uses local Docker images only)`,
        });
        this.api.recordEvent(pod as never, 'Warning', 'Failed', `Failed to pull image "${c.image}": not found`, 'kubelet');
        setTimeout(() => set({ reason: 'ImagePullBackOff', message: `Back-off pulling image "${c.image}"` }), 500).unref();
        return;
      }
      this.api.recordEvent(pod as never, 'Normal', 'Pulled', `Container image "${c.image}" already present on machine`, 'kubelet');
    }
    let volumes: Map<string, string>;
    let account: { dir: string; env: string[] } | undefined;
    const envs = new Map<string, string[]>();
    const security = new Map<string, Awaited<ReturnType<SimulatedNode['securityOptions']>>>();
    try {
      volumes = this.volumeDirs(ns, pod, spec, run);
      account = this.serviceAccountMount(ns, spec, run);
      for (const c of all) {
        envs.set(c.name, [...(await this.env(ns, pod, c)), ...(account?.env ?? [])]);
        security.set(c.name, await this.securityOptions(ns, name, spec, c));
      }
    } catch (err) {
      if (!(err instanceof CreateConfigError)) throw err;
      this.setPodStatus(ns, name, (s) => {
        s.containerStatuses = (s.containerStatuses ?? []).map((cs) => ({
          ...cs,
          state: { waiting: { reason: 'CreateContainerConfigError', message: err.message } },
        }));
      });
      this.api.recordEvent(pod as never, 'Warning', 'Failed', `Error: ${err.message}`, 'kubelet');
      return;
    }
    const pause = await this.network.create(pod, OWNER);
    for (const c of all) {
      const limits = c.resources?.limits ?? {};
      const memory = parseQuantity(limits.memory);
      const cpu = parseQuantity(limits.cpu);
      const binds = (c.volumeMounts ?? []).map((m) => {
        const host = volumes.get(m.name);
        if (!host) throw new Error(`volume ${m.name} not found`);
        return `${m.subPath ? join(host, m.subPath) : host}:${m.mountPath}${m.readOnly ? ':ro' : ''}`;
      });
      if (account) binds.push(`${account.dir}:${SA_PATH}:ro`);
      const labels: Record<string, string> = {
        'harness-lab.k8s-double': this.id,
        'harness-lab.k8s-double.owner': OWNER,
        'harness-lab.k8s-double.role': 'pod',
        'io.kubernetes.pod.name': name,
        'io.kubernetes.pod.namespace': ns,
        'io.kubernetes.pod.uid': uid,
        'io.kubernetes.container.name': c.name,
      };
      for (const [k, v] of Object.entries(pod.metadata.labels ?? {})) labels[`k8s.label/${k}`] = v;
      const sec = security.get(c.name)!;
      const container = await this.docker.createContainer({
        Image: c.image,
        ...(c.command ? { Entrypoint: c.command } : {}),
        ...(c.args ? { Cmd: c.args } : c.command ? { Cmd: [] } : {}),
        Env: envs.get(c.name),
        ...(c.workingDir ? { WorkingDir: c.workingDir } : {}),
        ...(sec.User ? { User: sec.User } : {}),
        Labels: labels,
        HostConfig: {
          NetworkMode: `container:${pause.id}`,
          Binds: binds,
          Init: true,
          ...(memory ? { Memory: Math.round(memory), MemorySwap: Math.round(memory) } : {}),
          ...(cpu ? { NanoCpus: Math.round(cpu * 1e9) } : {}),
          ...sec.HostConfig,
        },
      });
      run.containers.set(c.name, container);
      this.api.recordEvent(pod as never, 'Normal', 'Created', `Created container ${c.name}`, 'kubelet');
    }
    // Deleted while its containers were being created: nothing of it may keep running.
    const removeAll = () => Promise.all([...run.containers.values()].map((c) => c.remove({ force: true }).catch(() => {})));
    if (run.stopped) return void (await removeAll());
    // Native sidecars first (in order), then the regular containers.
    for (const c of sidecars) await run.containers.get(c.name)!.start();
    await Promise.all(spec.containers.map((c) => run.containers.get(c.name)!.start()));
    for (const c of all) this.api.recordEvent(pod as never, 'Normal', 'Started', `Started container ${c.name}`, 'kubelet');
    if (run.stopped && !run.evicted) return void (await removeAll());
    const started = now();
    const runningStatus = (c: ContainerSpec) => ({
      name: c.name,
      image: c.image,
      imageID: c.image,
      containerID: `docker://${run.containers.get(c.name)!.id}`,
      ready: true,
      started: true,
      restartCount: 0,
      state: { running: { startedAt: started } },
      lastState: {},
    });
    // A container with an HTTP readiness probe is ready only once the probe answers (Services send it
    // nothing before), as on a real node; one without is ready when it runs.
    const probed = spec.containers.filter((c) => c.readinessProbe?.httpGet);
    const ready = probed.length ? 'False' : 'True';
    this.setPodStatus(ns, name, (s) => {
      s.phase = 'Running';
      s.podIP = '127.0.0.1';
      s.podIPs = [{ ip: '127.0.0.1' }];
      s.startTime = started;
      s.conditions = [
        { type: 'PodScheduled', status: 'True', lastTransitionTime: started },
        { type: 'Initialized', status: 'True', lastTransitionTime: started },
        { type: 'ContainersReady', status: ready, lastTransitionTime: started },
        { type: 'Ready', status: ready, lastTransitionTime: started },
      ];
      s.containerStatuses = spec.containers.map((c) => ({ ...runningStatus(c), ready: !c.readinessProbe?.httpGet }));
      if (sidecars.length) s.initContainerStatuses = sidecars.map(runningStatus);
    });
    if (probed.length) void this.probeUntilReady(run, probed);
    const sidecarsDone = Promise.all(sidecars.map((c) => this.superviseContainer(run, c, 'Always', true)));
    await Promise.all(spec.containers.map((c) => this.superviseContainer(run, c, spec.restartPolicy ?? 'Always', false)));
    // The regular containers ended: the kubelet stops the sidecars (they do not decide the phase).
    run.mainDone = true;
    for (const c of sidecars) {
      this.api.recordEvent(pod as never, 'Normal', 'Killing', `Stopping container ${c.name}`, 'kubelet');
      await run.containers
        .get(c.name)!
        .kill()
        .catch(() => {});
    }
    await sidecarsDone;
    if (run.stopped && !run.evicted) return;
    const statuses =
      (this.api.store.tryGet(this.res('', 'pods'), ns, name)?.status as { containerStatuses?: ContainerStatus[] } | undefined)
        ?.containerStatuses ?? [];
    const allOk = statuses.every((cs) => (cs.state.terminated as { exitCode?: number } | undefined)?.exitCode === 0);
    this.setPodStatus(ns, name, (s) => {
      s.phase = allOk && !run.evicted ? 'Succeeded' : 'Failed';
      s.conditions = (s.conditions ?? []).map((c) =>
        c.type === 'Ready' || c.type === 'ContainersReady' ? { ...c, status: 'False', reason: 'PodCompleted' } : c,
      );
    });
    if (run.evicted) setImmediate(() => this.deletePod(ns, name));
  }

  private async superviseContainer(run: RunningPod, c: ContainerSpec, restartPolicy: string, sidecar: boolean): Promise<void> {
    const container = run.containers.get(c.name)!;
    const field = sidecar ? 'initContainerStatuses' : 'containerStatuses';
    for (let restarts = 0; ; restarts++) {
      await container.wait().catch(() => undefined);
      const info = await container.inspect().catch(() => undefined);
      if (!info || (run.stopped && !run.evicted)) return;
      const exitCode = info.State.OOMKilled ? 137 : info.State.ExitCode;
      const terminated = {
        exitCode,
        reason: info.State.OOMKilled ? 'OOMKilled' : exitCode === 0 ? 'Completed' : 'Error',
        startedAt: info.State.StartedAt.replace(/\.\d+Z$/, 'Z'),
        finishedAt: info.State.FinishedAt.replace(/\.\d+Z$/, 'Z'),
        containerID: `docker://${info.Id}`,
      };
      const again =
        !run.stopped && !(sidecar && run.mainDone) && (restartPolicy === 'Always' || (restartPolicy === 'OnFailure' && exitCode !== 0));
      this.setPodStatus(run.ns, run.name, (s) => {
        s[field] = ((s[field] ?? []) as ContainerStatus[]).map((cs) =>
          cs.name !== c.name
            ? cs
            : again
              ? {
                  ...cs,
                  ready: false,
                  restartCount: restarts + 1,
                  state: { waiting: { reason: 'CrashLoopBackOff' } },
                  lastState: { terminated },
                }
              : { ...cs, ready: false, started: false, state: { terminated } },
        );
      });
      if (!again) return;
      await new Promise((r) => setTimeout(r, Math.min(10_000, 200 * 2 ** restarts)));
      if (run.stopped || (sidecar && run.mainDone)) return;
      await container.start().catch(() => {});
      this.setPodStatus(run.ns, run.name, (s) => {
        s[field] = ((s[field] ?? []) as ContainerStatus[]).map((cs) =>
          cs.name === c.name ? { ...cs, ready: true, started: true, state: { running: { startedAt: now() } } } : cs,
        );
      });
    }
  }

  /**
   * A pod deleted with a grace period (store.ts gracefulPodDeletion): its containers get SIGTERM and,
   * after deletionGracePeriodSeconds, SIGKILL (docker stop -t), as a kubelet does; then the pod goes
   * from the API with grace 0. Once per pod; a pod this node never started goes at once.
   */
  private async terminatePod(pod: KObject): Promise<void> {
    const uid = pod.metadata.uid!;
    if (this.terminating.has(uid)) return;
    this.terminating.add(uid);
    const ns = pod.metadata.namespace!;
    const name = pod.metadata.name!;
    const run = this.pods.get(uid);
    if (run) {
      run.stopped = true;
      const grace = pod.metadata.deletionGracePeriodSeconds ?? 30;
      for (const c of run.containers.keys()) this.api.recordEvent(pod as never, 'Normal', 'Killing', `Stopping container ${c}`, 'kubelet');
      await Promise.all([...run.containers.values()].map((c) => c.stop({ t: grace }).catch(() => {})));
    }
    try {
      this.api.store.delete(this.res('', 'pods'), ns, name, { gracePeriodSeconds: 0, preconditions: { uid } });
    } catch {
      /* gone already */
    }
  }

  private async stopPod(uid: string, remove: boolean): Promise<void> {
    const run = this.pods.get(uid);
    if (!run) return;
    run.stopped = true;
    if (!remove) {
      await Promise.all([...run.containers.values()].map((c) => c.kill().catch(() => {})));
      return;
    }
    this.pods.delete(uid);
    await Promise.all([...run.containers.values()].map((c) => c.remove({ force: true }).catch(() => {})));
    await this.network.remove(uid);
    for (const d of run.dirs) rmSync(d, { recursive: true, force: true });
  }

  /** Eviction as the Eviction API does it: DisruptionTarget first, then the containers are killed. */
  async evict(ns: string, name: string): Promise<void> {
    const pod = this.api.store.get(this.res('', 'pods'), ns, name);
    const run = this.pods.get(pod.metadata.uid!);
    this.setPodStatus(ns, name, (s) => {
      s.conditions = [
        ...(s.conditions ?? []).filter((c) => c.type !== 'DisruptionTarget'),
        {
          type: 'DisruptionTarget',
          status: 'True',
          reason: 'EvictionByEvictionAPI',
          message: 'Eviction API: evicting',
          lastTransitionTime: now(),
        },
      ];
    });
    if (!run) return this.deletePod(ns, name);
    run.evicted = true;
    run.stopped = true;
    await Promise.all([...run.containers.values()].map((c) => c.kill().catch(() => {})));
  }

  private containerOf(ns: string, pod: string, container?: string): Docker.Container {
    const p = this.api.store.get(this.res('', 'pods'), ns, pod);
    const run = this.pods.get(p.metadata.uid!);
    const names = (p.spec as PodSpec).containers.map((c) => c.name);
    const cname = container ?? names[0]!;
    const c = run?.containers.get(cname);
    if (!c) {
      const reason =
        (
          (p.status as { containerStatuses?: ContainerStatus[] } | undefined)?.containerStatuses?.find((cs) => cs.name === cname)?.state
            .waiting as { reason?: string } | undefined
        )?.reason ?? 'ContainerCreating';
      throw new ApiError(400, 'BadRequest', `container "${cname}" in pod "${pod}" is waiting to start: ${reason}`);
    }
    return c;
  }

  private async logs(ns: string, pod: string, o: { container?: string; follow: boolean; tailLines?: number }): Promise<Readable> {
    const c = this.containerOf(ns, pod, o.container);
    const out = new PassThrough();
    if (o.follow) {
      const stream = (await c.logs({
        follow: true,
        stdout: true,
        stderr: true,
        ...(o.tailLines !== undefined ? { tail: o.tailLines } : {}),
      })) as NodeJS.ReadableStream;
      this.docker.modem.demuxStream(stream, out, out);
      stream.on('end', () => out.end());
      stream.on('close', () => out.end());
      out.on('close', () => (stream as unknown as { destroy?: () => void }).destroy?.());
    } else {
      const buf = (await c.logs({
        follow: false,
        stdout: true,
        stderr: true,
        ...(o.tailLines !== undefined ? { tail: o.tailLines } : {}),
      })) as unknown as Buffer;
      out.end(demuxBuffer(buf));
    }
    return out;
  }

  /** What kubelet's port-forward does in the pod's network namespace: connect to localhost:port there. */
  private async portForward(ns: string, pod: string, port: number): Promise<Duplex> {
    const c = this.containerOf(ns, pod);
    // The reader is the foreground: when the pod side closes, the writer is killed and the exec (hence the stream) ends.
    // The writer keeps the exec's stdin through an explicit redirection (background jobs otherwise read /dev/null).
    const script = `exec 3<>/dev/tcp/127.0.0.1/${port} || exit 1; cat 0<&0 >&3 2>/dev/null & w=$!; cat <&3; kill $w 2>/dev/null; exit 0`;
    const exec = await c.exec({ Cmd: ['bash', '-c', script], AttachStdin: true, AttachStdout: true, AttachStderr: true, Tty: false });
    const stream = (await exec.start({ hijack: true, stdin: true })) as Duplex;

    const out = new PassThrough();
    const errOut = new PassThrough();
    this.docker.modem.demuxStream(stream, out, errOut);
    stream.on('end', () => out.end());
    stream.on('close', () => out.end());
    return Duplex.from({ readable: out, writable: stream });
  }
}

class CreateConfigError extends Error {}

interface PodFailureRule {
  action: 'FailJob' | 'Ignore' | 'Count' | 'FailIndex';
  onExitCodes?: { containerName?: string; operator: 'In' | 'NotIn'; values: number[] };
  onPodConditions?: { type: string; status?: string }[];
}

/** The Job controller's podFailurePolicy: the first rule that matches decides. */
function podFailureAction(rules: PodFailureRule[], pod: KObject): { action: string; message: string } {
  const status = (pod.status ?? {}) as { conditions?: PodCondition[]; containerStatuses?: ContainerStatus[] };
  for (const [i, rule] of rules.entries()) {
    if (rule.onPodConditions?.some((pc) => (status.conditions ?? []).some((c) => c.type === pc.type && c.status === (pc.status ?? 'True'))))
      return {
        action: rule.action,
        message: `Pod ${pod.metadata.namespace}/${pod.metadata.name} has condition ${rule.onPodConditions[0]!.type} matching ${rule.action} rule at index ${i}`,
      };
    if (rule.onExitCodes) {
      for (const cs of status.containerStatuses ?? []) {
        if (rule.onExitCodes.containerName && rule.onExitCodes.containerName !== cs.name) continue;
        const code = (cs.state.terminated as { exitCode?: number } | undefined)?.exitCode;
        if (code === undefined || code === 0) continue;
        const inList = rule.onExitCodes.values.includes(code);
        if (rule.onExitCodes.operator === 'In' ? inList : !inList)
          return {
            action: rule.action,
            message: `Container ${cs.name} for pod ${pod.metadata.namespace}/${pod.metadata.name} failed with exit code ${code} matching ${rule.action} rule at index ${i}`,
          };
      }
    }
  }
  return { action: 'Count', message: '' };
}

/** Docker's multiplexed log frames (8-byte headers) to plain bytes. */
function demuxBuffer(buf: Buffer): Buffer {
  const parts: Buffer[] = [];
  let i = 0;
  while (i + 8 <= buf.length) {
    const size = buf.readUInt32BE(i + 4);
    parts.push(buf.subarray(i + 8, i + 8 + size));
    i += 8 + size;
  }
  return Buffer.concat(parts);
}
