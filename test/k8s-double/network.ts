// The double's pod network: every pod its own network namespace (a `--network none` pause container:
// loopback only), Services as virtual IPs on that loopback (127.0.<n>.1, an /etc/hosts entry per
// name, as cluster DNS + kube-proxy give a ClusterIP), and every connection carried by a relay that
// enforces the NetworkPolicies in force when it is made, as a policy-enforcing CNI would:
//
//   client in pod A -> A's relay container (listens on the Service IP:port) -> a Unix socket on the
//   host -> policy check (A's egress, B's ingress) -> B's relay container (Unix socket) -> B's
//   127.0.0.1:targetPort
//
// A refused connection is closed before a byte passes. Host loopback ports a test exposes into a
// namespace (an engine on the host) are "outside the cluster": egress policies decide them with
// ipBlock rules. The kubelet's own paths (port-forward, probes) enter a pod's namespace directly and
// no policy applies to them, as on a real node.
import { mkdtempSync, readFileSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Docker from 'dockerode';
import type { KubeApiDouble } from './api-server.js';
import type { KObject } from './objects.js';

const RELAY_IMAGE = 'harness-lab/base-node:bookworm';
/** Where a pod running as a ServiceAccount reaches the API server (the `kubernetes` Service's stand-in). */
export const API_SERVICE_IP = '127.254.0.1';
export const API_SERVICE_PORT = 443;
const PAUSE_IMAGE = 'harness-lab/base:bookworm';

/**
 * Inside a pod: listeners from /relay/config.json (re-read as it grows) and /relay/in.sock -> 127.0.0.1:<port>.
 * /relay/loaded names the config generation whose listeners all listen: the double starts a pod's
 * containers only after it, as a CNI plugin finishes before the kubelet starts them.
 */
const RELAY_SCRIPT = `
const net = require('net'), fs = require('fs');
function pipe(a, b) { a.pipe(b).pipe(a); a.on('error', () => b.destroy()); b.on('error', () => a.destroy()); a.on('close', () => b.destroy()); b.on('close', () => a.destroy()); }
const open = new Map();
let loaded = -1;
function load() {
  let cfg; try { cfg = JSON.parse(fs.readFileSync('/relay/config.json', 'utf8')); } catch { return; }
  if (cfg.gen <= loaded) return;
  const waits = cfg.listeners.map((l) => {
    const k = l.host + ':' + l.port;
    if (!open.has(k)) {
      const s = net.createServer((c) => pipe(c, net.connect('/relay/' + l.sock)));
      open.set(k, new Promise((ok) => s.once('listening', ok).once('error', () => (open.delete(k), ok()))));
      s.listen(l.port, l.host);
    }
    return open.get(k);
  });
  Promise.all(waits).then(() => {
    if (cfg.gen <= loaded) return;
    loaded = cfg.gen;
    fs.writeFileSync('/relay/loaded', String(cfg.gen));
  });
}
net.createServer((c) => {
  c.once('readable', function first() {
    const head = c.read(2);
    if (!head) return c.once('readable', first);
    pipe(c, net.connect(head.readUInt16BE(0), '127.0.0.1'));
  });
}).listen('/relay/in.sock', () => fs.writeFileSync('/relay/ready', ''));
load();
setInterval(load, 250);
try { fs.watch('/relay', load); } catch {}
`;

/** The config generation the relay of a pod has loaded (-1 before any). */
function readLoaded(dir: string): number {
  try {
    return Number(readFileSync(join(dir, 'loaded'), 'utf8')) || 0;
  } catch {
    return -1;
  }
}

export interface Decision {
  allowed: boolean;
  /** Which policy refused it (for the test's assertions and the double's log). */
  why: string;
}

export interface NetworkRecord {
  from: string;
  to: string;
  port: number;
  allowed: boolean;
  why: string;
}

interface PodNet {
  ns: string;
  name: string;
  uid: string;
  pause: Docker.Container;
  relay: Docker.Container;
  dir: string;
  servers: Map<string, Server>;
  /** The generation of the last config.json written. */
  gen: number;
}

interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
}
interface Peer {
  podSelector?: LabelSelector;
  namespaceSelector?: LabelSelector;
  ipBlock?: { cidr: string; except?: string[] };
}
interface PolicyRule {
  from?: Peer[];
  to?: Peer[];
  ports?: { protocol?: string; port?: number | string }[];
}
interface PolicySpec {
  podSelector?: LabelSelector;
  policyTypes?: string[];
  ingress?: PolicyRule[];
  egress?: PolicyRule[];
}

