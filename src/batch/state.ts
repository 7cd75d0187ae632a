// The batch directory: the one durable contract between the lab that runs a batch (src/batch/), its readers
// (exports, audit, the rollout server, the Batches view) and a lab restarted after kill -9.
//
//   <batch>/batch.json              BatchManifest, written once at submit (tmp + rename)
//   <batch>/rollouts/<id>.json      RolloutState, rewritten atomically (tmp + fsync + rename) on every change
//   <batch>/capture/                the batch proxy's data dir (sessions/<session_id>.jsonl)
//   <batch>/attempts/<id>/<attempt>/  each attempt's sandbox logs, result.json, rollout.json
//
// Batches written before attempts/ was named so hold them under runs/<id>/<attempt>/: nothing builds
// that path, every reader goes by the attempt's recorded out_dir, so old batches read and resume.
//
// A rollout's state file is the truth about it; nothing else needs to be read to resume a batch or
// to decide what an export keeps. Every file is parsed with these schemas at the boundary.
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import { SESSION_ID_PATTERN } from '../capture/store.js';
import { INFRA_CAUSES } from './infra-cause.js';

export const BATCH_SCHEMA_VERSION = 1;

// Ids read from these files become file and folder names (rollouts/<id>.json, attempts/<id>/<n>/, the
// capture's sessions/<session>.jsonl): an edited or hostile batch.json must not name a path outside
// the batch. They are checked with the capture store's own rule, the one check for every lab id.
const ID_RULE = 'must be an id: letters, digits, _ . - (at most 128), starting with a letter or digit; ids name files';
export const LabIdSchema = z.string().regex(SESSION_ID_PATTERN, ID_RULE);
/** A path inside the batch directory made of ids (`attempts/<rollout>/<attempt>`): no `..`, no absolute path. */
const BatchRelativePathSchema = z
  .string()
  .refine(
    (p) => p.split('/').every((part) => SESSION_ID_PATTERN.test(part)),
    'must be a path inside the batch directory (attempts/<rollout>/<attempt>), made of ids',
  );

/** Sampling fixed per batch and pinned on every call: only temperature is free (TRL's training_sampling). */
export const BatchSamplingSchema = z
  .object({
    temperature: z.number().finite().positive(),
    top_p: z.literal(1),
    top_k: z.literal(-1),
    min_p: z.literal(0),
  })
  .strict();
export type BatchSampling = z.infer<typeof BatchSamplingSchema>;

export function trainingSampling(temperature: number): BatchSampling {
  return { temperature, top_p: 1, top_k: -1, min_p: 0 };
}

export const ROLLOUT_STATES = ['queued', 'running', 'done', 'discarded'] as const;
export type RolloutStateName = (typeof ROLLOUT_STATES)[number];

/**
 * Exactly one class per finished rollout (docs/trainer-contracts.md §7).
 * completed: the verifier ran and gave a reward > 0. policy_failure: the harness ran, the verifier gave 0
 * (or the model's output broke the harness while tokens stayed aligned): trainable with reward 0.
 * infra_error: sandbox or harness crash, verifier never ran, no calls seen, misaligned capture: reward null.
 * timeout: agent past its deadline: discarded (reward null) unless the batch says --on-timeout keep.
 */
export const ROLLOUT_CLASSES = ['completed', 'policy_failure', 'infra_error', 'timeout'] as const;
export type RolloutClass = (typeof ROLLOUT_CLASSES)[number];

export const TaskRefSchema = z.object({ name: z.string().min(1), dir: z.string().min(1) }).strict();

export const GroupPlanSchema = z
  .object({
    group_id: LabIdSchema,
    task: z.string().min(1),
    harness: z.string().min(1),
    rollout_ids: z.array(LabIdSchema).min(2),
  })
  .strict();
export type GroupPlan = z.infer<typeof GroupPlanSchema>;

export const K8sTargetSchema = z
  .object({
    context: z.string().nullable(),
    namespace: z.string().min(1),
    registry: z.string().nullable(),
    queue_name: z.string().nullable(),
    /** The training run whose rollout server runs this batch: its objects carry LABELS.ownerRun. */
    owner_run: z.string().min(1).max(253).nullable().optional(),
  })
  .strict();

