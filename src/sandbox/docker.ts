// Docker backend: one labelled container per rollout, commands via exec, /logs bind mounts. The
// container never shares the host's network: a task that declares no internet gets none at all
// (`--network none`), one that allows it gets a network of its own with outbound access; either way
// the capture is reached only through the rollout's session socket, bind-mounted in and relayed to
// 127.0.0.1 inside by the container's main process (model-relay.ts), and the host's loopback (the
// proxy's admin routes, the engine, anything else bound to 127.0.0.1) is not addressable from inside.
import { createHash, randomBytes } from 'node:crypto';
import { appendFileSync, mkdirSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { availableParallelism, hostname } from 'node:os';
import { join, relative } from 'node:path';
import { PassThrough } from 'node:stream';
import type Docker from 'dockerode';
import { shellQuote } from '../harness/registry.js';
import type { HarborTask } from '../tasks/task.js';
import { TaskError } from '../tasks/task.js';
import { LABEL, connectDocker, followProgress, imageExists } from './docker-client.js';
import { applyEgressFirewall, bridgeNameFor, firewalledBridges, removeEgressFirewall, resolveAllowedHosts } from './egress-firewall.js';
import { BASE_IMAGE, tarDirectory } from './images.js';
import { MODEL_RELAY_PORT, RELAY_READY_SCRIPT, SESSION_SOCKET_DIR_IN_SANDBOX, relayCommand } from './model-relay.js';
import {
  OUTPUT_TAIL,
  SandboxError,
  processAlive,
  type ExecOptions,
  type ExecResult,
  type Isolation,
  type Sandbox,
  type SandboxPaths,
  type SandboxStatus,
  type SandboxRuntime,
  type SandboxSpec,
} from './runtime.js';

const HOME = '/tmp/harness-home';
const BIN_DIR = '/opt/harness-lab/bin';
const HARNESS_DIR = '/opt/harness-lab/harnesses';

function owner(): string {
  return `${hostname()}/${process.pid}`;
}

/** Whether the lab process that labelled a container or network (host/pid) is gone from this host. */
function gone(labels: Record<string, string> | undefined): boolean {
  const [host, pidText] = (labels?.[LABEL.owner] ?? '').split('/');
  const pid = Number(pidText);
  return host === hostname() && Number.isInteger(pid) && !processAlive(pid);
}

/**
 * A task's image tag: its name as a Docker-safe slug and the hash of its build context over its base
 * images' ids (a rebuilt base image gives new task images too). The one rule, for docker and k8s.
 */
export function taskImageTag(taskName: string, contextDir: string, baseImageIds: readonly string[]): string {
  const slug =
    taskName
      .toLowerCase()
      .replace(/[^a-z0-9_.-]+/g, '-')
      .replace(/^[-.]+/, '') || 'task';
  return `harness-lab/task-${slug}:${contextHash(contextDir, baseImageIds)}`;
}

/** Content hash of the build context: the image tag changes exactly when the environment does. */
export function contextHash(dir: string, baseImageIds: readonly string[] = []): string {
  const h = createHash('sha256');
  for (const id of baseImageIds) h.update(`FROM ${id}\0`);
  const walk = (d: string) => {
    for (const name of readdirSync(d).sort()) {
      const p = join(d, name);
      const st = statSync(p);
      if (st.isDirectory()) walk(p);
      else
        h.update(`${relative(dir, p)}\0${st.mode & 0o111 ? 'x' : '-'}\0`)
          .update(readFileSync(p))
          .update('\0');
    }
  };
  walk(dir);
  return h.digest('hex').slice(0, 12);
}

/** The FROM images of a Dockerfile (build-stage names excluded). */
export function dockerfileBases(text: string): string[] {
  const stages = new Set<string>();
  const out: string[] = [];
  for (const line of text.split(/\r?\n/)) {
    const m = /^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?/i.exec(line);
    if (!m) continue;
    if (!stages.has(m[1]!.toLowerCase())) out.push(m[1]!);
    if (m[2]) stages.add(m[2].toLowerCase());
  }
  return out;
}

/**
 * The sandbox's network for the agent phase: `allowlist` needs an egress-filtering sidecar this
 * backend does not have, so it gets no network (stricter than asked, and reported as such).
 */
export function sandboxIsolation(task: HarborTask): Exclude<Isolation, 'none'> {
  return task.agentNetworkMode === 'public' ? 'egress' : 'no-network';
}

/**
 * A per-rollout bridge network with outbound access; containers on it cannot reach one another. Its
 * bridge has a name the lab knows, so its firewall (egress-firewall.ts) can cut it off from the host.
 */
export function egressNetworkSpec(name: string, spec: SandboxSpec): Docker.NetworkCreateOptions {
  return {
    Name: name,
    Driver: 'bridge',
    CheckDuplicate: true,
    Internal: false,
    Labels: { [LABEL.kind]: 'network', [LABEL.session]: spec.sessionId, [LABEL.owner]: owner() },
    Options: { 'com.docker.network.bridge.enable_icc': 'false', 'com.docker.network.bridge.name': bridgeNameFor(name) },
  };
}

/** The network image builds run on: a bridge of the lab's own, behind the same firewall as egress sandboxes. */
export const BUILD_NETWORK = 'harness-lab-build';

/**
 * The build network of a task naming `allowedHosts`: the shared one when it names none, else one per
 * set of hosts, so the hosts one task opens never open another task's build.
 */
export function buildNetworkFor(allowedHosts: readonly string[]): string {
  const hosts = [...new Set(allowedHosts.map((h) => h.trim().toLowerCase()).filter(Boolean))].sort();
  if (!hosts.length) return BUILD_NETWORK;
  return `${BUILD_NETWORK}-${createHash('sha256').update(hosts.join('\n')).digest('hex').slice(0, 7)}`;
}

/** Build networks being made in this process, by name: concurrent builds wait for one. */
const buildNetworksInFlight = new Map<string, Promise<string>>();

/** Sandbox limits when the task sets none ([environment] cpus, memory_mb, pids_limit set them). */
export const DEFAULT_LIMITS = { cpus: 2, memoryMb: 4096, pids: 4096 };

/**
 * Capabilities a sandbox never needs: raw sockets (forged packets), device nodes, file capabilities,
 * chroot, audit. Kept: what installing packages and switching to the task's user take (chown, setuid,
 * setgid, file ownership, kill, binding a low port).
 */
export const DROPPED_CAPABILITIES = ['NET_RAW', 'MKNOD', 'SETFCAP', 'SETPCAP', 'SYS_CHROOT', 'AUDIT_WRITE'];

/**
 * The container the sandbox runs in: labels, caps, its own network namespace (none, or the given
 * egress network), the model relay as main process, /logs and session-socket bind mounts, read-only
 * extras. Raw sockets are dropped: nothing in the sandbox forges packets on the egress network.
 */
export function containerSpec(
  spec: SandboxSpec,
  workdir: string,
  network: { isolation: Exclude<Isolation, 'none'>; name?: string },
): Docker.ContainerCreateOptions {
  const env = spec.task.environment;
  if (!spec.model.socketDir)
    throw new SandboxError('the Docker sandbox reaches the capture only through a session socket, and none was given');
  if (network.isolation === 'egress' && !network.name) throw new SandboxError('an egress sandbox needs its own network');
  const node = `${BIN_DIR}/node`;
  const mounts = spec.mounts.some((m) => m.container === node)
    ? spec.mounts
    : [{ host: process.execPath, container: node, readOnly: true }, ...spec.mounts];
  return {
    Image: spec.image,
    Entrypoint: [],
    Cmd: relayCommand(node),
    // The relay runs as root so it can open the lab's socket whatever the image's USER; commands run
    // as the image's user (DockerSandbox.exec) unless the task names one.
    User: '0',
    WorkingDir: workdir,
    Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
    Labels: {
      [LABEL.kind]: 'sandbox',
      [LABEL.session]: spec.sessionId,
      [LABEL.task]: spec.task.name,
      [LABEL.harness]: spec.harness,
      [LABEL.owner]: owner(),
      ...spec.labels,
    },
    HostConfig: {
      NetworkMode: network.isolation === 'no-network' ? 'none' : network.name,
      Binds: [
        `${join(spec.hostLogsDir, 'agent')}:/logs/agent`,
        `${join(spec.hostLogsDir, 'verifier')}:/logs/verifier`,
        `${join(spec.hostLogsDir, 'artifacts')}:/logs/artifacts`,
        `${spec.model.socketDir}:${SESSION_SOCKET_DIR_IN_SANDBOX}:ro`,
        ...mounts.map((m) => `${m.host}:${m.container}${m.readOnly ? ':ro' : ''}`),
      ],
      CapDrop: DROPPED_CAPABILITIES,
      // No setuid binary or file capability gives a process more than its parent had.
      SecurityOpt: ['no-new-privileges:true'],
      Init: true,
      NanoCpus: Math.round(Math.min(env.cpus ?? DEFAULT_LIMITS.cpus, availableParallelism()) * 1e9),
      Memory: (env.memoryMb ?? DEFAULT_LIMITS.memoryMb) * 1024 * 1024,
      MemorySwap: (env.memoryMb ?? DEFAULT_LIMITS.memoryMb) * 1024 * 1024,
      PidsLimit: env.pidsLimit ?? DEFAULT_LIMITS.pids,
      // Egress is IPv4 through the lab's firewall; IPv6 (link-local to the host included) is off.
      ...(network.isolation === 'egress'
        ? { Sysctls: { 'net.ipv6.conf.all.disable_ipv6': '1', 'net.ipv6.conf.default.disable_ipv6': '1' } }
        : {}),
    },
  };
}

/** Task image builds under way in this process, by tag: concurrent rollouts of a task wait for one. */
const buildsInFlight = new Map<string, Promise<string>>();

export class DockerRuntime implements SandboxRuntime {
  readonly kind = 'docker' as const;
  readonly needsSessionSocket = true;
  private readonly owned = new Set<string>();
  private readonly ownedNetworks = new Set<string>();

  private constructor(readonly docker: Docker) {}

  static async connect(): Promise<DockerRuntime> {
    return new DockerRuntime(await connectDocker());
  }

  async prepareImage(task: HarborTask, log?: (line: string) => void): Promise<string> {
    const env = task.environment;
    const file = `${task.name}/environment/Dockerfile`;
    if (!env.dockerfile) {
      const image = env.dockerImage ?? BASE_IMAGE;
      if (!(await imageExists(this.docker, image))) {
        const field = env.dockerImage ? 'environment.docker_image' : undefined;
        throw new TaskError(
          env.dockerImage ? `${task.name}/task.toml` : file,
          field,
          `image ${image} is not available locally and no registry can be reached here; build the base images with \`harness-lab images\` and use ${BASE_IMAGE}`,
        );
      }
      return image;
    }
    const text = readFileSync(env.dockerfile, 'utf8');
    const baseIds: string[] = [];
    for (const base of dockerfileBases(text)) {
      if (base.includes('$')) continue; // build-arg expansion: let the build report it
      const info = await this.docker
        .getImage(base)
        .inspect()
        .catch(() => undefined);
      if (!info) {
        throw new TaskError(
          file,
          'FROM',
          `image ${base} is not available locally and cannot be pulled (no registry is reachable); start the task FROM ${BASE_IMAGE} (build it with \`harness-lab images\`)`,
        );
      }
      baseIds.push(info.Id);
    }
    const tag = taskImageTag(task.name, env.contextDir, baseIds);
    if (await imageExists(this.docker, tag)) return tag;
    // Rollouts of one task that start together share one build (a group of G would build G times).
    const building = buildsInFlight.get(tag);
    if (building) return building;
    const build = this.buildTaskImage(task, tag, file, log).finally(() => buildsInFlight.delete(tag));
    buildsInFlight.set(tag, build);
    return build;
  }

  private async buildTaskImage(task: HarborTask, tag: string, file: string, log?: (line: string) => void): Promise<string> {
    const env = task.environment;
    log?.(`building ${tag} from ${env.contextDir}`);
    const network = await this.ensureBuildNetwork(env.allowedHosts);
    const stream = await this.docker.buildImage(tarDirectory(env.contextDir), {
      t: tag,
      rm: true,
      forcerm: true,
      // The lab's build network, never the host's: a task's RUN step may fetch packages, but it must
      // not reach the host (the capture's admin routes, the engine, anything bound to its addresses),
      // the LAN or the metadata address.
      networkmode: network,
      labels: JSON.stringify({ [LABEL.kind]: 'task', [LABEL.task]: task.name }),
    } as object);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        followProgress(this.docker, stream, log),
        new Promise((_r, reject) => {
          timer = setTimeout(
            () =>
              reject(
                new TaskError(
                  `${task.name}/task.toml`,
                  'environment.build_timeout_sec',
                  `the image build took longer than ${env.buildTimeoutSec} s`,
                ),
              ),
            env.buildTimeoutSec * 1000,
          );
        }),
      ]);
    } catch (err) {
      if (err instanceof TaskError) throw err;
      throw new TaskError(file, undefined, `docker build failed: ${(err as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
    return tag;
  }

  /**
   * The build network for a task's allowed hosts, with its firewall (made once, kept: builds of every
   * lab on this host share it). Chains already in place are left alone, never removed and set again,
   * so a build running on the network meanwhile is never without them.
   */
  private async ensureBuildNetwork(allowedHosts: readonly string[]): Promise<string> {
    const name = buildNetworkFor(allowedHosts);
    const pending = buildNetworksInFlight.get(name);
    if (pending) return pending;
    const made = this.makeBuildNetwork(name, allowedHosts).finally(() => buildNetworksInFlight.delete(name));
    buildNetworksInFlight.set(name, made);
    return made;
  }

  private async makeBuildNetwork(name: string, allowedHosts: readonly string[]): Promise<string> {
    const exists = await this.docker
      .getNetwork(name)
      .inspect()
      .then(
        () => true,
        () => false,
      );
    if (!exists) {
      await this.docker
        .createNetwork({
          Name: name,
          Driver: 'bridge',
          CheckDuplicate: true,
          Labels: { [LABEL.kind]: 'network' },
          Options: { 'com.docker.network.bridge.name': bridgeNameFor(name), 'com.docker.network.bridge.enable_icc': 'false' },
        })
        .catch((err: Error) => {
          if (!/already exists/i.test(err.message)) throw err;
        });
    }
    const bridge = bridgeNameFor(name);
    if (!firewalledBridges().includes(bridge)) applyEgressFirewall(bridge, await resolveAllowedHosts(allowedHosts));
    return name;
  }

  async create(spec: SandboxSpec): Promise<Sandbox> {
    const env = spec.task.environment;
    for (const sub of ['agent', 'verifier', 'artifacts']) mkdirSync(join(spec.hostLogsDir, sub), { recursive: true });
    const imageInfo = await this.docker.getImage(spec.image).inspect();
    const workdir = env.workdir ?? (imageInfo.Config?.WorkingDir || '/app');
    const isolation = sandboxIsolation(spec.task);
    let network: string | undefined;
    const removeNetwork = async () => {
      if (!network) return;
      removeEgressFirewall(bridgeNameFor(network));
      await this.docker
        .getNetwork(network)
        .remove()
        .catch(() => {});
      this.ownedNetworks.delete(network);
    };
    if (isolation === 'egress') {
      network = `harness-lab-${randomBytes(6).toString('hex')}`;
      await this.docker.createNetwork(egressNetworkSpec(network, spec));
      this.ownedNetworks.add(network);
      // Before any container joins it: the sandbox never has a moment with a route to the host.
      try {
        applyEgressFirewall(bridgeNameFor(network), await resolveAllowedHosts(env.allowedHosts));
      } catch (err) {
        await removeNetwork();
        throw err;
      }
    }
    let container: Docker.Container;
    try {
      container = await this.docker.createContainer(containerSpec(spec, workdir, { isolation, name: network }));
    } catch (err) {
      await removeNetwork();
      throw err;
    }
    this.owned.add(container.id);
    const paths: SandboxPaths = { workdir, home: HOME, logs: '/logs', tests: '/tests', binDir: BIN_DIR, harnesses: HARNESS_DIR };
    const sandbox = new DockerSandbox(this.docker, container, paths, isolation, imageInfo.Config?.User || undefined, async () => {
      this.owned.delete(container.id);
      await removeNetwork();
    });
    try {
      await container.start();
      const ready = await sandbox.exec(RELAY_READY_SCRIPT, { user: '0', timeoutMs: 60_000 });
      if (ready.exitCode !== 0)
        throw new Error(
          `the model relay did not come up on 127.0.0.1:${MODEL_RELAY_PORT} (it runs the host's node at ${BIN_DIR}/node, so the image needs glibc): ${await relayLog(container)}`,
        );
      // The agent may run as another user ([agent].user): it must be able to write its HOME and logs.
      await sandbox.exec(`mkdir -p ${workdir} ${HOME} && chmod 1777 ${HOME} /logs/agent /logs/verifier /logs/artifacts`, { user: '0' });
    } catch (err) {
      let why = (err as Error).message;
      if (!why.includes('model relay')) why += `; the model relay: ${await relayLog(container)}`;
      await sandbox.remove();
      throw new SandboxError(`could not start the sandbox container for ${spec.task.name}: ${why}`);
    }
    return sandbox;
  }

  private async labContainers(): Promise<Docker.ContainerInfo[]> {
    return this.docker.listContainers({ all: true, filters: JSON.stringify({ label: [LABEL.owner] }) });
  }

  private async labNetworks(): Promise<Docker.NetworkInspectInfo[]> {
    return this.docker.listNetworks({ filters: JSON.stringify({ label: [LABEL.owner] }) });
  }

  async cleanupStale(): Promise<string[]> {
    const removed: string[] = [];
    for (const c of await this.labContainers()) {
      if (!gone(c.Labels)) continue;
      await this.docker
        .getContainer(c.Id)
        .remove({ force: true })
        .catch(() => {});
      removed.push(c.Id.slice(0, 12));
    }
    // Networks after their containers: Docker refuses to remove a network with endpoints.
    for (const n of await this.labNetworks()) {
      if (!gone(n.Labels)) continue;
      removeEgressFirewall(bridgeNameFor(n.Name));
      await this.docker
        .getNetwork(n.Id)
        .remove()
        .catch(() => {});
      removed.push(n.Name);
    }
    // Chains whose network is gone (a lab killed between removing the network and its chains).
    const live = new Set((await this.docker.listNetworks()).map((n) => bridgeNameFor(n.Name)));
    for (const bridge of firewalledBridges()) if (!live.has(bridge)) removeEgressFirewall(bridge);
    return removed;
  }

  /**
   * Removes the containers carrying `label=value` whose owner (the lab process that asked for them)
   * is gone, and only those: a create the daemon finished after its lab was killed leaves one behind
   * at any time, so a live server reaps its batches with this while its own rollouts keep running.
   */
  async removeStaleLabelled(label: string, value: string): Promise<string[]> {
    return this.removeLabelledWhere(label, value, (labels) => gone(labels));
  }

  /** Removes every lab container carrying `label=value` (a batch's, after its lab died); returns short ids. */
  async removeLabelled(label: string, value: string): Promise<string[]> {
    return this.removeLabelledWhere(label, value, () => true);
  }

  /** Removes the containers carrying `label=value` that `which` picks by their labels; returns short ids. */
  private async removeLabelledWhere(label: string, value: string, which: (labels: Record<string, string>) => boolean): Promise<string[]> {
    const labelled = await this.docker.listContainers({ all: true, filters: JSON.stringify({ label: [`${label}=${value}`] }) });
    const found = labelled.filter((c) => which(c.Labels));
    await Promise.all(
      found.map((c) =>
        this.docker
          .getContainer(c.Id)
          .remove({ force: true })
          .catch(() => {}),
      ),
    );
    for (const c of found) this.owned.delete(c.Id);
    return found.map((c) => c.Id.slice(0, 12));
  }

  async removeOwned(): Promise<void> {
    const mine = owner();
    const ids = new Set(this.owned);
    for (const c of await this.labContainers().catch(() => [])) if (c.Labels[LABEL.owner] === mine) ids.add(c.Id);
    await Promise.all(
      [...ids].map((id) =>
        this.docker
          .getContainer(id)
          .remove({ force: true })
          .catch(() => {}),
      ),
    );
    this.owned.clear();
    const nets = new Set(this.ownedNetworks);
    for (const n of await this.labNetworks().catch(() => [])) if (n.Labels?.[LABEL.owner] === mine) nets.add(n.Name);
    for (const name of nets) removeEgressFirewall(bridgeNameFor(name));
    await Promise.all(
      [...nets].map((name) =>
        this.docker
          .getNetwork(name)
          .remove()
          .catch(() => {}),
      ),
    );
    this.ownedNetworks.clear();
  }
}

