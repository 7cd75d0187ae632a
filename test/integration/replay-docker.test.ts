// Every registry harness's replay fixture (test/fixtures/replay/, recorded in Docker by
// scripts/record-replay-fixtures.ts) replays in a fresh Docker sandbox with no engine: same reward, the
// same recorded calls in the same order, no call without a match, twice in a row with the same result.
// A harness that now sends something else fails here with the field and a diff. Then the CLI: a
// record whose system prompt differs halts at call 0 naming the field; a changed tool result is reported.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { after, test } from 'node:test';
import { harnessNames } from '../../src/harness/registry.js';
import { formatDifference } from '../../src/replay/match.js';
import { formatReplayReport, runReplay, type ReplayReport } from '../../src/replay/replay-run.js';
import { loadReplaySource } from '../../src/replay/source.js';

const FIXTURES = join(__dirname, '..', 'fixtures', 'replay');
const out = mkdtempSync(join(tmpdir(), 'hl-replay-docker-'));
after(() => rmSync(out, { recursive: true, force: true }));

/**
 * What must be the same between two replays of one fixture. Exact and tolerated count alike: noise
 * such as a pid can happen to repeat the recorded value in one run (exact) and not in the next.
 */
const outcome = (r: ReplayReport) => ({
  ok: r.ok,
  reward: r.reward,
  halt: r.halt,
  unasked: r.unasked,
  // By the recorded call each matched: calls a harness makes at once (opencode's title and its first
  // turn) reach the replay engine in either order, so arrival order differs between runs on a busy host.
  calls: r.calls
    .map((c) => ({ matched: c.level !== 'none', recorded: c.recorded_index, tool_outputs: c.tool_outputs.map((d) => d.path) }))
    .sort((a, b) => (a.recorded ?? -1) - (b.recorded ?? -1)),
});

test('there is a replay fixture for every registry harness', () => {
  const have = readdirSync(FIXTURES)
    .filter((f) => f.endsWith('.replay.json.gz'))
    .map((f) => f.replace('.replay.json.gz', ''));
  assert.deepEqual(have.sort(), [...harnessNames()].sort());
});

for (const harness of harnessNames()) {
  test(`${harness}: its fixture replays in Docker to the same reward and call sequence, twice the same`, async () => {
    const source = loadReplaySource(join(FIXTURES, `${harness}.replay.json.gz`));
    const runs: ReplayReport[] = [];
    for (let i = 0; i < 2; i++)
      runs.push(await runReplay({ source, sandbox: 'docker', outDir: join(out, `${harness}-${i}`), handleSignals: false }));
    const [first, second] = runs as [ReplayReport, ReplayReport];
    const why = formatReplayReport(first) + (first.halt?.difference ? `\n${formatDifference(first.halt.difference)}` : '');
    assert.equal(first.halt, null, why);
    assert.equal(first.counts.none, 0, why);
    assert.equal(first.status, 'ok', why);
    assert.equal(first.reward, source.reward, why);
    assert.deepEqual(first.unasked, [], why);
    assert.deepEqual(first.calls.map((c) => c.recorded_index).sort(), source.calls.map((c) => c.index).sort(), why);
    // What is not exact is run-to-run noise a rule names (a date, a uuid, a pid), never unexplained.
    for (const c of first.calls)
      for (const d of c.tolerated) assert.ok(d.rules?.length, `${harness} call ${c.position}: ${d.path} tolerated without a rule`);
    assert.ok(first.ok, why);
    assert.deepEqual(outcome(second), outcome(first));
  });
}

const CLI = ['--import', 'tsx', 'src/cli/main.ts', 'replay'];

function tamperedFixture(
  name: string,
  edit: (fixture: { calls: { engine_request: { messages: { role: string; content: unknown }[] } }[] }) => void,
): string {
  const fixture = JSON.parse(gunzipSync(readFileSync(join(FIXTURES, 'react.replay.json.gz'))).toString('utf8'));
  edit(fixture);
  const file = join(out, `${name}.replay.json.gz`);
  writeFileSync(file, gzipSync(JSON.stringify(fixture)));
  return file;
}

test('CLI: replay of a fixture prints each call on the ladder and exits 0', () => {
  const r = spawnSync(process.execPath, [...CLI, join(FIXTURES, 'react.replay.json.gz'), '--out', join(out, 'cli-ok')], {
    encoding: 'utf8',
  });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /call 0: exact <- recorded call 0\n {2}call 1: exact <- recorded call 1/);
  assert.match(r.stdout, /calls: 2 exact, 0 tolerated, 0 no match/);
  assert.match(r.stdout, /reward: 1\.00 \(original 1\.00\)\nreplay: ok/);
});

test('CLI: a record with another system prompt halts at call 0, printing the field as a diff, exit 1', () => {
  const file = tamperedFixture('system-prompt', (f) => {
    const system = f.calls[0]!.engine_request.messages[0]!;
    system.content = `${String(system.content)} Always answer in French.`;
  });
  const r = spawnSync(process.execPath, [...CLI, file, '--out', join(out, 'cli-halt')], { encoding: 'utf8' });
  assert.equal(r.status, 1, r.stdout + r.stderr);
  assert.match(r.stdout, /call 0: NO MATCH/);
  assert.match(r.stdout, /halted at call 0: first difference from recorded call 0\n {2}field messages\[0\]\.content\n/);
  assert.match(r.stdout, /- recorded: ".*Always answer in French\."/);
  assert.match(r.stdout, /replay: FAILED/);
});

test('CLI: a tool result that differs from the record is reported, and the replay goes on', () => {
  const file = tamperedFixture('tool-output', (f) => {
    const tool = f.calls[1]!.engine_request.messages.find((m) => m.role === 'tool')!;
    tool.content = 'printf: write error: No space left on device';
  });
  const r = spawnSync(process.execPath, [...CLI, file, '--out', join(out, 'cli-tool')], { encoding: 'utf8' });
  assert.match(r.stdout, /call 1: tolerated <- recorded call 1\n {6}tool output changed: messages\[\d+\]\.content/, r.stdout + r.stderr);
  assert.match(r.stdout, /1 with changed tool output/);
  assert.equal(r.status, 0, r.stdout + r.stderr);
});
