// The double's object store: one monotonically increasing resourceVersion across all objects (as
// etcd's revision), an event history that watches resume from, compaction (a too-old
// resourceVersion is 410 Gone), uid / creationTimestamp / generateName, and garbage collection by
// ownerReferences with the three propagation policies.
import { randomUUID } from 'node:crypto';
import {
  ApiError,
  alreadyExists,
  apiVersionOf,
  clone,
  conflict,
  invalid,
  labelProblems,
  nameProblems,
  notFound,
  resourceKey,
  type KObject,
  type ResourceDef,
  type StatusCause,
} from './objects.js';

export type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface StoreEvent {
  rv: number;
  type: EventType;
  res: ResourceDef;
  object: KObject;
  /** The object before a MODIFIED (label-selector watches turn a change of labels into ADDED/DELETED). */
  previous?: KObject;
}

export type PropagationPolicy = 'Orphan' | 'Background' | 'Foreground';

export type Validator = (obj: KObject, res: ResourceDef, old?: KObject) => StatusCause[];
export type Defaulter = (obj: KObject, res: ResourceDef) => void;

const BUILT_IN: Omit<ResourceDef, 'builtIn'>[] = [
  {
    group: '',
    version: 'v1',
    plural: 'namespaces',
    singular: 'namespace',
    kind: 'Namespace',
    namespaced: false,
    hasStatus: true,
    nameRule: 'label',
  },
  { group: '', version: 'v1', plural: 'pods', singular: 'pod', kind: 'Pod', namespaced: true, hasStatus: true, nameRule: 'subdomain' },
  {
    group: '',
    version: 'v1',
    plural: 'services',
    singular: 'service',
    kind: 'Service',
    namespaced: true,
    hasStatus: true,
    nameRule: 'label1035',
  },
  {
    group: '',
    version: 'v1',
    plural: 'secrets',
    singular: 'secret',
    kind: 'Secret',
    namespaced: true,
    hasStatus: false,
    nameRule: 'subdomain',
  },
  {
    group: '',
    version: 'v1',
    plural: 'configmaps',
    singular: 'configmap',
    kind: 'ConfigMap',
    namespaced: true,
    hasStatus: false,
    nameRule: 'subdomain',
  },
  {
    group: '',
    version: 'v1',
    plural: 'events',
    singular: 'event',
    kind: 'Event',
    namespaced: true,
    hasStatus: false,
    nameRule: 'subdomain',
  },
  {
    group: '',
    version: 'v1',
    plural: 'persistentvolumeclaims',
    singular: 'persistentvolumeclaim',
    kind: 'PersistentVolumeClaim',
    namespaced: true,
    hasStatus: true,
    nameRule: 'subdomain',
  },
  {
    group: '',
    version: 'v1',
    plural: 'serviceaccounts',
    singular: 'serviceaccount',
    kind: 'ServiceAccount',
    namespaced: true,
    hasStatus: false,
    nameRule: 'subdomain',
  },
  {
    group: 'rbac.authorization.k8s.io',
    version: 'v1',
    plural: 'roles',
    singular: 'role',
    kind: 'Role',
    namespaced: true,
    hasStatus: false,
    nameRule: 'subdomain',
  },
  {
    group: 'rbac.authorization.k8s.io',
    version: 'v1',
    plural: 'rolebindings',
    singular: 'rolebinding',
    kind: 'RoleBinding',
    namespaced: true,
    hasStatus: false,
    nameRule: 'subdomain',
  },
  { group: 'batch', version: 'v1', plural: 'jobs', singular: 'job', kind: 'Job', namespaced: true, hasStatus: true, nameRule: 'label' },
  {
    group: 'apps',
    version: 'v1',
    plural: 'deployments',
    singular: 'deployment',
    kind: 'Deployment',
    namespaced: true,
    hasStatus: true,
    nameRule: 'subdomain',
  },
  {
    group: 'networking.k8s.io',
    version: 'v1',
    plural: 'networkpolicies',
    singular: 'networkpolicy',
    kind: 'NetworkPolicy',
    namespaced: true,
    hasStatus: false,
    nameRule: 'subdomain',
  },
  {
    group: 'apiextensions.k8s.io',
    version: 'v1',
    plural: 'customresourcedefinitions',
    singular: 'customresourcedefinition',
    kind: 'CustomResourceDefinition',
    namespaced: false,
    hasStatus: true,
    nameRule: 'subdomain',
  },
];

