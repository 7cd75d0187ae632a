// The user's cluster through @kubernetes/client-node 1.x: their kubeconfig ($KUBECONFIG or
// ~/.kube/config, or a file given), `--context` and `--namespace`, and every failure turned into a
// message in Kubernetes terms that names the context, the server and the object.
import * as k8s from '@kubernetes/client-node';
import { z } from 'zod';
import { missingKubeconfig } from './kubeconfig-files.js';

export class ClusterError extends Error {
  constructor(
    message: string,
    /** The HTTP code the API server answered, when it answered. */
    readonly code?: number,
    readonly reason?: string,
  ) {
    super(message);
    this.name = 'ClusterError';
  }
}

export interface ClusterTarget {
  /** A kubeconfig file; default: $KUBECONFIG (a list, merged) else ~/.kube/config. */
  kubeconfig?: string;
  context?: string | null;
  namespace?: string | null;
}

export interface Cluster {
  kc: k8s.KubeConfig;
  context: string;
  server: string;
  namespace: string;
  batch: k8s.BatchV1Api;
  core: k8s.CoreV1Api;
  apps: k8s.AppsV1Api;
  networking: k8s.NetworkingV1Api;
  authz: k8s.AuthorizationV1Api;
  objects: k8s.KubernetesObjectApi;
}

const StatusSchema = z
  .object({ kind: z.literal('Status'), message: z.string().optional(), reason: z.string().optional(), code: z.number().optional() })
  .loose();

/** The API server's Status message out of a client-node error (its body is the JSON Status as a string). */
export function apiStatus(err: unknown): { code: number; reason: string; message: string } | undefined {
  if (!(err instanceof k8s.ApiException)) return undefined;
  const code = err.code as number;
  let body: unknown = err.body;
  if (typeof body === 'string') {
    const text = body;
    try {
      body = JSON.parse(text);
    } catch {
      return { code, reason: '', message: text.trim().slice(0, 500) || `HTTP ${code}` };
    }
  }
  const s = StatusSchema.safeParse(body);
  return s.success
    ? { code, reason: s.data.reason ?? '', message: s.data.message ?? `HTTP ${code}` }
    : { code, reason: '', message: `HTTP ${code}` };
}

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ETIMEDOUT',
  'ECONNRESET',
  'EAI_AGAIN',
  'ENETUNREACH',
  'CERT_HAS_EXPIRED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
]);

function networkCause(err: unknown): string | undefined {
  for (let e: unknown = err, i = 0; e && i < 5; e = (e as { cause?: unknown }).cause, i++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && NETWORK_CODES.has(code)) return `${code}${(e as Error).message ? `: ${(e as Error).message}` : ''}`;
    if ((e as { type?: string }).type === 'system' || (e as Error).name === 'FetchError') return (e as Error).message;
  }
  return undefined;
}

/** One error in the user's terms: "<doing what>: <the API server's words>" or "context X is unreachable". */
export function clusterError(cluster: Pick<Cluster, 'context' | 'server'>, doing: string, err: unknown): ClusterError {
  if (err instanceof ClusterError) return err;
  const status = apiStatus(err);
  if (status) {
    const hint =
      status.code === 403
        ? ' (ask the cluster admin for this permission, or pick another --namespace)'
        : status.code === 401
          ? ` (the credentials of kube context "${cluster.context}" were rejected; refresh them, e.g. log in again)`
          : '';
    return new ClusterError(
      `${doing}: the API server at ${cluster.server} answered ${status.code}${status.reason ? ` ${status.reason}` : ''}: ${status.message}${hint}`,
      status.code,
      status.reason,
    );
  }
  const net = networkCause(err);
  if (net)
    return new ClusterError(
      `kube context "${cluster.context}" is unreachable: the API server ${cluster.server} did not answer (${net}) while ${doing}; check it with \`kubectl --context ${cluster.context} cluster-info\``,
    );
  return new ClusterError(`${doing}: ${(err as Error)?.message ?? String(err)}`);
}

