// One rollout: a real harness in its own sandbox against a Harbor task, every model call through the
// capture proxy (for an isolating runtime, through this rollout's session socket and nothing else),
// then the verifier (tests/ copied in only now, the session socket already closed, neither the
// session key nor the admin key in its environment), then the reward, the rollout document and the
// ATIF cross-check, all written under the out dir.
import { withinStartBudget, type StartGate } from './start-gate.js';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CaptureProxy } from '../capture/proxy.js';
import type { RolloutDocument } from '../capture/rollout.js';
import { SessionSocket } from '../capture/session-socket.js';
import { atifCheck, noTrajectory, type AtifCheckResult } from '../harness/atif-check.js';
import { harnessEntry, launchPlan, type HarnessEntry } from '../harness/registry.js';
import { harnessCacheRoot } from '../harness/run-local.js';
import { resolveEnvTemplate, type HarborTask } from '../tasks/task.js';
import { readReward, type Reward } from './reward.js';
import type { Isolation, Mount, Sandbox, SandboxRuntime } from './runtime.js';

export const BIN_IN_SANDBOX = '/opt/harness-lab/bin';
export const HARNESSES_IN_SANDBOX = '/opt/harness-lab/harnesses';

export type RolloutStatus = 'ok' | 'errored';

export interface RolloutResult {
  task: string;
  harness: string;
  sandbox: 'docker' | 'local';
  /** What kept the sandbox from the capture and the host (runtime.ts); null when none was created. */
  isolation: Isolation | null;
  session_id: string;
  status: RolloutStatus;
  /** Null when errored (timeout, no reward file, sandbox failure): unknown, not 0. */
  reward: number | null;
  reward_source: Reward['source'] | null;
  reward_scores: Record<string, number>;
  error: string | null;
  /** Errored rollouts are kept for debugging and never trained on. */
  trainable: boolean;
  agent: { exit_code: number | null; timed_out: boolean; ms: number; log: string };
  verifier: {
    exit_code: number | null;
    timed_out: boolean;
    ms: number;
    env_keys: string[];
    session_key_absent: boolean;
    admin_key_absent: boolean;
  } | null;
  atif: AtifCheckResult;
  atif_source: 'self' | 'converted' | 'none';
  ms: number;
  out_dir: string;
  /** The container (or local sandbox) id, once one was created. */
  sandbox_id: string | null;
  /** The sandbox stopped by something other than the lab (docker kill, OOM, a crash), in the user's terms. */
  sandbox_lost: string | null;
  /** Stopped by the caller's signal (batch cancel, shutdown). */
  cancelled: boolean;
  rollout: RolloutDocument | null;
}

export interface RolloutOptions {
  task: HarborTask;
  harness: string;
  runtime: SandboxRuntime;
  proxy: CaptureProxy;
  /** The lab's admin key: never handed to the sandbox, and checked to be absent from the verifier's environment. */
  adminKey?: string;
  /** Model name handed to the harness (the proxy overwrites it anyway). */
  model: string;
  outDir: string;
  /** Wall clock for the agent phase, seconds (default: the task's agent.timeout_sec, else 600). */
  timeoutSec?: number;
  /** Upper bound on model calls per rollout (runaway loops end with the proxy's budget stop). */
  maxModelCalls?: number;
  log?: (line: string) => void;
  /** The reference harness bundle on the host (registry kind bundled-script). */
  reactScript?: string;
  /** Told as each phase starts (progress messages in the extension). */
  onStage?: (stage: RolloutStage) => void;
  /** A capture session already created on the proxy (a batch's, with its metadata and pinned sampling). */
  sessionId?: string;
  /** That session's secret key, if it was created with one (else its id is its key). */
  sessionKey?: string;
  /** Write into exactly this directory instead of `<outDir>/<task>/<harness>/<n>`. */
  exactOutDir?: string;
  /** Aborting stops and removes the sandbox; the result says cancelled. */
  signal?: AbortSignal;
  /** Extra sandbox labels (batch, group, rollout). */
  labels?: Record<string, string>;
  /**
   * On the agent's deadline: 'stop' the sandbox (no verifier; `run` and discarded batch timeouts), or
   * stop only the harness and still 'verify' (a batch's --on-timeout keep).
   */
  timeoutMode?: 'stop' | 'verify';
  /** Called with the sandbox id as soon as it exists (a batch records it before the agent starts). */
  onSandbox?: (id: string) => void;
  /** The batch's cap on sandboxes starting at once and the start-up budget (start-gate.ts). */
  startGate?: StartGate;
}

