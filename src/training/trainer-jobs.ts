// Training runs on the user's cluster: a trainer config (YAML or JSON, parsed with zod) becomes a
// KubeRay RayJob (veRL), a Kubeflow Trainer TrainJob (TRL) or, without an operator, a plain batch/v1
// Job; it is validated before anything is sent, created with the run's label, followed through one
// list+watch, its pod's log streamed, and cancelled by deleting what was created (Background).
// CRD field names: docs/trainer-contracts.md §4.1 (RayJob), §4.2 (TrainJob), §4.5.
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, type Writable } from 'node:stream';
import * as k8s from '@kubernetes/client-node';
import { z } from 'zod';
import { shellQuote } from '../harness/registry.js';
import { apiStatus, ClusterError, clusterError, type Cluster } from '../cluster/kube.js';
import { LABELS, labelValue, validateManifests } from '../cluster/manifests.js';
import { rolloutServerUrl, serveKeyRef } from './serve-names.js';
import { ObjectWatch, PODS, type WatchKind } from '../cluster/watch.js';

export const RUN_LABEL = 'harness-lab/run';
/** Variable names that hold credentials (HARNESS_LAB_ADMIN_KEY, OPENAI_API_KEY, HF_TOKEN, WANDB_API_KEY, ...). */
const CREDENTIAL_NAME = /(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$/i;
export const TRAINER_LABEL = 'harness-lab/trainer';
export const TRAINERS = ['trl', 'verl'] as const;
export type Trainer = (typeof TRAINERS)[number];
export const OPERATORS = ['auto', 'kuberay', 'kubeflow', 'none'] as const;
export type Operator = (typeof OPERATORS)[number];
export type RunKind = 'RayJob' | 'TrainJob' | 'Job';

/** An RFC 1035 label (TrainJob names must be one): lowercase letter first, [a-z0-9-], <= 63. */
const RFC1035 = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/;
const Quantity = z
  .union([
    z.string().regex(/^[+-]?\d+(\.\d+)?([KMGTPE]i?|[munkMGTPE]|e\d+)?$/, 'a Kubernetes quantity such as 8, 500m, 16Gi'),
    z.number().nonnegative(),
  ])
  .transform(String);
const ResourceList = z.record(z.string(), Quantity);

const VolumeSource = z.union([
  z.object({ pvc: z.object({ claimName: z.string().min(1), readOnly: z.boolean().default(true) }).strict() }).strict(),
  z
    .object({
      hostPath: z
        .object({
          path: z.string().startsWith('/', 'an absolute path on the node'),
          type: z.enum(['', 'Directory', 'DirectoryOrCreate', 'File']).default('Directory'),
        })
        .strict(),
    })
    .strict(),
]);

const EnvRecord = z
  .record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name'), z.string())
  .default({})
  .superRefine((env, ctx) => {
    // A credential in `env` would sit in the run's object (and in everything that reads it): Secrets only.
    for (const name of Object.keys(env))
      if (CREDENTIAL_NAME.test(name))
        ctx.addIssue({
          code: 'custom',
          path: [name],
          message: `looks like a credential: put it in a Kubernetes Secret and name it under secretEnv (${name}: {secret: <name>, key: <key>})`,
        });
  });

/** The rollout server a run deploys beside its trainer (src/training/rollout-server.ts). */
export const ServeSpecSchema = z
  .object({
    /** The splits it serves, as `serve --dataset NAME=DIR`: a directory of Harbor tasks on this machine (relative to the config). */
    datasets: z
      .record(z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'a split name: lowercase letters, digits and -'), z.string().min(1))
      .refine((d) => Object.keys(d).length > 0, 'name at least one split'),
    /** The lab's image (default: $HARNESS_LAB_K8S_PROXY_IMAGE, else <registry>/harness-lab/harness-lab:latest). */
    image: z.string().min(1).optional(),
    /** Where the task images are pushed (built here first); none: the cluster uses this machine's image tags (kind, the test double). */
    registry: z.string().min(1).optional(),
    storage: Quantity.default('1Gi'),
    storageClassName: z.string().min(1).optional(),
    cpu: Quantity.default('1'),
    memory: Quantity.default('1Gi'),
    maxConcurrent: z.number().int().min(1).default(4),
    parallel: z.number().int().min(1).optional(),
    breakerAfter: z.number().int().min(0).optional(),
    maxStarting: z.number().int().min(0).optional(),
    /** Extra environment of the server (HARNESS_LAB_K8S_HARNESS_FROM, ...); never a credential. */
    env: EnvRecord,
  })
  .strict();
export type ServeSpec = z.infer<typeof ServeSpecSchema>;

