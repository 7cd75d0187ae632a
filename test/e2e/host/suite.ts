// Runs inside the real extension host of code-server (the payload's extensionTestsPath). The
// Playwright side drives the UI; this side waits for it, then checks through the real vscode API
// and the extension's exported API what the UI cannot show: records, export, durability, and that
// Run with Harness... records into the extension's own proxy.
import * as assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
// eslint-disable-next-line no-restricted-imports -- this module runs inside the extension host
import * as vscode from 'vscode';
import { TrainingTraceSchema } from '../../../src/capture/trace.js';
import type { HarnessLabApi } from '../../../src/extension/extension.js';
import type { ProxyState } from '../../../src/extension/proxy-controller.js';
import { callCaptureLevel } from '../../../src/extension/sessions-model.js';

const EXTENSION_ID = 'harness-lab.harness-lab';

function log(message: string): void {
  console.log(`[e2e-host] ${message}`);
}

async function waitFor<T>(what: string, timeoutMs: number, probe: () => T | undefined | false): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(200);
  }
}

export async function run(): Promise<void> {
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  assert.ok(folder, 'the workbench opened without the test workspace');
  const control = join(folder, '.e2e');
  const expected = JSON.parse(readFileSync(join(control, 'expected.json'), 'utf8')) as {
    dialects: string[];
    failedEngineCalls: number;
    copiedSnippet: string;
    adminKey: string;
  };
  log(`waiting for the UI driver (control dir ${control})`);
  const ui = await waitFor(
    'the UI driver to finish',
    170_000,
    () =>
      existsSync(join(control, 'ui-done')) &&
      (JSON.parse(readFileSync(join(control, 'ui-done'), 'utf8')) as { ok: boolean; error?: string }),
  );
  if (!ui.ok) throw new Error(`UI driver failed: ${ui.error}`);

  const ext = vscode.extensions.getExtension<HarnessLabApi>(EXTENSION_ID);
  assert.ok(ext, `${EXTENSION_ID} is not loaded as a development extension`);
  assert.ok(ext.isActive, 'the command palette should have activated the extension');
  const api = ext.exports;
  assert.equal(api.state.kind, 'running', `proxy state is ${JSON.stringify(api.state)}`);

  const terminalSession = api.listSessions().find((s) => s.metadata?.source === 'terminal');
  assert.ok(terminalSession, `no session created by Open Captured Terminal among ${JSON.stringify(api.listSessions())}`);
  const id = terminalSession.session_id;
  const all = api.getCalls(id);
  const calls = all.filter((c) => !c.error);
  const failed = all.filter((c) => c.error);
  assert.deepEqual(
    calls.map((c) => c.dialect).sort(),
    [...expected.dialects].sort(),
    'one answered call per dialect, made from the captured terminal',
  );
  assert.equal(failed.length, expected.failedEngineCalls, 'the call made after the engine went away is recorded as failed');
  for (const call of failed) assert.equal(call.error?.kind, 'engine', JSON.stringify(call.error));
  for (const call of calls) {
    assert.equal(call.error, null, `call ${call.call_id} failed: ${JSON.stringify(call.error)}`);
    assert.equal(call.session_id, id);
    assert.equal(
      callCaptureLevel(call),
      'tokens',
      `call ${call.call_id} (${call.dialect}) should carry prompt ids, sampled ids and logprobs`,
    );
    assert.ok((call.prompt_token_ids?.length ?? 0) > 0 && (call.completion_token_ids?.length ?? 0) > 0);
  }
  log(`session ${id}: ${calls.length} calls (${calls.map((c) => c.dialect).join(', ')}) all at capture level tokens`);

  const jsonl = api.exportTraces(id);
  const traces = jsonl
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => TrainingTraceSchema.parse(JSON.parse(line)));
  assert.ok(traces.length >= 1, 'export produced no TrainingTrace');
  assert.ok(traces.every((t) => t.session_id === id));
  log(`export: ${traces.length} TrainingTrace line(s), schema-valid`);

  // New Capture Session copied the snippet of the dialect picked in the UI, and only that one.
  assert.equal(expected.copiedSnippet, 'anthropic_messages');
  const clip = await vscode.env.clipboard.readText();
  const state = api.state;
  assert.equal(state.kind, 'running');
  assert.match(
    clip,
    new RegExp(`^export ANTHROPIC_BASE_URL=${(state.kind === 'running' ? state.url : '').replace(/[.]/g, '\\.')}$`, 'm'),
    `clipboard: ${clip}`,
  );
  assert.match(clip, /^export ANTHROPIC_API_KEY=hlk-[A-Za-z0-9_-]+$/m, "the snippet carries the session's minted key");
  assert.doesNotMatch(clip, /OPENAI_BASE_URL|GEMINI/, 'only the chosen dialect was copied');
  log('clipboard holds the Anthropic snippet of the new session');

  // Durability: stopping the proxy keeps the session visible (read from the store); starting it again
  // restores the same records, as after a window reload.
  const callIds = all.map((c) => c.call_id).sort();
  await vscode.commands.executeCommand('harnessLab.stopProxy');
  assert.equal(api.state.kind, 'stopped');
  const stored = api.listSessions().find((s) => s.session_id === id);
  assert.equal(stored?.n_calls, all.length, 'stored session after stop');
  await vscode.commands.executeCommand('harnessLab.startProxy');
  await waitFor('the proxy to restart', 20_000, () => api.state.kind === 'running');
  assert.deepEqual(
    api
      .getCalls(id)
      .map((c) => c.call_id)
      .sort(),
    callIds,
    'records restored from the durable store',
  );
  log('durability: stop/start kept every record');

  // The admin key set in the UI came from SecretStorage into the restarted proxy: control routes
  // now need it; settings never saw it.
  const readState = (): ProxyState => api.state; // a fresh read: the asserts above narrowed api.state
  const restarted = readState();
  assert.equal(restarted.kind, 'running');
  const base = restarted.kind === 'running' ? restarted.url : '';
  assert.equal((await fetch(`${base}/sessions`)).status, 401, 'GET /sessions without the admin key');
  assert.equal(
    (await fetch(`${base}/sessions`, { headers: { authorization: `Bearer ${expected.adminKey}` } })).status,
    200,
    'GET /sessions with the admin key',
  );
  const settingsText = JSON.stringify(vscode.workspace.getConfiguration('harnessLab'));
  assert.ok(!settingsText.includes(expected.adminKey), 'admin key must not be in settings');
  log('admin key: from SecretStorage, enforced on /sessions, not in settings');
  // Run with Harness... (react on a Harbor task, in a Docker sandbox) records into the extension's own
  // proxy: its session is one of the Sessions tree's, tagged with the task and harness.
  const taskDir = join(ext.extensionPath, 'examples', 'tasks', 'hello-file');
  const runSession = await vscode.commands.executeCommand<string | undefined>('harnessLab.runTaskWithHarness', {
    folder: taskDir,
    harness: 'react',
  });
  assert.ok(runSession, 'Run with Harness... returned no session (see the Harness Lab log)');
  const runRow = api.listSessions().find((s) => s.session_id === runSession);
  assert.equal(
    runRow?.metadata?.harness,
    'react',
    `session ${runSession} of the run among ${JSON.stringify(api.listSessions().map((s) => s.session_id))}`,
  );
  assert.ok(api.getCalls(runSession).length >= 1, "the harness's model calls went through the extension's proxy");
  log(`run with harness: session ${runSession} in the extension's proxy with ${api.getCalls(runSession).length} call(s)`);
  writeFileSync(join(control, 'host-done'), JSON.stringify({ ok: true, session: id, calls: calls.length, traces: traces.length }));
}
