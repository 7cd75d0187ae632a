// Sessions with their own secret key, through the real proxy (and a session socket) with real SDK
// clients: POST /sessions mints a key and answers it once; the OpenAI and Anthropic SDKs reach the
// session by that key and are refused by its id; a session without a key keeps id = key; the key is
// scrubbed from what is recorded even when the harness echoes it in a header or the body; a restart
// on the same data dir keeps the key working; the clear key is in no file of the data dir.
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { CaptureProxy } from '../../src/capture/proxy.js';
import { SessionSocket } from '../../src/capture/session-socket.js';
import { startLab, type Lab } from './helpers.js';

const ADMIN = 'the-admin-key-for-session-keys';

async function post(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}`, ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

function viaSocket(socketPath: string, key: string): Promise<number> {
  const text = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        socketPath,
        method: 'POST',
        path: '/v1/chat/completions',
        headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), authorization: `Bearer ${key}` },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(text);
  });
}

function dataDirText(dir: string): string {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => readFileSync(join(e.parentPath, e.name), 'utf8'))
    .join('\n');
}

describe('session keys', () => {
  let lab: Lab;
  let id: string;
  let key: string;
  before(async () => {
    lab = await startLab({}, { adminKey: ADMIN, captureLevel: 'tokens' });
    const created = await post(`${lab.proxy.url}/sessions`, { mint_key: true, metadata: { harness: 'sdk' } });
    assert.equal(created.status, 201);
    id = created.json.session_id as string;
    key = created.json.api_key as string;
    assert.match(key, /^hlk-[A-Za-z0-9_-]{32}$/);
  });
  let restarted: CaptureProxy | undefined;
  after(async () => {
    if (!restarted) return lab?.close();
    await restarted.close();
    await lab.engine.close();
    rmSync(lab.dataDir, { recursive: true, force: true });
  });

  test('the OpenAI and Anthropic SDKs reach a keyed session by its key and are refused by its id', async () => {
    const openai = new OpenAI({ baseURL: `${lab.proxy.url}/v1`, apiKey: key, maxRetries: 0 });
    const answer = await openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], user: key });
    assert.ok(answer.choices[0]?.message);
    const anthropic = new Anthropic({ baseURL: lab.proxy.url, apiKey: key, maxRetries: 0 });
    const msg = await anthropic.messages.create({ model: 'm', max_tokens: 16, messages: [{ role: 'user', content: `my key is ${key}` }] });
    assert.equal(msg.type, 'message');
    await assert.rejects(
      new OpenAI({ baseURL: `${lab.proxy.url}/v1`, apiKey: id, maxRetries: 0 }).chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'hi' }],
      }),
      (err: unknown) => err instanceof OpenAI.AuthenticationError,
    );
    await assert.rejects(
      new Anthropic({ baseURL: lab.proxy.url, apiKey: id, maxRetries: 0 }).messages.create({
        model: 'm',
        max_tokens: 16,
        messages: [{ role: 'user', content: 'hi' }],
      }),
      (err: unknown) => err instanceof Anthropic.AuthenticationError,
    );

    const calls = lab.proxy.sessions.calls(id);
    assert.equal(calls.length, 2);
    const recorded = JSON.stringify(calls);
    assert.equal(recorded.includes(key), false, 'the key is scrubbed from headers, body and harness session id');
    assert.equal(calls[0]!.harness_session_id, '[redacted]');
    assert.match(JSON.stringify(calls[1]!.request.body), /my key is \[redacted\]/);
    const listed = await fetch(`${lab.proxy.url}/sessions/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } });
    const summary = (await listed.json()) as Record<string, unknown>;
    assert.equal(summary.keyed, true);
    assert.equal(JSON.stringify(summary).includes(key), false);
  });

  test('a given api_key works, is not echoed, and a second session cannot take it; without a key the id is the key', async () => {
    const given = 'given-secret-key-0123456789abcdef';
    const created = await post(`${lab.proxy.url}/sessions`, { session_id: 'with-given-key', api_key: given });
    assert.equal(created.status, 201);
    assert.equal(created.json.api_key, undefined, "a given key is the caller's already: not sent back");
    assert.equal((await post(`${lab.proxy.url}/sessions`, { api_key: given })).status, 409);
    assert.equal((await post(`${lab.proxy.url}/sessions`, { api_key: 'short' })).status, 400);
    assert.equal((await post(`${lab.proxy.url}/sessions`, { api_key: given, mint_key: true })).status, 400);
    const openai = (apiKey: string) => new OpenAI({ baseURL: `${lab.proxy.url}/v1`, apiKey, maxRetries: 0 });
    assert.ok((await openai(given).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })).choices.length);

    const plain = await post(`${lab.proxy.url}/sessions`, {});
    assert.equal(plain.json.api_key, undefined);
    assert.ok(
      (await openai(plain.json.session_id as string).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }))
        .choices.length,
    );
  });

  test("a session socket takes its session's key, refuses its id and every other session's key", async () => {
    const sibling = lab.proxy.sessions.create({ mint_key: true });
    const socket = await SessionSocket.open(lab.proxy, id);
    try {
      assert.equal(await viaSocket(socket.path, key), 200);
      assert.equal(await viaSocket(socket.path, id), 401);
      assert.equal(await viaSocket(socket.path, sibling.api_key!), 401);
      assert.equal(await viaSocket(socket.path, sibling.session_id), 401);
    } finally {
      await socket.close();
    }
  });

  test('a restart on the same data dir keeps the key working; the clear key is in no file', async () => {
    await lab.proxy.close();
    assert.equal(dataDirText(lab.dataDir).includes(key), false, 'the clear key is nowhere on disk');
    assert.ok(dataDirText(lab.dataDir).includes('key_sha256'));
    restarted = await CaptureProxy.start({
      engineUrl: lab.engine.url,
      model: lab.engine.model,
      dataDir: lab.dataDir,
      adminKey: ADMIN,
      captureLevel: 'tokens',
    });
    const openai = new OpenAI({ baseURL: `${restarted.url}/v1`, apiKey: key, maxRetries: 0 });
    assert.ok((await openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })).choices.length);
    await assert.rejects(
      new OpenAI({ baseURL: `${restarted.url}/v1`, apiKey: id, maxRetries: 0 }).chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'hi' }],
      }),
      (err: unknown) => err instanceof OpenAI.AuthenticationError,
    );
    assert.equal(restarted.sessions.calls(id).length, 4);
  });
});
