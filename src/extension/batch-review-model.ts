// What the Batches view's review actions show, as plain data: Audit Batch's Markdown document and
// the problems it raises (src/export/audit.ts, the same audit as `harness-lab audit BATCH`), the
// batch and group a command acts on, the quick-pick rows, and audit errors in the user's terms.
// Nothing here imports vscode.
import { basename, dirname } from 'node:path';
import { BatchFileError, batchPaths, readManifest } from '../batch/state.js';
import { batchSessionFile, type BatchStatus, type GroupStatus } from '../batch/status.js';
import { ScriptedPolicy } from '../engine/policy.js';
import { SAMPLING_POLICY_FILE, batchPolicyFile } from '../sandbox/policy-engine.js';
import { loadTask } from '../tasks/task.js';
import type { AuditMember, AuditReport, GroupAudit } from '../export/audit.js';
import type { BehaviourAggregate } from '../export/behaviour.js';
import { ExportInputError } from '../export/source.js';
import type { BatchErrorNode, BatchesTreeNode } from './batches-model.js';

/** The batch directory a command argument names: a Batches tree node (any kind), a path, or a Uri. */
export function batchDirOf(arg: unknown): string | undefined {
  if (typeof arg === 'string' && arg) return arg;
  if (!arg || typeof arg !== 'object') return undefined;
  const o = arg as { dir?: unknown; fsPath?: unknown; scheme?: unknown };
  if (typeof o.dir === 'string' && o.dir) return o.dir;
  if (typeof o.fsPath === 'string' && o.scheme === 'file') return o.fsPath;
  return undefined;
}

/** The batch and (when the argument names one) the group an Open Group View argument points at. */
export function groupTargetOf(arg: unknown): { dir: string; groupId: string | null } | undefined {
  const dir = batchDirOf(arg);
  if (!dir) return undefined;
  const node = arg as BatchesTreeNode | { kind?: undefined; groupId?: unknown };
  if (node.kind === 'group') return { dir, groupId: node.group.group_id };
  if (node.kind === 'rollout') return { dir, groupId: node.rollout.group };
  if (node.kind !== undefined) return { dir, groupId: null };
  if (typeof node.groupId === 'string' && node.groupId) return { dir, groupId: node.groupId };
  return { dir, groupId: null };
}

export function isErrorNode(arg: unknown): arg is BatchErrorNode {
  return !!arg && typeof arg === 'object' && (arg as { kind?: unknown }).kind === 'error';
}

const num = (x: number | null, d = 3) => (x === null ? '–' : String(+x.toFixed(d)));
const share = (x: number) => `${(x * 100).toFixed(1)}%`;
const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** One quick-pick row per group of a batch, as the Batches view describes it. */
export function groupPickItems(st: BatchStatus): { label: string; description: string; detail: string; groupId: string }[] {
  return st.groups.map((g: GroupStatus) => ({
    label: g.group_id,
    description: [
      `${g.done + g.discarded}/${g.size} finished`,
      `mean ${num(g.mean)}`,
      `std ${num(g.std)}`,
      ...(g.no_contrast ? ['NO CONTRAST'] : []),
      ...(g.too_few_trainable ? ['FEWER THAN 2 TRAINABLE'] : []),
    ].join(' · '),
    detail: `task ${g.task} · harness ${g.harness} · rewards [${g.rewards.map((r) => num(r)).join(', ')}]`,
    groupId: g.group_id,
  }));
}

/** The captured session of a group member, when it has one (`<batch>/capture/sessions/<id>.jsonl`). */
export function memberSessionFile(dir: string, sessionId: string | null): string | null {
  return sessionId ? batchSessionFile(dir, sessionId) : null;
}

/** Why a batch cannot be audited or shown, naming the batch and the file: the audit's own errors reworded. */
export function batchReadError(action: string, dir: string, err: unknown): Error {
  const name = basename(dir);
  if (err instanceof BatchFileError) {
    const what = err.message.slice(err.file.length + 2);
    const file = err.file === batchPaths(dir).manifest ? 'its batch.json' : basename(err.file);
    return new Error(
      `Cannot ${action} batch '${name}': ${file} is ${/^not found/.test(what) ? 'missing' : 'unreadable'} (${what}). File: ${err.file}`,
      { cause: err },
    );
  }
  if (err instanceof ExportInputError) {
    return new Error(
      `Cannot ${action} batch '${name}': a kept rollout's capture cannot be read (${err.message.slice(err.file.length + 2)}). File: ${err.file}`,
      { cause: err },
    );
  }
  return new Error(`Cannot ${action} batch '${name}' (${dir}): ${err instanceof Error ? err.message : String(err)}`, { cause: err });
}

