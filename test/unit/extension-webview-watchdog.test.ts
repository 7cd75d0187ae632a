// The webview watchdog (src/extension/webview-watchdog.ts): a visible webview that does not say
// `ready` in time gets its html again, up to MAX_RELOADS times, then one warning; a hidden one is not
// counted (VS Code does not load it), and is watched again when shown; `ready` ends the watch.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MAX_RELOADS, READY_TIMEOUT_MS, WebviewWatchdog, type WatchedPanel } from '../../src/extension/webview-watchdog.js';

function fakePanel(visible: boolean) {
  const listeners = new Set<() => void>();
  const panel = {
    visible,
    onDidChangeViewState(l: () => void) {
      listeners.add(l);
      return { dispose: () => listeners.delete(l) };
    },
    setVisible(v: boolean) {
      panel.visible = v;
      for (const l of [...listeners]) l();
    },
    listeners,
  };
  return panel satisfies WatchedPanel;
}

/** Time passing one timeout at a time (the mock fires a timer set by a timer in a later tick). */
function pass(t: { mock: { timers: { tick(ms: number): void } } }, timeouts: number): void {
  for (let i = 0; i < timeouts; i++) t.mock.timers.tick(READY_TIMEOUT_MS);
}

function watch(visible = true) {
  const panel = fakePanel(visible);
  const calls = { reloads: 0, gaveUp: 0, logs: [] as string[] };
  const dog = new WebviewWatchdog(panel, 'group view', {
    reload: () => calls.reloads++,
    giveUp: () => calls.gaveUp++,
    log: (m) => calls.logs.push(m),
  });
  return { panel, calls, dog };
}

test('a page that says ready in time is never reloaded', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { calls, dog } = watch();
  dog.loading();
  t.mock.timers.tick(READY_TIMEOUT_MS - 1);
  dog.ready();
  pass(t, 10);
  assert.deepEqual([calls.reloads, calls.gaveUp], [0, 0]);
  dog.dispose();
});

test('a blank page is loaded again until it says ready; the count starts over after a ready', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { calls, dog } = watch();
  dog.loading();
  t.mock.timers.tick(READY_TIMEOUT_MS);
  assert.equal(calls.reloads, 1);
  t.mock.timers.tick(READY_TIMEOUT_MS);
  assert.equal(calls.reloads, 2);
  dog.ready();
  pass(t, 5);
  assert.equal(calls.reloads, 2, 'ready ends the watch');
  dog.loading();
  pass(t, MAX_RELOADS);
  assert.equal(calls.reloads, 2 + MAX_RELOADS, 'a later load has its own reloads');
  assert.match(calls.logs[0]!, /group view: the webview did not load its script; loading it again \(1\/3\)/);
  dog.dispose();
});

test('after MAX_RELOADS the user is told once, and nothing more is tried', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { calls, dog } = watch();
  dog.loading();
  pass(t, MAX_RELOADS + 5);
  assert.deepEqual([calls.reloads, calls.gaveUp], [MAX_RELOADS, 1]);
  dog.loading();
  pass(t, 5);
  assert.deepEqual([calls.reloads, calls.gaveUp], [MAX_RELOADS, 1]);
  assert.match(calls.logs.at(-1)!, /never loaded its script \(3 reloads\); it stays blank/);
  dog.dispose();
});

test('a hidden webview is not counted; shown again it is watched again; disposed it stops', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const { panel, calls, dog } = watch(false);
  dog.loading();
  pass(t, 5);
  assert.equal(calls.reloads, 0, 'VS Code does not load a hidden webview');
  panel.setVisible(true);
  t.mock.timers.tick(READY_TIMEOUT_MS);
  assert.equal(calls.reloads, 1, 'shown, it must say ready');
  dog.ready();
  panel.setVisible(false);
  panel.setVisible(true);
  t.mock.timers.tick(READY_TIMEOUT_MS);
  assert.equal(calls.reloads, 2, 'shown again, its page loads again and must say ready again');
  panel.setVisible(false);
  pass(t, 5);
  assert.equal(calls.reloads, 2, 'hiding it stops the watch');
  panel.setVisible(true);
  dog.dispose();
  pass(t, 5);
  assert.equal(calls.reloads, 2, 'a disposed watchdog does nothing');
  assert.equal(panel.listeners.size, 0, 'and listens to nothing');
});
