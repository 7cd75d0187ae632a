// A Kubernetes API server test double on 127.0.0.1: the real REST paths and verbs, list with
// resourceVersion, watch (chunked JSON lines, ADDED/MODIFIED/DELETED/BOOKMARK, 410 Gone past
// compaction), Status errors (401/403/404/409/422), label and field selectors, deletecollection,
// propagationPolicy (batch/v1 Jobs default to Orphan, with the real server's warning),
// SelfSubjectAccessReview plus per-namespace denials, CRDs registered generically, and the pod
// subresources log (follow), eviction and portforward (WebSocket, v4.channel.k8s.io).
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex, Readable } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import {
  ApiError,
  apiVersionOf,
  badRequest,
  clone,
  labelProblems,
  matchesLabels,
  parseFieldSelector,
  parseLabelSelector,
  qualifiedName,
  type KObject,
  type ResourceDef,
  type StatusCause,
} from './objects.js';
import { enforcedLevel, podSecurityDenial } from './pod-security.js';
import { ObjectStore, type PropagationPolicy, type StoreEvent } from './store.js';

export interface Denial {
  namespace: string | '*';
  verb: string | '*';
  /** Plural resource, optionally with subresource ("jobs", "pods/log"). */
  resource: string | '*';
  group?: string;
}

export interface ReceivedRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  contentType: string | undefined;
  body: unknown;
}

export interface PodHooks {
  logs(ns: string, pod: string, opts: { container?: string; follow: boolean; tailLines?: number; previous: boolean }): Promise<Readable>;
  portForward(ns: string, pod: string, port: number): Promise<Duplex>;
  evict(ns: string, pod: string): Promise<void>;
}

export interface ApiServerOptions {
  /** Bookmark interval for watches that ask for them (default 1 s). */
  bookmarkMs?: number;
  user?: string;
}

const WATCH_VERBS = new Set(['true', '1']);

interface Identity {
  user: string;
  sa?: { ns: string; name: string };
}

export class KubeApiDouble {
  readonly store = new ObjectStore();
  readonly token = randomBytes(16).toString('hex');
  readonly user: string;
  readonly received: ReceivedRequest[] = [];
  private readonly denials: Denial[] = [];
  private readonly saTokens = new Map<string, { ns: string; name: string }>();
  private readonly watches = new Set<{ end(): void }>();
  private readonly sockets = new Set<Duplex>();
  private server: Server | undefined;
  private readonly wss = new WebSocketServer({
    noServer: true,
    handleProtocols: (protocols) => (protocols.has('v4.channel.k8s.io') ? 'v4.channel.k8s.io' : false),
  });
  hooks: PodHooks | undefined;
  url = '';

  constructor(private readonly opts: ApiServerOptions = {}) {
    this.user = opts.user ?? 'harness-lab-tester';
    this.store.onChange((e) => this.onCrd(e));
    installBuiltInRules(this.store);
  }

  async listen(): Promise<string> {
    const server = createServer((req, res) => void this.handle(req, res));
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    server.on('upgrade', (req, socket, head) => void this.upgrade(req, socket, head));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    this.server = server;
    this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return this.url;
  }

  /** The in-cluster endpoint's CA (PEM) and port: what a pod running as a ServiceAccount is given. */
  tls: { ca: string; port: number } | undefined;
  private tlsServer: HttpsServer | undefined;

