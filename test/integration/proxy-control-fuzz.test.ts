// 10,000 generated requests against the control routes (/sessions, /sessions/{id}/..., /engines,
// /health): methods, ids, query strings, headers and bodies. Never a 5xx, never an internal error, and
// afterwards the proxy answers normally and nothing outside its store was touched.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { Agent, request } from 'undici';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { startFakeEngine, type FakeEngine } from '../../src/engine/fake-engine.js';

const RUNS = Number(process.env.FUZZ_RUNS ?? 10_000);
const SEED = Number(process.env.FUZZ_SEED ?? 20261201);
const ADMIN = 'fuzz-admin-key-0123456789';

interface GeneratedRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string | undefined;
}

/** Characters a request line may carry, '%' included so malformed escapes (`%zz`, `%E0%A4`) get through. */
const rawChar = fc.constantFrom(..."abcXYZ019-_.~%!$&'()*+,;=:@/".split(''));
const printable = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 80 });

function requestArbitrary(knownIds: string[]): fc.Arbitrary<GeneratedRequest> {
  const id = fc.oneof(
    { arbitrary: fc.constantFrom(...knownIds), weight: 4 },
    { arbitrary: fc.string({ maxLength: 40 }).map(encodeURIComponent), weight: 3 },
    { arbitrary: fc.string({ unit: rawChar, maxLength: 30 }), weight: 3 },
    {
      arbitrary: fc.constantFrom(
        '..',
        '.',
        '..%2F..%2Fkeep',
        '%2e%2e%2fkeep',
        '%',
        '%zz',
        '%E0%A4%A',
        '%00',
        'a'.repeat(5000),
        's' + '0'.repeat(24),
        '__proto__',
        'constructor',
      ),
      weight: 2,
    },
  );
  const tail = fc.oneof(
    fc.constant(''),
    fc.constantFrom('/rollout', '/calls', '/trace_entries', '/rollout/', '/calls/x', '/x/y/z'),
    fc.string({ unit: rawChar, maxLength: 12 }).map((s) => `/${s}`),
  );
  const path = fc.oneof(
    { arbitrary: fc.tuple(id, tail).map(([i, t]) => `/sessions/${i}${t}`), weight: 8 },
    {
      arbitrary: fc.constantFrom(
        '/sessions',
        '/sessions/',
        '/sessions//',
        '//sessions',
        '/engines',
        '/engines/',
        '/health',
        '/health/',
        '/',
        '/sessions/%2F',
        '//[',
        '///',
        '/sessions?',
      ),
      weight: 4,
    },
  );
  const query = fc.oneof(
    { arbitrary: fc.constant(''), weight: 3 },
    {
      arbitrary: fc
        .dictionary(fc.string({ maxLength: 10 }), fc.string({ maxLength: 20 }), { maxKeys: 3 })
        .map((q) => `?${new URLSearchParams(q).toString()}`),
      weight: 2,
    },
    {
      arbitrary: fc.constantFrom(
        '?include_discarded=true',
        '?include_messages=1&include_discarded=0',
        '?key=' + ADMIN,
        '?%zz=%',
        '?a=1&a=2&&&',
      ),
      weight: 1,
    },
    { arbitrary: fc.string({ unit: rawChar, maxLength: 30 }).map((s) => `?${s}`), weight: 1 },
  );
  const method = fc.oneof(
    { arbitrary: fc.constantFrom('GET', 'POST', 'DELETE'), weight: 6 },
    { arbitrary: fc.constantFrom('PUT', 'PATCH', 'HEAD', 'OPTIONS', 'PROPFIND', 'TRACE'), weight: 1 },
  );
  const auth = fc.oneof(
    { arbitrary: fc.constant({ authorization: `Bearer ${ADMIN}` }), weight: 6 },
    { arbitrary: fc.constant({ 'x-admin-key': ADMIN }), weight: 2 },
    { arbitrary: fc.constant({}), weight: 1 },
    { arbitrary: printable.map((v) => ({ authorization: v })), weight: 1 },
    { arbitrary: printable.map((v) => ({ 'x-admin-key': v, 'x-api-key': v })), weight: 1 },
    { arbitrary: fc.constant({ authorization: `Bearer ${ADMIN} `, 'x-admin-key': '' }), weight: 1 },
  );
  const extraHeaders = fc.dictionary(
    fc.constantFrom('content-type', 'accept', 'x-goog-api-key', 'x-session-id', 'anthropic-version', 'x-forwarded-for', 'accept-encoding'),
    printable,
    { maxKeys: 3 },
  );
  const createBody = fc.record(
    {
      session_id: fc.oneof(
        fc.string({ maxLength: 20 }),
        fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,20}$/),
        fc.jsonValue({ maxDepth: 1 }),
      ),
      model: fc.oneof(fc.string({ maxLength: 20 }), fc.jsonValue({ maxDepth: 1 })),
      max_model_calls: fc.oneof(fc.integer(), fc.double(), fc.constantFrom(-1, 0, 1e308, Number.MAX_SAFE_INTEGER + 2), fc.string()),
      metadata: fc.oneof(
        fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
        fc.constantFrom({ session_id: 'x' }, { sampling: 1 }, null, [], 'str'),
      ),
      llm_url: fc.constantFrom('http://127.0.0.1:1/v1', 'file:///etc/passwd'),
    },
    { requiredKeys: [] },
  );
  const body = fc.oneof(
    { arbitrary: fc.constant(undefined), weight: 2 },
    { arbitrary: createBody.map((b) => JSON.stringify(b)), weight: 4 },
    {
      arbitrary: fc
        .record(
          {
            session_id: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,30}$/),
            max_model_calls: fc.nat(50),
            metadata: fc.dictionary(fc.stringMatching(/^[a-z]{1,8}$/), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
          },
          { requiredKeys: [] },
        )
        .map((b) => JSON.stringify(b)),
      weight: 2,
    },
    { arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)), weight: 2 },
    {
      arbitrary: fc.oneof(
        fc.string({ maxLength: 100 }),
        fc.constantFrom('{', '{"session_id":', '\ufeff{}', 'null', '""', '[]', '{"__proto__":{"x":1}}'),
      ),
      weight: 2,
    },
    { arbitrary: fc.integer({ min: 1, max: 3 }).map((n) => `{"metadata":{"pad":"${'x'.repeat(n * 700 * 1024)}"}}`), weight: 1 },
  );
  return fc.record({ method, path, query, auth, extraHeaders, body }).map((r) => ({
    method: r.method,
    path: r.path + r.query,
    // JSON bodies declare it (the proxy refuses other POST types with 415); a generated content-type may replace it.
    headers: { 'content-type': 'application/json', ...r.extraHeaders, ...r.auth },
    body: r.method === 'GET' || r.method === 'HEAD' || r.method === 'TRACE' ? undefined : r.body,
  }));
}