export function selects(sel: LabelSelector | undefined, labels: Record<string, string> | undefined): boolean {
  const l = labels ?? {};
  for (const [k, v] of Object.entries(sel?.matchLabels ?? {})) if (l[k] !== v) return false;
  for (const e of sel?.matchExpressions ?? []) {
    const has = Object.prototype.hasOwnProperty.call(l, e.key);
    if (e.operator === 'In' && !(has && (e.values ?? []).includes(l[e.key]!))) return false;
    if (e.operator === 'NotIn' && has && (e.values ?? []).includes(l[e.key]!)) return false;
    if (e.operator === 'Exists' && !has) return false;
    if (e.operator === 'DoesNotExist' && has) return false;
  }
  return true;
}

function ipv4(ip: string): number {
  return ip.split('.').reduce((n, p) => n * 256 + Number(p), 0);
}

function inCidr(ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split('/');
  if (!base || base.includes(':')) return false;
  const n = Number(bits ?? 32);
  const mask = n === 0 ? 0 : (0xffffffff << (32 - n)) >>> 0;
  return (ipv4(ip) & mask) >>> 0 === (ipv4(base) & mask) >>> 0;
}

function portMatches(rule: PolicyRule, port: number): boolean {
  if (!rule.ports?.length) return true;
  return rule.ports.some((p) => (p.protocol ?? 'TCP') === 'TCP' && (p.port === undefined || Number(p.port) === port));
}

export class PodNetwork {
  private readonly pods = new Map<string, PodNet>();
  private readonly serviceIps = new Map<string, string>();
  private nextIp = 1;
  private readonly exposed = new Map<string, Set<number>>();
  /** Every connection a pod tried through the relays, with the decision. */
  readonly log: NetworkRecord[] = [];

  constructor(
    private readonly api: KubeApiDouble,
    private readonly docker: Docker,
    private readonly labels: Record<string, string>,
  ) {}

  private list(plural: string, ns: string): KObject[] {
    const group = plural === 'networkpolicies' ? 'networking.k8s.io' : '';
    return this.api.store.list(this.api.store.resource(group, plural)!, ns);
  }

  private nsLabels(ns: string): Record<string, string> {
    return this.api.store.tryGet(this.api.store.resource('', 'namespaces')!, undefined, ns)?.metadata.labels ?? {};
  }

  /** The virtual IP of a Service (stable for its name). */
  serviceIp(ns: string, name: string): string {
    const k = `${ns}/${name}`;
    let ip = this.serviceIps.get(k);
    if (!ip) {
      const n = this.nextIp++;
      ip = `127.${Math.floor(n / 250) + 1}.${(n % 250) + 1}.1`;
      this.serviceIps.set(k, ip);
    }
    return ip;
  }

  private policies(ns: string, pod: KObject, type: 'Ingress' | 'Egress'): PolicySpec[] {
    return this.list('networkpolicies', ns)
      .map((p) => (p.spec ?? {}) as PolicySpec)
      .filter(
        (s) =>
          selects(s.podSelector, pod.metadata.labels) &&
          (s.policyTypes ?? (type === 'Ingress' ? ['Ingress'] : s.egress ? ['Egress'] : [])).includes(type),
      );
  }

  private peerIsPod(peer: Peer, policyNs: string, other: KObject): boolean {
    if (peer.ipBlock) return false;
    const otherNs = other.metadata.namespace!;
    if (peer.namespaceSelector) {
      if (!selects(peer.namespaceSelector, this.nsLabels(otherNs))) return false;
    } else if (otherNs !== policyNs) return false;
    return peer.podSelector ? selects(peer.podSelector, other.metadata.labels) : true;
  }

