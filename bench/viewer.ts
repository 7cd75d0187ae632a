// Rollout viewer benchmark: a generated 300-call rollout with about one million token positions,
// opened in headless chromium (Debian's /usr/bin/chromium) two ways: as a `harness-lab report` file,
// and as the webview bundle fed over postMessage the way the extension host does. Measures first
// paint, stepping through every turn, scrolling the longest turn frame by frame, and memory/DOM size.
//   node --import tsx bench/viewer.ts [--calls 300] [--tokens 1000000] [--quick]
// Needs `npm run build` (dist/webview). Targets: first paint < 1000 ms, p95 frame < 50 ms while
// scrolling, DOM nodes bounded (independent of the number of tokens).
import { mkdtempSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium as pw, type CDPSession, type Page } from 'playwright-core';
import { buildRollout } from '../src/capture/rollout.js';
import { toWire, viewerDataFromRollout, type ViewerData } from '../src/protocol/viewer-data.js';
import { buildReportHtml, loadViewerAssets } from '../src/report/report-html.js';
import { generateRollout, tokenPositions, type GeneratorOptions } from './rollout-generator.js';
import { percentile } from './stats.js';
import { benchGroupView, type GroupSample } from './viewer-group.js';

const args = process.argv.slice(2);
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const quick = args.includes('--quick') || process.env.BENCH_QUICK === '1';
const CALLS = flag('calls', quick ? 100 : 300);
const TOKENS = flag('tokens', quick ? 200_000 : 1_000_000);
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** Pick the per-turn glue that brings the rollout closest to the token target. */
function calibrate(): { opts: GeneratorOptions; positions: number } {
  let best: { opts: GeneratorOptions; positions: number } | null = null;
  for (let glue = 1; glue <= 200; glue++) {
    const opts: GeneratorOptions = {
      seed: 7,
      calls: CALLS,
      firstPrompt: 1000,
      sampled: 6,
      glue,
      retry: true,
      subagent: true,
      compaction: true,
      title: true,
      misaligned: true,
      missing: true,
    };
    const positions = tokenPositions(generateRollout(opts).records);
    if (!best || Math.abs(positions - TOKENS) < Math.abs(best.positions - TOKENS)) best = { opts, positions };
    if (positions > TOKENS) break;
  }
  return best!;
}

interface Sample {
  firstPaintMs: number;
  /** Main-thread busy time until the first paint (CDP TaskDuration): less sensitive to other load on the machine. */
  firstPaintBusyMs: number;
  stepP50: number;
  stepP95: number;
  frameP50: number;
  frameP95: number;
  frameMax: number;
  longFrames: number;
  domNodesAfterLoad: number;
  domNodesAfterScroll: number;
  maxSpans: number;
  heapMiB: number;
}

const cdps = new WeakMap<Page, CDPSession>();

/** One CDP session per page, so the cumulative counters (TaskDuration) keep counting. */
async function metrics(page: Page): Promise<{ nodes: number; heap: number; task: number }> {
  let cdp = cdps.get(page);
  if (!cdp) {
    cdp = await page.context().newCDPSession(page);
    await cdp.send('Performance.enable');
    cdps.set(page, cdp);
  }
  const { metrics: m } = await cdp.send('Performance.getMetrics');
  const get = (n: string) => m.find((x) => x.name === n)?.value ?? 0;
  return { nodes: get('Nodes'), heap: get('JSHeapUsedSize'), task: get('TaskDuration') * 1000 };
}

/** Time from navigation (or the load message) to the first painted token row. */
const PAINT_PROBE = `
  window.__hlPaint = new Promise((resolve) => {
    const check = () => {
      if (document.querySelector('.strip .t')) requestAnimationFrame(() => resolve(performance.now()));
      else requestAnimationFrame(check);
    };
    requestAnimationFrame(check);
  });`;

