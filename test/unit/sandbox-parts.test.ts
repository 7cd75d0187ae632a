import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { noTrajectory } from '../../src/harness/atif-check.js';
import { loadTask } from '../../src/tasks/task.js';
import { containerSpec, contextHash, dockerfileBases } from '../../src/sandbox/docker.js';
import { LocalRuntime, emulateDockerfile } from '../../src/sandbox/local.js';
import { nextRolloutDir, rolloutLine, type RolloutResult } from '../../src/sandbox/rollout-runner.js';
import { shellQuote } from '../../src/harness/registry.js';
import { contractRows } from '../../src/sandbox/validate.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');

test('FROM images of a Dockerfile, build stages excluded', () => {
  assert.deepEqual(dockerfileBases('FROM harness-lab/base:bookworm\nRUN x\n'), ['harness-lab/base:bookworm']);
  assert.deepEqual(dockerfileBases('FROM --platform=linux/amd64 golang:1 AS build\nFROM build\nfrom python:3.12 as final\n'), ['golang:1', 'python:3.12']);
});

test('the task image tag follows the environment content, including the executable bit', () => {
  const dir = mkdtempSync(join(tmpdir(), 'hl-ctx-'));
  writeFileSync(join(dir, 'Dockerfile'), 'FROM harness-lab/base:bookworm\n');
  const a = contextHash(dir);
  assert.match(a, /^[0-9a-f]{12}$/);
  assert.equal(contextHash(dir), a);
  writeFileSync(join(dir, 'run.sh'), 'echo hi\n');
  const b = contextHash(dir);
  assert.notEqual(b, a);
  chmodSync(join(dir, 'run.sh'), 0o755);
  assert.notEqual(contextHash(dir), b);
});

test('container spec: labels, host networking, the task caps, /logs binds and read-only extras', () => {
  const task = loadTask(join(EXAMPLES, 'hello-file'));
  const spec = containerSpec({ task, harness: 'codex', sessionId: 'sABC', image: 'img:1', hostLogsDir: '/out/hello-file/codex/0', mounts: [{ host: '/usr/bin/node', container: '/opt/harness-lab/bin/node', readOnly: true }], env: { A: '1' } }, '/app');
  assert.deepEqual(spec.Labels, { 'harness-lab.kind': 'sandbox', 'harness-lab.session': 'sABC', 'harness-lab.task': 'hello-file', 'harness-lab.harness': 'codex', 'harness-lab.owner': `${hostname()}/${process.pid}` });
  assert.equal(spec.HostConfig?.NetworkMode, 'host');
  assert.equal(spec.HostConfig?.NanoCpus, 1e9);
  assert.equal(spec.HostConfig?.Memory, 2048 * 1024 * 1024);
  assert.deepEqual(spec.HostConfig?.Binds, ['/out/hello-file/codex/0/agent:/logs/agent', '/out/hello-file/codex/0/verifier:/logs/verifier', '/out/hello-file/codex/0/artifacts:/logs/artifacts', '/usr/bin/node:/opt/harness-lab/bin/node:ro']);
  assert.deepEqual(spec.Cmd, ['sleep', 'infinity']);
  assert.deepEqual(spec.Env, ['A=1']);
  assert.ok(!JSON.stringify(spec.Env).includes('sABC'), 'the session key is a label, never container environment');
});

