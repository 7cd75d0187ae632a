// The rollout viewer's replay surface in chromium against the built webview bundle (stubbed VS Code
// API, the test plays the host): a replay's rollout shows a match badge per call and the match in the
// turn's flags; Replay and Fork here post their commands (the host runs harnessLab.replayRollout /
// harnessLab.forkFromTurn with the turn shown). Needs `npm run build` (dist/webview) and /usr/bin/chromium.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { chromium as pw, type Browser, type Page } from 'playwright-core';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { attachReplayMatches } from '../../src/replay/badges.js';
import { fixture, chromium, missingViewerPrerequisite, postLoad, tempDir, webviewPage } from './viewer-pages.js';

let browser: Browser;
let page: Page;
const dir = tempDir();
const errors: string[] = [];

before(async () => {
  const missing = missingViewerPrerequisite();
  if (missing) assert.fail(`the viewer browser tests cannot run: ${missing}`);
  browser = await pw.launch({ executablePath: chromium(), args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('pageerror', (e) => errors.push(e.message));
});
after(async () => {
  await browser?.close();
});

test('a replay shows a match badge per call; Replay and Fork here post their commands with the turn shown', async () => {
  const fx = fixture({ calls: 3, firstPrompt: 30, sampled: 8, glue: 5 });
  // replay.json beside the rollout, as `harness-lab replay` writes it: exact, tolerated (a date), no match.
  const run = join(dir, 'run');
  mkdirSync(run, { recursive: true });
  const diff = (path: string, rules?: string[]) => ({ path, recorded: 'a', replayed: 'b', ...(rules ? { rules } : {}) });
  const calls = [
    { position: 0, level: 'exact', recorded_index: 0, tolerated: [], tool_outputs: [], first_difference: null },
    {
      position: 1,
      level: 'tolerated',
      recorded_index: 1,
      tolerated: [diff('messages[0].content', ['date'])],
      tool_outputs: [diff('messages[3].content')],
      first_difference: null,
    },
    { position: 2, level: 'none', recorded_index: null, tolerated: [], tool_outputs: [], first_difference: diff('messages[0].content') },
  ];
  writeFileSync(join(run, 'replay.json'), JSON.stringify({ calls }));
  assert.equal(attachReplayMatches(fx.data, join(run, 'session.rollout.json')), 3);
  await page.goto(webviewPage(dir, 'vscode-light'));
  await postLoad(page, fx.data);
  await page.waitForSelector('.strip .t');
  assert.deepEqual(
    await page.$$eval('.graph-row .badge', (els) =>
      els.map((e) => e.textContent).filter((t) => ['exact', 'tolerated', 'no-match'].includes(t ?? '')),
    ),
    ['exact', 'tolerated', 'no-match'],
  );
  const byIndex = [...fx.data.turns].sort((a, b) => a.index - b.index);
  await page.click(`.graph-row[data-node="${byIndex[1]!.node_id}"]`);
  await page.waitForFunction(() => document.querySelector('[data-testid="replay-match"]')?.textContent?.includes('tolerated match'));
  assert.equal(
    await page.textContent('[data-testid="replay-match"]'),
    'replay: tolerated match of recorded call #1 · tolerated messages[0].content (date) · tool output changed: messages[3].content',
  );
  await page.click('[data-testid="replay-rollout"]');
  await page.click('[data-testid="fork-from-turn"]');
  const posted = await page.evaluate(() =>
    (window as unknown as { __posted: { type: string }[] }).__posted.filter((m) => m.type === 'replayRollout' || m.type === 'forkFromTurn'),
  );
  assert.deepEqual(posted, [{ type: 'replayRollout' }, { type: 'forkFromTurn', node_id: byIndex[1]!.node_id }]);
  assert.deepEqual(errors, []);
});
