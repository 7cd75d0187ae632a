// A reusable escape probe: a node script a policy could run inside its sandbox, trying every way out
// to the capture and the host that a sandbox must not have, plus the one way it must have (its own
// model route, streamed and not). Tests put it in a sandbox (`escapeProbeCommand`, e.g. as a scripted
// policy's shell command, or through Sandbox.exec), then check its report (`assertEscapesRefused`)
// and the capture on the host (`assertCaptureIntact`). Used by the `run` path's test and by the
// batch runner's (both in sandbox-escape.test.ts).
//
// All traffic stays inside the sandbox: HTTP to its own relay, and a TCP scan of the sandbox's own
// loopback (a container's 127.0.0.1 is its own namespace). Nothing is sent to a bridge or host address.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { CaptureProxy } from '../../src/capture/proxy.js';

export interface ProbeTargets {
  /** Another session of the same proxy (a GRPO sibling): its calls must stay out of reach. */
  siblingSessionId?: string;
  /**
   * Several sibling sessions (a whole GRPO group, the probe's own among them when one policy runs
   * every member): each one but the probe's own key is tried.
   */
  siblingSessionIds?: string[];
  /** Where the probe writes its report, inside the sandbox (e.g. /logs/agent/escape-probe.json). */
  reportPath: string;
  /** The one loopback port inside the sandbox that may answer (the model relay), if any. */
  relayPort?: number;
  /** The Unix socket folder mounted into the sandbox, if any (it must be read-only). */
  socketDir?: string;
}

export interface ProbeAttempt {
  name: string;
  /** `ok`: must succeed (the sandbox's own model route); `refused`: must fail or be refused. */
  expect: 'ok' | 'refused';
  status?: number;
  error?: string;
  /** The first bytes of the answer, for the failure message. */
  body?: string;
  /** What `ok` further requires of the body (checked inside, to keep the report small). */
  checked?: string;
}

export interface ProbeReport {
  base_url: string | null;
  own_key_found: boolean;
  attempts: ProbeAttempt[];
  /** Open TCP ports on the sandbox's own loopback (127.0.0.1), full range. */
  open_loopback_ports: number[];
  /** Network interfaces the sandbox has. */
  interfaces: string[];
}

