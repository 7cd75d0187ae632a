// Sandbox lifecycle on a real Docker engine: the wall-clock timeout (errored, reward null, not
// trainable, container gone), a task that cannot build here, the legacy-key task with a reward.json
// verifier, clear errors for an unknown harness and an unreachable Docker, and cleanup when the run
// is killed midway (SIGTERM removes its containers; after SIGKILL the next run removes them).
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type Docker from 'dockerode';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { SessionSocket } from '../../src/capture/session-socket.js';
import { SandboxError } from '../../src/sandbox/runtime.js';
import { LABEL } from '../../src/sandbox/docker-client.js';
import { TaskError, loadTask } from '../../src/tasks/task.js';
import { DockerRuntime } from '../../src/sandbox/docker.js';
import { startPolicyEngine, type PolicyEngine } from '../../src/sandbox/policy-engine.js';
import { openLab } from '../../src/sandbox/lab.js';
import { ensureReactScript } from '../../src/sandbox/react-script.js';
import { runRollout } from '../../src/sandbox/rollout-runner.js';
import { SLEEP_POLICY, EXAMPLES, cli, containersOf, dockerReady, outDir, taskWithPolicy, waitFor } from './sandbox-fixtures.js';

// The fake engine answers instantly; these tests are about the sandbox, not the model.
const FAST_ENGINE = { HARNESS_LAB_POLICY_ENGINE: 'fake' };

