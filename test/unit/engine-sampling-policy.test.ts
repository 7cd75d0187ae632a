// A policy for the embedded engine that samples (#28): `choose` draws one of several moves with the
// request's sampler, so a group's rollouts can differ on a CPU model; batches on the embedded engine
// follow a task's policy.sampling.json by default; a no-contrast group whose policy could not have
// drawn anything says so (group view, audit); on the embedded engine each rollout pins its own seed.
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { runAttempt } from '../../src/batch/attempt.js';
import type { BatchBackend, BatchCapture } from '../../src/batch/backend.js';
import { planBatch, rolloutSeed, writeBatch } from '../../src/batch/plan.js';
import { readManifest, readRolloutStates } from '../../src/batch/state.js';
import type { ChatMessage, ChatTool } from '../../src/capture/types.js';
import { ScriptedPolicy } from '../../src/engine/policy.js';
import { Prng } from '../../src/engine/prng.js';
import { auditMarkdown, deterministicPolicyNote } from '../../src/extension/batch-review-model.js';
import { SAMPLING_POLICY_FILE, TaskRoutedPolicy, batchPolicyFile } from '../../src/sandbox/policy-engine.js';
import { loadTask } from '../../src/tasks/task.js';
import { auditBatch } from '../../src/export/audit.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');
const tmp = mkdtempSync(join(tmpdir(), 'hl-sampling-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

const bash: ChatTool = {
  type: 'function',
  function: { name: 'bash', parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } },
};

test('choose draws by the sampler, weighted; a fixed seed repeats the draw', () => {
  const p = ScriptedPolicy.parse({ turns: [{ choose: [{ say: 'a' }, { say: 'b' }, 'sample'], weights: [1, 2, 1] }] }, 'inline');
  assert.equal(p.samples, true);
  const say = (u: number) => {
    const d = p.decide([{ role: 'user', content: 'go' }], undefined, () => u);
    return d.kind === 'sample' ? 'sample' : d.content;
  };
  assert.equal(say(0), 'a');
  assert.equal(say(0.24), 'a');
  assert.equal(say(0.26), 'b');
  assert.equal(say(0.74), 'b');
  assert.equal(say(0.76), 'sample');
  const draws = (seed: number) =>
    Array.from({ length: 8 }, () => {
      const rng = new Prng(seed);
      return say(rng.next());
    });
  assert.deepEqual(draws(7), draws(7), 'the same seed, the same move');
  const rng = new Prng(1);
  const seen = new Set(Array.from({ length: 200 }, () => say(rng.next())));
  assert.deepEqual([...seen].sort(), ['a', 'b', 'sample'], 'every move is drawn');
});

test('choose is validated: two choices at least, one weight per choice, positive weights', () => {
  assert.throws(() => ScriptedPolicy.parse({ fallback: { choose: [{ say: 'a' }] } }, 'p.json'), /invalid policy p\.json: fallback/);
  assert.throws(
    () => ScriptedPolicy.parse({ fallback: { choose: [{ say: 'a' }, { say: 'b' }], weights: [1] } }, 'p.json'),
    /invalid policy p\.json: fallback/,
  );
  assert.throws(() => ScriptedPolicy.parse({ fallback: { choose: [{ say: 'a' }, { say: 'b' }], weights: [1, 0] } }, 'p.json'), /fallback/);
  assert.equal(ScriptedPolicy.parse({ fallback: { say: 'x' } }, 'p.json').samples, false, 'a scripted policy does not sample');
});

test("sum-numbers' sampling policy sums right or wrong; its policy.json always right", () => {
  const listing: ChatMessage[] = [
    { role: 'user', content: loadTask(join(EXAMPLES, 'sum-numbers')).instruction },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'bash', arguments: '{"command":"cat numbers.txt"}' } }],
    },
    { role: 'tool', tool_call_id: 'c1', content: '# numbers-v1: one integer per line\n17\n25\n-4\n12\n' },
  ];
  const sampling = ScriptedPolicy.load(join(EXAMPLES, 'sum-numbers', SAMPLING_POLICY_FILE));
  const scripted = ScriptedPolicy.load(join(EXAMPLES, 'sum-numbers', 'policy.json'));
  const command = (p: ScriptedPolicy, u: number) => {
    const d = p.decide(listing, [bash], () => u);
    return d.kind === 'script' ? String(d.toolCalls[0]?.arguments.command) : undefined;
  };
  assert.equal(sampling.samples, true);
  assert.equal(scripted.samples, false);
  const right = command(scripted, 0.9)!;
  assert.equal(command(sampling, 0.1), right, 'the first choice is the scripted sum');
  assert.match(command(sampling, 0.9)!, /head -n 2/, 'the second sums only 17 and 25 (42, not 50: reward 0)');
  assert.equal(ScriptedPolicy.load(join(EXAMPLES, 'hello-file', 'policy.json')).samples, false);
  // The routed policy of a batch passes the sampler through to the task's policy.
  const routed = new TaskRoutedPolicy([
    { instruction: listing[0]!.content as string, policyFile: join(EXAMPLES, 'sum-numbers', SAMPLING_POLICY_FILE) },
  ]);
  assert.equal(routed.samples, true);
  const d = routed.decide(listing, [bash], () => 0.9);
  assert.match(d.kind === 'script' ? String(d.toolCalls[0]?.arguments.command) : '', /head -n 2/);
});

