// FACTORY_ERROR where OpenEnv's server sends it: its environment factory failing. A session being
// created (a bare /ws connect: one error frame, then the socket closes; openenv/session/create and a
// stateless tools/call: a JSON-RPC error) when the backend cannot make sandboxes at all (the cluster
// unreachable; the cluster refusing a permission a rollout needs), and a step whose sandbox cannot
// be made (the task image does not build). Each checked on the frame a TRL client receives.
/* eslint-disable @typescript-eslint/no-explicit-any -- wire JSON from the server under test */
import assert from 'node:assert/strict';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type Docker from 'dockerode';
import { LABEL } from '../../src/sandbox/docker-client.js';
import type { KubeDouble } from '../k8s-double/index.js';
import { taskCopy, testCluster } from './k8s-fixtures.js';
import { dockerReady } from './sandbox-fixtures.js';
import { postJson, rolloutResult, startServe, stepFrame, tempDir, wsSession, type ServeProcess } from './serve-fixtures.js';

const args = (extra: Record<string, unknown> = {}) => ({
  split: 'train',
  task_index: 0,
  harness: 'react',
  sandbox: 'docker',
  reward_key: 'reward',
  llm_url: '',
  model: '',
  api_key: '',
  auth_header: '',
  agent_timeout_sec: 60,
  agent_step_limit: 10,
  ...extra,
});

async function stop(serve: ServeProcess | undefined): Promise<void> {
  if (!serve || serve.child.exitCode !== null) return;
  serve.child.kill('SIGTERM');
  await serve.exited;
}

/** What a session being created gets, over each transport, when the environment factory fails. */
async function assertFactoryErrorAtCreate(serve: ServeProcess, factoryName: string, why: RegExp): Promise<void> {
  const ws = await wsSession(serve.url, [stepFrame(args())]);
  assert.equal(ws.frames.length, 1, JSON.stringify(ws.frames));
  assert.equal(ws.frames[0].type, 'error');
  assert.equal(ws.frames[0].data.code, 'FACTORY_ERROR');
  assert.equal(ws.frames[0].data.factory_name, factoryName);
  assert.match(ws.frames[0].data.message, why);
  assert.equal(ws.closeCode, 1011, 'the socket closes after the error, as OpenEnv closes it');
  const created = await postJson(`${serve.url}/mcp`, { jsonrpc: '2.0', id: 1, method: 'openenv/session/create', params: {} });
  assert.equal(created.body.id, 1);
  assert.equal(created.body.error.data.code, 'FACTORY_ERROR');
  assert.equal(created.body.error.data.factory_name, factoryName);
  assert.match(created.body.error.message, why);
  const called = await postJson(`${serve.url}/mcp`, {
    jsonrpc: '2.0',
    id: 2,
    method: 'tools/call',
    params: { name: 'run_rollout', arguments: args() },
  });
  assert.equal(called.body.error.data.code, 'FACTORY_ERROR');
  const health = (await (await fetch(`${serve.url}/health`)).json()) as any;
  assert.equal(health.active_sessions, 0, 'a session whose environment failed holds no slot');
}

