// `harness-lab rescore` against the embedded engine: a rollout sampled through the capture proxy by the
// tiny model (seed 0) at temperature 0.7, rescored by the same model (every ratio 1 within 1e-4) and by
// a tiny model built with another seed (measured drift). Also the engine's /v1/completions route.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CaptureProxy } from '../../src/capture/proxy.js';
import type { ChatMessage } from '../../src/capture/types.js';
import type { EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import type { RescoreReport } from '../../src/export/rescore.js';
import { post, startTestEngine } from './engine-fixture.js';
import { createSession } from './helpers.js';

const ROOT = join(__dirname, '..', '..');
let tmp: string;
let same: EmbeddedEngine;
let other: EmbeddedEngine;
let sessionFile: string;

function cli(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts'), ...argv], { cwd: ROOT });
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    p.on('close', (code) => resolve({ code: code ?? -1, out, err }));
  });
}

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'hl-rescore-'));
  same = await startTestEngine({ seed: 0 });
  other = await startTestEngine({ seed: 1 });
  const dataDir = join(tmp, 'capture');
  const proxy = await CaptureProxy.start({ engineUrl: `${same.url}/v1`, model: same.engine.modelName, dataDir });
  try {
    const { session_id } = await createSession(proxy);
    const messages: ChatMessage[] = [{ role: 'user', content: 'Say something about lines in files.' }];
    for (let turn = 0; turn < 2; turn++) {
      const res = await fetch(`${proxy.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${session_id}` },
        body: JSON.stringify({ model: 'policy', messages, temperature: 0.7, max_tokens: 24, seed: 5 + turn }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      const m = ((await res.json()) as { choices: { message: ChatMessage }[] }).choices[0]!.message;
      messages.push({ role: 'assistant', content: m.content ?? '' }, { role: 'user', content: 'And more?' });
    }
    sessionFile = join(dataDir, 'sessions', `${session_id}.jsonl`);
  } finally {
    await proxy.close();
  }
});
after(async () => {
  await same?.close();
  await other?.close();
  rmSync(tmp, { recursive: true, force: true });
});

test('the embedded engine serves prompt_logprobs on /v1/completions in vLLM shape', async () => {
  const ids = same.engine.tokenize({ prompt: 'one two three four' }).tokens;
  const r = await post(same.url, '/v1/completions', { prompt: ids, max_tokens: 1, prompt_logprobs: 2 });
  assert.equal(r.status, 200, r.text);
  const lps = (r.body as { choices: { prompt_logprobs: (Record<string, { logprob: number; rank: number }> | null)[] }[] }).choices[0]!
    .prompt_logprobs;
  assert.equal(lps.length, ids.length);
  assert.equal(lps[0], null, 'nothing predicts the first token');
  for (let i = 1; i < ids.length; i++) {
    const entry = lps[i]!;
    assert.ok(entry[String(ids[i])], `position ${i} carries its own token`);
    assert.ok(entry[String(ids[i])]!.logprob <= 0);
    assert.ok(Object.keys(entry).length >= 2 && Object.keys(entry).length <= 3, 'its token and the top 2');
  }
  const bad = await post(same.url, '/v1/completions', { prompt: [1], prompt_logprobs: 0 });
  assert.equal(bad.status, 400);
  assert.match(bad.text, /at least two token ids/);
});

test('rescore with the same weights: every ratio is 1 within 1e-4', async () => {
  const out = join(tmp, 'same.rescore.json');
  const r = await cli(['rescore', sessionFile, '--engine-url', same.url, '-o', out]);
  assert.equal(r.code, 0, r.err);
  const report = JSON.parse(readFileSync(out, 'utf8')) as RescoreReport;
  assert.equal(report.calls.length, 2);
  assert.ok(report.summary.tokens > 10, `${report.summary.tokens} tokens`);
  for (const c of report.calls) for (const ratio of c.ratio) assert.ok(Math.abs(ratio - 1) < 1e-4, `ratio ${ratio} in call ${c.call_id}`);
  assert.equal(report.summary.share_past, 0);
  assert.match(r.out, /mean ratio 1\.0000; share of tokens with \|ratio - 1\| > 0\.2: 0\.0%/);
});

test('rescore with a model built from another seed: a measured drift; the default output path', async () => {
  const r = await cli(['rescore', sessionFile, '--engine-url', other.url, '--json']);
  assert.equal(r.code, 0, r.err);
  const report = JSON.parse(r.out) as RescoreReport;
  const def = sessionFile.replace(/\.jsonl$/, '.rescore.json');
  assert.ok(existsSync(def), 'written next to the rollout');
  assert.ok(report.summary.mean_abs_log_ratio! > 0.05, `mean |log ratio| ${report.summary.mean_abs_log_ratio}`);
  assert.ok(report.summary.share_past! > 0.1, `share past ${report.summary.share_past}`);
  process.stdout.write(
    `# drift seed 0 -> seed 1: mean ratio ${report.summary.mean_ratio}, share past 0.2 ${report.summary.share_past}, mean |log ratio| ${report.summary.mean_abs_log_ratio}\n`,
  );
});

test('rescore input errors: no engine, no file, bad threshold', async () => {
  const down = await cli(['rescore', sessionFile, '--engine-url', 'http://127.0.0.1:9', '-o', join(tmp, 'x.json')]);
  assert.equal(down.code, 1);
  assert.match(down.err, /harness-lab rescore: http:\/\/127\.0\.0\.1:9\/v1\/completions: /);
  const missing = await cli(['rescore', join(tmp, 'nope.jsonl'), '--engine-url', same.url]);
  assert.equal(missing.code, 1);
  assert.match(missing.err, /nope\.jsonl: no such file/);
  const bad = await cli(['rescore', sessionFile, '--engine-url', same.url, '--threshold', 'x']);
  assert.equal(bad.code, 2);
  assert.match(bad.err, /--threshold needs a positive number/);
  const usage = await cli(['rescore', sessionFile]);
  assert.equal(usage.code, 2);
  assert.match(usage.err, /--engine-url is required/);
});