export type RolloutStage = 'building image' | 'starting sandbox' | 'agent running' | 'verifier' | 'collecting';

/** The rollout document next to the rollout record (rollout.json), named so the rollout viewer opens it (`*.rollout.json`). */
export const ROLLOUT_DOCUMENT_FILE = 'session.rollout.json';

/** `<out>/<task>/<harness>/<n>` with the next free n. */
export function nextRolloutDir(outDir: string, task: string, harness: string): string {
  const base = join(outDir, task, harness);
  mkdirSync(base, { recursive: true });
  const used = readdirSync(base)
    .filter((n) => /^\d+$/.test(n))
    .map(Number);
  const n = used.length ? Math.max(...used) + 1 : 0;
  const dir = join(base, String(n));
  mkdirSync(dir);
  return dir;
}

function mountsFor(entry: HarnessEntry, reactScript: string | undefined): Mount[] {
  const mounts: Mount[] = [{ host: process.execPath, container: `${BIN_IN_SANDBOX}/node`, readOnly: true }];
  if (entry.install.kind === 'npm-cache') mounts.push({ host: harnessCacheRoot(), container: HARNESSES_IN_SANDBOX, readOnly: true });
  if (entry.install.kind === 'bundled-script') {
    if (!reactScript) throw new Error(`harness '${entry.name}' needs its bundled script (${entry.install.file})`);
    mounts.push({ host: reactScript, container: `${BIN_IN_SANDBOX}/${entry.install.file}`, readOnly: true });
  }
  return mounts;
}

