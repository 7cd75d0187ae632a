// The rollout viewer in Debian's chromium, against the built webview bundle with a stubbed
// acquireVsCodeApi (the test plays the extension host) and against a `harness-lab report` file.
// Needs `npm run build` (dist/webview) and /usr/bin/chromium.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { chromium as pw, type Browser, type Page } from 'playwright-core';
import { parseAtif } from '../../src/harness/atif.js';
import { atifCheck } from '../../src/harness/atif-check.js';
import { buildRollout } from '../../src/capture/rollout.js';
import { viewerDataFromRollout, type ViewerData } from '../../src/protocol/viewer-data.js';
import { generateRollout } from '../../bench/rollout-generator.js';
import { commonPrefix, logprobBucket } from '../../webview/viewer/model.js';
import { chromium, fixture, missingViewerPrerequisite, postLoad, reportPage, tempDir, webviewPage } from './viewer-pages.js';

/** A missing browser or bundle fails every test here, naming it (never a skip). */
function requirePrerequisites(): void {
  const missing = missingViewerPrerequisite();
  if (missing) assert.fail(`the viewer browser tests cannot run: ${missing}`);
}

const FEATURES = {
  calls: 6,
  firstPrompt: 60,
  sampled: 20,
  glue: 10,
  retry: true,
  subagent: true,
  compaction: true,
  title: true,
  misaligned: true,
  missing: true,
} as const;

async function load(
  page: Page,
  data: ViewerData,
  dir: string,
  theme: 'vscode-light' | 'vscode-dark' = 'vscode-light',
  state?: unknown,
): Promise<void> {
  await page.goto(webviewPage(dir, theme));
  if (state !== undefined) await page.evaluate((s) => ((window as unknown as { __state: unknown }).__state = s), state);
  await postLoad(page, data);
  await page.waitForSelector('.strip .t');
}

/** Per strip position: index, classes, and the styles the mask and colours change. */
async function stripTokens(page: Page): Promise<{ i: number; cls: string; text: string; style: string }[]> {
  return page.$$eval('.strip .t', (els) =>
    els.map((e) => {
      const cs = getComputedStyle(e);
      return {
        i: Number((e as HTMLElement).dataset.i),
        cls: e.className,
        text: e.textContent ?? '',
        style: `${cs.backgroundColor}|${cs.boxShadow}|${cs.color}|${cs.opacity}`,
      };
    }),
  );
}

/**
 * Waits until the strip shows `node` with tokens rendered and no render pending:
 * two animation frames in a row with the same rendered rows (a scroll or token-text update
 * re-renders in the frame after it happens).
 */
async function settledStrip(page: Page, node: string): Promise<void> {
  await page.waitForFunction(
    ([want]) => document.querySelector('[data-testid="turn-head"] .muted')?.textContent?.split(' · ')[0] === want,
    [node] as const,
  );
  await page.waitForFunction(STRIP_UNCHANGED_FOR_TWO_FRAMES);
}

/**
 * A page-side predicate as source text: a function passed from here would be rewritten by the test
 * transpiler (esbuild's keepNames helpers), which does not exist in the page.
 */
const STRIP_UNCHANGED_FOR_TWO_FRAMES = `(async () => {
  const snap = () => Array.from(document.querySelectorAll('.strip .t')).map((e) => e.dataset.i + ':' + e.textContent).join(',');
  const frame = () => new Promise((r) => requestAnimationFrame(() => r(undefined)));
  const a = snap();
  await frame();
  await frame();
  return a !== '' && a === snap();
})()`;

async function currentNode(page: Page): Promise<string> {
  return (await page.textContent('[data-testid="turn-head"] .muted'))!.split(' · ')[0]!;
}

