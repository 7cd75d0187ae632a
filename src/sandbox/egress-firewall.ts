// What an egress sandbox (and an image build) may reach: the internet, not this machine and not the
// networks around it. Docker's bridge gives a container a route to every address of the host (its
// gateway and every interface address arrive through INPUT, not FORWARD), to the LAN and to
// 169.254.169.254; an engine started with `--host 0.0.0.0`, as vLLM usually is, would be reachable
// past the capture. The lab owns the bridge of every network it makes (a fixed interface name), and
// puts two chains of its own in front of it:
// - `HLAB-I-<bridge>` from INPUT: nothing from the bridge reaches the host itself (any of its
//   addresses), except replies to connections the host opened;
// - `HLAB-F-<bridge>` from DOCKER-USER (FORWARD when Docker has none): private, shared, link-local,
//   loopback and multicast ranges, and the networks the host's own interfaces are on (its LAN), are
//   rejected, so forwarded traffic only goes to public addresses beyond them.
// A host the task names ([environment].allowed_hosts) is let through both, and only that host.
// Rejections are ICMP "port unreachable": a connection fails at once instead of hanging.
// IPv6 is switched off inside egress containers; the same chains are set for IPv6 where ip6tables works.
import { execFileSync } from 'node:child_process';
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { SandboxError } from './runtime.js';

export const BLOCKED_V4 = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '224.0.0.0/4',
  '240.0.0.0/4',
];
export const BLOCKED_V6 = ['::1/128', '::ffff:0:0/96', '64:ff9b::/96', 'fc00::/7', 'fe80::/10', 'ff00::/8'];

const PATH = `${process.env.PATH ?? ''}:/usr/sbin:/sbin:/usr/local/sbin`;

type Family = 4 | 6;
const BIN: Record<Family, string> = { 4: 'iptables', 6: 'ip6tables' };

/** The bridge interface name the lab gives a network it makes (at most 15 characters). */
export function bridgeNameFor(networkName: string): string {
  return `hl-${networkName
    .replace(/^harness-lab-/, '')
    .replace(/[^a-z0-9]/gi, '')
    .slice(0, 12)}`;
}

export const chainNames = (bridge: string) => ({ input: `HLAB-I-${bridge}`, forward: `HLAB-F-${bridge}` });

function run(family: Family, args: string[]): { ok: true; out: string } | { ok: false; error: string } {
  try {
    return {
      ok: true,
      out: execFileSync(BIN[family], ['-w', '5', ...args], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, PATH },
      }),
    };
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    return { ok: false, error: (e.stderr || e.message).trim() };
  }
}

function must(family: Family, args: string[]): void {
  const r = run(family, args);
  if (!r.ok)
    throw new SandboxError(
      `could not cut the sandbox off from this machine's addresses (${BIN[family]} ${args.join(' ')}: ${r.error}); ` +
        `an egress sandbox needs the lab to set firewall rules (run it as root or with CAP_NET_ADMIN), or give ` +
        `the task network_mode = "no-network"`,
    );
}

/** Addresses of the hosts a task names (names resolved now; a name that does not resolve is an error naming it). */
export async function resolveAllowedHosts(hosts: readonly string[]): Promise<string[]> {
  const out = new Set<string>();
  for (const raw of hosts) {
    const host = raw.trim().replace(/^\[|\]$/g, '');
    if (!host) continue;
    if (isIP(host)) {
      out.add(host);
      continue;
    }
    const found = await lookup(host, { all: true }).catch((err: Error) => {
      throw new SandboxError(`the task's allowed host ${host} does not resolve (${err.message})`);
    });
    for (const a of found) out.add(a.address);
  }
  return [...out];
}

/** The networks this machine's interfaces are on (its LAN, whatever its range), loopback aside. */
function attachedNetworks(family: Family): string[] {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? [])
      if (!a.internal && a.cidr && (a.family === 'IPv4' ? 4 : 6) === family) out.add(a.cidr.replace(/%[^/]*/, ''));
  return [...out];
}

function forwardParent(family: Family): string {
  return run(family, ['-S', 'DOCKER-USER']).ok ? 'DOCKER-USER' : 'FORWARD';
}

function applyFamily(family: Family, bridge: string, allowed: string[]): void {
  const { input, forward } = chainNames(bridge);
  must(family, ['-N', input]);
  must(family, ['-N', forward]);
  for (const ip of allowed) {
    must(family, ['-A', input, '-d', ip, '-j', 'RETURN']);
    must(family, ['-A', forward, '-d', ip, '-j', 'RETURN']);
  }
  must(family, ['-A', input, '-m', 'conntrack', '--ctstate', 'ESTABLISHED,RELATED', '-j', 'RETURN']);
  must(family, ['-A', input, '-j', 'REJECT']);
  for (const range of [...(family === 4 ? BLOCKED_V4 : BLOCKED_V6), ...attachedNetworks(family)])
    must(family, ['-A', forward, '-d', range, '-j', 'REJECT']);
  must(family, ['-I', forwardParent(family), '-i', bridge, '-j', forward]);
  must(family, ['-I', 'INPUT', '-i', bridge, '-j', input]);
}

function removeFamily(family: Family, bridge: string): void {
  const { input, forward } = chainNames(bridge);
  for (const parent of ['DOCKER-USER', 'FORWARD']) while (run(family, ['-D', parent, '-i', bridge, '-j', forward]).ok);
  while (run(family, ['-D', 'INPUT', '-i', bridge, '-j', input]).ok);
  for (const chain of [input, forward]) {
    run(family, ['-F', chain]);
    run(family, ['-X', chain]);
  }
}

/**
 * Puts the lab's chains in front of `bridge` (replacing any left from before). IPv4 must work; IPv6
 * is best effort (the containers have it switched off).
 */
export function applyEgressFirewall(bridge: string, allowedAddresses: readonly string[] = []): void {
  removeFamily(4, bridge);
  try {
    applyFamily(
      4,
      bridge,
      allowedAddresses.filter((a) => isIP(a) === 4),
    );
  } catch (err) {
    removeFamily(4, bridge);
    throw err;
  }
  if (run(6, ['-S', 'INPUT']).ok) {
    removeFamily(6, bridge);
    try {
      applyFamily(
        6,
        bridge,
        allowedAddresses.filter((a) => isIP(a) === 6),
      );
    } catch {
      removeFamily(6, bridge);
    }
  }
}

export function removeEgressFirewall(bridge: string): void {
  removeFamily(4, bridge);
  if (run(6, ['-S', 'INPUT']).ok) removeFamily(6, bridge);
}

/** Bridges the lab has chains for (HLAB-I-<bridge>), to remove those whose network is gone. */
export function firewalledBridges(): string[] {
  const r = run(4, ['-S']);
  if (!r.ok) return [];
  return [...new Set([...r.out.matchAll(/^-N HLAB-I-(\S+)$/gm)].map((m) => m[1]!))];
}