export const PacingSchema = z
  .object({
    /** Sandboxes starting at once (created until the agent is launched), apart from `parallel`; 0: no cap. */
    max_starting: z.number().int().nonnegative(),
    /** Wall budget of one sandbox start-up; past it the attempt is an infra failure (startup_timeout). */
    start_timeout_sec: z.number().positive().nullable(),
    /** Consecutive infra failures that pause new sandboxes until the backend answers its probe; 0: off. */
    breaker_after: z.number().int().nonnegative(),
  })
  .strict();
export type Pacing = z.infer<typeof PacingSchema>;

export const BatchManifestSchema = z
  .object({
    schema_version: z.literal(BATCH_SCHEMA_VERSION),
    batch_id: LabIdSchema,
    created_at: z.string(),
    backend: z.enum(['docker', 'k8s']),
    harnesses: z.array(z.string().min(1)).min(1),
    group_size: z.number().int().min(2),
    tasks: z.array(TaskRefSchema).min(1),
    groups: z.array(GroupPlanSchema).min(1),
    sampling: BatchSamplingSchema,
    policy_version: z.string().nullable(),
    timeout_sec: z.number().positive(),
    on_timeout: z.enum(['discard', 'keep']),
    parallel: z.number().int().positive(),
    /** Null: the embedded engine the batch starts for itself. */
    engine_url: z.string().nullable(),
    model: z.string().nullable(),
    k8s: K8sTargetSchema.nullable(),
    /** Failure containment and start-up pacing (runner.ts); absent in batches written before it: the defaults. */
    pacing: PacingSchema.optional(),
  })
  .strict();
export type BatchManifest = z.infer<typeof BatchManifestSchema>;

/** What a manifest without `pacing` runs with. */
export const DEFAULT_PACING: Pacing = { max_starting: 4, start_timeout_sec: 300, breaker_after: 10 };

export function pacingOf(m: Pick<BatchManifest, 'pacing'>): Pacing {
  return m.pacing ?? DEFAULT_PACING;
}

/** One try at a rollout; a lab killed mid-rollout leaves an attempt ended 'interrupted', kept for debugging. */
export const AttemptSchema = z
  .object({
    attempt: z.number().int().nonnegative(),
    session_id: LabIdSchema,
    started_at: z.string(),
    ended_at: z.string().nullable(),
    /** Relative to the batch directory. */
    out_dir: BatchRelativePathSchema,
    outcome: z.enum(['running', 'finished', 'interrupted', 'cancelled']),
    /** Only the finished attempt of a done rollout is ever trainable. */
    trainable: z.boolean(),
    /** A finished attempt's class and, for infra_error, its cause (absent in batches written before them). */
    class: z.enum(ROLLOUT_CLASSES).nullable().optional(),
    infra_cause: z.enum(INFRA_CAUSES).nullable().optional(),
  })
  .strict();
export type Attempt = z.infer<typeof AttemptSchema>;

export const RolloutStateSchema = z
  .object({
    rollout_id: LabIdSchema,
    group_id: LabIdSchema,
    member: z.number().int().nonnegative(),
    task: z.string().min(1),
    harness: z.string().min(1),
    state: z.enum(ROLLOUT_STATES),
    class: z.enum(ROLLOUT_CLASSES).nullable(),
    /** Null whenever the class is infra_error, or timeout discarded: unknown, never 0. */
    reward: z.number().finite().nullable(),
    rewards: z.record(z.string(), z.number()),
    trainable: z.boolean(),
    /** The capture session of the attempt that counts (the last one). */
    session_id: LabIdSchema.nullable(),
    attempts: z.array(AttemptSchema),
    policy_version: z.string().nullable(),
    queued_at: z.string(),
    started_at: z.string().nullable(),
    ended_at: z.string().nullable(),
    duration_ms: z.number().nonnegative().nullable(),
    /** Why it is discarded (or what went wrong), in the user's terms. */
    error: z.string().nullable(),
    /** Backend handle (container id, Job name) so resume and cancel can find what is left. */
    backend_ref: z.string().nullable(),
    n_calls: z.number().int().nonnegative(),
    /** For infra_error: what failed, as a class (infra-cause.ts); absent in batches written before it. */
    infra_cause: z.enum(INFRA_CAUSES).nullable().optional(),
  })
  .strict()
  .superRefine((s, ctx) => {
    const finished = s.state === 'done' || s.state === 'discarded';
    if (finished !== (s.class !== null)) ctx.addIssue({ code: 'custom', message: `state ${s.state} with class ${s.class}` });
    if (s.state === 'discarded' && (s.trainable || s.reward !== null))
      ctx.addIssue({ code: 'custom', message: 'a discarded rollout has reward null and is not trainable' });
    if (s.class === 'infra_error' && s.state !== 'discarded')
      ctx.addIssue({ code: 'custom', message: 'infra_error rollouts are discarded' });
  });