  /**
   * The same API over HTTPS, as pods see it (client-node's in-cluster config speaks only HTTPS to
   * port 443 and verifies the CA it finds in the pod): a self-signed certificate for the `kubernetes`
   * Service's stand-in address, made with openssl.
   */
  async listenTls(serviceIp: string): Promise<void> {
    const dir = mkdtempSync(join(tmpdir(), 'hl-k8s-api-tls-'));
    try {
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'rsa:2048',
          '-nodes',
          '-days',
          '2',
          '-subj',
          '/CN=kubernetes',
          '-addext',
          `subjectAltName=IP:${serviceIp},DNS:kubernetes.default.svc`,
          '-keyout',
          join(dir, 'key.pem'),
          '-out',
          join(dir, 'cert.pem'),
        ],
        { stdio: 'ignore' },
      );
      const cert = readFileSync(join(dir, 'cert.pem'), 'utf8');
      const server = createHttpsServer({ key: readFileSync(join(dir, 'key.pem')), cert }, (req, res) => void this.handle(req, res));
      server.on('secureConnection', (s) => {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
      });
      server.on('upgrade', (req, socket, head) => void this.upgrade(req, socket, head));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      this.tlsServer = server;
      this.tls = { ca: cert, port: (server.address() as AddressInfo).port };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  async close(): Promise<void> {
    this.dropWatches();
    for (const c of this.wss.clients) c.terminate();
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.tlsServer ? this.tlsServer.close(() => resolve()) : resolve()));
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  /**
   * An Event about an object, as the controllers and the kubelet record them (one object per
   * occurrence; the real ones also aggregate repeats into `count`).
   */
  recordEvent(
    involved: { kind: string; apiVersion: string; metadata: { name?: string; namespace?: string; uid?: string } },
    type: 'Normal' | 'Warning',
    reason: string,
    message: string,
    component: string,
  ): void {
    const ns = involved.metadata.namespace ?? 'default';
    const at = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    try {
      this.store.create(this.store.resource('', 'events')!, ns, {
        apiVersion: 'v1',
        kind: 'Event',
        metadata: { generateName: `${involved.metadata.name}.` },
        involvedObject: {
          kind: involved.kind,
          apiVersion: involved.apiVersion,
          name: involved.metadata.name,
          namespace: ns,
          uid: involved.metadata.uid,
        },
        type,
        reason,
        message,
        source: { component },
        reportingComponent: component,
        firstTimestamp: at,
        lastTimestamp: at,
        count: 1,
      });
    } catch {
      /* the namespace is going away */
    }
  }

  /** Makes `verb resource` in `namespace` answer 403 Forbidden (and SelfSubjectAccessReview say so). */
  deny(d: Denial): void {
    this.denials.push(d);
  }

  /** Ends every open watch connection mid-stream, as an API server restart or a load balancer does. */
  dropWatches(): void {
    for (const w of [...this.watches]) w.end();
  }

  /** Requests whose path and method match, with their bodies as received. */
  requests(method: string, pathPattern: RegExp): ReceivedRequest[] {
    return this.received.filter((r) => r.method === method && pathPattern.test(r.path));
  }

  /**
   * The test's user: everything but the denials. A ServiceAccount: RBAC as the API server does it,
   * only what a RoleBinding in the namespace grants it through its Role (no wildcard needed, none
   * assumed); nothing at the cluster scope.
   */
  private allowed(who: Identity, verb: string, group: string, resource: string, ns: string | undefined): boolean {
    if (who.sa) return this.rbacAllows(who.sa, verb, group, resource, ns);
    return !this.denials.some(
      (d) =>
        (d.namespace === '*' || d.namespace === ns) &&
        (d.verb === '*' || d.verb === verb) &&
        (d.resource === '*' || d.resource === resource) &&
        (d.group === undefined || d.group === group),
    );
  }

  private rbacAllows(sa: { ns: string; name: string }, verb: string, group: string, resource: string, ns: string | undefined): boolean {
    if (ns === undefined) return false;
    const bindings = this.store.list(this.store.resource('rbac.authorization.k8s.io', 'rolebindings')!, ns);
    const has = (list: string[] | undefined, v: string) => (list ?? []).some((x) => x === '*' || x === v);
    for (const b of bindings) {
      const subjects = (b.subjects ?? []) as { kind?: string; name?: string; namespace?: string }[];
      if (!subjects.some((x) => x.kind === 'ServiceAccount' && x.name === sa.name && (x.namespace ?? ns) === sa.ns)) continue;
      const ref = (b.roleRef ?? {}) as { kind?: string; name?: string };
      if (ref.kind !== 'Role') continue;
      const role = this.store.tryGet(this.store.resource('rbac.authorization.k8s.io', 'roles')!, ns, ref.name ?? '');
      const rules = (role?.rules ?? []) as { apiGroups?: string[]; resources?: string[]; verbs?: string[] }[];
      if (rules.some((r) => has(r.apiGroups, group) && has(r.resources, resource) && has(r.verbs, verb))) return true;
    }
    return false;
  }

  private forbidden(
    who: Identity,
    verb: string,
    r: ResourceDef,
    sub: string | undefined,
    name: string | undefined,
    ns: string | undefined,
  ): ApiError {
    const resource = sub ? `${r.plural}/${sub}` : r.plural;
    const what = `${qualifiedName(r)}${name ? ` "${name}"` : ''}`;
    const scope = ns ? ` in the namespace "${ns}"` : ' at the cluster scope';
    return new ApiError(
      403,
      'Forbidden',
      `${what} is forbidden: User "${who.user}" cannot ${verb} resource "${resource}" in API group "${r.group}"${scope}`,
      { ...(name ? { name } : {}), group: r.group, kind: r.plural },
    );
  }

  private onCrd(e: StoreEvent): void {
    if (e.res.kind !== 'CustomResourceDefinition') return;
    const spec = (e.object.spec ?? {}) as {
      group?: string;
      names?: { plural?: string; singular?: string; kind?: string };
      scope?: string;
      versions?: { name: string; served?: boolean; subresources?: { status?: unknown } }[];
    };
    for (const v of spec.versions ?? []) {
      if (e.type === 'DELETED') {
        const r = this.store.resource(spec.group ?? '', spec.names?.plural ?? '');
        if (r) for (const o of this.store.list(r, undefined)) this.store.delete(r, o.metadata.namespace, o.metadata.name!);
        this.store.unregister(spec.group ?? '', spec.names?.plural ?? '');
        continue;
      }
      if (v.served === false) continue;
      this.store.register({
        group: spec.group ?? '',
        version: v.name,
        plural: spec.names?.plural ?? '',
        singular: spec.names?.singular ?? (spec.names?.kind ?? '').toLowerCase(),
        kind: spec.names?.kind ?? '',
        namespaced: spec.scope !== 'Cluster',
        builtIn: false,
        hasStatus: Boolean(v.subresources?.status),
        nameRule: 'subdomain',
      });
    }
    if (e.type === 'ADDED')
      setImmediate(() =>
        this.store.mutate(
          e.res,
          undefined,
          e.object.metadata.name!,
          (o) => {
            o.status = {
              conditions: [
                { type: 'Established', status: 'True', reason: 'InitialNamesAccepted', lastTransitionTime: new Date().toISOString() },
              ],
              acceptedNames: spec.names,
            };
          },
          'status',
        ),
      );
  }

  // ---- HTTP ----

  /**
   * Who sent the request: the kubeconfig's user (the test's token), or a ServiceAccount by a token the
   * kubelet mounted into its pod (issueToken). Undefined: 401.
   */
  private authenticate(req: IncomingMessage): Identity | undefined {
    const auth = req.headers.authorization ?? '';
    if (auth === `Bearer ${this.token}`) return { user: this.user };
    const sa = auth.startsWith('Bearer ') ? this.saTokens.get(auth.slice(7)) : undefined;
    return sa ? { user: `system:serviceaccount:${sa.ns}:${sa.name}`, sa } : undefined;
  }

  /** A token for ServiceAccount ns/name, as the kubelet projects into a pod that runs as it. */
  issueToken(ns: string, name: string): string {
    const token = randomBytes(24).toString('hex');
    this.saTokens.set(token, { ns, name });
    return token;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://double');
    const query = Object.fromEntries(url.searchParams);
    let body: unknown;
    try {
      const raw = await readBody(req);
      body = raw.length ? JSON.parse(raw.toString('utf8')) : undefined;
    } catch {
      return sendStatus(res, badRequest('the request body is not valid JSON'));
    }
    this.received.push({
      method: req.method ?? 'GET',
      path: url.pathname,
      query,
      contentType: req.headers['content-type'],
      body: clone(body),
    });
    try {
      const who = this.authenticate(req);
      if (!who) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
      await this.route(who, req.method ?? 'GET', url.pathname, query, body, req.headers['content-type'], res);
    } catch (err) {
      if (err instanceof ApiError) return sendStatus(res, err);
      sendStatus(res, new ApiError(500, 'InternalError', `Internal error occurred: ${(err as Error).stack ?? String(err)}`));
    }
  }

  private parsePath(
    path: string,
  ): { r: ResourceDef; ns: string | undefined; name: string | undefined; sub: string | undefined } | { discovery: unknown } {
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    let group: string;
    let version: string;
    let rest: string[];
    if (parts[0] === 'api') {
      if (parts.length === 1)
        return {
          discovery: {
            kind: 'APIVersions',
            versions: ['v1'],
            serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: '127.0.0.1' }],
          },
        };
      group = '';
      version = parts[1]!;
      rest = parts.slice(2);
    } else if (parts[0] === 'apis') {
      if (parts.length === 1) return { discovery: this.groupList() };
      group = parts[1]!;
      version = parts[2] ?? '';
      rest = parts.slice(3);
    } else if (parts[0] === 'version') {
      return { discovery: { major: '1', minor: '33', gitVersion: 'v1.33.0-harness-lab-double', platform: 'linux/amd64' } };
    } else throw new ApiError(404, 'NotFound', `the server could not find the requested resource`);
    if (rest.length === 0) return { discovery: this.resourceList(group, version) };
    let ns: string | undefined;
    if (rest[0] === 'namespaces' && rest.length >= 3) {
      ns = rest[1];
      rest = rest.slice(2);
    }
    const [plural, name, sub] = rest;
    const r = this.store.resource(group, plural!);
    if (!r || r.version !== version)
      throw new ApiError(404, 'NotFound', `the server could not find the requested resource`, { group, kind: plural });
    if (r.kind === 'Namespace' && ns === undefined && name) return { r, ns: undefined, name, sub };
    if (r.namespaced === false && ns !== undefined) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    return { r, ns, name, sub };
  }

  private groupList(): unknown {
    const groups = new Map<string, Set<string>>();
    for (const r of this.store.allResources())
      if (r.group) (groups.get(r.group) ?? groups.set(r.group, new Set()).get(r.group)!).add(r.version);
    groups.set('authorization.k8s.io', new Set(['v1']));
    groups.set('policy', new Set(['v1']));
    return {
      kind: 'APIGroupList',
      apiVersion: 'v1',
      groups: [...groups].map(([name, versions]) => ({
        name,
        versions: [...versions].map((v) => ({ groupVersion: `${name}/${v}`, version: v })),
        preferredVersion: { groupVersion: `${name}/${[...versions][0]}`, version: [...versions][0] },
      })),
    };
  }

  private resourceList(group: string, version: string): unknown {
    const resources = this.store.resourcesOf(group, version).flatMap((r) => [
      {
        name: r.plural,
        singularName: r.singular,
        namespaced: r.namespaced,
        kind: r.kind,
        verbs: ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'],
      },
      ...(r.hasStatus
        ? [{ name: `${r.plural}/status`, singularName: '', namespaced: r.namespaced, kind: r.kind, verbs: ['get', 'patch', 'update'] }]
        : []),
    ]);
    if (group === 'authorization.k8s.io')
      resources.push({
        name: 'selfsubjectaccessreviews',
        singularName: '',
        namespaced: false,
        kind: 'SelfSubjectAccessReview',
        verbs: ['create'],
      });
    return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: apiVersionOf({ group, version }), resources };
  }

  private async route(
    who: Identity,
    method: string,
    path: string,
    query: Record<string, string>,
    body: unknown,
    contentType: string | undefined,
    res: ServerResponse,
  ): Promise<void> {
    if (method === 'POST' && path === '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews')
      return send(res, 201, this.accessReview(who, body));
    const parsed = this.parsePath(path);
    if ('discovery' in parsed) {
      if (method !== 'GET') throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
      return send(res, 200, parsed.discovery);
    }
    const { r, ns, name, sub } = parsed;
    const watch = WATCH_VERBS.has(query.watch ?? '');
    const verb =
      method === 'GET'
        ? name
          ? 'get'
          : watch
            ? 'watch'
            : 'list'
        : method === 'POST'
          ? 'create'
          : method === 'PUT'
            ? 'update'
            : method === 'PATCH'
              ? 'patch'
              : method === 'DELETE'
                ? name
                  ? 'delete'
                  : 'deletecollection'
                : '';
    if (!verb) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
    const authVerb = sub === 'log' ? 'get' : sub === 'eviction' ? 'create' : verb;
    const authNs = r.kind === 'Namespace' ? name : ns;
    if (!this.allowed(who, authVerb, r.group, sub ? `${r.plural}/${sub}` : r.plural, authNs))
      throw this.forbidden(who, authVerb, r, sub, name, authNs);
    if (r.namespaced && ns === undefined && !['list', 'watch'].includes(verb))
      throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');

    if (sub === 'log' && r.kind === 'Pod' && method === 'GET') return this.podLog(ns!, name!, query, res);
    if (sub === 'eviction' && r.kind === 'Pod' && method === 'POST') {
      this.store.get(r, ns, name!);
      if (!this.hooks) throw new ApiError(500, 'InternalError', 'no kubelet');
      await this.hooks.evict(ns!, name!);
      return send(res, 201, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', code: 201 });
    }
    if (sub && sub !== 'status') throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    if (sub === 'status' && !r.hasStatus) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');

    switch (verb) {
      case 'get':
        return send(res, 200, this.store.get(r, ns, name!));
      case 'list':
        return send(res, 200, this.listBody(r, ns, query));
      case 'watch':
        return this.watch(r, ns, query, res);
      case 'create': {
        if (name) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
        const obj = asObject(body, r);
        if (query.dryRun === 'All') return send(res, 201, obj);
        return send(res, 201, this.store.create(r, ns, obj));
      }
      case 'update':
        return send(res, 200, this.store.update(r, ns, name!, asObject(body, r), sub === 'status' ? 'status' : undefined));
      case 'patch': {
        const cur = this.store.get(r, ns, name!);
        const next = applyPatch(cur, body, contentType);
        next.metadata.resourceVersion =
          next.metadata.resourceVersion === cur.metadata.resourceVersion || !next.metadata.resourceVersion
            ? cur.metadata.resourceVersion
            : next.metadata.resourceVersion;
        return send(res, 200, this.store.update(r, ns, name!, next, sub === 'status' ? 'status' : undefined));
      }
      case 'delete': {
        const { policy, preconditions, gracePeriodSeconds } = deleteOptions(query, body);
        const headers: Record<string, string> = {};
        let effective = policy;
        if (!effective && r.group === 'batch' && r.kind === 'Job') {
          effective = 'Orphan';
          headers.Warning =
            '299 - "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them"';
        }
        const gone = this.store.delete(r, ns, name!, {
          ...(effective ? { propagationPolicy: effective } : {}),
          ...(preconditions ? { preconditions } : {}),
          ...(gracePeriodSeconds !== undefined ? { gracePeriodSeconds } : {}),
        });
        return send(
          res,
          200,
          r.kind === 'Pod' || effective === 'Foreground'
            ? gone
            : {
                kind: 'Status',
                apiVersion: 'v1',
                metadata: {},
                status: 'Success',
                details: { name, group: r.group, kind: r.plural, uid: gone.metadata.uid },
              },
          headers,
        );
      }
      case 'deletecollection': {
        const { policy } = deleteOptions(query, body);
        const headers: Record<string, string> = {};
        let effective = policy;
        if (!effective && r.group === 'batch' && r.kind === 'Job') {
          effective = 'Orphan';
          headers.Warning =
            '299 - "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them"';
        }
        const items = this.selected(r, ns, query);
        for (const o of items)
          this.store.delete(r, o.metadata.namespace, o.metadata.name!, effective ? { propagationPolicy: effective } : {});
        return send(
          res,
          200,
          {
            kind: `${r.kind}List`,
            apiVersion: apiVersionOf(r),
            metadata: { resourceVersion: String(this.store.resourceVersion) },
            items: items.map((o) => itemOf(r, o)),
          },
          headers,
        );
      }
    }
  }

  private selected(r: ResourceDef, ns: string | undefined, query: Record<string, string>): KObject[] {
    const labels = parseLabelSelector(query.labelSelector);
    const fields = parseFieldSelector(query.fieldSelector);
    return this.store.list(r, ns).filter((o) => matchesLabels(labels, o.metadata.labels) && fields(o));
  }

  private listBody(r: ResourceDef, ns: string | undefined, query: Record<string, string>): unknown {
    const items = this.selected(r, ns, query);
    return {
      kind: `${r.kind}List`,
      apiVersion: apiVersionOf(r),
      metadata: { resourceVersion: String(this.store.resourceVersion) },
      items: items.map((o) => itemOf(r, o)),
    };
  }

  private watch(r: ResourceDef, ns: string | undefined, query: Record<string, string>, res: ServerResponse): void {
    const labels = parseLabelSelector(query.labelSelector);
    const fields = parseFieldSelector(query.fieldSelector);
    const matches = (o: KObject | undefined) =>
      Boolean(o) &&
      matchesLabels(labels, o!.metadata.labels) &&
      fields(o!) &&
      (!r.namespaced || ns === undefined || o!.metadata.namespace === ns);
    res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked', 'Cache-Control': 'no-cache, private' });
    res.flushHeaders();
    const write = (type: string, object: unknown) => res.write(`${JSON.stringify({ type, object })}\n`);
    const rvText = query.resourceVersion;
    const since = rvText === undefined || rvText === '' || rvText === '0' ? undefined : Number(rvText);
    if (since !== undefined && (!Number.isFinite(since) || since < this.store.oldestResumableVersion)) {
      write('ERROR', new ApiError(410, 'Expired', `too old resource version: ${rvText} (${this.store.oldestResumableVersion})`).toStatus());
      res.end();
      return;
    }
    const emit = (e: StoreEvent) => {
      if (e.res !== r && !(e.res.group === r.group && e.res.plural === r.plural)) return;
      const now = matches(e.object);
      const before = e.previous ? matches(e.previous) : false;
      if (e.type === 'MODIFIED' && now && !before) write('ADDED', e.object);
      else if (e.type === 'MODIFIED' && !now && before) write('DELETED', e.object);
      else if (now) write(e.type, e.object);
    };
    if (since === undefined) for (const o of this.selected(r, ns, query)) write('ADDED', o);
    else for (const e of this.store.eventsSince(since)) emit(e);
    const unsubscribe = this.store.onChange(emit);
    const bookmark =
      query.allowWatchBookmarks === 'true'
        ? setInterval(
            () =>
              write('BOOKMARK', {
                kind: r.kind,
                apiVersion: apiVersionOf(r),
                metadata: { resourceVersion: String(this.store.resourceVersion), annotations: { 'k8s.io/initial-events-end': 'true' } },
              }),
            this.opts.bookmarkMs ?? 1000,
          )
        : undefined;
    const timeoutSec = Number(query.timeoutSeconds ?? 0);
    const timer = timeoutSec > 0 ? setTimeout(() => handle.end(), timeoutSec * 1000) : undefined;
    const handle = {
      end: () => {
        cleanup();
        res.end();
      },
    };
    const cleanup = () => {
      unsubscribe();
      clearInterval(bookmark);
      clearTimeout(timer);
      this.watches.delete(handle);
    };
    this.watches.add(handle);
    // The response's close, not the request's: the request closes once its (empty) body is read.
    res.on('close', cleanup);
  }

  private async podLog(ns: string, name: string, query: Record<string, string>, res: ServerResponse): Promise<void> {
    const pod = this.store.get(this.store.resource('', 'pods')!, ns, name);
    const containers = ((pod.spec as { containers?: { name: string }[] } | undefined)?.containers ?? []).map((c) => c.name);
    const container = query.container ?? (containers.length === 1 ? containers[0] : undefined);
    if (!container) throw badRequest(`a container name must be specified for pod ${name}, choose one of: [${containers.join(' ')}]`);
    if (!containers.includes(container)) throw badRequest(`container ${container} is not valid for pod ${name}`);
    if (!this.hooks) throw new ApiError(500, 'InternalError', 'no kubelet');
    const stream = await this.hooks.logs(ns, name, {
      container,
      follow: query.follow === 'true',
      previous: query.previous === 'true',
      ...(query.tailLines ? { tailLines: Number(query.tailLines) } : {}),
    });
    res.writeHead(200, { 'Content-Type': 'text/plain', 'Transfer-Encoding': 'chunked' });
    res.flushHeaders();
    stream.on('data', (b: Buffer) => res.write(b));
    stream.on('end', () => res.end());
    stream.on('error', () => res.end());
    res.on('close', () => stream.destroy());
  }

  private accessReview(who: Identity, body: unknown): unknown {
    const spec =
      (
        (body ?? {}) as {
          spec?: {
            resourceAttributes?: {
              namespace?: string;
              verb?: string;
              group?: string;
              resource?: string;
              subresource?: string;
              name?: string;
            };
          };
        }
      ).spec ?? {};
    const a = spec.resourceAttributes ?? {};
    const resource = a.subresource ? `${a.resource ?? ''}/${a.subresource}` : (a.resource ?? '');
    const allowed = this.allowed(who, a.verb ?? '', a.group ?? '', resource, a.namespace);
    return {
      kind: 'SelfSubjectAccessReview',
      apiVersion: 'authorization.k8s.io/v1',
      metadata: { creationTimestamp: null },
      spec,
      status: allowed
        ? { allowed: true, reason: 'the test double allows it' }
        : {
            allowed: false,
            denied: true,
            reason: `the test double denies ${a.verb} ${resource} in namespace ${a.namespace ?? '(cluster)'}`,
          },
    };
  }

  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://double');
    const m = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/portforward$/.exec(url.pathname);
    const reject = (err: ApiError) => {
      const text = JSON.stringify(err.toStatus());
      socket.end(
        `HTTP/1.1 ${err.code} ${err.reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
      );
    };
    this.received.push({
      method: 'GET',
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      contentType: undefined,
      body: undefined,
    });
    const who = this.authenticate(req);
    if (!who) return reject(new ApiError(401, 'Unauthorized', 'Unauthorized'));
    if (!m) return reject(new ApiError(404, 'NotFound', 'the server could not find the requested resource'));
    const [, ns, pod] = m as unknown as [string, string, string];
    const pods = this.store.resource('', 'pods')!;
    // A WebSocket upgrade is a GET: the API server authorizes it as `get` on pods/portforward (SPDY's POST was `create`).
    if (!this.allowed(who, 'get', '', 'pods/portforward', ns)) return reject(this.forbidden(who, 'get', pods, 'portforward', pod, ns));
    if (!this.store.tryGet(pods, ns, pod))
      return reject(new ApiError(404, 'NotFound', `pods "${pod}" not found`, { name: pod, kind: 'pods' }));
    const port = Number(url.searchParams.get('ports'));
    if (!Number.isInteger(port) || port <= 0 || port > 65535) return reject(badRequest(`invalid port: ${url.searchParams.get('ports')}`));
    if (!String(req.headers['sec-websocket-protocol'] ?? '').includes('v4.channel.k8s.io'))
      return reject(badRequest('port-forward needs the v4.channel.k8s.io WebSocket protocol (SPDY is not served by the test double)'));
    this.wss.handleUpgrade(req, socket, head, (ws) => void this.portForward(ws, ns, pod, port));
  }

  /** The kubelet's side of v4.channel.k8s.io: channel 0 data, channel 1 errors, each opened by the port number (2 bytes, little-endian). */
  private readonly forwards = new Set<WebSocket>();

  /** Cuts every open port-forward stream, as an API server restart or a network blip does; returns how many. */
  dropPortForwards(): number {
    const n = this.forwards.size;
    for (const ws of this.forwards) ws.terminate();
    this.forwards.clear();
    return n;
  }

  private async portForward(ws: WebSocket, ns: string, pod: string, port: number): Promise<void> {
    this.forwards.add(ws);
    ws.on('close', () => this.forwards.delete(ws));
    const portBytes = Buffer.from([port & 0xff, port >> 8]);
    ws.send(Buffer.concat([Buffer.from([0]), portBytes]));
    ws.send(Buffer.concat([Buffer.from([1]), portBytes]));
    // The client may send before the pod side is connected: hold its data until then.
    const pending: Buffer[] = [];
    let conn: Duplex | undefined;
    let closed = false;
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (!isBinary || data.length < 2 || data[0] !== 0) return;
      if (conn) conn.write(data.subarray(1));
      else pending.push(Buffer.from(data.subarray(1)));
    });
    ws.on('close', () => {
      closed = true;
      conn?.end();
    });
    try {
      if (!this.hooks) throw new Error('no kubelet');
      conn = await this.hooks.portForward(ns, pod, port);
    } catch (err) {
      ws.send(Buffer.concat([Buffer.from([1]), Buffer.from(`error forwarding port ${port} to pod ${pod}: ${(err as Error).message}`)]));
      ws.close();
      return;
    }
    const c = conn;
    c.on('data', (b: Buffer) => {
      if (ws.readyState === ws.OPEN) ws.send(Buffer.concat([Buffer.from([0]), b]));
    });
    c.on('end', () => ws.close());
    c.on('close', () => ws.close());
    c.on('error', () => ws.close());
    for (const b of pending.splice(0)) c.write(b);
    if (closed) c.end();
  }
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function send(res: ServerResponse, code: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

function sendStatus(res: ServerResponse, err: ApiError): void {
  if (res.headersSent) return void res.end();
  send(res, err.code, err.toStatus());
}

function itemOf(r: ResourceDef, o: KObject): KObject {
  if (!r.builtIn) return o;
  const { apiVersion: _a, kind: _k, ...rest } = o;
  return rest as KObject;
}

function asObject(body: unknown, r: ResourceDef): KObject {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw badRequest(`the body of the request was not a ${r.kind} object`);
  const o = body as KObject;
  if (o.kind && o.kind !== r.kind) throw badRequest(`the kind of the body (${o.kind}) does not match the resource (${r.kind})`);
  if (o.apiVersion && o.apiVersion !== apiVersionOf(r))
    throw badRequest(`the API version of the body (${o.apiVersion}) does not match the resource (${apiVersionOf(r)})`);
  return { ...o, metadata: o.metadata ?? {} };
}

function deleteOptions(
  query: Record<string, string>,
  body: unknown,
): {
  policy: PropagationPolicy | undefined;
  preconditions?: { resourceVersion?: string; uid?: string };
  gracePeriodSeconds?: number;
} {
  const b = (body ?? {}) as {
    gracePeriodSeconds?: number;
    propagationPolicy?: string;
    orphanDependents?: boolean;
    preconditions?: { resourceVersion?: string; uid?: string };
  };
  const raw =
    query.propagationPolicy ??
    b.propagationPolicy ??
    (b.orphanDependents === true || query.orphanDependents === 'true' ? 'Orphan' : undefined);
  if (raw !== undefined && !['Orphan', 'Background', 'Foreground'].includes(raw))
    throw badRequest(`propagationPolicy: Unsupported value: "${raw}": supported values: "Foreground", "Background", "Orphan"`);
  const graceRaw = query.gracePeriodSeconds ?? b.gracePeriodSeconds;
  const grace = graceRaw === undefined ? undefined : Number(graceRaw);
  if (grace !== undefined && !(Number.isInteger(grace) && grace >= 0))
    throw badRequest(`gracePeriodSeconds: Invalid value: ${JSON.stringify(graceRaw)}: must be a non-negative integer`);
  return {
    policy: raw as PropagationPolicy | undefined,
    ...(b.preconditions ? { preconditions: b.preconditions } : {}),
    ...(grace !== undefined ? { gracePeriodSeconds: grace } : {}),
  };
}

function mergePatch(target: unknown, patch: unknown): unknown {
  if (!patch || typeof patch !== 'object' || Array.isArray(patch)) return clone(patch);
  const out: Record<string, unknown> =
    target && typeof target === 'object' && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

function applyPatch(cur: KObject, patch: unknown, contentType: string | undefined): KObject {
  const type = (contentType ?? '').split(';')[0]!.trim();
  if (type === 'application/json-patch+json') {
    if (!Array.isArray(patch)) throw badRequest('a JSON patch must be an array of operations');
    const doc = clone(cur) as unknown as Record<string, unknown>;
    for (const op of patch as { op: string; path: string; value?: unknown }[]) {
      const keys = op.path
        .split('/')
        .slice(1)
        .map((k) => k.replace(/~1/g, '/').replace(/~0/g, '~'));
      const last = keys.pop()!;
      let parent: Record<string, unknown> | unknown[] = doc;
      for (const k of keys) {
        const next: unknown = Array.isArray(parent) ? parent[Number(k)] : parent[k];
        if (next === undefined) {
          if (op.op !== 'add')
            throw new ApiError(422, 'Invalid', `the server rejected our request due to an error in our request: path ${op.path} not found`);
          (parent as Record<string, unknown>)[k] = {};
        }
        parent = (Array.isArray(parent) ? parent[Number(k)] : parent[k]) as Record<string, unknown>;
      }
      if (op.op === 'remove') {
        if (Array.isArray(parent)) parent.splice(Number(last), 1);
        else delete parent[last];
      } else if (op.op === 'add' || op.op === 'replace') {
        if (Array.isArray(parent)) {
          if (last === '-') parent.push(op.value);
          else if (op.op === 'add') parent.splice(Number(last), 0, op.value);
          else parent[Number(last)] = op.value;
        } else parent[last] = op.value;
      } else if (op.op !== 'test') throw badRequest(`unsupported JSON patch operation ${op.op}`);
    }
    return doc as unknown as KObject;
  }
  if (
    ['application/merge-patch+json', 'application/strategic-merge-patch+json', 'application/apply-patch+yaml', 'application/json'].includes(
      type,
    )
  )
    return mergePatch(cur, patch) as KObject;
  throw new ApiError(
    415,
    'UnsupportedMediaType',
    `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml`,
  );
}

// ---- what the real server validates and defaults for the kinds the lab uses ----

interface ContainerLike {
  name?: string;
  image?: string;
}
interface PodSpecLike {
  containers?: ContainerLike[];
  initContainers?: ContainerLike[];
  restartPolicy?: string;
}

function podSpecCauses(spec: PodSpecLike | undefined, field: string): StatusCause[] {
  const out: StatusCause[] = [];
  if (!spec?.containers?.length) out.push({ reason: 'FieldValueRequired', field: `${field}.containers`, message: 'Required value' });
  const seen = new Set<string>();
  (spec?.containers ?? []).forEach((c, i) => {
    if (!c.name) out.push({ reason: 'FieldValueRequired', field: `${field}.containers[${i}].name`, message: 'Required value' });
    else if (seen.has(c.name))
      out.push({ reason: 'FieldValueDuplicate', field: `${field}.containers[${i}].name`, message: `Duplicate value: "${c.name}"` });
    else seen.add(c.name);
    if (!c.image) out.push({ reason: 'FieldValueRequired', field: `${field}.containers[${i}].image`, message: 'Required value' });
  });
  return out;
}

function installBuiltInRules(store: ObjectStore): void {
  // Pod Security admission for namespaces labelled pod-security.kubernetes.io/enforce (pods only:
  // Jobs and Deployments are admitted, and their controllers' pod creates are refused).
  store.admitters.set('/pods', (o) => {
    const ns = store.tryGet(store.resource('', 'namespaces')!, undefined, o.metadata.namespace!);
    const denial = podSecurityDenial(o.metadata.name!, o.spec as never, enforcedLevel(ns?.metadata.labels));
    if (denial) throw new ApiError(403, 'Forbidden', denial, { name: o.metadata.name!, kind: 'pods' });
  });
  store.defaulters.set('/persistentvolumeclaims', (o) => {
    o.status = {
      phase: 'Bound',
      accessModes: (o.spec as { accessModes?: string[] } | undefined)?.accessModes ?? ['ReadWriteOnce'],
      capacity: (o.spec as { resources?: { requests?: Record<string, string> } } | undefined)?.resources?.requests ?? {},
    };
  });
  store.validators.set('/pods', (o) => podSpecCauses(o.spec as PodSpecLike, 'spec'));
  store.defaulters.set('/pods', (o) => {
    const spec = (o.spec ??= {}) as PodSpecLike & Record<string, unknown>;
    spec.restartPolicy ??= 'Always';
    spec.dnsPolicy ??= 'ClusterFirst';
    spec.schedulerName ??= 'default-scheduler';
    spec.terminationGracePeriodSeconds ??= 30;
    for (const c of (spec.containers ?? []) as Record<string, unknown>[]) {
      c.imagePullPolicy ??= 'IfNotPresent';
      c.terminationMessagePath ??= '/dev/termination-log';
      c.terminationMessagePolicy ??= 'File';
    }
    o.status = { phase: 'Pending', qosClass: 'BestEffort' };
  });
  store.validators.set('batch/jobs', (o, _r, old) => {
    const spec = (o.spec ?? {}) as {
      template?: { spec?: PodSpecLike; metadata?: { labels?: Record<string, string> } };
      backoffLimit?: unknown;
      activeDeadlineSeconds?: unknown;
      podFailurePolicy?: { rules?: unknown[] };
      ttlSecondsAfterFinished?: unknown;
    };
    const out: StatusCause[] = [];
    if (!spec.template) out.push({ reason: 'FieldValueRequired', field: 'spec.template', message: 'Required value' });
    out.push(...podSpecCauses(spec.template?.spec, 'spec.template.spec'));
    const rp = spec.template?.spec?.restartPolicy;
    if (rp !== 'Never' && rp !== 'OnFailure')
      out.push({
        reason: 'FieldValueNotSupported',
        field: 'spec.template.spec.restartPolicy',
        message: `Unsupported value: "${rp ?? ''}": supported values: "OnFailure", "Never"`,
      });
    if (spec.podFailurePolicy && rp !== 'Never')
      out.push({
        reason: 'FieldValueInvalid',
        field: 'spec.template.spec.restartPolicy',
        message: `Invalid value: "${rp}": only "Never" is supported when podFailurePolicy is specified`,
      });
    for (const [k, min] of [
      ['backoffLimit', 0],
      ['activeDeadlineSeconds', 1],
      ['ttlSecondsAfterFinished', 0],
    ] as const) {
      const v = spec[k];
      if (v !== undefined && (!Number.isInteger(v) || (v as number) < min))
        out.push({
          reason: 'FieldValueInvalid',
          field: `spec.${k}`,
          message: `Invalid value: ${JSON.stringify(v)}: must be ${min === 0 ? 'greater than or equal to 0' : 'greater than 0'}`,
        });
    }
    if (old && JSON.stringify((old.spec as { template?: unknown }).template) !== JSON.stringify(spec.template))
      out.push({ reason: 'FieldValueInvalid', field: 'spec.template', message: 'Invalid value: field is immutable' });
    out.push(...labelProblems(spec.template?.metadata?.labels, 'spec.template.metadata.labels'));
    return out;
  });
  store.defaulters.set('batch/jobs', (o) => {
    const spec = (o.spec ??= {}) as Record<string, unknown> & { template?: { metadata?: { labels?: Record<string, string> } } };
    spec.completions ??= 1;
    spec.parallelism ??= 1;
    spec.backoffLimit ??= 6;
    spec.completionMode ??= 'NonIndexed';
    spec.suspend ??= false;
    spec.manualSelector ??= false;
    const uid = o.metadata.uid!;
    const name = o.metadata.name!;
    spec.selector ??= { matchLabels: { 'batch.kubernetes.io/controller-uid': uid } };
    if (spec.template) {
      spec.template.metadata ??= {};
      spec.template.metadata.labels = {
        ...spec.template.metadata.labels,
        'batch.kubernetes.io/controller-uid': uid,
        'batch.kubernetes.io/job-name': name,
        'controller-uid': uid,
        'job-name': name,
      };
    }
    o.status = {};
  });
  store.validators.set('apps/deployments', (o) =>
    podSpecCauses((o.spec as { template?: { spec?: PodSpecLike } } | undefined)?.template?.spec, 'spec.template.spec'),
  );
  store.defaulters.set('apps/deployments', (o) => {
    const spec = (o.spec ??= {}) as Record<string, unknown>;
    spec.replicas ??= 1;
    o.status = {};
  });
  store.validators.set('/services', (o) => {
    const ports = ((o.spec ?? {}) as { ports?: { port?: unknown }[] }).ports ?? [];
    return ports.flatMap((p, i) =>
      Number.isInteger(p.port) ? [] : [{ reason: 'FieldValueRequired', field: `spec.ports[${i}].port`, message: 'Required value' }],
    );
  });
  store.validators.set('/secrets', (o) => {
    const out: StatusCause[] = [];
    for (const [k, v] of Object.entries((o.data ?? {}) as Record<string, unknown>))
      if (typeof v !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(v))
        out.push({ reason: 'FieldValueInvalid', field: `data[${k}]`, message: 'Invalid value: not base64' });
    return out;
  });
  store.defaulters.set('/secrets', (o) => {
    if (o.stringData) {
      const data = (o.data ?? {}) as Record<string, string>;
      for (const [k, v] of Object.entries(o.stringData as Record<string, string>)) data[k] = Buffer.from(v).toString('base64');
      o.data = data;
      delete o.stringData;
    }
    o.type ??= 'Opaque';
  });
  store.defaulters.set('/namespaces', (o) => {
    o.status = { phase: 'Active' };
    o.metadata.labels = { ...o.metadata.labels, 'kubernetes.io/metadata.name': o.metadata.name! };
  });
}
