// The test-suite provisioning (scripts/provision.ts) against a fake machine: what it installs and
// starts on a fresh one, that a second run and a provisioned machine are no-ops, that a starting
// dockerd is waited for and never doubled, and that without root it runs nothing it cannot and names
// every missing prerequisite with what to run.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ensureDockerd,
  formatPlan,
  needed,
  PATHS,
  plan,
  provision,
  realMachine,
  type DockerState,
  type Folder,
  type Machine,
} from '../../scripts/provision.js';
import { chromiumPath } from '../e2e/code-server.js';

const ALL: Folder[] = ['unit', 'integration', 'e2e'];

/** What each Debian package provides on the fake machine. */
const PACKAGES: Record<string, { command?: string; file?: string }> = {
  git: { command: 'git' },
  'docker.io': { command: 'dockerd' },
  debootstrap: { command: 'debootstrap' },
  'linux-perf': { command: 'perf' },
  chromium: { file: chromiumPath() },
  ripgrep: { command: 'rg' },
  'libkrb5-dev': { file: PATHS.gssapiHeader },
  make: { command: 'make' },
  'g++': { command: 'g++' },
  python3: { command: 'python3' },
};

class FakeMachine implements Machine {
  root = true;
  nodeMajor = 20;
  env: NodeJS.ProcessEnv = {};
  commands = new Set<string>();
  files = new Set<string>();
  /** 'up' answers; 'eacces' refuses this user; 'down' has no socket. */
  daemon: 'down' | 'up' | 'eacces' = 'down';
  dockerdProcesses: number[] = [];
  /** Polls a dockerd takes to answer once it runs. */
  pollsToAnswer = 2;
  dockerdExits = false;
  images = false;
  rootfs = false;
  harnessesMissing = ['@openai/codex@0.171.0', 'opencode-ai@1.18.33'];
  codeServer = false;
  ran: string[] = [];
  said: string[] = [];
  started = 0;
  private polls = 0;

  static provisioned(): FakeMachine {
    const m = new FakeMachine();
    for (const p of Object.values(PACKAGES)) {
      if (p.command) m.commands.add(p.command);
      if (p.file) m.files.add(p.file);
    }
    for (const f of PATHS.bundle) m.files.add(f);
    Object.assign(m, { daemon: 'up', dockerdProcesses: [7], images: true, rootfs: true, harnessesMissing: [], codeServer: true });
    return m;
  }

  has(command: string) {
    return this.commands.has(command);
  }
  exists(path: string) {
    return this.files.has(path);
  }
  async docker(): Promise<DockerState> {
    if (this.daemon === 'down' && this.dockerdProcesses.length && ++this.polls >= this.pollsToAnswer && !this.dockerdExits)
      this.daemon = 'up';
    if (this.daemon === 'up') return { ok: true };
    return { ok: false, reason: this.daemon === 'eacces' ? 'connect EACCES /var/run/docker.sock' : 'connect ENOENT /var/run/docker.sock' };
  }
  dockerdPids() {
    return [...this.dockerdProcesses];
  }
  alive(pid: number) {
    return this.dockerdProcesses.includes(pid);
  }
  async imagesReady() {
    return this.images;
  }
  rootfsCached() {
    return this.rootfs;
  }
  missingHarnesses() {
    return [...this.harnessesMissing];
  }
  codeServerReady() {
    return this.codeServer;
  }
  async run(command: string, args: string[]): Promise<number> {
    const line = [command === process.execPath ? 'node' : command, ...args].join(' ');
    this.ran.push(line);
    if (command === 'apt-get' && args[0] === 'install') {
      if (!this.root) return 100;
      for (const pkg of args.filter((a) => !a.startsWith('-') && a !== 'install')) {
        const p = PACKAGES[pkg];
        assert.ok(p, `unexpected package ${pkg}`);
        if (p.command) this.commands.add(p.command);
        if (p.file) this.files.add(p.file);
      }
    }
    if (line.endsWith('src/cli/main.ts images --verbose')) {
      if (this.daemon !== 'up' || (!this.commands.has('debootstrap') && !this.rootfs)) return 1;
      this.images = true;
      this.rootfs = true;
    }
    if (line === 'bash scripts/harness-install.sh') this.harnessesMissing = [];
    if (line === 'bash scripts/code-server-install.sh') {
      if (!this.commands.has('rg') || !this.files.has(PATHS.gssapiHeader)) return 1;
      this.codeServer = true;
    }
    if (line === 'node esbuild.mjs') for (const f of PATHS.bundle) this.files.add(f);
    return 0;
  }
  startDockerd() {
    assert.ok(this.root, 'dockerd started without root');
    assert.ok(this.commands.has('dockerd'), 'dockerd started before docker.io was installed');
    this.started++;
    const pid = 1000 + this.started;
    if (!this.dockerdExits) this.dockerdProcesses.push(pid);
    return { pid, log: '/var/log/harness-lab-dockerd.log' };
  }
  tail() {
    return 'failed to start daemon: error initializing graphdriver';
  }
  async sleep() {}
  say(line: string) {
    this.said.push(line);
  }
}