/** Where the trainer gets its rollouts: the rollout server (`harness-lab serve`) or an export on a volume. */
const DataSource = z.discriminatedUnion('source', [
  z
    .object({
      source: z.literal('rollout-server'),
      /** A server already running (deployed by hand). */
      url: z.url({ protocol: /^https?$/ }).optional(),
      /** Or one this run deploys beside the trainer and removes with it. */
      serve: ServeSpecSchema.optional(),
    })
    .strict()
    .refine((d) => (d.url === undefined) !== (d.serve === undefined), 'give either url (a running server) or serve (one to deploy)'),
  z
    .object({
      source: z.literal('export'),
      /** The export file, relative to the volume (e.g. `batch-01/trl.jsonl`). */
      file: z
        .string()
        .min(1)
        .refine((f) => !f.startsWith('/') && !f.split('/').includes('..'), 'a path relative to the volume, without ..'),
      volume: VolumeSource,
      mountPath: z.string().startsWith('/').default('/data'),
    })
    .strict(),
]);

export const TrainConfigSchema = z
  .object({
    /** The run's name (an RFC 1035 label, <= 63); default: hl-<trainer>-<time>. */
    name: z
      .string()
      .regex(RFC1035, 'an RFC 1035 label: lowercase letters, digits and -, starting with a letter, at most 63 characters')
      .optional(),
    image: z.string().min(1),
    command: z.array(z.string()).min(1),
    args: z.array(z.string()).default([]),
    env: EnvRecord,
    /** Environment variables from Secrets (secretKeyRef): the only way a key reaches the trainer. */
    secretEnv: z
      .record(
        z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name'),
        z
          .object({
            secret: z.string().regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, 'a Secret name'),
            key: z.string().regex(/^[-._a-zA-Z0-9]+$/, 'a key of the Secret'),
          })
          .strict(),
      )
      .default({}),
    numNodes: z.number().int().min(1).default(1),
    gpusPerNode: z.number().int().min(0).default(0),
    resources: z.object({ requests: ResourceList.optional(), limits: ResourceList.optional() }).strict().default({}),
    data: DataSource,
    /** TrainJob: the ClusterTrainingRuntime (or TrainingRuntime) it runs on. */
    runtimeRef: z
      .object({ name: z.string().min(1), kind: z.enum(['ClusterTrainingRuntime', 'TrainingRuntime']).default('ClusterTrainingRuntime') })
      .strict()
      .default({ name: 'torch-distributed', kind: 'ClusterTrainingRuntime' }),
    numProcPerNode: z.union([z.number().int().min(1), z.literal('auto')]).optional(),
    /** RayJob: the Ray version of the image and the dashboard options. */
    rayVersion: z.string().default('2.46.0'),
    activeDeadlineSeconds: z.number().int().min(1).optional(),
    ttlSecondsAfterFinished: z.number().int().min(0).default(3600),
    queueName: z.string().min(1).optional(),
  })
  .strict();
export type TrainConfig = z.infer<typeof TrainConfigSchema>;

export class TrainConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TrainConfigError';
  }
}

