// Status bar, settings, redaction, tasks and disposables: the pure parts of the extension glue.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Disposable, DisposableStore, toDisposable } from '../../src/extension/lifecycle.js';
import { REDACTED, redact } from '../../src/extension/redact.js';
import { SettingsError, readSettings } from '../../src/extension/settings.js';
import { quickActions, statusView } from '../../src/extension/status-model.js';
import { sortTasks, taskNode, taskTitle } from '../../src/extension/tasks-model.js';

test('status bar: port when running, warning colour when the engine is unreachable, error colour on failure', () => {
  const running = { kind: 'running' as const, url: 'http://127.0.0.1:4321', port: 4321 };
  assert.deepEqual(statusView(running, 'http://e', 'reachable').text, '$(radio-tower) Harness Lab :4321');
  assert.equal(statusView(running, 'http://e', 'reachable').background, undefined);
  assert.match(statusView(running, 'http://e', 'reachable', 'tokens').tooltip, /Engine http:\/\/e: reachable, capture level tokens/);
  assert.match(statusView(running, 'http://e', 'unknown').tooltip, /not graded yet/);
  const down = statusView(running, 'http://e', 'unreachable');
  assert.equal(down.text, '$(warning) Harness Lab :4321');
  assert.equal(down.background, 'statusBarItem.warningBackground');
  assert.match(down.tooltip, /Engine http:\/\/e: unreachable/);
  const failed = statusView({ kind: 'failed', message: 'port taken' }, '', 'unknown');
  assert.equal(failed.background, 'statusBarItem.errorBackground');
  assert.match(failed.tooltip, /port taken/);
  assert.match(statusView({ kind: 'stopped' }, '', 'unknown').text, /off/);
});

test('quick pick offers start when stopped and stop/copy/new session/terminal when running', () => {
  assert.deepEqual(
    quickActions({ kind: 'stopped' }).map((a) => a.id),
    ['start', 'probe', 'log'],
  );
  assert.deepEqual(
    quickActions({ kind: 'running', url: 'u', port: 1 }).map((a) => a.id),
    ['stop', 'copyUrl', 'newSession', 'terminal', 'probe', 'log'],
  );
  for (const a of quickActions({ kind: 'running', url: 'u', port: 1 })) assert.match(a.command, /^harnessLab\./);
});

test('settings: defaults, and bad values named by their key', () => {
  const defaults = readSettings(() => undefined);
  assert.deepEqual(defaults, {
    engineUrl: '',
    model: '',
    proxyHost: '127.0.0.1',
    proxyPort: 0,
    dataDir: '',
    rolloutsDir: '',
    autoStart: false,
    maxModelCalls: 0,
    batchesFolder: 'harness-lab-batches',
    clusterEngineUrl: '',
    clusterRegistry: '',
    keepClusterObjects: false,
  });
  const values: Record<string, unknown> = { engineUrl: ' http://gpu:8000/v1 ', proxyPort: 8787, autoStart: true };
  assert.deepEqual(
    readSettings((k) => values[k]),
    { ...defaults, engineUrl: 'http://gpu:8000/v1', proxyPort: 8787, autoStart: true },
  );
  // harnessLab.engineURL wins; the older engineUrl is read when it is empty.
  assert.equal(readSettings((k) => ({ engineURL: 'http://new:1', engineUrl: 'http://old:1' })[k]).engineUrl, 'http://new:1');
  assert.equal(readSettings((k) => ({ engineURL: '', engineUrl: 'http://old:1' })[k]).engineUrl, 'http://old:1');
  // harnessLab.rolloutsDir wins; the older runsDir (before "run" meant only a training run) is read when it is empty.
  assert.equal(readSettings((k) => ({ rolloutsDir: 'new', runsDir: 'old/runs' })[k]).rolloutsDir, 'new');
  assert.equal(readSettings((k) => ({ rolloutsDir: '', runsDir: 'old/runs' })[k]).rolloutsDir, 'old/runs');
  assert.throws(
    () => readSettings((k) => ({ proxyPort: 70000 })[k]),
    (err: Error) => err instanceof SettingsError && /harnessLab\.proxyPort/.test(err.message),
  );
  assert.throws(() => readSettings((k) => ({ engineUrl: 'gpu:8000' })[k]), /harnessLab\.engineUrl: must be an http/);
  assert.throws(() => readSettings((k) => ({ proxyHost: '' })[k]), /harnessLab\.proxyHost/);
});