test('batches on the embedded engine follow policy.sampling.json when a task has one, else policy.json', () => {
  assert.equal(batchPolicyFile(loadTask(join(EXAMPLES, 'sum-numbers'))), join(EXAMPLES, 'sum-numbers', SAMPLING_POLICY_FILE));
  assert.equal(batchPolicyFile(loadTask(join(EXAMPLES, 'hello-file'))), join(EXAMPLES, 'hello-file', SAMPLING_POLICY_FILE));
  const scriptedOnly = join(tmp, 'scripted-only');
  cpSync(join(EXAMPLES, 'hello-file'), scriptedOnly, { recursive: true });
  rmSync(join(scriptedOnly, SAMPLING_POLICY_FILE));
  assert.equal(batchPolicyFile(loadTask(scriptedOnly)), join(scriptedOnly, 'policy.json'));
  assert.equal(batchPolicyFile({ dir: tmp, policyFile: undefined }), undefined);
});

function plannedBatch(
  name: string,
  task: string,
  engineUrl?: string,
  o: { scriptedOnly?: boolean } = {},
): { dir: string; groupId: string; task: string } {
  const tasks = join(tmp, `${name}-tasks`);
  cpSync(join(EXAMPLES, task), join(tasks, task), { recursive: true });
  // A task with only its policy.json (every example now ships a sampling policy beside it).
  if (o.scriptedOnly) rmSync(join(tasks, task, SAMPLING_POLICY_FILE), { force: true });
  const plan = planBatch({
    tasks: [tasks],
    harnesses: ['react'],
    groupSize: 2,
    outDir: join(tmp, 'batches', name),
    checkInstalled: false,
    ...(engineUrl ? { engineUrl, model: 'm' } : {}),
  });
  writeBatch(plan);
  return { dir: plan.dir, groupId: plan.manifest.groups[0]!.group_id, task: plan.manifest.groups[0]!.task };
}

test('a no-contrast group says why when the embedded engine followed a policy without a choice', () => {
  const scripted = plannedBatch('scripted', 'hello-file', undefined, { scriptedOnly: true });
  const note = deterministicPolicyNote(scripted.dir, scripted.task);
  assert.match(
    note ?? '',
    /hello-file\/policy\.json, a scripted policy with no choice in it: every member makes the same moves whatever the temperature/,
  );
  assert.match(note ?? '', /policy\.sampling\.json with a "choose" move/);
  assert.equal(
    deterministicPolicyNote(plannedBatch('sampling', 'sum-numbers').dir, 'sum-numbers'),
    undefined,
    'a sampling policy could have given contrast',
  );
  assert.equal(
    deterministicPolicyNote(plannedBatch('real', 'hello-file', 'http://127.0.0.1:8000').dir, 'hello-file'),
    undefined,
    'a real engine samples',
  );
  assert.equal(deterministicPolicyNote(join(tmp, 'nowhere'), 'x'), undefined);
  // The audit document carries the note under the group, and links the shipped behaviour docs.
  // A real audit of the planned batch, its group marked as finished without contrast.
  const report = auditBatch(scripted.dir);
  Object.assign(report.groups[0]!, { no_contrast: true, rewards: [1, 1], mean: 1, std: 0 });
  let text: string;
  try {
    text = auditMarkdown(report, { policyNotes: { [scripted.groupId]: note! }, behaviourDocs: 'file:///ext/docs/behaviour-metrics.md' });
  } catch (err) {
    assert.fail(`the audit document could not be written from a minimal report: ${String(err)}`);
  }
  assert.match(text, /> \*\*Why no contrast:\*\* the embedded engine followed hello-file\/policy\.json/);
  assert.match(text, /Rules in \[behaviour-metrics\.md\]\(file:\/\/\/ext\/docs\/behaviour-metrics\.md\)/);
  assert.doesNotMatch(auditMarkdown(report), /Why no contrast/);
  assert.match(auditMarkdown(report), /docs\/behaviour-metrics\.md of the Harness Lab repository/);
});

