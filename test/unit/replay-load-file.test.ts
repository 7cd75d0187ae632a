// The load file of `export --format replay`: a chat-mode capture's export keeps the version 1 shape
// (requests only), and files written before token-in exports still load; a token-in capture's export
// (version 2) round-trips every field a token-in replay reads, and `replay` reads it as the capture;
// a malformed file is refused naming its line and field.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { CallRecord } from '../../src/capture/types.js';
import { LoadFileError, parseLoadFile, readLoadFile, writeLoadFile, type LoadSource } from '../../src/replay/load.js';
import { loadReplaySource, ReplaySourceError } from '../../src/replay/source.js';

const dir = mkdtempSync(join(tmpdir(), 'hl-replay-load-file-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const RENDER = {
  mode: 'proxy' as const,
  family: 'qwen3',
  kind: 'bridge' as const,
  anchor_call_id: 'a0',
  anchor_tokens: 5,
  bridge_span: [5, 8] as [number, number],
  synthesized_close: false,
  new_root_reason: null,
  full_render: { tokens: 8, common_prefix: 8, equal: true, drift_tokens: 0 },
  tool_call_parse: 'none' as const,
  tool_call_statuses: [],
  engine_route: '/v1/completions',
  tokens_digest: 'ab'.repeat(32),
};

/** A stored call; `tokenIn` gives it the render info and token data of a token-in capture. */
function call(index: number, tokenIn: boolean, startedMs: number): CallRecord {
  const prompt = [1, 2, 3, 4, 5, 6, 7, 8].map((v) => v + index);
  return {
    call_id: `c${index}`,
    session_id: 's',
    index,
    dialect: 'openai_chat',
    path: '/v1/chat/completions',
    stream: index % 2 === 0,
    started_at: new Date(Date.UTC(2026, 11, 3, 2, 0, 0) + startedMs).toISOString(),
    ended_at: new Date(Date.UTC(2026, 11, 3, 2, 0, 1) + startedMs).toISOString(),
    latency_ms: 40 + index,
    harness_session_id: null,
    request: { headers: {}, body: {} },
    engine_url: 'http://127.0.0.1:1',
    engine_request: { model: 'tiny', messages: [{ role: 'user', content: `turn ${index}` }] },
    engine_response: { choices: [{ index: 0, message: { role: 'assistant', content: `answer ${index}` }, finish_reason: 'stop' }] },
    response_body: {},
    model: 'tiny',
    finish_reason: 'stop',
    usage: { prompt_tokens: prompt.length, completion_tokens: 3, total_tokens: prompt.length + 3 },
    n_tools: 0,
    requested_sampling_params: { temperature: 0.3 },
    sampling_params: { temperature: 1, seed: 7 },
    findings: [],
    error: null,
    prompt_token_ids: prompt,
    completion_token_ids: [40, 41, 42],
    logprobs: [-0.5, -1, -0.25],
    top_logprobs: [40, 41, 42].map((id) => [{ token_id: id, token: `token_id:${id}`, logprob: -0.1 }]),
    token_bytes: [[97], [98], null],
    ...(tokenIn ? { render: { ...RENDER, anchor_call_id: index ? `c${index - 1}` : null } } : {}),
  } as unknown as CallRecord;
}

function rollout(id: string, tokenIn: boolean, offsetMs: number): LoadSource {
  return {
    rollout_id: id,
    file: `/captures/${id}.jsonl`,
    calls: [0, 1, 2].map((i) => call(i, tokenIn, offsetMs + i * 1000)),
    session_id: `session-${id}`,
    metadata: { task: 'examples/hello-file', harness: 'react', sandbox: 'local' },
    capture_level: 'tokens',
    reward: 1,
  };
}

const lines = (file: string) =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);

test("a chat-mode capture's export is the version 1 shape: requests only, no records", () => {
  const file = join(dir, 'chat.jsonl');
  const written = writeLoadFile(file, [rollout('r1', false, 0)]);
  assert.deepEqual(written, { requests: 3, span_ms: 2000, replayable: 0 });
  const [header, ...rows] = lines(file);
  assert.deepEqual(Object.keys(header!).sort(), ['created_at', 'format', 'n_requests', 'sources', 'span_ms', 'version']);
  assert.equal(header!.version, 1);
  for (const row of rows)
    assert.deepEqual(Object.keys(row).sort(), ['index', 'n_prompt', 'n_sampled', 'recorded_latency_ms', 'request', 'rollout_id', 't_ms']);
  const loaded = readLoadFile(file);
  assert.equal(loaded.version, 1);
  assert.deepEqual(loaded.replay, []);
  assert.deepEqual(
    loaded.requests.map((r) => [r.t_ms, r.index, r.n_prompt, r.n_sampled]),
    [
      [0, 0, 8, 3],
      [1000, 1, 8, 3],
      [2000, 2, 8, 3],
    ],
  );
});