test('the local sandbox emulates FROM/WORKDIR/ENV/COPY and names the line it cannot run', async () => {
  const fix = loadTask(join(EXAMPLES, 'fix-script'));
  const image = emulateDockerfile(fix);
  assert.equal(image.workdir, '/app');
  assert.deepEqual(image.copies.map((c) => c.dest), ['/app/sum.sh']);
  const out = mkdtempSync(join(tmpdir(), 'hl-local-'));
  const runtime = new LocalRuntime();
  const sandbox = await runtime.create({ task: fix, harness: 'react', sessionId: 's1', image: 'local', hostLogsDir: out, mounts: [], env: {} });
  const r = await sandbox.exec('bash sum.sh 2 3; echo "$HARNESS_LAB_WORKDIR"');
  assert.equal(r.exitCode, 0);
  assert.equal(r.output.split('\n')[0], '-1', 'the buggy script was copied into the workdir');
  assert.equal(r.output.split('\n')[1], sandbox.paths.workdir);
  const slow = await sandbox.exec('sleep 30', { timeoutMs: 200 });
  assert.equal(slow.timedOut, true);
  assert.equal(slow.exitCode, null);
  await sandbox.remove();

  const dir = join(mkdtempSync(join(tmpdir(), 'hl-task-')), 'runner');
  mkdirSync(join(dir, 'environment'), { recursive: true });
  mkdirSync(join(dir, 'tests'));
  writeFileSync(join(dir, 'instruction.md'), 'x');
  writeFileSync(join(dir, 'task.toml'), '');
  writeFileSync(join(dir, 'tests', 'test.sh'), '');
  writeFileSync(join(dir, 'environment', 'Dockerfile'), 'FROM harness-lab/base:bookworm\nWORKDIR /app\nRUN apt-get install -y jq\n');
  await assert.rejects(runtime.prepareImage(loadTask(dir)), /runner\/environment\/Dockerfile: line 3: RUN cannot run in the local sandbox .*--sandbox docker/);
});

test('shell quoting survives quotes and spaces', () => {
  assert.equal(shellQuote('plain-arg_1.txt'), 'plain-arg_1.txt');
  assert.equal(shellQuote("it's here"), "'it'\\''s here'");
  assert.equal(execFileSync('bash', ['-c', `printf %s ${shellQuote("a 'b' $HOME \"c\"")}`], { encoding: 'utf8' }), "a 'b' $HOME \"c\"");
});

test('rollout folders count up per task and harness', () => {
  const out = mkdtempSync(join(tmpdir(), 'hl-out-'));
  assert.equal(nextRolloutDir(out, 'hello-file', 'codex'), join(out, 'hello-file', 'codex', '0'));
  assert.equal(nextRolloutDir(out, 'hello-file', 'codex'), join(out, 'hello-file', 'codex', '1'));
  assert.equal(nextRolloutDir(out, 'hello-file', 'react'), join(out, 'hello-file', 'react', '0'));
});

function result(over: Partial<RolloutResult> = {}): RolloutResult {
  const call = { call_id: 'c0', index: 0, dialect: 'openai_chat', error: null, prompt_token_ids: [1, 2, 3], completion_token_ids: [4, 5], logprobs: [-0.1, -0.2], usage: null };
  return {
    task: 'hello-file',
    harness: 'react',
    sandbox: 'docker',
    session_id: 'sX',
    status: 'ok',
    reward: 1,
    reward_source: 'reward.txt',
    reward_scores: {},
    error: null,
    trainable: true,
    agent: { exit_code: 0, timed_out: false, ms: 3000, log: '/x' },
    verifier: { exit_code: 0, timed_out: false, ms: 10, env_keys: [], session_key_absent: true },
    atif: { ...noTrajectory(), verdict: 'match', ours: [2], theirs: [2], n_agent_steps: 1, summary: 'Match.' },
    atif_source: 'self',
    ms: 12_400,
    out_dir: '/x',
    rollout: {
      capture_level: 'tokens',
      calls: [call],
      graph: { nodes: [{ node_id: 'c0', index: 0, parent_id: null, root_id: 'c0', children: [], discarded: false, role: 'agent' }], roots: ['c0'], leaves: ['c0'], forks: [] },
      stats: { n_calls: 1, n_turns: 1, n_roots: 1, n_leaves: 1, n_forks: 0, n_discarded: 0, n_sequences: 1, n_trainable_sequences: 1, n_trainable_tokens: 2 },
      sequences: [{ validation: [] }],
      validation: [],
    } as unknown as RolloutResult['rollout'],
    ...over,
  };
}

