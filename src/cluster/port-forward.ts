// `kubectl port-forward` with the client library: a loopback listener whose every connection becomes
// one port-forward stream to the pod (client-node's PortForward, WebSocket channel protocol).
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import * as k8s from '@kubernetes/client-node';
import type { Cluster } from './kube.js';
import { clusterError } from './kube.js';

export interface PortForwardHandle {
  localPort: number;
  url: string;
  pod: string;
  close(): Promise<void>;
}

export async function forwardPort(
  cluster: Cluster,
  pod: string,
  remotePort: number,
  log?: (line: string) => void,
): Promise<PortForwardHandle> {
  const forward = new k8s.PortForward(cluster.kc, true);
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    forward
      .portForward(cluster.namespace, pod, [remotePort], socket, null, socket)
      .then((ws) => {
        // PortForward leaves the local socket open when the pod side closes: close it here.
        const w = ws as unknown as { on?: (ev: string, fn: () => void) => void; close?: () => void };
        w.on?.('close', () => socket.end());
        socket.on('close', () => w.close?.());
      })
      .catch((err: unknown) => {
        log?.(clusterError(cluster, `port-forwarding to pod ${cluster.namespace}/${pod}:${remotePort}`, err).message);
        socket.destroy();
      });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const localPort = (server.address() as AddressInfo).port;
  return {
    localPort,
    url: `http://127.0.0.1:${localPort}`,
    pod,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
