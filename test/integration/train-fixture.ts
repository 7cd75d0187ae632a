// A real batch directory for the export and audit tests: every rollout's calls go through the real
// capture proxy (data dir <batch>/capture) to the fake engine, which answers with vLLM-shaped token
// ids and logprobs; the manifest and rollout states are written with src/batch/state.ts.
//
//   g-mixed  (react-a, count-lines)  r0 reward 1 with a subagent, r1 reward 0, r2 reward 1 with one stale call
//   g-flat   (react-b, list-files)   r3 r4 r5 all reward 0: no contrast
//   g-broken (react-a, read-file)    r6 reward 1, r7 reward 0, r8 discarded (infra_error: the harness crashed after one call)
import { cpSync, mkdirSync } from 'node:fs';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { startFakeEngine, type FakeScript } from '../../src/engine/fake-engine.js';
import {
  batchPaths,
  trainingSampling,
  writeJsonAtomic,
  writeRolloutState,
  type BatchManifest,
  type RolloutClass,
  type RolloutState,
} from '../../src/batch/state.js';
import { POLICY_VERSION_HEADER } from '../../src/export/policy-version.js';
import type { ChatMessage } from '../../src/capture/types.js';
import { bashTool, createSession } from './helpers.js';

export const FIXTURE_POLICY = 'step-6';
export const STALE_POLICY = 'step-1';
export const TEMPERATURE = 0.7;
const MAIN_SYSTEM = 'You are a careful coding agent. Use the bash tool.';
const SUB_SYSTEM = 'You are a research subagent. Answer the question you are given.';

/** Call a shell tool on the first turn, answer on the second: for the main agent and the subagent alike. */
const script: FakeScript = (request, turn) => {
  const sub = request.messages[0]?.content === SUB_SYSTEM;
  if (turn === 0)
    return {
      content: sub ? 'Checking.' : 'Let me look.',
      tool_calls: [{ name: 'bash', arguments: { command: sub ? 'grep -c x notes.txt' : 'wc -l notes.txt' } }],
    };
  return { content: sub ? 'The subagent found 3.' : 'The file has 3 lines.' };
};

export interface PlannedRollout {
  id: string;
  group: string;
  member: number;
  task: string;
  harness: string;
  class: RolloutClass;
  reward: number | null;
  subagent?: boolean;
  staleSecondCall?: boolean;
  /** Stop after the first call (a crashed harness). */
  crashAfterFirst?: boolean;
}

const PLAN: PlannedRollout[] = [
  { id: 'r0', group: 'g-mixed', member: 0, task: 'count-lines', harness: 'react-a', class: 'completed', reward: 1, subagent: true },
  { id: 'r1', group: 'g-mixed', member: 1, task: 'count-lines', harness: 'react-a', class: 'policy_failure', reward: 0 },
  { id: 'r2', group: 'g-mixed', member: 2, task: 'count-lines', harness: 'react-a', class: 'completed', reward: 1, staleSecondCall: true },
  { id: 'r3', group: 'g-flat', member: 0, task: 'list-files', harness: 'react-b', class: 'policy_failure', reward: 0 },
  { id: 'r4', group: 'g-flat', member: 1, task: 'list-files', harness: 'react-b', class: 'policy_failure', reward: 0 },
  { id: 'r5', group: 'g-flat', member: 2, task: 'list-files', harness: 'react-b', class: 'policy_failure', reward: 0 },
  { id: 'r6', group: 'g-broken', member: 0, task: 'read-file', harness: 'react-a', class: 'completed', reward: 1 },
  { id: 'r7', group: 'g-broken', member: 1, task: 'read-file', harness: 'react-a', class: 'policy_failure', reward: 0 },
  {
    id: 'r8',
    group: 'g-broken',
    member: 2,
    task: 'read-file',
    harness: 'react-a',
    class: 'infra_error',
    reward: null,
    crashAfterFirst: true,
  },
];

export interface TrainingBatch {
  dir: string;
  sessions: Record<string, string>;
  /** Calls per rollout id, in order: call ids as the store recorded them. */
  plan: readonly PlannedRollout[];
}

export async function chat(
  proxyUrl: string,
  session: string,
  messages: ChatMessage[],
  headers: Record<string, string> = {},
): Promise<ChatMessage> {
  const res = await fetch(`${proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${session}`, ...headers },
    body: JSON.stringify({ model: 'policy', messages, tools: [bashTool], temperature: TEMPERATURE }),
  });
  if (res.status !== 200) throw new Error(`chat answered ${res.status}: ${await res.text()}`);
  const body = (await res.json()) as { choices: { message: ChatMessage }[] };
  return body.choices[0]!.message;
}

