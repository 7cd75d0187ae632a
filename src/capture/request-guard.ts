// Who may talk to a lab server on this machine. The capture proxy, `harness-lab serve` and the
// embedded engine listen on loopback next to the user's browser: any web page can send requests to
// 127.0.0.1, and a page whose name it re-points at 127.0.0.1 (DNS rebinding) can even read the
// answers. Three checks close that, for all three servers (they use this one helper):
// - `Host` must name the server: a loopback name or address, the address it is bound to (every
//   address of this machine when bound to a wildcard), or a name it was told to serve
//   (`--allowed-host`). A rebinding page's requests carry the attacker's name and are refused.
// - `Origin`, when present, must be the server's own origin. Browsers send it on every cross-origin
//   request and every POST; local tools, harness SDKs and TRL's httpx/websockets clients send none.
// - A POST carries `application/json` (parameters such as `charset` allowed): the content type a
//   page can send without a CORS preflight (text/plain, forms) is refused, whatever the body holds.
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';

export interface Refusal {
  status: 403 | 415;
  message: string;
}

export interface RequestGuardOptions {
  /** The address the server listens on (`127.0.0.1`, `::1`, `0.0.0.0`, a bridge address, ...). */
  listenHost: string;
  /** Further names (or addresses) clients use to reach it: a Service name, `host.docker.internal`. */
  allowedHosts?: readonly string[];
}

const WILDCARDS = new Set(['0.0.0.0', '::', '']);
const INTERFACES_TTL_MS = 5_000;

/** A host name as compared: lower case, IPv6 brackets and a trailing dot removed. */
export function normalizeHostName(name: string): string {
  let n = name.trim().toLowerCase();
  if (n.startsWith('[') && n.endsWith(']')) n = n.slice(1, -1);
  return n.endsWith('.') ? n.slice(0, -1) : n;
}

/** The host name of a `Host` header value (`name`, `name:port`, `[v6]`, `[v6]:port`), or undefined when malformed. */
export function hostHeaderName(value: string): string | undefined {
  const v = value.trim();
  if (v.startsWith('[')) {
    const end = v.indexOf(']');
    if (end < 0 || !/^(:\d{1,5})?$/.test(v.slice(end + 1))) return undefined;
    return normalizeHostName(v.slice(0, end + 1));
  }
  const m = /^([^:\s/@]+)(?::\d{1,5})?$/.exec(v);
  return m ? normalizeHostName(m[1]!) : undefined;
}

export function isLoopbackName(name: string): boolean {
  const n = normalizeHostName(name);
  return n === 'localhost' || n === '::1' || n === '0:0:0:0:0:0:0:1' || (isIP(n) === 4 && n.startsWith('127.')) || n === '::ffff:127.0.0.1';
}

/** A Host name in the form a `Host` header carries it (IPv6 in brackets). */
export function hostForHeader(name: string): string {
  const n = normalizeHostName(name);
  return isIP(n) === 6 ? `[${n}]` : n;
}

export class RequestGuard {
  private readonly listen: string;
  private readonly names: ReadonlySet<string>;
  private interfaces: { at: number; addresses: Set<string> } | undefined;

  constructor(options: RequestGuardOptions) {
    this.listen = normalizeHostName(options.listenHost);
    const names = new Set<string>(['localhost', '127.0.0.1', '::1']);
    if (!WILDCARDS.has(this.listen)) names.add(this.listen);
    for (const h of options.allowedHosts ?? []) if (h.trim()) names.add(normalizeHostName(h));
    this.names = names;
  }

  /** The names this server answers to, as `Host` values without a port (for the acceptor's fast path). */
  get hostNames(): string[] {
    return [...this.names].map(hostForHeader);
  }

  isAllowedHostName(name: string): boolean {
    const n = normalizeHostName(name);
    if (this.names.has(n) || isLoopbackName(n)) return true;
    return WILDCARDS.has(this.listen) && isIP(n) !== 0 && this.machineAddresses().has(n);
  }

  /** Every address of this machine's interfaces (what a wildcard bind answers on), re-read every few seconds. */
  private machineAddresses(): Set<string> {
    const now = Date.now();
    if (!this.interfaces || now - this.interfaces.at > INTERFACES_TTL_MS) {
      const addresses = new Set<string>();
      for (const list of Object.values(networkInterfaces()))
        for (const a of list ?? []) addresses.add(normalizeHostName(a.address.replace(/%.*$/, '')));
      this.interfaces = { at: now, addresses };
    }
    return this.interfaces.addresses;
  }

  /** The Host and Origin checks (every request, upgrades included); undefined when the request may go on. */
  checkOrigin(req: IncomingMessage): Refusal | undefined {
    const host = req.headers.host;
    if (host !== undefined) {
      const name = hostHeaderName(host);
      if (name === undefined || !this.isAllowedHostName(name)) {
        return {
          status: 403,
          message: `refused: this server does not answer to Host '${host.slice(0, 200)}' (it serves ${this.hostNames.join(', ')}; start it with --allowed-host NAME to add a name)`,
        };
      }
    }
    const origin = req.headers.origin;
    if (origin !== undefined) {
      const own = host !== undefined && origin.toLowerCase() === `http://${host.trim().toLowerCase()}`;
      if (!own)
        return {
          status: 403,
          message: `refused: requests from web pages (Origin ${origin.slice(0, 200)}) may not use this server; only local tools may`,
        };
    }
    return undefined;
  }

  /** A POST's (PUT's, PATCH's) body must be declared `application/json`. */
  checkContentType(req: IncomingMessage): Refusal | undefined {
    const method = req.method ?? 'GET';
    if (method !== 'POST' && method !== 'PUT' && method !== 'PATCH') return undefined;
    const type = req.headers['content-type'];
    // No body at all (no type, and a zero or absent length without chunking): nothing to refuse.
    const length = req.headers['content-length'];
    if (type === undefined && (length === '0' || length === undefined) && req.headers['transfer-encoding'] === undefined) return undefined;
    const media = (type ?? '').split(';')[0]!.trim().toLowerCase();
    if (media === 'application/json') return undefined;
    return {
      status: 415,
      message: `refused: a ${method} body must be application/json, not ${type === undefined ? 'a body without a content type' : `'${type.slice(0, 100)}'`}`,
    };
  }

  /** Both checks, in order. */
  check(req: IncomingMessage): Refusal | undefined {
    return this.checkOrigin(req) ?? this.checkContentType(req);
  }
}