// Plain JavaScript for the host's node mounted in the sandbox (`node FILE TARGETS_JSON`).
const PROBE_SOURCE = String.raw`
const http = require('node:http');
const net = require('node:net');
const fs = require('node:fs');
const os = require('node:os');
const t = JSON.parse(process.argv[2]);
const env = process.env;
const key = env.HARNESS_LAB_API_KEY || env.OPENAI_API_KEY || env.ANTHROPIC_API_KEY || env.GEMINI_API_KEY || null;
const base = (env.HARNESS_LAB_BASE_URL || env.OPENAI_BASE_URL || env.ANTHROPIC_BASE_URL || env.GOOGLE_GEMINI_BASE_URL || (t.relayPort ? 'http://127.0.0.1:' + t.relayPort : '')).replace(/\/v1\/?$/, '').replace(/\/+$/, '') || null;
const attempts = [];

function call(method, path, headers, body) {
  return new Promise((resolve) => {
    if (!base) return resolve({ error: 'no base URL in the environment' });
    const u = new URL(path, base + '/');
    const text = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(u, { method, headers: Object.assign(text ? { 'content-type': 'application/json' } : {}, headers), timeout: 30000 }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, body: data }));
      res.on('error', (e) => resolve({ error: e.code || e.message }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve({ error: e.code || e.message }));
    req.end(text);
  });
}

async function attempt(name, expect, method, path, headers, body, check) {
  const r = await call(method, path, headers || {}, body);
  const a = { name, expect, status: r.status, error: r.error, body: r.body === undefined ? undefined : r.body.slice(0, 300) };
  if (check && r.status === 200) a.checked = check(r.body) ? 'yes' : 'no';
  attempts.push(a);
}

function tcpOpen(port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.setTimeout(2000);
    // A connect to a closed ephemeral port can land on itself (TCP simultaneous open): not a listener.
    s.once('connect', () => { const self = s.localPort === s.remotePort; s.destroy(); resolve(!self); });
    s.once('timeout', () => { s.destroy(); resolve(false); });
    s.once('error', () => resolve(false));
  });
}

(async () => {
  const own = key ? { authorization: 'Bearer ' + key } : {};
  const sibs = (t.siblingSessionIds || [t.siblingSessionId]).filter((s) => s && s !== key);
  if (!sibs.length) throw new Error('no sibling session id to try');
  const guesses = ['admin', 'changeme', 'hla-'].concat(sibs, key ? [key] : []);
  const chat = { model: 'm', messages: [{ role: 'user', content: 'escape probe: say anything' }] };

  // The capture's control plane, with no key and with every key the sandbox could present or guess.
  for (const [label, headers] of [['no key', {}]].concat(guesses.map((g, i) => ['guess ' + i, { authorization: 'Bearer ' + g }]), guesses.map((g, i) => ['x-admin-key guess ' + i, { 'x-admin-key': g }]))) {
    await attempt('GET /sessions (' + label + ')', 'refused', 'GET', '/sessions', headers);
    await attempt('POST /sessions (' + label + ')', 'refused', 'POST', '/sessions', headers, {});
    for (const [i, s] of sibs.entries()) {
      await attempt('GET sibling ' + i + ' calls (' + label + ')', 'refused', 'GET', '/sessions/' + s + '/calls', headers);
      await attempt('GET sibling ' + i + ' rollout (' + label + ')', 'refused', 'GET', '/sessions/' + s + '/rollout', headers);
      await attempt('DELETE sibling ' + i + ' session (' + label + ')', 'refused', 'DELETE', '/sessions/' + s, headers);
    }
    await attempt('GET /engines (' + label + ')', 'refused', 'GET', '/engines', headers);
    if (key) await attempt('DELETE own session (' + label + ')', 'refused', 'DELETE', '/sessions/' + key, headers);
    if (key) await attempt('GET own rollout (' + label + ')', 'refused', 'GET', '/sessions/' + key + '/rollout', headers);
  }
  await attempt('GET /health (no details)', 'refused', 'GET', '/health', {});
  // The model routes with any key but its own.
  for (const [i, s] of sibs.entries()) {
    await attempt('model call with sibling ' + i + ' session id as key', 'refused', 'POST', '/v1/chat/completions', { authorization: 'Bearer ' + s }, chat);
    await attempt('model call (Anthropic) with sibling ' + i + ' session id as key', 'refused', 'POST', '/v1/messages', { 'x-api-key': s, 'anthropic-version': '2023-06-01' }, { model: 'm', max_tokens: 8, messages: chat.messages });
    await attempt('model call (Gemini ?key=) with sibling ' + i + ' session id', 'refused', 'POST', '/v1beta/models/m:generateContent?key=' + s, {}, { contents: [{ role: 'user', parts: [{ text: 'x' }] }] });
  }
  await attempt('model call with a guessed key', 'refused', 'POST', '/v1/chat/completions', { authorization: 'Bearer admin' }, chat);
  await attempt('model call with no key', 'refused', 'POST', '/v1/chat/completions', {}, chat);
  // Its own model route: the one thing that must work, streamed and not.
  await attempt('own model call', 'ok', 'POST', '/v1/chat/completions', own, chat, (b) => JSON.parse(b).object === 'chat.completion');
  await attempt('own model call, streamed', 'ok', 'POST', '/v1/chat/completions', own, Object.assign({ stream: true }, chat), (b) => b.trimEnd().endsWith('data: [DONE]'));
  // The mounted socket cannot be removed or replaced.
  if (t.socketDir) {
    for (const [name, fn] of [['remove the session socket', () => fs.unlinkSync(t.socketDir + '/model.sock')], ['write beside the session socket', () => fs.writeFileSync(t.socketDir + '/x.sock', '')]]) {
      try { fn(); attempts.push({ name, expect: 'refused', status: 0 }); } catch (e) { attempts.push({ name, expect: 'refused', error: e.code || e.message }); }
    }
  }
  // Every TCP port on the sandbox's own loopback: only the relay may answer (the host's proxy, the
  // engine and any other host service bound to 127.0.0.1 must not be there).
  const open = [];
  const ports = Array.from({ length: 65535 }, (_, i) => i + 1);
  let next = 0;
  await Promise.all(Array.from({ length: 256 }, async () => {
    while (next < ports.length) {
      const p = ports[next++];
      if (await tcpOpen(p)) open.push(p);
    }
  }));
  open.sort((a, b) => a - b);
  const report = { base_url: base, own_key_found: Boolean(key), attempts, open_loopback_ports: open, interfaces: Object.keys(os.networkInterfaces()).sort() };
  fs.writeFileSync(t.reportPath, JSON.stringify(report, null, 1));
  console.log('escape probe: ' + attempts.length + ' attempts, open loopback ports ' + (open.join(',') || 'none') + ', report ' + t.reportPath);
})().catch((e) => { console.error('escape probe failed: ' + (e && e.stack || e)); process.exit(1); });
`;

