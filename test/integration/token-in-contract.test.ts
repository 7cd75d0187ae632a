// Negative control for the training contract in token-in mode: a record as the proxy stored it passes;
// the same record with one sampled token (or one logprob, or one prompt id) changed fails, naming why.
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { Renderer } from '../../src/capture/render/renderer.js';
import type { CallRecord } from '../../src/capture/types.js';
import { startFakeEngine, type FakeEngine } from '../../src/engine/fake-engine.js';
import { ensureTinyModel } from '../../src/engine/tiny-model.js';
import { callContractProblem, checkCalls, ExportContractError } from '../../src/export/contract.js';
import { createSession } from './helpers.js';

const DATA_DIR = process.env.HARNESS_LAB_DATA_DIR ?? join(tmpdir(), 'harness-lab-test-data');
let engine: FakeEngine;
let proxy: CaptureProxy;
let record: CallRecord;
before(async () => {
  const renderer = await Renderer.load((await ensureTinyModel({ dataDir: DATA_DIR })).path);
  engine = await startFakeEngine({ renderer });
  proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, captureLevel: 'tokens', render: 'proxy' });
  const { session_id } = await createSession(proxy);
  const res = await fetch(`${proxy.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${session_id}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
  });
  assert.equal(res.status, 200);
  record = structuredClone(proxy.sessions.calls(session_id)[0]!);
});
after(async () => {
  await proxy?.close();
  await engine?.close();
});

test('a token-in record as stored passes the contract check', () => {
  assert.ok(record.render?.tokens_digest);
  assert.ok(record.completion_token_ids!.length > 3);
  assert.equal(callContractProblem(record), null);
});

test('one sampled token changed fails the contract check (and stops an export)', () => {
  const tampered = structuredClone(record);
  tampered.completion_token_ids![2] = tampered.completion_token_ids![2]! + 1;
  assert.match(callContractProblem(tampered) ?? '', /tokens_digest mismatch/);
  assert.throws(
    () => checkCalls('rollout.jsonl', tampered.session_id, [tampered]),
    (err: unknown) => err instanceof ExportContractError && err.callId === tampered.call_id,
  );
});

test('one logprob or one prompt id changed fails it too', () => {
  const lp = structuredClone(record);
  lp.logprobs![0] = lp.logprobs![0]! - 0.25;
  assert.match(callContractProblem(lp) ?? '', /tokens_digest mismatch/);
  const prompt = structuredClone(record);
  prompt.prompt_token_ids![1] = 42;
  assert.match(callContractProblem(prompt) ?? '', /tokens_digest mismatch/);
});
