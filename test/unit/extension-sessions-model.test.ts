import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CallRecord } from '../../src/capture/types.js';
import {
  SessionsTreeModel,
  callCaptureLevel,
  callNode,
  formatLatency,
  sessionNode,
  type SessionRow,
  type SessionSource,
} from '../../src/extension/sessions-model.js';
import { call } from './rollout-fixtures.js';

function rec(overrides: Partial<CallRecord> & { id: string; index: number }): CallRecord {
  return { ...call({ id: overrides.id, index: overrides.index, prompt: [1, 2, 3], sampled: [4, 5] }), ...overrides };
}

test('capture level: ids with aligned logprobs are tokens; logprobs alone; else text', () => {
  assert.equal(callCaptureLevel({ prompt_token_ids: [1], completion_token_ids: [2, 3], logprobs: [-1, -2] }), 'tokens');
  assert.equal(
    callCaptureLevel({ prompt_token_ids: [1], completion_token_ids: [2, 3], logprobs: [-1] }),
    'logprobs',
    'misaligned logprobs are not trainable',
  );
  assert.equal(callCaptureLevel({ prompt_token_ids: null, completion_token_ids: null, logprobs: [-1] }), 'logprobs');
  assert.equal(callCaptureLevel({ prompt_token_ids: [1], completion_token_ids: [2], logprobs: null }), 'text');
  assert.equal(callCaptureLevel({ prompt_token_ids: null, completion_token_ids: null, logprobs: [] }), 'text');
});

test('latency formatting', () => {
  assert.equal(formatLatency(0), '0 ms');
  assert.equal(formatLatency(999.6), '1000 ms');
  assert.equal(formatLatency(1234), '1.23 s');
  assert.equal(formatLatency(12_345), '12.3 s');
  assert.equal(formatLatency(125_000), '2 m 5 s');
  assert.equal(formatLatency(-1), '?');
  assert.equal(formatLatency(Number.NaN), '?');
});

test('a call row shows dialect, status, prompt/completion tokens, latency and capture level', () => {
  const node = callNode(
    rec({
      id: 'abc',
      index: 2,
      dialect: 'anthropic_messages',
      latency_ms: 42,
      usage: { prompt_tokens: 30, completion_tokens: 7, total_tokens: 37 },
    }),
  );
  assert.equal(node.label, '#2 anthropic_messages');
  assert.equal(node.description, 'stop · 30→7 tok · 42 ms · tokens', 'usage wins over id counts');
  assert.equal(node.status, 'ok');
  assert.equal(node.contextValue, 'harnessLab.call');
  assert.match(node.tooltip, /Dialect: anthropic_messages/);
  const noUsage = callNode(rec({ id: 'd', index: 0 }));
  assert.match(noUsage.description, /3→2 tok/, 'falls back to the token id counts');
});

test('a failed call shows its status and kind, and its message in the tooltip', () => {
  const node = callNode(
    rec({
      id: 'e',
      index: 0,
      error: { status: 502, message: 'engine down', kind: 'engine' },
      prompt_token_ids: null,
      completion_token_ids: null,
      logprobs: null,
      usage: null,
      finish_reason: null,
    }),
  );
  assert.equal(node.status, 'error');
  assert.equal(node.description, '502 engine · 1.00 s');
  assert.match(node.tooltip, /engine down/);
});

test('session rows: newest first, label from metadata, counts failed calls', () => {
  const sessions: SessionRow[] = [
    { session_id: 'old', created_at: '2026-01-01T00:00:00.000Z', n_calls: 0 },
    { session_id: 'new', created_at: '2026-01-02T10:11:12.000Z', n_calls: 2, metadata: { label: 'my run' } },
  ];
  const calls: Record<string, CallRecord[]> = {
    new: [
      rec({ id: 'b', index: 1, session_id: 'new' }),
      rec({ id: 'a', index: 0, session_id: 'new', error: { status: 400, message: 'bad', kind: 'client' } }),
    ],
  };
  const source: SessionSource = { listSessions: () => sessions, getCalls: (id) => calls[id] ?? [] };
  const model = new SessionsTreeModel(() => source);
  const roots = model.roots();
  assert.deepEqual(
    roots.map((r) => r.sessionId),
    ['new', 'old'],
  );
  assert.equal(roots[0]!.label, 'my run');
  assert.equal(roots[0]!.description, '2 calls · 1 failed · 10:11:12');
  assert.equal(roots[1]!.description, '0 calls · 00:00:00');
  const children = model.children(roots[0]);
  assert.deepEqual(
    children.map((c) => c.label),
    ['#0 openai_chat', '#1 openai_chat'],
    'calls in arrival order',
  );
  assert.deepEqual(model.children(children[0]), []);
  assert.equal(model.parentOf(children[0]!)?.sessionId, 'new');
  assert.equal(sessionNode({ session_id: 'x', created_at: 'not a date', n_calls: 1 }).description, '1 call · not a date');
});

test('no source (nothing to show yet) gives an empty tree, so the welcome content appears', () => {
  const model = new SessionsTreeModel(() => undefined);
  assert.deepEqual(model.roots(), []);
});

test("a session says where it came from: a run's harness and task, a captured terminal, a VS Code session", () => {
  const at = '2026-01-01T10:11:12.000Z';
  assert.equal(
    sessionNode({ session_id: 'r', created_at: at, n_calls: 2, metadata: { harness: 'react', task: 'harness-lab/hello-file' } })
      .description,
    'react on hello-file · 2 calls · 10:11:12',
  );
  assert.equal(
    sessionNode({ session_id: 't', created_at: at, n_calls: 0, metadata: { source: 'terminal' } }).description,
    'captured terminal · 0 calls · 10:11:12',
  );
  assert.equal(
    sessionNode({ session_id: 'v', created_at: at, n_calls: 1, metadata: { source: 'vscode' } }).description,
    'VS Code session · 1 call · 10:11:12',
  );
  assert.match(sessionNode({ session_id: 'r', created_at: at, n_calls: 2, metadata: { harness: 'codex' } }).tooltip, /From codex/);
});