export class ObjectStore {
  private rv = 1;
  /** Events at or below this revision are gone: a watch from there gets 410. */
  private compactedRv = 0;
  private readonly history: StoreEvent[] = [];
  private readonly objects = new Map<string, KObject>();
  private readonly resources = new Map<string, ResourceDef>();
  private readonly listeners = new Set<(e: StoreEvent) => void>();
  readonly validators = new Map<string, Validator>();
  readonly defaulters = new Map<string, Defaulter>();
  /** Admission plugins by resource: throw an ApiError to refuse a create. */
  readonly admitters = new Map<string, (obj: KObject, res: ResourceDef) => void>();

  constructor() {
    for (const r of BUILT_IN) this.register({ ...r, builtIn: true });
    for (const ns of ['default', 'kube-system'])
      this.create(this.resource('', 'namespaces')!, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
  }

  register(r: ResourceDef): void {
    this.resources.set(resourceKey(r.group, r.plural), r);
  }

  unregister(group: string, plural: string): void {
    this.resources.delete(resourceKey(group, plural));
  }

  resource(group: string, plural: string): ResourceDef | undefined {
    return this.resources.get(resourceKey(group, plural));
  }

  resourcesOf(group: string, version: string): ResourceDef[] {
    return [...this.resources.values()].filter((r) => r.group === group && r.version === version);
  }

  allResources(): ResourceDef[] {
    return [...this.resources.values()];
  }

  get resourceVersion(): number {
    return this.rv;
  }

  get oldestResumableVersion(): number {
    return this.compactedRv;
  }

  onChange(listener: (e: StoreEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Drops the event history and expires every resourceVersion handed out so far (a revision is spent
   * on it, as etcd's compaction does), so any watch resuming from one gets 410 Gone, bookmarks or not.
   */
  compact(): void {
    this.rv += 1;
    this.compactedRv = this.rv;
    this.history.length = 0;
  }

  eventsSince(rv: number): StoreEvent[] {
    return this.history.filter((e) => e.rv > rv);
  }

  private key(r: ResourceDef, ns: string | undefined, name: string): string {
    return `${resourceKey(r.group, r.plural)}|${r.namespaced ? (ns ?? '') : ''}|${name}`;
  }

  private commit(type: EventType, res: ResourceDef, object: KObject, previous?: KObject): KObject {
    this.rv += 1;
    object.metadata.resourceVersion = String(this.rv);
    const k = this.key(res, object.metadata.namespace, object.metadata.name!);
    if (type === 'DELETED') this.objects.delete(k);
    else this.objects.set(k, object);
    const event: StoreEvent = { rv: this.rv, type, res, object: clone(object), ...(previous ? { previous: clone(previous) } : {}) };
    this.history.push(event);
    if (this.history.length > 20_000) this.history.splice(0, 10_000);
    for (const l of [...this.listeners]) l(event);
    return clone(object);
  }

  get(res: ResourceDef, ns: string | undefined, name: string): KObject {
    const obj = this.objects.get(this.key(res, ns, name));
    if (!obj) throw notFound(res, name);
    return clone(obj);
  }

  tryGet(res: ResourceDef, ns: string | undefined, name: string): KObject | undefined {
    const obj = this.objects.get(this.key(res, ns, name));
    return obj ? clone(obj) : undefined;
  }

  list(res: ResourceDef, ns: string | undefined): KObject[] {
    const prefix = `${resourceKey(res.group, res.plural)}|${res.namespaced && ns !== undefined ? `${ns}|` : ''}`;
    const out: KObject[] = [];
    for (const [k, v] of this.objects) if (k.startsWith(prefix)) out.push(clone(v));
    return out.sort((a, b) => Number(a.metadata.resourceVersion) - Number(b.metadata.resourceVersion));
  }

  private validate(res: ResourceDef, obj: KObject, old?: KObject): void {
    const name = obj.metadata.name ?? '';
    const causes: StatusCause[] = [];
    for (const p of nameProblems(name, res.nameRule))
      causes.push({ reason: 'FieldValueInvalid', field: 'metadata.name', message: `Invalid value: "${name}": ${p}` });
    causes.push(...labelProblems(obj.metadata.labels, 'metadata.labels'));
    causes.push(...(this.validators.get(resourceKey(res.group, res.plural))?.(obj, res, old) ?? []));
    if (causes.length) throw invalid(res, name, causes);
  }

  create(res: ResourceDef, ns: string | undefined, body: KObject): KObject {
    const obj = clone(body);
    obj.metadata ??= {};
    obj.apiVersion = apiVersionOf(res);
    obj.kind = res.kind;
    if (res.namespaced) {
      if (obj.metadata.namespace && ns && obj.metadata.namespace !== ns)
        throw new ApiError(400, 'BadRequest', `the namespace of the provided object does not match the namespace sent on the request`);
      obj.metadata.namespace = ns;
      if (!this.tryGet(this.resource('', 'namespaces')!, undefined, ns!))
        throw new ApiError(404, 'NotFound', `namespaces "${ns}" not found`, { name: ns, kind: 'namespaces' });
      const nsObj = this.tryGet(this.resource('', 'namespaces')!, undefined, ns!);
      if (nsObj?.metadata.deletionTimestamp)
        throw new ApiError(
          403,
          'Forbidden',
          `${res.plural} "${obj.metadata.name ?? ''}" is forbidden: unable to create new content in namespace ${ns} because it is being terminated`,
        );
    } else delete obj.metadata.namespace;
    if (!obj.metadata.name) {
      if (!obj.metadata.generateName)
        throw invalid(res, '', [
          { reason: 'FieldValueRequired', field: 'metadata.name', message: 'Required value: name or generateName is required' },
        ]);
      obj.metadata.name = `${obj.metadata.generateName}${Math.random().toString(36).slice(2, 7)}`;
    }
    if (this.objects.has(this.key(res, ns, obj.metadata.name))) throw alreadyExists(res, obj.metadata.name);
    obj.metadata.uid = randomUUID();
    obj.metadata.creationTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    obj.metadata.generation = 1;
    delete obj.metadata.deletionTimestamp;
    delete obj.metadata.deletionGracePeriodSeconds;
    this.defaulters.get(resourceKey(res.group, res.plural))?.(obj, res);
    this.validate(res, obj);
    // Admission after validation, as the API server orders them (Pod Security: 403 Forbidden).
    this.admitters.get(resourceKey(res.group, res.plural))?.(obj, res);
    return this.commit('ADDED', res, obj);
  }

  /** PUT semantics: a stale resourceVersion is 409 Conflict; status is kept unless subresource = status. */
  update(res: ResourceDef, ns: string | undefined, name: string, body: KObject, subresource?: 'status'): KObject {
    const old = this.get(res, ns, name);
    if (body.metadata?.name && body.metadata.name !== name)
      throw new ApiError(400, 'BadRequest', `the name of the object (${body.metadata.name}) does not match the name on the URL (${name})`);
    if (body.metadata?.resourceVersion && body.metadata.resourceVersion !== old.metadata.resourceVersion) throw conflict(res, name);
    let next: KObject;
    if (subresource === 'status') next = { ...old, status: clone(body.status) };
    else {
      next = { ...clone(body), apiVersion: old.apiVersion, kind: old.kind };
      next.metadata = {
        ...clone(body.metadata ?? {}),
        name,
        namespace: old.metadata.namespace,
        uid: old.metadata.uid,
        creationTimestamp: old.metadata.creationTimestamp,
        generation: old.metadata.generation,
      };
      if (res.hasStatus) next.status = old.status;
      if (JSON.stringify(old.spec) !== JSON.stringify(next.spec)) next.metadata.generation = (old.metadata.generation ?? 1) + 1;
      if (old.metadata.deletionTimestamp) next.metadata.deletionTimestamp = old.metadata.deletionTimestamp;
      if (old.metadata.deletionGracePeriodSeconds !== undefined)
        next.metadata.deletionGracePeriodSeconds = old.metadata.deletionGracePeriodSeconds;
    }
    if (!res.namespaced) delete next.metadata.namespace;
    this.validate(res, next, old);
    const committed = this.commit('MODIFIED', res, next, old);
    this.finishDeletionIfReady(res, committed);
    return committed;
  }

  /** Controllers' read-modify-write without conflicts. */
  mutate(res: ResourceDef, ns: string | undefined, name: string, fn: (obj: KObject) => void, subresource?: 'status'): KObject | undefined {
    const cur = this.tryGet(res, ns, name);
    if (!cur) return undefined;
    const before = JSON.stringify(cur);
    fn(cur);
    if (JSON.stringify(cur) === before) return cur;
    return this.update(res, ns, name, cur, subresource);
  }

  delete(
    res: ResourceDef,
    ns: string | undefined,
    name: string,
    opts: {
      propagationPolicy?: PropagationPolicy;
      preconditions?: { resourceVersion?: string; uid?: string };
      /** A pod's grace period (DeleteOptions.gracePeriodSeconds); its spec's terminationGracePeriodSeconds when unset. */
      gracePeriodSeconds?: number;
    } = {},
  ): KObject {
    const obj = this.get(res, ns, name);
    if (opts.preconditions?.uid && opts.preconditions.uid !== obj.metadata.uid)
      throw new ApiError(
        409,
        'Conflict',
        `Precondition failed: UID in precondition: ${opts.preconditions.uid}, UID in object meta: ${obj.metadata.uid}`,
        { name, group: res.group, kind: res.plural },
      );
    if (opts.preconditions?.resourceVersion && opts.preconditions.resourceVersion !== obj.metadata.resourceVersion)
      throw conflict(res, name);
    const policy = opts.propagationPolicy ?? 'Background';
    const uid = obj.metadata.uid!;
    if (res.group === '' && res.kind === 'Pod') {
      const graceful = this.gracefulPodDeletion(res, obj, opts.gracePeriodSeconds);
      if (graceful) return graceful;
    }
    if (res.kind === 'Namespace') {
      for (const r of this.allResources().filter((x) => x.namespaced))
        for (const o of this.list(r, name)) this.removeNow(r, o, 'Background');
      return this.removeNow(res, obj, 'Background');
    }
    if (policy === 'Orphan') {
      for (const [r, dep] of this.dependents(uid))
        this.mutate(r, dep.metadata.namespace, dep.metadata.name!, (o) => {
          o.metadata.ownerReferences = (o.metadata.ownerReferences ?? []).filter((ref) => ref.uid !== uid);
          if (!o.metadata.ownerReferences.length) delete o.metadata.ownerReferences;
        });
      return this.removeNow(res, obj, 'Orphan');
    }
    if (policy === 'Foreground') {
      const marked = this.mutate(res, ns, name, (o) => {
        o.metadata.deletionTimestamp ??= new Date().toISOString().replace(/\.\d+Z$/, 'Z');
        o.metadata.finalizers = [...new Set([...(o.metadata.finalizers ?? []), 'foregroundDeletion'])];
      })!;
      for (const [r, dep] of this.dependents(uid))
        this.delete(r, dep.metadata.namespace, dep.metadata.name!, { propagationPolicy: 'Foreground' });
      return this.tryGet(res, ns, name) ?? marked;
    }
    return this.removeNow(res, obj, 'Background');
  }

  /**
   * A running pod is not removed at once, as on a real API server: it gets a deletionTimestamp (now plus
   * its grace period) and stays, Terminating, until its node has stopped its containers (SIGTERM, then
   * SIGKILL after the grace period) and deletes it with grace 0. A pod no node runs, one that has
   * ended, or a grace of 0 goes at once (undefined here). What a server's graceful shutdown does
   * (a rollout server removing the capture proxy it made) depends on this.
   */
  private gracefulPodDeletion(res: ResourceDef, obj: KObject, requested: number | undefined): KObject | undefined {
    const spec = (obj.spec ?? {}) as { nodeName?: string; terminationGracePeriodSeconds?: number };
    const phase = (obj.status as { phase?: string } | undefined)?.phase;
    const grace = requested ?? spec.terminationGracePeriodSeconds ?? 30;
    if (!spec.nodeName || phase === 'Succeeded' || phase === 'Failed' || grace <= 0) return undefined;
    const pending = obj.metadata.deletionGracePeriodSeconds;
    // Deleted again while terminating: only a shorter grace period changes anything.
    if (obj.metadata.deletionTimestamp && pending !== undefined && pending <= grace) return obj;
    return this.mutate(res, obj.metadata.namespace, obj.metadata.name!, (o) => {
      o.metadata.deletionTimestamp = new Date(Date.now() + grace * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
      o.metadata.deletionGracePeriodSeconds = grace;
    });
  }

  private removeNow(res: ResourceDef, obj: KObject, policy: PropagationPolicy): KObject {
    if (!this.objects.has(this.key(res, obj.metadata.namespace, obj.metadata.name!))) return obj;
    obj.metadata.deletionTimestamp ??= new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    const gone = this.commit('DELETED', res, obj);
    if (policy === 'Background') {
      // The garbage collector runs after the owner is gone, as kube-controller-manager's does.
      setImmediate(() => {
        for (const [r, dep] of this.dependents(obj.metadata.uid!)) {
          try {
            this.delete(r, dep.metadata.namespace, dep.metadata.name!, { propagationPolicy: 'Background' });
          } catch (err) {
            if (!(err instanceof ApiError && err.code === 404)) throw err;
          }
        }
      });
    }
    for (const [r, owner] of this.foregroundOwners(obj)) this.finishDeletionIfReady(r, owner);
    return gone;
  }

  private dependents(uid: string): [ResourceDef, KObject][] {
    const out: [ResourceDef, KObject][] = [];
    for (const [k, o] of this.objects) {
      if (!(o.metadata.ownerReferences ?? []).some((r) => r.uid === uid)) continue;
      const [rk] = k.split('|');
      const [group, plural] = rk!.split('/') as [string, string];
      out.push([this.resource(group, plural)!, clone(o)]);
    }
    return out;
  }

  private foregroundOwners(obj: KObject): [ResourceDef, KObject][] {
    const out: [ResourceDef, KObject][] = [];
    for (const ref of obj.metadata.ownerReferences ?? []) {
      for (const [k, o] of this.objects) {
        if (o.metadata.uid !== ref.uid || !o.metadata.finalizers?.includes('foregroundDeletion')) continue;
        const [rk] = k.split('|');
        const [group, plural] = rk!.split('/') as [string, string];
        out.push([this.resource(group, plural)!, clone(o)]);
      }
    }
    return out;
  }

  private finishDeletionIfReady(res: ResourceDef, obj: KObject): void {
    if (!obj.metadata.deletionTimestamp || !obj.metadata.finalizers?.includes('foregroundDeletion')) return;
    if (this.dependents(obj.metadata.uid!).length) return;
    const rest = obj.metadata.finalizers.filter((f) => f !== 'foregroundDeletion');
    if (rest.length) return;
    this.removeNow(res, obj, 'Background');
  }
}
