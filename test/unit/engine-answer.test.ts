// normaliseEngineResponse: what the record gets out of an engine answer (ids, logprobs, alternatives,
// bytes, findings) and what the client's copy keeps, position by position.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EngineResponseError, normaliseEngineResponse } from '../../src/capture/upstream.js';

interface Entry {
  token: string;
  logprob: unknown;
  bytes?: number[] | null;
  top_logprobs?: { token: string; logprob: number }[];
}

const entry = (id: number, logprob: unknown, alts: [string, number][] = []): Entry => ({
  token: `token_id:${id}`,
  logprob,
  bytes: [id % 256],
  top_logprobs: alts.map(([token, lp]) => ({ token, logprob: lp })),
});

function answer(options: { sampled?: number[]; entries?: (Entry | null)[]; prompt?: number[] } = {}) {
  const sampled = options.sampled ?? [7, 8, 9];
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1,
    model: 'served',
    prompt_token_ids: options.prompt ?? [1, 2, 3, 4],
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: 'hi', reasoning: 'because' },
        finish_reason: 'stop',
        token_ids: sampled,
        logprobs: {
          content:
            options.entries ??
            sampled.map((id, i) =>
              entry(id, -0.5 * (i + 1), [
                [`token_id:${id}`, -0.5 * (i + 1)],
                ['text', -3],
              ]),
            ),
        },
      },
    ],
    usage: { prompt_tokens: 4, completion_tokens: 3, total_tokens: 7 },
  };
}

const fatal = (findings: string[]) => findings.filter((f) => f.startsWith('[FATAL]'));

test('a clean answer: ids, logprobs, alternatives (ids parsed, text kept as null id) and bytes, no findings', () => {
  const body = answer();
  const before = JSON.stringify(body);
  const out = normaliseEngineResponse(body);
  assert.deepEqual(out.findings, []);
  assert.deepEqual(out.capture.prompt_token_ids, [1, 2, 3, 4]);
  assert.deepEqual(out.capture.completion_token_ids, [7, 8, 9]);
  assert.deepEqual(out.capture.logprobs, [-0.5, -1, -1.5]);
  assert.deepEqual(out.capture.top_logprobs![1], [
    { token_id: 8, token: 'token_id:8', logprob: -1 },
    { token_id: null, token: 'text', logprob: -3 },
  ]);
  assert.deepEqual(out.capture.token_bytes, [[7], [8], [9]]);
  assert.equal(JSON.stringify(body), before, 'the engine answer itself is not changed');
});

test("the client's copy: logprobs with each token's id when it asked for them, none when it did not; no token fields either way", () => {
  const asked = normaliseEngineResponse(answer(), { clientLogprobs: true }).response;
  const content = asked.choices[0]!.logprobs!.content as { token_id?: number }[];
  assert.deepEqual(
    content.map((e) => e.token_id),
    [7, 8, 9],
  );
  const notAsked = normaliseEngineResponse(answer(), { clientLogprobs: false }).response;
  assert.ok(!('logprobs' in notAsked.choices[0]!), 'no logprobs for a client that did not ask');
  for (const r of [asked, notAsked]) {
    const choice = r.choices[0] as unknown as Record<string, unknown>;
    assert.ok(!('token_ids' in choice) && !('prompt_token_ids' in r), 'token data stays out of the client copy');
    assert.equal((choice.message as Record<string, unknown>).reasoning_content, 'because');
    assert.ok(!('reasoning' in (choice.message as object)));
  }
  // Either way the record gets everything.
  const out = normaliseEngineResponse(answer(), { clientLogprobs: false });
  assert.deepEqual(out.capture.logprobs, [-0.5, -1, -1.5]);
  assert.equal(out.capture.top_logprobs!.length, 3);
});

test('misaligned logprobs: a count that differs, or an entry for another token, is fatal and drops the logprobs', () => {
  const short = normaliseEngineResponse(answer({ sampled: [7, 8, 9], entries: [entry(7, -1), entry(8, -1)] }));
  assert.match(fatal(short.findings)[0]!, /logprob_misalign: 3 sampled ids but 2 logprob entries/);
  assert.equal(short.capture.logprobs, null);
  const other = normaliseEngineResponse(answer({ sampled: [7, 8, 9], entries: [entry(7, -1), entry(80, -1), entry(9, -1)] }));
  assert.match(fatal(other.findings)[0]!, /logprob_misalign: logprob entry 1 is for token_id:80, sampled id is 8/);
  assert.equal(other.capture.logprobs, null);
  // A token string that only looks like an id (trailing text) is not read as one.
  const loose = normaliseEngineResponse(answer({ sampled: [7], entries: [{ token: 'token_id:70x', logprob: -1 }] }));
  assert.deepEqual(fatal(loose.findings), []);
  assert.deepEqual(loose.capture.logprobs, [-1]);
});

test('bad logprob values are fatal: not a finite number (first position named), or above zero', () => {
  const nan = normaliseEngineResponse(answer({ sampled: [7, 8], entries: [entry(7, -1), entry(8, 'x')] }));
  assert.match(fatal(nan.findings)[0]!, /invalid_logprob: logprob at position 1 is "x"/);
  assert.equal(nan.capture.logprobs, null);
  const positive = normaliseEngineResponse(answer({ sampled: [7, 8], entries: [entry(7, -1), entry(8, 0.25)] }));
  assert.match(fatal(positive.findings)[0]!, /positive_logprob/);
  // An entry that is not an object is reported, not thrown on.
  const hole = normaliseEngineResponse(answer({ sampled: [7, 8], entries: [entry(7, -1), null] }));
  assert.match(fatal(hole.findings)[0]!, /invalid_logprob: logprob at position 1 is null/);
  assert.deepEqual(hole.capture.top_logprobs![1], []);
  assert.equal(hole.capture.token_bytes![1], null);
});

test('text tokens instead of token_id:N are a warning; sampled ids without logprobs or prompt ids are fatal', () => {
  const text = normaliseEngineResponse(answer({ sampled: [7], entries: [{ token: 'hi', logprob: -1 }] }));
  assert.ok(text.findings.some((f) => f.startsWith('[WARN] token_strings')));
  assert.deepEqual(text.capture.logprobs, [-1]);
  const body = answer() as Record<string, unknown>;
  delete body.prompt_token_ids;
  (body.choices as Record<string, unknown>[])[0]!.logprobs = null;
  const bare = normaliseEngineResponse(body);
  assert.ok(bare.findings.includes('[FATAL] no_logprobs: sampled tokens came back without logprobs'));
  assert.ok(bare.findings.includes('[FATAL] no_prompt_ids: the engine returned sampled ids but no prompt_token_ids'));
  assert.throws(() => normaliseEngineResponse({ choices: 'no' }), EngineResponseError);
});
