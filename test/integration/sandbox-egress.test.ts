// An egress sandbox (and an image build) against this machine: services listen on the host's own
// addresses (every interface address, the sandbox network's gateway, Docker's default gateway), on a
// private address and on 169.254.169.254, both put on this machine's loopback for the test,
// so no probe ever leaves it. From the sandbox every one of them must fail, while a container on
// Docker's default bridge (no lab firewall) reaches them, which shows the probes could succeed; a task
// that names a host reaches that host and nothing else. Limits and privileges are read from the daemon.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync, cpSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type Docker from 'dockerode';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { SessionSocket } from '../../src/capture/session-socket.js';
import { LABEL } from '../../src/sandbox/docker-client.js';
import { BUILD_NETWORK, DEFAULT_LIMITS, DockerRuntime } from '../../src/sandbox/docker.js';
import { bridgeNameFor, chainNames } from '../../src/sandbox/egress-firewall.js';
import { BASE_IMAGE } from '../../src/sandbox/images.js';
import { loadTask, type HarborTask } from '../../src/tasks/task.js';
import { EXAMPLES, dockerReady, outDir } from './sandbox-fixtures.js';

const LO_LABEL = 'lo:hltest';
const PRIVATE_ADDRESS = '10.255.77.1';
const METADATA_ADDRESS = '169.254.169.254';

interface Target {
  name: string;
  address: string;
  port: number;
}

/** A node script run in a container: connects to each target, says open (with the greeting) or the error. */
function probeScript(targets: Target[], node = 'node'): string {
  const source = `
const net = require('net');
const targets = ${JSON.stringify(targets)};
Promise.all(targets.map((t) => new Promise((resolve) => {
  const s = net.connect({ host: t.address, port: t.port });
  const done = (result) => { s.destroy(); resolve({ ...t, result }); };
  s.setTimeout(4000, () => done('timeout'));
  s.on('data', (d) => done('open:' + d.toString()));
  s.on('error', (e) => done(e.code || e.message));
}))).then((r) => console.log('PROBE ' + JSON.stringify(r)));`;
  return `printf '%s' '${Buffer.from(source).toString('base64')}' | base64 -d > /tmp/probe.js && ${node} /tmp/probe.js`;
}

function parseProbe(output: string): { name: string; result: string }[] {
  const line = output.split('\n').find((l) => l.startsWith('PROBE '));
  assert.ok(line, `the probe printed its results:\n${output}`);
  return JSON.parse(line.slice(6)) as { name: string; result: string }[];
}

/** The IPv4 address of a (possibly down) interface of this machine. */
function interfaceAddress(name: string): string | undefined {
  return /inet (\d+\.\d+\.\d+\.\d+)\//.exec(execFileSync('ip', ['-4', '-o', 'addr', 'show', 'dev', name], { encoding: 'utf8' }))?.[1];
}

async function listen(address: string): Promise<Server> {
  const server = createServer((socket) => socket.end('host-service'));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, address, resolve);
  });
  return server;
}