export type RolloutState = z.infer<typeof RolloutStateSchema>;

/** A rollout that has not run yet: queued, no attempt, no outcome (a planned batch member, a served request). */
export function queuedRolloutState(
  r: Pick<RolloutState, 'rollout_id' | 'group_id' | 'member' | 'task' | 'harness' | 'policy_version' | 'queued_at'>,
): RolloutState {
  return {
    rollout_id: r.rollout_id,
    group_id: r.group_id,
    member: r.member,
    task: r.task,
    harness: r.harness,
    state: 'queued',
    class: null,
    reward: null,
    rewards: {},
    trainable: false,
    session_id: null,
    attempts: [],
    policy_version: r.policy_version,
    queued_at: r.queued_at,
    started_at: null,
    ended_at: null,
    duration_ms: null,
    error: null,
    backend_ref: null,
    n_calls: 0,
  };
}

/**
 * Puts a rollout back in the queue for another attempt (an infra failure the lab re-runs, or one an
 * outage caused): no outcome, nothing trainable, `error` says why; its attempts so far are kept.
 */
export function queueAgain(s: RolloutState, error: string): void {
  Object.assign(s, {
    state: 'queued',
    class: null,
    reward: null,
    rewards: {},
    trainable: false,
    infra_cause: null,
    ended_at: null,
    duration_ms: null,
    error,
  });
}

export const batchPaths = (dir: string) => ({
  manifest: join(dir, 'batch.json'),
  rollouts: join(dir, 'rollouts'),
  rollout: (id: string) => join(dir, 'rollouts', `${id}.json`),
  capture: join(dir, 'capture'),
  attempts: join(dir, 'attempts'),
});

export class BatchFileError extends Error {
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(`${file}: ${message}`);
  }
}

/** Writes a JSON file so that a reader (or a lab killed at any instant) sees the old or the new content, never a torn one. */
export function writeJsonAtomic(file: string, value: unknown): void {
  mkdirSync(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  const fd = openSync(tmp, 'w');
  try {
    writeSync(fd, `${JSON.stringify(value, null, 2)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
}

function readJson<T>(file: string, schema: z.ZodType<T>): T {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new BatchFileError(
      file,
      (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'not found (is this a batch directory?)' : `not JSON: ${(err as Error).message}`,
    );
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new BatchFileError(file, `${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return parsed.data;
}

export function readManifest(dir: string): BatchManifest {
  return readJson(batchPaths(dir).manifest, BatchManifestSchema);
}

export function readRolloutState(dir: string, id: string): RolloutState {
  if (!SESSION_ID_PATTERN.test(id)) throw new BatchFileError(join(dir, 'rollouts'), `rollout id '${id.slice(0, 200)}' ${ID_RULE}`);
  return readJson(batchPaths(dir).rollout(id), RolloutStateSchema);
}

export function writeRolloutState(dir: string, state: RolloutState): void {
  const checked = RolloutStateSchema.parse(state);
  writeJsonAtomic(batchPaths(dir).rollout(checked.rollout_id), checked);
}

/** Every rollout's state, in the manifest's group order (leftover tmp files from a kill are ignored). */
export function readRolloutStates(dir: string, manifest = readManifest(dir)): RolloutState[] {
  const present = new Set(
    readdirSync(batchPaths(dir).rollouts)
      .filter((n) => n.endsWith('.json'))
      .map((n) => n.slice(0, -5)),
  );
  const out: RolloutState[] = [];
  for (const g of manifest.groups)
    for (const id of g.rollout_ids) {
      if (!present.has(id)) throw new BatchFileError(batchPaths(dir).rollout(id), 'missing: the manifest lists this rollout');
      out.push(readRolloutState(dir, id));
    }
  return out;
}