export async function runRollout(opts: RolloutOptions): Promise<RolloutResult> {
  const t0 = Date.now();
  const { task, runtime, proxy } = opts;
  const entry = harnessEntry(opts.harness);
  let outDir: string;
  if (opts.exactOutDir) {
    mkdirSync(opts.exactOutDir, { recursive: true });
    outDir = opts.exactOutDir;
  } else outDir = nextRolloutDir(opts.outDir, task.name, entry.name);
  // A session of its own gets a minted key: the harness is wired with the key, and the id (in every
  // record, rollout.json and report) is an identifier that opens nothing.
  const created =
    opts.sessionId === undefined
      ? proxy.sessions.create({
          mint_key: true,
          max_model_calls: opts.maxModelCalls ?? 100,
          metadata: { task: task.fullName, harness: entry.name, sandbox: runtime.kind, out_dir: outDir },
        })
      : undefined;
  const sessionId = opts.sessionId ?? created!.session_id;
  const sessionKey = created?.api_key ?? opts.sessionKey ?? sessionId;
  const result: RolloutResult = {
    task: task.name,
    harness: entry.name,
    sandbox: runtime.kind,
    isolation: null,
    session_id: sessionId,
    status: 'errored',
    reward: null,
    reward_source: null,
    reward_scores: {},
    error: null,
    trainable: false,
    agent: { exit_code: null, timed_out: false, ms: 0, log: join(outDir, 'agent', entry.nativeLog) },
    verifier: null,
    atif: noTrajectory(),
    atif_source: entry.atif,
    ms: 0,
    out_dir: outDir,
    sandbox_id: null,
    sandbox_lost: null,
    cancelled: false,
    rollout: null,
  };
  let sandbox: Sandbox | undefined;
  let socket: SessionSocket | undefined;
  let releaseStart: (() => void) | undefined;
  const onAbort = () => {
    result.cancelled = true;
    void sandbox?.remove();
  };
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  const verifyAfterTimeout = opts.timeoutMode === 'verify';
  try {
    if (opts.signal?.aborted) throw new RolloutError('cancelled before the sandbox started');
    const taskFile = `${task.name}/task.toml`;
    const taskEnv = resolveEnvTemplate(task.environment.env, process.env, taskFile, 'environment.env');
    const verifierEnv = resolveEnvTemplate(task.verifierEnv, process.env, taskFile, 'verifier.env');
    opts.onStage?.('building image');
    const image = await runtime.prepareImage(task, opts.log);
    opts.onStage?.('starting sandbox');
    // A start slot (the batch's cap on sandboxes starting at once) is held until the agent is launched.
    releaseStart = opts.startGate ? await opts.startGate.acquire(opts.signal) : undefined;
    if (runtime.needsSessionSocket) socket = await SessionSocket.open(proxy, sessionId, { log: opts.log });
    const create = runtime.create({
      task,
      harness: entry.name,
      sessionId,
      image,
      hostLogsDir: outDir,
      mounts: mountsFor(entry, opts.reactScript),
      env: taskEnv,
      model: { proxyUrl: proxy.url, socketDir: socket?.dir },
      labels: opts.labels,
    });
    // Made after its budget ran out: nobody runs it, so it goes at once.
    sandbox = await withinStartBudget(create, opts.startGate?.budgetMs, (late) => void late.remove());
    result.isolation = sandbox.isolation;
    if (sandbox.isolation === 'none')
      opts.log?.(
        `the ${runtime.kind} sandbox does not isolate: the harness can reach the host's loopback services (the proxy's admin routes need the lab's admin key)`,
      );
    result.sandbox_id = sandbox.id;
    opts.onSandbox?.(sandbox.id);
    if (result.cancelled) throw new RolloutError('cancelled');
    const p = sandbox.paths;
    const plan = launchPlan(entry, {
      harnessesDir: p.harnesses,
      binDir: p.binDir,
      home: p.home,
      workdir: p.workdir,
      logsDir: p.logs,
      proxyUrl: sandbox.modelUrl,
      sessionKey,
      model: opts.model,
      instruction: task.instruction.trim(),
    });
    for (const f of plan.files) await sandbox.writeFile(f.path, f.content);
    if (task.agentUser && plan.files.length) await sandbox.exec(`chown -R ${task.agentUser} ${p.home}`);
    const timeoutSec = opts.timeoutSec ?? task.agentTimeoutSec ?? 600;
    releaseStart?.();
    opts.onStage?.('agent running');
    const agent = await sandbox.exec(plan.script, {
      env: plan.env,
      user: task.agentUser,
      timeoutMs: timeoutSec * 1000,
      logFile: result.agent.log,
      onTimeout: verifyAfterTimeout ? 'kill-command' : 'kill-sandbox',
    });
    result.agent = { ...result.agent, exit_code: agent.exitCode, timed_out: agent.timedOut, ms: agent.ms };
    if (result.cancelled) throw new RolloutError('cancelled');
    if (agent.timedOut && !verifyAfterTimeout)
      throw new RolloutError(`the agent did not finish within ${timeoutSec} s; the sandbox was stopped`);
    const lost = await lostReason(sandbox);
    if (lost) throw new SandboxLostError(lost);
    if (agent.timedOut) opts.log?.(`${entry.name} did not finish within ${timeoutSec} s; stopped it, running the verifier (keep)`);
    else if (agent.exitCode !== 0) opts.log?.(`${entry.name} exited with ${agent.exitCode}; running the verifier anyway`);

    // The model phase is over: nothing in the verifier, nor anything the agent left running, reaches
    // the capture from here on.
    await socket?.stop();
    // The verifier: tests/ enters only now, and its environment is the task's verifier env alone.
    opts.onStage?.('verifier');
    await sandbox.copyDirIn(task.testsDir, p.tests);
    const envProbe = await sandbox.exec('env', { env: verifierEnv, timeoutMs: 30_000 });
    const sessionKeyAbsent = !envProbe.output.includes(sessionKey);
    const adminKeyAbsent = !opts.adminKey || !envProbe.output.includes(opts.adminKey);
    const verifierLog = join(outDir, 'verifier', 'test-stdout.txt');
    const v = await sandbox.exec(`bash ${p.tests}/test.sh`, {
      env: verifierEnv,
      user: task.verifierUser,
      timeoutMs: task.verifierTimeoutSec * 1000,
      logFile: verifierLog,
    });
    result.verifier = {
      exit_code: v.exitCode,
      timed_out: v.timedOut,
      ms: v.ms,
      env_keys: Object.keys(verifierEnv),
      session_key_absent: sessionKeyAbsent,
      admin_key_absent: adminKeyAbsent,
    };
    if (!sessionKeyAbsent) throw new RolloutError('the session key is visible in the verifier environment');
    if (!adminKeyAbsent) throw new RolloutError('the admin key is visible in the verifier environment');
    if (v.timedOut) throw new RolloutError(`the verifier did not finish within ${task.verifierTimeoutSec} s`);
    const reward = readReward(join(outDir, 'verifier'));
    result.reward = reward.value;
    result.reward_source = reward.source;
    result.reward_scores = reward.scores;
    if (agent.timedOut)
      throw new RolloutError(`the agent did not finish within ${timeoutSec} s; the harness was stopped and the verifier ran`);
    result.status = 'ok';
  } catch (err) {
    result.error = err instanceof Error ? err.message : String(err);
    if (err instanceof SandboxLostError) result.sandbox_lost = err.message;
    else if (sandbox && !result.cancelled && !(result.agent.timed_out && !verifyAfterTimeout)) {
      // A failed step inside a sandbox that something else stopped: say what stopped it.
      const lost = await lostReason(sandbox, 3000);
      if (lost) result.sandbox_lost = result.error = lost;
    }
    if (result.cancelled) result.error = 'cancelled';
  } finally {
    releaseStart?.();
    opts.signal?.removeEventListener('abort', onAbort);
    await sandbox?.remove();
    await socket?.close();
  }
  opts.onStage?.('collecting');
  const doc = proxy.sessions.rollout(sessionId) ?? null;
  result.rollout = doc;
  if (doc) writeFileSync(join(outDir, ROLLOUT_DOCUMENT_FILE), `${JSON.stringify(doc, null, 2)}\n`);
  try {
    const traj = entry.toAtif(join(outDir, 'agent'));
    if (traj && entry.atif === 'converted') writeFileSync(join(outDir, 'agent', 'trajectory.json'), `${JSON.stringify(traj, null, 2)}\n`);
    if (traj && doc) result.atif = atifCheck(doc, traj);
  } catch (err) {
    result.atif = { ...noTrajectory(), summary: `ATIF could not be read: ${err instanceof Error ? err.message : String(err)}` };
  }
  result.trainable = result.status === 'ok' && Boolean(doc?.trainable) && result.atif.verdict !== 'MISMATCH';
  result.ms = Date.now() - t0;
  writeFileSync(join(outDir, 'rollout.json'), `${JSON.stringify(result, null, 2)}\n`);
  return result;
}