describe('fuzz: the control routes', () => {
  let engine: FakeEngine;
  let proxy: CaptureProxy;
  let dataDir: string;
  const internalErrors: string[] = [];
  const agent = new Agent({ connections: 8 });
  const knownIds: string[] = [];

  before(async () => {
    engine = await startFakeEngine();
    dataDir = mkdtempSync(join(tmpdir(), 'hl-control-fuzz-'));
    // Files a path-traversing id would reach: they must survive.
    writeFileSync(join(dataDir, 'keep.jsonl'), 'precious\n');
    writeFileSync(join(tmpdir(), 'hl-control-fuzz-keep.jsonl'), 'precious\n');
    proxy = await CaptureProxy.start({
      engineUrl: engine.url,
      model: engine.model,
      dataDir,
      adminKey: ADMIN,
      logger: { info() {}, warn() {}, error: (m) => internalErrors.push(m) },
    });
    for (let i = 0; i < 3; i++) {
      const id = proxy.sessions.create({ metadata: { n: i } }).session_id;
      knownIds.push(id);
      const res = await request(`${proxy.url}/v1/chat/completions`, {
        method: 'POST',
        dispatcher: agent,
        headers: { authorization: `Bearer ${id}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: `call ${i}` }] }),
      });
      assert.equal(res.statusCode, 200);
      await res.body.text();
    }
  });
  after(async () => {
    await proxy.close();
    await engine.close();
    await agent.close();
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(join(tmpdir(), 'hl-control-fuzz-keep.jsonl'), { force: true });
  });

  test(`${RUNS} generated control requests: never a 5xx or an internal error; the proxy answers normally afterwards`, async () => {
    process.stdout.write(`# control-route fuzz seed ${SEED} (FUZZ_SEED to replay)\n`);
    const requests = fc.sample(requestArbitrary(knownIds), { numRuns: RUNS, seed: SEED });
    const failures: string[] = [];
    const statuses = new Map<number, number>();
    let next = 0;
    const worker = async () => {
      while (next < requests.length) {
        const r = requests[next++]!;
        let status: number;
        let text: string;
        try {
          const res = await request(`${proxy.url}${r.path}`, { method: r.method, dispatcher: agent, headers: r.headers, body: r.body });
          status = res.statusCode;
          text = await res.body.text();
        } catch (err) {
          failures.push(`${r.method} ${r.path.slice(0, 120)}: the request failed (${(err as Error).message})`);
          continue;
        }
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        if (status >= 500) failures.push(`${r.method} ${r.path.slice(0, 120)} -> ${status} ${text.slice(0, 200)}`);
        else if (r.method !== 'HEAD' && text !== '') {
          try {
            JSON.parse(text);
          } catch {
            failures.push(`${r.method} ${r.path.slice(0, 120)} -> ${status} with a non-JSON body ${text.slice(0, 100)}`);
          }
        }
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    process.stdout.write(`# statuses: ${JSON.stringify(Object.fromEntries([...statuses].sort((a, b) => a[0] - b[0])))}\n`);
    assert.deepEqual(failures.slice(0, 8), [], `${failures.length} bad answers`);
    assert.deepEqual(internalErrors, []);
    for (const expected of [200, 201, 400, 401, 404])
      assert.ok(
        (statuses.get(expected) ?? 0) > RUNS / 200,
        `enough requests reached the ${expected} path (${statuses.get(expected) ?? 0})`,
      );

    // Afterwards: health, listing, a known session's rollout and a fresh model call all answer normally.
    const admin = { authorization: `Bearer ${ADMIN}` };
    assert.equal((await fetch(`${proxy.url}/health`)).status, 200);
    const listed = await fetch(`${proxy.url}/sessions`, { headers: admin });
    assert.equal(listed.status, 200);
    assert.ok(Array.isArray(((await listed.json()) as { sessions: unknown[] }).sessions));
    const fresh = await fetch(`${proxy.url}/sessions`, {
      method: 'POST',
      headers: { ...admin, 'content-type': 'application/json' },
      body: JSON.stringify({ session_id: 'after-the-fuzz' }),
    });
    assert.equal(fresh.status, 201);
    const call = await fetch(`${proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer after-the-fuzz', 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(call.status, 200);
    const rollout = await fetch(`${proxy.url}/sessions/after-the-fuzz/rollout`, { headers: admin });
    assert.equal(((await rollout.json()) as { calls: unknown[] }).calls.length, 1);
    assert.equal(readFileSync(join(dataDir, 'keep.jsonl'), 'utf8'), 'precious\n', 'a traversing id deleted nothing outside the store');
    assert.ok(existsSync(join(tmpdir(), 'hl-control-fuzz-keep.jsonl')));
  });
});
