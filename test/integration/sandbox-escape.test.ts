// A policy that tries to break out, in a real Docker sandbox. Through the `run` path (openLab +
// runRollout, the lab's minted admin key, the reference harness running the escape probe as its shell
// tool) in a task that declares no network; and at the runtime level in a task that allows the
// internet, where the container's network config is checked as well. Either way: every admin and
// session route refused whatever key, the sibling's calls out of reach, no session minted or deleted,
// the engine, the proxy and a bystander service on host loopback unreachable, the socket read-only,
// its own model route working (streamed too), and the verifier without either key. The egress case
// runs a proxy with no admin key at all: the refusals come from the design, not from a secret.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type Docker from 'dockerode';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { SessionSocket } from '../../src/capture/session-socket.js';
import { LABEL } from '../../src/sandbox/docker-client.js';
import { DockerRuntime } from '../../src/sandbox/docker.js';
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
  const res = await fetch(`${proxy.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${id}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'the answer is 42' }] }) });
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
    const probe = escapeProbeCommand({ siblingSessionId: sibling, reportPath: REPORT, relayPort: MODEL_RELAY_PORT, socketDir: SESSION_SOCKET_DIR_IN_SANDBOX });
    const taskDir = taskWithPolicy('hello-file', { name: 'escape', rules: [{ when: { last_message: 'Create a file named' }, then: { call: { tool: '^bash$', input: probe } } }], fallback: { say: 'Done.' } });
    const engine = await startPolicyEngine(join(taskDir, 'policy.json'), 'fake');
    const lab = await openLab({ taskDir, harness: 'react', sandbox: 'docker', engineUrl: engine.url, model: engine.model, outDir: outDir(), handleSignals: false });
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
      const probeCalls = (r.rollout?.calls ?? []).filter((c) => JSON.stringify((c.request.body as { messages?: unknown[] }).messages?.[0]).includes('escape probe: say anything'));
      assert.equal(probeCalls.length, 2, 'its own two probe calls (plain and streamed) were captured in its own session');
      assert.equal(r.verifier?.session_key_absent, true);
      assert.equal(r.verifier?.admin_key_absent, true);
      assert.ok(!readFileSync(join(r.out_dir, 'rollout.json'), 'utf8').includes(lab.rolloutOptions.adminKey!), 'the admin key is in no rollout file');
      assert.deepEqual(await containersOf(docker, process.pid), []);
      assert.deepEqual(readdirSync(tmpdir()).filter((n) => n.startsWith(`hl-sock-${process.pid}-`)), [], 'the session socket and its folder are gone with the rollout');
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
      const sandbox = await runtime.create({ task, harness: 'react', sessionId: own, image: await runtime.prepareImage(task), hostLogsDir: logs, mounts: [], env: {}, model: { proxyUrl: proxy.url, socketDir: socket.dir } });
      let networkName = '';
      try {
        assert.equal(sandbox.isolation, 'egress');
        // The container's network, from the daemon: its own bridge network, nothing shared with the host.
        const [info] = await docker.listContainers({ filters: JSON.stringify({ label: [`${LABEL.session}=${own}`] }) });
        const container = await docker.getContainer(info!.Id).inspect();
        networkName = container.HostConfig.NetworkMode ?? '';
        assert.match(networkName, /^harness-lab-[0-9a-f]{12}$/);
        assert.deepEqual(Object.keys(container.NetworkSettings.Networks), [networkName], 'attached to its own network only (not host, not the default bridge)');
        assert.deepEqual(container.HostConfig.CapDrop, ['NET_RAW']);
        assert.ok(container.Mounts.some((m) => m.Destination === SESSION_SOCKET_DIR_IN_SANDBOX && m.RW === false), 'the socket folder is mounted read-only');
        const network = await docker.getNetwork(networkName).inspect();
        assert.equal(network.Driver, 'bridge');
        assert.equal(network.Internal, false, 'egress allowed');
        assert.equal(network.Options?.['com.docker.network.bridge.enable_icc'], 'false');
        assert.equal(network.Labels?.[LABEL.owner]?.endsWith(`/${process.pid}`), true);
        // Host loopback is not routed from the bridge (martian unless route_localnet is on).
        const bridge = `br-${network.Id.slice(0, 12)}`;
        assert.equal(readFileSync(`/proc/sys/net/ipv4/conf/${bridge}/route_localnet`, 'utf8').trim(), '0');

        const r = await sandbox.exec(escapeProbeCommand({ siblingSessionId: sibling, reportPath: REPORT, relayPort: MODEL_RELAY_PORT, socketDir: SESSION_SOCKET_DIR_IN_SANDBOX }), {
          env: { HARNESS_LAB_API_KEY: own, HARNESS_LAB_BASE_URL: `${sandbox.modelUrl}/v1` },
          timeoutMs: 180_000,
        });
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
        assert.ok(report.interfaces.includes('lo') && report.interfaces.length === 2, `loopback plus its one network interface: ${report.interfaces.join(', ')}`);
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
});
