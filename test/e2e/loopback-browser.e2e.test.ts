// A real browser page against the lab's loopback servers, as any web page the user opens could be:
// served from another loopback origin (http://localhost:PAGE), it opens `serve`'s /ws, reads the
// capture proxy's /sessions and sends text/plain POSTs (a "simple" request needs no CORS preflight,
// so it reaches the server); and, with chromium resolving attacker.example to 127.0.0.1 (what DNS
// rebinding achieves), it loads the proxy's and serve's routes under the attacker's name, where the
// answers would be readable. Both servers run as their defaults are: loopback, no admin key.
// Every attempt must be refused, and the refusals are asserted on the servers' side as well.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { chromium, type Browser } from 'playwright-core';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { EXAMPLES } from '../integration/sandbox-fixtures.js';
import { startServe, tempDir, type ServeProcess } from '../integration/serve-fixtures.js';
import { chromiumPath } from './code-server.js';

let browser: Browser;
let proxy: CaptureProxy;
let serve: ServeProcess;
let pageServer: Server;
const proxyLog: string[] = [];

function attackPage(proxyPort: number, servePort: number): string {
  return `<!doctype html><title>cat pictures</title><script>
window.results = {};
const done = (k, v) => { window.results[k] = v; };
const ws = new WebSocket('ws://127.0.0.1:${servePort}/ws');
ws.onopen = () => { done('ws', 'open'); ws.send(JSON.stringify({ type: 'state', data: {} })); };
ws.onmessage = (e) => done('ws_frame', String(e.data));
ws.onerror = () => done('ws', window.results.ws === 'open' ? 'open' : 'refused');
fetch('http://127.0.0.1:${proxyPort}/sessions').then((r) => r.text()).then((t) => done('read_sessions', 'read: ' + t), (e) => done('read_sessions', 'blocked: ' + e));
fetch('http://127.0.0.1:${proxyPort}/sessions', { method: 'POST', mode: 'no-cors', body: JSON.stringify({ session_id: 'made-by-a-web-page', mint_key: true }) })
  .then(() => done('post_session', 'sent'), (e) => done('post_session', 'failed: ' + e));
fetch('http://127.0.0.1:${servePort}/mcp', { method: 'POST', mode: 'no-cors', body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'openenv/session/create' }) })
  .then(() => done('post_mcp', 'sent'), (e) => done('post_mcp', 'failed: ' + e));
</script>`;
}

before(async () => {
  assert.ok(existsSync(chromiumPath()), `Chromium not found at ${chromiumPath()}: apt-get install chromium, or set CHROMIUM_PATH`);
  proxy = await CaptureProxy.start({
    engineUrl: 'http://127.0.0.1:9',
    model: 'm',
    captureLevel: 'tokens',
    logger: { info() {}, warn: (m) => proxyLog.push(m), error: (m) => proxyLog.push(m) },
  });
  proxy.sessions.create({ session_id: 'a-private-session', metadata: { prompt: 'the user prompt nobody else may read' } });
  serve = await startServe(['--dataset', `ex=${EXAMPLES}`, '--state-dir', tempDir('hl-serve-browser-')]);
  const servePort = Number(new URL(serve.url).port);
  pageServer = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(attackPage(proxy.port, servePort));
  });
  await new Promise<void>((resolve) => pageServer.listen(0, '127.0.0.1', resolve));
  browser = await chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    // attacker.example resolves to this machine, as a rebinding DNS server makes it for the page.
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--no-first-run',
      '--host-resolver-rules=MAP attacker.example 127.0.0.1',
    ],
  });
});

after(async () => {
  await browser?.close();
  pageServer?.close();
  await proxy?.close();
  serve?.child.kill('SIGTERM');
  await serve?.exited;
});

test('a page on another loopback origin: /ws, a /sessions read and text/plain POSTs are all refused', { timeout: 120_000 }, async () => {
  const page = await browser.newPage();
  const pagePort = (pageServer.address() as AddressInfo).port;
  await page.goto(`http://localhost:${pagePort}/`);
  await page.waitForFunction(
    () => {
      const r = (window as unknown as { results: Record<string, string> }).results;
      return r.ws && r.read_sessions && r.post_session && r.post_mcp;
    },
    undefined,
    { timeout: 30_000 },
  );
  const results = await page.evaluate(() => (window as unknown as { results: Record<string, string> }).results);
  assert.equal(results.ws, 'refused', JSON.stringify(results));
  assert.equal(results.ws_frame, undefined, 'no frame came back over the socket');
  assert.match(results.read_sessions!, /^blocked/);
  // The server side: what reached it was refused, and nothing was made.
  assert.equal(proxy.sessions.get('made-by-a-web-page'), undefined, 'the page created no session');
  assert.deepEqual(
    proxy.sessions.list().map((s) => s.session_id),
    ['a-private-session'],
  );
  assert.ok(
    proxyLog.some((l) => /refused GET \/sessions: refused: requests from web pages \(Origin http:\/\/localhost:\d+\)/.test(l)),
    proxyLog.join('\n'),
  );
  assert.ok(
    proxyLog.some((l) => /refused POST \/sessions/.test(l)),
    proxyLog.join('\n'),
  );
  assert.match(serve.stderr(), /refused upgrade \/ws: refused: requests from web pages \(Origin http:\/\/localhost:\d+\)/);
  assert.match(serve.stderr(), /refused POST \/mcp/);
  await page.close();
});

test("DNS rebinding: under the attacker's name the proxy and serve answer only a refusal, with no data", { timeout: 60_000 }, async () => {
  const page = await browser.newPage();
  const servePort = Number(new URL(serve.url).port);
  for (const url of [
    `http://attacker.example:${proxy.port}/sessions`,
    `http://attacker.example:${proxy.port}/health`,
    `http://attacker.example:${servePort}/harbor_env/splits`,
  ]) {
    const response = await page.goto(url);
    const text = await page.evaluate(() => document.body.innerText);
    assert.equal(response?.status(), 403, `${url}: ${text}`);
    assert.match(text, /does not answer to Host 'attacker\.example:\d+'/);
    assert.doesNotMatch(text, /a-private-session|the user prompt|"instance"|num_tasks|"name"/, `${url} leaks nothing`);
  }
  await page.close();
});
