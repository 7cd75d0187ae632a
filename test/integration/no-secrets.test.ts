// No secret leaves the process that holds it: a `harness-lab run` in the local sandbox against an
// engine that demands an API key, a `harness-lab proxy` with an admin key and the same engine key, then
// `export` and `report` of what they captured. Every file written under the out and data dirs, every
// line of stdout/stderr and every control-route answer is scanned for each secret.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import { request } from 'undici';
import { startPolicyEngine, type PolicyEngine } from '../../src/sandbox/policy-engine.js';

const REPO = join(__dirname, '../..');
const CLI = join(REPO, 'src/cli/main.ts');
const TASK = join(REPO, 'examples/tasks/hello-file');
const ENGINE_KEY = 'engine-secret-5f1c0e9a7d3b42c8';
const ADMIN_KEY = 'admin-secret-9b2e7a4c1d6f08e3';

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function runCli(args: string[], env: Record<string, string> = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], { cwd: REPO, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...filesUnder(path));
    else out.push(path);
  }
  return out;
}

/** An engine gate: forwards to the policy engine only with the engine key, and counts what it let through. */
async function startKeyedEngine(inner: PolicyEngine): Promise<{ url: string; authorized: () => number; refused: () => number; close(): Promise<void> }> {
  let authorized = 0;
  let refused = 0;
  const server: Server = createServer((req, res) => {
    if (req.headers.authorization !== `Bearer ${ENGINE_KEY}`) {
      refused++;
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'engine API key required', type: 'invalid_request_error' } }));
      return;
    }
    authorized++;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      request(`${inner.url}${req.url}`, { method: req.method as 'GET', headers: { 'content-type': 'application/json' }, body: body.length ? body : undefined }).then(
        async (upstream) => {
          const text = await upstream.body.text();
          res.writeHead(upstream.statusCode, { 'content-type': 'application/json' });
          res.end(text);
        },
        (err: unknown) => {
          res.writeHead(502);
          res.end(String(err));
        },
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    authorized: () => authorized,
    refused: () => refused,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

let policy: PolicyEngine;
let gate: Awaited<ReturnType<typeof startKeyedEngine>>;
let outDir: string;
before(async () => {
  policy = await startPolicyEngine(join(TASK, 'policy.json'));
  gate = await startKeyedEngine(policy);
  outDir = mkdtempSync(join(tmpdir(), 'hl-secrets-'));
});
after(async () => {
  await gate.close();
  await policy.close();
  rmSync(outDir, { recursive: true, force: true });
});

/**
 * Where a session key may appear: only as the session's identifier (`"session_id": "<key>"`, a trace id
 * `<key>/<node>`, the store's `<key>.jsonl`), because the session id is the harness's API key by design.
 * Anywhere else (a header, an env line, a config value, a log line) it is a leaked credential.
 */
function sessionKeyLeaks(text: string, key: string): string[] {
  const leaks: string[] = [];
  for (let at = text.indexOf(key); at >= 0; at = text.indexOf(key, at + key.length)) {
    const before = text.slice(Math.max(0, at - 16), at);
    const afterIt = text.slice(at + key.length, at + key.length + 1);
    const asIdentifier = /"session_id": ?"$/.test(before) && afterIt === '"';
    const asTraceId = /"trace_id": ?"$/.test(before) && afterIt === '/';
    const asStoreFile = /sessions\/$/.test(before) && text.slice(at + key.length).startsWith('.jsonl');
    if (!asIdentifier && !asTraceId && !asStoreFile) leaks.push(text.slice(Math.max(0, at - 60), at + key.length + 20).replace(/\s+/g, ' '));
  }
  return leaks;
}

test('no session key, admin key or engine key in any log, record, export, report or ATIF file of a run', async () => {
  const env = { HARNESS_LAB_ENGINE_API_KEY: ENGINE_KEY, HARNESS_LAB_ADMIN_KEY: ADMIN_KEY };
  const logs: { name: string; text: string }[] = [];
  const keep = (name: string, r: Ran) => logs.push({ name: `${name} stdout`, text: r.stdout }, { name: `${name} stderr`, text: r.stderr });

  // 1. A run in the local sandbox, verbose, against the keyed engine.
  const runOut = join(outDir, 'runs');
  const run = await runCli(['run', '--task', TASK, '--harness', 'react', '--sandbox', 'local', '--engine-url', `${gate.url}/v1`, '--model', policy.model, '--out', runOut, '-v'], env);
  keep('run', run);
  assert.equal(run.code, 0, `the run succeeded: ${run.stdout}\n${run.stderr}`);
  assert.match(run.stdout, /ok reward=1\.00/);
  assert.ok(gate.authorized() > 0, 'the proxy presented the engine key');
  assert.equal(gate.refused(), 0, 'nothing reached the engine without the key');
  const runStore = join(runOut, '.capture', 'sessions');
  const runSessions = readdirSync(runStore).map((f) => f.replace(/\.jsonl$/, ''));
  assert.equal(runSessions.length, 1);

  // 2. A standalone proxy process with an admin key and the engine key as flags, driven over HTTP,
  // including a call with a wrong key.
  const dataDir = join(outDir, 'proxy-data');
  const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'proxy', '--engine-url', gate.url, '--model', policy.model, '--data-dir', dataDir, '--admin-key', ADMIN_KEY, '--engine-api-key', ENGINE_KEY], { cwd: REPO, env: { ...process.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let proxyStdout = '';
  let proxyStderr = '';
  child.stderr.on('data', (d: Buffer) => (proxyStderr += d.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      proxyStdout += `${line}\n`;
      const m = /^proxy listening on (\S+)$/.exec(line);
      if (m) resolve(m[1]!);
    });
    child.once('exit', (code) => reject(new Error(`proxy exited ${code}: ${proxyStderr}`)));
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const answers: string[] = [];
  const admin = { authorization: `Bearer ${ADMIN_KEY}` };
  let proxySession: string;
  try {
    const created = await request(`${url}/sessions`, { method: 'POST', headers: admin, body: JSON.stringify({ metadata: { harness: 'secrets-test' } }) });
    assert.equal(created.statusCode, 201);
    const createdText = await created.body.text();
    proxySession = (JSON.parse(createdText) as { session_id: string }).session_id;
    for (const content of ['Create the file.', 'again']) {
      const res = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${proxySession}`, 'x-api-key': proxySession, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }] }) });
      assert.equal(res.statusCode, 200);
      answers.push(await res.body.text());
    }
    const wrong = await request(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer not-${proxySession}` }, body: '{}' });
    assert.equal(wrong.statusCode, 401);
    answers.push(await wrong.body.text());
    for (const path of ['/health', '/engines', '/sessions', `/sessions/${proxySession}`, `/sessions/${proxySession}/rollout`, `/sessions/${proxySession}/calls`]) {
      const res = await request(`${url}${path}`, { headers: admin });
      assert.equal(res.statusCode, 200, path);
      answers.push(await res.body.text());
    }
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
  logs.push({ name: 'proxy stdout', text: proxyStdout }, { name: 'proxy stderr', text: proxyStderr });
  assert.equal(readdirSync(join(dataDir, 'sessions')).length, 1);

  // 3. Export and report of both captures.
  const rolloutDir = join(runOut, 'hello-file', 'react', '0');
  for (const [name, store, id] of [['run', join(runOut, '.capture'), runSessions[0]!], ['proxy', dataDir, proxySession]] as const) {
    const exported = await runCli(['export', '--data-dir', store, '--session', id, '--out', join(outDir, `${name}.traces.jsonl`)], env);
    keep(`export ${name}`, exported);
    assert.equal(exported.code, 0, exported.stderr);
    // The report reads a copy: the store's own file name is the session id.
    const copy = join(outDir, `${name}-capture.jsonl`);
    copyFileSync(join(store, 'sessions', `${id}.jsonl`), copy);
    const report = await runCli(['report', copy, '-o', join(outDir, `${name}.report.html`), ...(name === 'proxy' ? ['--no-trajectory'] : ['--trajectory', join(rolloutDir, 'agent', 'trajectory.json')])], env);
    keep(`report ${name}`, report);
    assert.equal(report.code, 0, report.stderr);
    rmSync(copy);
  }

  // 4. The scan: every file under the out dir (run outputs, sandbox, capture stores, exports, reports),
  // every log and every control-route answer.
  const files = filesUnder(outDir);
  assert.ok(files.some((f) => f.endsWith('trajectory.json')), 'an ATIF file was written');
  assert.ok(files.some((f) => f.endsWith('.report.html')));
  assert.ok(files.some((f) => f.endsWith('.traces.jsonl')));
  const texts = [...files.map((f) => ({ name: relative(outDir, f), text: readFileSync(f, 'latin1') })), ...logs, { name: 'control-route answers', text: answers.join('\n') }];
  const leaks: string[] = [];
  for (const { name, text } of texts) {
    for (const [what, secret] of [['engine key', ENGINE_KEY], ['admin key', ADMIN_KEY]] as const) if (text.includes(secret)) leaks.push(`${what} in ${name}`);
    for (const key of [...runSessions, proxySession]) {
      // Logs, ATIF files, reports (made for sharing), agent, verifier and sandbox files never carry a
      // session key at all. Records, exports, rollout.json and control answers may name the session by
      // its id, which is the key by design: only as that identifier, never as a credential.
      const strict = !/(^|\/)(\.capture|proxy-data)\/|rollout\.json$|\.traces\.jsonl$|^control-route/.test(name);
      const found = strict ? (text.includes(key) ? [`"${key}"`] : []) : sessionKeyLeaks(text, key);
      for (const f of found) leaks.push(`session key in ${name}: ${f}`);
    }
  }
  assert.deepEqual(leaks, []);
});
