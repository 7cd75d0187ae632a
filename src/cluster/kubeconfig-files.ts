// Where a kubeconfig is read from, as kubectl does: $KUBECONFIG (a path list), else ~/.kube/config.
// Kept apart from the client library so the editor can ask without loading it. When none of the files
// exists there is no cluster configured: @kubernetes/client-node would fall back to an in-cluster or a
// localhost:8080 config ("loaded-context") the user never made, so callers stop here instead.
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';

export function kubeconfigFiles(env: NodeJS.ProcessEnv = process.env, home = homedir()): string[] {
  const listed = (env.KUBECONFIG ?? '').split(delimiter).filter(Boolean);
  return listed.length ? listed : [join(home, '.kube', 'config')];
}

/** Inside a pod the service account is a kubeconfig of its own. */
export function inCluster(env: NodeJS.ProcessEnv = process.env): boolean {
  return (
    Boolean(env.KUBERNETES_SERVICE_HOST && env.KUBERNETES_SERVICE_PORT) && existsSync('/var/run/secrets/kubernetes.io/serviceaccount/token')
  );
}

/** Undefined when a kubeconfig exists; else the sentence that says where it was looked for. */
export function missingKubeconfig(env: NodeJS.ProcessEnv = process.env, home = homedir()): string | undefined {
  const files = kubeconfigFiles(env, home);
  if (files.some((f) => existsSync(f)) || inCluster(env)) return undefined;
  return `No kubeconfig found (looked at ${files.join(', ')}); set KUBECONFIG or create ~/.kube/config`;
}
