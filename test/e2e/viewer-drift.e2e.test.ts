// Drift colours in chromium on the two-seed case: a rollout sampled by the tiny model (seed 0) through
// the capture proxy, rescored by the same model and by one built with seed 1; the report of each
// (the rescore report sits next to the rollout, as `harness-lab rescore` writes it) colours sampled
// tokens by ratio. Needs `npm run build` (dist/webview) and /usr/bin/chromium.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium as pw, type Browser, type Page } from 'playwright-core';
import { CaptureProxy } from '../../src/capture/proxy.js';
import type { ChatMessage } from '../../src/capture/types.js';
import type { EmbeddedEngine } from '../../src/engine/embedded-engine.js';
import { buildReportHtml, loadViewerAssets } from '../../src/report/report-html.js';
import { loadRollout } from '../../src/report/rollout-loader.js';
import { rescorePathFor } from '../../src/report/rescore-attach.js';
import { rescoreRollout } from '../../src/export/rescore.js';
import { readRollout } from '../../src/export/source.js';
import { startTestEngine } from '../integration/engine-fixture.js';
import { createSession } from '../integration/helpers.js';
import { chromium, missingViewerPrerequisite, tempDir } from './viewer-pages.js';

describe('drift colours in chromium', () => {
  const dir = tempDir();
  let browser: Browser;
  let page: Page;
  let same: EmbeddedEngine;
  let other: EmbeddedEngine;
  let session: string;
  const errors: string[] = [];

  before(async () => {
    const missing = missingViewerPrerequisite();
    if (missing) assert.fail(`the drift browser tests cannot run: ${missing}`);
    same = await startTestEngine({ seed: 0 });
    other = await startTestEngine({ seed: 1 });
    const proxy = await CaptureProxy.start({ engineUrl: `${same.url}/v1`, model: same.engine.modelName, dataDir: join(dir, 'capture') });
    try {
      const { session_id } = await createSession(proxy);
      const messages: ChatMessage[] = [{ role: 'user', content: 'Tell me about token drift.' }];
      const res = await fetch(`${proxy.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${session_id}` },
        body: JSON.stringify({ model: 'policy', messages, temperature: 0.8, max_tokens: 40, seed: 3 }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      session = join(dir, 'capture', 'sessions', `${session_id}.jsonl`);
    } finally {
      await proxy.close();
    }
    browser = await pw.launch({ executablePath: chromium(), args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  });
  after(async () => {
    await browser?.close();
    await same?.close();
    await other?.close();
  });

  /** The rollout copied under `name`, rescored against `engine` (or not), as a report; the sampled tokens' classes and colours. */
  async function sampledTokens(name: string, engine: EmbeddedEngine | null): Promise<{ cls: string; bg: string }[]> {
    const file = join(dir, `${name}.jsonl`);
    copyFileSync(session, file);
    if (engine) writeFileSync(rescorePathFor(file), JSON.stringify(await rescoreRollout(readRollout(file), { engineUrl: engine.url })));
    const html = join(dir, `${name}.html`);
    writeFileSync(html, buildReportHtml(loadRollout(file).data, loadViewerAssets()));
    await page.goto(`file://${html}`);
    await page.waitForSelector('.strip .t.s');
    return page.$$eval('.strip .t.s', (els) => els.map((e) => ({ cls: e.className, bg: getComputedStyle(e).backgroundColor })));
  }

  test('same weights: every sampled token calm (dr0); another seed: tokens past the threshold (dr3), coloured differently', async () => {
    const plain = await sampledTokens('plain', null);
    assert.ok(plain.length > 5);
    assert.ok(
      plain.every((t) => /\bb\d\b/.test(t.cls) && !/\bdr\d\b/.test(t.cls)),
      'without a rescore: logprob buckets',
    );
    const calm = await sampledTokens('same', same);
    assert.equal(calm.length, plain.length);
    assert.ok(
      calm.every((t) => /\bdr0\b/.test(t.cls)),
      calm.map((t) => t.cls).join(' | '),
    );
    const drifted = await sampledTokens('other', other);
    const loud = drifted.filter((t) => /\bdr3\b/.test(t.cls));
    assert.ok(loud.length > 0, drifted.map((t) => t.cls).join(' | '));
    assert.notEqual(loud[0]!.bg, calm[0]!.bg, 'drift past the threshold is painted differently from none');
    process.stdout.write(`# drift colours: ${loud.length}/${drifted.length} sampled tokens past the threshold under seed 1\n`);
    assert.deepEqual(errors, []);
  });
});