const fieldPath = (path: readonly PropertyKey[]) =>
  path.length
    ? path
        .map((p) => (typeof p === 'number' ? `[${p}]` : String(p)))
        .join('.')
        .replace(/\.\[/g, '[')
    : '(top level)';

/** Reads a trainer config; every problem names the file and the field. */
export function parseTrainConfig(text: string, file: string): TrainConfig {
  let raw: unknown;
  try {
    raw = k8s.loadYaml(text);
  } catch (err) {
    throw new TrainConfigError(`${file}: not YAML or JSON: ${(err as Error).message.split('\n')[0]}`);
  }
  const parsed = TrainConfigSchema.safeParse(raw ?? {});
  if (!parsed.success)
    throw new TrainConfigError(`${file}: ${parsed.error.issues.map((i) => `${fieldPath(i.path)}: ${i.message}`).join('; ')}`);
  return parsed.data;
}

export function loadTrainConfig(file: string): TrainConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new TrainConfigError(`${file}: cannot read the trainer config: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return parseTrainConfig(text, file);
}

export function defaultRunName(trainer: Trainer, now = new Date()): string {
  return `hl-${trainer}-${now
    .toISOString()
    .replace(/[-:TZ.]/g, '')
    .slice(0, 14)}`;
}

export function kindFor(trainer: Trainer, operator: Exclude<Operator, 'auto'>): RunKind {
  if (operator === 'none') return 'Job';
  if (operator === 'kuberay') return 'RayJob';
  if (operator === 'kubeflow') return 'TrainJob';
  return trainer === 'verl' ? 'RayJob' : 'TrainJob';
}

/** The operator each trainer runs under by default. */
export const operatorOf = (trainer: Trainer): 'kuberay' | 'kubeflow' => (trainer === 'verl' ? 'kuberay' : 'kubeflow');

export interface RunObject extends k8s.KubernetesObject {
  apiVersion: string;
  kind: string;
  metadata: k8s.V1ObjectMeta & { name: string; namespace: string };
  spec: Record<string, unknown>;
}

type EnvVar = { name: string; value: string } | { name: string; valueFrom: { secretKeyRef: { name: string; key: string } } };

interface Built {
  labels: Record<string, string>;
  env: EnvVar[];
  volumes: Record<string, unknown>[];
  mounts: Record<string, unknown>[];
  resources: { requests?: Record<string, string>; limits?: Record<string, string> };
}

function common(config: TrainConfig, trainer: Trainer, name: string, namespace: string): Built {
  const labels = { [LABELS.managedBy]: 'harness-lab', [RUN_LABEL]: labelValue(name), [TRAINER_LABEL]: trainer };
  const env: EnvVar[] = [
    ...Object.entries(config.env).map(([k, v]) => ({ name: k, value: v })),
    ...Object.entries(config.secretEnv).map(([k, ref]) => ({ name: k, valueFrom: { secretKeyRef: { name: ref.secret, key: ref.key } } })),
  ];
  const volumes: Record<string, unknown>[] = [];
  const mounts: Record<string, unknown>[] = [];
  const d = config.data;
  if (d.source === 'rollout-server' && d.url) env.push({ name: 'HARNESS_LAB_ROLLOUT_SERVER_URL', value: d.url });
  else if (d.source === 'rollout-server') {
    // The server deployed with the run (rollout-server.ts): its Service's URL, its key only by secretKeyRef.
    const ref = serveKeyRef(name);
    env.push({ name: 'HARNESS_LAB_ROLLOUT_SERVER_URL', value: rolloutServerUrl(name, namespace) });
    env.push({ name: 'HARNESS_LAB_ADMIN_KEY', valueFrom: { secretKeyRef: { name: ref.secret, key: ref.key } } });
  } else {
    env.push({ name: 'HARNESS_LAB_EXPORT', value: `${d.mountPath.replace(/\/+$/, '')}/${d.file}` });
    const readOnly = 'pvc' in d.volume ? d.volume.pvc.readOnly : true;
    volumes.push({
      name: 'export',
      ...('pvc' in d.volume
        ? { persistentVolumeClaim: { claimName: d.volume.pvc.claimName, readOnly } }
        : { hostPath: { path: d.volume.hostPath.path, type: d.volume.hostPath.type } }),
    });
    mounts.push({ name: 'export', mountPath: d.mountPath, readOnly });
  }
  const limits = { ...(config.resources.limits ?? {}), ...(config.gpusPerNode ? { 'nvidia.com/gpu': String(config.gpusPerNode) } : {}) };
  const resources = {
    ...(config.resources.requests ? { requests: config.resources.requests } : {}),
    ...(Object.keys(limits).length ? { limits } : {}),
  };
  return { labels, env, volumes, mounts, resources };
}

export interface RunInput {
  trainer: Trainer;
  kind: RunKind;
  config: TrainConfig;
  name: string;
  namespace: string;
}

/** The one object a run creates, filled from the config. */
export function runManifest(input: RunInput): RunObject {
  const { config: c, name, namespace, trainer } = input;
  const b = common(c, trainer, name, namespace);
  const metaLabels = { ...b.labels, ...(c.queueName ? { [LABELS.queue]: c.queueName } : {}) };
  const metadata = { name, namespace, labels: metaLabels, annotations: { 'harness-lab/data-source': c.data.source } };
  const podMeta = { labels: b.labels };
  if (input.kind === 'RayJob') {
    const container = (role: string, gpu: boolean) => ({
      name: `ray-${role}`,
      image: c.image,
      env: b.env,
      volumeMounts: b.mounts,
      ...(gpu && Object.keys(b.resources).length ? { resources: b.resources } : {}),
    });
    return {
      apiVersion: 'ray.io/v1',
      kind: 'RayJob',
      metadata,
      spec: {
        entrypoint: [...c.command, ...c.args].map(shellQuote).join(' '),
        shutdownAfterJobFinishes: true,
        ttlSecondsAfterFinished: c.ttlSecondsAfterFinished,
        ...(c.activeDeadlineSeconds ? { activeDeadlineSeconds: c.activeDeadlineSeconds } : {}),
        submissionMode: 'K8sJobMode',
        backoffLimit: 0,
        ...(c.queueName ? { suspend: true } : {}),
        rayClusterSpec: {
          rayVersion: c.rayVersion,
          headGroupSpec: {
            rayStartParams: { 'dashboard-host': '0.0.0.0' },
            template: {
              metadata: { labels: { ...b.labels, 'harness-lab/role': 'head' } },
              spec: { containers: [container('head', false)], volumes: b.volumes },
            },
          },
          workerGroupSpecs: [
            {
              groupName: 'gpu',
              replicas: c.numNodes,
              minReplicas: c.numNodes,
              maxReplicas: c.numNodes,
              rayStartParams: {},
              template: {
                metadata: { labels: { ...b.labels, 'harness-lab/role': 'worker' } },
                spec: { containers: [container('worker', true)], volumes: b.volumes },
              },
            },
          ],
        },
      },
    };
  }
  if (input.kind === 'TrainJob') {
    return {
      apiVersion: 'trainer.kubeflow.org/v1alpha1',
      kind: 'TrainJob',
      metadata,
      spec: {
        runtimeRef: { name: c.runtimeRef.name, kind: c.runtimeRef.kind, apiGroup: 'trainer.kubeflow.org' },
        labels: b.labels,
        trainer: {
          image: c.image,
          command: c.command,
          ...(c.args.length ? { args: c.args } : {}),
          ...(b.env.length ? { env: b.env } : {}),
          numNodes: c.numNodes,
          ...(c.numProcPerNode !== undefined ? { numProcPerNode: c.numProcPerNode } : {}),
          ...(Object.keys(b.resources).length ? { resourcesPerNode: b.resources } : {}),
        },
        ...(c.queueName ? { suspend: true } : {}),
        // The export volume on the runtime's trainer job ("node" in the torch runtimes).
        ...(b.volumes.length
          ? {
              podTemplateOverrides: [
                { targetJobs: [{ name: 'node' }], spec: { volumes: b.volumes, containers: [{ name: 'node', volumeMounts: b.mounts }] } },
              ],
            }
          : {}),
      },
    };
  }
  if (c.numNodes > 1)
    throw new TrainConfigError(
      `numNodes: ${c.numNodes} nodes need an operator (KubeRay for veRL, Kubeflow Trainer for TRL); a plain Job (--operator none) runs one node`,
    );
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata,
    spec: {
      backoffLimit: 0,
      ttlSecondsAfterFinished: c.ttlSecondsAfterFinished,
      ...(c.activeDeadlineSeconds ? { activeDeadlineSeconds: c.activeDeadlineSeconds } : {}),
      ...(c.queueName ? { suspend: true } : {}),
      template: {
        metadata: podMeta,
        spec: {
          restartPolicy: 'Never',
          containers: [
            {
              name: 'trainer',
              image: c.image,
              command: c.command,
              ...(c.args.length ? { args: c.args } : {}),
              env: b.env,
              volumeMounts: b.mounts,
              ...(Object.keys(b.resources).length ? { resources: b.resources } : {}),
            },
          ],
          volumes: b.volumes,
        },
      },
    },
  };
}

// The fields we set on the two CRDs, checked before submission (kubernetes-models has no class for them).
const Meta = z.object({ name: z.string(), namespace: z.string().min(1), labels: z.record(z.string(), z.string()).optional() }).loose();
const PodTemplate = z
  .object({
    metadata: z.object({ labels: z.record(z.string(), z.string()) }).optional(),
    spec: z.object({ containers: z.array(z.object({ name: z.string().min(1), image: z.string().min(1) }).loose()).min(1) }).loose(),
  })
  .strict();
export const RayJobSchema = z
  .object({
    apiVersion: z.literal('ray.io/v1'),
    kind: z.literal('RayJob'),
    metadata: Meta.extend({
      name: z
        .string()
        .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/)
        .max(63),
    }),
    spec: z
      .object({
        entrypoint: z.string().min(1),
        shutdownAfterJobFinishes: z.literal(true),
        ttlSecondsAfterFinished: z.number().int().min(0),
        activeDeadlineSeconds: z.number().int().min(1).optional(),
        submissionMode: z.enum(['K8sJobMode', 'HTTPMode']),
        backoffLimit: z.literal(0),
        suspend: z.boolean().optional(),
        rayClusterSpec: z
          .object({
            rayVersion: z.string().min(1),
            headGroupSpec: z.object({ rayStartParams: z.record(z.string(), z.string()), template: PodTemplate }).strict(),
            workerGroupSpecs: z
              .array(
                z
                  .object({
                    groupName: z.string().min(1),
                    replicas: z.number().int().min(0),
                    minReplicas: z.number().int().min(0),
                    maxReplicas: z.number().int().min(0),
                    rayStartParams: z.record(z.string(), z.string()),
                    template: PodTemplate,
                  })
                  .strict(),
              )
              .min(1),
          })
          .strict(),
      })
      .strict(),
  })
  .strict();
export const TrainJobSchema = z
  .object({
    apiVersion: z.literal('trainer.kubeflow.org/v1alpha1'),
    kind: z.literal('TrainJob'),
    metadata: Meta.extend({ name: z.string().regex(RFC1035, 'an RFC 1035 label of at most 63 characters') }),
    spec: z
      .object({
        runtimeRef: z
          .object({
            name: z.string().min(1),
            kind: z.enum(['ClusterTrainingRuntime', 'TrainingRuntime']),
            apiGroup: z.literal('trainer.kubeflow.org'),
          })
          .strict(),
        labels: z.record(z.string(), z.string()).optional(),
        trainer: z
          .object({
            image: z.string().min(1),
            command: z.array(z.string()).min(1),
            args: z.array(z.string()).optional(),
            env: z
              .array(
                z.union([
                  z.object({ name: z.string(), value: z.string() }).strict(),
                  z
                    .object({
                      name: z.string(),
                      valueFrom: z.object({ secretKeyRef: z.object({ name: z.string(), key: z.string() }).strict() }).strict(),
                    })
                    .strict(),
                ]),
              )
              .optional(),
            numNodes: z.number().int().min(1),
            numProcPerNode: z.union([z.number().int().min(1), z.literal('auto')]).optional(),
            resourcesPerNode: z
              .object({ requests: z.record(z.string(), z.string()).optional(), limits: z.record(z.string(), z.string()).optional() })
              .strict()
              .optional(),
          })
          .strict(),
        suspend: z.boolean().optional(),
        podTemplateOverrides: z
          .array(
            z
              .object({
                targetJobs: z.array(z.object({ name: z.string() }).strict()).min(1),
                spec: z
                  .object({
                    volumes: z.array(z.unknown()),
                    containers: z.array(z.object({ name: z.string(), volumeMounts: z.array(z.unknown()) }).strict()),
                  })
                  .strict(),
              })
              .strict(),
          )
          .optional(),
      })
      .strict(),
  })
  .strict();

/** RayJob/TrainJob against our zod schemas of the CRD fields; the Job against kubernetes-models. */
export async function validateRunManifest(obj: RunObject): Promise<void> {
  const id = `${obj.kind} ${obj.metadata.namespace}/${obj.metadata.name}`;
  const schema = obj.kind === 'RayJob' ? RayJobSchema : obj.kind === 'TrainJob' ? TrainJobSchema : undefined;
  if (!schema) return validateManifests([obj]);
  const r = schema.safeParse(obj);
  if (!r.success)
    throw new ClusterError(`${id} is not a valid manifest: ${r.error.issues.map((i) => `/${i.path.join('/')} ${i.message}`).join('; ')}`);
  // The volumes inside the pod templates are core/v1 objects: check them with kubernetes-models too.
  const volumes = (
    obj.kind === 'RayJob'
      ? ((obj.spec.rayClusterSpec as { headGroupSpec: { template: { spec: { volumes?: unknown[] } } } }).headGroupSpec.template.spec
          .volumes ?? [])
      : ((obj.spec.podTemplateOverrides as { spec: { volumes: unknown[] } }[] | undefined)?.[0]?.spec.volumes ?? [])
  ) as Record<string, unknown>[];
  if (volumes.length) {
    const { Pod } = await import('kubernetes-models/v1');
    try {
      new Pod({ metadata: { name: obj.metadata.name }, spec: { containers: [{ name: 'x', image: 'x' }], volumes } } as never).validate();
    } catch (err) {
      throw new ClusterError(`${id}: its export volume is not valid: ${(err as Error).message}`);
    }
  }
}

export interface ResourceKind {
  group: string;
  version: string;
  plural: string;
  kind: RunKind;
}
export const RESOURCES: Record<RunKind, ResourceKind> = {
  RayJob: { group: 'ray.io', version: 'v1', plural: 'rayjobs', kind: 'RayJob' },
  TrainJob: { group: 'trainer.kubeflow.org', version: 'v1alpha1', plural: 'trainjobs', kind: 'TrainJob' },
  Job: { group: 'batch', version: 'v1', plural: 'jobs', kind: 'Job' },
};

/** Whether the cluster serves the kind (discovery of the CRD's group/version); a 404 is "no". */
export async function serves(cluster: Cluster, kind: RunKind): Promise<boolean> {
  const r = RESOURCES[kind];
  if (kind === 'Job') return true;
  try {
    const list = await cluster.kc.makeApiClient(k8s.CustomObjectsApi).getAPIResources({ group: r.group, version: r.version });
    return list.resources.some((x) => x.name === r.plural);
  } catch (err) {
    if (apiStatus(err)?.code === 404) return false;
    throw clusterError(cluster, `discovering ${r.group}/${r.version}`, err);
  }
}

/** The kind to create: the trainer's operator when the cluster has its CRD, else a plain Job. */
export async function resolveKind(cluster: Cluster, trainer: Trainer, operator: Operator): Promise<{ kind: RunKind; why: string }> {
  if (operator !== 'auto') return { kind: kindFor(trainer, operator), why: `--operator ${operator}` };
  const kind = kindFor(trainer, operatorOf(trainer));
  if (await serves(cluster, kind)) return { kind, why: `the cluster serves ${RESOURCES[kind].plural}.${RESOURCES[kind].group}` };
  return {
    kind: 'Job',
    why: `the cluster has no ${RESOURCES[kind].plural}.${RESOURCES[kind].group} CRD (no ${operatorOf(trainer) === 'kuberay' ? 'KubeRay' : 'Kubeflow Trainer'} operator), so a plain batch/v1 Job`,
  };
}

// ---- the local record of runs ------------------------------------------------------------------

export const RunRecordSchema = z
  .object({
    name: z.string(),
    trainer: z.enum(TRAINERS),
    kind: z.enum(['RayJob', 'TrainJob', 'Job']),
    apiVersion: z.string(),
    namespace: z.string(),
    context: z.string(),
    server: z.string(),
    config: z.string(),
    created_at: z.string(),
    uid: z.string().optional(),
    /** The rollout server deployed with the run (absent: the trainer reads an export or a server deployed by hand). */
    rollout_server: z
      .object({ name: z.string(), url: z.string(), splits: z.array(z.string()) })
      .strict()
      .optional(),
  })
  .strict();
export type RunRecord = z.infer<typeof RunRecordSchema>;

export function runsDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.HARNESS_LAB_DATA_DIR || join(env.HOME || homedir(), '.harness-lab'), 'runs');
}

export function saveRunRecord(rec: RunRecord, dir = runsDir()): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${rec.name}.json`), `${JSON.stringify(rec, null, 2)}\n`);
}