describe('sandbox lifecycle', { concurrency: false }, () => {
  let docker: Docker;
  let runtime: DockerRuntime;
  before(async () => {
    docker = await dockerReady();
    runtime = await DockerRuntime.connect();
  });

  describe('with a proxy', () => {
    let engine: PolicyEngine;
    let proxy: CaptureProxy;
    before(async () => {
      engine = await startPolicyEngine(join(EXAMPLES, 'fix-script', 'policy.json'), 'fake');
      proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, captureLevel: 'tokens' });
    });
    after(async () => {
      await proxy?.close();
      await engine?.close();
    });

    test('legacy-key task with a reward.json verifier (fix a script) ends with reward 1', { timeout: 300_000 }, async () => {
      const r = await runRollout({
        task: loadTask(join(EXAMPLES, 'fix-script')),
        harness: 'react',
        runtime,
        proxy,
        model: 'policy',
        outDir: outDir(),
        reactScript: await ensureReactScript(),
      });
      assert.equal(r.status, 'ok', r.error ?? '');
      assert.equal(r.reward, 1);
      assert.equal(r.reward_source, 'reward.json');
      assert.deepEqual(r.reward_scores, { reward: 1, passed: 4, total: 4 });
      assert.deepEqual(r.verifier?.env_keys, ['SUM_CASES']);
      assert.equal(r.verifier?.session_key_absent, true);
      assert.equal(r.rollout?.stats.n_turns, 3);
      assert.equal(r.atif.verdict, 'match');
    });

    test(
      "a lab opened on a running proxy (the extension's Run with Harness...) records into it and leaves it running",
      { timeout: 300_000 },
      async () => {
        const lab = await openLab({
          taskDir: join(EXAMPLES, 'fix-script'),
          harness: 'react',
          sandbox: 'docker',
          proxy,
          model: engine.model,
          outDir: outDir(),
          handleSignals: false,
        });
        let sessionId: string;
        try {
          assert.equal(lab.proxy, proxy);
          const r = await runRollout(lab.rolloutOptions);
          assert.equal(r.status, 'ok', r.error ?? '');
          sessionId = r.session_id;
        } finally {
          await lab.close();
        }
        assert.ok(
          proxy.sessions.list().some((s) => s.session_id === sessionId),
          "the rollout's session is in the given proxy",
        );
        assert.equal(proxy.sessions.rollout(sessionId)?.stats.n_turns, 3);
        assert.equal((await fetch(`${proxy.url}/health`)).status, 200, 'closing the lab leaves the given proxy running');
      },
    );

    test('the wall-clock timeout stops the container; the rollout is errored with reward null and kept', { timeout: 300_000 }, async () => {
      const task = loadTask(taskWithPolicy('hello-file', SLEEP_POLICY));
      const sleeper = await startPolicyEngine(task.policyFile!, 'fake');
      const p2 = await CaptureProxy.start({ engineUrl: sleeper.url, model: sleeper.model, captureLevel: 'tokens' });
      try {
        const t0 = Date.now();
        const r = await runRollout({
          task,
          harness: 'react',
          runtime,
          proxy: p2,
          model: 'policy',
          outDir: outDir(),
          timeoutSec: 4,
          reactScript: await ensureReactScript(),
        });
        assert.ok(Date.now() - t0 < 60_000, 'the timeout ends the rollout promptly');
        assert.equal(r.status, 'errored');
        assert.equal(r.reward, null);
        assert.equal(r.trainable, false);
        assert.equal(r.agent.timed_out, true);
        assert.match(r.error ?? '', /did not finish within 4 s/);
        assert.equal(r.verifier, null, 'the verifier does not run after a timeout');
        const kept = JSON.parse(readFileSync(join(r.out_dir, 'rollout.json'), 'utf8'));
        assert.equal(kept.status, 'errored');
        assert.equal(kept.reward, null);
        assert.equal(kept.rollout.calls.length, 1, 'the captured call is kept for debugging');
        assert.equal((await containersOf(docker, process.pid)).length, 0);
      } finally {
        await p2.close();
        await sleeper.close();
      }
    });
  });

  test('a relay that cannot start is a clear error and leaves no container, network or socket behind', { timeout: 120_000 }, async () => {
    const engine = await startPolicyEngine(join(EXAMPLES, 'fix-script', 'policy.json'), 'fake');
    const proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, captureLevel: 'tokens' });
    const socket = await SessionSocket.open(proxy, proxy.sessions.create().session_id);
    try {
      const task = loadTask(join(EXAMPLES, 'fix-script')); // egress: a network is created, then must go
      // A "node" that exits at once stands in for an image whose libc cannot run the host's node.
      const spec = {
        task,
        harness: 'react',
        sessionId: socket.sessionId,
        image: await runtime.prepareImage(task),
        hostLogsDir: outDir(),
        mounts: [{ host: '/bin/false', container: '/opt/harness-lab/bin/node', readOnly: true }],
        env: {},
        model: { proxyUrl: proxy.url, socketDir: socket.dir },
      };
      await assert.rejects(runtime.create(spec), (err: unknown) => {
        assert.ok(err instanceof SandboxError);
        assert.match(
          err.message,
          /could not start the sandbox container for fix-script: .*the model relay.*(exited with 1|did not come up)/,
        );
        return true;
      });
      assert.deepEqual(await containersOf(docker, process.pid), []);
      const mine = (await docker.listNetworks({ filters: JSON.stringify({ label: [LABEL.owner] }) })).filter((n) =>
        n.Labels?.[LABEL.owner]?.endsWith(`/${process.pid}`),
      );
      assert.deepEqual(mine, [], 'the per-rollout network is removed too');
    } finally {
      await socket.close();
      await proxy.close();
      await engine.close();
    }
  });

  test('a task whose Dockerfile names a public image fails before any container, naming file and field', { timeout: 120_000 }, async () => {
    const dir = taskWithPolicy('hello-file', SLEEP_POLICY);
    writeFileSync(join(dir, 'environment', 'Dockerfile'), 'FROM python:3.12-slim\nWORKDIR /app\n');
    await assert.rejects(runtime.prepareImage(loadTask(dir)), (err: unknown) => {
      assert.ok(err instanceof TaskError);
      assert.equal(err.file, 'hello-file/environment/Dockerfile');
      assert.equal(err.field, 'FROM');
      assert.match(err.message, /python:3\.12-slim is not available locally .*harness-lab\/base:bookworm/);
      return true;
    });
    const r = await cli(['rollout', '--task', dir, '--harness', 'react', '--out', outDir()], { env: FAST_ENGINE });
    assert.equal(r.code, 1);
    assert.match(r.stdout, /\[react \/ docker\] task hello-file: errored reward=null .*python:3\.12-slim is not available locally/);
  });

  test('a broken task.toml, an unknown harness and an unreachable Docker are clear CLI errors', { timeout: 120_000 }, async () => {
    const dir = taskWithPolicy('hello-file', SLEEP_POLICY);
    writeFileSync(join(dir, 'task.toml'), '[environment]\nmemory = "plenty"\n');
    let r = await cli(['rollout', '--task', dir, '--harness', 'react', '--out', outDir()]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /hello-file\/task\.toml: environment\.memory: cannot read size 'plenty'/);

    r = await cli(['rollout', '--task', join(EXAMPLES, 'hello-file'), '--harness', 'cursor-cli', '--out', outDir()]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /unknown harness 'cursor-cli'; known harnesses: react, codex, claude-code, opencode, gemini-cli, qwen-code, pi/);

    mkdirSync(outDir(), { recursive: true });
    r = await cli(['rollout', '--task', join(EXAMPLES, 'hello-file'), '--harness', 'react', '--out', outDir()], {
      env: { DOCKER_HOST: 'unix:///nonexistent/docker.sock' },
    });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /Docker is not reachable at unix:\/\/\/nonexistent\/docker\.sock .*Start the Docker daemon/);
  });

  test(
    'killing the run midway leaves no container: SIGTERM cleans up, and the next run removes what SIGKILL left',
    { timeout: 300_000 },
    async () => {
      const task = taskWithPolicy('hello-file', SLEEP_POLICY);
      for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
        let pid = 0;
        const out = outDir();
        const run = cli(['rollout', '--task', task, '--harness', 'react', '--out', out], { env: FAST_ENGINE, onStart: (p) => (pid = p) });
        // A running container is not yet a running agent (the relay starts first): wait for its first turn.
        const agentLog = join(out, 'hello-file', 'react', '0', 'agent', 'react.txt');
        await waitFor(
          `the agent of the ${signal} run`,
          async () => (existsSync(agentLog) && (await containersOf(docker, pid)).some((c) => c.State === 'running') ? true : undefined),
          120_000,
        );
        // The agent is inside `sleep 600` now.
        process.kill(pid, signal);
        const done = await run;
        if (signal === 'SIGTERM') {
          assert.equal(done.code, 143, done.stderr);
          assert.deepEqual(await containersOf(docker, pid), [], "SIGTERM removes the run's containers");
        } else {
          assert.equal(done.signal, 'SIGKILL');
          const left = await containersOf(docker, pid);
          assert.equal(left.length, 1, 'SIGKILL leaves the container behind');
          const next = await cli(['rollout', '--task', join(EXAMPLES, 'hello-file'), '--harness', 'react', '--out', outDir(), '-v'], {
            env: FAST_ENGINE,
          });
          assert.equal(next.code, 0, next.stderr);
          // Whichever lab starts next removes it and names it: this run, or one that another test file
          // (the runner runs two at once) started first, which says so in its own output instead.
          const id = left[0]!.Id.slice(0, 12);
          const swept = /removed \d+ sandbox\(es\) left by lab processes that are gone: (.*)/.exec(next.stderr)?.[1] ?? '';
          if (!swept.includes(id))
            console.log(
              `# the stale container ${id} was removed by another test's lab before this run's sweep (this run removed: ${swept || 'nothing'})`,
            );
          assert.deepEqual(await containersOf(docker, pid), [], 'the next lab to start removed the stale container');
        }
      }
    },
  );
});