/** The probe as a node script file's content. */
export function escapeProbeScript(): string {
  return PROBE_SOURCE;
}

/** One bash command that writes the probe to /tmp and runs it with the sandbox's node. */
export function escapeProbeCommand(targets: ProbeTargets): string {
  const b64 = Buffer.from(PROBE_SOURCE, 'utf8').toString('base64');
  const args = JSON.stringify(targets).replace(/'/g, `'\\''`);
  return `printf '%s' '${b64}' | base64 -d > /tmp/escape-probe.js && node /tmp/escape-probe.js '${args}'`;
}

export function readProbeReport(hostPath: string): ProbeReport {
  return JSON.parse(readFileSync(hostPath, 'utf8')) as ProbeReport;
}

const REFUSED_STATUS = new Set([401, 403, 404, 405]);

/**
 * Every escape refused (an error status or no connection, and never a 2xx/5xx), its own model route
 * answered, and no host port reachable on the sandbox's loopback.
 */
export function assertEscapesRefused(
  report: ProbeReport,
  opts: { hostPorts: { name: string; port: number }[]; relayPort?: number; noNetwork?: boolean },
): void {
  assert.ok(report.own_key_found, 'the probe found its own session key in its environment');
  assert.ok(report.base_url, 'the probe found its model base URL');
  const wrong: string[] = [];
  for (const a of report.attempts) {
    const what = `${a.name}: ${a.status ?? ''} ${a.error ?? ''} ${a.body ?? ''}`.trim();
    if (a.expect === 'ok' && (a.status !== 200 || a.checked !== 'yes')) wrong.push(`should work: ${what}`);
    if (a.expect === 'refused' && !(a.error !== undefined || (a.status !== undefined && REFUSED_STATUS.has(a.status))))
      wrong.push(`should be refused: ${what}`);
    // A refusal must not carry data (a session list, calls, a rollout, health details).
    if (a.expect === 'refused' && a.body && /"(sessions|calls|graph|upstream|engines)"/.test(a.body))
      wrong.push(`refusal carries data: ${what}`);
  }
  assert.deepEqual(wrong, [], wrong.join('\n'));
  assert.ok(report.attempts.filter((a) => a.expect === 'refused').length >= 40, 'the probe tried every escape');
  const allowed = opts.relayPort ? [opts.relayPort] : [];
  assert.deepEqual(
    report.open_loopback_ports,
    allowed,
    `only the relay listens on the sandbox's loopback (open: ${report.open_loopback_ports.join(', ')})`,
  );
  for (const h of opts.hostPorts)
    assert.ok(!report.open_loopback_ports.includes(h.port), `the ${h.name} (host port ${h.port}) is unreachable from the sandbox`);
  if (opts.noNetwork) assert.deepEqual(report.interfaces, ['lo'], 'a no-network sandbox has loopback only');
}

/** On the host: the probe minted nothing, deleted nothing and touched no other session's calls. */
export function assertCaptureIntact(
  proxy: CaptureProxy,
  before: { sessionIds: string[]; siblingId: string; siblingCalls: number },
  own: string,
): void {
  assert.deepEqual(
    proxy.sessions
      .list()
      .map((s) => String(s.session_id))
      .sort(),
    [...before.sessionIds].sort(),
    'no session was minted or deleted from inside',
  );
  assert.ok(proxy.sessions.get(own), 'the sandbox could not delete its own capture');
  assert.equal(proxy.sessions.calls(before.siblingId).length, before.siblingCalls, "the sibling's calls are untouched");
}