describe('FACTORY_ERROR with a live backend', { concurrency: false }, () => {
  let docker: Docker;
  let cluster: KubeDouble;
  let serve: ServeProcess | undefined;

  before(async () => {
    docker = await dockerReady();
  });

  after(async () => {
    await stop(serve);
    await cluster?.close();
  });

  test('at session create: the kube context points at an API server nobody runs', { timeout: 120_000 }, async () => {
    cluster = await testCluster();
    serve = await startServe(
      [
        '--dataset',
        `train=${taskCopy('hello-file', {})}`,
        '--backend',
        'k8s',
        '--context',
        'unreachable',
        '--state-dir',
        tempDir('hl-serve-factory-kube-'),
      ],
      { KUBECONFIG: cluster.kubeconfig },
    );
    await assertFactoryErrorAtCreate(serve, 'harness-lab serve --backend k8s', /cannot create sandboxes: .*127\.0\.0\.1:1/);
    await stop(serve);
  });

  test('at session create: the cluster refuses a permission a rollout needs (create jobs)', { timeout: 120_000 }, async () => {
    cluster.api.deny({ verb: 'create', group: 'batch', resource: 'jobs', namespace: 'default' });
    serve = await startServe(
      [
        '--dataset',
        `train=${taskCopy('hello-file', {})}`,
        '--backend',
        'k8s',
        '--context',
        'double',
        '--namespace',
        'default',
        '--state-dir',
        tempDir('hl-serve-factory-deny-'),
      ],
      { KUBECONFIG: cluster.kubeconfig },
    );
    await assertFactoryErrorAtCreate(serve, 'harness-lab serve --backend k8s', /you may not create jobs\.batch .*in namespace "default"/);
    assert.equal(cluster.api.requests('POST', /\/jobs$/).length, 0, 'nothing was tried');
    await stop(serve);
  });

  test('at step: the task image does not build; the session stays usable and nothing is left', { timeout: 300_000 }, async () => {
    const broken = taskCopy('hello-file', {});
    writeFileSync(
      join(broken, 'environment', 'Dockerfile'),
      'FROM harness-lab/base:bookworm\nRUN echo "this task image is broken on purpose" && exit 3\n',
    );
    const stateDir = tempDir('hl-serve-factory-image-');
    serve = await startServe(['--dataset', `train=${broken}`, '--state-dir', stateDir]);
    // A bad request on the same socket afterwards is still answered: the session survived the error.
    const r = await wsSession(serve.url, [stepFrame(args()), stepFrame(args({ task_index: 5 }))]);
    assert.equal(r.frames[0].type, 'error', JSON.stringify(r.frames[0]).slice(0, 800));
    assert.equal(r.frames[0].data.code, 'FACTORY_ERROR');
    assert.equal(r.frames[0].data.factory_name, 'harness-lab serve --backend docker');
    assert.match(r.frames[0].data.message, /could not create the sandbox of train\[0\] \(hello-file, rollout /);
    assert.match(r.frames[0].data.message, /docker build failed: .*broken on purpose.* returned a non-zero code: 3/);
    const next = rolloutResult(r.frames[1]);
    assert.equal(next.ok, false);
    assert.equal(next.exception_type, 'IndexError');
    assert.equal(r.closeCode, 1000);
    // This server's batches only (other servers may share the Docker daemon).
    const mine = readdirSync(join(stateDir, 'engines')).map((id) => `serve-${id}`);
    assert.equal(mine.length, 1);
    const left = await docker.listContainers({ all: true, filters: JSON.stringify({ label: [LABEL.rollout] }) });
    assert.deepEqual(
      left.filter((c) => mine.includes(c.Labels[LABEL.batch] ?? '')).map((c) => c.Id),
      [],
    );
    await stop(serve);
  });

  test(
    'the breaker: after K sandboxes in a row fail, sessions get FACTORY_ERROR naming the pause and its cause, and /metrics says so',
    { timeout: 300_000 },
    async () => {
      const broken = taskCopy('hello-file', {});
      writeFileSync(join(broken, 'environment', 'Dockerfile'), 'FROM harness-lab/base:bookworm\nRUN echo "broken on purpose" && exit 3\n');
      serve = await startServe(['--dataset', `train=${broken}`, '--state-dir', tempDir('hl-serve-breaker-'), '--breaker-after', '2']);
      const r = await wsSession(serve.url, [stepFrame(args()), stepFrame(args())]);
      for (const f of r.frames) {
        assert.equal(f.data.code, 'FACTORY_ERROR', JSON.stringify(f).slice(0, 600));
        assert.match(f.data.message, /docker build failed/);
      }
      // The streak opened the breaker: a trainer's next session is refused at create, naming why.
      const next = await wsSession(serve.url, [stepFrame(args())]);
      assert.equal(next.frames[0].data.code, 'FACTORY_ERROR');
      assert.match(
        next.frames[0].data.message,
        /sandboxes are paused: 2 rollouts in a row failed in the sandbox backend \(image_build: .*docker build failed/,
      );
      const metrics = await (await fetch(`${serve.url}/metrics`)).text();
      assert.match(metrics, /^harness_lab_serve_breaker_state\{state="open"\} 1$/m);
      assert.match(metrics, /^harness_lab_serve_infra_failures_total\{cause="image_build"\} 2$/m);
      assert.match(metrics, /^harness_lab_serve_breaker_trips_total 1$/m);
      await stop(serve);
    },
  );
});