async function measure(page: Page, start: () => Promise<void>, report: boolean): Promise<Sample> {
  let b0 = report ? (await metrics(page)).task : 0;
  await start();
  if (!report) b0 = (await metrics(page)).task;
  const painted = await page.evaluate(() => (window as unknown as { __hlPaint: Promise<number> }).__hlPaint);
  const t0 = await page.evaluate(() => (window as unknown as { __t0?: number }).__t0 ?? 0);
  const marks = await page.evaluate(() => {
    const nav = performance.getEntriesByType('navigation')[0] as PerformanceNavigationTiming | undefined;
    const m = performance.getEntriesByType('mark').map((x) => `${x.name}@${x.startTime.toFixed(0)}`);
    return [...(nav ? [`responseStart@${nav.responseStart.toFixed(0)}`] : []), ...m].join(' ');
  });
  process.stdout.write(`  marks: ${marks} painted@${painted.toFixed(0)} (start ${t0.toFixed(0)})\n`);
  const afterLoad = await metrics(page);
  const busy = afterLoad.task - b0;
  // Step through every turn with the keyboard, one animation frame per step.
  const steps = await page.evaluate(async () => {
    const times: number[] = [];
    const n = document.querySelectorAll('.graph-row').length;
    for (let i = 1; i < n; i++) {
      const t = performance.now();
      document.dispatchEvent(new KeyboardEvent('keydown', { key: 'j', bubbles: true }));
      await new Promise((r) => requestAnimationFrame(() => r(null)));
      times.push(performance.now() - t);
    }
    return times;
  });
  // Scroll the longest turn from top to bottom, 120 px per frame.
  const longest = await page.evaluate(() => {
    const rows = Array.from(document.querySelectorAll<HTMLElement>('.graph-row'));
    let best = rows[0]!;
    let max = -1;
    for (const r of rows) {
      const m = /(\d+) prompt \+ (\d+) sampled/.exec(r.title);
      const n = m ? Number(m[1]) + Number(m[2]) : 0;
      if (n > max) {
        max = n;
        best = r;
      }
    }
    best.click();
    return max;
  });
  const frames = await page.evaluate(async () => {
    const strip = document.querySelector<HTMLElement>('.strip')!;
    strip.scrollTop = 0;
    await new Promise((r) => requestAnimationFrame(() => r(null)));
    const times: number[] = [];
    let maxSpans = 0;
    let last = performance.now();
    while (strip.scrollTop + strip.clientHeight < strip.scrollHeight - 1 && times.length < 2000) {
      strip.scrollTop += 120;
      await new Promise((r) => requestAnimationFrame(() => r(null)));
      const now = performance.now();
      times.push(now - last);
      last = now;
      maxSpans = Math.max(maxSpans, strip.querySelectorAll('.t').length);
    }
    return { times, maxSpans };
  });
  // Collect garbage first: detached rows count as DOM nodes until then.
  await cdps.get(page)!.send('HeapProfiler.collectGarbage');
  const afterScroll = await metrics(page);
  const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
  const st = sorted(steps);
  const ft = sorted(frames.times);
  void longest;
  return {
    firstPaintMs: painted - t0,
    firstPaintBusyMs: busy,
    stepP50: percentile(st, 0.5),
    stepP95: percentile(st, 0.95),
    frameP50: percentile(ft, 0.5),
    frameP95: percentile(ft, 0.95),
    frameMax: ft[ft.length - 1] ?? 0,
    longFrames: ft.filter((x) => x > 50).length,
    domNodesAfterLoad: afterLoad.nodes,
    domNodesAfterScroll: afterScroll.nodes,
    maxSpans: frames.maxSpans,
    heapMiB: afterScroll.heap / 2 ** 20,
  };
}