test('the run line', () => {
  assert.equal(rolloutLine(result()), '[react / docker] task hello-file: ok reward=1.00 turns=1 roots=1 tokens=5 atif=match 12s');
  assert.equal(rolloutLine(result({ status: 'errored', reward: null, error: 'the agent did not finish within 4 s; the sandbox was stopped' })), '[react / docker] task hello-file: errored reward=null turns=1 roots=1 tokens=5 atif=match 12s (the agent did not finish within 4 s; the sandbox was stopped)');
});

test('the contract passes a clean record and fails each broken part on its own row', () => {
  const ok = contractRows(result());
  assert.deepEqual(ok.filter((r) => !r.ok), []);
  assert.deepEqual(ok.map((r) => r.check), ['rollout finished', 'every model call captured', 'dialect detected', 'token ids and logprobs aligned', 'graph well formed', 'ATIF cross-check', 'reward read', 'session key absent from verifier']);
  const failing = (over: Partial<RolloutResult>) => contractRows(result(over)).filter((r) => !r.ok).map((r) => r.check);
  assert.deepEqual(failing({ verifier: { exit_code: 0, timed_out: false, ms: 1, env_keys: ['OPENAI_API_KEY'], session_key_absent: false } }), ['session key absent from verifier']);
  assert.deepEqual(failing({ reward: null }), ['reward read']);
  assert.deepEqual(failing({ harness: 'codex' }), ['dialect detected']);
  assert.deepEqual(failing({ agent: { exit_code: 1, timed_out: false, ms: 1, log: '' } }), ['rollout finished']);
  assert.deepEqual(failing({ atif: { ...noTrajectory(), verdict: 'MISMATCH', n_agent_steps: 1, summary: 'MISMATCH' } }), ['ATIF cross-check']);
  assert.deepEqual(failing({ atif: noTrajectory() }), ['every model call captured', 'ATIF cross-check']);
  const doc = JSON.parse(JSON.stringify(result().rollout));
  doc.calls[0].logprobs = [-0.1];
  assert.deepEqual(failing({ rollout: doc }), ['token ids and logprobs aligned']);
  const fatal = JSON.parse(JSON.stringify(result().rollout));
  fatal.validation = ['[FATAL] degenerate_rollout: exactly 1 model call'];
  assert.deepEqual(failing({ rollout: fatal }), ['graph well formed']);
});

test('examples: every shipped task loads and carries a policy the engine accepts', async () => {
  const { ScriptedPolicy } = await import('../../src/engine/policy.js');
  for (const name of ['hello-file', 'fix-script']) {
    const t = loadTask(join(EXAMPLES, name));
    assert.ok(t.policyFile);
    ScriptedPolicy.parse(JSON.parse(readFileSync(t.policyFile, 'utf8')), t.policyFile);
  }
});

test('--engine-url without --model: the engine\'s only served model, or an error that says what to pass', async () => {
  const { startFakeEngine } = await import('../../src/engine/fake-engine.js');
  const { servedModel } = await import('../../src/capture/engine-client.js');
  const { CLI_MODEL_HINTS } = await import('../../src/sandbox/lab.js');
  const engine = await startFakeEngine({ model: 'org/served-model' });
  try {
    assert.equal(await servedModel(engine.url, CLI_MODEL_HINTS), 'org/served-model');
    assert.equal(await servedModel(`${engine.url}/v1/`, CLI_MODEL_HINTS), 'org/served-model');
  } finally {
    await engine.close();
  }
  await assert.rejects(servedModel(engine.url, CLI_MODEL_HINTS), /did not list its models .*pass --model NAME/);
});

test('a different base image id gives a different task image tag', () => {
  const dir = mkdtempSync(join(tmpdir(), 'hl-ctx-'));
  writeFileSync(join(dir, 'Dockerfile'), 'FROM harness-lab/base:bookworm\n');
  assert.equal(contextHash(dir, ['sha256:a']), contextHash(dir, ['sha256:a']));
  assert.notEqual(contextHash(dir, ['sha256:a']), contextHash(dir, ['sha256:b']));
  assert.notEqual(contextHash(dir, ['sha256:a']), contextHash(dir));
});