/** Markdown-safe inline text (table cells included). */
export function md(text: string): string {
  return text.replace(/[\\`*_[\]<>|#]/g, (c) => `\\${c}`).replace(/\r?\n/g, ' ');
}

const code = (text: string) => `\`${text.replace(/`/g, "'")}\``;

export interface AuditProblem {
  /** A short kind for the notification (no contrast, stale calls, ...). */
  kind: 'no_contrast' | 'too_small' | 'discarded' | 'unfinished' | 'stale' | 'contract';
  /** One sentence in the user's terms. */
  text: string;
}

/** What a user should act on before training on this batch, most serious first. */
export function auditProblems(r: AuditReport): AuditProblem[] {
  const out: AuditProblem[] = [];
  for (const f of r.contract.failures) {
    out.push({
      kind: 'contract',
      text:
        `Rollout ${f.rollout_id} (group ${f.group_id}) breaks the capture contract, so an export stops on it: ` +
        `${f.file}, session ${f.session_id}${f.call_id ? `, call ${f.call_id}` : ''}: ${f.problem}`,
    });
  }
  for (const g of r.groups) {
    if (g.no_contrast)
      out.push({
        kind: 'no_contrast',
        text: `Group ${g.group_id} has no contrast: every kept reward is ${num(g.rewards[0] ?? null)}, so all its advantages are 0 and it teaches nothing.`,
      });
    else if (g.too_small)
      out.push({
        kind: 'too_small',
        text: `Group ${g.group_id} has ${g.kept} kept member(s) of ${g.expected}: no group baseline, so it teaches nothing.`,
      });
  }
  const discarded = r.groups.flatMap((g) => g.members.filter((m) => !m.kept && (m.state === 'done' || m.state === 'discarded')));
  if (discarded.length)
    out.push({
      kind: 'discarded',
      text: `${plural(discarded.length, 'rollout')} discarded (${share(r.summary.discarded_share)} of the batch): ${discarded.map((m) => `${m.rollout_id} (${m.excluded ?? 'excluded'})`).join(', ')}.`,
    });
  if (r.summary.unfinished)
    out.push({
      kind: 'unfinished',
      text: `${plural(r.summary.unfinished, 'rollout')} not finished yet: the audit covers the finished ones only.`,
    });
  if (r.policy.stale_calls) {
    const first = r.policy.stale[0]!;
    out.push({
      kind: 'stale',
      text:
        `${plural(r.policy.stale_calls, 'call')} sampled more than ${r.policy.max_staleness} policy versions ` +
        `behind the newest (${r.policy.newest}), e.g. rollout ${first.rollout_id}, session ${first.session_id}, ` +
        `call ${first.call_id} under ${first.version}.`,
    });
  }
  return out;
}

/** The notification's one line: the count and the first problem. */
export function auditWarning(r: AuditReport, problems: readonly AuditProblem[]): string {
  const kinds = [...new Set(problems.map((p) => p.kind))];
  const label: Record<AuditProblem['kind'], string> = {
    contract: 'capture contract broken',
    no_contrast: 'groups without contrast',
    too_small: 'groups too small',
    discarded: 'discarded rollouts',
    unfinished: 'unfinished rollouts',
    stale: 'stale calls',
  };
  return `Audit of batch ${r.batch_id}: ${kinds.map((k) => label[k]).join(', ')}. ${problems[0]!.text}${problems.length > 1 ? ` (+${problems.length - 1} more)` : ''}`;
}

function groupNote(g: GroupAudit): string {
  return g.no_contrast ? 'NO CONTRAST' : g.too_small ? 'TOO SMALL' : '';
}

function memberClass(m: AuditMember): string {
  if (m.state !== 'done' && m.state !== 'discarded') return `unfinished (${m.state})`;
  return m.class ?? m.state;
}

function behaviourRow(name: string, b: BehaviourAggregate): string {
  return (
    `| ${md(name)} | ${b.rollouts} | ${num(b.mean_tool_calls, 2)} | ${num(b.mean_failed_tool_calls, 2)} ` +
    `| ${num(b.error_recovery, 2)} | ${num(b.self_verification, 2)} | ${num(b.mean_tool_coverage, 2)} | ${num(b.mean_turns_to_first_success, 2)} |`
  );
}

/** The audit as a Markdown document: problems first, then per group, harnesses, staleness, the contract, behaviour. */
export interface AuditMarkdownOptions {
  /** Why a no-contrast group had none, by group id (deterministicPolicyNote). */
  policyNotes?: Record<string, string>;
  /** Where the shipped docs/behaviour-metrics.md is (a file: URI); without it the repository path is named. */
  behaviourDocs?: string;
}

export function auditMarkdown(r: AuditReport, opts: AuditMarkdownOptions = {}): string {
  const s = r.summary;
  const problems = auditProblems(r);
  const L: string[] = [];
  L.push(`# Audit of batch ${md(r.batch_id)}`, '');
  L.push(`${code(r.dir)}`, '');
  L.push(
    `${plural(s.rollouts, 'rollout')} in ${plural(s.groups, 'group')} of ${r.group_size}: kept ${s.kept}, ` +
      `discarded ${s.discarded}, unfinished ${s.unfinished}. The same audit as ${code(`harness-lab audit ${r.dir}`)}.`,
    '',
  );

  L.push('## Problems', '');
  if (problems.length) for (const p of problems) L.push(`- ${md(p.text)}`);
  else L.push('None: every group has contrast, nothing was discarded, no call is stale and every kept capture holds the contract.');
  L.push('');
  L.push('| share of the batch | value |', '|---|---|');
  L.push(`| in groups with no contrast | ${share(s.no_contrast_share)} |`);
  L.push(`| giving no gradient (excluded, no contrast, too small) | ${share(s.no_signal_share)} |`);
  L.push(`| discarded | ${share(s.discarded_share)} |`);
  L.push(`| stale calls (of the kept rollouts' calls) | ${share(s.stale_share)} |`, '');

  L.push('## Groups', '');
  L.push('| group | task | harness | kept | rewards | mean | std | note |', '|---|---|---|---|---|---|---|---|');
  for (const g of r.groups)
    L.push(
      `| ${md(g.group_id)} | ${md(g.task)} | ${md(g.harness)} | ${g.kept}/${g.expected} | [${g.rewards.map((x) => num(x)).join(', ')}] | ${num(g.mean)} | ${num(g.std)} | ${groupNote(g)} |`,
    );
  L.push('');
  for (const g of r.groups) {
    const note = groupNote(g);
    L.push(`### Group ${md(g.group_id)}${note ? ` — ${note}` : ''}`, '');
    L.push(
      `Task ${code(g.task)}, harness ${code(g.harness)}; kept ${g.kept} of ${g.expected}, rewards [${g.rewards.map((x) => num(x)).join(', ')}], mean ${num(g.mean)}, std ${num(g.std)}.`,
      '',
    );
    const why = g.no_contrast ? opts.policyNotes?.[g.group_id] : undefined;
    if (why) L.push(`> **Why no contrast:** ${md(why)}`, '');
    L.push(
      '| # | rollout | class | reward | in baseline | calls | tool calls | failed | recovery | self-verified | coverage | first success | session |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    );
    for (const m of g.members) {
      const b = m.behaviour;
      L.push(
        `| ${m.member} | ${md(m.rollout_id)} | ${md(memberClass(m))} | ${m.reward === null ? '–' : num(m.reward)} ` +
          `| ${m.kept ? 'yes' : `no: ${md(m.excluded ?? '')}`} | ${m.n_calls} | ${m.tool_calls ?? '–'} | ${b ? b.failed_tool_calls : '–'} ` +
          `| ${num(b?.error_recovery ?? null, 2)} | ${b ? (b.self_verified ? 'yes' : 'no') : '–'} | ${num(b?.tool_coverage ?? null, 2)} ` +
          `| ${b?.turns_to_first_success == null ? '–' : `turn ${b.turns_to_first_success}`} | ${m.session_id ? code(m.session_id) : '–'} |`,
      );
    }
    L.push('');
  }

  L.push('## Harnesses', '');
  L.push('| harness | rollouts | kept | discarded | mean reward |', '|---|---|---|---|---|');
  for (const [h, x] of Object.entries(r.harnesses))
    L.push(`| ${md(h)} | ${x.rollouts} | ${x.kept} | ${x.discarded} | ${num(x.mean_reward)} |`);
  L.push('');

  L.push('## Policy versions and staleness', '');
  L.push(
    `Newest version ${r.policy.newest ? code(r.policy.newest) : 'unknown'}; a call is stale when it was ` +
      `sampled more than ${r.policy.max_staleness} versions behind it. ${r.policy.stale_calls} of ${r.policy.calls} ` +
      `call(s) of the kept rollouts are stale; ${r.policy.unversioned_calls} carry no ordered version.`,
    '',
  );
  const versions = Object.entries(r.policy.versions);
  if (versions.length) {
    L.push('| version | calls |', '|---|---|');
    for (const [v, n] of versions) L.push(`| ${md(v)} | ${n} |`);
    L.push('');
  }
  if (r.policy.stale.length) {
    L.push('| rollout | session | call | index | version | behind |', '|---|---|---|---|---|---|');
    for (const c of r.policy.stale)
      L.push(`| ${md(c.rollout_id)} | ${code(c.session_id)} | ${code(c.call_id)} | ${c.index} | ${md(c.version)} | ${c.behind} |`);
    L.push('');
  }

  L.push('## Capture contract', '');
  if (r.contract.failures.length) {
    L.push(
      `${plural(r.contract.failures.length, 'kept rollout')} of ${r.contract.checked_rollouts} break the contract ` +
        `an export relies on (token ids, logprobs, mask lengths); ${code('harness-lab export')} stops on the first:`,
      '',
    );
    L.push('| rollout | group | file | session | call | problem |', '|---|---|---|---|---|---|');
    for (const f of r.contract.failures)
      L.push(
        `| ${md(f.rollout_id)} | ${md(f.group_id)} | ${code(f.file)} | ${code(f.session_id)} | ${f.call_id ? code(f.call_id) : '–'} | ${md(f.problem)} |`,
      );
  } else L.push(`Every kept rollout (${r.contract.checked_rollouts}) holds it: prompt ids present, one finite logprob per sampled token.`);
  L.push('');

  L.push('## Behaviour', '');
  L.push(
    opts.behaviourDocs
      ? `Rules in [behaviour-metrics.md](${opts.behaviourDocs}).`
      : 'Rules in docs/behaviour-metrics.md of the Harness Lab repository.',
    '',
  );
  L.push('| | rollouts | tool calls | failed | recovery | self-verify | coverage | first success |', '|---|---|---|---|---|---|---|---|');
  for (const [h, b] of Object.entries(r.behaviour.harnesses)) L.push(behaviourRow(`harness ${h}`, b));
  L.push(behaviourRow('batch', r.behaviour.batch));
  L.push('');
  L.push(`Tool calls per rollout: mean ${num(r.tool_calls.mean, 2)}, min ${r.tool_calls.min ?? '–'}, max ${r.tool_calls.max ?? '–'}.`, '');
  return `${L.join('\n')}`;
}

/**
 * Why a no-contrast group of a batch on the embedded engine could have had none: the policy the engine
 * followed for its task (batchPolicyFile) is scripted with no choice in it, so every member makes the
 * same moves whatever the temperature. Undefined for a batch on a real engine, or a policy that draws.
 */
export function deterministicPolicyNote(batchDir: string, task: string): string | undefined {
  try {
    const manifest = readManifest(batchDir);
    if (manifest.engine_url !== null) return undefined;
    const ref = manifest.tasks.find((t) => t.name === task);
    if (!ref) return undefined;
    // The task as the docker backend loads it, so the note names the file the batch followed.
    const file = batchPolicyFile(loadTask(ref.dir));
    if (!file || ScriptedPolicy.load(file).samples) return undefined;
    return (
      `the embedded engine followed ${basename(dirname(file))}/${basename(file)}, a scripted policy with no ` +
      `choice in it: every member makes the same moves whatever the temperature, so this task's groups cannot ` +
      `have contrast. Give the task a ${SAMPLING_POLICY_FILE} with a "choose" move (as examples/tasks/sum-numbers ` +
      `has), or run the batch on a real engine.`
    );
  } catch {
    return undefined;
  }
}