  /** NetworkPolicy semantics: no policy selecting the pod for the direction allows all; otherwise some rule must. */
  decide(src: KObject, dst: { pod: KObject } | { external: string }, port: number): Decision {
    const srcNs = src.metadata.namespace!;
    const egress = this.policies(srcNs, src, 'Egress');
    if (egress.length) {
      const ok = egress.some((p) =>
        (p.egress ?? []).some(
          (r) =>
            portMatches(r, port) &&
            (!r.to?.length ||
              r.to.some((peer) =>
                'pod' in dst
                  ? this.peerIsPod(peer, srcNs, dst.pod)
                  : Boolean(
                      peer.ipBlock &&
                      inCidr(dst.external, peer.ipBlock.cidr) &&
                      !(peer.ipBlock.except ?? []).some((e) => inCidr(dst.external, e)),
                    ),
              )),
        ),
      );
      if (!ok)
        return {
          allowed: false,
          why: `egress of pod ${srcNs}/${src.metadata.name} to ${'pod' in dst ? `pod ${dst.pod.metadata.namespace}/${dst.pod.metadata.name}` : dst.external}:${port} is not allowed by any NetworkPolicy selecting it`,
        };
    }
    if ('pod' in dst) {
      const dstNs = dst.pod.metadata.namespace!;
      const ingress = this.policies(dstNs, dst.pod, 'Ingress');
      if (
        ingress.length &&
        !ingress.some((p) =>
          (p.ingress ?? []).some(
            (r) => portMatches(r, port) && (!r.from?.length || r.from.some((peer) => this.peerIsPod(peer, dstNs, src))),
          ),
        )
      )
        return {
          allowed: false,
          why: `ingress to pod ${dstNs}/${dst.pod.metadata.name}:${port} from pod ${srcNs}/${src.metadata.name} is not allowed by any NetworkPolicy selecting it`,
        };
    }
    return { allowed: true, why: 'allowed' };
  }