export function readRunRecord(name: string, dir = runsDir()): RunRecord | undefined {
  let text: string;
  try {
    text = readFileSync(join(dir, `${name}.json`), 'utf8');
  } catch {
    return undefined;
  }
  const r = RunRecordSchema.safeParse(JSON.parse(text));
  if (!r.success)
    throw new ClusterError(
      `${join(dir, `${name}.json`)}: not a run record: ${r.error.issues.map((i) => `${fieldPath(i.path)}: ${i.message}`).join('; ')}`,
    );
  return r.data;
}

/** Every readable run record (the editor matches runs to the data they train on); unreadable ones are skipped. */
export function listRunRecords(dir = runsDir()): RunRecord[] {
  let names: string[];
  try {
    names = readdirSync(dir).filter((f) => f.endsWith('.json'));
  } catch {
    return [];
  }
  return names.flatMap((f) => {
    try {
      const r = readRunRecord(f.slice(0, -5), dir);
      return r ? [r] : [];
    } catch {
      return [];
    }
  });
}

export function removeRunRecord(name: string, dir = runsDir()): void {
  rmSync(join(dir, `${name}.json`), { force: true });
}

// ---- submit, status, logs, cancel ---------------------------------------------------------------

export interface SubmitOptions {
  trainer: Trainer;
  config: TrainConfig;
  configFile: string;
  operator: Operator;
  name?: string;
  recordsDir?: string;
  /** Recorded with the run when it deployed its rollout server first (rollout-server.ts). */
  rolloutServer?: RunRecord['rollout_server'];
}

