// Harbor task loader: instruction.md, task.toml (schema 1.4 and the legacy keys), environment/,
// tests/test.sh and an optional solution/. A broken task is a TaskError naming the file and the field.
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { parse as parseToml, TomlError } from 'smol-toml';
import { z } from 'zod';

export class TaskError extends Error {
  constructor(
    readonly file: string,
    readonly field: string | undefined,
    detail: string,
  ) {
    super(`${file}${field ? `: ${field}` : ''}: ${detail}`);
    this.name = 'TaskError';
  }
}

/** "2G", "512M", "1.5Gi", "2048" (MB) -> megabytes. */
export function sizeToMb(value: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$/i.exec(value);
  if (!m) return undefined;
  const n = Number(m[1]);
  const unit = (m[2] ?? '').toLowerCase();
  const factor = unit === 'k' ? 1 / 1024 : unit === 'g' ? 1024 : unit === 't' ? 1024 * 1024 : 1;
  return Math.round(n * factor);
}

const seconds = z.number().positive();
const envTable = z.record(z.string(), z.string());
const NetworkMode = z.enum(['public', 'no-network', 'allowlist']);
export type NetworkModeName = z.infer<typeof NetworkMode>;

const EnvironmentSchema = z
  .object({
    build_timeout_sec: seconds.default(600),
    docker_image: z.string().min(1).optional(),
    os: z.enum(['linux', 'windows']).default('linux'),
    cpus: z.number().positive().optional(),
    memory_mb: z.number().int().positive().optional(),
    /** Processes (and threads) the sandbox may have at once. */
    pids_limit: z.number().int().positive().optional(),
    storage_mb: z.number().int().positive().optional(),
    gpus: z.number().int().nonnegative().optional(),
    network_mode: NetworkMode.default('public'),
    allowed_hosts: z.array(z.string()).optional(),
    env: envTable.default({}),
    workdir: z.string().startsWith('/').optional(),
    // legacy keys, converted below
    memory: z.string().optional(),
    storage: z.string().optional(),
    allow_internet: z.boolean().optional(),
  })
  .loose();

const TaskTomlSchema = z
  .object({
    schema_version: z.string().optional(),
    version: z.string().optional(), // legacy root key for schema_version
    source: z.string().optional(),
    task: z
      .object({
        name: z.string().min(1),
        version: z.string().optional(),
        description: z.string().optional(),
        keywords: z.array(z.string()).optional(),
      })
      .loose()
      .optional(),
    metadata: z.record(z.string(), z.unknown()).default({}),
    agent: z
      .object({
        timeout_sec: seconds.optional(),
        user: z.union([z.string(), z.number().int()]).optional(),
        network_mode: NetworkMode.optional(),
      })
      .loose()
      .default({}),
    verifier: z
      .object({ timeout_sec: seconds.default(600), env: envTable.default({}), user: z.union([z.string(), z.number().int()]).optional() })
      .loose()
      .default({ timeout_sec: 600, env: {} }),
    environment: EnvironmentSchema.default(EnvironmentSchema.parse({})),
    steps: z.array(z.unknown()).optional(),
  })
  .loose();

export interface TaskEnvironment {
  /** environment/ with a Dockerfile, when the task builds its own image. */
  dockerfile: string | undefined;
  contextDir: string;
  dockerImage: string | undefined;
  buildTimeoutSec: number;
  cpus: number | undefined;
  memoryMb: number | undefined;
  storageMb: number | undefined;
  networkMode: NetworkModeName;
  /** Hosts an egress sandbox may reach although they are private or the host's own ([environment].allowed_hosts). */
  allowedHosts: string[];
  pidsLimit: number | undefined;
  env: Record<string, string>;
  workdir: string | undefined;
}

export interface HarborTask {
  /** Short name for output lines and folders: the [task] name's last part, else the folder name. */
  name: string;
  fullName: string;
  dir: string;
  instruction: string;
  schemaVersion: string;
  /** Legacy keys that were read and converted ("memory -> memory_mb", ...). */
  legacy: string[];
  metadata: Record<string, unknown>;
  agentTimeoutSec: number | undefined;
  /** OS user (name or uid) the agent and the verifier run as; undefined: the image's user. */
  agentUser: string | undefined;
  verifierUser: string | undefined;
  /** The network the agent phase runs with: [agent].network_mode, else [environment].network_mode. */
  agentNetworkMode: NetworkModeName;
  verifierTimeoutSec: number;
  verifierEnv: Record<string, string>;
  environment: TaskEnvironment;
  testsDir: string;
  solutionDir: string | undefined;
  /** A scripted policy shipped next to the task (policy.json), for the embedded engine. */
  policyFile: string | undefined;
}