describe('rollout viewer webview (stubbed VS Code API)', () => {
  let browser: Browser;
  let page: Page;
  const dir = tempDir();
  const fx = fixture(FEATURES);
  const errors: string[] = [];

  before(async () => {
    requirePrerequisites();
    browser = await pw.launch({ executablePath: chromium(), args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  });
  after(async () => {
    await browser?.close();
  });

  test('a narrow panel (360 px): the graph goes above the turn; nothing overflows sideways and no graph badge is cut', async () => {
    const narrow = await browser.newPage({ viewport: { width: 360, height: 800 } });
    try {
      await load(narrow, fx.data, dir);
      const box = await narrow.evaluate(() => {
        const graph = document.querySelector('.graph')!.getBoundingClientRect();
        const turn = document.querySelector('.turn')!.getBoundingClientRect();
        const cut = Array.from(document.querySelectorAll('.graph-row .badge'))
          .map((b) => ({ text: b.textContent, r: b.getBoundingClientRect(), row: b.closest('.graph-row')!.getBoundingClientRect() }))
          .filter((b) => b.r.width === 0 || b.r.right > b.row.right + 0.5 || b.r.left < b.row.left - 0.5 || b.r.right > window.innerWidth)
          .map((b) => b.text);
        return {
          overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
          graphAbove: graph.bottom <= turn.top + 0.5,
          graphWidth: graph.width,
          badges: document.querySelectorAll('.graph-row .badge').length,
          cut,
        };
      });
      assert.equal(box.overflow, 0, 'no horizontal scroll of the page');
      assert.ok(box.graphAbove, 'the graph sits above the turn');
      assert.ok(box.graphWidth > 300, `the graph takes the width: ${box.graphWidth}`);
      assert.ok(box.badges > 0, 'the fixture has graph badges (retry, subagent, ...)');
      assert.deepEqual(box.cut, [], 'no badge is clipped by its row or the panel');
      await narrow.screenshot({ path: `${dir}/narrow-360.png` });
    } finally {
      await narrow.close();
    }
  });

  test('ready handshake first, then the load renders every turn with the captured token counts', async () => {
    await page.goto(webviewPage(dir, 'vscode-light'));
    await page.waitForFunction(() => (window as unknown as { __posted: unknown[] }).__posted.length > 0);
    assert.deepEqual(await page.evaluate(() => (window as unknown as { __posted: unknown[] }).__posted), [{ type: 'ready', version: 1 }]);
    // Nothing was requested before the load, and details are requested per shown turn afterwards.
    assert.equal(await page.$('.strip'), null, 'nothing rendered before the host answers');
    await postLoad(page, fx.data);
    await page.waitForSelector('.strip .t');
    assert.equal(await page.$$eval('.graph-row', (e) => e.length), fx.records.length);
    const byIndex = [...fx.records].sort((a, b) => a.index - b.index);
    for (let k = 0; k < byIndex.length; k++) {
      const r = byIndex[k]!;
      assert.equal(await currentNode(page), r.call_id);
      const counts = await page.$eval('[data-testid="counts"]', (e) => ({
        p: Number(e.getAttribute('data-prompt')),
        s: Number(e.getAttribute('data-sampled')),
      }));
      assert.deepEqual(counts, { p: r.prompt_token_ids!.length, s: r.completion_token_ids!.length }, `turn #${r.index}`);
      // The fixture's turns are short enough that every position is rendered: one span per token.
      const toks = await stripTokens(page);
      assert.equal(toks.length, r.prompt_token_ids!.length + r.completion_token_ids!.length);
      assert.equal(
        toks.filter((t) => t.cls.includes(' s ')).length + toks.filter((t) => t.cls.endsWith(' s')).length,
        r.completion_token_ids!.length,
      );
      await page.keyboard.press('j');
    }
    assert.deepEqual(errors, []);
  });

  test('sampled tokens are coloured by logprob bucket; missing and misaligned turns are flagged', async () => {
    await load(page, fx.data, dir);
    const buckets = new Map<number, string>();
    for (const r of fx.records) {
      await page.click(`.graph-row[data-node="${r.call_id}"]`);
      const toks = await stripTokens(page);
      const nPrompt = r.prompt_token_ids!.length;
      const sampled = toks.filter((t) => t.i >= nPrompt);
      assert.equal(sampled.length, r.completion_token_ids!.length);
      const aligned = r.logprobs && r.logprobs.length === r.completion_token_ids!.length;
      for (const t of sampled) {
        if (aligned) {
          const b = logprobBucket(r.logprobs![t.i - nPrompt]!);
          assert.ok(t.cls.split(' ').includes(`b${b}`), `#${r.index} pos ${t.i}: ${t.cls} should have b${b}`);
          buckets.set(b, t.style.split('|')[0]!);
        } else assert.ok(t.cls.split(' ').includes('nolp'), `${t.cls} should be nolp`);
      }
      for (const t of toks.filter((x) => x.i < nPrompt)) assert.ok(!/\bb\d\b/.test(t.cls), 'context tokens are not coloured');
      const flags = await page.textContent('[data-testid="flags"]');
      if (r.logprobs === null) assert.match(flags!, /missing logprobs/);
      else if (!aligned)
        assert.match(
          flags!,
          new RegExp(`misaligned logprobs: ${r.logprobs.length} logprobs for ${r.completion_token_ids!.length} sampled tokens`),
        );
    }
    // Different buckets really look different.
    assert.ok(buckets.size >= 3, `saw buckets ${[...buckets.keys()]}`);
    assert.equal(new Set(buckets.values()).size, buckets.size);
  });

  test('the mask toggle changes exactly the mask-1 tokens', async () => {
    await load(page, fx.data, dir);
    let checkedTrained = 0;
    let checkedUntrained = 0;
    for (const turn of fx.data.turns) {
      await page.click(`.graph-row[data-node="${turn.node_id}"]`);
      // The strip re-renders after the click on its own schedule (the scroll it sets fires in a later
      // frame; token texts arrive in a message): compare snapshots of a settled strip, by token index.
      await settledStrip(page, turn.node_id);
      const before = new Map((await stripTokens(page)).map((t) => [t.i, t.style]));
      await page.keyboard.press('m');
      await page.waitForFunction(() => document.body.classList.contains('mask-on'));
      await settledStrip(page, turn.node_id);
      const afterOn = await stripTokens(page);
      await page.keyboard.press('m');
      await page.waitForFunction(() => !document.body.classList.contains('mask-on'));
      const expected = turn.trained ? turn.sampled_ids.map((_, k) => turn.prompt_ids.length + k) : [];
      for (const i of expected)
        assert.ok(before.has(i) && afterOn.some((t) => t.i === i), `turn #${turn.index}: sampled token ${i} is rendered in both snapshots`);
      const changed = afterOn.filter((t) => before.has(t.i) && t.style !== before.get(t.i)).map((t) => t.i);
      assert.deepEqual(changed, expected, `turn #${turn.index}`);
      if (turn.trained) checkedTrained++;
      else if (turn.sampled_ids.length) checkedUntrained++;
    }
    assert.ok(checkedTrained >= 3 && checkedUntrained >= 3, `${checkedTrained} trained, ${checkedUntrained} untrained turns checked`);
    // The button and the key agree, and toggling keeps the reader's place: same turn, same scroll.
    const longest = fx.data.turns.reduce((a, t) => (t.prompt_ids.length > a.prompt_ids.length ? t : a));
    await page.click(`.graph-row[data-node="${longest.node_id}"]`);
    await settledStrip(page, longest.node_id);
    await page.$eval('.strip', (e) => (e.scrollTop = Math.floor(e.scrollHeight / 3)));
    await page.waitForFunction(STRIP_UNCHANGED_FOR_TWO_FRAMES);
    const place = await page.$eval('.strip', (e) => e.scrollTop);
    await page.click('[data-testid="mask-toggle"]');
    assert.equal(await page.evaluate(() => document.body.classList.contains('mask-on')), true);
    await page.waitForFunction(STRIP_UNCHANGED_FOR_TWO_FRAMES);
    assert.equal(await currentNode(page), longest.node_id);
    assert.equal(await page.$eval('.strip', (e) => e.scrollTop), place, 'the strip stays where the reader was');
    await page.keyboard.press('m');
    await page.waitForFunction(STRIP_UNCHANGED_FOR_TWO_FRAMES);
    assert.equal(await page.$eval('.strip', (e) => e.scrollTop), place);
  });

  test('stepping, branches, graph clicks and the remembered position', async () => {
    await load(page, fx.data, dir);
    const order = fx.data.turns.map((t) => t.node_id);
    assert.equal(await currentNode(page), order[0]);
    await page.keyboard.press('j');
    await page.keyboard.press('ArrowDown');
    assert.equal(await currentNode(page), order[2]);
    await page.keyboard.press('k');
    assert.equal(await currentNode(page), order[1]);
    await page.click('[data-testid="next-turn"]');
    assert.equal(await currentNode(page), order[2]);
    // The retry and its continued sibling share a parent: ] and [ move between them.
    const retry = fx.data.turns.find((t) => t.discarded)!;
    const parent = fx.data.turns.find((t) => t.node_id === retry.parent_id)!;
    assert.equal(parent.children.length, 2);
    await page.click(`.graph-row[data-node="${parent.children[0]}"]`);
    await page.keyboard.press(']');
    assert.equal(await currentNode(page), parent.children[1]);
    await page.keyboard.press('[');
    assert.equal(await currentNode(page), parent.children[0]);
    assert.match((await page.textContent(`.graph-row[data-node="${retry.node_id}"]`))!, /retry/);
    // Graph badges name the kinds of roots.
    const labels = await page.$$eval('.graph-row', (rows) => rows.map((r) => r.textContent ?? ''));
    for (const kind of ['root', 'subagent', 'compaction', 'auxiliary'])
      assert.ok(
        labels.some((l) => l.includes(kind)),
        kind,
      );
    // Position is remembered per rollout in the webview state, and restored on the next load.
    const last = order[order.length - 1]!;
    await page.click(`.graph-row[data-node="${last}"]`);
    const state = await page.evaluate(() => (window as unknown as { __state: { positions: Record<string, string> } }).__state);
    assert.equal(state.positions.fixture, last);
    await load(page, fx.data, dir, 'vscode-light', state);
    assert.equal(await currentNode(page), last);
  });

  test('hover and keyboard focus show id, text, logprob and alternatives', async () => {
    await load(page, fx.data, dir);
    const turn = fx.data.turns[0]!;
    const k = 0;
    const pos = turn.prompt_ids.length + k;
    await page.hover(`.strip .t[data-i="${pos}"]`);
    const detail = (await page.textContent('[data-testid="detail"]'))!;
    assert.match(detail, new RegExp(`id ${turn.sampled_ids[k]}`));
    assert.match(detail, new RegExp(`logprob ${turn.logprobs![k]!.toFixed(4)}`));
    assert.match(detail, /top: /);
    assert.equal(await page.textContent('[data-testid="detail-text"]'), JSON.stringify(turn.sampled_text![k]));
    // Keyboard: Tab into the strip, Home, then ArrowRight moves the cursor one token.
    await page.focus('.strip');
    await page.keyboard.press('Home');
    await page.keyboard.press('ArrowRight');
    assert.match((await page.textContent('[data-testid="detail"]'))!, new RegExp(`context 1 · id ${turn.prompt_ids[1]}`));
    assert.equal(await page.getAttribute('.strip', 'aria-activedescendant'), 'tok-1');
  });

  test('what the harness added, and a prefix break on a compaction root', async () => {
    await load(page, fx.data, dir);
    const child = fx.data.turns.find(
      (t) => t.parent_id && !t.discarded && t.role === 'agent' && fx.data.turns.find((p) => p.node_id === t.parent_id)!.parent_id,
    )!;
    const parent = fx.data.turns.find((t) => t.node_id === child.parent_id)!;
    await page.click(`.graph-row[data-node="${child.node_id}"]`);
    const added = (await page.textContent('[data-testid="added"]'))!;
    const kept = parent.prompt_ids.length + parent.sampled_ids.length;
    assert.match(added, new RegExp(`${kept} of ${kept} tokens kept, ${child.prompt_ids.length - kept} added by the harness`));
    assert.equal(await page.$('[data-testid="prefix-break"]'), null);
    assert.equal(await page.$$eval('.strip .t.a', (e) => e.length), child.prompt_ids.length - kept);
    // The compaction root keeps the 60-token system prompt and task, then replaces the history.
    const first = fx.data.turns[0]!;
    const compaction = fx.data.turns.find(
      (t) => t.parent_id === null && t !== first && commonPrefix(t.prompt_ids, first.prompt_ids) === 60,
    )!;
    await page.click(`.graph-row[data-node="${compaction.node_id}"]`);
    assert.match((await page.textContent('.graph-row.sel'))!, /compaction/);
    assert.match((await page.textContent('[data-testid="prefix-break"]'))!, /^Prefix break at token 60: /);
    // A subagent root shares only the chat template's first token with anything earlier: it starts a
    // conversation of its own, which rewrites nothing, so it is said to be a new root, never a break (#28).
    const sub = fx.data.turns.find((t) => t.parent_id === null && t !== first && t.role === 'agent' && t !== compaction)!;
    await page.click(`.graph-row[data-node="${sub.node_id}"]`);
    assert.match((await page.textContent('.graph-row.sel'))!, /subagent/);
    assert.match((await page.textContent('[data-testid="new-root"]'))!, /^A new root that continues no earlier call/);
    assert.equal(await page.$('[data-testid="prefix-break"]'), null);
  });

  test('raw I/O: the harness request in its dialect, the engine request and both answers, fetched per turn', async () => {
    await load(page, fx.data, dir);
    const turn = fx.data.turns[3]!;
    await page.click(`.graph-row[data-node="${turn.node_id}"]`);
    await page.click('vscode-tab-header:has-text("Raw I/O")');
    await page.waitForSelector('[data-testid="raw-tabs"]');
    const posted = await page.evaluate(() => (window as unknown as { __posted: { type: string; node_id?: string }[] }).__posted);
    assert.ok(posted.some((m) => m.type === 'details' && m.node_id === turn.node_id));
    const headers = await page.$$eval('[data-testid="raw-tabs"] vscode-tab-header', (els) => els.map((e) => e.textContent));
    assert.deepEqual(headers, ['Harness request', 'Engine request', 'Engine response', 'Harness response']);
    assert.equal(await page.textContent('[data-testid="raw-request-route"]'), 'openai_chat · /v1/chat/completions');
    // The four headers sit side by side inside the panel (none pushed off screen).
    const boxes = await page.$$eval('[data-testid="raw-tabs"] vscode-tab-header', (els) => els.map((e) => e.getBoundingClientRect().right));
    const panelRight = await page.$eval('[data-testid="raw-tabs"]', (e) => e.getBoundingClientRect().right);
    assert.ok(
      boxes.every((r) => r <= panelRight + 1),
      `tab headers end within the panel: ${JSON.stringify(boxes)} vs ${panelRight}`,
    );
    const panes = await page.$$eval('[data-testid="raw-tabs"] pre', (els) => els.map((e) => JSON.parse(e.textContent ?? 'null')));
    assert.deepEqual(panes, [turn.raw!.request, turn.raw!.engine_request, turn.raw!.engine_response, turn.raw!.response_body]);
    await page.click('vscode-tab-header:has-text("What the harness added")');
  });

  test('an ATIF mismatch is shown as one; the attach request round-trips with its seq', async () => {
    const agentCounts = fx.data.turns
      .filter((t) => t.role === 'agent' || (t.discarded && t.root_id === fx.data.graph.roots[0]))
      .map((t) => t.sampled_ids.length);
    const traj = (counts: number[]) =>
      parseAtif({
        schema_version: 'ATIF-v1.7',
        agent: { name: 'h', version: '1' },
        steps: counts.map((c, i) => ({ step_id: i + 1, source: 'agent', message: '', metrics: { completion_tokens: c } })),
      });
    const bad = atifCheck(fx.doc, traj(agentCounts.map((c) => c + 1)));
    assert.equal(bad.verdict, 'MISMATCH');
    // The host sends a check it already made (a trajectory.json next to the rollout) with the load.
    await load(page, { ...fx.data, atif: bad }, dir);
    assert.equal(await page.textContent('[data-testid="verdict"]'), 'ATIF: MISMATCH');
    await page.click('vscode-tab-header:has-text("ATIF cross-check")');
    assert.match((await page.textContent('[data-testid="atif-verdict"]'))!, /^MISMATCH: turn_mismatch/);
    assert.ok((await page.$$eval('.atif-table tr.st-mismatch', (e) => e.length)) > 0);
    // Attach: the webview asks, the host answers with the same seq.
    await page.click('[data-testid="attach-trajectory"]');
    const posted = await page.evaluate(() => (window as unknown as { __posted: { type: string; seq?: number }[] }).__posted);
    const req = posted.find((m) => m.type === 'attachTrajectory')!;
    assert.equal(typeof req.seq, 'number');
    const good = atifCheck(
      fx.doc,
      traj(fx.doc.turns.filter((t) => fx.doc.graph.nodes.find((n) => n.node_id === t.root_id)!.role === 'agent').map((t) => t.n_sampled)),
    );
    await page.evaluate(([seq, r]) => window.postMessage({ type: 'attachTrajectory/completion', seq: seq! + 100, res: r }, '*'), [
      req.seq,
      good,
    ] as const);
    assert.equal(await page.textContent('[data-testid="verdict"]'), 'ATIF: MISMATCH', 'a reply with an unknown seq is ignored');
    await page.evaluate(([seq, r]) => window.postMessage({ type: 'attachTrajectory/completion', seq, res: r }, '*'), [
      req.seq,
      good,
    ] as const);
    assert.equal(await page.textContent('[data-testid="verdict"]'), 'ATIF: match');
    await page.screenshot({ path: `${dir}/atif.png` });
  });

  test('prompt tokens show ids until the host sends their texts, then the texts', async () => {
    const bare = fixture(FEATURES, false);
    await load(page, bare.data, dir);
    const first = bare.data.turns[0]!;
    const ctx = () => page.$$eval('.strip .t:not(.s)', (els) => els.map((e) => e.textContent ?? ''));
    const before = await ctx();
    assert.equal(before.length, first.prompt_ids.length);
    // Without texts, prompt ids show as ids, except those whose text is known from sampled bytes elsewhere.
    assert.ok(before.filter((t) => /^⟨\d+⟩$/.test(t)).length > first.prompt_ids.length / 2);
    await page.evaluate((texts) => window.postMessage({ type: 'tokenTexts', texts }, '*'), bare.vocab);
    await page.waitForFunction(
      () => !Array.from(document.querySelectorAll('.strip .t:not(.s)')).some((e) => /^⟨\d+⟩$/.test(e.textContent ?? '')),
    );
    const after = await ctx();
    assert.deepEqual(
      after,
      first.prompt_ids.map((id) => bare.vocab[id]!.replace(/\n/g, '↵')),
    );
  });

  test('a 60k-token turn renders only the rows in view, and scrolling reaches the end', async () => {
    const big = fixture({ calls: 2, firstPrompt: 60_000, sampled: 50 });
    await load(page, big.data, dir);
    await page.click(`.graph-row[data-node="${big.data.turns[1]!.node_id}"]`);
    const turn = big.data.turns[1]!;
    const n = turn.prompt_ids.length + turn.sampled_ids.length;
    const rendered = await page.$$eval('.strip .t', (e) => e.length);
    assert.ok(rendered > 0 && rendered < 3000, `${rendered} spans for ${n} tokens`);
    await page.$eval('.strip', (e) => (e.scrollTop = e.scrollHeight));
    await page.waitForFunction((last) => document.querySelector(`.strip .t[data-i="${last}"]`) !== null, n - 1);
    assert.ok((await page.$$eval('.strip .t', (e) => e.length)) < 3000);
    assert.deepEqual(errors, []);
  });

  test('a live session refreshes: the reader on the newest call follows new calls, a reader further back stays', async () => {
    const g = generateRollout({ seed: 5, calls: 6, firstPrompt: 40, sampled: 10, glue: 5 });
    const upTo = (n: number) =>
      viewerDataFromRollout(
        buildRollout(g.session, g.records.slice(0, n), {
          budgetStopCount: 0,
          captureLevel: 'tokens',
          includeDiscarded: true,
          includeTraces: false,
        }),
        { key: 'live-session', title: 'Live session', tokenTexts: g.vocab },
      );
    const ids = upTo(6).turns.map((t) => t.node_id);
    await load(page, upTo(3), dir);
    const rows = () => page.$$eval('.graph-row', (e) => e.length);
    assert.equal(await rows(), 3);
    await page.click(`.graph-row[data-node="${ids[2]}"]`);
    assert.equal(await currentNode(page), ids[2]);
    await postLoad(page, upTo(4));
    await page.waitForFunction(() => document.querySelectorAll('.graph-row').length === 4);
    assert.equal(await currentNode(page), ids[3], 'on the newest call: follows the new one');
    await page.click(`.graph-row[data-node="${ids[1]}"]`);
    await postLoad(page, upTo(6));
    await page.waitForFunction(() => document.querySelectorAll('.graph-row').length === 6);
    assert.equal(await currentNode(page), ids[1], 'further back: stays on the call being read');
    // The replaced viewers let go of the document: one keydown listener is left, and j moves one turn.
    const cdp = await page.context().newCDPSession(page);
    const { result } = await cdp.send('Runtime.evaluate', { expression: 'document' });
    const { listeners } = await cdp.send('DOMDebugger.getEventListeners', { objectId: result.objectId! });
    await cdp.detach();
    assert.equal(listeners.filter((l) => l.type === 'keydown').length, 1);
    await page.keyboard.press('j');
    assert.equal(await currentNode(page), ids[2]);
    assert.deepEqual(errors, []);
  });

  test('light and dark screenshots', async () => {
    for (const theme of ['vscode-light', 'vscode-dark'] as const) {
      await load(page, fx.data, dir, theme);
      await page.keyboard.press('j');
      await page.screenshot({ path: `${dir}/${theme}.png` });
      const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
      assert.equal(bg, theme === 'vscode-light' ? 'rgb(255, 255, 255)' : 'rgb(31, 31, 31)');
    }
    process.stdout.write(`# screenshots in ${dir}\n`);
  });
});

describe('rollout viewer HTML report', () => {
  let browser: Browser;
  const dir = tempDir();
  const fx = fixture(FEATURES);

  before(async () => {
    requirePrerequisites();
    browser = await pw.launch({ executablePath: chromium(), args: ['--no-sandbox'] });
  });
  after(async () => {
    await browser?.close();
  });

  test('opens offline under its CSP with the same viewer: counts, colours, mask, ATIF verdict', async () => {
    const wrong = parseAtif({
      schema_version: 'ATIF-v1.7',
      agent: { name: 'h', version: '1' },
      steps: [{ step_id: 1, source: 'agent', message: '', metrics: { completion_tokens: 999 } }],
    });
    const url = reportPage(dir, { ...fx.data, atif: atifCheck(fx.doc, wrong) });
    for (const colorScheme of ['light', 'dark'] as const) {
      const ctx = await browser.newContext({ colorScheme, viewport: { width: 1280, height: 900 }, offline: true });
      const page = await ctx.newPage();
      const problems: string[] = [];
      page.on('pageerror', (e) => problems.push(e.message));
      page.on('console', (m) => (m.type() === 'error' || /Content Security Policy|Refused/.test(m.text())) && problems.push(m.text()));
      page.on('request', (r) => !r.url().startsWith('file:') && !r.url().startsWith('data:') && problems.push(`network: ${r.url()}`));
      await page.goto(url);
      await page.waitForSelector('.strip .t');
      const first = fx.data.turns[0]!;
      assert.equal(await page.$$eval('.strip .t', (e) => e.length), first.prompt_ids.length + first.sampled_ids.length);
      assert.equal(await page.$$eval('.strip .t.s', (e) => e.length), first.sampled_ids.length);
      const cls = await page.$eval(`.strip .t[data-i="${first.prompt_ids.length}"]`, (e) => e.className);
      assert.ok(cls.includes(`b${logprobBucket(first.logprobs![0]!)}`));
      assert.equal(await page.textContent('[data-testid="verdict"]'), 'ATIF: MISMATCH');
      // Prompt texts come from the embedded token table, not ids.
      assert.equal(await page.$$eval('.strip .t.c', (els) => els.filter((e) => /^⟨\d+⟩$/.test(e.textContent ?? '')).length), 0);
      await page.keyboard.press('m');
      assert.equal(await page.$$eval('.strip .t.m1', (e) => e.length), first.trained ? first.sampled_ids.length : 0);
      await page.screenshot({ path: `${dir}/report-${colorScheme}.png` });
      assert.deepEqual(problems, []);
      await ctx.close();
    }
    process.stdout.write(`# report screenshots in ${dir}\n`);
  });
});
