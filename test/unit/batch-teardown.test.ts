// Teardown and delete of a batch from its directory (src/batch/teardown.ts) with a recording backend
// module: everything the batch left is asked to go (finished or not), a batch a lab runs is refused,
// delete keeps the directory when its backend cannot be reached (unless forced); when a lab tears down
// after a run; the Batches view's menu per lab state; Export Batch's choices and report.
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { BackendModule } from '../../src/batch/backend.js';
import { labPaths } from '../../src/batch/lock.js';
import { planBatch, writeBatch } from '../../src/batch/plan.js';
import type { BatchManifest } from '../../src/batch/state.js';
import { BatchRunningError, deleteBatch, tearDownAfterRun, teardownBatch } from '../../src/batch/teardown.js';
import { batchContextValue } from '../../src/extension/batches-model.js';
import {
  defaultExportFile,
  exportArgs,
  exportSummary,
  findLocalExports,
  readExportManifest,
} from '../../src/extension/export-batch-model.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');

function batch(): string {
  const root = mkdtempSync(join(tmpdir(), 'hl-teardown-'));
  cpSync(join(EXAMPLES, 'hello-file'), join(root, 'tasks', 'hello-file'), { recursive: true });
  const plan = planBatch({
    tasks: [join(root, 'tasks')],
    harnesses: ['react'],
    groupSize: 2,
    backend: 'k8s',
    engineUrl: 'http://vllm.ml.svc:8000/v1',
    model: 'm',
    outDir: join(root, 'batches', 'b1'),
    checkInstalled: false,
    k8s: { context: 'double', namespace: 'rl' },
  });
  writeBatch(plan);
  return plan.dir;
}

function recorder(fail?: Error): { module: BackendModule; calls: { batchId: string; finished: boolean | undefined }[] } {
  const calls: { batchId: string; finished: boolean | undefined }[] = [];
  return {
    calls,
    module: {
      open: () => Promise.reject(new Error('not used')),
      cleanup: async (m: BatchManifest, _log, opts) => {
        calls.push({ batchId: m.batch_id, finished: opts?.finished });
        if (fail) throw fail;
        return ['ro-1', 'ro-2'];
      },
    },
  };
}

test('teardown asks the backend to remove everything the batch left (its proxy too), finished or not', async () => {
  const dir = batch();
  const r = recorder();
  const t = await teardownBatch(dir, { module: r.module });
  assert.deepEqual([t.backend, t.removed, t.finished], ['k8s', ['ro-1', 'ro-2'], false]);
  assert.deepEqual(
    r.calls.map((c) => c.finished),
    [true],
    'the proxy, Secret, Service and ConfigMaps go too',
  );
});

test('a batch a lab runs is neither torn down nor deleted', async () => {
  const dir = batch();
  writeFileSync(
    labPaths(dir).lock,
    JSON.stringify({ pid: process.pid, host: hostname(), started_at: new Date().toISOString(), command: 'batch resume' }),
  );
  const r = recorder();
  await assert.rejects(
    teardownBatch(dir, { module: r.module }),
    (e: Error) => e instanceof BatchRunningError && /being run by lab pid \d+; cancel it before you tear it down/.test(e.message),
  );
  await assert.rejects(deleteBatch(dir, { module: r.module }), /cancel it before you delete it/);
  assert.equal(r.calls.length, 0);
  assert.ok(existsSync(dir));
});

test('delete tears down then removes the directory; an unreachable backend keeps it unless forced', async () => {
  const a = batch();
  assert.equal((await deleteBatch(a, { module: recorder().module }))?.removed.length, 2);
  assert.ok(!existsSync(a));
  const b = batch();
  const down = recorder(new Error('kube context "double" is unreachable'));
  await assert.rejects(deleteBatch(b, { module: down.module }), /directory is kept .*unreachable.*--force/);
  assert.ok(existsSync(b));
  const lines: string[] = [];
  assert.equal(await deleteBatch(b, { module: down.module, force: true, log: (l) => lines.push(l) }), null);
  assert.ok(!existsSync(b));
  assert.match(lines.join('\n'), /deleting its directory anyway/);
});

test('a lab tears down only a batch it ran to the end, and not when asked to keep it', () => {
  assert.equal(tearDownAfterRun({ stopped: null, queued: 0 }, false), true);
  assert.equal(tearDownAfterRun({ stopped: null, queued: 0 }, true), false);
  assert.equal(tearDownAfterRun({ stopped: 'cancelled', queued: 2 }, false), false);
  assert.equal(tearDownAfterRun({ stopped: 'interrupted', queued: 0 }, false), false);
  assert.equal(tearDownAfterRun({ stopped: null, queued: 1 }, false), false);
});

test("the batch row's menu: Cancel while running, Resume when rollouts are left, Tear Down and Delete when no lab runs it", () => {
  assert.deepEqual((['running', 'finished', 'idle', 'interrupted', 'cancelled'] as const).map(batchContextValue), [
    'harnessLab.batch.running',
    'harnessLab.batch',
    'harnessLab.batch.unfinished',
    'harnessLab.batch.unfinished',
    'harnessLab.batch.unfinished',
  ]);
});

test("Export Batch: the file beside the batch, the CLI's arguments, the kept and dropped counts from the manifest", () => {
  const dir = batch();
  const out = defaultExportFile(dir, 'b20261202-1', 'trl');
  assert.equal(out, join(dir, '..', 'b20261202-1.trl.jsonl'));
  assert.deepEqual(exportArgs(dir, 'trl', out), ['export', '--format', 'trl', '--batch', dir, '--out', out]);
  const manifest = {
    schema_version: 1,
    format: 'trl',
    file: out,
    batch: { batch_id: 'b20261202-1' },
    counts: {
      rows: 4,
      rollouts_kept: 4,
      rollouts_dropped: { infra_error: 1, timeout: 0 },
      groups_kept: 2,
      groups_dropped: { no_contrast: 1 },
      calls: 9,
      trainable_tokens: 321,
      bytes: 1000,
    },
  };
  writeFileSync(`${out}.manifest.json`, JSON.stringify(manifest));
  const m = readExportManifest(`${out}.manifest.json`);
  assert.equal(
    exportSummary(m, 'TRL'),
    '4 TRL row(s) from 4 rollout(s) in 2 group(s), 321 trainable tokens; dropped rollouts: 1 infra_error; dropped groups: 1 no_contrast',
  );
  assert.deepEqual(findLocalExports([join(dir, '..')]), [
    { file: out, manifest: `${out}.manifest.json`, format: 'trl', batchId: 'b20261202-1', rows: 4 },
  ]);
  writeFileSync(`${out}.bad.manifest.json`, '{"format": 1}');
  assert.throws(() => readExportManifest(`${out}.bad.manifest.json`), /is not an export manifest/);
  assert.equal(findLocalExports([join(dir, '..')]).length, 1, 'a file that is no export manifest is skipped');
});
