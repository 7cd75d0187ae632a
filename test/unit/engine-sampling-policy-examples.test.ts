// The sampling policies of hello-file and fix-script (#28): each draws between the right move and a
// plausible slip, and the slip really scores less (the task's own verifier runs on both moves' work);
// the draws each member's seed makes are pinned (rolloutSeed, as sum-numbers' are) so a group's
// contrast is known; the in-repo fake engine draws by the request's seed as the embedded engine does;
// a copy of a task whose instruction was rewritten does not follow the original's sampling policy.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { rolloutSeed } from '../../src/batch/plan.js';
import type { ChatMessage, ChatTool } from '../../src/capture/types.js';
import { ScriptedPolicy } from '../../src/engine/policy.js';
import { Prng } from '../../src/engine/prng.js';
import { SAMPLING_POLICY_FILE, TaskRoutedPolicy, batchPolicyFile, policyAnswer, policyKnowsTask } from '../../src/sandbox/policy-engine.js';
import { loadTask } from '../../src/tasks/task.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');
const tmp = mkdtempSync(join(tmpdir(), 'hl-sampling-examples-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

const bash: ChatTool = {
  type: 'function',
  function: { name: 'bash', parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } },
};

const instruction = (task: string) => loadTask(join(EXAMPLES, task)).instruction;

/** The conversation at the call where each task's policy draws: hello-file on the task, fix-script on sum.sh's listing. */
function atTheDraw(task: 'hello-file' | 'fix-script'): ChatMessage[] {
  const first: ChatMessage = { role: 'user', content: instruction(task) };
  if (task === 'hello-file') return [first];
  return [
    first,
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'bash', arguments: '{"command":"cat sum.sh"}' } }],
    },
    { role: 'tool', tool_call_id: 'c1', content: readFileSync(join(EXAMPLES, 'fix-script', 'environment', 'sum.sh'), 'utf8') },
  ];
}

function command(policy: ScriptedPolicy, task: 'hello-file' | 'fix-script', u: number): string {
  const d = policy.decide(atTheDraw(task), [bash], () => u);
  assert.equal(d.kind, 'script');
  return d.kind === 'script' ? String(d.toolCalls[0]?.arguments.command) : '';
}

/** Runs `cmd` in a fresh copy of the task's workdir, then the task's verifier (as the local sandbox runs it); its reward. */
function rewardOf(task: 'hello-file' | 'fix-script', cmd: string): number {
  const work = mkdtempSync(join(tmp, `${task}-`));
  const app = join(work, 'app');
  const logs = join(work, 'logs');
  mkdirSync(app);
  if (task === 'fix-script') cpSync(join(EXAMPLES, 'fix-script', 'environment', 'sum.sh'), join(app, 'sum.sh'));
  const ran = spawnSync('bash', ['-c', cmd], { cwd: app, encoding: 'utf8' });
  assert.equal(ran.status, 0, ran.stderr);
  const env = {
    ...process.env,
    HARNESS_LAB_WORKDIR: app,
    HARNESS_LAB_LOGS: logs,
    ...loadTask(join(EXAMPLES, task)).verifierEnv,
  };
  const verified = spawnSync('bash', [join(EXAMPLES, task, 'tests', 'test.sh')], { env, encoding: 'utf8' });
  assert.equal(verified.status, 0, verified.stderr);
  const dir = join(logs, 'verifier');
  try {
    return (JSON.parse(readFileSync(join(dir, 'reward.json'), 'utf8')) as { reward: number }).reward;
  } catch {
    return Number(readFileSync(join(dir, 'reward.txt'), 'utf8').trim());
  }
}

for (const [task, slipReward] of [
  ['hello-file', 0],
  ['fix-script', 0.25],
] as const) {
  test(`${task}: its sampling policy draws the scripted move or a slip that scores ${slipReward}; policy.json stays scripted`, () => {
    const sampling = ScriptedPolicy.load(join(EXAMPLES, task, SAMPLING_POLICY_FILE));
    const scripted = ScriptedPolicy.load(join(EXAMPLES, task, 'policy.json'));
    assert.equal(sampling.samples, true);
    assert.equal(scripted.samples, false, 'single runs stay reproducible');
    const right = command(scripted, task, 0.5);
    assert.equal(command(sampling, task, 0.1), right, 'the first choice is the scripted move');
    const slip = command(sampling, task, 0.9);
    assert.notEqual(slip, right);
    assert.equal(rewardOf(task, right), 1, 'the scripted move solves the task');
    assert.equal(rewardOf(task, slip), slipReward, "the slip scores less by the task's own verifier");
    // The other turns are the scripted policy's: the draw is the only difference.
    const other: ChatMessage[] = [{ role: 'user', content: 'something else' }];
    assert.deepEqual(
      sampling.decide(other, [bash], () => 0.9),
      scripted.decide(other, [bash], () => 0.9),
    );
    // Batches on the embedded engine follow it.
    assert.equal(batchPolicyFile(loadTask(join(EXAMPLES, task))), join(EXAMPLES, task, SAMPLING_POLICY_FILE));
  });
}