export async function submitRun(cluster: Cluster, opts: SubmitOptions): Promise<{ record: RunRecord; object: RunObject; why: string }> {
  const { kind, why } = await resolveKind(cluster, opts.trainer, opts.operator);
  const name = opts.name ?? opts.config.name ?? defaultRunName(opts.trainer);
  const object = runManifest({ trainer: opts.trainer, kind, config: opts.config, name, namespace: cluster.namespace });
  await validateRunManifest(object);
  let created: k8s.KubernetesObject;
  try {
    created = await cluster.objects.create(object);
  } catch (err) {
    throw clusterError(cluster, `creating ${kind} ${cluster.namespace}/${name}`, err);
  }
  const record: RunRecord = {
    name,
    trainer: opts.trainer,
    kind,
    apiVersion: object.apiVersion,
    namespace: cluster.namespace,
    context: cluster.context,
    server: cluster.server,
    config: opts.configFile,
    created_at: new Date().toISOString(),
    ...(created.metadata?.uid ? { uid: created.metadata.uid } : {}),
    ...(opts.rolloutServer ? { rollout_server: opts.rolloutServer } : {}),
  };
  saveRunRecord(record, opts.recordsDir);
  return { record, object, why };
}

export type RunPhase = 'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Stopped' | 'Suspended' | 'Unknown';
export const TERMINAL: ReadonlySet<RunPhase> = new Set(['Succeeded', 'Failed', 'Stopped']);

