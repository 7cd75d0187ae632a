import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildRollout, traceToJsonl } from '../../src/capture/rollout.js';
import {
  AttachTrajectoryRequest,
  DetailsRequest,
  OpenGroupMemberCommand,
  ReadyQueue,
  dispatchWebviewMessage,
  isCompletion,
  isHostMessage,
  type CompletionMessage,
  type WebviewHandlers,
} from '../../src/protocol/messages.js';
import { parseWebviewMessage } from '../../src/protocol/webview-schema.js';
import { RolloutFileError, parseRolloutDocument } from '../../src/capture/rollout-file.js';
import { rolloutFromText } from '../../src/report/rollout-loader.js';
import { bytesToText, fromWire, idsWithoutText, toWire, viewerDataFromRollout } from '../../src/protocol/viewer-data.js';
import { call, chain, session } from './rollout-fixtures.js';

test('inbound webview messages are validated; unknown or malformed ones are rejected with a reason', () => {
  assert.deepEqual(parseWebviewMessage({ type: 'ready', version: 1 }), { ok: true, msg: { type: 'ready', version: 1 } });
  assert.equal(parseWebviewMessage({ type: AttachTrajectoryRequest.method, seq: 3 }).ok, true);
  assert.deepEqual(parseWebviewMessage({ type: OpenGroupMemberCommand.method, rollout_id: 'hello-file.react.0' }), {
    ok: true,
    msg: { type: 'openGroupMember', rollout_id: 'hello-file.react.0' },
  });
  const bad = [
    { type: 'openGroupMember' },
    { type: 'openGroupMember', rollout_id: '' },
    { type: 'openGroupMember', rollout_id: 7 },
    { type: 'openGroupMember', rollout_id: 'x', seq: 1 },
    { type: 'ready' },
    { type: 'ready', version: 1, extra: 1 },
    { type: 'attachTrajectory', seq: -1 },
    { type: 'rm -rf' },
    null,
    'ready',
    { type: 'revealCall', node_id: 'x' },
  ];
  for (const b of bad) {
    const r = parseWebviewMessage(b);
    assert.equal(r.ok, false, JSON.stringify(b));
    if (!r.ok) assert.ok(r.error.length > 0);
  }
  assert.equal(isHostMessage({ type: 'load', data: {} }), true);
  assert.equal(isHostMessage({ type: 'ready' }), false);
});

test('the host dispatch runs one handler per message and answers requests with their completion: res, or err when the handler throws', async () => {
  const seen: string[] = [];
  const handlers: WebviewHandlers = {
    ready: ({ version }) => void seen.push(`ready ${version}`),
    attachTrajectory: async () => null,
    details: ({ node_id }) => {
      if (node_id !== 'n1') throw new Error(`no turn ${node_id} in this rollout`);
      return { raw: null, request_messages: [], response_message: null };
    },
    openGroupMember: ({ rollout_id }) => void seen.push(`open ${rollout_id}`),
    replayRollout: () => void seen.push('replay'),
    forkFromTurn: ({ node_id }) => void seen.push(`fork ${node_id}`),
  };
  const replies: CompletionMessage[] = [];
  const reply = (m: CompletionMessage) => replies.push(m);
  await dispatchWebviewMessage({ type: 'ready', version: 1 }, handlers, reply);
  await dispatchWebviewMessage({ type: DetailsRequest.method, seq: 4, node_id: 'n1' }, handlers, reply);
  await dispatchWebviewMessage({ type: DetailsRequest.method, seq: 5, node_id: 'gone' }, handlers, reply);
  await dispatchWebviewMessage({ type: AttachTrajectoryRequest.method, seq: 6 }, handlers, reply);
  await dispatchWebviewMessage({ type: OpenGroupMemberCommand.method, rollout_id: 'g.0' }, handlers, reply);
  assert.deepEqual(seen, ['ready 1', 'open g.0'], 'a command gets no reply');
  assert.deepEqual(replies, [
    { type: 'details/completion', seq: 4, res: { raw: null, request_messages: [], response_message: null } },
    { type: 'details/completion', seq: 5, err: 'no turn gone in this rollout' },
    { type: 'attachTrajectory/completion', seq: 6, res: null },
  ]);
  for (const r of replies) assert.ok(isHostMessage(r) && isCompletion(r));
  assert.equal(isHostMessage({ type: 'atif', result: {} }), false, 'nothing sends an atif message any more');
});

test('ReadyQueue holds messages until ready, then flushes in order; reset re-arms it', () => {
  const got: number[] = [];
  const q = new ReadyQueue<number>((m) => got.push(m));
  q.send(1);
  q.send(2);
  assert.deepEqual(got, []);
  q.open();
  q.send(3);
  assert.deepEqual(got, [1, 2, 3]);
  q.reset();
  q.send(4);
  assert.deepEqual(got, [1, 2, 3]);
  q.open();
  assert.deepEqual(got, [1, 2, 3, 4]);
});