function readText(path: string, label: string): string {
  if (!existsSync(path)) throw new TaskError(label, undefined, 'missing (a Harbor task needs instruction.md, task.toml and tests/test.sh)');
  return readFileSync(path, 'utf8');
}

export function loadTask(dirArg: string): HarborTask {
  const dir = resolve(dirArg);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new TaskError(dir, undefined, 'not a task directory');
  const tomlPath = join(dir, 'task.toml');
  const rel = (p: string) => `${basename(dir)}/${p}`;

  const instruction = readText(join(dir, 'instruction.md'), rel('instruction.md'));
  if (!instruction.trim()) throw new TaskError(rel('instruction.md'), undefined, 'is empty');

  let raw: unknown;
  try {
    raw = parseToml(readText(tomlPath, rel('task.toml')));
  } catch (err) {
    if (err instanceof TaskError) throw err;
    const where = err instanceof TomlError ? `line ${err.line}, column ${err.column}` : undefined;
    throw new TaskError(rel('task.toml'), where, `not valid TOML: ${(err as Error).message.split('\n')[0]}`);
  }
  const parsed = TaskTomlSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new TaskError(rel('task.toml'), issue.path.join('.') || undefined, issue.message);
  }
  const t = parsed.data;
  const legacy: string[] = [];
  if (t.steps) throw new TaskError(rel('task.toml'), 'steps', 'multi-step tasks are not supported yet; run each step as its own task');

  const env = t.environment;
  let memoryMb = env.memory_mb;
  if (env.memory !== undefined) {
    const mb = sizeToMb(env.memory);
    if (mb === undefined)
      throw new TaskError(rel('task.toml'), 'environment.memory', `cannot read size '${env.memory}' (expected e.g. "2G" or "512M")`);
    memoryMb ??= mb;
    legacy.push('environment.memory -> memory_mb');
  }
  let storageMb = env.storage_mb;
  if (env.storage !== undefined) {
    const mb = sizeToMb(env.storage);
    if (mb === undefined)
      throw new TaskError(rel('task.toml'), 'environment.storage', `cannot read size '${env.storage}' (expected e.g. "10G")`);
    storageMb ??= mb;
    legacy.push('environment.storage -> storage_mb');
  }
  let networkMode = env.network_mode;
  if (env.allow_internet !== undefined) {
    if (env.allow_internet === false) networkMode = 'no-network';
    legacy.push('environment.allow_internet -> network_mode');
  }
  let schemaVersion = t.schema_version ?? '1.4';
  if (t.schema_version === undefined && t.version !== undefined) {
    schemaVersion = t.version;
    legacy.push('version -> schema_version');
  }
  if (env.os === 'windows') throw new TaskError(rel('task.toml'), 'environment.os', 'windows tasks cannot run in the Linux sandboxes');

  const envDir = join(dir, 'environment');
  const dockerfilePath = join(envDir, 'Dockerfile');
  const dockerfile = existsSync(dockerfilePath) ? dockerfilePath : undefined;
  if (!dockerfile && !env.docker_image && existsSync(join(envDir, 'docker-compose.yaml'))) {
    throw new TaskError(
      rel('environment/docker-compose.yaml'),
      undefined,
      'compose environments are not supported; use environment/Dockerfile',
    );
  }

  const testsDir = join(dir, 'tests');
  if (!existsSync(join(testsDir, 'test.sh')))
    throw new TaskError(rel('tests/test.sh'), undefined, 'missing: the verifier entry point is tests/test.sh');
  const solutionDir = existsSync(join(dir, 'solution')) ? join(dir, 'solution') : undefined;
  const policyFile = existsSync(join(dir, 'policy.json')) ? join(dir, 'policy.json') : undefined;

  const fullName = t.task?.name ?? basename(dir);
  return {
    name: fullName.split('/').pop()!,
    fullName,
    dir,
    instruction,
    schemaVersion,
    legacy,
    metadata: t.metadata,
    agentTimeoutSec: t.agent.timeout_sec,
    agentUser: t.agent.user === undefined ? undefined : String(t.agent.user),
    verifierUser: t.verifier.user === undefined ? undefined : String(t.verifier.user),
    agentNetworkMode: t.agent.network_mode ?? networkMode,
    verifierTimeoutSec: t.verifier.timeout_sec,
    verifierEnv: t.verifier.env,
    environment: {
      dockerfile,
      contextDir: envDir,
      dockerImage: env.docker_image,
      buildTimeoutSec: env.build_timeout_sec,
      cpus: env.cpus,
      memoryMb,
      storageMb,
      networkMode,
      allowedHosts: env.allowed_hosts ?? [],
      pidsLimit: env.pids_limit,
      env: env.env,
      workdir: env.workdir,
    },
    testsDir,
    solutionDir,
    policyFile,
  };
}