interface Condition {
  type?: string;
  status?: string;
  reason?: string;
  message?: string;
}
type WithStatus = k8s.KubernetesObject & { status?: Record<string, unknown> };

/** One phase for the three kinds: RayJob jobStatus/jobDeploymentStatus, TrainJob and Job conditions. */
export function runPhase(kind: RunKind, obj: WithStatus): { phase: RunPhase; detail: string } {
  const s = obj.status ?? {};
  const conds = (s.conditions as Condition[] | undefined) ?? [];
  const cond = (t: string) => conds.find((c) => c.type === t && c.status === 'True');
  if (kind === 'RayJob') {
    const job = String(s.jobStatus ?? '');
    const dep = String(s.jobDeploymentStatus ?? '');
    const detail = [dep && `deployment ${dep}`, job && `job ${job}`, typeof s.message === 'string' && s.message].filter(Boolean).join(', ');
    const phase: RunPhase =
      job === 'SUCCEEDED'
        ? 'Succeeded'
        : job === 'FAILED' || dep === 'Failed'
          ? 'Failed'
          : job === 'STOPPED'
            ? 'Stopped'
            : dep === 'Suspended'
              ? 'Suspended'
              : job === 'RUNNING' || dep === 'Running'
                ? 'Running'
                : 'Pending';
    return { phase, detail };
  }
  const c = cond('Failed') ?? cond('Complete') ?? cond('Suspended') ?? cond('Created');
  const detail = c ? `${c.type}${c.reason ? ` (${c.reason})` : ''}${c.message ? `: ${c.message}` : ''}` : '';
  if (cond('Failed')) return { phase: 'Failed', detail };
  if (cond('Complete')) return { phase: 'Succeeded', detail };
  if (cond('Suspended')) return { phase: 'Suspended', detail };
  if (kind === 'Job')
    return {
      phase: Number(s.active ?? 0) > 0 ? 'Running' : 'Pending',
      detail: detail || (Number(s.active ?? 0) > 0 ? `${String(s.active)} pod(s) active` : ''),
    };
  return { phase: s.jobsStatus || cond('Created') ? 'Running' : 'Pending', detail };
}

