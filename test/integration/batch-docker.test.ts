// A real batch on real Docker: 4 tasks x 2 harnesses (the reference harness and codex, a real CLI)
// x group size 4 = 32 rollouts through one proxy, 3 at a time. One sandbox is frozen (docker pause)
// while its harness waits on a tool, so the rollout runs into its deadline: timeout, discarded,
// reward null. Another is killed from outside (docker kill): infra_error, reward null. Then the lab
// itself is killed with SIGKILL mid-batch, and `batch resume` finishes the batch with no rollout
// run twice and no container left. The scripted policies answer through the in-repo vLLM-shaped
// engine (HARNESS_LAB_POLICY_ENGINE=fake): this test is about the batch, not the model.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import type Docker from 'dockerode';
import { readManifest, readRolloutState, readRolloutStates, type RolloutState } from '../../src/batch/state.js';
import { rolloutSeed } from '../../src/batch/plan.js';
import { LABEL } from '../../src/sandbox/docker-client.js';
import { startPolicyEngine } from '../../src/sandbox/policy-engine.js';
import { EXAMPLES, REPO, cli, dockerReady, waitFor } from './sandbox-fixtures.js';

const FAST_ENGINE = { HARNESS_LAB_POLICY_ENGINE: 'fake' };
const SHELL = '^(bash|exec_command|run_shell_command|shell)$';

/** A hello-file-shaped task: its own instruction (the engine routes by it), tool command and check. */
function fileTask(root: string, folder: string, name: string, file: string, content: string, command: string): void {
  const dir = join(root, folder);
  cpSync(join(EXAMPLES, 'hello-file'), dir, { recursive: true });
  const instruction = `Create a file named \`${file}\` in the current working directory whose content is exactly \`${content}\`.`;
  writeFileSync(join(dir, 'instruction.md'), `${instruction}\n`);
  writeFileSync(
    join(dir, 'task.toml'),
    readFileSync(join(dir, 'task.toml'), 'utf8').replace('name = "harness-lab/hello-file"', `name = "batch-test/${name}"`),
  );
  writeFileSync(
    join(dir, 'policy.json'),
    JSON.stringify({
      name,
      rules: [{ when: { last_message: `Create a file named \`${file}\`` }, then: { call: { tool: SHELL, input: command } } }],
      fallback: { say: `I created ${file}.` },
    }),
  );
  writeFileSync(
    join(dir, 'tests', 'test.sh'),
    `#!/bin/bash\nmkdir -p /logs/verifier\nif [ "$(cat /app/${file} 2>/dev/null)" = "${content}" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n`,
  );
}

function tasksRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'hl-batch-tasks-'));
  // a: waits on a tool long enough to be frozen or killed mid-agent; b, c: the shipped examples; d: a wrong answer.
  fileTask(root, 'a-slow', 'slow-file', 'slow.txt', 'slow', "sleep 5 && printf 'slow' > slow.txt");
  cpSync(join(EXAMPLES, 'hello-file'), join(root, 'b-hello'), { recursive: true });
  cpSync(join(EXAMPLES, 'fix-script'), join(root, 'c-fix'), { recursive: true });
  // This test is about the batch, not the policy: b and c follow their scripted policy.json (reward 1), not the sampling one.
  for (const t of ['b-hello', 'c-fix']) rmSync(join(root, t, 'policy.sampling.json'));
  fileTask(root, 'd-wrong', 'wrong-answer', 'answer.txt', '42', "printf '41' > answer.txt");
  return root;
}

async function batchContainers(docker: Docker, batchId: string): Promise<Docker.ContainerInfo[]> {
  return docker.listContainers({ all: true, filters: JSON.stringify({ label: [`${LABEL.batch}=${batchId}`] }) });
}

function states(dir: string): RolloutState[] {
  return existsSync(join(dir, 'batch.json')) ? readRolloutStates(dir) : [];
}

/** A running rollout of `prefix` whose harness has made its first model call (so it is inside its tool now). */
function midAgent(dir: string, prefix: string, except: string[] = []): RolloutState | undefined {
  return states(dir).find((s) => {
    if (s.state !== 'running' || !s.rollout_id.startsWith(prefix) || except.includes(s.rollout_id) || !s.session_id) return false;
    const file = join(dir, 'capture', 'sessions', `${s.session_id}.jsonl`);
    return existsSync(file) && readFileSync(file, 'utf8').includes('"type":"call"');
  });
}

