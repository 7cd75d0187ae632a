import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { RunSummary } from '../../src/training/trainer-jobs.js';
import { age, errorNode, runNodes, statusText } from '../../src/extension/training-runs-model.js';

const now = Date.parse('2026-12-01T12:00:00Z');
const run = (over: Partial<RunSummary>): RunSummary => ({ name: 'r', trainer: 'trl', kind: 'TrainJob', phase: 'Running', detail: '', created: '2026-12-01T11:55:00Z', namespace: 'rl', ...over });

test('age is kubectl-style and coarse', () => {
  assert.deepEqual(['2026-12-01T11:59:30Z', '2026-12-01T11:30:00Z', '2026-12-01T06:00:00Z', '2026-11-25T12:00:00Z'].map((c) => age(c, now)), ['30s', '30m', '6h', '6d']);
  assert.equal(age(undefined, now), '');
});

test('runs become nodes with trainer, phase and age; finished runs get their own contextValue', () => {
  const nodes = runNodes([run({ name: 'verl-1', trainer: 'verl', kind: 'RayJob', detail: 'job RUNNING' }), run({ name: 'trl-1', phase: 'Failed', detail: 'Failed (OOM)' })], now, { context: 'c', namespace: 'rl' });
  assert.deepEqual(nodes.map((n) => [n.label, n.kind === 'run' ? n.description : '', n.icon, n.kind === 'run' ? n.contextValue : '']), [
    ['verl-1', 'verl · Running · 5m', 'sync~spin', 'harnessLab.trainingRun'],
    ['trl-1', 'trl · Failed · 5m', 'error', 'harnessLab.trainingRun.finished'],
  ]);
  assert.match(nodes[0]!.tooltip, /RayJob rl\/verl-1\ntrainer: verl\nphase: Running \(job RUNNING\)/);
  assert.equal(new Set(nodes.map((n) => n.id)).size, 2);
});

test('no runs and errors are one message node', () => {
  assert.deepEqual(runNodes([], now, { context: 'double', namespace: 'rl' }).map((n) => [n.kind, n.label]), [['message', 'No training runs in rl (double)']]);
  assert.equal(errorNode('kube context "x" is unreachable').tooltip, 'kube context "x" is unreachable');
});

test('status bar text while runs are followed', () => {
  assert.equal(statusText([]), undefined);
  assert.equal(statusText([{ name: 'a', phase: 'Running' }]), '$(sync) a: Running');
  assert.equal(statusText([{ name: 'a', phase: 'Running' }, { name: 'b', phase: 'Pending' }]), '$(sync) 2 training runs (1 running)');
});
