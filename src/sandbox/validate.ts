// The capture contract for one harness wiring: run one rollout, then check what was captured against
// what the harness itself logged. The CLI (`harness-lab validate`) and the extension's "Validate
// Harness Wiring" command print the same table.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { isFatal } from '../capture/findings.js';
import { harnessEntry } from '../harness/registry.js';
import { openLab, type LabOptions } from './lab.js';
import { runRollout, type RolloutResult } from './rollout-runner.js';

export interface ValidationRow {
  check: string;
  ok: boolean;
  detail: string;
}

export interface ValidationTable {
  harness: string;
  task: string;
  sandbox: 'docker' | 'local';
  ok: boolean;
  rows: ValidationRow[];
  rollout: RolloutResult;
}

export interface ValidateOptions extends Omit<LabOptions, 'taskDir'> {
  /** Default: the shipped examples/tasks/hello-file. */
  taskDir?: string;
  timeoutSec?: number;
}

/** examples/tasks/hello-file of this checkout or package. */
export function defaultValidationTask(): string {
  let dir = __dirname;
  for (let i = 0; i < 6; i++) {
    const candidate = join(dir, 'examples', 'tasks', 'hello-file');
    if (existsSync(candidate)) return candidate;
    dir = dirname(dir);
  }
  throw new Error('the shipped example task examples/tasks/hello-file was not found; pass --task DIR');
}

/** The contract rows for a finished rollout (pure: the rollout record in, the table rows out). */
export function contractRows(r: RolloutResult): ValidationRow[] {
  const entry = harnessEntry(r.harness);
  const doc = r.rollout;
  const calls = doc?.calls ?? [];
  const answered = calls.filter((c) => !c.error);
  const rows: ValidationRow[] = [];
  const add = (check: string, ok: boolean, detail: string) => rows.push({ check, ok, detail });

  add(
    'rollout finished',
    r.status === 'ok' && r.agent.exit_code === 0,
    r.status === 'ok' ? `agent exit ${r.agent.exit_code}, ${Math.round(r.agent.ms / 1000)} s` : (r.error ?? 'errored'),
  );

  const atif = r.atif;
  const missing = atif.rows.filter((row) => row.status === 'missing_call').length;
  const aux = atif.rows.filter((row) => row.status === 'auxiliary').length + (answered.length - atif.ours.length);
  if (atif.verdict === 'none') {
    add(
      'every model call captured',
      false,
      `no native log to count against (${entry.atif === 'none' ? `${entry.name} has no ATIF conversion` : atif.summary}); proxy captured ${answered.length}`,
    );
  } else {
    add(
      'every model call captured',
      missing === 0 && atif.n_agent_steps <= answered.length && answered.length > 0,
      `harness log ${atif.n_agent_steps} call(s), proxy ${answered.length}${aux > 0 ? ` (${aux} auxiliary)` : ''}${missing ? `, ${missing} missing` : ''}`,
    );
  }

  const dialects = [...new Set(calls.map((c) => c.dialect))];
  add(
    'dialect detected',
    calls.length > 0 && dialects.every((d) => d === entry.dialect),
    `${dialects.join(', ') || 'no calls'} (expected ${entry.dialect})`,
  );

  const misaligned = answered.filter(
    (c) =>
      !c.prompt_token_ids?.length || !c.completion_token_ids?.length || !c.logprobs || c.logprobs.length !== c.completion_token_ids.length,
  );
  add(
    'token ids and logprobs aligned',
    doc?.capture_level === 'tokens' && answered.length > 0 && misaligned.length === 0,
    `capture level ${doc?.capture_level ?? 'none'}; ${answered.length - misaligned.length}/${answered.length} call(s) with prompt ids, sampled ids and one logprob per sampled token`,
  );

  const fatal = [...(doc?.validation ?? []), ...(doc?.sequences ?? []).flatMap((s) => s.validation)].filter(isFatal);
  const nodeIds = new Set(doc?.graph.nodes.map((n) => n.node_id) ?? []);
  const dangling = (doc?.graph.nodes ?? []).filter((n) => n.parent_id !== null && !nodeIds.has(n.parent_id));
  const s = doc?.stats;
  add(
    'graph well formed',
    Boolean(doc) && fatal.length === 0 && dangling.length === 0 && (s?.n_roots ?? 0) >= 1 && (s?.n_trainable_sequences ?? 0) >= 1,
    fatal.length
      ? fatal.slice(0, 2).join('; ')
      : `${s?.n_turns ?? 0} turn(s), ${s?.n_roots ?? 0} root(s), ${s?.n_forks ?? 0} fork(s), ${s?.n_trainable_sequences ?? 0} trainable sequence(s)`,
  );

  add('ATIF cross-check', atif.verdict === 'match', `${atif.verdict} (${r.atif_source}): ${atif.summary}`);
  add('reward read', r.reward !== null, r.reward === null ? (r.error ?? 'no reward') : `${r.reward} from ${r.reward_source}`);
  const keysAbsent = r.verifier?.session_key_absent === true && r.verifier.admin_key_absent !== false;
  const leaked = [
    r.verifier?.session_key_absent === false ? 'the session key' : '',
    r.verifier?.admin_key_absent === false ? 'the admin key' : '',
  ]
    .filter(Boolean)
    .join(' and ');
  add(
    'capture keys absent from verifier',
    keysAbsent,
    r.verifier
      ? keysAbsent
        ? `verifier env: ${r.verifier.env_keys.join(', ') || 'task env only'}`
        : `${leaked} in the verifier environment`
      : 'the verifier did not run',
  );
  return rows;
}

export async function validateHarness(opts: ValidateOptions): Promise<ValidationTable> {
  const lab = await openLab({ ...opts, taskDir: opts.taskDir ?? defaultValidationTask() });
  try {
    const r = await runRollout({ ...lab.rolloutOptions, timeoutSec: opts.timeoutSec });
    const rows = contractRows(r);
    return { harness: r.harness, task: r.task, sandbox: r.sandbox, ok: rows.every((row) => row.ok), rows, rollout: r };
  } finally {
    await lab.close();
  }
}

export function formatValidationTable(t: ValidationTable): string {
  const w = Math.max(...t.rows.map((r) => r.check.length));
  const lines = [
    `${t.harness} / ${t.sandbox} (isolation ${t.rollout.isolation ?? 'unknown'}), task ${t.task}: ${t.ok ? 'PASS' : 'FAIL'}`,
    ...t.rows.map((r) => `  ${r.check.padEnd(w)}  ${r.ok ? 'PASS' : 'FAIL'}  ${r.detail}`),
    `  rollout: ${t.rollout.out_dir}`,
  ];
  return lines.join('\n');
}