test('a load file written before token-in exports (version 1) still loads, and replay says what it lacks', () => {
  const file = join(dir, 'old.jsonl');
  const request = { model: 'tiny', messages: [{ role: 'user', content: 'hi' }] };
  writeFileSync(
    file,
    [
      {
        format: 'harness-lab-replay-load',
        version: 1,
        created_at: '2026-12-01T00:00:00Z',
        n_requests: 2,
        span_ms: 5,
        sources: ['/a.jsonl'],
      },
      { t_ms: 0, rollout_id: 'a', index: 0, recorded_latency_ms: 10, n_prompt: 9, n_sampled: 4, request },
      { t_ms: 5, rollout_id: 'a', index: 1, recorded_latency_ms: 12, n_prompt: null, n_sampled: null, request },
    ]
      .map((l) => JSON.stringify(l))
      .join('\n') + '\n',
  );
  const loaded = readLoadFile(file);
  assert.equal(loaded.version, 1);
  assert.equal(loaded.span_ms, 5);
  assert.deepEqual(
    loaded.requests.map((r) => [r.rollout_id, r.index, r.n_sampled, r.record]),
    [
      ['a', 0, 4, undefined],
      ['a', 1, null, undefined],
    ],
  );
  assert.throws(
    () => loadReplaySource(file),
    (err: Error) => {
      assert.ok(err instanceof ReplaySourceError);
      assert.match(err.message, /rollout 'a' was captured in chat mode, and a load file keeps only the requests/);
      return true;
    },
  );
});

test("a token-in capture's export round-trips every field its replay reads, and replay reads it as the capture", () => {
  const file = join(dir, 'token-in.jsonl');
  const source = rollout('r1', true, 0);
  assert.equal(writeLoadFile(file, [source]).replayable, 1);
  const loaded = readLoadFile(file);
  assert.equal(loaded.version, 2);
  assert.deepEqual(loaded.replay, [
    {
      rollout_id: 'r1',
      session_id: 'session-r1',
      file: '/captures/r1.jsonl',
      metadata: source.metadata,
      capture_level: 'tokens',
      reward: 1,
      n_calls: 3,
    },
  ]);
  const replay = loadReplaySource(file);
  assert.equal(replay.path, file);
  assert.equal(replay.session_id, 'session-r1');
  assert.deepEqual(replay.metadata, source.metadata);
  assert.equal(replay.capture_level, 'tokens');
  assert.equal(replay.reward, 1);
  assert.equal(replay.model, 'tiny');
  assert.equal(replay.token_route, '/v1/completions');
  assert.equal(replay.calls.length, 3);
  for (const [i, c] of replay.calls.entries()) {
    const o = JSON.parse(JSON.stringify(source.calls[i])) as CallRecord;
    for (const field of [
      'call_id',
      'index',
      'dialect',
      'path',
      'stream',
      'started_at',
      'latency_ms',
      'engine_request',
      'engine_response',
      'requested_sampling_params',
      'sampling_params',
      'finish_reason',
      'error',
      'prompt_token_ids',
      'completion_token_ids',
      'logprobs',
      'top_logprobs',
      'token_bytes',
      'render',
    ] as const)
      assert.deepEqual(c[field], o[field], `call ${i}: ${field}`);
  }
  // The load test reads the same file: every line is still a request to re-issue.
  assert.deepEqual(
    loaded.requests.map((r) => r.request),
    source.calls.map((c) => c.engine_request),
  );
});

