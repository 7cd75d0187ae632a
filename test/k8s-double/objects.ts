// Shared shapes of the Kubernetes API server test double: objects as they travel on the wire (JSON),
// resource definitions, the Status error type, label selectors and name validation.

export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  deletionGracePeriodSeconds?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
  finalizers?: string[];
}

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

/** Any object as stored: JSON with metadata. */
export interface KObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

export interface ResourceDef {
  group: string;
  version: string;
  plural: string;
  singular: string;
  kind: string;
  namespaced: boolean;
  /** Built-in lists omit kind/apiVersion on items, as the real server's typed lists do. */
  builtIn: boolean;
  hasStatus: boolean;
  /** Name rule for metadata.name (Jobs, Services and Namespaces are DNS labels). */
  nameRule: 'subdomain' | 'label' | 'label1035';
}

export const apiVersionOf = (r: Pick<ResourceDef, 'group' | 'version'>): string => (r.group ? `${r.group}/${r.version}` : r.version);
/** `jobs.batch`, `pods`: how the real server names a resource in its messages. */
export const qualifiedName = (r: Pick<ResourceDef, 'group' | 'plural'>): string => (r.group ? `${r.plural}.${r.group}` : r.plural);
export const resourceKey = (group: string, plural: string): string => `${group}/${plural}`;

export interface StatusCause {
  reason: string;
  message: string;
  field: string;
}

/** An API error as the real server sends it: a `Status` object with the HTTP code. */
export class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: { name?: string; group?: string; kind?: string; causes?: StatusCause[]; retryAfterSeconds?: number },
  ) {
    super(message);
  }

  toStatus(): Record<string, unknown> {
    return {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: this.message,
      reason: this.reason,
      ...(this.details ? { details: this.details } : {}),
      code: this.code,
    };
  }
}

export function notFound(r: ResourceDef, name: string): ApiError {
  return new ApiError(404, 'NotFound', `${qualifiedName(r)} "${name}" not found`, { name, group: r.group, kind: r.plural });
}

export function alreadyExists(r: ResourceDef, name: string): ApiError {
  return new ApiError(409, 'AlreadyExists', `${qualifiedName(r)} "${name}" already exists`, { name, group: r.group, kind: r.plural });
}