function kindWatch(kind: RunKind): WatchKind<WithStatus> {
  const r = RESOURCES[kind];
  if (kind === 'Job')
    return {
      path: (ns) => `/apis/batch/v1/namespaces/${ns}/jobs`,
      list: (c, ns, labelSelector) => c.batch.listNamespacedJob({ namespace: ns, labelSelector }) as Promise<{ items: WithStatus[] }>,
    };
  return {
    path: (ns) => `/apis/${r.group}/${r.version}/namespaces/${ns}/${r.plural}`,
    list: async (c, ns, labelSelector) =>
      (await c.kc
        .makeApiClient(k8s.CustomObjectsApi)
        .listNamespacedCustomObject({ group: r.group, version: r.version, namespace: ns, plural: r.plural, labelSelector })) as {
        items: WithStatus[];
        metadata?: { resourceVersion?: string };
      },
  };
}

export const runSelector = (name: string): string => `${RUN_LABEL}=${labelValue(name)}`;

/** The run's object through one list + watch; `onPhase` on every change, until stopped. */
export class RunWatch {
  readonly watch: ObjectWatch<WithStatus>;
  constructor(
    cluster: Cluster,
    readonly kind: RunKind,
    readonly name: string,
  ) {
    this.watch = new ObjectWatch<WithStatus>(cluster, kindWatch(kind), runSelector(name));
  }

  current(): { phase: RunPhase; detail: string; object?: WithStatus } {
    const obj = this.watch.objects.get(this.name);
    return obj ? { ...runPhase(this.kind, obj), object: obj } : { phase: 'Unknown', detail: 'not found on the cluster' };
  }

  /** Starts the list+watch and calls `onPhase` with the first state and each change of phase or detail. */
  async start(onPhase: (p: { phase: RunPhase; detail: string; deleted: boolean }) => void): Promise<void> {
    let last = '';
    const report = (deleted: boolean) => {
      const c = deleted ? { phase: 'Unknown' as RunPhase, detail: 'deleted' } : this.current();
      const key = `${c.phase}|${c.detail}`;
      if (key === last) return;
      last = key;
      onPhase({ phase: c.phase, detail: c.detail, deleted });
    };
    this.watch.on((type, obj) => obj.metadata?.name === this.name && report(type === 'DELETED'));
    await this.watch.start();
    report(false);
  }

  stop(): void {
    this.watch.stop();
  }
}

/** Finds a run: its local record, else by label among the three kinds in the namespace. */
export async function findRun(
  cluster: Cluster,
  name: string,
  recordsDir?: string,
): Promise<{ kind: RunKind; trainer: Trainer | undefined; record?: RunRecord }> {
  const record = readRunRecord(name, recordsDir);
  if (record) return { kind: record.kind, trainer: record.trainer, record };
  for (const kind of ['RayJob', 'TrainJob', 'Job'] as RunKind[]) {
    if (!(await serves(cluster, kind))) continue;
    const list = await kindWatch(kind)
      .list(cluster, cluster.namespace, runSelector(name))
      .catch((err: unknown) => {
        throw clusterError(cluster, `listing ${RESOURCES[kind].plural} in ${cluster.namespace}`, err);
      });
    const hit = list.items.find((o) => o.metadata?.name === name);
    if (hit) return { kind, trainer: hit.metadata?.labels?.[TRAINER_LABEL] as Trainer | undefined };
  }
  throw new ClusterError(
    `training run "${name}" is not in namespace "${cluster.namespace}" of kube context "${cluster.context}" ` +
      `(no RayJob, TrainJob or Job labelled ${runSelector(name)}, and no local record in ${recordsDir ?? runsDir()})`,
  );
}

export interface RunSummary {
  name: string;
  trainer: string;
  kind: RunKind;
  phase: RunPhase;
  detail: string;
  created: string | undefined;
  namespace: string;
}

/** Every harness-lab run in the namespace (all three kinds the cluster serves), for the Training Runs view. */
export async function listRuns(cluster: Cluster): Promise<RunSummary[]> {
  const out: RunSummary[] = [];
  for (const kind of ['RayJob', 'TrainJob', 'Job'] as RunKind[]) {
    if (!(await serves(cluster, kind))) continue;
    let list;
    try {
      list = await kindWatch(kind).list(cluster, cluster.namespace, RUN_LABEL);
    } catch (err) {
      throw clusterError(cluster, `listing ${RESOURCES[kind].plural} in ${cluster.namespace}`, err);
    }
    for (const o of list.items) {
      const p = runPhase(kind, o);
      out.push({
        name: o.metadata!.name!,
        trainer: o.metadata?.labels?.[TRAINER_LABEL] ?? '?',
        kind,
        phase: p.phase,
        detail: p.detail,
        created: o.metadata?.creationTimestamp ? new Date(o.metadata.creationTimestamp as unknown as string).toISOString() : undefined,
        namespace: cluster.namespace,
      });
    }
  }
  return out.sort((a, b) => (b.created ?? '').localeCompare(a.created ?? ''));
}