/** Where the user lists the host variables a task's `${VAR}` templates may copy (names, comma-separated). */
export const ALLOW_ENV_VARIABLE = 'HARNESS_LAB_ALLOW_ENV';

/** The host variables templates may read: the names in HARNESS_LAB_ALLOW_ENV (what --allow-env adds to). */
export function allowedTemplateVariables(from: NodeJS.ProcessEnv = process.env): Set<string> {
  return new Set(
    (from[ALLOW_ENV_VARIABLE] ?? '')
      .split(',')
      .map((n) => n.trim())
      .filter(Boolean),
  );
}

/** Adds names to HARNESS_LAB_ALLOW_ENV of `env` (a command's --allow-env), so backends and child processes see them. */
export function allowTemplateVariables(names: readonly string[], env: NodeJS.ProcessEnv = process.env): void {
  if (!names.length) return;
  env[ALLOW_ENV_VARIABLE] = [...new Set([...allowedTemplateVariables(env), ...names.map((n) => n.trim()).filter(Boolean)])].join(',');
}

/**
 * `${VAR}` and `${VAR:-default}` in task env tables, resolved from the given environment. A task is
 * someone else's file and its values land in a sandbox an agent controls, so only the variables the
 * user allowed are read (`--allow-env NAME`); one not allowed takes its default, or is refused. The
 * lab's own `HARNESS_LAB_*` variables (admin and engine keys) are refused even when allowed.
 */
export function resolveEnvTemplate(
  table: Record<string, string>,
  from: NodeJS.ProcessEnv,
  file: string,
  section: string,
  allowed: ReadonlySet<string> = allowedTemplateVariables(from),
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(table)) {
    out[key] = value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (_m, name: string, fallback: string | undefined) => {
      if (/^HARNESS_LAB_/i.test(name)) {
        throw new TaskError(
          file,
          `${section}.${key}`,
          `asks for host variable ${name}: the lab's own HARNESS_LAB_* variables (its keys) never go into a sandbox, even when allowed`,
        );
      }
      const v = allowed.has(name) ? from[name] : undefined;
      if (v !== undefined && v !== '') return v;
      if (fallback !== undefined) return fallback;
      if (!allowed.has(name))
        throw new TaskError(
          file,
          `${section}.${key}`,
          `asks for host variable ${name}, which is not allowed: pass --allow-env ${name} (or add it to ${ALLOW_ENV_VARIABLE}) to copy it into the sandbox`,
        );
      throw new TaskError(file, `${section}.${key}`, `needs host variable ${name}, which is not set`);
    });
  }
  return out;
}

/** Task folders under a directory (any folder holding a task.toml), for batch runs. */
export function findTasks(root: string): string[] {
  const out: string[] = [];
  const walk = (d: string, depth: number) => {
    if (existsSync(join(d, 'task.toml'))) return void out.push(d);
    if (depth > 3) return;
    for (const e of readdirSync(d, { withFileTypes: true }))
      if (e.isDirectory() && !e.name.startsWith('.') && e.name !== 'node_modules') walk(join(d, e.name), depth + 1);
  };
  walk(resolve(root), 0);
  return out.sort();
}
