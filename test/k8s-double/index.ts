// A whole test cluster: the API server double on 127.0.0.1, one simulated node that runs pods as
// Docker containers, and a kubeconfig file the real @kubernetes/client-node loads.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type Docker from 'dockerode';
import { KubeApiDouble, type ApiServerOptions } from './api-server.js';
import { SimulatedNode, type KubeletOptions } from './kubelet.js';
import { API_SERVICE_IP } from './network.js';

export { KubeApiDouble } from './api-server.js';
export { SimulatedNode } from './kubelet.js';

/**
 * Writes `file`: a kubeconfig whose one context, `double` (current), reaches the API server double at
 * `url` with its token, in `namespace`. For tests that run the API server without a node.
 */
export function writeApiKubeconfig(file: string, api: KubeApiDouble, url: string, namespace: string): void {
  writeFileSync(
    file,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'double',
      clusters: [{ name: 'double', cluster: { server: url, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'tester', user: { token: api.token } }],
      contexts: [{ name: 'double', context: { cluster: 'double', user: 'tester', namespace } }],
    }),
  );
}

export interface KubeDouble {
  api: KubeApiDouble;
  node: SimulatedNode;
  url: string;
  /** A kubeconfig with context `double` (current) and a second context `unreachable` (a closed port). */
  kubeconfig: string;
  context: string;
  close(): Promise<void>;
}

export async function startKubeDouble(docker: Docker, opts: ApiServerOptions & KubeletOptions = {}): Promise<KubeDouble> {
  const api = new KubeApiDouble(opts);
  const url = await api.listen();
  await api.listenTls(API_SERVICE_IP);
  const node = new SimulatedNode(api, docker, randomBytes(4).toString('hex'), opts);
  await node.start();
  const dir = mkdtempSync(join(tmpdir(), 'hl-kubeconfig-'));
  const kubeconfig = join(dir, 'config');
  writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'double',
      clusters: [
        // Plain HTTP on loopback; client-node only allows http:// with skip-TLS-verify set.
        { name: 'double', cluster: { server: url, 'insecure-skip-tls-verify': true } },
        // Port 1 on loopback: nothing listens there, so this context is unreachable.
        { name: 'nowhere', cluster: { server: 'http://127.0.0.1:1', 'insecure-skip-tls-verify': true } },
      ],
      users: [{ name: 'tester', user: { token: api.token } }],
      contexts: [
        { name: 'double', context: { cluster: 'double', user: 'tester', namespace: 'default' } },
        { name: 'unreachable', context: { cluster: 'nowhere', user: 'tester' } },
      ],
    }),
  );
  return {
    api,
    node,
    url,
    kubeconfig,
    context: 'double',
    close: async () => {
      await node.close();
      await api.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