test('redaction removes header values, bearer tokens, key variables and listed secrets', () => {
  const cases: [string, string][] = [
    ['authorization: Bearer s0123456789abcdef', `authorization: Bearer ${REDACTED}`],
    ['{"x-api-key":"abcdef123456"}', `{"x-api-key":"${REDACTED}"}`],
    ['x-goog-api-key=secretvalue', `x-goog-api-key=${REDACTED}`],
    ['OPENAI_API_KEY=sk-live-abcdefghijkl rest', `OPENAI_API_KEY=${REDACTED} rest`],
    ['HARNESS_LAB_ADMIN_KEY: hunter22', `HARNESS_LAB_ADMIN_KEY: ${REDACTED}`],
    ['using sk-ant-0123456789 now', `using ${REDACTED} now`],
  ];
  for (const [input, want] of cases) assert.equal(redact(input), want, input);
  assert.equal(redact('admin key is correct-horse', ['correct-horse']), `admin key is ${REDACTED}`);
  assert.equal(redact('short abc', ['abc']), 'short abc', 'very short literals are not treated as secrets');
  assert.equal(redact('session s123 created on http://127.0.0.1:80'), 'session s123 created on http://127.0.0.1:80');
});

test('task.toml: name, difficulty and category from the top level or [metadata]', () => {
  assert.deepEqual(
    taskTitle('version = "1.0"\n[metadata]\nname = "fix-bug"\ndifficulty = "hard"\ncategory = "swe"\n[verifier]\nname = "ignored"\n'),
    { name: 'fix-bug', difficulty: 'hard', category: 'swe' },
  );
  assert.deepEqual(taskTitle('[environment]\nname = "not-the-task"\n'), {});
  const named = taskNode('/ws/tasks/hf/task.toml', '/ws', '[task]\nname = "harness-lab/hello-file"\n');
  assert.equal(named.label, 'hello-file', 'the name runs and results use');
  assert.match(named.tooltip, /Harbor task harness-lab\/hello-file in \/ws\/tasks\/hf/);
  const node = taskNode('/ws/tasks/a/task.toml', '/ws', '[metadata]\ndifficulty = "easy"\n');
  assert.equal(node.label, 'a', 'folder name when the toml names nothing');
  assert.equal(node.description, 'easy · tasks/a');
  assert.equal(node.folder, '/ws/tasks/a');
  const sorted = sortTasks([taskNode('/ws/b/task.toml', '/ws', ''), taskNode('/ws/a/task.toml', '/ws', '')]);
  assert.deepEqual(
    sorted.map((t) => t.label),
    ['a', 'b'],
  );
});

test('disposables: reverse order, once, and every child even when one throws', () => {
  const order: string[] = [];
  class Owner extends Disposable {
    constructor() {
      super();
      this._register(toDisposable(() => order.push('first')));
      this._register(
        toDisposable(() => {
          order.push('boom');
          throw new Error('boom');
        }),
      );
      this._register(toDisposable(() => order.push('last')));
    }
  }
  const owner = new Owner();
  assert.throws(() => owner.dispose(), /boom/);
  assert.deepEqual(order, ['last', 'boom', 'first']);
  owner.dispose();
  assert.deepEqual(order, ['last', 'boom', 'first'], 'second dispose is a no-op');
  const store = new DisposableStore();
  store.dispose();
  let late = false;
  store.add(toDisposable(() => (late = true)));
  assert.equal(late, true, 'adding to a disposed store disposes at once');
});