test('a file of several rollouts: --rollout picks a token-in one; a chat-mode one is refused with the reason', () => {
  const file = join(dir, 'mixed.jsonl');
  writeLoadFile(file, [rollout('r1', true, 0), rollout('r2', true, 500), rollout('r3', false, 700)]);
  const loaded = readLoadFile(file);
  assert.deepEqual(
    loaded.replay.map((r) => r.rollout_id),
    ['r1', 'r2'],
  );
  assert.equal(loaded.requests.filter((r) => r.record).length, 6);
  assert.throws(() => loadReplaySource(file), /holds 2 replayable rollouts \(r1, r2\); pick one with --rollout ID/);
  const r2 = loadReplaySource(file, { rollout: 'r2' });
  assert.equal(r2.session_id, 'session-r2');
  assert.deepEqual(
    r2.calls.map((c) => c.index),
    [0, 1, 2],
  );
  assert.throws(() => loadReplaySource(file, { rollout: 'r3' }), /rollout 'r3' was captured in chat mode/);
  assert.throws(() => loadReplaySource(file, { rollout: 'r9' }), /holds no rollout 'r9' \(it holds r1, r2, r3\)/);
});

/** A token-in export with one line or the header changed by `edit`; returns the loader's error. */
function loadEdited(edit: (rows: Record<string, unknown>[]) => void): string {
  const file = join(dir, 'edited.jsonl');
  writeLoadFile(file, [rollout('r1', true, 0)]);
  const rows = lines(file);
  edit(rows);
  const text = rows.map((l) => JSON.stringify(l)).join('\n') + '\n';
  try {
    parseLoadFile(text, 'edited.jsonl');
  } catch (err) {
    assert.ok(err instanceof LoadFileError, String(err));
    return err.message;
  }
  assert.fail('the edited file loaded');
}

const record = (rows: Record<string, unknown>[], line: number) => rows[line]!.record as Record<string, unknown>;

test('a malformed load file is refused naming the line and the field', () => {
  assert.match(
    loadEdited((rows) => ((record(rows, 2).prompt_token_ids as number[])[3] = -1)),
    /^edited\.jsonl:3: record\.prompt_token_ids\[3\]: /,
  );
  assert.match(
    loadEdited((rows) => delete (record(rows, 1).render as Record<string, unknown>).engine_route),
    /^edited\.jsonl:2: record\.render\.engine_route: /,
  );
  assert.match(
    loadEdited((rows) => ((record(rows, 1).render as Record<string, unknown>).mode = 'engine')),
    /^edited\.jsonl:2: record\.render\.mode: /,
  );
  assert.match(
    loadEdited((rows) => (record(rows, 3).logprobs = [-1])),
    /^edited\.jsonl:4: record\.logprobs: 1 logprob\(s\) for 3 sampled id\(s\)/,
  );
  assert.match(
    loadEdited((rows) => ((record(rows, 2).render as Record<string, unknown>).bridge_span = [5, 99])),
    /^edited\.jsonl:3: record\.render\.bridge_span: \[5, 99\] is not inside the prompt ids/,
  );
  assert.match(
    loadEdited((rows) => delete rows[2]!.record),
    /^edited\.jsonl:3: record: missing \(rollout 'r1' was exported for replay/,
  );
  assert.match(
    loadEdited((rows) => delete rows[0]!.replay),
    /^edited\.jsonl:1: replay load file header: replay: /,
  );
  assert.match(
    loadEdited((rows) => (rows[0]!.version = 3)),
    /^edited\.jsonl:1: replay load file header: version: /,
  );
  assert.match(
    loadEdited((rows) => ((rows[3]!.index as number) = 1)),
    /^edited\.jsonl:4: index: call 1 of rollout 'r1' twice/,
  );
  assert.match(
    loadEdited((rows) => rows.splice(3, 1)),
    /^edited\.jsonl:1: n_requests: the header says 3, the file holds 2/,
  );
  assert.match(
    loadEdited((rows) => {
      rows.splice(3, 1);
      rows[0]!.n_requests = 2;
    }),
    /^edited\.jsonl:1: replay\.n_calls: rollout 'r1' has 3 call\(s\) in the header, 2 line\(s\)/,
  );
  assert.match(
    loadEdited((rows) => (rows[1]!.rollout_id = 'other')),
    /^edited\.jsonl:2: rollout_id: 'other' carries a record but the header's replay list does not name it/,
  );
});

test('replay names the field of a malformed export, in its own error', () => {
  const file = join(dir, 'bad-for-replay.jsonl');
  writeLoadFile(file, [rollout('r1', true, 0)]);
  const rows = lines(file);
  (record(rows, 1).completion_token_ids as unknown[])[0] = 'x';
  writeFileSync(file, rows.map((l) => JSON.stringify(l)).join('\n') + '\n');
  assert.throws(
    () => loadReplaySource(file),
    (err: Error) => err instanceof ReplaySourceError && /bad-for-replay\.jsonl:2: record\.completion_token_ids\[0\]: /.test(err.message),
  );
});
