// `harness-lab replay` (and its fork): the real harness runs again in a fresh sandbox on the
// rollout's task, behind a capture proxy whose engine is the record (recorded-engine.ts). The replay
// is a new captured session linked to the original (metadata `replay_of`), with its own rollout folder,
// rollout document and `replay.json`: every call's rung on the match ladder, the halt if any, the
// recorded calls nobody asked for, and both rewards.
import { existsSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { mintAdminKey } from '../capture/auth.js';
import { EngineClient } from '../capture/engine-client.js';
import { CaptureProxy } from '../capture/proxy.js';
import type { PinnedSampling } from '../capture/types.js';
import { openLab } from '../sandbox/lab.js';
import { nextRolloutDir, runRollout, type RolloutResult, type RolloutStage } from '../sandbox/rollout-runner.js';
import { ReplayError } from './errors.js';
import { formatDifference, type FieldDifference } from './match.js';
import { RecordedEngine, type ReplayHalt, type ReplayedCall } from './recorded-engine.js';
import { replayTokenIn } from './token-in-replay.js';
import type { ReplaySource } from './source.js';

export const REPLAY_REPORT_FILE = 'replay.json';

export interface ForkOptions {
  /** The first call (0-based arrival position) answered by the live engine. */
  fromTurn: number;
  engineUrl: string;
  engineApiKey?: string;
  /** Served model name for the live calls (default: the recorded one). */
  model?: string;
  /** Pinned on every call of the fork (e.g. another seed). */
  sampling?: PinnedSampling;
  /** Cap on each live call's output tokens (default: the proxy's, 8192). */
  maxTokens?: number;
}

export interface ReplayOptions {
  source: ReplaySource;
  /** The task folder; default: found from the rollout's metadata (see resolveTaskDir). */
  taskDir?: string;
  /** Default: the rollout's harness. */
  harness?: string;
  sandbox: 'docker' | 'local';
  outDir: string;
  fork?: ForkOptions;
  timeoutSec?: number;
  log?: (line: string) => void;
  onStage?: (stage: RolloutStage) => void;
  onCall?: (call: ReplayedCall) => void;
  signal?: AbortSignal;
  /** Handle SIGINT/SIGTERM by removing the sandbox (the CLI); the extension has its own cancel. */
  handleSignals?: boolean;
  /** A token-in capture's model folder or GGUF (tokenizer + chat template); default: found from the recorded model. */
  renderModel?: string;
}

export interface ReplayReport {
  kind: 'replay' | 'fork';
  original: { session_id: string; path: string; reward: number | null; n_calls: number };
  from_turn: number | null;
  session_id: string;
  out_dir: string;
  rollout_file: string;
  harness: string;
  task: string;
  status: RolloutResult['status'];
  reward: number | null;
  error: string | null;
  calls: ReplayedCall[];
  halt: ReplayHalt | null;
  /** Recorded calls the replay never asked for (a replay that stopped early, or a harness that asks less). */
  unasked: number[];
  counts: { exact: number; tolerated: number; none: number; live: number; tool_outputs: number };
  /** Replay: no halt, every recorded call asked, same reward. Fork: the recorded turns matched. */
  ok: boolean;
}

export { ReplayError };

/** The rollout's task folder: the given one, the metadata's `task_dir`, else `examples/tasks/<name>` near the rollout or here. */
export function resolveTaskDir(source: ReplaySource, given?: string): string {
  if (given) return resolve(given);
  const meta = source.metadata;
  const candidates: string[] = [];
  if (typeof meta.task_dir === 'string') {
    candidates.push(isAbsolute(meta.task_dir) ? meta.task_dir : resolve(meta.task_dir));
    if (!isAbsolute(meta.task_dir)) candidates.push(resolve(dirname(source.path), meta.task_dir));
  }
  const name = typeof meta.task === 'string' ? meta.task.split('/').pop()! : undefined;
  if (name) {
    candidates.push(resolve('examples', 'tasks', name), resolve('tasks', name), resolve(name));
    for (let dir = dirname(source.path), i = 0; i < 8; i++, dir = dirname(dir))
      candidates.push(join(dir, 'examples', 'tasks', name), join(dir, 'tasks', name));
  }
  const found = candidates.find((c) => existsSync(join(c, 'task.toml')));
  if (found) return found;
  throw new ReplayError(`cannot find the task of ${source.path} (metadata task ${JSON.stringify(meta.task ?? null)}); pass --task DIR`);
}

export function replayHarness(source: ReplaySource, given?: string): string {
  const harness = given ?? (typeof source.metadata.harness === 'string' ? source.metadata.harness : undefined);
  if (!harness) throw new ReplayError(`${source.path} does not say which harness ran it; pass --harness NAME`);
  return harness;
}

export async function runReplay(opts: ReplayOptions): Promise<ReplayReport> {
  const { source } = opts;
  const harness = replayHarness(source, opts.harness);
  const taskDir = resolveTaskDir(source, opts.taskDir);
  const model = opts.fork?.model ?? source.model;
  if (!model) throw new ReplayError(`${source.path} holds no engine request, so there is nothing to replay`);
  if (opts.fork && (!Number.isInteger(opts.fork.fromTurn) || opts.fork.fromTurn < 0))
    throw new ReplayError(`--from must be a call number from 0, got ${opts.fork.fromTurn}`);
  const live = opts.fork
    ? new EngineClient(opts.fork.engineUrl, opts.fork.engineApiKey ? { apiKey: opts.fork.engineApiKey } : {})
    : undefined;
  const forkTarget = opts.fork && live ? { fromTurn: opts.fork.fromTurn, engine: live } : undefined;
  // A token-in capture replays in token-in mode: the bridge builds each prompt again and the record answers its ids.
  const tokenIn = source.token_route
    ? await replayTokenIn(source, { renderModel: opts.renderModel, fork: forkTarget, live, model })
    : undefined;
  const engine = tokenIn?.recorded ?? new RecordedEngine(source, forkTarget);
  if (opts.onCall) engine.onCall(opts.onCall);
  const adminKey = mintAdminKey();
  const proxy = await CaptureProxy.start({
    engineUrl: engine.baseUrl,
    engine,
    model,
    adminKey,
    captureLevel: source.capture_level,
    dataDir: join(opts.outDir, '.capture'),
    ...(tokenIn ? { tokenIn: tokenIn.engine, render: 'proxy' as const } : { render: 'engine' as const }),
    ...(opts.fork?.maxTokens ? { maxOutputTokens: opts.fork.maxTokens } : {}),
  });
  const abort = new AbortController();
  const onOuterAbort = () => abort.abort();
  opts.signal?.addEventListener('abort', onOuterAbort, { once: true });
  // A halted replay ends the harness a moment later: it has had its error, nothing it does now is compared.
  engine.onHalt((halt) => {
    opts.log?.(halt.message);
    setTimeout(() => abort.abort(), 1500).unref();
  });
  try {
    const lab = await openLab({
      taskDir,
      harness,
      sandbox: opts.sandbox,
      outDir: opts.outDir,
      proxy,
      model,
      log: opts.log,
      handleSignals: opts.handleSignals,
    });
    try {
      const kind = opts.fork ? 'fork' : 'replay';
      const outDir = nextRolloutDir(opts.outDir, lab.task.name, `${harness}-${kind}`);
      const created = proxy.sessions.create({
        mint_key: true,
        max_model_calls: 100,
        ...(opts.fork?.sampling ? { sampling: opts.fork.sampling } : {}),
        metadata: {
          task: lab.task.fullName,
          task_dir: taskDir,
          harness,
          sandbox: opts.sandbox,
          out_dir: outDir,
          replay_of: { session_id: source.session_id, rollout: source.path, ...(opts.fork ? { from_turn: opts.fork.fromTurn } : {}) },
          ...(opts.fork
            ? {
                fork: {
                  from_turn: opts.fork.fromTurn,
                  engine_url: live!.baseUrl,
                  ...(opts.fork.sampling ? { sampling: opts.fork.sampling } : {}),
                },
              }
            : {}),
        },
      });
      const result = await runRollout({
        ...lab.rolloutOptions,
        adminKey,
        sessionId: created.session_id,
        sessionKey: created.api_key,
        exactOutDir: outDir,
        timeoutSec: opts.timeoutSec,
        onStage: opts.onStage,
        signal: abort.signal,
      });
      const report = buildReport(kind, source, result, engine, opts.fork?.fromTurn ?? null, harness);
      writeFileSync(join(outDir, REPLAY_REPORT_FILE), `${JSON.stringify(report, null, 2)}\n`);
      return report;
    } finally {
      await lab.close();
    }
  } finally {
    opts.signal?.removeEventListener('abort', onOuterAbort);
    await proxy.close();
  }
}

function buildReport(
  kind: 'replay' | 'fork',
  source: ReplaySource,
  result: RolloutResult,
  engine: RecordedEngine,
  fromTurn: number | null,
  harness: string,
): ReplayReport {
  const calls = engine.calls;
  const count = (level: ReplayedCall['level']) => calls.filter((c) => c.level === level).length;
  const counts = {
    exact: count('exact'),
    tolerated: count('tolerated'),
    none: count('none'),
    live: count('live'),
    tool_outputs: calls.filter((c) => c.tool_outputs.length > 0).length,
  };
  const halt = engine.halt;
  // A fork only promises its recorded prefix; a replay promises the whole rollout again.
  const unasked = kind === 'fork' ? [] : engine.unasked;
  const sameReward = source.reward === null || result.reward === source.reward;
  const ok =
    kind === 'fork'
      ? halt === null && calls.length >= (fromTurn ?? 0)
      : halt === null && unasked.length === 0 && sameReward && result.status === 'ok';
  return {
    kind,
    original: { session_id: source.session_id, path: source.path, reward: source.reward, n_calls: source.calls.length },
    from_turn: fromTurn,
    session_id: result.session_id,
    out_dir: result.out_dir,
    rollout_file: join(result.out_dir, 'session.rollout.json'),
    harness,
    task: result.task,
    status: result.status,
    reward: result.reward,
    error: result.error,
    calls,
    halt,
    unasked,
    counts,
    ok,
  };
}

function listDifferences(label: string, diffs: readonly FieldDifference[]): string[] {
  return diffs.map((d) => `      ${label} ${d.path}${d.rules ? ` (${d.rules.join(', ')})` : ''}`);
}

/** The report as the CLI prints it: one line per call, the halt as a diff, the verdict. */
export function formatReplayReport(r: ReplayReport): string {
  const lines: string[] = [];
  const what = r.kind === 'fork' ? `fork of ${r.original.session_id} from call ${r.from_turn}` : `replay of ${r.original.session_id}`;
  lines.push(`${what}: ${r.harness} on ${r.task} -> session ${r.session_id} (${r.out_dir})`);
  for (const c of r.calls) {
    const from = c.recorded_index === null ? '' : ` <- recorded call ${c.recorded_index}`;
    lines.push(`  call ${c.position}: ${c.level === 'none' ? 'NO MATCH' : c.level}${from}`);
    lines.push(...listDifferences('tolerated', c.tolerated));
    lines.push(...listDifferences('tool output changed:', c.tool_outputs));
  }
  if (r.halt) {
    lines.push(
      `halted at call ${r.halt.position}: ${r.halt.expected_index === null ? 'no recorded call was left' : `first difference from recorded call ${r.halt.expected_index}`}`,
    );
    if (r.halt.difference) lines.push(formatDifference(r.halt.difference).replace(/^/gm, '  '));
  }
  if (r.unasked.length) lines.push(`recorded call(s) never asked for: ${r.unasked.join(', ')}`);
  const c = r.counts;
  lines.push(
    `calls: ${c.exact} exact, ${c.tolerated} tolerated, ${c.none} no match${r.kind === 'fork' ? `, ${c.live} live` : ''}${c.tool_outputs ? `; ${c.tool_outputs} with changed tool output` : ''}`,
  );
  const reward = (v: number | null) => (v === null ? 'null' : v.toFixed(2));
  lines.push(`reward: ${reward(r.reward)} (original ${reward(r.original.reward)})${r.error ? `; ${r.error.split('\n')[0]}` : ''}`);
  lines.push(r.ok ? (r.kind === 'fork' ? 'fork: ok' : 'replay: ok') : `${r.kind}: FAILED`);
  return lines.join('\n');
}
