// Extension-host checks for desktop VS Code through @vscode/test-cli (.vscode-test.mjs, mocha TDD
// UI). No UI driving here: the real vscode API and the extension's exported API, against the
// in-repo fake engine started inside the host. The CI path is the code-server e2e test instead.
import * as assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
// eslint-disable-next-line no-restricted-imports -- this module runs inside the extension host
import * as vscode from 'vscode';
import { startFakeEngine, type FakeEngine } from '../../../src/engine/fake-engine.js';
import type { HarnessLabApi } from '../../../src/extension/extension.js';
import { capturedTerminalEnv } from '../../../src/extension/terminal-env.js';

type Fn = () => unknown;
const { suite, test, suiteSetup, suiteTeardown } = globalThis as unknown as {
  suite(name: string, fn: Fn): void;
  test(name: string, fn: Fn): void;
  suiteSetup(fn: Fn): void;
  suiteTeardown(fn: Fn): void;
};

suite('Harness Lab in the extension host', () => {
  let engine: FakeEngine;
  let api: HarnessLabApi;
  const dataDir = mkdtempSync(join(tmpdir(), 'hl-desktop-'));
  const config = () => vscode.workspace.getConfiguration('harnessLab');

  suiteSetup(async () => {
    engine = await startFakeEngine({ model: 'fake/desktop' });
    await config().update('engineUrl', engine.url, vscode.ConfigurationTarget.Global);
    await config().update('model', engine.model, vscode.ConfigurationTarget.Global);
    await config().update('dataDir', dataDir, vscode.ConfigurationTarget.Global);
    const ext = vscode.extensions.getExtension<HarnessLabApi>('harness-lab.harness-lab');
    assert.ok(ext, 'development extension not loaded');
    api = await ext.activate();
  });

  suiteTeardown(async () => {
    await vscode.commands.executeCommand('harnessLab.stopProxy');
    for (const key of ['engineUrl', 'model', 'dataDir']) await config().update(key, undefined, vscode.ConfigurationTarget.Global);
    await engine.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  test('starts the proxy from its command', async () => {
    const url = await vscode.commands.executeCommand<string>('harnessLab.startProxy');
    assert.equal(api.state.kind, 'running');
    assert.match(url ?? '', /^http:\/\/127\.0\.0\.1:\d+$/);
  });

  test('a captured terminal session records calls in every dialect and exports TrainingTrace JSONL', async () => {
    const sessionId = await vscode.commands.executeCommand<string>('harnessLab.openCapturedTerminal');
    assert.ok(sessionId);
    const state = api.state;
    assert.equal(state.kind, 'running');
    // The terminal's session has a minted key: its id is an identifier, the key opens the model routes.
    const sessionKey = await vscode.commands.executeCommand<string>('harnessLab.copySessionKey', sessionId);
    assert.ok(sessionKey && sessionKey !== sessionId);
    const env = capturedTerminalEnv({ proxyUrl: state.kind === 'running' ? state.url : '', sessionKey });
    const post = (url: string, headers: Record<string, string>, body: unknown) =>
      fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const msg = [{ role: 'user', content: 'hi' }];
    assert.equal(
      (
        await post(
          `${env.OPENAI_BASE_URL}/chat/completions`,
          { authorization: `Bearer ${env.OPENAI_API_KEY}` },
          { model: 'm', messages: msg },
        )
      ).status,
      200,
    );
    assert.equal(
      (
        await post(
          `${env.ANTHROPIC_BASE_URL}/v1/messages`,
          { 'x-api-key': env.ANTHROPIC_API_KEY!, 'anthropic-version': '2023-06-01' },
          { model: 'm', max_tokens: 16, messages: msg },
        )
      ).status,
      200,
    );
    assert.equal(
      (
        await post(
          `${env.GOOGLE_GEMINI_BASE_URL}/v1beta/models/m:generateContent`,
          { 'x-goog-api-key': env.GEMINI_API_KEY! },
          { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] },
        )
      ).status,
      200,
    );
    for (let i = 0; i < 50 && api.getCalls(sessionId).length < 3; i++) await sleep(100);
    assert.deepEqual(
      api
        .getCalls(sessionId)
        .map((c) => c.dialect)
        .sort(),
      ['anthropic_messages', 'google_gemini', 'openai_chat'],
    );
    const lines = api.exportTraces(sessionId).trim().split('\n');
    assert.ok(lines.length >= 1 && lines.every((l) => (JSON.parse(l) as { session_id: string }).session_id === sessionId));
  });

  test('records survive a proxy restart (durable store)', async () => {
    const before = api.listSessions();
    await vscode.commands.executeCommand('harnessLab.stopProxy');
    assert.equal(api.state.kind, 'stopped');
    assert.deepEqual(
      api
        .listSessions()
        .map((s) => s.session_id)
        .sort(),
      before.map((s) => s.session_id).sort(),
    );
    await vscode.commands.executeCommand('harnessLab.startProxy');
    assert.deepEqual(
      api
        .listSessions()
        .map((s) => [s.session_id, s.n_calls])
        .sort(),
      before.map((s) => [s.session_id, s.n_calls]).sort(),
    );
  });
});