describe('batches on Docker', { concurrency: false }, () => {
  let docker: Docker;
  before(async () => {
    docker = await dockerReady();
  });

  test(
    '4 tasks x 2 harnesses x 4: a frozen sandbox times out, a killed one is infra_error, kill -9 of the lab and resume finish it once',
    { timeout: 600_000 },
    async () => {
      const dir = join(mkdtempSync(join(tmpdir(), 'hl-batch-')), 'batch');
      let pid = 0;
      const submit = cli(
        [
          'batch',
          'submit',
          '--tasks',
          tasksRoot(),
          '--harness',
          'react,codex',
          '--group-size',
          '4',
          '--parallel',
          '3',
          '--timeout',
          '30',
          '--temperature',
          '0.7',
          '--policy-version',
          'step-3',
          '--out',
          dir,
        ],
        { env: FAST_ENGINE, onStart: (p) => (pid = p) },
      );
      // SIGKILL the lab early: its first rollouts running, most of the batch still queued.
      await waitFor(
        'a rollout done, others running, most queued',
        async () => {
          const s = states(dir);
          if (!(
            s.some((r) => r.state === 'done') &&
            s.some((r) => r.state === 'running' && r.backend_ref) &&
            s.filter((r) => r.state === 'queued').length >= 16
          ))
            return undefined;
          // A running rollout names its container before Docker has created it: wait for one to exist, so
          // the kill leaves a sandbox behind for resume to clean up (under load the create can lag).
          const manifest = existsSync(join(dir, 'batch.json')) ? readManifest(dir) : undefined;
          return manifest && (await batchContainers(docker, manifest.batch_id)).some((c) => c.State === 'running') ? true : undefined;
        },
        180_000,
      );
      process.kill(pid, 'SIGKILL');
      const dead = await submit;
      assert.equal(dead.signal, 'SIGKILL', dead.stdout + dead.stderr);
      const batchId = readManifest(dir).batch_id;
      const atKill = states(dir);
      const interrupted = atKill.filter((s) => s.state === 'running').map((s) => s.rollout_id);
      const finishedAtKill = atKill.filter((s) => s.state === 'done' || s.state === 'discarded');
      assert.ok(interrupted.length >= 1 && finishedAtKill.length >= 1);
      assert.ok((await batchContainers(docker, batchId)).length >= 1, 'kill -9 leaves the running sandboxes behind');

      let r = await cli(['batch', 'status', dir]);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /: interrupted\n/);
      assert.match(r.stdout, /the lab that ran it is gone: continue with `harness-lab batch resume /);

      // The resumed lab: one of its sandboxes is frozen inside the harness's tool call (docker pause),
      // so it runs into its deadline; another is killed from outside (docker kill).
      const resuming = cli(['batch', 'resume', dir], { env: FAST_ENGINE });
      await waitFor(
        'the resumed lab to re-queue what the dead one left',
        async () => (interrupted.every((id) => readRolloutState(dir, id).attempts[0]?.outcome === 'interrupted') ? true : undefined),
        60_000,
      );
      const ctr = async (s: RolloutState) =>
        (await batchContainers(docker, batchId)).find((c) => c.Labels[LABEL.rollout] === s.rollout_id && c.State === 'running');
      const frozen = await waitFor('a slow-file rollout inside its tool', async () => midAgent(dir, 'slow-file.'), 180_000);
      // runc's freezer can refuse while a process in the container is forking ("unable to freeze"): try again.
      const frozenCtr = docker.getContainer((await waitFor('the frozen rollout container', () => ctr(frozen), 30_000)).Id);
      await waitFor(
        'docker pause to take',
        () =>
          frozenCtr.pause().then(
            () => true,
            (err: Error) => (/unable to freeze/.test(err.message) ? undefined : Promise.reject(err)),
          ),
        30_000,
      );
      const killed = await waitFor(
        'another slow-file rollout inside its tool',
        async () => midAgent(dir, 'slow-file.', [frozen.rollout_id]),
        180_000,
      );
      await docker.getContainer((await waitFor('the killed rollout container', () => ctr(killed), 30_000)).Id).kill();
      const resumed = await resuming;
      assert.equal(resumed.code, 0, resumed.stdout + resumed.stderr);
      assert.match(resumed.stdout, new RegExp(`re-queued ${interrupted.length} rollout\\(s\\) a previous lab left running`));
      assert.deepEqual(await batchContainers(docker, batchId), [], 'no container of the batch is left');

      // Every rollout finished exactly once; nothing finished before the kill ran again.
      const final = readRolloutStates(dir);
      assert.equal(final.length, 32);
      assert.ok(final.every((s) => s.state === 'done' || s.state === 'discarded'));
      for (const s of final) assert.equal(s.attempts.filter((a) => a.outcome === 'finished').length, 1, `${s.rollout_id} finished once`);
      for (const before of finishedAtKill)
        assert.deepEqual(readRolloutState(dir, before.rollout_id), before, `${before.rollout_id} was not touched by the resume`);
      for (const id of interrupted) {
        const s = final.find((x) => x.rollout_id === id)!;
        assert.deepEqual(s.attempts.map((a) => [a.outcome, a.trainable]).slice(0, 1), [['interrupted', false]]);
        const partial = join(dir, 'capture', 'sessions', `${s.attempts[0]!.session_id}.jsonl`);
        assert.ok(existsSync(partial), 'the partial session is kept for debugging');
      }

      const byId = new Map(final.map((s) => [s.rollout_id, s]));
      const f = byId.get(frozen.rollout_id)!;
      assert.deepEqual([f.class, f.state, f.reward, f.trainable], ['timeout', 'discarded', null, false]);
      const k = byId.get(killed.rollout_id)!;
      assert.deepEqual([k.class, k.state, k.reward, k.trainable], ['infra_error', 'discarded', null, false]);
      assert.match(k.error!, /stopped from outside the lab/);
      for (const s of final) {
        if (s === f || s === k) continue;
        if (s.task === 'wrong-answer') assert.deepEqual([s.class, s.reward, s.trainable], ['policy_failure', 0, true], s.rollout_id);
        else assert.deepEqual([s.class, s.reward, s.trainable], ['completed', 1, true], `${s.rollout_id}: ${s.error}`);
      }

      // One proxy data dir: every attempt's session, with the batch's metadata; sampling pinned on every call.
      const sessionFiles = readdirSync(join(dir, 'capture', 'sessions'));
      const attempts = final.flatMap((s) => s.attempts);
      assert.deepEqual(sessionFiles.sort(), attempts.map((a) => `${a.session_id}.jsonl`).sort());
      let calls = 0;
      for (const s of final) {
        const lines = readFileSync(join(dir, 'capture', 'sessions', `${s.session_id}.jsonl`), 'utf8')
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l));
        const header = lines.find((l) => l.type === 'session');
        assert.deepEqual(
          [
            header.metadata.batch_id,
            header.metadata.group_id,
            header.metadata.rollout_id,
            header.metadata.task,
            header.metadata.harness,
            header.metadata.policy_version,
          ],
          [batchId, s.group_id, s.rollout_id, s.task, s.harness, 'step-3'],
        );
        // The lab's own engine: each rollout pins its own seed beside the batch's sampling (plan.ts rolloutSeed).
        assert.deepEqual(header.sampling, { temperature: 0.7, top_p: 1, top_k: -1, min_p: 0, seed: rolloutSeed(s.rollout_id) });
        for (const call of lines.filter((l) => l.type === 'call')) {
          calls++;
          assert.deepEqual(
            [call.sampling_params.temperature, call.sampling_params.top_p, call.sampling_params.top_k, call.sampling_params.min_p],
            [0.7, 1, -1, 0],
          );
          assert.equal(call.engine_request.temperature, 0.7);
        }
      }
      assert.ok(calls >= 60);

      r = await cli(['batch', 'status', dir, '--json']);
      assert.equal(r.code, 0, r.stderr);
      const st = JSON.parse(r.stdout);
      assert.equal(st.lab, 'finished');
      assert.equal(st.groups.length, 8);
      for (const g of st.groups) {
        assert.equal(g.rollouts.length, 4);
        for (const ro of g.rollouts) {
          assert.equal(ro.harness, g.harness, 'a group keeps every member on one harness');
          for (const key of ['id', 'task', 'harness', 'class', 'reward', 'duration_ms']) assert.ok(key in ro, key);
        }
      }
      r = await cli(['batch', 'status', dir]);
      assert.match(r.stdout, /wrong-answer\.react +4 +0 +0 +0 0 0 0 .*NO CONTRAST/);
      const fg = st.groups.find((g: { group_id: string }) => g.group_id === frozen.group_id);
      assert.equal(fg.discarded, frozen.group_id === killed.group_id ? 2 : 1);
      assert.match(r.stdout, new RegExp(`${frozen.group_id.replace('.', '\\.')} +${fg.done} +${fg.discarded} +0 +1 1 `));

      r = await cli(['batch', 'watch', dir]);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /: finished\n/);
      r = await cli(['batch', 'collect', dir]);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /wrote \d+ trace\(s\) from 30 trainable rollout\(s\) in 8 group\(s\)/);
      const first = JSON.parse(readFileSync(join(dir, 'collected.jsonl'), 'utf8').split('\n')[0]!);
      assert.equal(first.batch_id, batchId);
      assert.ok(Array.isArray(first.trace.input_ids));
      r = await cli(['batch', 'cancel', dir]);
      assert.match(r.stdout, /has finished; nothing to cancel/);
    },
  );

  test('batch cancel stops a running lab: its sandboxes are removed and its rollouts queued again', { timeout: 300_000 }, async () => {
    const root = mkdtempSync(join(tmpdir(), 'hl-batch-cancel-'));
    fileTask(root, 'sleepy', 'sleepy', 'never.txt', 'x', 'sleep 600');
    const dir = join(root, 'batch');
    const run = cli(
      [
        'batch',
        'submit',
        '--tasks',
        join(root, 'sleepy'),
        '--harness',
        'react',
        '--group-size',
        '2',
        '--parallel',
        '2',
        '--timeout',
        '300',
        '--out',
        dir,
      ],
      { env: FAST_ENGINE },
    );
    await waitFor(
      'both rollouts inside their tool',
      async () => (midAgent(dir, 'sleepy.') && states(dir).filter((s) => s.state === 'running').length === 2 ? true : undefined),
      180_000,
    );
    const batchId = readManifest(dir).batch_id;
    // batch watch, followed live: the cancel comes only once it has shown the running batch.
    const watcher = spawn(process.execPath, ['--import', 'tsx', join(REPO, 'src', 'cli', 'main.ts'), 'batch', 'watch', dir, '--rollouts'], {
      cwd: REPO,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let watched = '';
    watcher.stdout.on('data', (b: Buffer) => (watched += b.toString()));
    const watching = new Promise<number | null>((resolve) => watcher.on('close', resolve));
    await waitFor(
      'batch watch to show the running batch',
      async () => (/: running \(pid \d+\)\n/.test(watched) ? true : undefined),
      60_000,
    );
    // Both are inside their tool call, so each has had a model call captured: watch counts them live.
    const snapshot = watched
      .split(/^\d{4}-\d\d-\d\dT[^\n]*\n/m)
      .filter((t) => /: running \(pid \d+\)\n/.test(t))
      .at(-1)!;
    const live = /2 running \((\d+) calls so far\)/.exec(snapshot);
    assert.ok(live && Number(live[1]) >= 2, `batch watch shows the calls so far: ${snapshot}`);
    assert.equal(snapshot.match(/ running calls=[1-9]\d* reward=null/g)?.length, 2, `each running rollout's calls: ${snapshot}`);
    const c = await cli(['batch', 'cancel', dir]);
    assert.equal(c.code, 0, c.stderr);
    assert.match(c.stdout, /cancelled \(lab pid \d+ stopped\)/);
    const lab = await run;
    assert.equal(lab.code, 1, lab.stdout + lab.stderr);
    assert.match(lab.stdout, /cancelled; `harness-lab batch resume .*` continues it/);
    assert.deepEqual(await batchContainers(docker, batchId), []);
    const s = readRolloutStates(dir);
    assert.deepEqual(
      s.map((x) => [x.state, x.attempts.map((a) => a.outcome)]),
      [
        ['queued', ['cancelled']],
        ['queued', ['cancelled']],
      ],
    );
    const st = await cli(['batch', 'status', dir, '--json']);
    assert.equal(JSON.parse(st.stdout).lab, 'cancelled');
    assert.equal(await watching, 1, 'watch ends when the lab stops before the batch is finished');
    assert.match(watched, /sleepy\.react\.0 +running/);
    assert.match(watched, /: cancelled\n[^]*sleepy\.react\.0 +queued/);
  });
});

