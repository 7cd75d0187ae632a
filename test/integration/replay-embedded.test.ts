// Fork, verify and load replay against the embedded engine (the tiny model, CPU, no Docker: the
// reference harness in the local sandbox). The original: two scripted shell calls, then a freely
// sampled answer. A fork at call 2 with another seed shares the first two calls token for token and
// samples another third; both show side by side in the fork group view. `verify` passes on the real
// capture and fails, naming call and position, when one sampled token is changed.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CaptureProxy } from '../../src/capture/proxy.js';
import type { RolloutDocument } from '../../src/capture/rollout.js';
import { startEmbeddedEngine, type EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { buildForkGroupView } from '../../src/report/group-view.js';
import { forkMembers } from '../../src/replay/forks.js';
import { openLab } from '../../src/sandbox/lab.js';
import { runRollout } from '../../src/sandbox/rollout-runner.js';

const ROOT = join(__dirname, '..', '..');
const POLICY = join(ROOT, 'test', 'fixtures', 'replay-policies', 'two-calls-then-sample.json');
const TASK = join(ROOT, 'examples', 'tasks', 'hello-file');
const dir = mkdtempSync(join(tmpdir(), 'hl-replay-embedded-'));
/** The CLI as a child process; asynchronous, since the engine it talks to runs in this process. */
function cli(...args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts'), ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (status) => resolve({ status, stdout, stderr }));
  });
}
let engine: EmbeddedEngine;
let originalDir: string;
let original: RolloutDocument;

before(async () => {
  engine = await startEmbeddedEngine({ policy: POLICY });
  // The original capture: a proxy in front of the engine, output capped so the sampled turn stays short.
  const proxy = await CaptureProxy.start({
    engineUrl: engine.url,
    model: engine.engine.modelName,
    captureLevel: 'tokens',
    maxOutputTokens: 80,
    dataDir: join(dir, 'original', '.capture'),
  });
  const lab = await openLab({
    taskDir: TASK,
    harness: 'react',
    sandbox: 'local',
    outDir: join(dir, 'original'),
    proxy,
    model: engine.engine.modelName,
    handleSignals: false,
  });
  try {
    const result = await runRollout({ ...lab.rolloutOptions });
    assert.equal(result.status, 'ok', result.error ?? '');
    originalDir = result.out_dir;
    original = result.rollout!;
  } finally {
    await lab.close();
    await proxy.close();
  }
  assert.equal(original.calls.length, 3, 'two scripted calls and one sampled answer');
});

after(async () => {
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
});

test('replay --from 2 with another seed: the first two calls equal the original, the third differs; the fork view shows both', async () => {
  const forks = join(dir, 'forks');
  const r = await cli(
    'replay',
    originalDir,
    '--sandbox',
    'local',
    '--from',
    '2',
    '--engine-url',
    engine.url,
    '--seed',
    '7',
    '--max-tokens',
    '80',
    '--out',
    forks,
  );
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /fork of s[0-9a-f]+ from call 2/);
  assert.match(r.stdout, /call 0: exact <- recorded call 0\n {2}call 1: exact <- recorded call 1\n {2}call 2: live/);
  const found = forkMembers(originalDir, [forks]);
  assert.equal(found.forks.length, 1);
  const fork = JSON.parse(readFileSync(found.forks[0]!.rolloutFile, 'utf8')) as RolloutDocument;
  assert.deepEqual(fork.metadata.replay_of, {
    session_id: original.session_id,
    rollout: join(originalDir, 'session.rollout.json'),
    from_turn: 2,
  });
  assert.equal(fork.calls.length, 3);
  for (const i of [0, 1]) {
    assert.deepEqual(fork.calls[i]!.prompt_token_ids, original.calls[i]!.prompt_token_ids, `call ${i} prompt`);
    assert.deepEqual(fork.calls[i]!.completion_token_ids, original.calls[i]!.completion_token_ids, `call ${i} sampled`);
  }
  // Identical context, another sample.
  assert.deepEqual(fork.calls[2]!.prompt_token_ids, original.calls[2]!.prompt_token_ids);
  assert.notDeepEqual(fork.calls[2]!.completion_token_ids, original.calls[2]!.completion_token_ids);
  assert.equal(fork.calls[2]!.sampling_params.seed, 7);

  const view = buildForkGroupView(found.original, found.forks);
  assert.deepEqual(
    view.members.map((m) => m.rollout_id),
    ['original', found.forks[0]!.label],
  );
  assert.deepEqual(
    view.members.map((m) => [m.class, m.reward]),
    [
      ['completed', 1],
      ['completed', 1],
    ],
    'each member classed by its own run (not as discarded)',
  );
  assert.equal(view.divergences[0]!.call, 2);
  assert.equal(view.divergences[0]!.prompt_index, null, 'the fork parts in what was sampled, not in the prompt');
  const html = join(dir, 'forks.html');
  const report = await cli('report', originalDir, '--forks', '--forks-dir', forks, '-o', html);
  assert.equal(report.status, 0, report.stdout + report.stderr);
  assert.match(report.stdout, /the original and 1 fork\(s\) side by side; fork@2 s[0-9a-f]+ parts at call 2/);
  assert.match(readFileSync(html, 'utf8'), /forks of s[0-9a-f]+/);
});