  /** The pause container of a pod (its network namespace) with its relay; containers join it. */
  async create(pod: KObject, owner: string): Promise<Docker.Container> {
    const ns = pod.metadata.namespace!;
    const name = pod.metadata.name!;
    const uid = pod.metadata.uid!;
    const base = {
      ...this.labels,
      'harness-lab.k8s-double.owner': owner,
      'io.kubernetes.pod.namespace': ns,
      'io.kubernetes.pod.name': name,
    };
    const pause = await this.docker.createContainer({
      Image: PAUSE_IMAGE,
      Cmd: ['sleep', 'infinity'],
      Labels: { ...base, 'harness-lab.k8s-double.role': 'netns' },
      HostConfig: { NetworkMode: 'none', Init: true },
    });
    await pause.start();
    const dir = mkdtempSync(join(tmpdir(), 'hl-k8s-net-'));
    chmodSync(dir, 0o755);
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ gen: 0, listeners: [] }));
    const relay = await this.docker.createContainer({
      Image: RELAY_IMAGE,
      Cmd: ['node', '-e', RELAY_SCRIPT],
      Labels: { ...base, 'harness-lab.k8s-double.role': 'relay' },
      HostConfig: { NetworkMode: `container:${pause.id}`, Binds: [`${dir}:/relay`], Init: true },
    });
    await relay.start();
    const net: PodNet = { ns, name, uid, pause, relay, dir, servers: new Map(), gen: 0 };
    this.pods.set(uid, net);
    for (let i = 0; i < 100; i++) {
      if (await import('node:fs').then((fs) => fs.existsSync(join(dir, 'ready')))) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await this.refresh(net);
    return pause;
  }

  async remove(uid: string): Promise<void> {
    const net = this.pods.get(uid);
    if (!net) return;
    this.pods.delete(uid);
    for (const s of net.servers.values()) s.close();
    await Promise.all([net.relay, net.pause].map((c) => c.remove({ force: true }).catch(() => {})));
    rmSync(net.dir, { recursive: true, force: true });
  }

  /** Services (and exposed host ports) changed in a namespace: listeners and /etc/hosts of its pods follow. */
  async refreshNamespace(ns: string): Promise<void> {
    await Promise.all([...this.pods.values()].filter((p) => p.ns === ns).map((p) => this.refresh(p).catch(() => {})));
  }

  /** Makes the host's 127.0.0.1:port reachable at 127.0.0.1:port inside every pod of a namespace that policy lets out. */
  async exposeHostPort(ns: string, port: number): Promise<void> {
    (this.exposed.get(ns) ?? this.exposed.set(ns, new Set()).get(ns)!).add(port);
    await this.refreshNamespace(ns);
  }

  private podOf(net: PodNet): KObject | undefined {
    return this.api.store.list(this.api.store.resource('', 'pods')!, net.ns).find((p) => p.metadata.uid === net.uid);
  }

  private async refresh(net: PodNet): Promise<void> {
    const services = this.list('services', net.ns);
    const listeners: { host: string; port: number; sock: string }[] = [];
    const want = (key: string, handler: (c: Socket) => void): string => {
      const sock = `out-${key.replace(/[^a-z0-9.-]/gi, '_')}.sock`;
      if (!net.servers.has(key)) {
        const server = createServer(handler);
        server.listen(join(net.dir, sock));
        net.servers.set(key, server);
      }
      return sock;
    };
    // Without iptables a listener in the pod takes the port on every loopback address: a pod never gets
    // one on a port its own containers declare (the server of that Service binds 0.0.0.0 there).
    const own = new Set(
      ((this.podOf(net)?.spec as { containers?: { ports?: { containerPort: number }[] }[] } | undefined)?.containers ?? []).flatMap((c) =>
        (c.ports ?? []).map((p) => p.containerPort),
      ),
    );
    for (const s of services) {
      const ip = this.serviceIp(net.ns, s.metadata.name!);
      for (const p of (((s.spec ?? {}) as { ports?: { port: number; targetPort?: number | string }[] }).ports ?? []).filter(
        (x) => !own.has(x.port),
      )) {
        const sock = want(`svc-${s.metadata.name}-${p.port}`, (c) => this.toService(net, s.metadata.name!, p.port, c));
        listeners.push({ host: ip, port: p.port, sock });
      }
    }
    const spec = this.podOf(net)?.spec as { serviceAccountName?: string; automountServiceAccountToken?: boolean } | undefined;
    if (spec?.serviceAccountName && spec.automountServiceAccountToken !== false)
      listeners.push({ host: API_SERVICE_IP, port: API_SERVICE_PORT, sock: want('api', (c) => this.toApi(net, c)) });
    for (const port of [...(this.exposed.get(net.ns) ?? [])].filter((x) => !own.has(x)))
      listeners.push({ host: '127.0.0.1', port, sock: want(`host-${port}`, (c) => this.toHost(net, port, c)) });
    await new Promise((r) => setTimeout(r, 20));
    const gen = ++net.gen;
    writeFileSync(join(net.dir, 'config.json'), JSON.stringify({ gen, listeners }));
    for (let i = 0; i < 200 && readLoaded(net.dir) < gen; i++) await new Promise((r) => setTimeout(r, 25));
    const hosts = [
      '127.0.0.1\tlocalhost',
      '::1\tlocalhost ip6-localhost ip6-loopback',
      `127.0.0.1\t${net.name}`,
      ...services.map((s) => {
        const n = s.metadata.name!;
        return `${this.serviceIp(net.ns, n)}\t${n} ${n}.${net.ns} ${n}.${net.ns}.svc ${n}.${net.ns}.svc.cluster.local`;
      }),
    ];
    const b64 = Buffer.from(`${hosts.join('\n')}\n`).toString('base64');
    const exec = await net.pause.exec({
      Cmd: ['bash', '-c', `printf '%s' '${b64}' | base64 -d > /etc/hosts`],
      AttachStdout: true,
      AttachStderr: true,
    });
    const st = await exec.start({ hijack: true, stdin: false });
    await new Promise((r) => (st.on('end', r), st.on('close', r)));
  }

  private record(net: PodNet, to: string, port: number, d: Decision): void {
    this.log.push({ from: `${net.ns}/${net.name}`, to, port, allowed: d.allowed, why: d.why });
  }

  private toService(net: PodNet, service: string, port: number, c: Socket): void {
    c.on('error', () => {});
    const src = this.podOf(net);
    const svc = this.api.store.tryGet(this.api.store.resource('', 'services')!, net.ns, service);
    const sp = (svc?.spec ?? {}) as { selector?: Record<string, string>; ports?: { port: number; targetPort?: number | string }[] };
    const target = sp.ports?.find((p) => p.port === port);
    const endpoints = this.list('pods', net.ns).filter(
      (p) =>
        selects({ matchLabels: sp.selector ?? {} }, p.metadata.labels) &&
        sp.selector &&
        (p.status as { phase?: string } | undefined)?.phase === 'Running' &&
        // Only ready pods are a Service's endpoints (a readiness probe that has not answered keeps it out).
        ((p.status as { conditions?: { type: string; status: string }[] } | undefined)?.conditions ?? []).some(
          (c) => c.type === 'Ready' && c.status === 'True',
        ) &&
        !p.metadata.deletionTimestamp &&
        this.pods.has(p.metadata.uid!),
    );
    if (!src || !target || !endpoints.length) {
      this.record(net, `service ${net.ns}/${service}`, port, { allowed: false, why: 'no endpoints' });
      return void c.destroy();
    }
    const dst = endpoints[0]!;
    const targetPort = typeof target.targetPort === 'number' ? target.targetPort : port;
    const d = this.decide(src, { pod: dst }, targetPort);
    this.record(net, `service ${net.ns}/${service} (pod ${dst.metadata.name})`, targetPort, d);
    if (!d.allowed) return void c.destroy();
    const up = connect(join(this.pods.get(dst.metadata.uid!)!.dir, 'in.sock'));
    const head = Buffer.alloc(2);
    head.writeUInt16BE(targetPort, 0);
    up.write(head);
    c.pipe(up).pipe(c);
    up.on('error', () => c.destroy());
    c.on('close', () => up.destroy());
  }

  private toHost(net: PodNet, port: number, c: Socket): void {
    c.on('error', () => {});
    const src = this.podOf(net);
    const d = src ? this.decide(src, { external: '127.0.0.1' }, port) : { allowed: false, why: 'unknown pod' };
    this.record(net, `host 127.0.0.1`, port, d);
    if (!d.allowed) return void c.destroy();
    const up = connect(port, '127.0.0.1');
    c.pipe(up).pipe(c);
    up.on('error', () => c.destroy());
    c.on('close', () => up.destroy());
  }

  /** An HTTP GET into a pod's own network namespace (the kubelet's probe path): the status code, or undefined. */
  httpGet(uid: string, port: number, path: string): Promise<number | undefined> {
    const net = this.pods.get(uid);
    if (!net) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const sock = connect(join(net.dir, 'in.sock'));
      let got = '';
      const done = (v: number | undefined) => {
        clearTimeout(timer);
        sock.destroy();
        resolve(v);
      };
      const timer = setTimeout(() => done(undefined), 2000);
      sock.on('error', () => done(undefined));
      sock.on('close', () => done(/^HTTP\/1\.[01] (\d{3})/.exec(got) ? Number(/^HTTP\/1\.[01] (\d{3})/.exec(got)![1]) : undefined));
      sock.on('data', (b: Buffer) => {
        got += b.toString('latin1');
        const m = /^HTTP\/1\.[01] (\d{3})/.exec(got);
        if (m) done(Number(m[1]));
      });
      const head = Buffer.alloc(2);
      head.writeUInt16BE(port, 0);
      sock.write(head);
      sock.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUser-Agent: kube-probe/1.33\r\nConnection: close\r\n\r\n`);
    });
  }

  /** To the API server on the host (no NetworkPolicy in the double selects the API server). */
  private toApi(net: PodNet, c: Socket): void {
    c.on('error', () => {});
    const port = this.api.tls?.port ?? Number(new URL(this.api.url).port);
    this.record(net, 'the API server', port, { allowed: true, why: 'the kubernetes Service' });
    const up = connect(port, '127.0.0.1');
    c.pipe(up).pipe(c);
    up.on('error', () => c.destroy());
    c.on('close', () => up.destroy());
  }

  async close(): Promise<void> {
    await Promise.all([...this.pods.keys()].map((uid) => this.remove(uid)));
  }
}
