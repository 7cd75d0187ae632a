// Behaviour metrics on rollouts whose tool calls, results and checks are known (docs/behaviour-metrics.md).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CallRecord, ChatMessage, ChatTool } from '../../src/capture/types.js';
import { aggregateBehaviour, rolloutBehaviour, toolResultOutcome } from '../../src/export/behaviour.js';
import type { AtifTrajectory } from '../../src/harness/atif.js';
import { call } from './rollout-fixtures.js';

const tool = (name: string): ChatTool => ({ type: 'function', function: { name, parameters: {} } });
const TOOLS = [tool('bash'), tool('read_file'), tool('write_file')];
const bash = (id: string, command: string) => ({
  id,
  type: 'function' as const,
  function: { name: 'bash', arguments: JSON.stringify({ command }) },
});
const named = (id: string, name: string, args: Record<string, unknown>) => ({
  id,
  type: 'function' as const,
  function: { name, arguments: JSON.stringify(args) },
});

type Step = { tools: ReturnType<typeof bash>[]; results?: string[] } | { answer: string };

/** A ReAct loop: each step's tool calls, with their results in the next request's tool messages. */
function loop(steps: Step[]): CallRecord[] {
  const messages: ChatMessage[] = [{ role: 'user', content: 'fix the bug' }];
  return steps.map((s, i) => {
    const reply: ChatMessage =
      'answer' in s ? { role: 'assistant', content: s.answer } : { role: 'assistant', content: null, tool_calls: s.tools };
    const c = call({ id: `c${i}`, index: i, prompt: [1, 2, i], sampled: [3, 4], messages: [...messages], reply });
    c.engine_request!.tools = TOOLS;
    messages.push(reply);
    if (!('answer' in s))
      s.tools.forEach((t, k) => s.results?.[k] !== undefined && messages.push({ role: 'tool', tool_call_id: t.id, content: s.results[k] }));
    return c;
  });
}

test('tool result rules: the exit status wins, then error markers, else success', () => {
  assert.equal(toolResultOutcome('3 notes.txt\n[exit code 0]').outcome, 'ok');
  assert.equal(toolResultOutcome('error: something\n[exit code 0]').outcome, 'ok', 'an explicit exit 0 beats a marker');
  assert.equal(toolResultOutcome('\n[exit code 2]').outcome, 'failed');
  assert.equal(toolResultOutcome('killed\n[exit code none]').outcome, 'failed');
  assert.equal(toolResultOutcome('{"exit_code": 1, "stdout": ""}').outcome, 'failed');
  assert.equal(toolResultOutcome('[Tool Error] file missing').outcome, 'failed');
  assert.equal(toolResultOutcome('Traceback (most recent call last):\n  File "x.py"').outcome, 'failed');
  assert.equal(toolResultOutcome('cat: x.txt: No such file or directory').outcome, 'failed');
  assert.equal(toolResultOutcome('FileNotFoundError: x').outcome, 'failed');
  assert.equal(toolResultOutcome('all good, 3 lines').outcome, 'ok');
});

test('a failure, a different successful call (recovery), an edit, the test run (self-verification), the answer', () => {
  const calls = loop([
    { tools: [bash('t1', 'cat src/app.py')], results: ['cat: src/app.py: No such file or directory\n[exit code 1]'] },
    { tools: [bash('t2', 'cat app.py')], results: ['def f(): return 1\n[exit code 0]'] },
    { tools: [bash('t3', "sed -i 's/1/2/' app.py")], results: ['\n[exit code 0]'] },
    { tools: [bash('t4', 'python -m pytest -q')], results: ['1 passed\n[exit code 0]'] },
    { answer: 'Fixed.' },
  ]);
  const b = rolloutBehaviour({ calls });
  assert.equal(b.turns, 5);
  assert.equal(b.tool_calls, 4);
  assert.equal(b.failed_tool_calls, 1);
  assert.equal(b.recovered_failures, 1);
  assert.equal(b.error_recovery, 1);
  assert.deepEqual(b.verification, { turn: 3, name: 'bash', kind: 'test' });
  assert.equal(b.self_verified, true);
  assert.deepEqual(b.tools_used, ['bash']);
  assert.equal(b.tool_coverage, 1 / 3);
  assert.equal(b.turns_to_first_success, 2);
  assert.deepEqual(
    b.facts.map((f) => [f.outcome, f.mutates, f.check]),
    [
      ['failed', false, 'read_back'],
      ['ok', false, 'read_back'],
      ['ok', true, null],
      ['ok', false, 'test'],
    ],
  );
});

test('retrying the same failing call is not recovery; reading before the edit is not verification', () => {
  const calls = loop([
    { tools: [bash('t1', 'make')], results: ['make: *** [all] Error 2\n[exit code 2]'] },
    { tools: [bash('t2', 'make')], results: ['make: *** [all] Error 2\n[exit code 2]'] },
    { tools: [bash('t3', 'cat out.txt')], results: ['old\n[exit code 0]'] },
    { tools: [bash('t4', 'echo new > out.txt')], results: ['\n[exit code 0]'] },
    { answer: 'Done.' },
  ]);
  const b = rolloutBehaviour({ calls });
  assert.equal(b.failed_tool_calls, 2);
  assert.equal(b.recovered_failures, 2, 'both make failures are followed by a different successful call (cat)');
  assert.equal(b.self_verified, false, 'nothing checked after the last write');
  assert.equal(b.turns_to_first_success, 3);
  const same = rolloutBehaviour({
    calls: loop([
      { tools: [bash('t1', 'make')], results: ['[exit code 2]'] },
      { tools: [bash('t2', 'make')], results: ['[exit code 0]'] },
      { answer: 'ok' },
    ]),
  });
  assert.equal(same.recovered_failures, 0, 'the same call again is a retry, not a recovery');
  assert.equal(same.error_recovery, 0);
});

