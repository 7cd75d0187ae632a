// `harness-lab proxy --render proxy --render-model GGUF`: token-in from the CLI, and the bridge state
// survives a restart (it is rebuilt from the stored records, so a continuation after a restart is
// still bridged onto the exact tokens of the turn before).
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import { Renderer } from '../../src/capture/render/renderer.js';
import type { CallRecord } from '../../src/capture/types.js';
import { startFakeEngine, type FakeEngine } from '../../src/engine/fake-engine.js';
import { ensureTinyModel } from '../../src/engine/tiny-model.js';
import { createSession } from './helpers.js';

const CLI = join(__dirname, '../../src/cli/main.ts');
const DATA_DIR = process.env.HARNESS_LAB_DATA_DIR ?? join(tmpdir(), 'harness-lab-test-data');

let engine: FakeEngine;
let gguf: string;
let dataDir: string;
before(async () => {
  gguf = (await ensureTinyModel({ dataDir: DATA_DIR })).path;
  const renderer = await Renderer.load(gguf);
  engine = await startFakeEngine({ renderer });
  dataDir = mkdtempSync(join(tmpdir(), 'hl-token-in-cli-'));
});
after(async () => {
  await engine?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

function startProxy(): Promise<{ child: ChildProcess; url: string; stderr: () => string }> {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      CLI,
      'proxy',
      '--engine-url',
      engine.url,
      '--model',
      engine.model,
      '--data-dir',
      dataDir,
      '--render',
      'proxy',
      '--render-model',
      gguf,
      '--full-render-check',
      'always',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', (line) => {
      const m = /^proxy listening on (http:\/\/\S+)$/.exec(line);
      if (m) resolve({ child, url: m[1]!, stderr: () => stderr });
      else reject(new Error(`unexpected first line: ${line}`));
    });
    child.once('exit', (code) => reject(new Error(`proxy exited with ${code}: ${stderr}`)));
  });
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

async function chat(
  url: string,
  key: string,
  messages: unknown[],
): Promise<{ content: string | null; tool_calls?: { id: string; function: { name: string; arguments: string } }[] }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'm',
      messages,
      tools: [
        { type: 'function', function: { name: 'bash', parameters: { type: 'object', properties: { command: { type: 'string' } } } } },
      ],
    }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  return ((await res.json()) as { choices: { message: { content: string | null } }[] }).choices[0]!.message;
}

test('harness-lab proxy --render proxy: token in from the CLI, bridged across a restart', async () => {
  let proxy = await startProxy();
  const messages: unknown[] = [{ role: 'user', content: 'Say hello via bash.' }];
  let sessionId: string;
  try {
    sessionId = (await createSession(proxy.url)).session_id;
    const first = await chat(proxy.url, sessionId, messages);
    assert.equal(first.tool_calls?.[0]?.function.name, 'bash');
    messages.push(
      { role: 'assistant', content: first.content, tool_calls: first.tool_calls },
      { role: 'tool', tool_call_id: first.tool_calls![0]!.id, content: 'hello' },
    );
  } finally {
    await stop(proxy.child);
  }
  assert.match(proxy.stderr(), /render: the proxy renders \(token in\)/);
  proxy = await startProxy();
  try {
    const second = await chat(proxy.url, sessionId, messages);
    assert.equal(second.content, 'Done.');
    const calls = ((await (await fetch(`${proxy.url}/sessions/${sessionId}/calls`)).json()) as { calls: CallRecord[] }).calls;
    assert.deepEqual(
      calls.map((c) => c.render?.kind),
      ['full', 'bridge'],
    );
    assert.equal(calls[1]!.render!.anchor_call_id, calls[0]!.call_id);
    // --full-render-check always: the bridged call carries its comparison with a full render.
    assert.equal(calls[1]!.render!.full_render?.equal, true);
    const end = [...calls[0]!.prompt_token_ids!, ...calls[0]!.completion_token_ids!];
    assert.deepEqual(calls[1]!.prompt_token_ids!.slice(0, end.length), end);
    // Only the capture probe's own chat requests reach the chat route; the harness's calls went as ids.
    assert.ok(engine.requests.every((r) => !JSON.stringify(r.messages).includes('Say hello via bash')));
    assert.equal(engine.tokenRequests.filter((r) => Array.isArray(r.prompt) && (r.prompt as number[]).length > 20).length, 2);
  } finally {
    await stop(proxy.child);
  }
});

test('harness-lab proxy --render with an unknown mode is a usage error', () => {
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', CLI, 'proxy', '--engine-url', 'http://127.0.0.1:9', '--model', 'm', '--render', 'sometimes'],
    { encoding: 'utf8' },
  );
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--render must be one of auto, proxy, engine/);
  const c = spawnSync(
    process.execPath,
    ['--import', 'tsx', CLI, 'proxy', '--engine-url', 'http://127.0.0.1:9', '--model', 'm', '--full-render-check', 'never'],
    { encoding: 'utf8' },
  );
  assert.notEqual(c.status, 0);
  assert.match(c.stderr, /--full-render-check must be one of always, sampled, off/);
});
