// samples.ts: samples per rollout, tokens to the trainer and the merged length, from rollout documents
// built out of token arrays (a merged chain, the same turns split into one sample each, a chat capture).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildRollout } from '../../src/capture/rollout.js';
import type { CallRecord, RenderInfo } from '../../src/capture/types.js';
import { formatTotals, sampleAccount, sumAccounts, unparsedToolCalls } from '../../src/capture/samples.js';
import { call, chain, session } from './rollout-fixtures.js';

const tokens = { budgetStopCount: 0, captureLevel: 'tokens' as const };

test('a merged chain is one sample: the trainer gets exactly the merged length', () => {
  const doc = buildRollout(session, chain(4, { first: 10, sampled: 5, glue: 3 }), tokens);
  const a = sampleAccount(doc)!;
  // 10 prompt + 4 x 5 sampled + 3 x 3 glue between turns.
  assert.deepEqual(a, { samples: 1, agent_turns: 4, tokens_to_trainer: 39, sampled_tokens: 20, merged_tokens: 39, unparsed_tool_calls: 0 });
});

test('turns whose history was re-rendered differently split into one sample each, each carrying the context again', () => {
  // Turn k's prompt re-renders turn k-1 without its first sampled token (dropped reasoning): no prefix, a new root.
  const calls: CallRecord[] = [];
  let prompt = [1, 2, 3, 4, 5, 6, 7, 8];
  let next = 100;
  for (let i = 0; i < 4; i++) {
    const sampled = [next++, next++, next++, next++];
    calls.push(call({ id: `t${i}`, index: i, prompt, sampled, nTools: 1 }));
    prompt = [...prompt, ...sampled.slice(1), next++, next++];
  }
  const a = sampleAccount(buildRollout(session, calls, tokens))!;
  assert.equal(a.samples, 4);
  assert.equal(a.agent_turns, 4);
  // Prompts 8, 13, 18, 23 and 4 sampled each.
  assert.equal(a.tokens_to_trainer, 8 + 13 + 18 + 23 + 16);
  assert.equal(a.sampled_tokens, 16);
  // The longest path (23 + 4) plus the sampled tokens of the three turns off it: an upper bound of one merged sample.
  assert.equal(a.merged_tokens, 27 + 12);
  const t = sumAccounts([a, sampleAccount(buildRollout(session, chain(2), tokens))!]);
  assert.equal(t.rollouts, 2);
  assert.equal(t.samples, 5);
  assert.equal(t.samples_per_rollout, 2.5);
  assert.equal(t.single_sample_rollouts, 1);
  assert.ok(t.token_ratio! > 1.5, `the split rollout costs the trainer more than its merged length (${t.token_ratio})`);
  assert.match(
    formatTotals(t),
    /^2\.50 samples\/rollout \(1\/2 one sample\), \d+ tokens to the trainer \(1\.\d\dx the merged \d+\), 0 unparsed tool call\(s\)$/,
  );
});

test('unparsed tool calls come from the per-call render record; a chat-level capture has no account', () => {
  const calls = chain(3);
  const render = (parse: 'none' | 'ok' | 'failed', statuses: string[]): RenderInfo => ({
    mode: 'proxy',
    family: 'qwen3',
    kind: 'full',
    anchor_call_id: null,
    anchor_tokens: 0,
    bridge_span: null,
    synthesized_close: false,
    new_root_reason: null,
    full_render: null,
    tool_call_parse: parse,
    tool_call_statuses: statuses,
  });
  calls[0]!.render = render('ok', ['ok', 'unknown_tool']);
  calls[1]!.render = render('failed', ['ok', 'invalid_json']);
  calls[2]!.render = render('failed', []);
  assert.equal(unparsedToolCalls(calls[0]!), 0, 'answered as calls, even the unknown tool');
  assert.equal(unparsedToolCalls(calls[1]!), 2, 'one bad block answers the whole turn as text: both calls are lost');
  assert.equal(unparsedToolCalls(calls[2]!), 1);
  assert.equal(unparsedToolCalls(chain(1)[0]!), 0, 'a chat-mode call');
  assert.equal(sampleAccount(buildRollout(session, calls, tokens))!.unparsed_tool_calls, 3);
  assert.equal(sampleAccount(buildRollout(session, calls, { budgetStopCount: 0, captureLevel: 'text' as const })), null);
  assert.equal(formatTotals(sumAccounts([])), 'no rollout with token ids');
});
