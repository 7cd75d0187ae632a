// A session with pinned sampling (a served rollout's, a batch's) refuses the request fields that
// change the distribution tokens are sampled from, with a 400 in the caller's dialect; a session
// without pinned sampling still forwards them.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { bashTool, createSession, startLab, type Lab } from './helpers.js';

async function post(url: string, key: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

describe('pinned sampling refuses distribution-changing fields', () => {
  let lab: Lab;
  before(async () => {
    lab = await startLab();
  });
  after(() => lab.close());

  const chat = (extra: Record<string, unknown>) => ({
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    tools: [bashTool],
    ...extra,
  });

  test('OpenAI chat: logit_bias, json_schema, tool_choice=required, min_tokens, allowed_token_ids get a 400 in the OpenAI shape', async () => {
    const { session_id } = await createSession(lab.proxy, { sampling: { temperature: 0.7, top_p: 1, top_k: -1, min_p: 0 } });
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ logit_bias: { '42': 5 } }, /^logit_bias is not allowed/],
      [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } } }, /^json_schema is not allowed/],
      [{ tool_choice: 'required' }, /^tool_choice=required is not allowed/],
      [{ min_tokens: 5 }, /^min_tokens is not allowed/],
      [{ allowed_token_ids: [1, 2, 3] }, /^allowed_token_ids is not allowed/],
    ];
    for (const [extra, message] of cases) {
      const r = await post(`${lab.proxy.url}/v1/chat/completions`, session_id, chat(extra));
      assert.equal(r.status, 400, JSON.stringify(extra));
      assert.match(String((r.json.error as Record<string, unknown>).message), message);
    }
    const ok = await post(`${lab.proxy.url}/v1/chat/completions`, session_id, chat({ temperature: 0.1 }));
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
  });

  test("Anthropic messages: tool_choice any (required) gets a 400 in Anthropic's error shape", async () => {
    const { session_id } = await createSession(lab.proxy, { sampling: { temperature: 0.7 } });
    const r = await post(`${lab.proxy.url}/v1/messages`, session_id, {
      model: 'm',
      max_tokens: 64,
      messages: [{ role: 'user', content: 'hi' }],
      tools: [{ name: 'bash', description: 'run', input_schema: { type: 'object', properties: {} } }],
      tool_choice: { type: 'any' },
    });
    assert.equal(r.status, 400);
    assert.equal(r.json.type, 'error');
    assert.match(String((r.json.error as Record<string, unknown>).message), /^tool_choice=required is not allowed/);
  });

  test('a session without pinned sampling forwards them', async () => {
    const { session_id } = await createSession(lab.proxy);
    const r = await post(`${lab.proxy.url}/v1/chat/completions`, session_id, chat({ logit_bias: { '42': 5 } }));
    assert.equal(r.status, 200, JSON.stringify(r.json));
  });
});