test('a provisioned machine: nothing runs, one line says everything is present', async () => {
  const m = FakeMachine.provisioned();
  assert.deepEqual(await provision(m, ALL), []);
  assert.deepEqual(m.ran, []);
  assert.equal(m.started, 0);
  assert.equal(m.said.length, 1);
  assert.match(
    m.said[0]!,
    /every prerequisite of the unit, integration, e2e tests is present \(git, docker\.io, debootstrap, linux-perf, chromium, code-server build tools, dockerd, base images, harness CLIs, code-server, bundle\)/,
  );
});

test('a fresh machine as root: one apt-get for every package, dockerd started once, then images, harness CLIs, code-server, bundle; a second run is a no-op', async () => {
  const m = new FakeMachine();
  const before = await plan(m, ALL);
  assert.deepEqual(
    before.map((s) => [s.prerequisite.id, s.state]),
    [
      'git',
      'docker.io',
      'debootstrap',
      'linux-perf',
      'chromium',
      'code-server build tools',
      'dockerd',
      'base images',
      'harness CLIs',
      'code-server',
      'bundle',
    ].map((id) => [id, 'install']),
  );
  assert.deepEqual(m.ran, [], 'planning runs nothing');
  assert.match(formatPlan(before), /^dockerd +would install: start dockerd .*\(after docker\.io\)$/m);

  assert.deepEqual(await provision(m, ALL), []);
  assert.deepEqual(m.ran, [
    'apt-get update -q',
    'apt-get install -y -q git docker.io debootstrap linux-perf chromium ripgrep libkrb5-dev make g++ python3',
    'node --import tsx src/cli/main.ts images --verbose',
    'bash scripts/harness-install.sh',
    'bash scripts/code-server-install.sh',
    'node esbuild.mjs',
  ]);
  assert.equal(m.started, 1);
  const said = m.said.join('\n');
  assert.match(said, /installing Debian packages with apt-get: git docker\.io/);
  assert.match(said, /docker\.io: the sandbox tests run real harnesses in Docker containers/);
  assert.match(said, /started dockerd \(pid 1001, log \/var\/log\/harness-lab-dockerd\.log\)/);
  assert.match(said, /harness CLIs: `bash scripts\/harness-install\.sh` .* — the real-harness tests run every pinned harness CLI/);
  assert.match(said, /every prerequisite is present now/);

  m.ran = [];
  m.said = [];
  assert.deepEqual(await provision(m, ALL), []);
  assert.deepEqual(m.ran, [], 'the second run installs nothing');
  assert.equal(m.started, 1, 'the second run starts no second dockerd');
});

