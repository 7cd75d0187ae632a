// The group view in Debian's chromium on a captured batch (test/integration/group-fixture.ts): as a
// `harness-lab report --batch DIR --group G` file and in the webview (the test plays the host and
// posts loadGroup). Needs `npm run build` (dist/webview) and /usr/bin/chromium.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium as pw, type Browser, type Page } from 'playwright-core';
import { buildGroupReportHtml } from '../../src/report/group-html.js';
import { buildGroupView } from '../../src/report/group-view.js';
import { loadViewerAssets } from '../../src/report/report-html.js';
import type { GroupViewData } from '../../src/protocol/group-data.js';
import { buildGroupBatch } from '../integration/group-fixture.js';
import { chromium, missingViewerPrerequisite, tempDir, webviewPage } from './viewer-pages.js';

describe('group view in chromium', () => {
  let browser: Browser;
  let page: Page;
  const dir = tempDir();
  const errors: string[] = [];
  let div: GroupViewData;
  let same: GroupViewData;

  before(async () => {
    const missing = missingViewerPrerequisite();
    if (missing) assert.fail(`the group view browser tests cannot run: ${missing}`);
    const batch = await buildGroupBatch(join(dir, 'batch'));
    div = buildGroupView(batch.dir, 'g-div');
    same = buildGroupView(batch.dir, 'g-same');
    browser = await pw.launch({ executablePath: chromium(), args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  });
  after(async () => {
    await browser?.close();
  });

  async function checkDivGroup(): Promise<void> {
    await page.waitForSelector('[data-testid="group-view"]');
    // Members side by side with reward and class.
    const cards = await page.$$eval('[data-testid="member-card"]', (els) =>
      els.map((e) => [
        e.getAttribute('data-rollout'),
        e.querySelector('[data-testid="member-reward"]')!.textContent,
        e.querySelector('[data-testid="member-class"]')!.textContent,
      ]),
    );
    assert.deepEqual(cards, [
      ['d0', 'reward 1', 'completed'],
      ['d1', 'reward 0', 'policy failure'],
      ['d2', 'reward 0', 'policy failure'],
      ['d3', 'reward –', 'discarded: infra error'],
    ]);
    // Samples to the trainer: one per member (their turns extend one another), the group's totals against the merged length.
    const samples = await page.$$eval('[data-testid="member-samples"]', (els) => els.map((e) => e.textContent));
    assert.equal(samples.length, 4);
    for (const text of samples) assert.match(text!, /^1 sample, [\d,]+ tokens to the trainer \(1\.00x the merged [\d,]+\)$/);
    assert.match(
      (await page.textContent('[data-testid="samples-group"]'))!,
      /1\.00 samples\/rollout, [\d,]+ tokens to the trainer \(1\.00x the merged length\), 0 unparsed tool calls \(3 rollouts\)/,
    );
    assert.match((await page.textContent('[data-testid="samples-harness"]'))!, /^harness react-a/);
    const boxes = await page.$$eval('[data-testid="member-card"]', (els) => els.map((e) => e.getBoundingClientRect().top));
    assert.ok(
      boxes.every((t) => Math.abs(t - boxes[0]!) < 1),
      'cards in one row',
    );
    // Histograms: batch (4 at 0, 1 at 1), per harness, drawn as bars whose heights follow the counts.
    const batchBars = await page.$$eval('[data-testid="histogram-batch"] rect.hist-bar', (els) =>
      els.map((e) => [Number(e.getAttribute('data-count')), Number(e.getAttribute('height'))] as [number, number]),
    );
    assert.equal(batchBars.length, 10);
    assert.deepEqual([batchBars[0]![0], batchBars[9]![0]], [4, 1]);
    assert.ok(batchBars[0]![1] > batchBars[9]![1] && batchBars[9]![1] > 0 && batchBars[5]![1] === 0);
    assert.ok(await page.$('[data-testid="histogram-harness-react-a"]'));
    assert.ok(await page.$('[data-testid="histogram-harness-react-b"]'));
    // Divergence: d0 vs d2 at call 1, the differing sampled token outlined in both strips at the same column.
    assert.match((await page.textContent('[data-testid="divergence-text"]'))!, /^d0 and d2 first diverge at call 1, sampled token \d+/);
    const d = div.divergences[div.focus_pair!]!;
    const marked = await page.$$eval('.div-strip td.div', (els) =>
      els.map((e) => ({ pos: Number(e.getAttribute('data-pos')), left: e.getBoundingClientRect().left, text: e.textContent })),
    );
    assert.equal(marked.length, 2);
    assert.deepEqual(
      marked.map((m) => m.pos),
      [d.token_index, d.token_index],
    );
    assert.equal(marked[0]!.left, marked[1]!.left, 'aligned at the divergence');
    assert.notEqual(marked[0]!.text, marked[1]!.text);
    const borders = await page.$$eval('.div-strip td.div', (els) => els.map((e) => getComputedStyle(e).borderTopColor));
    assert.notEqual(borders[0], 'rgba(0, 0, 0, 0)', 'the divergence is outlined');
    // Another pair: d0 vs d1 part at call 3.
    await page.selectOption('[data-testid="pair-select"]', String(div.divergences.findIndex((x) => x.a === 'd0' && x.b === 'd1')));
    assert.match((await page.textContent('[data-testid="divergence-text"]'))!, /^d0 and d1 first diverge at call 3/);
    // Behaviour table and chart.
    const row = await page.$$eval('[data-testid="behaviour-table"] tr[data-rollout="d2"] td', (els) => els.map((e) => e.textContent));
    assert.deepEqual(row, ['2', '1', '1.00', 'no', '1.00', 'turn 2']);
    const failedBars = await page.$$eval('[data-testid="behaviour-chart"] rect.bar-failed', (els) =>
      els.map((e) => Number(e.getAttribute('data-n'))),
    );
    assert.deepEqual(failedBars, [0, 0, 1, 0]);
    assert.equal(await page.$('[data-testid="teaches-nothing"]'), null);
  }

  test('report file: histogram, divergence point, behaviour; no CSP violation', async () => {
    const file = join(dir, 'g-div.html');
    writeFileSync(file, buildGroupReportHtml(div, loadViewerAssets()));
    await page.goto(`file://${file}`);
    await checkDivGroup();
    assert.equal(await page.locator('[data-testid="open-member"]').count(), 0, 'a report has no host to open members in');
    const sameFile = join(dir, 'g-same.html');
    writeFileSync(sameFile, buildGroupReportHtml(same, loadViewerAssets()));
    await page.goto(`file://${sameFile}`);
    await page.waitForSelector('[data-testid="group-view"]');
    assert.match((await page.textContent('[data-testid="teaches-nothing"]'))!, /teaches nothing: every kept member has reward 0/);
    assert.match((await page.textContent('[data-testid="divergence-text"]'))!, /identical/);
    assert.deepEqual(errors, []);
  });

  test('webview: the host posts loadGroup after ready', async () => {
    await page.goto(webviewPage(dir, 'vscode-dark'));
    await page.waitForFunction(() => (window as unknown as { __posted: unknown[] }).__posted.length > 0);
    await page.evaluate((g) => window.postMessage({ type: 'loadGroup', group: g }, '*'), div);
    await checkDivGroup();
    // Every member with a capture can be opened in the rollout viewer: the webview asks its host.
    const openers = page.locator('[data-testid="member-card"] [data-testid="open-member"]');
    assert.equal(await openers.count(), div.members.filter((m) => m.session_id).length);
    await page.locator('[data-testid="member-card"][data-rollout="d1"] [data-testid="open-member"]').click();
    const posted = await page.evaluate(() => (window as unknown as { __posted: { type: string }[] }).__posted);
    assert.deepEqual(
      posted.filter((m) => m.type === 'openGroupMember'),
      [{ type: 'openGroupMember', rollout_id: 'd1' }],
    );
    assert.deepEqual(errors, []);
  });
});