export function conflict(r: ResourceDef, name: string): ApiError {
  return new ApiError(
    409,
    'Conflict',
    `Operation cannot be fulfilled on ${qualifiedName(r)} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
    { name, group: r.group, kind: r.plural },
  );
}

export function invalid(r: ResourceDef, name: string, causes: StatusCause[]): ApiError {
  const list = causes.map((c) => `${c.field}: ${c.message}`);
  const joined = list.length === 1 ? list[0] : `[${list.join(', ')}]`;
  return new ApiError(422, 'Invalid', `${r.kind}${r.group ? `.${r.group}` : ''} "${name}" is invalid: ${joined}`, {
    name,
    group: r.group,
    kind: r.kind,
    causes,
  });
}

export function badRequest(message: string): ApiError {
  return new ApiError(400, 'BadRequest', message);
}

// ---- names and labels ----

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_1035 = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

export function nameProblems(value: string, rule: ResourceDef['nameRule']): string[] {
  const out: string[] = [];
  if (rule === 'subdomain') {
    if (value.length > 253) out.push('must be no more than 253 characters');
    if (!DNS_SUBDOMAIN.test(value))
      out.push(
        `a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
      );
  } else {
    if (value.length > 63) out.push('must be no more than 63 characters');
    if (rule === 'label' && !DNS_LABEL.test(value))
      out.push(
        `a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
      );
    if (rule === 'label1035' && !DNS_1035.test(value))
      out.push(
        `a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`,
      );
  }
  return out;
}

export function labelProblems(labels: Record<string, unknown> | undefined, field: string): StatusCause[] {
  const out: StatusCause[] = [];
  for (const [key, value] of Object.entries(labels ?? {})) {
    const slash = key.lastIndexOf('/');
    const prefix = slash >= 0 ? key.slice(0, slash) : '';
    const name = slash >= 0 ? key.slice(slash + 1) : key;
    if ((prefix && (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) || name.length > 63 || !LABEL_NAME.test(name))
      out.push({
        reason: 'FieldValueInvalid',
        field,
        message: `Invalid value: "${key}": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`,
      });
    if (typeof value !== 'string')
      out.push({
        reason: 'FieldValueInvalid',
        field: `${field}[${key}]`,
        message: `Invalid value: ${JSON.stringify(value)}: must be a string`,
      });
    else if (value !== '' && (value.length > 63 || !LABEL_NAME.test(value)))
      out.push({
        reason: 'FieldValueInvalid',
        field: `${field}[${key}]`,
        message: `Invalid value: "${value}": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, at most 63 characters`,
      });
  }
  return out;
}

// ---- label selectors: =, ==, !=, in, notin, exists, !exists ----

type Requirement = { key: string; op: 'in' | 'notin' | 'exists' | '!exists'; values: string[] };

export function parseLabelSelector(text: string | undefined): Requirement[] {
  const out: Requirement[] = [];
  if (!text) return out;
  // Split on commas outside parentheses.
  const parts: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of text) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      parts.push(cur);
      cur = '';
    } else cur += ch;
  }
  parts.push(cur);
  for (const raw of parts) {
    const p = raw.trim();
    if (!p) continue;
    let m: RegExpExecArray | null;
    if ((m = /^(\S+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(p)))
      out.push({
        key: m[1]!,
        op: m[2] as 'in' | 'notin',
        values: m[3]!
          .split(',')
          .map((v) => v.trim())
          .filter(Boolean),
      });
    else if ((m = /^([^!=\s]+)\s*!=\s*(\S*)$/.exec(p))) out.push({ key: m[1]!, op: 'notin', values: [m[2]!] });
    else if ((m = /^([^!=\s]+)\s*==?\s*(\S*)$/.exec(p))) out.push({ key: m[1]!, op: 'in', values: [m[2]!] });
    else if ((m = /^!(\S+)$/.exec(p))) out.push({ key: m[1]!, op: '!exists', values: [] });
    else if ((m = /^([^!=\s()]+)$/.exec(p))) out.push({ key: m[1]!, op: 'exists', values: [] });
    else throw badRequest(`unable to parse requirement: found '${p}', expected: in, notin, =, ==, !=, gt, lt`);
  }
  return out;
}

export function matchesLabels(reqs: Requirement[], labels: Record<string, string> | undefined): boolean {
  const l = labels ?? {};
  return reqs.every((r) => {
    const has = Object.prototype.hasOwnProperty.call(l, r.key);
    switch (r.op) {
      case 'exists':
        return has;
      case '!exists':
        return !has;
      case 'in':
        return has && r.values.includes(l[r.key]!);
      case 'notin':
        return !has || !r.values.includes(l[r.key]!);
    }
  });
}

/** Field selectors the double understands: metadata.name, metadata.namespace, status.phase (pods). */
export function parseFieldSelector(text: string | undefined): (obj: KObject) => boolean {
  if (!text) return () => true;
  const reqs = text.split(',').map((p) => {
    const m = /^([^!=]+)(!=|==|=)(.*)$/.exec(p.trim());
    if (!m) throw badRequest(`invalid selector: '${text}'; can't understand '${p}'`);
    const [, field, op, value] = m as unknown as [string, string, string, string];
    if (
      ![
        'metadata.name',
        'metadata.namespace',
        'status.phase',
        'spec.nodeName',
        'involvedObject.kind',
        'involvedObject.name',
        'involvedObject.uid',
        'reason',
        'type',
      ].includes(field)
    )
      throw badRequest(`field label not supported: ${field}`);
    return { field, neg: op === '!=', value };
  });
  return (obj) =>
    reqs.every((r) => {
      const v = r.field
        .split('.')
        .reduce<unknown>((o, k) => (o && typeof o === 'object' ? (o as Record<string, unknown>)[k] : undefined), obj);
      return (String(v ?? '') === r.value) !== r.neg;
    });
}

/** "512Mi", "1G", "500m", "2" -> bytes or cores. */
export function parseQuantity(q: string | number | undefined): number | undefined {
  if (q === undefined) return undefined;
  if (typeof q === 'number') return q;
  const m = /^([+-]?[0-9.]+)([eE][0-9+-]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/.exec(q.trim());
  if (!m) return undefined;
  const n = Number(m[1]! + (m[2] ?? ''));
  const f: Record<string, number> = {
    m: 1e-3,
    k: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
    P: 1e15,
    E: 1e18,
    Ki: 1024,
    Mi: 1024 ** 2,
    Gi: 1024 ** 3,
    Ti: 1024 ** 4,
    Pi: 1024 ** 5,
    Ei: 1024 ** 6,
  };
  return n * (m[3] ? f[m[3]]! : 1);
}

export const clone = <T>(v: T): T => structuredClone(v);