test("each member's seed draws its move: the pinned draws of a group of 8 under react (and codex), both moves in each", () => {
  const moves = (task: 'hello-file' | 'fix-script', harness: string) => {
    const policy = new TaskRoutedPolicy([{ instruction: instruction(task), policyFile: join(EXAMPLES, task, SAMPLING_POLICY_FILE) }]);
    const right = command(ScriptedPolicy.load(join(EXAMPLES, task, 'policy.json')), task, 0.5);
    return Array.from({ length: 8 }, (_, m) => {
      // The engine's sampler: one Prng per request, seeded by the member's seed; a `choose` draws first.
      const rng = new Prng(rolloutSeed(`${task}.${harness}.${m}`));
      const d = policy.decide(atTheDraw(task), [bash], () => rng.next());
      return d.kind === 'script' && d.toolCalls[0]?.arguments.command === right ? 'right' : 'slip';
    });
  };
  assert.deepEqual(moves('hello-file', 'react'), ['right', 'right', 'right', 'right', 'right', 'slip', 'right', 'right']);
  assert.deepEqual(moves('fix-script', 'react'), ['slip', 'right', 'slip', 'right', 'right', 'slip', 'slip', 'right']);
  assert.deepEqual(moves('hello-file', 'codex'), ['right', 'right', 'slip', 'right', 'slip', 'right', 'right', 'slip']);
  assert.deepEqual(moves('fix-script', 'codex'), ['right', 'right', 'right', 'slip', 'right', 'right', 'right', 'slip']);
});

test('the fake engine draws a choose by the request seed, as the embedded engine does; without a seed it still answers', () => {
  const policy = new TaskRoutedPolicy([
    { instruction: instruction('fix-script'), policyFile: join(EXAMPLES, 'fix-script', SAMPLING_POLICY_FILE) },
  ]);
  for (let m = 0; m < 8; m++) {
    const seed = rolloutSeed(`fix-script.react.${m}`);
    const rng = new Prng(seed);
    const embedded = policy.decide(atTheDraw('fix-script'), [bash], () => rng.next());
    const fake = policyAnswer(policy, atTheDraw('fix-script'), [bash], seed);
    assert.equal(embedded.kind, 'script');
    assert.deepEqual(
      fake.tool_calls,
      embedded.kind === 'script' ? embedded.toolCalls.map((c) => ({ name: c.name, arguments: c.arguments })) : [],
      `member ${m}`,
    );
  }
  const fakeCommand = (seed?: unknown) =>
    String((policyAnswer(policy, atTheDraw('fix-script'), [bash], seed).tool_calls?.[0]?.arguments as { command?: unknown }).command);
  assert.match(fakeCommand(), /^sed -i /);
  assert.match(fakeCommand('not a seed'), /^sed -i /);
});

test("a copy whose instruction was rewritten follows its own policy.json, not the original's sampling policy", () => {
  const copy = join(tmp, 'slow-file');
  cpSync(join(EXAMPLES, 'hello-file'), copy, { recursive: true });
  writeFileSync(join(copy, 'instruction.md'), 'Create a file named `slow.txt` whose content is exactly `slow`.\n');
  assert.equal(batchPolicyFile(loadTask(copy)), join(copy, 'policy.json'));
  // The same copy with its instruction kept follows the sampling policy; without an instruction to check, too.
  const kept = join(tmp, 'hello-kept');
  cpSync(join(EXAMPLES, 'hello-file'), kept, { recursive: true });
  assert.equal(batchPolicyFile(loadTask(kept)), join(kept, SAMPLING_POLICY_FILE));
  assert.equal(batchPolicyFile({ dir: copy, policyFile: join(copy, 'policy.json') }), join(copy, SAMPLING_POLICY_FILE));
  // A turn script (no rules) cannot be checked against the instruction: it is kept.
  assert.equal(policyKnowsTask(ScriptedPolicy.parse({ turns: [{ say: 'a' }] }, 'inline'), 'anything'), true);
  for (const task of ['hello-file', 'fix-script', 'sum-numbers'])
    assert.ok(policyKnowsTask(ScriptedPolicy.load(join(EXAMPLES, task, SAMPLING_POLICY_FILE)), instruction(task)), task);
});
