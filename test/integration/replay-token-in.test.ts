// Replay, fork and verify of a rollout captured in token-in mode (the proxy rendered every prompt and
// the embedded engine took token ids), with the reference harness in the local sandbox. The replay
// runs token in as well: the bridge builds each prompt again, the record answers its ids, and the
// prompt ids must equal the recorded ones token for token. A record whose prompt ids were changed
// (messages untouched) halts at that call naming the position; a fork from call 2 continues on the
// live engine's token route from the same ids; verify passes on the capture and fails on one changed
// sampled token. `export --format replay` of the capture keeps what a token-in replay reads, so the
// exported load file replays token in exactly as the capture does, and a prompt id changed in it halts
// at that position too.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CaptureProxy } from '../../src/capture/proxy.js';
import type { RolloutDocument } from '../../src/capture/rollout.js';
import type { EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import type { ReplayReport } from '../../src/replay/replay-run.js';
import { openLab } from '../../src/sandbox/lab.js';
import { runRollout } from '../../src/sandbox/rollout-runner.js';
import { startTestEngine, TEST_DATA_DIR } from './engine-fixture.js';

const ROOT = join(__dirname, '..', '..');
const POLICY = join(ROOT, 'test', 'fixtures', 'replay-policies', 'two-calls-then-sample.json');
const TASK = join(ROOT, 'examples', 'tasks', 'hello-file');
const dir = mkdtempSync(join(tmpdir(), 'hl-replay-token-in-'));

/** The CLI as a child process; asynchronous, since the engine it talks to runs in this process. */
function cli(...args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts'), ...args], {
    cwd: ROOT,
    env: { ...process.env, HARNESS_LAB_DATA_DIR: TEST_DATA_DIR },
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
/** The replay of the capture itself, which the replay of its export must equal. */
let captureReplay: ReplayReport | undefined;

before(async () => {
  engine = await startTestEngine({ policy: POLICY });
  const proxy = await CaptureProxy.start({
    engineUrl: engine.url,
    model: engine.engine.modelName,
    captureLevel: 'tokens',
    maxOutputTokens: 80,
    render: 'proxy',
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
  for (const c of original.calls) assert.equal(c.render?.mode, 'proxy', `call ${c.index} was captured token in`);
  assert.equal(original.calls[1]!.render?.kind, 'bridge', 'call 1 continues call 0 on its exact tokens');
});

after(async () => {
  await engine.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A value as it reads back from JSON (the record in memory may hold undefined fields). */
const plain = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

function replayOf(out: string, report: ReplayReport): RolloutDocument {
  assert.ok(report.rollout_file.startsWith(out), report.rollout_file);
  return JSON.parse(readFileSync(report.rollout_file, 'utf8')) as RolloutDocument;
}

test('a token-in capture replays token in: every prompt the bridge builds again equals the recorded ids', async () => {
  const out = join(dir, 'replays');
  const r = await cli('replay', originalDir, '--sandbox', 'local', '--out', out, '--json');
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const report = JSON.parse(r.stdout) as ReplayReport;
  assert.deepEqual(
    report.calls.map((c) => [c.level, c.recorded_index]),
    [
      ['exact', 0],
      ['exact', 1],
      ['exact', 2],
    ],
  );
  assert.equal(report.reward, report.original.reward);
  assert.equal(report.ok, true);
  captureReplay = report;
  assertTokenInReplay(replayOf(out, report));
});

/** Every replayed call went the token route, bridged as captured, with the recorded ids, answer and digest. */
function assertTokenInReplay(replay: RolloutDocument): void {
  assert.equal(replay.calls.length, 3);
  for (const [i, c] of replay.calls.entries()) {
    const o = original.calls[i]!;
    assert.equal(c.render?.mode, 'proxy', `replayed call ${i} went through the token route`);
    assert.equal(c.render?.kind, o.render?.kind, `call ${i}: bridged as in the capture`);
    assert.deepEqual(c.render?.bridge_span, o.render?.bridge_span, `call ${i}: the same bridge`);
    assert.deepEqual(c.prompt_token_ids, o.prompt_token_ids, `call ${i}: prompt ids`);
    assert.deepEqual(c.completion_token_ids, o.completion_token_ids, `call ${i}: sampled ids`);
    assert.deepEqual(c.logprobs, o.logprobs, `call ${i}: logprobs`);
    assert.equal(c.render?.tokens_digest, o.render?.tokens_digest, `call ${i}: tokens digest`);
    // The whole render info, the anchor named by its position (call ids are the replay's own).
    const { anchor_call_id: anchor, ...render } = c.render!;
    const { anchor_call_id: originalAnchor, ...originalRender } = plain(o.render!);
    assert.deepEqual(render, originalRender, `call ${i}: render`);
    const position = (doc: RolloutDocument, id: string | null) => (id === null ? null : doc.calls.findIndex((x) => x.call_id === id));
    assert.equal(position(replay, anchor), position(original, originalAnchor), `call ${i}: anchor`);
    assert.deepEqual(c.engine_response?.choices[0]?.message, o.engine_response?.choices[0]?.message, `call ${i}: parsed answer`);
  }
}

test('a record whose prompt ids differ from what the same messages render to halts there, naming the position', async () => {
  const doc = JSON.parse(readFileSync(join(originalDir, 'session.rollout.json'), 'utf8')) as RolloutDocument;
  const ids = doc.calls[1]!.prompt_token_ids!;
  const at = ids.length - 4;
  ids[at] = ids[at] === 13 ? 14 : 13;
  const tampered = join(dir, 'tampered-prompt.rollout.json');
  writeFileSync(tampered, JSON.stringify(doc));
  const r = await cli('replay', tampered, '--sandbox', 'local', '--task', TASK, '--out', join(dir, 'tampered-replays'));
  assert.equal(r.status, 1, r.stdout + r.stderr);
  assert.match(r.stdout, /call 0: exact <- recorded call 0\n {2}call 1: NO MATCH/);
  assert.match(r.stdout, new RegExp(`halted at call 1: first difference from recorded call 1\\n {2}field prompt_token_ids\\[${at}\\]`));
  assert.match(r.stdout, new RegExp(`- recorded: "token ${ids[at]} \\\\".*\\\\" in `));
  assert.match(r.stdout, /replay: FAILED/);
});

/** The capture exported as a load file (`export --format replay` via the CLI), with its header and lines. */
async function exportCapture(): Promise<{ file: string; lines: Record<string, unknown>[] }> {
  const file = join(dir, 'token-in.load.jsonl');
  const exp = await cli('export', '--format', 'replay', '--rollouts', originalDir, '--out', file);
  assert.equal(exp.status, 0, exp.stdout + exp.stderr);
  assert.match(exp.stdout, /wrote 3 request\(s\) from 1 rollout\(s\).*\n1 rollout\(s\) captured token in, with their records/);
  const lines = readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { file, lines };
}

test('the export of a token-in capture replays token in exactly as the capture does', async () => {
  const { file, lines } = await exportCapture();
  const [header, ...calls] = lines as [Record<string, unknown>, ...{ index: number; record: Record<string, unknown> }[]];
  assert.equal(header.version, 2);
  assert.deepEqual(
    (header.replay as { session_id: string; n_calls: number; reward: number | null }[]).map((r) => [r.session_id, r.n_calls]),
    [[original.session_id, 3]],
  );
  for (const line of calls) {
    const o = original.calls[line.index]!;
    assert.deepEqual(line.record.render, plain(o.render), `line of call ${line.index}: render info`);
    assert.deepEqual(line.record.prompt_token_ids, o.prompt_token_ids, `line of call ${line.index}: prompt ids`);
  }
  const out = join(dir, 'export-replays');
  const r = await cli('replay', file, '--sandbox', 'local', '--out', out, '--json');
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const report = JSON.parse(r.stdout) as ReplayReport;
  assert.ok(captureReplay, 'the replay of the capture ran first');
  assert.deepEqual(
    report.calls.map((c) => [c.level, c.recorded_index, c.recorded_call_id, c.tolerated, c.tool_outputs]),
    captureReplay.calls.map((c) => [c.level, c.recorded_index, c.recorded_call_id, c.tolerated, c.tool_outputs]),
    'the same match ladder results as the replay of the capture',
  );
  assert.deepEqual(
    report.calls.map((c) => c.level),
    ['exact', 'exact', 'exact'],
  );
  assert.equal(report.original.session_id, original.session_id);
  assert.notEqual(captureReplay.original.reward, null, 'the capture has a verified reward');
  assert.equal(report.original.reward, captureReplay.original.reward, "the original's reward travels with the export");
  assert.equal(report.reward, report.original.reward);
  assert.equal(report.ok, true);
  assertTokenInReplay(replayOf(out, report));
  // verify reads the exported prompt and sampled ids as it reads the capture's.
  const verified = await cli('verify', file, '--engine-url', engine.url);
  assert.equal(verified.status, 0, verified.stdout + verified.stderr);
  assert.match(verified.stdout, /verified \d+ sampled token\(s\) in 3 call\(s\)/);
  // ... and it is still a load test: replay-load re-issues its chat requests.
  const load = await cli('replay-load', file, '--engine-url', engine.url, '--speed', '10');
  assert.equal(load.status, 0, load.stdout + load.stderr);
  assert.match(load.stdout, /re-issued 3 request\(s\) against .* at 10x: 3 ok, 0 failed/);
});

test('an exported load file with one prompt id changed halts at that position', async () => {
  const { lines } = await exportCapture();
  const line = lines.find((l) => l.index === 1) as { record: { prompt_token_ids: number[] } };
  const ids = line.record.prompt_token_ids;
  const at = ids.length - 4;
  ids[at] = ids[at] === 13 ? 14 : 13;
  const tampered = join(dir, 'tampered.load.jsonl');
  writeFileSync(tampered, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
  const r = await cli('replay', tampered, '--sandbox', 'local', '--out', join(dir, 'tampered-export-replays'));
  assert.equal(r.status, 1, r.stdout + r.stderr);
  assert.match(r.stdout, /call 0: exact <- recorded call 0\n {2}call 1: NO MATCH/);
  assert.match(r.stdout, new RegExp(`halted at call 1: first difference from recorded call 1\\n {2}field prompt_token_ids\\[${at}\\]`));
  assert.match(r.stdout, new RegExp(`- recorded: "token ${ids[at]} \\\\".*\\\\" in `));
  assert.match(r.stdout, /replay: FAILED/);
});

test('a fork of a token-in capture continues token in from the recorded ids on the live engine', async () => {
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
    '--json',
  );
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const report = JSON.parse(r.stdout) as ReplayReport;
  assert.deepEqual(
    report.calls.map((c) => c.level),
    ['exact', 'exact', 'live'],
  );
  const fork = replayOf(forks, report);
  assert.equal(fork.calls.length, 3);
  for (const i of [0, 1]) {
    assert.deepEqual(fork.calls[i]!.prompt_token_ids, original.calls[i]!.prompt_token_ids, `call ${i} prompt`);
    assert.deepEqual(fork.calls[i]!.completion_token_ids, original.calls[i]!.completion_token_ids, `call ${i} sampled`);
  }
  const live = fork.calls[2]!;
  assert.equal(live.render?.mode, 'proxy', 'the live call went to the engine token in');
  assert.equal(live.render?.kind, 'bridge', 'bridged onto the recorded turns');
  assert.deepEqual(live.prompt_token_ids, original.calls[2]!.prompt_token_ids, 'the same context, token for token');
  assert.notDeepEqual(live.completion_token_ids, original.calls[2]!.completion_token_ids, 'another seed, another sample');
  assert.equal(live.sampling_params.seed, 7);
});

test('verify passes on the token-in capture and fails on one changed sampled token', async () => {
  const ok = await cli('verify', originalDir, '--engine-url', engine.url);
  assert.equal(ok.status, 0, ok.stdout + ok.stderr);
  assert.match(ok.stdout, /verified \d+ sampled token\(s\) in 3 call\(s\)/);
  assert.match(ok.stdout, /verify: ok/);
  const doc = JSON.parse(readFileSync(join(originalDir, 'session.rollout.json'), 'utf8')) as RolloutDocument;
  const call = doc.calls[0]!;
  const ids = call.completion_token_ids!;
  ids[1] = (ids[1]! + 1) % 1000;
  const tampered = join(dir, 'tampered-sample.rollout.json');
  writeFileSync(tampered, JSON.stringify(doc));
  const bad = await cli('verify', tampered, '--engine-url', engine.url);
  assert.equal(bad.status, 1, bad.stdout + bad.stderr);
  assert.match(bad.stdout, new RegExp(`call ${call.call_id} \\(index 0\\): FAILED: .*first at sampled position 1`));
});