/** Pods of the run: ours by label; KubeRay's and JobSet's own labels for the operator-made pods. */
export function podSelectors(kind: RunKind, name: string): string[] {
  // The run's rollout server carries the run's label too; its log is `train logs RUN --server`.
  const own = `${runSelector(name)},${LABELS.role}!=rollout-server`;
  if (kind === 'RayJob') return [own, `ray.io/originated-from-cr-name=${name}`];
  if (kind === 'TrainJob') return [own, `jobset.sigs.k8s.io/jobset-name=${name}`];
  return [own];
}

const podRank = (p: k8s.V1Pod) => {
  const role = p.metadata?.labels?.['harness-lab/role'] ?? p.metadata?.labels?.['ray.io/node-type'];
  return role === 'head' ? 0 : role === 'worker' ? 2 : 1;
};

/**
 * Streams the log of the run's main pod (the Job's pod, the Ray head, the TrainJob's first node) to
 * `out`, following until the container ends. Waits (watching pods, not polling) until one is running.
 */
export async function streamRunLogs(
  cluster: Cluster,
  kind: RunKind,
  name: string,
  out: Writable,
  opts: { follow?: boolean; signal?: AbortSignal } = {},
): Promise<{ pod: string }> {
  const follow = opts.follow ?? true;
  let pod: k8s.V1Pod | undefined;
  for (const selector of podSelectors(kind, name)) {
    const pods = new ObjectWatch<k8s.V1Pod>(cluster, PODS, selector);
    const found = await new Promise<k8s.V1Pod | undefined>((resolve, reject) => {
      const pick = () => {
        const started = [...pods.objects.values()]
          .filter((p) => ['Running', 'Succeeded', 'Failed'].includes(p.status?.phase ?? ''))
          .sort((a, b) => podRank(a) - podRank(b));
        if (started[0]) resolve(started[0]);
        else if (!follow && pods.stats.lists > 0) resolve(undefined);
      };
      pods.on(() => pick());
      opts.signal?.addEventListener('abort', () => resolve(undefined), { once: true });
      pods.start().then(() => {
        if (!pods.objects.size && selector !== podSelectors(kind, name).at(-1)) resolve(undefined);
        else pick();
      }, reject);
    }).finally(() => pods.stop());
    if (found) {
      pod = found;
      break;
    }
  }
  if (!pod) throw new ClusterError(`training run "${name}" (${kind}) has no started pod in namespace "${cluster.namespace}" yet`);
  const podName = pod.metadata!.name!;
  const container = pod.spec?.containers[0]?.name ?? '';
  // client-node 1.x pipes the response body into the stream it is given and never calls its done
  // callback: a PassThrough in between ends when the body ends, while `out` (stdout) stays open.
  const pass = new PassThrough();
  pass.pipe(out, { end: false });
  await new Promise<void>((resolve, reject) => {
    let ctl: AbortController | undefined;
    pass.on('end', () => resolve());
    pass.on('error', (err) => reject(clusterError(cluster, `streaming the log of pod ${cluster.namespace}/${podName}`, err)));
    opts.signal?.addEventListener(
      'abort',
      () => {
        ctl?.abort();
        resolve();
      },
      { once: true },
    );
    new k8s.Log(cluster.kc).log(cluster.namespace, podName, container, pass, { follow }).then(
      (c) => (ctl = c),
      (err: unknown) => reject(clusterError(cluster, `streaming the log of pod ${cluster.namespace}/${podName}`, err)),
    );
  });
  pass.unpipe(out);
  return { pod: podName };
}

/** Deletes the run's object with propagationPolicy Background (its pods, Ray cluster or JobSet go with it). */
export async function cancelRun(cluster: Cluster, kind: RunKind, name: string, recordsDir?: string): Promise<'deleted' | 'gone'> {
  const r = RESOURCES[kind];
  const apiVersion = r.group === 'batch' ? 'batch/v1' : `${r.group}/${r.version}`;
  try {
    await cluster.objects.delete(
      { apiVersion, kind, metadata: { name, namespace: cluster.namespace } },
      undefined,
      undefined,
      undefined,
      undefined,
      'Background',
    );
  } catch (err) {
    if (apiStatus(err)?.code === 404) {
      removeRunRecord(name, recordsDir);
      return 'gone';
    }
    throw clusterError(cluster, `deleting ${kind} ${cluster.namespace}/${name}`, err);
  }
  removeRunRecord(name, recordsDir);
  return 'deleted';
}
