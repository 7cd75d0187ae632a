// No secret leaves the process that holds it: a `harness-lab rollout` in the local sandbox against an
// engine that demands an API key, a Docker batch against the same engine, a `harness-lab proxy` with an
// admin key and the same engine key whose session has a minted key, then `export` (every format) and
// `report` of what they captured. Every file written under the out and data dirs (records, batch dirs,
// rollout.json, exports, reports, ATIF), every line of stdout/stderr and every control-route answer is
// scanned for each secret; so are `harness-lab serve`'s state dir, log and answers after a rollout
// driven as TRL drives it (admin key and engine key given, a wrong key and a URL key refused). Every lab-made session has its own minted key, so the session id is only an
// identifier (it may appear anywhere) and the key may appear nowhere.
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
import { postJson, runRolloutArgs, startServe } from './serve-fixtures.js';

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
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], {
      cwd: REPO,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
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
async function startKeyedEngine(
  inner: PolicyEngine,
): Promise<{ url: string; authorized: () => number; refused: () => number; close(): Promise<void> }> {
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
      request(`${inner.url}${req.url}`, {
        method: req.method as 'GET',
        headers: { 'content-type': 'application/json' },
        body: body.length ? body : undefined,
      }).then(
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

/** A minted session key (mintSessionKey): 192 random bits, base64url. None may appear in any file or log. */
const MINTED_KEY = /hlk-[A-Za-z0-9_-]{32}/g;

/** The header line of a stored session file says the session was created with a key. */
function storedKeyed(file: string): boolean {
  const header = JSON.parse(readFileSync(file, 'utf8').split('\n')[0]!) as { type: string; key_sha256?: string };
  return header.type === 'session' && typeof header.key_sha256 === 'string' && /^[0-9a-f]{64}$/.test(header.key_sha256);
}

test('no session key, admin key or engine key in any log, record, export, report or ATIF file of a rollout', async () => {
  const env = { HARNESS_LAB_ENGINE_API_KEY: ENGINE_KEY, HARNESS_LAB_ADMIN_KEY: ADMIN_KEY };
  const logs: { name: string; text: string }[] = [];
  const keep = (name: string, r: Ran) => logs.push({ name: `${name} stdout`, text: r.stdout }, { name: `${name} stderr`, text: r.stderr });
  const answers: string[] = [];

  // 1. A rollout in the local sandbox, verbose, against the keyed engine.
  const rolloutOut = join(outDir, 'rollouts');
  const rolled = await runCli(
    [
      'rollout',
      '--task',
      TASK,
      '--harness',
      'react',
      '--sandbox',
      'local',
      '--engine-url',
      `${gate.url}/v1`,
      '--model',
      policy.model,
      '--out',
      rolloutOut,
      '-v',
    ],
    env,
  );
  keep('rollout', rolled);
  assert.equal(rolled.code, 0, `the rollout succeeded: ${rolled.stdout}\n${rolled.stderr}`);
  assert.match(rolled.stdout, /ok reward=1\.00/);
  assert.ok(gate.authorized() > 0, 'the proxy presented the engine key');
  assert.equal(gate.refused(), 0, 'nothing reached the engine without the key');
  const rolloutStore = join(rolloutOut, '.capture', 'sessions');
  const rolloutSessions = readdirSync(rolloutStore).map((f) => f.replace(/\.jsonl$/, ''));
  assert.equal(rolloutSessions.length, 1);
  assert.ok(
    storedKeyed(join(rolloutStore, `${rolloutSessions[0]}.jsonl`)),
    "the rollout's session has a minted key (the harness was wired with it, not the id)",
  );

  // 1b. A Docker batch of two rollouts against the keyed engine: one minted key per attempt.
  const batchDir = join(outDir, 'batch');
  const batch = await runCli(
    ['batch', 'submit', '--tasks', TASK, '--harness', 'react', '--group-size', '2', '--engine-url', `${gate.url}/v1`, '--out', batchDir],
    env,
  );
  keep('batch', batch);
  assert.equal(batch.code, 0, `the batch succeeded: ${batch.stdout}\n${batch.stderr}`);
  const batchStore = join(batchDir, 'capture', 'sessions');
  const batchSessions = readdirSync(batchStore).filter((f) => f.endsWith('.jsonl'));
  assert.equal(batchSessions.length, 2);
  for (const f of batchSessions) assert.ok(storedKeyed(join(batchStore, f)), `batch session ${f} has a minted key`);
  for (const format of ['trainingtrace', 'trl', 'verl', 'paths']) {
    const exported = await runCli(['export', '--format', format, '--batch', batchDir, '--out', join(outDir, `batch.${format}.jsonl`)], env);
    keep(`export batch ${format}`, exported);
    assert.equal(exported.code, 0, `${format}: ${exported.stderr}`);
  }

  // 1c. `harness-lab serve` with an admin key, driven as TRL drives it (/mcp tools/call run_rollout with
  // the engine key in api_key), plus a wrong key and a key in the URL (refused, and scanned).
  const serve = await startServe(['--dataset', `train=${TASK}`, '--admin-key', ADMIN_KEY, '--state-dir', join(outDir, 'serve')], env);
  try {
    const bearer = { authorization: `Bearer ${ADMIN_KEY}` };
    const rollout = await postJson(
      `${serve.url}/mcp`,
      {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'run_rollout', arguments: runRolloutArgs({ llm_url: `${gate.url}/v1`, model: policy.model, api_key: ENGINE_KEY }) },
      },
      bearer,
    );
    assert.equal(rollout.status, 200);
    const result = JSON.parse(rollout.body.result.content[0].text) as { ok: boolean; reward: number | null };
    assert.equal(result.ok, true, JSON.stringify(result).slice(0, 2000));
    answers.push(JSON.stringify(rollout.body));
    for (const headers of [{ authorization: `Bearer not-${ADMIN_KEY}` }, {}]) {
      const refused = await request(`${serve.url}/harbor_env/splits${'authorization' in headers ? '' : `?admin_key=${ADMIN_KEY}`}`, {
        headers,
      });
      assert.equal(refused.statusCode, 401);
      answers.push(await refused.body.text());
    }
  } finally {
    serve.child.kill('SIGTERM');
    await serve.exited;
  }
  logs.push({ name: 'serve stderr', text: serve.stderr() });
  assert.ok(
    filesUnder(join(outDir, 'serve')).some((f) => f.endsWith('.jsonl')),
    "serve's captured session is on disk (and scanned)",
  );

  // 2. A standalone proxy process with an admin key and the engine key as flags, driven over HTTP,
  // including a call with a wrong key.
  const dataDir = join(outDir, 'proxy-data');
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      CLI,
      'proxy',
      '--engine-url',
      gate.url,
      '--model',
      policy.model,
      '--data-dir',
      dataDir,
      '--admin-key',
      ADMIN_KEY,
      '--engine-api-key',
      ENGINE_KEY,
    ],
    { cwd: REPO, env: { ...process.env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
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
  const admin = { authorization: `Bearer ${ADMIN_KEY}` };
  let proxySession: string;
  let proxyKey: string;
  try {
    const created = await request(`${url}/sessions`, {
      method: 'POST',
      headers: { ...admin, 'content-type': 'application/json' },
      body: JSON.stringify({ mint_key: true, metadata: { harness: 'secrets-test' } }),
    });
    assert.equal(created.statusCode, 201);
    // The creator's answer is the one place the key is given (and so is not scanned).
    ({ session_id: proxySession, api_key: proxyKey } = JSON.parse(await created.body.text()) as { session_id: string; api_key: string });
    assert.match(proxyKey, MINTED_KEY);
    // A harness that echoes its key (in x-api-key, in the body's user field) gets it scrubbed from the record.
    for (const content of ['Create the file.', 'again']) {
      const res = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${proxyKey}`,
          'x-api-key': proxyKey,
          'x-echo': `key=${proxyKey}`,
          'content-type': 'application/json',
        },
        body: JSON.stringify({ model: 'm', user: proxyKey, messages: [{ role: 'user', content }] }),
      });
      assert.equal(res.statusCode, 200);
      answers.push(await res.body.text());
    }
    const wrong = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer not-${proxyKey}`, 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(wrong.statusCode, 401);
    answers.push(await wrong.body.text());
    const byId = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${proxySession}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(byId.statusCode, 401, "a keyed session's id opens nothing");
    answers.push(await byId.body.text());
    for (const path of [
      '/health',
      '/engines',
      '/sessions',
      `/sessions/${proxySession}`,
      `/sessions/${proxySession}/rollout`,
      `/sessions/${proxySession}/calls`,
    ]) {
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
  const rolloutDir = join(rolloutOut, 'hello-file', 'react', '0');
  for (const [name, store, id] of [
    ['rollout', join(rolloutOut, '.capture'), rolloutSessions[0]!],
    ['proxy', dataDir, proxySession],
  ] as const) {
    const exported = await runCli(['export', '--data-dir', store, '--session', id, '--out', join(outDir, `${name}.traces.jsonl`)], env);
    keep(`export ${name}`, exported);
    assert.equal(exported.code, 0, exported.stderr);
    // The report reads a copy: the store's own file name is the session id.
    const copy = join(outDir, `${name}-capture.jsonl`);
    copyFileSync(join(store, 'sessions', `${id}.jsonl`), copy);
    const report = await runCli(
      [
        'report',
        copy,
        '-o',
        join(outDir, `${name}.report.html`),
        ...(name === 'proxy' ? ['--no-trajectory'] : ['--trajectory', join(rolloutDir, 'agent', 'trajectory.json')]),
      ],
      env,
    );
    keep(`report ${name}`, report);
    assert.equal(report.code, 0, report.stderr);
    rmSync(copy);
  }

  // 4. The scan: every file under the out dir (rollout outputs, sandbox, capture stores, exports, reports),
  // every log and every control-route answer.
  const files = filesUnder(outDir);
  assert.ok(
    files.some((f) => f.endsWith('trajectory.json')),
    'an ATIF file was written',
  );
  assert.ok(files.some((f) => f.endsWith('.report.html')));
  assert.ok(files.some((f) => f.endsWith('.traces.jsonl')));
  const texts = [
    ...files.map((f) => ({ name: relative(outDir, f), text: readFileSync(f, 'latin1') })),
    ...logs,
    { name: 'control-route answers', text: answers.join('\n') },
  ];
  assert.ok(files.some((f) => f.endsWith('rollout.json')));
  assert.ok(files.some((f) => f.startsWith(batchDir)));
  const leaks: string[] = [];
  for (const { name, text } of texts) {
    for (const [what, secret] of [
      ['engine key', ENGINE_KEY],
      ['admin key', ADMIN_KEY],
      ['session key', proxyKey],
    ] as const)
      if (text.includes(secret)) leaks.push(`${what} in ${name}`);
    // The rollout's and the batch's keys were minted inside the lab: none may surface anywhere.
    for (const m of text.matchAll(MINTED_KEY))
      leaks.push(`minted session key in ${name}: ${text.slice(Math.max(0, m.index - 60), m.index + 40).replace(/\s+/g, ' ')}`);
  }
  // The session ids are identifiers: they do appear, in records, exports and answers.
  assert.ok(texts.some((t) => t.text.includes(proxySession)) && texts.some((t) => t.text.includes(rolloutSessions[0]!)));
  assert.deepEqual(leaks, []);
});
