// A policy that tries to break out, in a real Docker sandbox. Through the `run` path (openLab +
// runRollout, the lab's minted admin key, the reference harness running the escape probe as its shell
// tool) in a task that declares no network; and at the runtime level in a task that allows the
// internet, where the container's network config is checked as well. Either way: every admin and
// session route refused whatever key, the sibling's calls out of reach, no session minted or deleted,
// the engine, the proxy and a bystander service on host loopback unreachable, the socket read-only,
// its own model route working (streamed too), and the verifier without either key. The egress case
// runs a proxy with no admin key at all: the refusals come from the design, not from a secret.
// And through the batch runner on the real Docker backend: a GRPO group of 2 whose one policy runs
// the probe in every member, each member trying its siblings' sessions (the other member and a
// session of an earlier attempt with a call) while they run side by side through the one batch proxy.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type Docker from 'dockerode';
import { dockerBackendModule } from '../../src/batch/backends/docker.js';
import type { BackendModule } from '../../src/batch/backend.js';
import { attemptSessionId, planBatch, writeBatch } from '../../src/batch/plan.js';
import { runBatch } from '../../src/batch/runner.js';
import { readRolloutStates } from '../../src/batch/state.js';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { SessionSocket } from '../../src/capture/session-socket.js';
import { LABEL } from '../../src/sandbox/docker-client.js';
import { DROPPED_CAPABILITIES, DockerRuntime } from '../../src/sandbox/docker.js';
import { bridgeNameFor } from '../../src/sandbox/egress-firewall.js';
import { openLab } from '../../src/sandbox/lab.js';
import { MODEL_RELAY_PORT, SESSION_SOCKET_DIR_IN_SANDBOX } from '../../src/sandbox/model-relay.js';
import { startPolicyEngine, type PolicyEngine } from '../../src/sandbox/policy-engine.js';
import { runRollout } from '../../src/sandbox/rollout-runner.js';
import { loadTask } from '../../src/tasks/task.js';
import { assertCaptureIntact, assertEscapesRefused, escapeProbeCommand, readProbeReport } from './sandbox-escape-probe.js';
import { SLEEP_POLICY, containersOf, dockerReady, outDir, taskWithPolicy } from './sandbox-fixtures.js';

const REPORT = '/logs/agent/escape-probe.json';

function portOf(url: string): number {
  return Number(new URL(url).port);
}

