// The trainer exports on calls sampled by the embedded CPU engine (a tiny Qwen3 with the real Qwen3
// tokenizer and chat template, scripted to call bash twice and answer): one group of two rollouts
// through the real capture proxy, exported in every trainer format and read back by the Python reader.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { batchPaths } from '../../src/batch/state.js';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { loadSessionFile } from '../../src/capture/store.js';
import type { ChatMessage } from '../../src/capture/types.js';
import type { EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { IM_END } from '../../src/engine/tiny-model.js';
import { runExport } from '../../src/export/export.js';
import type { TrainingTraceLine, TrlRow, VerlRow } from '../../src/export/rows.js';
import { startTestEngine } from './engine-fixture.js';
import { createSession } from './helpers.js';
import { chat, sessionMetadata, writeBatchManifest, writeFinishedState, type PlannedRollout } from './train-fixture.js';

const READER = join(__dirname, '..', 'python', 'read_exports.py');
const PLAN: PlannedRollout[] = [
  { id: 'e0', group: 'g-embedded', member: 0, task: 'count-lines', harness: 'react-embedded', class: 'completed', reward: 1 },
  { id: 'e1', group: 'g-embedded', member: 1, task: 'count-lines', harness: 'react-embedded', class: 'policy_failure', reward: 0 },
];
let tmp: string;
let dir: string;
let lab: EmbeddedEngine;
const sessions: Record<string, string> = {};

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'hl-train-embedded-'));
  dir = join(tmp, 'batch');
  mkdirSync(batchPaths(dir).rollouts, { recursive: true });
  lab = await startTestEngine({ policy: 'two-tool-calls' });
  const proxy = await CaptureProxy.start({ engineUrl: `${lab.url}/v1`, model: lab.engine.modelName, dataDir: batchPaths(dir).capture });
  const now = new Date().toISOString();
  try {
    for (const p of PLAN) {
      const { session_id } = await createSession(proxy, { metadata: sessionMetadata(p) });
      sessions[p.id] = session_id;
      const messages: ChatMessage[] = [
        { role: 'system', content: 'You are a careful agent.' },
        { role: 'user', content: `How many lines does notes.txt have? (${p.id})` },
      ];
      let calls = 0;
      for (let turn = 0; turn < 5; turn++) {
        const m = await chat(proxy.url, session_id, messages);
        calls++;
        messages.push({ role: 'assistant', content: m.content ?? null, tool_calls: m.tool_calls });
        if (!m.tool_calls?.length) break;
        for (const tc of m.tool_calls)
          messages.push({
            role: 'tool',
            tool_call_id: tc.id,
            content: tc.function.arguments.includes('wc') ? '3 notes.txt\n' : 'notes.txt\n',
          });
      }
      writeFinishedState(dir, p, session_id, calls, now);
    }
  } finally {
    await proxy.close();
  }
  writeBatchManifest(dir, PLAN, { url: lab.url, model: lab.engine.modelName }, now);
});
after(async () => {
  await lab?.close();
  rmSync(tmp, { recursive: true, force: true });
});

const lines = <T>(file: string): T[] =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T);
function python(format: string, file: string): unknown {
  const r = spawnSync('python3', [READER, format, file], { encoding: 'utf8', timeout: 60_000 });
  if (r.error) throw new Error(`python3 is needed for this test (standard library only): ${r.error.message}`);
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

test('embedded engine: trl rows are the three-call chain with real Qwen3 ids, logprobs and env_mask', async () => {
  const out = join(tmp, 'trl.jsonl');
  const m = await runExport({ format: 'trl', source: { kind: 'batch', dir }, out });
  assert.equal(m.counts.rows, 2);
  const rows = lines<TrlRow>(out);
  for (const row of rows) {
    const calls = loadSessionFile(join(batchPaths(dir).capture, 'sessions', `${sessions[row.rollout_id]}.jsonl`))!.calls.sort(
      (a, b) => a.index - b.index,
    );
    assert.equal(calls.length, 3);
    assert.deepEqual(row.prompt_ids, calls[0]!.prompt_token_ids);
    const last = calls[2]!;
    assert.deepEqual([...row.prompt_ids, ...row.completion_ids], [...last.prompt_token_ids!, ...last.completion_token_ids!]);
    assert.equal(row.completion_ids.at(-1), IM_END, 'the completion ends on the stop token, as TRL expects of a finished sequence');
    const sampled = calls.reduce((a, c) => a + c.completion_token_ids!.length, 0);
    assert.equal(
      row.env_mask.reduce((a, b) => a + b, 0),
      sampled,
    );
    const trained = row.logprobs.filter((_, i) => row.env_mask[i] === 1);
    assert.deepEqual(
      trained,
      calls.flatMap((c) => c.logprobs!),
      'the behaviour logprobs, in order',
    );
  }
  assert.deepEqual(python('trl', out), { rows: 2, groups: 1, num_generations: 2, groups_std_zero: 0, group_ids: ['g-embedded'] });
});

test('embedded engine: verl and trainingtrace exports pass the trainer-side reader', async () => {
  const v = join(tmp, 'verl.jsonl');
  await runExport({ format: 'verl', source: { kind: 'batch', dir }, out: v });
  const rows = lines<VerlRow>(v);
  assert.deepEqual(
    rows.map((r) => [r.extra_fields.trajectory_role, r.reward_score, r.loss_weight]),
    [
      ['final', 1, 1],
      ['final', 0, 1],
    ],
  );
  assert.deepEqual(python('verl', v), { rows: 2, sessions: 2, uids: 1, multi_segment_sessions: 0 });
  const t = join(tmp, 'tt.jsonl');
  await runExport({ format: 'trainingtrace', source: { kind: 'batch', dir }, out: t });
  assert.deepEqual(
    lines<TrainingTraceLine>(t).map((l) => [l.rollout_id, l.reward, l.trace.turns.length]),
    [
      ['e0', 1, 3],
      ['e1', 0, 3],
    ],
  );
  assert.deepEqual(python('trainingtrace', t), { rows: 2, turns: 6, rewards: { null: 0, zero: 1, positive: 1 } });
});