test('verify passes on the real capture and fails on one changed sampled token, naming the call and the position', async () => {
  const ok = await cli('verify', originalDir, '--engine-url', engine.url, '-o', join(dir, 'ok.verify.json'));
  assert.equal(ok.status, 0, ok.stdout + ok.stderr);
  assert.match(ok.stdout, /verified \d+ sampled token\(s\) in 3 call\(s\)/);
  assert.match(ok.stdout, /0 token\(s\) outside tolerance, 0 prompt\(s\) refused/);
  assert.match(ok.stdout, /verify: ok/);

  const doc = JSON.parse(readFileSync(join(originalDir, 'session.rollout.json'), 'utf8')) as RolloutDocument;
  const call = doc.calls[1]!;
  const ids = call.completion_token_ids!;
  ids[2] = (ids[2]! + 1) % 1000;
  const tampered = join(dir, 'tampered.rollout.json');
  writeFileSync(tampered, JSON.stringify(doc));
  const bad = await cli('verify', tampered, '--engine-url', engine.url);
  assert.equal(bad.status, 1, bad.stdout + bad.stderr);
  assert.match(
    bad.stdout,
    new RegExp(
      `call ${call.call_id} \\(index 1\\): FAILED: \\d+ of ${ids.length} token\\(s\\) off; first at sampled position 2 \\(token ${ids[2]}\\)`,
    ),
  );
  assert.match(bad.stdout, /verify: FAILED/);
});

test('verify without --engine-url starts the embedded engine with the captured model', async () => {
  const r = await cli('verify', originalDir, '-o', join(dir, 'embedded.verify.json'));
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stderr, /starting the embedded engine \(harness-lab\/tiny-qwen3, seed 0\)/);
  assert.match(r.stdout, /verify: ok/);
});

test('verify of a greedy call generates from the recorded prompt ids, or says the engine cannot', async () => {
  const proxy = await CaptureProxy.start({
    engineUrl: engine.url,
    model: engine.engine.modelName,
    captureLevel: 'tokens',
    maxOutputTokens: 12,
    dataDir: join(dir, 'greedy'),
  });
  try {
    const { session_id: id } = proxy.sessions.create({});
    // Past the policy's scripted turns, the model answers itself: at temperature 0, its argmax.
    const history = [1, 2, 3].flatMap((n) => [
      { role: 'user', content: `step ${n}` },
      { role: 'assistant', content: `ok ${n}` },
    ]);
    const res = await fetch(`${proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${id}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', temperature: 0, messages: [...history, { role: 'user', content: 'go on' }] }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    const file = join(dir, 'greedy.rollout.json');
    writeFileSync(file, JSON.stringify(proxy.sessions.rollout(id)));
    const r = await cli('verify', file, '--engine-url', engine.url, '--json');
    const report = JSON.parse(r.stdout) as { calls: { greedy: { checked: boolean; reproduced?: boolean; reason?: string } | null }[] };
    const greedy = report.calls[0]!.greedy!;
    assert.ok(greedy, 'a temperature-0 call gets a greedy check');
    if (greedy.checked) assert.equal(greedy.reproduced, true, r.stdout);
    else assert.match(greedy.reason!, /does not generate from a token-id prompt/);
    assert.equal(r.status, greedy.checked ? 0 : 0, r.stderr);
  } finally {
    await proxy.close();
  }
});

test('export --format replay writes the captured requests with relative timing; replay-load re-issues them at 10x', async () => {
  const rollouts = join(dir, 'load-src');
  mkdirSync(rollouts);
  writeFileSync(join(rollouts, 'original.rollout.json'), readFileSync(join(originalDir, 'session.rollout.json')));
  const file = join(dir, 'load.jsonl');
  const exp = await cli('export', '--format', 'replay', '--rollouts', rollouts, '--out', file);
  assert.equal(exp.status, 0, exp.stdout + exp.stderr);
  assert.match(exp.stdout, /wrote 3 request\(s\) from 1 rollout\(s\)/);
  const lines = readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { t_ms?: number; n_sampled?: number });
  assert.equal(lines.length, 4);
  assert.equal(lines[1]!.t_ms, 0);
  assert.ok(lines[2]!.t_ms! > 0 && lines[3]!.t_ms! >= lines[2]!.t_ms!);
  const load = await cli('replay-load', file, '--engine-url', engine.url, '--speed', '10', '-o', join(dir, 'load-report.json'));
  assert.equal(load.status, 0, load.stdout + load.stderr);
  assert.match(load.stdout, /re-issued 3 request\(s\) against .* at 10x: 3 ok, 0 failed/);
  const report = JSON.parse(readFileSync(join(dir, 'load-report.json'), 'utf8')) as { results: { completion_tokens: number }[] };
  assert.deepEqual(
    report.results.map((r) => r.completion_tokens),
    lines.slice(1).map((l) => l.n_sampled),
    'each request did the recorded amount of work',
  );
});
