// A real captured batch for the group view: every call goes through the capture proxy to the fake
// engine (vLLM-shaped token ids, logprobs and bytes), states and manifest written with src/batch/state.ts.
// Each member's tool calls and results are known, so divergence and behaviour are known too.
//
//   g-div  (react-a, fix-bug)  d0 reads, edits, runs the test, answers: reward 1, self-verified
//                              d1 reads, edits, answers without a check: reward 0 (diverges from d0 at call 3)
//                              d2 reads the wrong path (fails), recovers, answers: reward 0 (diverges at call 1)
//                              d3 crashes after one call: discarded (infra_error)
//   g-same (react-b, fix-bug)  s0 s1 identical, reward 0: no contrast
import { mkdirSync } from 'node:fs';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { startFakeEngine, type FakeAnswer, type FakeScript } from '../../src/engine/fake-engine.js';
import { batchPaths } from '../../src/batch/state.js';
import type { ChatMessage } from '../../src/capture/types.js';
import { createSession } from './helpers.js';
import { chat, sessionMetadata, writeBatchManifest, writeFinishedState, type PlannedRollout } from './train-fixture.js';

interface Step {
  command: string;
  result: string;
}

interface GroupRollout extends PlannedRollout {
  steps: Step[];
  answer: string;
}

const READ: Step = { command: 'cat app.py', result: 'def add(a, b):\n    return a - b\n[exit code 0]' };
const EDIT: Step = { command: "sed -i 's/a - b/a + b/' app.py", result: '\n[exit code 0]' };
const TEST: Step = { command: 'python3 -m pytest -q test_app.py', result: '1 passed in 0.01s\n[exit code 0]' };
const WRONG: Step = { command: 'cat src/app.py', result: 'cat: src/app.py: No such file or directory\n[exit code 1]' };

export const GROUP_PLAN: GroupRollout[] = [
  {
    id: 'd0',
    group: 'g-div',
    member: 0,
    task: 'fix-bug',
    harness: 'react-a',
    class: 'completed',
    reward: 1,
    steps: [READ, EDIT, TEST],
    answer: 'Fixed add and the test passes.',
  },
  {
    id: 'd1',
    group: 'g-div',
    member: 1,
    task: 'fix-bug',
    harness: 'react-a',
    class: 'policy_failure',
    reward: 0,
    steps: [READ, EDIT],
    answer: 'Fixed add.',
  },
  {
    id: 'd2',
    group: 'g-div',
    member: 2,
    task: 'fix-bug',
    harness: 'react-a',
    class: 'policy_failure',
    reward: 0,
    steps: [WRONG, READ],
    answer: 'The bug is in add.',
  },
  {
    id: 'd3',
    group: 'g-div',
    member: 3,
    task: 'fix-bug',
    harness: 'react-a',
    class: 'infra_error',
    reward: null,
    steps: [READ],
    answer: '',
    crashAfterFirst: true,
  },
  {
    id: 's0',
    group: 'g-same',
    member: 0,
    task: 'fix-bug',
    harness: 'react-b',
    class: 'policy_failure',
    reward: 0,
    steps: [READ],
    answer: 'Looked.',
  },
  {
    id: 's1',
    group: 'g-same',
    member: 1,
    task: 'fix-bug',
    harness: 'react-b',
    class: 'policy_failure',
    reward: 0,
    steps: [READ],
    answer: 'Looked.',
  },
];

export async function buildGroupBatch(dir: string): Promise<{ dir: string; sessions: Record<string, string> }> {
  mkdirSync(batchPaths(dir).rollouts, { recursive: true });
  let current: GroupRollout = GROUP_PLAN[0]!;
  const script: FakeScript = (_request, turn): FakeAnswer => {
    const step = current.steps[turn];
    return step ? { content: null, tool_calls: [{ name: 'bash', arguments: { command: step.command } }] } : { content: current.answer };
  };
  const engine = await startFakeEngine({ script });
  const proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, dataDir: batchPaths(dir).capture });
  const sessions: Record<string, string> = {};
  const now = new Date().toISOString();
  try {
    for (const p of GROUP_PLAN) {
      current = p;
      const { session_id } = await createSession(proxy, { metadata: sessionMetadata(p) });
      sessions[p.id] = session_id;
      const messages: ChatMessage[] = [
        { role: 'system', content: 'You are a careful coding agent. Use the bash tool.' },
        { role: 'user', content: 'The add function in app.py is wrong. Fix it.' },
      ];
      let calls = 0;
      for (let turn = 0; ; turn++) {
        const reply = await chat(proxy.url, session_id, messages);
        calls++;
        if (p.crashAfterFirst || !reply.tool_calls?.length) break;
        messages.push({ role: 'assistant', content: reply.content ?? null, tool_calls: reply.tool_calls });
        for (const tc of reply.tool_calls) messages.push({ role: 'tool', tool_call_id: tc.id, content: p.steps[turn]!.result });
      }
      writeFinishedState(dir, p, session_id, calls, now);
    }
  } finally {
    await proxy.close();
    await engine.close();
  }
  writeBatchManifest(dir, GROUP_PLAN, engine, now);
  return { dir, sessions };
}