/** Loads the kubeconfig and picks the context and namespace; nothing is sent yet. */
export function loadCluster(target: ClusterTarget = {}): Cluster {
  const kc = new k8s.KubeConfig();
  const source = target.kubeconfig ?? (process.env.KUBECONFIG || '~/.kube/config');
  if (!target.kubeconfig) {
    const missing = missingKubeconfig();
    if (missing) throw new ClusterError(`${missing} (or pass --kubeconfig)`);
  }
  try {
    if (target.kubeconfig) kc.loadFromFile(target.kubeconfig);
    else kc.loadFromDefault();
  } catch (err) {
    throw new ClusterError(`cannot read the kubeconfig ${source}: ${(err as Error).message}`);
  }
  const names = kc.getContexts().map((c) => c.name);
  if (target.context) {
    if (!names.includes(target.context))
      throw new ClusterError(
        `kube context "${target.context}" is not in the kubeconfig ${source}; its contexts: ${names.join(', ') || '(none)'}`,
      );
    kc.setCurrentContext(target.context);
  }
  const context = kc.getCurrentContext();
  if (!context || !names.includes(context))
    throw new ClusterError(`the kubeconfig ${source} has no current context; pass --context (one of: ${names.join(', ') || 'none'})`);
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new ClusterError(`kube context "${context}" names no cluster in ${source}`);
  const namespace = target.namespace || kc.getContextObject(context)?.namespace || 'default';
  return {
    kc,
    context,
    server: cluster.server,
    namespace,
    batch: kc.makeApiClient(k8s.BatchV1Api),
    core: kc.makeApiClient(k8s.CoreV1Api),
    apps: kc.makeApiClient(k8s.AppsV1Api),
    networking: kc.makeApiClient(k8s.NetworkingV1Api),
    authz: kc.makeApiClient(k8s.AuthorizationV1Api),
    objects: k8s.KubernetesObjectApi.makeApiClient(kc),
  };
}

/** Asks the API server for its version: an unreachable context fails here, before anything is created. */
export async function checkReachable(cluster: Cluster): Promise<string> {
  try {
    const v = await cluster.kc.makeApiClient(k8s.VersionApi).getCode();
    return v.gitVersion;
  } catch (err) {
    throw clusterError(cluster, 'asking for the server version', err);
  }
}

export interface Permission {
  verb: string;
  group: string;
  resource: string;
  subresource?: string;
}

/** SelfSubjectAccessReview for each permission; a denial names verb, resource and namespace, as a 403 would. */
export async function assertPermissions(cluster: Cluster, perms: Permission[]): Promise<void> {
  const denied: string[] = [];
  for (const p of perms) {
    let review: k8s.V1SelfSubjectAccessReview;
    try {
      review = await cluster.authz.createSelfSubjectAccessReview({
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SelfSubjectAccessReview',
          spec: {
            resourceAttributes: {
              namespace: cluster.namespace,
              verb: p.verb,
              group: p.group,
              resource: p.resource,
              ...(p.subresource ? { subresource: p.subresource } : {}),
            },
          },
        },
      });
    } catch (err) {
      throw clusterError(cluster, `checking whether you may ${p.verb} ${p.resource} in namespace ${cluster.namespace}`, err);
    }
    if (!review.status?.allowed) {
      const res = `${p.resource}${p.subresource ? `/${p.subresource}` : ''}${p.group ? `.${p.group}` : ''}`;
      denied.push(`${p.verb} ${res}${review.status?.reason ? ` (${review.status.reason})` : ''}`);
    }
  }
  if (denied.length)
    throw new ClusterError(
      `kube context "${cluster.context}": you may not ${denied.join(', ')} in namespace "${cluster.namespace}" ` +
        `(SelfSubjectAccessReview denied it); ask the cluster admin for these permissions, or pick another --namespace`,
      403,
      'Forbidden',
    );
}

/**
 * The object as client-node's serializer expects it. The serializer writes only the attributes its
 * model classes name, and it names a field that is a reserved word in TypeScript with an underscore:
 * a NetworkPolicy ingress rule's `from` must be handed over as `_from`, or it is silently dropped and
 * the rule admits every source.
 */
export function forClientSerializer(obj: k8s.KubernetesObject): k8s.KubernetesObject {
  if (obj.kind !== 'NetworkPolicy') return obj;
  const o = structuredClone(obj) as k8s.KubernetesObject & { spec?: { ingress?: Record<string, unknown>[] } };
  for (const rule of o.spec?.ingress ?? []) {
    if (!('from' in rule)) continue;
    rule._from = rule.from;
    delete rule.from;
  }
  return o;
}

/** Creates an object; an existing one of the same name is fine (a resumed batch re-applies). */
export async function createOrKeep(cluster: Cluster, obj: k8s.KubernetesObject): Promise<'created' | 'exists'> {
  try {
    await cluster.objects.create(forClientSerializer(obj));
    return 'created';
  } catch (err) {
    if (apiStatus(err)?.code === 409) return 'exists';
    throw clusterError(cluster, `creating ${obj.kind} ${cluster.namespace}/${obj.metadata?.name}`, err);
  }
}
