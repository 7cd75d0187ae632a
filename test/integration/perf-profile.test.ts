// The bench's perf recording against a real process: a node child that does nothing but JSON work
// is found spending its CPU in JSON, on its main thread. Only what does not depend on the machine's
// load is asserted: how much of the time lands in the kernel (scheduling, page faults) grows with
// the load, so shares are compared among the process's own user-space work, never against a number.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { perfUnavailable, recordPerf } from '../../bench/perf-profile.js';

const dir = mkdtempSync(join(tmpdir(), 'hl-perf-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('recordPerf: a busy JSON loop is charged to json on the main thread', async () => {
  const missing = perfUnavailable();
  if (missing) assert.fail(`perf cannot run here: ${missing} (scripts/provision.ts installs it)`);
  // 4,000 ids: each parse's array stays in V8's young generation. With 50,000 (a 400 KB array, on
  // pages of its own) a machine whose page faults are slow charged more to V8's allocation code than
  // to the parser (measured: 'other-native' first on a paravirtualised host), so the test measured
  // the machine, not the categories.
  const busy =
    "const t = JSON.stringify({ ids: Array.from({ length: 4000 }, (_, i) => i) }); process.stdout.write('go\\n'); for (;;) JSON.parse(t);";
  const child = spawn(process.execPath, ['--perf-basic-prof', '-e', busy], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
    const recording = recordPerf(child.pid!, join(dir, 'busy.perf.data'));
    await new Promise((r) => setTimeout(r, 1500));
    const b = await recording.stop();
    assert.ok(b.samples_pct > 99, `percentages add up (${b.samples_pct})`);
    const user = Object.entries(b.main).filter(([k]) => k !== 'kernel');
    const [largest] = user.sort((x, y) => y[1] - x[1])[0] ?? ['none'];
    assert.equal(largest, 'json', `JSON.parse is the main thread's largest user-space category: ${JSON.stringify(b.main)}`);
    assert.ok(
      b.top.some((t) => /JsonParser/.test(t.symbol)),
      JSON.stringify(b.top),
    );
  } finally {
    child.kill('SIGKILL');
  }
});