describe('egress sandboxes are cut off from this machine and its networks', { concurrency: false }, () => {
  let docker: Docker;
  let runtime: DockerRuntime;
  let proxy: CaptureProxy;
  const servers: Server[] = [];
  const targets: Target[] = [];

  async function addTarget(name: string, address: string): Promise<void> {
    const server = await listen(address);
    servers.push(server);
    targets.push({ name, address, port: (server.address() as { port: number }).port });
  }

  before(async () => {
    docker = await dockerReady();
    runtime = await DockerRuntime.connect();
    for (const [name, list] of Object.entries(networkInterfaces())) {
      for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) await addTarget(`host interface ${name}`, a.address);
    }
    // Host-local /32s on loopback (the kernel has no dummy interfaces here): traffic to them never leaves.
    for (const address of [PRIVATE_ADDRESS, METADATA_ADDRESS])
      execFileSync('ip', ['addr', 'add', `${address}/32`, 'dev', 'lo', 'label', LO_LABEL]);
    // Node lists only interfaces that are up; docker0 is down while no container uses it.
    const defaultGateway = interfaceAddress('docker0');
    assert.ok(defaultGateway, "Docker's default bridge has a gateway on this machine");
    if (!targets.some((t) => t.address === defaultGateway)) await addTarget("Docker's default gateway", defaultGateway);
    await addTarget('private address (10/8)', PRIVATE_ADDRESS);
    await addTarget('metadata address', METADATA_ADDRESS);
    proxy = await CaptureProxy.start({ engineUrl: 'http://127.0.0.1:9', model: 'm', captureLevel: 'tokens' });
  });

  after(async () => {
    for (const s of servers) s.close();
    await proxy?.close();
    for (const address of [PRIVATE_ADDRESS, METADATA_ADDRESS]) {
      try {
        execFileSync('ip', ['addr', 'del', `${address}/32`, 'dev', 'lo']);
      } catch {
        // not added
      }
    }
  });

  async function egressSandbox(task: HarborTask) {
    const session = proxy.sessions.create().session_id;
    const socket = await SessionSocket.open(proxy, session);
    const sandbox = await runtime.create({
      task,
      harness: 'react',
      sessionId: session,
      image: BASE_IMAGE,
      hostLogsDir: outDir(),
      mounts: [],
      env: {},
      model: { proxyUrl: proxy.url, socketDir: socket.dir },
    });
    return { sandbox, session, close: async () => (await sandbox.remove(), await socket.close()) };
  }

  test(
    'a container on the default bridge (no lab firewall) reaches every target: the probes can succeed',
    { timeout: 120_000 },
    async () => {
      const container = await docker.createContainer({
        Image: BASE_IMAGE,
        Entrypoint: [],
        Cmd: ['bash', '-c', probeScript(targets, '/opt/node')],
        Tty: true,
        HostConfig: { NetworkMode: 'bridge', Binds: [`${process.execPath}:/opt/node:ro`], AutoRemove: false },
        Labels: { [LABEL.kind]: 'test' },
      });
      try {
        await container.start();
        await container.wait();
        const logs = ((await container.logs({ stdout: true, stderr: true })) as unknown as Buffer).toString('latin1');
        const results = parseProbe(logs.replace(/\r/g, ''));
        const closed = results.filter((r) => r.result !== 'open:host-service');
        assert.deepEqual(closed, [], 'without the lab firewall every host service answers');
      } finally {
        await container.remove({ force: true });
      }
    },
  );

  test(
    'an egress sandbox: host addresses, its gateway, a private address and 169.254.169.254 all fail; limits and no-new-privileges set',
    { timeout: 180_000 },
    async () => {
      const task = { ...loadTask(join(EXAMPLES, 'hello-file')), agentNetworkMode: 'public' as const };
      const { sandbox, session, close } = await egressSandbox(task);
      try {
        assert.equal(sandbox.isolation, 'egress');
        const [info] = await docker.listContainers({ filters: JSON.stringify({ label: [`${LABEL.session}=${session}`] }) });
        const container = await docker.getContainer(info!.Id).inspect();
        const networkName = container.HostConfig.NetworkMode!;
        const bridge = bridgeNameFor(networkName);
        const network = await docker.getNetwork(networkName).inspect();
        assert.equal(network.Options?.['com.docker.network.bridge.name'], bridge);
        const gateway = interfaceAddress(bridge);
        assert.ok(gateway, 'the sandbox network has a gateway on this machine');
        await addTarget("the sandbox network's own gateway", gateway);
        const rules = execFileSync('iptables', ['-S'], { encoding: 'utf8' });
        assert.match(rules, new RegExp(`-A INPUT -i ${bridge} -j ${chainNames(bridge).input}`));
        assert.match(rules, new RegExp(`-A DOCKER-USER -i ${bridge} -j ${chainNames(bridge).forward}`));

        const r = await sandbox.exec(probeScript(targets), { timeoutMs: 60_000 });
        const results = parseProbe(r.output);
        assert.equal(results.length, targets.length);
        const reached = results.filter((x) => x.result.startsWith('open'));
        assert.deepEqual(reached, [], 'nothing on this machine or its networks answers an egress sandbox');
        // Refused at once (ICMP port unreachable), not left to time out.
        assert.deepEqual([...new Set(results.map((x) => x.result))], ['ECONNREFUSED'], JSON.stringify(results));
        const v6 = await sandbox.exec('cat /proc/sys/net/ipv6/conf/all/disable_ipv6', { timeoutMs: 10_000 });
        assert.equal(v6.output.trim(), '1', 'IPv6 (link-local to the host included) is off');

        assert.equal(container.HostConfig.PidsLimit, DEFAULT_LIMITS.pids);
        assert.equal(
          container.HostConfig.Memory,
          (task.environment.memoryMb ?? DEFAULT_LIMITS.memoryMb) * 1024 * 1024,
          "the task's memory_mb, else the default",
        );
        assert.ok((container.HostConfig.NanoCpus ?? 0) > 0, 'a CPU limit');
        assert.deepEqual(container.HostConfig.SecurityOpt, ['no-new-privileges:true']);
        assert.ok(container.HostConfig.CapDrop?.includes('NET_RAW') && container.HostConfig.CapDrop.includes('MKNOD'));
        const status = await sandbox.exec("grep -E '^NoNewPrivs' /proc/self/status", { timeoutMs: 10_000 });
        assert.match(status.output, /NoNewPrivs:\s+1/);
      } finally {
        // The gateway goes with the network: no later probe may aim at an address that has left this machine.
        const gatewayTarget = targets.findIndex((t) => t.name === "the sandbox network's own gateway");
        if (gatewayTarget >= 0) {
          targets.splice(gatewayTarget, 1);
          servers.pop()?.close();
        }
        const removedNetwork = (await docker.listContainers({ filters: JSON.stringify({ label: [`${LABEL.session}=${session}`] }) }))[0]
          ?.HostConfig.NetworkMode;
        await close();
        if (removedNetwork)
          assert.doesNotMatch(
            execFileSync('iptables', ['-S'], { encoding: 'utf8' }),
            new RegExp(chainNames(bridgeNameFor(removedNetwork)).input),
            'the chains go with the network',
          );
      }
    },
  );

  test('a task that names a host reaches that host only; its own limits replace the defaults', { timeout: 180_000 }, async () => {
    const base = loadTask(join(EXAMPLES, 'hello-file'));
    const task: HarborTask = {
      ...base,
      agentNetworkMode: 'public',
      environment: { ...base.environment, allowedHosts: [PRIVATE_ADDRESS], pidsLimit: 300, memoryMb: 1024 },
    };
    const { sandbox, session, close } = await egressSandbox(task);
    try {
      const results = parseProbe((await sandbox.exec(probeScript(targets), { timeoutMs: 60_000 })).output);
      const reached = results.filter((x) => x.result.startsWith('open')).map((x) => x.name);
      assert.deepEqual(reached, ['private address (10/8)'], JSON.stringify(results));
      const [info] = await docker.listContainers({ filters: JSON.stringify({ label: [`${LABEL.session}=${session}`] }) });
      const container = await docker.getContainer(info!.Id).inspect();
      assert.equal(container.HostConfig.PidsLimit, 300);
      assert.equal(container.HostConfig.Memory, 1024 * 1024 * 1024);
    } finally {
      await close();
    }
  });

  test('an image build runs on the lab build network: its RUN steps cannot reach the host either', { timeout: 300_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hl-build-probe-'));
    cpSync(join(EXAMPLES, 'hello-file'), join(dir, 'hello-file'), { recursive: true });
    const tries = targets
      .map(
        (t) =>
          `(timeout 4 bash -c 'exec 3<>/dev/tcp/${t.address}/${t.port} && head -c 12 <&3' && echo " OPEN ${t.address}") || echo "CLOSED ${t.address}"`,
      )
      .join('; ');
    writeFileSync(
      join(dir, 'hello-file', 'environment', 'Dockerfile'),
      `FROM ${BASE_IMAGE}\nRUN echo nonce-${randomBytes(6).toString('hex')}; ${tries}\n`,
    );
    const task = loadTask(join(dir, 'hello-file'));
    const lines: string[] = [];
    const tag = await runtime.prepareImage(task, (line) => lines.push(line));
    try {
      const out = lines.join('\n');
      // Lines the RUN step printed (the build log also echoes the command itself).
      assert.equal((out.match(/^CLOSED /gm) ?? []).length, targets.length, out);
      assert.doesNotMatch(out, /host-service/, out);
      const network = await docker.getNetwork(BUILD_NETWORK).inspect();
      assert.equal(network.Options?.['com.docker.network.bridge.name'], bridgeNameFor('build'));
      assert.match(readFileSync('/proc/net/dev', 'utf8'), new RegExp(`${bridgeNameFor('build')}:`));
    } finally {
      await docker
        .getImage(tag)
        .remove({ force: true })
        .catch(() => {});
    }
  });
});