/** The relay's own output (the container's main process), for an error message. */
async function relayLog(container: Docker.Container): Promise<string> {
  try {
    const state = (await container.inspect()).State;
    const logs = (await container.logs({ stdout: true, stderr: true, tail: 20 })) as unknown as Buffer;
    // Without a TTY the log is multiplexed: an 8-byte header (stream, 0, 0, 0, size) per frame.
    const parts: Buffer[] = [];
    for (let at = 0; at + 8 <= logs.length; at += 8 + logs.readUInt32BE(at + 4))
      parts.push(logs.subarray(at + 8, at + 8 + logs.readUInt32BE(at + 4)));
    const text = Buffer.concat(parts).toString('utf8').trim();
    return `${state.Running ? 'running' : `exited with ${state.ExitCode}`}${text ? `; output: ${text.slice(-800)}` : ''}`;
  } catch (err) {
    return (err as Error).message;
  }
}

class DockerSandbox implements Sandbox {
  readonly kind = 'docker' as const;
  readonly modelUrl = `http://127.0.0.1:${MODEL_RELAY_PORT}`;
  private killed = false;

  constructor(
    private readonly docker: Docker,
    private readonly container: Docker.Container,
    readonly paths: SandboxPaths,
    readonly isolation: Exclude<Isolation, 'none'>,
    /** The image's USER: what commands run as when the task names no user. */
    private readonly imageUser: string | undefined,
    private readonly onRemoved: () => Promise<void>,
  ) {}