/** A two-step ReAct loop (tool call, tool result, answer), optionally with a subagent between the steps. */
async function runRollout(proxyUrl: string, session: string, p: PlannedRollout): Promise<number> {
  let calls = 0;
  const messages: ChatMessage[] = [
    { role: 'system', content: MAIN_SYSTEM },
    { role: 'user', content: `Task ${p.task}: how many lines does notes.txt have? (${p.id})` },
  ];
  const first = await chat(proxyUrl, session, messages);
  calls++;
  if (p.crashAfterFirst) return calls;
  messages.push({ role: 'assistant', content: first.content ?? null, tool_calls: first.tool_calls });
  for (const tc of first.tool_calls ?? []) messages.push({ role: 'tool', tool_call_id: tc.id, content: '3 notes.txt\n' });
  if (p.subagent) {
    const sub: ChatMessage[] = [
      { role: 'system', content: SUB_SYSTEM },
      { role: 'user', content: 'Count the lines with an x in notes.txt.' },
    ];
    const s1 = await chat(proxyUrl, session, sub);
    sub.push({ role: 'assistant', content: s1.content ?? null, tool_calls: s1.tool_calls });
    for (const tc of s1.tool_calls ?? []) sub.push({ role: 'tool', tool_call_id: tc.id, content: '3\n' });
    await chat(proxyUrl, session, sub);
    calls += 2;
  }
  await chat(proxyUrl, session, messages, p.staleSecondCall ? { [POLICY_VERSION_HEADER]: STALE_POLICY } : {});
  return calls + 1;
}

/** The rollout's state file, as the batch runner writes it when the rollout ends. */
export function writeFinishedState(dir: string, p: PlannedRollout, sessionId: string, nCalls: number, at: string): void {
  const discarded = p.class === 'infra_error';
  const state: RolloutState = {
    rollout_id: p.id,
    group_id: p.group,
    member: p.member,
    task: p.task,
    harness: p.harness,
    state: discarded ? 'discarded' : 'done',
    class: p.class,
    reward: p.reward,
    rewards: p.reward === null ? {} : { reward: p.reward },
    trainable: !discarded,
    session_id: sessionId,
    attempts: [
      {
        attempt: 0,
        session_id: sessionId,
        started_at: at,
        ended_at: at,
        out_dir: `runs/${p.id}/0`,
        outcome: 'finished',
        trainable: !discarded,
      },
    ],
    policy_version: FIXTURE_POLICY,
    queued_at: at,
    started_at: at,
    ended_at: at,
    duration_ms: 1000,
    error: discarded ? 'the harness exited with code 137 after its first call' : null,
    backend_ref: null,
    n_calls: nCalls,
  };
  writeRolloutState(dir, state);
}

/** batch.json for a plan: groups in plan order. */
export function writeBatchManifest(dir: string, plan: readonly PlannedRollout[], engine: { url: string; model: string }, at: string): void {
  const groups = [...new Set(plan.map((p) => p.group))].map((g) => {
    const members = plan.filter((p) => p.group === g);
    return { group_id: g, task: members[0]!.task, harness: members[0]!.harness, rollout_ids: members.map((p) => p.id) };
  });
  const manifest: BatchManifest = {
    schema_version: 1,
    batch_id: 'b-fixture',
    created_at: at,
    backend: 'docker',
    harnesses: [...new Set(plan.map((p) => p.harness))],
    group_size: Math.max(...groups.map((g) => g.rollout_ids.length)),
    tasks: [...new Set(plan.map((p) => p.task))].map((t) => ({ name: t, dir: `tasks/${t}` })),
    groups,
    sampling: trainingSampling(TEMPERATURE),
    policy_version: FIXTURE_POLICY,
    timeout_sec: 600,
    on_timeout: 'discard',
    parallel: 2,
    engine_url: engine.url,
    model: engine.model,
    k8s: null,
  };
  writeJsonAtomic(batchPaths(dir).manifest, manifest);
}

export const sessionMetadata = (p: PlannedRollout) => ({
  batch_id: 'b-fixture',
  group_id: p.group,
  rollout_id: p.id,
  task: p.task,
  harness: p.harness,
  policy_version: FIXTURE_POLICY,
});

export async function buildTrainingBatch(dir: string): Promise<TrainingBatch> {
  mkdirSync(batchPaths(dir).rollouts, { recursive: true });
  const engine = await startFakeEngine({ script });
  const proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, dataDir: batchPaths(dir).capture });
  const sessions: Record<string, string> = {};
  const now = new Date().toISOString();
  try {
    for (const p of PLAN) {
      const { session_id } = await createSession(proxy, { metadata: sessionMetadata(p) });
      sessions[p.id] = session_id;
      writeFinishedState(dir, p, session_id, await runRollout(proxy.url, session_id, p), now);
    }
  } finally {
    await proxy.close();
    await engine.close();
  }
  writeBatchManifest(dir, PLAN, engine, now);
  return { dir, sessions, plan: PLAN };
}

/** A copy of the batch, for tests that corrupt it. */
export function copyBatch(from: string, to: string): string {
  cpSync(from, to, { recursive: true });
  return to;
}
