// The floor for the proxy's overhead: a bare node:http server that forwards every POST body to the
// engine over an undici pool and answers with the engine's answer. With `--parse` it is issue 16's
// "parse, forward, answer" pass-through: the request is parsed and stringified again to forward, a
// JSON answer parsed and stringified again to answer (what any proxy that reads the calls pays).
// Without it, bytes are piped both ways: no parsing, no capture, no disk. Prints one JSON line
// `{"url": ...}` on stdout once listening; exits when stdin closes or on SIGTERM/SIGINT.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';

const { values } = parseArgs({
  options: { 'engine-url': { type: 'string' }, port: { type: 'string', default: '0' }, parse: { type: 'boolean', default: false } },
});
if (!values['engine-url']) {
  process.stderr.write('usage: passthrough.ts --engine-url URL [--port N] [--parse]\n');
  process.exit(2);
}
const parse = values.parse === true;
const engine = new Pool(new URL(values['engine-url']).origin, {
  connections: null,
  pipelining: 1,
  headersTimeout: 900_000,
  bodyTimeout: 900_000,
  keepAliveTimeout: 30_000,
});

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

async function forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (req.method === 'GET' && req.url === '/health') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"status":"ok"}');
    return;
  }
  if (req.method !== 'POST') {
    res.writeHead(404).end();
    return;
  }
  const raw = await readBody(req);
  let body: Buffer | string = raw;
  if (parse) {
    try {
      body = JSON.stringify(JSON.parse(raw.toString('utf8')));
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"body must be JSON"}}');
      return;
    }
  }
  const answer = await engine.request({ method: 'POST', path: req.url ?? '/', headers: { 'content-type': 'application/json' }, body });
  const headers: Record<string, string> = {};
  const type = answer.headers['content-type'];
  if (typeof type === 'string') headers['content-type'] = type;
  if (parse && typeof type === 'string' && type.includes('json')) {
    const text = JSON.stringify(JSON.parse(await answer.body.text()));
    headers['content-length'] = String(Buffer.byteLength(text));
    res.writeHead(answer.statusCode, headers).end(text);
    return;
  }
  const length = answer.headers['content-length'];
  if (typeof length === 'string') headers['content-length'] = length;
  res.writeHead(answer.statusCode, headers);
  await pipeline(answer.body, res);
}

const server = createServer((req, res) => {
  forward(req, res).catch((err: unknown) => {
    if (!res.headersSent)
      res.writeHead(502, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: String(err) } }));
    else res.destroy();
  });
});
server.keepAliveTimeout = 75_000;
server.requestTimeout = 0;
// The same accept backlog as vLLM/uvicorn (2048) instead of node's 511: see fake-engine-process.ts.
server.listen({ port: Number(values.port), host: '127.0.0.1', backlog: 2048 }, () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${port}`, pid: process.pid })}\n`);
});

const stop = () => {
  server.closeAllConnections();
  server.close();
  void engine.close().then(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
process.stdin.on('end', stop).resume();