describe('--on-timeout keep on Docker', () => {
  test(
    'the harness is stopped at its deadline inside a live sandbox, the verifier runs, tokens and reward are kept',
    { timeout: 300_000 },
    async () => {
      const docker = await dockerReady();
      const root = mkdtempSync(join(tmpdir(), 'hl-batch-keep-'));
      fileTask(root, 'late', 'late-file', 'late.txt', 'late', "printf 'late' > late.txt && echo written-late");
      // Two calls: write the file, then (on the tool's output) hang until the deadline.
      const policy = JSON.parse(readFileSync(join(root, 'late', 'policy.json'), 'utf8'));
      policy.rules.unshift({ when: { last_message: 'written-late' }, then: { call: { tool: SHELL, input: 'sleep 600' } } });
      writeFileSync(join(root, 'late', 'policy.json'), JSON.stringify(policy));
      const dir = join(root, 'batch');
      const r = await cli(
        [
          'batch',
          'submit',
          '--tasks',
          join(root, 'late'),
          '--harness',
          'react',
          '--group-size',
          '2',
          '--parallel',
          '2',
          '--timeout',
          '8',
          '--on-timeout',
          'keep',
          '--out',
          dir,
        ],
        { env: FAST_ENGINE },
      );
      assert.equal(r.code, 0, r.stdout + r.stderr);
      for (const s of readRolloutStates(dir)) {
        assert.deepEqual([s.state, s.class, s.reward, s.trainable], ['done', 'timeout', 1, true], s.error ?? '');
        const rec = JSON.parse(readFileSync(join(dir, s.attempts[0]!.out_dir, 'rollout.json'), 'utf8'));
        assert.equal(rec.agent.timed_out, true);
        assert.ok(rec.agent.ms < 60_000, 'the harness was stopped near its deadline');
        assert.equal(rec.verifier.exit_code, 0);
      }
      assert.match(r.stdout, /late-file\.react +2 +0 +0 +1 1 .*NO CONTRAST/);
      assert.deepEqual(await batchContainers(docker, readManifest(dir).batch_id), []);
    },
  );
});