/** Runs member `member`'s first attempt of a planned batch on doubles; returns the sampling its session was created with. */
async function attemptSampling(dir: string, member: number): Promise<Record<string, number>> {
  const manifest = readManifest(dir);
  const rollout = readRolloutStates(dir)[member]!;
  const created: Record<string, number>[] = [];
  const backend: BatchBackend = {
    kind: 'docker',
    run: async () => ({
      backendRef: null,
      agent: { exitCode: 0, timedOut: false, ms: 1 },
      verifier: { exitCode: 0, timedOut: false, ms: 1 },
      reward: { value: 1, scores: { reward: 1 } },
      infraError: null,
      cancelled: false,
    }),
    cleanupBatch: async () => [],
    close: async () => {},
  };
  const capture: BatchCapture = {
    createSession: async (req) => void created.push(req.sampling),
    sessionFacts: async () => ({ nCalls: 1, trainable: true, findings: [] }),
    close: async () => {},
  };
  await runAttempt({
    batchDir: dir,
    manifest,
    backend,
    capture,
    rollout,
    sampling: manifest.sampling,
    maxModelCalls: 10,
    signal: new AbortController().signal,
    log: () => {},
    save: () => {},
    stopped: () => ({ requeue: true, outcome: 'cancelled', error: 'stopped' }),
  });
  assert.equal(created.length, 1);
  return created[0]!;
}

test("on the embedded engine each rollout's calls carry a seed of its own, the same in every batch; a real engine's batch sampling is left alone", async () => {
  const a = plannedBatch('seed-a', 'sum-numbers');
  const b = plannedBatch('seed-b', 'sum-numbers');
  const [a0, a1, b0] = [await attemptSampling(a.dir, 0), await attemptSampling(a.dir, 1), await attemptSampling(b.dir, 0)];
  assert.equal(a0.seed, rolloutSeed('sum-numbers.react.0'));
  assert.equal(a0.temperature, 1, "the batch's sampling is kept beside the seed");
  assert.notEqual(a0.seed, a1.seed, 'members draw differently');
  assert.equal(a0.seed, b0.seed, 'the same member draws the same way in another batch');
  assert.ok(Number.isSafeInteger(a0.seed) && a0.seed! >= 0, 'a seed the session schema accepts');
  const real = plannedBatch('seed-real', 'sum-numbers', 'http://127.0.0.1:8000');
  assert.equal((await attemptSampling(real.dir, 0)).seed, undefined, 'a real engine samples from its own stream');
});

test("an 8-member group of sum-numbers under react on the sampling policy has contrast: the members' seeds draw both moves", () => {
  // What test/e2e/vsix-session.e2e.test.ts's contrast step relies on: the draw each member's seed makes
  // first (the engine's sampler draws a `choose` before any token) is the summing move.
  const policy = ScriptedPolicy.load(join(EXAMPLES, 'sum-numbers', SAMPLING_POLICY_FILE));
  const listing: ChatMessage[] = [
    { role: 'user', content: loadTask(join(EXAMPLES, 'sum-numbers')).instruction },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'bash', arguments: '{"command":"cat numbers.txt"}' } }],
    },
    { role: 'tool', tool_call_id: 'c1', content: '# numbers-v1: one integer per line\n17\n25\n-4\n12\n' },
  ];
  const moves = Array.from({ length: 8 }, (_, m) => {
    const rng = new Prng(rolloutSeed(`sum-numbers.react.${m}`));
    const d = policy.decide(listing, [bash], () => rng.next());
    return d.kind === 'script' && /head -n 2/.test(String(d.toolCalls[0]?.arguments.command)) ? 'wrong' : 'right';
  });
  assert.deepEqual(moves, ['right', 'right', 'right', 'right', 'wrong', 'wrong', 'wrong', 'right']);
});