export class RolloutError extends Error {}
class SandboxLostError extends RolloutError {}

/**
 * Why the sandbox is gone, or null while it runs. After a failed step, pass `settleMs`: Docker refuses
 * an exec into a killed container a moment before `inspect` stops reporting it running.
 */
async function lostReason(sandbox: Sandbox, settleMs = 0): Promise<string | null> {
  const until = Date.now() + settleMs;
  let st = await sandbox.status();
  while (st.running && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 100));
    st = await sandbox.status();
  }
  if (st.running) return null;
  if (st.oomKilled) return `the sandbox ran out of memory (OOMKilled, exit ${st.exitCode ?? 'unknown'})`;
  return `the sandbox container stopped from outside the lab (exit ${st.exitCode ?? 'unknown'}: docker kill, a crash or the daemon)`;
}

/** `[codex / docker] task hello-file: ok reward=1.00 turns=3 roots=1 tokens=1043 atif=match 12s` */
export function rolloutLine(r: RolloutResult): string {
  const stats = r.rollout?.stats;
  const tokens = (r.rollout?.calls ?? []).reduce(
    (n, c) =>
      n + (c.prompt_token_ids?.length ?? c.usage?.prompt_tokens ?? 0) + (c.completion_token_ids?.length ?? c.usage?.completion_tokens ?? 0),
    0,
  );
  const reward = r.reward === null ? 'null' : r.reward.toFixed(2);
  const tail = r.error ? ` (${r.error.split('\n')[0]})` : '';
  return (
    `[${r.harness} / ${r.sandbox}] task ${r.task}: ${r.status} reward=${reward} turns=${stats?.n_turns ?? 0} ` +
    `roots=${stats?.n_roots ?? 0} tokens=${tokens} atif=${r.atif.verdict} ${Math.round(r.ms / 1000)}s${tail}`
  );
}