describe('a batch against an --engine-url that needs a key', () => {
  test('the key reaches the engine through the proxy only: never in the batch directory', { timeout: 300_000 }, async () => {
    const docker = await dockerReady();
    const KEY = 'engine-secret-batch-7c1e93d2';
    const inner = await startPolicyEngine(join(EXAMPLES, 'hello-file', 'policy.json'), 'fake');
    let refused = 0;
    const gate = createServer((req, res) => {
      if (req.headers.authorization !== `Bearer ${KEY}`) {
        refused++;
        res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":{"message":"engine API key required"}}');
        return;
      }
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        void fetch(`${inner.url}${req.url}`, {
          method: req.method,
          headers: { 'content-type': 'application/json' },
          body: chunks.length ? Buffer.concat(chunks) : undefined,
        }).then(async (up) => {
          res.writeHead(up.status, { 'content-type': 'application/json' }).end(await up.text());
        });
      });
    });
    await new Promise<void>((resolve) => gate.listen(0, '127.0.0.1', resolve));
    try {
      const dir = join(mkdtempSync(join(tmpdir(), 'hl-batch-key-')), 'batch');
      const url = `http://127.0.0.1:${(gate.address() as AddressInfo).port}/v1`;
      const r = await cli(
        [
          'batch',
          'submit',
          '--tasks',
          join(EXAMPLES, 'hello-file'),
          '--harness',
          'react',
          '--group-size',
          '2',
          '--engine-url',
          url,
          '--out',
          dir,
        ],
        { env: { HARNESS_LAB_ENGINE_API_KEY: KEY } },
      );
      assert.equal(r.code, 0, r.stdout + r.stderr);
      assert.deepEqual(
        readRolloutStates(dir).map((s) => [s.class, s.reward]),
        [
          ['completed', 1],
          ['completed', 1],
        ],
      );
      assert.equal(refused, 0);
      assert.equal(readManifest(dir).engine_url, url);
      const leaks = filesUnder(dir).filter((f) => readFileSync(f, 'utf8').includes(KEY));
      assert.deepEqual(leaks, [], 'the engine key is in no file of the batch');
      assert.ok(!r.stdout.includes(KEY) && !r.stderr.includes(KEY));
      assert.deepEqual(await batchContainers(docker, readManifest(dir).batch_id), []);
    } finally {
      gate.close();
      await inner.close();
    }
  });
});

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)]));
}