test('a fresh machine without root: no apt-get, no dockerd; each missing prerequisite is named with what to run as root', async () => {
  const m = new FakeMachine();
  m.root = false;
  const missing = await provision(m, ALL);
  assert.deepEqual(m.ran, ['bash scripts/harness-install.sh', 'node esbuild.mjs'], 'only what needs no root runs');
  assert.equal(m.started, 0);
  const byId = Object.fromEntries(missing.map((s) => [s.prerequisite.id, s.detail]));
  assert.deepEqual(Object.keys(byId), [
    'git',
    'docker.io',
    'debootstrap',
    'linux-perf',
    'chromium',
    'code-server build tools',
    'dockerd',
    'base images',
    'code-server',
  ]);
  assert.match(byId['docker.io']!, /needs root; run as root `apt-get install -y docker\.io`/);
  assert.match(byId['code-server build tools']!, /`apt-get install -y ripgrep libkrb5-dev make g\+\+ python3`/);
  assert.equal(byId.dockerd, 'needs docker.io first');
  assert.equal(byId['base images'], 'needs dockerd and debootstrap first');
  const said = m.said.join('\n');
  assert.match(
    said,
    /MISSING dockerd: needs docker\.io first\n {2}needed because the sandbox tests need a running Docker engine; those tests will fail until it is there/,
  );
});

test('without root, with docker.io installed but no daemon: says how to start dockerd; images that need debootstrap say so', async () => {
  const m = new FakeMachine();
  m.root = false;
  m.commands.add('dockerd').add('debootstrap');
  const steps = await plan(m, ['integration']);
  const byId = Object.fromEntries(steps.map((s) => [s.prerequisite.id, s]));
  assert.equal(byId.dockerd!.state, 'missing');
  assert.match(byId.dockerd!.detail, /starting dockerd needs root; run as root `dockerd > \/var\/log\/dockerd\.log 2>&1 &`/);
  m.daemon = 'up';
  const up = Object.fromEntries((await plan(m, ['integration'])).map((s) => [s.prerequisite.id, s]));
  assert.equal(up.dockerd!.state, 'present');
  assert.match(up['base images']!.detail, /the first build runs debootstrap, which needs root/);
  m.rootfs = true;
  const cached = Object.fromEntries((await plan(m, ['integration'])).map((s) => [s.prerequisite.id, s]));
  assert.equal(cached['base images']!.state, 'install', 'a cached root filesystem needs no root');
});

test('the socket refusing this user, a DOCKER_HOST that does not answer, Node other than 20: each named', async () => {
  const refused = FakeMachine.provisioned();
  refused.root = false;
  refused.daemon = 'eacces';
  const dockerd = (await plan(refused, ['integration'])).find((s) => s.prerequisite.id === 'dockerd')!;
  assert.equal(dockerd.state, 'missing');
  assert.match(dockerd.detail, /refuses this user \(connect EACCES .*\); add the user to the docker group/);

  const remote = FakeMachine.provisioned();
  remote.daemon = 'down';
  remote.dockerdProcesses = [];
  remote.env = { DOCKER_HOST: 'tcp://127.0.0.1:2375' };
  const step = (await plan(remote, ['integration'])).find((s) => s.prerequisite.id === 'dockerd')!;
  assert.match(step.detail, /^DOCKER_HOST=tcp:\/\/127\.0\.0\.1:2375 does not answer/);
  await provision(remote, ['integration']);
  assert.equal(remote.started, 0, 'no local dockerd for a remote DOCKER_HOST');

  const node22 = FakeMachine.provisioned();
  node22.codeServer = false;
  node22.nodeMajor = 22;
  const cs = (await plan(node22, ['e2e'])).find((s) => s.prerequisite.id === 'code-server')!;
  assert.equal(cs.detail, 'code-server 4.100.3 needs Node 20 (this is Node 22)');
});

test('a dockerd that is already starting is waited for, never a second one', async () => {
  const m = new FakeMachine();
  m.commands.add('dockerd');
  m.dockerdProcesses = [42];
  m.pollsToAnswer = 4;
  await ensureDockerd(m, { pollMs: 1, timeoutMs: 100 });
  assert.equal(m.started, 0);
  assert.equal(m.daemon, 'up');
  assert.match(
    m.said.join('\n'),
    /dockerd is already running \(pid 42\) but does not answer yet; waiting for it instead of starting a second one/,
  );
});

