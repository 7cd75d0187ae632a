import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { noTrajectory } from '../../src/harness/atif-check.js';
import { loadTask } from '../../src/tasks/task.js';
import {
  BUILD_NETWORK,
  buildNetworkFor,
  containerSpec,
  contextHash,
  dockerfileBases,
  egressNetworkSpec,
  sandboxIsolation,
} from '../../src/sandbox/docker.js';
import { bridgeNameFor } from '../../src/sandbox/egress-firewall.js';
import { MODEL_RELAY_PORT, relayCommand } from '../../src/sandbox/model-relay.js';
import { LocalRuntime, emulateDockerfile } from '../../src/sandbox/local.js';
import { nextRolloutDir, rolloutLine, type RolloutResult } from '../../src/sandbox/rollout-runner.js';
import { shellQuote } from '../../src/harness/registry.js';
import { contractRows } from '../../src/sandbox/validate.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');

test('FROM images of a Dockerfile, build stages excluded', () => {
  assert.deepEqual(dockerfileBases('FROM harness-lab/base:bookworm\nRUN x\n'), ['harness-lab/base:bookworm']);
  assert.deepEqual(dockerfileBases('FROM --platform=linux/amd64 golang:1 AS build\nFROM build\nfrom python:3.12 as final\n'), [
    'golang:1',
    'python:3.12',
  ]);
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

test('container spec: labels, no network, the relay as main process, the task caps, /logs and socket binds, read-only extras', () => {
  const task = loadTask(join(EXAMPLES, 'hello-file'));
  const sandboxSpec = {
    task,
    harness: 'codex',
    sessionId: 'sABC',
    image: 'img:1',
    hostLogsDir: '/out/hello-file/codex/0',
    mounts: [{ host: '/usr/bin/node', container: '/opt/harness-lab/bin/node', readOnly: true }],
    env: { A: '1' },
    model: { proxyUrl: 'http://127.0.0.1:1234', socketDir: '/tmp/hl-sock-x' },
  };
  assert.equal(sandboxIsolation(task), 'no-network', 'hello-file declares network_mode = "no-network"');
  const spec = containerSpec(sandboxSpec, '/app', { isolation: 'no-network' });
  assert.deepEqual(spec.Labels, {
    'harness-lab.kind': 'sandbox',
    'harness-lab.session': 'sABC',
    'harness-lab.task': 'hello-file',
    'harness-lab.harness': 'codex',
    'harness-lab.owner': `${hostname()}/${process.pid}`,
  });
  assert.equal(spec.HostConfig?.NetworkMode, 'none');
  // Every sandbox drops what a harness does not need, and cannot gain privileges (#26).
  assert.deepEqual(spec.HostConfig?.CapDrop, ['NET_RAW', 'MKNOD', 'SETFCAP', 'SETPCAP', 'SYS_CHROOT', 'AUDIT_WRITE']);
  assert.ok(
    spec.HostConfig?.SecurityOpt?.includes('no-new-privileges:true'),
    `SecurityOpt: ${JSON.stringify(spec.HostConfig?.SecurityOpt)}`,
  );
  assert.ok((spec.HostConfig?.PidsLimit ?? 0) > 0, 'a pids limit');
  assert.equal(spec.HostConfig?.NanoCpus, 1e9);
  assert.equal(spec.HostConfig?.Memory, 2048 * 1024 * 1024);
  assert.deepEqual(spec.HostConfig?.Binds, [
    '/out/hello-file/codex/0/agent:/logs/agent',
    '/out/hello-file/codex/0/verifier:/logs/verifier',
    '/out/hello-file/codex/0/artifacts:/logs/artifacts',
    '/tmp/hl-sock-x:/run/harness-lab:ro',
    '/usr/bin/node:/opt/harness-lab/bin/node:ro',
  ]);
  assert.deepEqual(spec.Cmd, relayCommand('/opt/harness-lab/bin/node'));
  assert.deepEqual(spec.Cmd?.slice(-2), ['/run/harness-lab/model.sock', String(MODEL_RELAY_PORT)]);
  assert.deepEqual(spec.Env, ['A=1']);
  const everything = JSON.stringify(spec);
  assert.ok(!everything.includes('127.0.0.1:1234'), "the proxy's own address never enters the container");
  assert.ok(
    !JSON.stringify(spec.Env).includes('sABC') && !JSON.stringify(spec.Cmd).includes('sABC'),
    'the session key is a label, never container environment or command',
  );

  const open = containerSpec({ ...sandboxSpec, mounts: [] }, '/app', { isolation: 'egress', name: 'harness-lab-abc' });
  assert.equal(open.HostConfig?.NetworkMode, 'harness-lab-abc');
  assert.ok(
    open.HostConfig?.Binds?.includes(`${process.execPath}:/opt/harness-lab/bin/node:ro`),
    "the relay's node is mounted even when the harness brings none",
  );
  const net = egressNetworkSpec('harness-lab-abc', sandboxSpec);
  assert.equal(net.Internal, false);
  assert.equal(net.Options?.['com.docker.network.bridge.enable_icc'], 'false');
  assert.equal(net.Labels?.['harness-lab.owner'], `${hostname()}/${process.pid}`);
  assert.throws(
    () => containerSpec({ ...sandboxSpec, model: { proxyUrl: 'http://127.0.0.1:1234' } }, '/app', { isolation: 'no-network' }),
    /only through a session socket/,
  );
  assert.equal(sandboxIsolation(loadTask(join(EXAMPLES, 'fix-script'))), 'egress', 'allow_internet = true');
  assert.equal(
    sandboxIsolation({ ...task, agentNetworkMode: 'allowlist' }),
    'no-network',
    'no egress filter here: allowlist gets no network',
  );
});

test('the local sandbox emulates FROM/WORKDIR/ENV/COPY and names the line it cannot run', async () => {
  const fix = loadTask(join(EXAMPLES, 'fix-script'));
  const image = emulateDockerfile(fix);
  assert.equal(image.workdir, '/app');
  assert.deepEqual(
    image.copies.map((c) => c.dest),
    ['/app/sum.sh'],
  );
  const out = mkdtempSync(join(tmpdir(), 'hl-local-'));
  const runtime = new LocalRuntime();
  const sandbox = await runtime.create({
    task: fix,
    harness: 'react',
    sessionId: 's1',
    image: 'local',
    hostLogsDir: out,
    mounts: [],
    env: {},
    model: { proxyUrl: 'http://127.0.0.1:4321' },
  });
  assert.equal(runtime.needsSessionSocket, false);
  assert.equal(sandbox.isolation, 'none', 'a local process cannot be isolated, and says so');
  assert.equal(sandbox.modelUrl, 'http://127.0.0.1:4321', "it talks to the proxy's loopback port directly");
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
  await assert.rejects(
    runtime.prepareImage(loadTask(dir)),
    /runner\/environment\/Dockerfile: line 3: RUN cannot run in the local sandbox .*--sandbox docker/,
  );
});

test("image builds: one network per set of allowed hosts, so one task's hosts never open another task's build", () => {
  assert.equal(buildNetworkFor([]), BUILD_NETWORK);
  assert.equal(buildNetworkFor([' ', '']), BUILD_NETWORK);
  const a = buildNetworkFor(['pypi.org', 'files.pythonhosted.org']);
  assert.equal(buildNetworkFor(['FILES.pythonhosted.org', 'pypi.org', 'pypi.org']), a);
  assert.notEqual(buildNetworkFor(['pypi.org']), a);
  assert.notEqual(a, BUILD_NETWORK);
  for (const n of [a, BUILD_NETWORK, buildNetworkFor(['pypi.org'])]) assert.ok(bridgeNameFor(n).length <= 15, n);
  assert.notEqual(bridgeNameFor(a), bridgeNameFor(buildNetworkFor(['pypi.org'])));
});

test('shell quoting survives quotes and spaces', () => {
  assert.equal(shellQuote('plain-arg_1.txt'), 'plain-arg_1.txt');
  assert.equal(shellQuote("it's here"), "'it'\\''s here'");
  assert.equal(execFileSync('bash', ['-c', `printf %s ${shellQuote('a \'b\' $HOME "c"')}`], { encoding: 'utf8' }), 'a \'b\' $HOME "c"');
});

test('rollout folders count up per task and harness', () => {
  const out = mkdtempSync(join(tmpdir(), 'hl-out-'));
  assert.equal(nextRolloutDir(out, 'hello-file', 'codex'), join(out, 'hello-file', 'codex', '0'));
  assert.equal(nextRolloutDir(out, 'hello-file', 'codex'), join(out, 'hello-file', 'codex', '1'));
  assert.equal(nextRolloutDir(out, 'hello-file', 'react'), join(out, 'hello-file', 'react', '0'));
});

function result(over: Partial<RolloutResult> = {}): RolloutResult {
  const call = {
    call_id: 'c0',
    index: 0,
    dialect: 'openai_chat',
    error: null,
    prompt_token_ids: [1, 2, 3],
    completion_token_ids: [4, 5],
    logprobs: [-0.1, -0.2],
    usage: null,
  };
  return {
    task: 'hello-file',
    harness: 'react',
    sandbox: 'docker',
    isolation: 'no-network',
    session_id: 'sX',
    status: 'ok',
    reward: 1,
    reward_source: 'reward.txt',
    reward_scores: {},
    error: null,
    trainable: true,
    agent: { exit_code: 0, timed_out: false, ms: 3000, log: '/x' },
    verifier: { exit_code: 0, timed_out: false, ms: 10, env_keys: [], session_key_absent: true, admin_key_absent: true },
    atif: { ...noTrajectory(), verdict: 'match', ours: [2], theirs: [2], n_agent_steps: 1, summary: 'Match.' },
    atif_source: 'self',
    ms: 12_400,
    out_dir: '/x',
    sandbox_id: null,
    sandbox_lost: null,
    cancelled: false,
    rollout: {
      capture_level: 'tokens',
      calls: [call],
      graph: {
        nodes: [{ node_id: 'c0', index: 0, parent_id: null, root_id: 'c0', children: [], discarded: false, role: 'agent' }],
        roots: ['c0'],
        leaves: ['c0'],
        forks: [],
      },
      stats: {
        n_calls: 1,
        n_turns: 1,
        n_roots: 1,
        n_leaves: 1,
        n_forks: 0,
        n_discarded: 0,
        n_sequences: 1,
        n_trainable_sequences: 1,
        n_trainable_tokens: 2,
      },
      sequences: [{ validation: [] }],
      validation: [],
    } as unknown as RolloutResult['rollout'],
    ...over,
  };
}

test('the run line', () => {
  assert.equal(rolloutLine(result()), '[react / docker] task hello-file: ok reward=1.00 turns=1 roots=1 tokens=5 atif=match 12s');
  assert.equal(
    rolloutLine(result({ status: 'errored', reward: null, error: 'the agent did not finish within 4 s; the sandbox was stopped' })),
    '[react / docker] task hello-file: errored reward=null turns=1 roots=1 tokens=5 atif=match 12s (the agent did not finish within 4 s; the sandbox was stopped)',
  );
});

test('the contract passes a clean record and fails each broken part on its own row', () => {
  const ok = contractRows(result());
  assert.deepEqual(
    ok.filter((r) => !r.ok),
    [],
  );
  assert.deepEqual(
    ok.map((r) => r.check),
    [
      'rollout finished',
      'every model call captured',
      'dialect detected',
      'token ids and logprobs aligned',
      'graph well formed',
      'ATIF cross-check',
      'reward read',
      'capture keys absent from verifier',
    ],
  );
  const failing = (over: Partial<RolloutResult>) =>
    contractRows(result(over))
      .filter((r) => !r.ok)
      .map((r) => r.check);
  assert.deepEqual(
    failing({
      verifier: { exit_code: 0, timed_out: false, ms: 1, env_keys: ['OPENAI_API_KEY'], session_key_absent: false, admin_key_absent: true },
    }),
    ['capture keys absent from verifier'],
  );
  assert.deepEqual(
    failing({
      verifier: { exit_code: 0, timed_out: false, ms: 1, env_keys: ['JUDGE_KEY'], session_key_absent: true, admin_key_absent: false },
    }),
    ['capture keys absent from verifier'],
  );
  assert.match(
    contractRows(
      result({ verifier: { exit_code: 0, timed_out: false, ms: 1, env_keys: [], session_key_absent: false, admin_key_absent: false } }),
    ).at(-1)!.detail,
    /the session key and the admin key in the verifier environment/,
  );
  assert.deepEqual(failing({ reward: null }), ['reward read']);
  assert.deepEqual(failing({ harness: 'codex' }), ['dialect detected']);
  assert.deepEqual(failing({ agent: { exit_code: 1, timed_out: false, ms: 1, log: '' } }), ['rollout finished']);
  assert.deepEqual(failing({ atif: { ...noTrajectory(), verdict: 'MISMATCH', n_agent_steps: 1, summary: 'MISMATCH' } }), [
    'ATIF cross-check',
  ]);
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

test("--engine-url without --model: the engine's only served model, or an error that says what to pass", async () => {
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