test('write tool then read tool on the same path is a read-back; the last result comes from ATIF', () => {
  const calls = loop([
    { tools: [named('w1', 'write_file', { path: 'notes.md', content: 'x' })], results: ['wrote 1 byte'] },
    { tools: [named('r1', 'read_file', { path: 'notes.md' })] },
    { answer: 'Written and checked.' },
  ]);
  const noAtif = rolloutBehaviour({ calls });
  assert.equal(noAtif.unknown_tool_calls, 1, 'the read result never reached a request');
  assert.equal(noAtif.self_verified, false, 'an unseen result does not count as a check');
  const atif = {
    schema_version: 'ATIF-v1.6',
    session_id: 's',
    agent: { name: 'x', version: '1' },
    steps: [{ step_id: 1, source: 'agent', message: '', observation: { results: [{ source_call_id: 'r1', content: 'x' }] } }],
  } as unknown as AtifTrajectory;
  const b = rolloutBehaviour({ calls }, atif);
  assert.equal(b.unknown_tool_calls, 0);
  assert.deepEqual(b.verification, { turn: 1, name: 'read_file', kind: 'read_back' });
  assert.deepEqual(b.tools_used, ['read_file', 'write_file']);
  assert.equal(b.tool_coverage, 2 / 3);
});

test('no final answer: no self-verification; no tools offered: coverage null; aggregate pools failures', () => {
  const unfinished = loop([{ tools: [bash('t1', 'pytest')], results: ['[exit code 1]'] }, { tools: [bash('t2', 'pytest -x')] }]);
  const u = rolloutBehaviour({ calls: unfinished });
  assert.equal(u.final_answer, false);
  assert.deepEqual([u.failed_tool_calls, u.unknown_tool_calls, u.recovered_failures], [1, 1, 0]);
  assert.equal(u.self_verified, false);
  assert.equal(u.turns_to_first_success, null);
  const plain = [call({ id: 'p', index: 0, prompt: [1], sampled: [2] })];
  const p = rolloutBehaviour({ calls: plain });
  assert.equal(p.tool_coverage, null);
  assert.equal(p.tool_calls, 0);
  const agg = aggregateBehaviour([u, p]);
  assert.equal(agg.rollouts, 2);
  assert.equal(agg.error_recovery, 0);
  assert.equal(agg.self_verification, 0);
  assert.equal(agg.mean_tool_calls, 1);
  assert.equal(agg.no_success_share, 1);
  assert.equal(agg.mean_turns_to_first_success, null);
});

test('the main agent path: a subagent sequence is left out', () => {
  const main = loop([{ tools: [bash('t1', 'ls')], results: ['a\n[exit code 0]'] }, { answer: 'a' }]);
  const sub = call({
    id: 's0',
    index: 9,
    prompt: [7],
    sampled: [8],
    reply: { role: 'assistant', content: null, tool_calls: [bash('s1', 'false')] },
  });
  const b = rolloutBehaviour({
    calls: [...main, sub],
    sequences: [
      { role: 'agent', node_ids: ['c0', 'c1'] },
      { role: 'auxiliary', node_ids: ['s0'] },
    ],
  });
  assert.equal(b.tool_calls, 1);
  assert.equal(b.turns, 2);
});

test('running the changed program counts as a check, in the same compound command (V4) or after it (V3 run)', () => {
  const compound = rolloutBehaviour({
    calls: loop([
      { tools: [bash('t1', 'cat sum.sh')], results: ['echo $(($1 - $2))\n[exit code 0]'] },
      { tools: [bash('t2', "sed -i 's/- \\$2/+ $2/' sum.sh && bash sum.sh 2 3")], results: ['5\n[exit code 0]'] },
      { answer: 'Fixed.' },
    ]),
  });
  assert.deepEqual(compound.verification, { turn: 1, name: 'bash', kind: 'run' });
  const after = rolloutBehaviour({
    calls: loop([
      { tools: [bash('t1', 'echo 1 > out.txt')], results: ['[exit code 0]'] },
      { tools: [bash('t2', './out.txt')], results: ['[exit code 0]'] },
      { answer: 'ok' },
    ]),
  });
  assert.deepEqual(after.verification, { turn: 1, name: 'bash', kind: 'run' });
  const unrelated = rolloutBehaviour({
    calls: loop([{ tools: [bash('t1', "sed -i 's/a/b/' app.py && bash -c 'echo hi'")], results: ['[exit code 0]'] }, { answer: 'ok' }]),
  });
  assert.equal(unrelated.self_verified, false, 'running something else is not a check of the change');
});

test("codex's exec_command {cmd} is a shell: its change-and-run is a check", () => {
  const calls = loop([
    { tools: [named('x1', 'exec_command', { cmd: "sed -i 's/-/+/' sum.sh && bash sum.sh 2 3" })], results: ['5\n[exit code 0]'] },
    { answer: 'Fixed.' },
  ]);
  const b = rolloutBehaviour({ calls });
  assert.equal(b.facts[0]!.command, "sed -i 's/-/+/' sum.sh && bash sum.sh 2 3");
  assert.equal(b.facts[0]!.mutates, true);
  assert.deepEqual(b.verification, { turn: 0, name: 'exec_command', kind: 'run' });
});