/** A service on host loopback that has nothing to do with the lab: a sandbox must not see it either. */
async function bystander(): Promise<Server> {
  const server = createServer((_req, res) => res.end('bystander'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

async function siblingWithACall(proxy: CaptureProxy, id: string): Promise<void> {
  proxy.sessions.create({ session_id: id, metadata: { role: 'GRPO sibling' } });
  const res = await fetch(`${proxy.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${id}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'the answer is 42' }] }),
  });
  assert.equal(res.status, 200, await res.text());
  assert.equal(proxy.sessions.calls(id).length, 1);
}

describe('sandbox escapes', { concurrency: false }, () => {
  let docker: Docker;
  let side: Server;
  before(async () => {
    docker = await dockerReady();
    side = await bystander();
  });
  after(async () => {
    await new Promise((r) => side?.close(r));
  });

  test('`run` path, no-network task: every escape refused, own model route works, verifier keyless', { timeout: 300_000 }, async () => {
    const sibling = `s${randomBytes(12).toString('hex')}`;
    const probe = escapeProbeCommand({
      siblingSessionId: sibling,
      reportPath: REPORT,
      relayPort: MODEL_RELAY_PORT,
      socketDir: SESSION_SOCKET_DIR_IN_SANDBOX,
    });
    const taskDir = taskWithPolicy('hello-file', {
      name: 'escape',
      rules: [{ when: { last_message: 'Create a file named' }, then: { call: { tool: '^bash$', input: probe } } }],
      fallback: { say: 'Done.' },
    });
    const engine = await startPolicyEngine(join(taskDir, 'policy.json'), 'fake');
    const lab = await openLab({
      taskDir,
      harness: 'react',
      sandbox: 'docker',
      engineUrl: engine.url,
      model: engine.model,
      outDir: outDir(),
      handleSignals: false,
    });
    try {
      assert.equal(lab.task.agentNetworkMode, 'no-network');
      await siblingWithACall(lab.proxy, sibling);
      const beforeIds = lab.proxy.sessions.list().map((s) => String(s.session_id));
      const r = await runRollout(lab.rolloutOptions);
      assert.equal(r.status, 'ok', r.error ?? '');
      assert.equal(r.isolation, 'no-network');
      assert.equal(r.agent.exit_code, 0);
      const report = readProbeReport(join(r.out_dir, 'agent', 'escape-probe.json'));
      assertEscapesRefused(report, {
        hostPorts: [
          { name: 'capture proxy', port: lab.proxy.port },
          { name: 'engine', port: portOf(engine.url) },
          { name: 'bystander service', port: (side.address() as AddressInfo).port },
        ],
        relayPort: MODEL_RELAY_PORT,
        noNetwork: true,
      });
      assert.equal(report.base_url, `http://127.0.0.1:${MODEL_RELAY_PORT}`, 'the harness was handed the relay, not the proxy');
      assertCaptureIntact(lab.proxy, { sessionIds: [...beforeIds, r.session_id], siblingId: sibling, siblingCalls: 1 }, r.session_id);
      const probeCalls = (r.rollout?.calls ?? []).filter((c) =>
        JSON.stringify((c.request.body as { messages?: unknown[] }).messages?.[0]).includes('escape probe: say anything'),
      );
      assert.equal(probeCalls.length, 2, 'its own two probe calls (plain and streamed) were captured in its own session');
      assert.equal(r.verifier?.session_key_absent, true);
      assert.equal(r.verifier?.admin_key_absent, true);
      assert.ok(
        !readFileSync(join(r.out_dir, 'rollout.json'), 'utf8').includes(lab.rolloutOptions.adminKey!),
        'the admin key is in no rollout file',
      );
      assert.deepEqual(await containersOf(docker, process.pid), []);
      assert.deepEqual(
        readdirSync(tmpdir()).filter((n) => n.startsWith(`hl-sock-${process.pid}-`)),
        [],
        'the session socket and its folder are gone with the rollout',
      );
    } finally {
      await lab.close();
      await engine.close();
    }
  });

  describe('egress task, runtime level', () => {
    let engine: PolicyEngine;
    let proxy: CaptureProxy;
    before(async () => {
      engine = await startPolicyEngine(join(taskWithPolicy('hello-file', SLEEP_POLICY), 'policy.json'), 'fake');
      // No admin key on purpose: what refuses the probe here is the design (a socket with no admin
      // routes, no route to host loopback), not a secret it failed to guess.
      proxy = await CaptureProxy.start({ engineUrl: engine.url, model: engine.model, captureLevel: 'tokens' });
    });
    after(async () => {
      await proxy?.close();
      await engine?.close();
    });

    test('its own network with egress, no route to host loopback, every escape refused', { timeout: 300_000 }, async () => {
      const runtime = await DockerRuntime.connect();
      const task = { ...loadTask(taskWithPolicy('hello-file', SLEEP_POLICY)), agentNetworkMode: 'public' as const };
      const own = proxy.sessions.create().session_id;
      const sibling = `s${randomBytes(12).toString('hex')}`;
      await siblingWithACall(proxy, sibling);
      const beforeIds = proxy.sessions.list().map((s) => String(s.session_id));
      const socket = await SessionSocket.open(proxy, own);
      const logs = outDir();
      const sandbox = await runtime.create({
        task,
        harness: 'react',
        sessionId: own,
        image: await runtime.prepareImage(task),
        hostLogsDir: logs,
        mounts: [],
        env: {},
        model: { proxyUrl: proxy.url, socketDir: socket.dir },
      });
      let networkName = '';
      try {
        assert.equal(sandbox.isolation, 'egress');
        // The container's network, from the daemon: its own bridge network, nothing shared with the host.
        const [info] = await docker.listContainers({ filters: JSON.stringify({ label: [`${LABEL.session}=${own}`] }) });
        const container = await docker.getContainer(info!.Id).inspect();
        networkName = container.HostConfig.NetworkMode ?? '';
        assert.match(networkName, /^harness-lab-[0-9a-f]{12}$/);
        assert.deepEqual(
          Object.keys(container.NetworkSettings.Networks),
          [networkName],
          'attached to its own network only (not host, not the default bridge)',
        );
        assert.deepEqual(container.HostConfig.CapDrop, DROPPED_CAPABILITIES);
        assert.ok(
          container.Mounts.some((m) => m.Destination === SESSION_SOCKET_DIR_IN_SANDBOX && m.RW === false),
          'the socket folder is mounted read-only',
        );
        const network = await docker.getNetwork(networkName).inspect();
        assert.equal(network.Driver, 'bridge');
        assert.equal(network.Internal, false, 'egress allowed');
        assert.equal(network.Options?.['com.docker.network.bridge.enable_icc'], 'false');
        assert.equal(network.Labels?.[LABEL.owner]?.endsWith(`/${process.pid}`), true);
        // Host loopback is not routed from the bridge (martian unless route_localnet is on).
        const bridge = bridgeNameFor(networkName);
        assert.equal(readFileSync(`/proc/sys/net/ipv4/conf/${bridge}/route_localnet`, 'utf8').trim(), '0');

        const r = await sandbox.exec(
          escapeProbeCommand({
            siblingSessionId: sibling,
            reportPath: REPORT,
            relayPort: MODEL_RELAY_PORT,
            socketDir: SESSION_SOCKET_DIR_IN_SANDBOX,
          }),
          {
            env: { HARNESS_LAB_API_KEY: own, HARNESS_LAB_BASE_URL: `${sandbox.modelUrl}/v1` },
            timeoutMs: 180_000,
          },
        );
        assert.equal(r.exitCode, 0, r.output);
        const report = readProbeReport(join(logs, 'agent', 'escape-probe.json'));
        assertEscapesRefused(report, {
          hostPorts: [
            { name: 'capture proxy', port: proxy.port },
            { name: 'engine', port: portOf(engine.url) },
            { name: 'bystander service', port: (side.address() as AddressInfo).port },
          ],
          relayPort: MODEL_RELAY_PORT,
        });
        assert.ok(
          report.interfaces.includes('lo') && report.interfaces.length === 2,
          `loopback plus its one network interface: ${report.interfaces.join(', ')}`,
        );
        assertCaptureIntact(proxy, { sessionIds: beforeIds, siblingId: sibling, siblingCalls: 1 }, own);
        assert.equal(proxy.sessions.calls(own).length, 2, 'its own probe calls were captured');
      } finally {
        await sandbox.remove();
        await socket.close();
      }
      await assert.rejects(docker.getNetwork(networkName).inspect(), 'the per-rollout network is removed with the sandbox');
      assert.deepEqual(await containersOf(docker, process.pid), []);
    });
  });

  test(
    'batch path, GRPO group of 2 on the docker backend: every member refused everything, its siblings intact',
    { timeout: 600_000 },
    async () => {
      // The scripted policies answer through the in-repo vLLM-shaped engine: this test is about the sandbox, not the model.
      const previousEngine = process.env.HARNESS_LAB_POLICY_ENGINE;
      process.env.HARNESS_LAB_POLICY_ENGINE = 'fake';
      const taskDir = taskWithPolicy('hello-file', SLEEP_POLICY);
      const plan = planBatch({
        tasks: [taskDir],
        harnesses: ['react'],
        groupSize: 2,
        parallel: 2,
        timeoutSec: 240,
        outDir: join(outDir(), 'batch'),
      });
      writeBatch(plan);
      const batchId = plan.manifest.batch_id;
      const members = plan.states.map((s) => attemptSessionId(batchId, s.rollout_id, 0));
      const earlier = `${batchId}.earlier-attempt`;
      // One policy for the whole group (the embedded engine reads it when the batch opens): each member
      // runs the probe against every sibling id, its own skipped (it is the key it holds).
      const probe = escapeProbeCommand({
        siblingSessionIds: [...members, earlier],
        reportPath: REPORT,
        relayPort: MODEL_RELAY_PORT,
        socketDir: SESSION_SOCKET_DIR_IN_SANDBOX,
      });
      writeFileSync(
        join(taskDir, 'policy.json'),
        JSON.stringify({
          name: 'escape-group',
          rules: [
            {
              when: { last_message: 'Create a file named' },
              then: { call: { tool: '^bash$', input: `${probe} && printf 'Hello, world!' > hello.txt` } },
            },
          ],
          fallback: { say: 'Done.' },
        }),
      );

      // The real docker backend; the wrapper only lets the test see the batch's proxy: it plants the
      // earlier attempt's session when the batch opens and reads the capture before the runner closes it.
      let proxy: CaptureProxy | undefined;
      let captured: { calls: Map<string, number>; intact: unknown } | undefined;
      const observed: BackendModule = {
        ...dockerBackendModule,
        open: async (ctx) => {
          const opened = await dockerBackendModule.open(ctx);
          const p = (proxy = (opened.capture as unknown as { proxy: CaptureProxy }).proxy);
          await siblingWithACall(p, earlier);
          const close = opened.capture.close.bind(opened.capture);
          opened.capture.close = async () => {
            let intact: unknown = true;
            try {
              for (const own of members)
                assertCaptureIntact(p, { sessionIds: [...members, earlier], siblingId: earlier, siblingCalls: 1 }, own);
            } catch (err) {
              intact = err; // the runner only logs a failing close: rethrown below
            }
            captured = { calls: new Map([...members, earlier].map((id) => [id, p.sessions.calls(id).length])), intact };
            await close();
          };
          return opened;
        },
      };
      const log: string[] = [];
      try {
        const summary = await runBatch({
          dir: plan.dir,
          module: observed,
          log: (l) => log.push(l),
        });
        assert.deepEqual([summary.done + summary.discarded, summary.stopped], [2, null], log.join('\n'));
      } finally {
        if (previousEngine === undefined) delete process.env.HARNESS_LAB_POLICY_ENGINE;
        else process.env.HARNESS_LAB_POLICY_ENGINE = previousEngine;
      }
      assert.ok(captured, 'the capture was read before the batch closed it');
      // No session minted or deleted from inside any member, none could delete its own, the earlier attempt's call untouched.
      if (captured.intact !== true) throw captured.intact;

      const states = readRolloutStates(plan.dir);
      assert.equal(states.length, 2);
      const enginePort = portOf(proxy!.engineUrl);
      for (const s of states) {
        const attempt = s.attempts[0]!;
        assert.equal(attempt.session_id, members[s.member], 'each member ran under the session the test planned for it');
        assert.deepEqual([s.state, s.class, s.reward], ['done', 'completed', 1], `${s.rollout_id}: ${s.error ?? ''}\n${log.join('\n')}`);
        const report = readProbeReport(join(plan.dir, attempt.out_dir, 'agent', 'escape-probe.json'));
        assertEscapesRefused(report, {
          hostPorts: [
            { name: 'batch capture proxy', port: proxy!.port },
            { name: 'engine', port: enginePort },
            { name: 'bystander service', port: (side.address() as AddressInfo).port },
          ],
          relayPort: MODEL_RELAY_PORT,
          noNetwork: true,
        });
        const tried = report.attempts.map((a) => a.name);
        // The member holds a minted key, not its session id, so the probe cannot tell its own id from a
        // sibling's and tries every member and the earlier session: each must be refused all the same.
        const siblings = members.length + 1;
        assert.equal(
          tried.filter((n) => /^GET sibling \d+ calls \(no key\)$/.test(n)).length,
          siblings,
          `member ${s.member} tried every session id of the batch`,
        );
        // Its own session holds its two probe calls and the harness's own, none of the sibling's.
        const own = readFileSync(join(plan.dir, 'capture', 'sessions', `${attempt.session_id}.jsonl`), 'utf8');
        assert.equal(
          (own.match(/escape probe: say anything/g) ?? []).length >= 2,
          true,
          'its own probe calls were captured in its own session',
        );
        assert.ok(!own.includes('the answer is 42'), "no sibling's call landed in its session");
        // What the runner counted when this member ended is what the capture held at the batch's end:
        // the sibling still running beside it took nothing away.
        assert.equal(captured.calls.get(attempt.session_id), s.n_calls, `member ${s.member}'s calls are intact`);
        assert.ok(s.n_calls >= 4, `member ${s.member}: its two harness calls and two probe calls are kept`);
      }
      assert.deepEqual(await containersOf(docker, process.pid), [], 'no sandbox of the batch is left');
    },
  );
});