test('viewer data keeps the capture: token ids, aligned logprobs, mask, flags for misaligned and missing logprobs', () => {
  const records = chain(3, { sampled: 4 });
  records[1] = { ...records[1]!, logprobs: [-0.1, -0.2] }; // misaligned
  records[2] = { ...records[2]!, logprobs: null, token_bytes: [[104, 105], [0xe2, 0x82], null, [32]] };
  const doc = buildRollout(session, records, { budgetStopCount: 0, captureLevel: 'tokens' });
  const data = viewerDataFromRollout(doc);
  assert.equal(data.turns.length, 3);
  assert.deepEqual(
    data.turns.map((t) => t.prompt_ids),
    records.map((r) => r.prompt_token_ids),
  );
  assert.deepEqual(
    data.turns.map((t) => t.sampled_ids),
    records.map((r) => r.completion_token_ids),
  );
  assert.deepEqual(data.turns[0]!.logprobs, [-0.5, -0.5, -0.5, -0.5]);
  assert.equal(data.turns[0]!.trained, true);
  assert.equal(data.turns[1]!.logprobs, null);
  assert.equal(data.turns[1]!.trained, false);
  assert.match(data.turns[1]!.flags.join('\n'), /misaligned logprobs: 2 logprobs for 4 sampled tokens/);
  assert.match(data.turns[2]!.flags.join('\n'), /missing logprobs/);
  assert.deepEqual(data.turns[2]!.sampled_text, ['hi', '\\xe2\\x82', null, ' ']);
  assert.equal(data.turns[0]!.raw!.dialect, 'openai_chat');
  // Sampled tokens of earlier turns reappear in later prompts; their bytes name them.
  assert.ok(!idsWithoutText(data).includes(records[2]!.completion_token_ids![0]!));
  assert.equal(bytesToText([0xe2, 0x82, 0xac]), '€');
});

test('rollout files and trace JSONL parse into the same turns; bad files get a clear error', () => {
  const records = [...chain(3), call({ id: 'r', index: 3, prompt: chain(3)[1]!.prompt_token_ids, sampled: [7, 8] })];
  const doc = buildRollout(session, records, { budgetStopCount: 0, captureLevel: 'tokens', includeDiscarded: true });
  const fromDoc = rolloutFromText(JSON.stringify(doc), '/x/s.rollout.json').data;
  assert.equal(fromDoc.turns.length, 4);
  assert.equal(fromDoc.key, '/x/s.rollout.json');
  const fromTrace = rolloutFromText(traceToJsonl(doc.traces), '/x/s.jsonl').data;
  assert.equal(fromTrace.source, 'trace');
  assert.deepEqual(
    fromTrace.turns.map((t) => [t.node_id, t.parent_id, t.prompt_ids.length, t.sampled_ids.length, t.trained]),
    fromDoc.turns.map((t) => [t.node_id, t.parent_id, t.prompt_ids.length, t.sampled_ids.length, t.trained]),
  );
  assert.deepEqual(fromTrace.graph.roots, fromDoc.graph.roots);
  assert.throws(
    () => parseRolloutDocument('{}', 'a.rollout.json'),
    (e: unknown) => e instanceof RolloutFileError && /a\.rollout\.json is not a Harness Lab rollout document: session_id/.test(e.message),
  );
  assert.throws(() => rolloutFromText('{"x":1}\n', 'a.jsonl'), /a\.jsonl:1: not a TrainingTrace line/);
  assert.throws(() => rolloutFromText('nope', 'a.rollout.json'), /not JSON/);
});

test('the wire form sends shared history once and expands to the same turns', () => {
  const records = [
    ...chain(6, { first: 50, sampled: 5, glue: 3 }),
    call({ id: 'r', index: 6, prompt: chain(6, { first: 50, sampled: 5, glue: 3 })[2]!.prompt_token_ids, sampled: [7, 8] }),
  ];
  const data = viewerDataFromRollout(
    buildRollout(session, records, { budgetStopCount: 0, captureLevel: 'tokens', includeDiscarded: true }),
  );
  const { wire, details } = toWire(data);
  const sent = wire.turns.reduce((a, t) => a + t.prompt_tail.length, 0);
  const full = data.turns.reduce((a, t) => a + t.prompt_ids.length, 0);
  assert.ok(sent < full / 3, `${sent} prompt ids sent for ${full}`);
  assert.equal(sent, 50 + 5 * 3 + 3, 'the first prompt, then only the glue of each later turn (the retry too)');
  const back = fromWire(JSON.parse(JSON.stringify(wire)));
  assert.deepEqual(
    back.turns.map((t) => t.prompt_ids),
    data.turns.map((t) => t.prompt_ids),
  );
  assert.deepEqual(
    back.turns.map((t) => t.sampled_ids),
    data.turns.map((t) => t.sampled_ids),
  );
  assert.deepEqual(Object.keys(details).sort(), data.turns.map((t) => t.node_id).sort());
  assert.deepEqual(details[data.turns[0]!.node_id]!.raw, data.turns[0]!.raw);
  assert.throws(() => fromWire({ ...wire, turns: [...wire.turns].reverse() }), /not an earlier turn/);
});