async function main(): Promise<number> {
  const t = performance.now();
  const { opts, positions } = calibrate();
  const g = generateRollout(opts);
  const doc = buildRollout(g.session, g.records, {
    budgetStopCount: 0,
    captureLevel: 'tokens',
    includeDiscarded: true,
    includeTraces: false,
  });
  const data: ViewerData = viewerDataFromRollout(doc, { key: 'bench', title: 'Benchmark rollout', tokenTexts: g.vocab });
  const longestTurn = Math.max(...data.turns.map((x) => x.prompt_ids.length + x.sampled_ids.length));
  const dir = mkdtempSync(join(tmpdir(), 'hl-bench-viewer-'));
  const report = join(dir, 'report.html');
  writeFileSync(report, buildReportHtml(data, loadViewerAssets()));
  const page0 = join(dir, 'webview.html');
  const dist = join(__dirname, '..', 'dist', 'webview');
  writeFileSync(
    page0,
    `<!doctype html><html><head><meta charset="utf-8"><link rel="stylesheet" href="${join(dist, 'viewer.css')}"><script>window.acquireVsCodeApi=()=>({postMessage(m){if(m.type==='details')setTimeout(()=>window.postMessage({type:'details/completion',seq:m.seq,node_id:m.node_id,res:window.__details[m.node_id]},'*'),0)},getState(){},setState(){}});</script></head><body class="vscode-dark"><div id="app"></div><script src="${join(dist, 'viewer.js')}"></script></body></html>`,
  );
  process.stdout.write(
    `viewer bench: ${data.turns.length} calls, ${positions.toLocaleString('en')} token positions (longest turn ${longestTurn.toLocaleString('en')}), report ${(statSync(report).size / 2 ** 20).toFixed(1)} MiB, generated in ${(performance.now() - t).toFixed(0)} ms\n`,
  );

  const browser = await pw.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  const results: Record<string, Sample> = {};
  let group: GroupSample | null = null;
  try {
    for (const mode of ['report', 'webview'] as const) {
      const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
      await page.addInitScript(PAINT_PROBE);
      results[mode] = await measure(
        page,
        async () => {
          if (mode === 'report') {
            await page.goto(`file://${report}`, { waitUntil: 'commit' });
            return; // performance.now() counts from navigation start
          }
          await page.goto(`file://${page0}`);
          await page.waitForSelector('#app');
          // Put the wire form into the page first, then time the load message alone, as the host posts it.
          const { wire, details } = toWire(data);
          await page.evaluate(([w, d]) => Object.assign(window, { __w: w, __details: d }), [wire, details] as const);
          // Posted a moment later, so that the busy-time counter is read before it.
          await page.evaluate(() => {
            setTimeout(() => {
              (window as unknown as { __t0: number }).__t0 = performance.now();
              window.postMessage({ type: 'load', wire: (window as unknown as { __w: unknown }).__w }, '*');
            }, 300);
          });
        },
        mode === 'report',
      );
      await page.close();
    }
    // The group view: 8 rollouts of CALLS calls side by side.
    group = await benchGroupView(browser, dir, { members: 8, calls: CALLS, webviewPage: page0 });
  } finally {
    await browser.close();
  }
  const rows = Object.entries(results).map(([mode, r]) => ({
    mode,
    'first paint ms (busy)': `${r.firstPaintMs.toFixed(0)} (${r.firstPaintBusyMs.toFixed(0)})`,
    'step p50/p95 ms': `${r.stepP50.toFixed(1)}/${r.stepP95.toFixed(1)}`,
    'scroll frame p50/p95/max ms': `${r.frameP50.toFixed(1)}/${r.frameP95.toFixed(1)}/${r.frameMax.toFixed(0)}`,
    'frames >50ms': r.longFrames,
    'DOM nodes load/scroll': `${r.domNodesAfterLoad}/${r.domNodesAfterScroll}`,
    'max token spans': r.maxSpans,
    'JS heap MiB': r.heapMiB.toFixed(0),
  }));
  console.table(rows);
  if (group) {
    process.stdout.write(
      `group view: ${group.members} rollouts x ${group.calls_per_member} calls, data built in ${group.build_ms.toFixed(0)} ms, report ${group.report_mib.toFixed(1)} MiB\n`,
    );
    console.table(
      (['report', 'webview'] as const).map((mode) => ({
        mode,
        'first paint ms': group!.firstPaintMs[mode].toFixed(0),
        'DOM nodes': group!.domNodes[mode],
        'JS heap MiB': group!.heapMiB[mode].toFixed(1),
      })),
    );
  }
  const failures: string[] = [];
  for (const [mode, r] of Object.entries(results)) {
    if (r.firstPaintMs >= 1000) failures.push(`${mode}: first paint ${r.firstPaintMs.toFixed(0)} ms >= 1000 ms`);
    if (r.frameP95 >= 50) failures.push(`${mode}: p95 scroll frame ${r.frameP95.toFixed(1)} ms >= 50 ms`);
    if (r.maxSpans > 5000) failures.push(`${mode}: ${r.maxSpans} token spans in the DOM (not virtualised)`);
  }
  if (group)
    for (const mode of ['report', 'webview'] as const)
      if (group.firstPaintMs[mode] >= 1000)
        failures.push(`group view ${mode}: first paint ${group.firstPaintMs[mode].toFixed(0)} ms >= 1000 ms`);
  process.stdout.write(
    failures.length
      ? `TARGETS MISSED:\n  ${failures.join('\n  ')}\n`
      : 'targets met: first paint < 1 s, p95 scroll frame < 50 ms, token spans bounded\n',
  );
  process.stdout.write(
    `${JSON.stringify({ bench: 'viewer', calls: data.turns.length, token_positions: positions, longest_turn: longestTurn, results, group })}\n`,
  );
  return failures.length ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`viewer bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(2);
  },
);
