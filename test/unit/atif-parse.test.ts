import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AtifParseError, atifMessageText, joinContinuations, parseAtif, type AtifTrajectory } from '../../src/harness/atif.js';

// The reference example (harbor-and-atif.md 6.4).
export const EXAMPLE = {
  schema_version: 'ATIF-v1.7',
  session_id: '4f6c0e4e-0d1b-4a44-9e3a-2b9d8f1c7a10',
  agent: { name: 'terminus-2', version: '2.0.0', model_name: 'hosted_vllm/Qwen3.5-4B' },
  steps: [
    {
      step_id: 1,
      timestamp: '2026-10-11T10:30:00Z',
      source: 'user',
      message: 'Create a file called hello.txt with "Hello, world!" as the content.',
    },
    {
      step_id: 2,
      timestamp: '2026-10-11T10:30:04Z',
      source: 'agent',
      model_name: 'Qwen3.5-4B',
      message: 'Writing the file.',
      reasoning_content: 'A single printf is enough.',
      tool_calls: [
        {
          tool_call_id: 'call_1',
          function_name: 'bash_command',
          arguments: { keystrokes: "printf 'Hello, world!\\n' > hello.txt\n", duration: 0.1 },
        },
      ],
      observation: { results: [{ source_call_id: 'call_1', content: 'root@box:/app# ' }] },
      metrics: { prompt_tokens: 785, completion_tokens: 2, cached_tokens: 0, completion_token_ids: [1722, 310], logprobs: [-0.1, -0.05] },
      llm_call_count: 1,
    },
  ],
  final_metrics: { total_prompt_tokens: 785, total_completion_tokens: 2, total_cached_tokens: 0, total_steps: 2 },
};

const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;
// Deliberately untyped: the tests break the document in ways its type forbids.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Loose = Record<string, any>;

test('parses the reference v1.7 example from text and from a value', () => {
  const t = parseAtif(JSON.stringify(EXAMPLE));
  assert.equal(t.steps.length, 2);
  assert.equal(t.steps[1]!.metrics!.completion_tokens, 2);
  assert.deepEqual(parseAtif(EXAMPLE), t);
});

test('accepts every 1.x version, multimodal content and null optionals', () => {
  for (const v of ['ATIF-v1.0', 'ATIF-v1.4', 'ATIF-v1.7']) {
    const doc = clone(EXAMPLE);
    doc.schema_version = v;
    (doc.steps[0] as Record<string, unknown>).message = [
      { type: 'text', text: 'look: ' },
      { type: 'image', source: { media_type: 'image/png', path: 'agent/images/a.png' } },
    ];
    (doc.steps[1] as Record<string, unknown>).reasoning_content = null;
    const t = parseAtif(doc);
    assert.equal(atifMessageText(t.steps[0]!.message), 'look: [image: agent/images/a.png]');
  }
});

function rejects(mutate: (d: Loose) => void, pattern: RegExp): void {
  const doc = clone(EXAMPLE) as Loose;
  mutate(doc);
  assert.throws(
    () => parseAtif(doc, 'trajectory.json'),
    (err: unknown) => {
      assert.ok(err instanceof AtifParseError);
      assert.match(err.message, /^trajectory\.json is not a valid ATIF v1\.x trajectory: /);
      assert.match(err.message, pattern);
      return true;
    },
  );
}

test('rejects what the spec forbids, naming the path', () => {
  rejects((d) => (d.schema_version = 'ATIF-v2.0'), /schema_version/);
  rejects((d) => (d.unknown_key = 1), /unknown_key|Unrecognized/);
  rejects((d) => (d.steps[1].metrics.surprise = 1), /steps\[1\]\.metrics/);
  rejects((d) => (d.steps = []), /at least one step/);
  rejects((d) => (d.steps[1].step_id = 3), /steps\[1\]\.step_id: step_id must run without gaps: expected 2, got 3/);
  rejects((d) => (d.steps[0].metrics = { prompt_tokens: 1 }), /steps\[0\]\.metrics: only agent steps/);
  rejects((d) => (d.steps[1].observation.results[0].source_call_id = 'call_9'), /"call_9" is not a tool_call_id of this step/);
  rejects((d) => (d.steps[1].metrics.logprobs = [-1]), /1 logprobs for 2 completion_token_ids/);
  rejects((d) => (d.steps[1].source = 'robot'), /steps\[1\]\.source/);
  rejects((d) => (d.steps[1].metrics.completion_tokens = -1), /completion_tokens/);
  rejects((d) => delete d.agent.version, /agent\.version/);
  rejects((d) => (d.subagent_trajectories = [clone(EXAMPLE)]), /trajectory_id/);
  rejects((d) => (d.steps[1].observation.results[0].subagent_trajectory_ref = [{ session_id: 'x' }]), /trajectory_id or trajectory_path/);
});

test('embedded subagents with a trajectory_id parse recursively', () => {
  const doc = clone(EXAMPLE) as Loose;
  doc.subagent_trajectories = [{ ...clone(EXAMPLE), trajectory_id: 'sub-1' }];
  const t = parseAtif(doc);
  assert.equal(t.subagent_trajectories![0]!.trajectory_id, 'sub-1');
});

test('bad JSON is reported as such', () => {
  assert.throws(() => parseAtif('{"schema_version":', 'x.json'), /x\.json: not JSON/);
});

test('continuations are joined and renumbered', async () => {
  const first = parseAtif({ ...clone(EXAMPLE), continued_trajectory_ref: 'trajectory.cont-1.json' });
  const cont = { ...clone(EXAMPLE), steps: clone(EXAMPLE.steps).map((s, i) => ({ ...s, step_id: 3 + i })) };
  const files: Record<string, AtifTrajectory> = { 'trajectory.cont-1.json': parseAtif(cont) };
  const joined = await joinContinuations(first, async (ref) => files[ref] ?? null);
  assert.deepEqual(
    joined.steps.map((s) => s.step_id),
    [1, 2, 3, 4],
  );
  assert.equal(joined.continued_trajectory_ref, null);
});