test('a dockerd that never answers, or exits, fails with its pid and log', async () => {
  const stuck = new FakeMachine();
  stuck.dockerdProcesses = [42];
  stuck.pollsToAnswer = Infinity;
  await assert.rejects(
    ensureDockerd(stuck, { pollMs: 10, timeoutMs: 50 }),
    /the running dockerd \(pid 42\) did not answer within 0 s \(connect ENOENT/,
  );
  assert.equal(stuck.started, 0);

  const dying = new FakeMachine();
  dying.commands.add('dockerd');
  dying.dockerdExits = true;
  await assert.rejects(
    ensureDockerd(dying, { pollMs: 1, timeoutMs: 100 }),
    /dockerd \(pid 1001\) exited; the end of \/var\/log\/harness-lab-dockerd\.log:\nfailed to start daemon/,
  );
  const missing = await provision(dying, ['integration']);
  assert.deepEqual(
    missing.map((s) => s.prerequisite.id),
    ['dockerd', 'base images'],
  );
});

test('two runs starting dockerd at once: the one whose dockerd lost the race waits for the other', async () => {
  const m = new FakeMachine();
  m.commands.add('dockerd');
  m.dockerdExits = true;
  let polls = 0;
  const docker = m.docker.bind(m);
  m.docker = async () => {
    // The other run's dockerd appears right after ours exits, and answers two polls later.
    if (m.started && ++polls === 1) m.dockerdProcesses.push(77);
    if (polls >= 3) m.daemon = 'up';
    return docker();
  };
  await ensureDockerd(m, { pollMs: 1, timeoutMs: 100 });
  assert.equal(m.started, 1);
  assert.match(m.said.join('\n'), /the dockerd started here \(pid 1001\) exited, another one runs \(pid 77\); waiting for that one/);
});

test('each folder needs only its own prerequisites', () => {
  assert.deepEqual(
    needed(['unit']).map((p) => p.id),
    ['git', 'bundle'],
  );
  assert.deepEqual(
    needed(['integration']).map((p) => p.id),
    ['git', 'docker.io', 'debootstrap', 'linux-perf', 'dockerd', 'base images', 'harness CLIs'],
  );
  // The e2e tests run harnesses in Docker sandboxes from the installed .vsix, so they need those too.
  assert.deepEqual(
    needed(['e2e']).map((p) => p.id),
    [
      'git',
      'docker.io',
      'debootstrap',
      'chromium',
      'code-server build tools',
      'dockerd',
      'base images',
      'harness CLIs',
      'code-server',
      'bundle',
    ],
  );
});

test('the script: --plan lists every prerequisite of the folders given; an unknown folder is a usage error', () => {
  const script = join(__dirname, '..', '..', 'scripts', 'provision.ts');
  const r = spawnSync(process.execPath, ['--import', 'tsx', script, '--plan', 'unit'], { encoding: 'utf8', timeout: 60_000 });
  assert.ok(r.status === 0 || r.status === 1, r.stderr);
  assert.match(r.stdout, /^git +(present|would install|MISSING)/m);
  assert.match(r.stdout, /^bundle +(present|would install|MISSING)/m);
  assert.doesNotMatch(r.stdout, /dockerd/);
  const bad = spawnSync(process.execPath, ['--import', 'tsx', script, 'nope'], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /unknown test folder\(s\) nope; expected unit, integration, e2e/);
});

test('the real machine: a process named dockerd is found by name and followed until it exits; commands found in sbin too', async () => {
  const m = realMachine(() => undefined);
  // A stand-in named dockerd (a copy of sleep): provisioning must see it as a dockerd already running.
  const fake = join(mkdtempSync(join(tmpdir(), 'hl-provision-')), 'dockerd');
  copyFileSync('/bin/sleep', fake);
  const child = spawn(fake, ['30'], { stdio: 'ignore' });
  try {
    await new Promise((r) => child.once('spawn', r));
    assert.ok(m.dockerdPids().includes(child.pid!), `pid ${child.pid} among ${m.dockerdPids().join(', ')}`);
    assert.equal(m.alive(child.pid!), true);
  } finally {
    child.kill('SIGKILL');
  }
  await new Promise((r) => child.once('exit', r));
  assert.equal(m.dockerdPids().includes(child.pid!), false);
  assert.equal(m.alive(child.pid!), false);
  assert.equal(m.has('sh'), true);
  assert.equal(m.has('no-such-command-anywhere'), false);
});
