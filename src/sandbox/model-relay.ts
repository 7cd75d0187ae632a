// The model relay: the Docker sandbox's main process. It listens on 127.0.0.1:MODEL_RELAY_PORT in the
// container's own loopback and pipes each connection, byte for byte, to the session socket mounted at
// SESSION_SOCKET_IN_SANDBOX, so harnesses keep an ordinary http:// base URL (and SSE streams as it is
// written) while the container itself has no route to the host. It carries no key and parses nothing:
// what the socket refuses stays refused. Plain JavaScript run with the mounted host node (`node -e`).

/** The port harnesses see inside the sandbox. Any port works: the loopback is the container's own. */
export const MODEL_RELAY_PORT = 39180;
/** Where the session socket's folder is bind-mounted (read-only: the socket cannot be replaced). */
export const SESSION_SOCKET_DIR_IN_SANDBOX = '/run/harness-lab';
export const SESSION_SOCKET_IN_SANDBOX = `${SESSION_SOCKET_DIR_IN_SANDBOX}/model.sock`;

export const MODEL_RELAY_SOURCE = String.raw`
const net = require('node:net');
const socketPath = process.argv[1];
const port = Number(process.argv[2]);
const server = net.createServer({ allowHalfOpen: true, noDelay: true }, (client) => {
  const upstream = net.connect({ path: socketPath, allowHalfOpen: true });
  client.pipe(upstream);
  upstream.pipe(client);
  // Ends travel through pipe() (pending bytes are flushed first); only a failure cuts the other side.
  client.on('error', () => upstream.destroy());
  upstream.on('error', () => client.destroy());
  client.on('close', (failed) => { if (failed) upstream.destroy(); });
  upstream.on('close', (failed) => { if (failed) client.destroy(); });
});
server.on('error', (err) => {
  console.error('harness-lab model relay: ' + err.message);
  process.exit(1);
});
server.listen({ host: '127.0.0.1', port }, () => console.log('harness-lab model relay: 127.0.0.1:' + port + ' -> ' + socketPath));
`;

/** The container command: the relay under the mounted node. */
export function relayCommand(nodeBin: string): string[] {
  return [nodeBin, '-e', MODEL_RELAY_SOURCE, SESSION_SOCKET_IN_SANDBOX, String(MODEL_RELAY_PORT)];
}

/** A bash check that the relay accepts connections (bash's /dev/tcp, within the container), up to 45 s. */
export const RELAY_READY_SCRIPT = `end=$((SECONDS + 45)); until (exec 3<>/dev/tcp/127.0.0.1/${MODEL_RELAY_PORT}) 2>/dev/null; do if [ $SECONDS -ge $end ]; then exit 1; fi; sleep 0.05; done`;
