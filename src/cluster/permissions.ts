// What a lab that runs rollouts in a namespace does there (the Kubernetes batch backend, and so
// `harness-lab serve --backend k8s`), as one list: asked with SelfSubjectAccessReviews before a batch
// creates anything, and granted as a Role's rules to the rollout server a training run deploys, so
// that server gets exactly the verbs it uses and nothing else.
import type { Permission } from './kube.js';

export const ROLLOUT_PERMISSIONS: Permission[] = [
  { verb: 'create', group: 'batch', resource: 'jobs' },
  // A Job is read back to make it the owner of its attempt's Secret.
  { verb: 'get', group: 'batch', resource: 'jobs' },
  { verb: 'list', group: 'batch', resource: 'jobs' },
  { verb: 'watch', group: 'batch', resource: 'jobs' },
  { verb: 'delete', group: 'batch', resource: 'jobs' },
  { verb: 'deletecollection', group: 'batch', resource: 'jobs' },
  { verb: 'list', group: '', resource: 'pods' },
  { verb: 'watch', group: '', resource: 'pods' },
  { verb: 'get', group: '', resource: 'pods', subresource: 'log' },
  // client-node port-forwards over a WebSocket: a GET, which the API server authorizes as `get`.
  { verb: 'get', group: '', resource: 'pods', subresource: 'portforward' },
  { verb: 'list', group: '', resource: 'events' },
  { verb: 'watch', group: '', resource: 'events' },
  { verb: 'create', group: '', resource: 'configmaps' },
  { verb: 'deletecollection', group: '', resource: 'configmaps' },
  { verb: 'create', group: '', resource: 'secrets' },
  // A resumed batch reads its proxy's admin key back from the proxy's Secret.
  { verb: 'get', group: '', resource: 'secrets' },
  { verb: 'patch', group: '', resource: 'secrets' },
  { verb: 'delete', group: '', resource: 'secrets' },
  { verb: 'deletecollection', group: '', resource: 'secrets' },
  { verb: 'create', group: '', resource: 'persistentvolumeclaims' },
  { verb: 'delete', group: '', resource: 'persistentvolumeclaims' },
  { verb: 'create', group: '', resource: 'services' },
  { verb: 'delete', group: '', resource: 'services' },
  { verb: 'create', group: 'apps', resource: 'deployments' },
  { verb: 'delete', group: 'apps', resource: 'deployments' },
  { verb: 'create', group: 'networking.k8s.io', resource: 'networkpolicies' },
  { verb: 'deletecollection', group: 'networking.k8s.io', resource: 'networkpolicies' },
];

export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

/** A Role's rules granting exactly `perms`: one rule per (group, resource), its verbs sorted. */
export function roleRules(perms: readonly Permission[]): PolicyRule[] {
  const byResource = new Map<string, { group: string; resource: string; verbs: Set<string> }>();
  for (const p of perms) {
    const resource = p.subresource ? `${p.resource}/${p.subresource}` : p.resource;
    const key = `${p.group}\0${resource}`;
    const entry = byResource.get(key) ?? byResource.set(key, { group: p.group, resource, verbs: new Set() }).get(key)!;
    entry.verbs.add(p.verb);
  }
  return [...byResource.values()].map((e) => ({ apiGroups: [e.group], resources: [e.resource], verbs: [...e.verbs].sort() }));
}