  get id(): string {
    return this.container.id;
  }

  async exec(script: string, opts: ExecOptions = {}): Promise<ExecResult> {
    const t0 = Date.now();
    if (this.killed) throw new SandboxError('the sandbox was stopped');
    const env = {
      PATH: `${this.paths.binDir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
      HOME: this.paths.home,
      ...opts.env,
    };
    // kill-command: the command leads its own process group, whose id it leaves in a file, so a
    // deadline can stop the harness and everything it started while the sandbox stays up.
    const groupFile = opts.onTimeout === 'kill-command' ? `/tmp/.harness-lab-exec-${randomBytes(4).toString('hex')}.pgid` : undefined;
    const cmd = groupFile
      ? ['setsid', '-w', 'bash', '-c', `echo $$ > ${groupFile}; exec bash -c ${shellQuote(script)}`]
      : ['bash', '-c', script];
    const exec = await this.container.exec({
      Cmd: cmd,
      Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
      WorkingDir: opts.cwd ?? this.paths.workdir,
      ...((opts.user ?? this.imageUser) ? { User: opts.user ?? this.imageUser } : {}),
      AttachStdout: true,
      AttachStderr: true,
      AttachStdin: false,
      Tty: false,
    });
    const stream = await exec.start({ hijack: true, stdin: false });
    let tail = '';
    const sink = new PassThrough();
    sink.on('data', (b: Buffer) => {
      tail = (tail + b.toString('utf8')).slice(-OUTPUT_TAIL);
      if (opts.logFile) appendFileSync(opts.logFile, b);
    });
    this.docker.modem.demuxStream(stream, sink, sink);
    let timedOut = false;
    let timer: NodeJS.Timeout | undefined;
    const ended = new Promise<void>((resolve) => {
      stream.on('end', resolve);
      stream.on('close', resolve);
      stream.on('error', () => resolve());
    });
    let backstop: NodeJS.Timeout | undefined;
    if (opts.timeoutMs) {
      timer = setTimeout(() => {
        timedOut = true;
        if (!groupFile) {
          // An exec cannot be killed through the API; stopping the container ends every process in it.
          void this.kill();
          return;
        }
        const group = `-- -$(cat ${groupFile})`;
        void this.exec(`kill -TERM ${group} 2>/dev/null; sleep 2; kill -KILL ${group} 2>/dev/null; true`, { timeoutMs: 15_000 }).catch(
          () => {},
        );
        // A harness that left its process group still holds the stream open: then the sandbox goes.
        backstop = setTimeout(() => void this.kill(), 20_000);
      }, opts.timeoutMs);
    }
    await ended;
    clearTimeout(timer);
    clearTimeout(backstop);
    let exitCode: number | null = null;
    if (!timedOut) {
      for (let i = 0; i < 50; i++) {
        const info = await exec.inspect();
        if (!info.Running) {
          exitCode = info.ExitCode ?? null;
          break;
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    return { exitCode, timedOut, output: tail, ms: Date.now() - t0 };
  }

  async writeFile(path: string, content: string): Promise<void> {
    const dir = path.replace(/\/[^/]*$/, '') || '/';
    const b64 = Buffer.from(content, 'utf8').toString('base64');
    const r = await this.exec(`mkdir -p ${shellQuote(dir)} && printf '%s' '${b64}' | base64 -d > ${shellQuote(path)}`);
    if (r.exitCode !== 0) throw new SandboxError(`could not write ${path} in the sandbox: ${r.output.trim()}`);
  }

  async copyDirIn(hostDir: string, path: string): Promise<void> {
    const r = await this.exec(`mkdir -p ${shellQuote(path)}`);
    if (r.exitCode !== 0) throw new SandboxError(`could not create ${path} in the sandbox: ${r.output.trim()}`);
    await this.container.putArchive(tarDirectory(hostDir), { path });
  }

  async status(): Promise<SandboxStatus> {
    try {
      const st = (await this.container.inspect()).State;
      return { running: Boolean(st.Running), exitCode: st.Running ? null : (st.ExitCode ?? null), oomKilled: Boolean(st.OOMKilled) };
    } catch {
      return { running: false, exitCode: null, oomKilled: false };
    }
  }

  async kill(): Promise<void> {
    this.killed = true;
    await this.container.kill().catch(() => {});
  }

  async remove(): Promise<void> {
    this.killed = true;
    await this.container.remove({ force: true }).catch(() => {});
    await this.onRemoved();
  }
}
