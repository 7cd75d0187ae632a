// The group view's part of the viewer bench: a batch of one group of 8 generated rollouts of N calls
// each (capture files as the store writes them), built into the group view's data the way
// `harness-lab report --batch DIR --group G` does, then opened in chromium as a report file and in
// the webview. Measures data build time, first paint, DOM nodes and JS heap.
import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { batchPaths, trainingSampling, writeJsonAtomic, writeRolloutState, type BatchManifest } from '../src/batch/state.js';
import { buildGroupReportHtml } from '../src/report/group-html.js';
import { buildGroupView } from '../src/report/group-view.js';
import { loadViewerAssets } from '../src/report/report-html.js';
import { generateRollout } from './rollout-generator.js';

export interface GroupSample {
  members: number;
  calls_per_member: number;
  build_ms: number;
  report_mib: number;
  firstPaintMs: Record<'report' | 'webview', number>;
  domNodes: Record<'report' | 'webview', number>;
  heapMiB: Record<'report' | 'webview', number>;
}

function writeGroupBatch(dir: string, members: number, calls: number): void {
  mkdirSync(join(batchPaths(dir).capture, 'sessions'), { recursive: true });
  mkdirSync(batchPaths(dir).rollouts, { recursive: true });
  const at = new Date().toISOString();
  const ids: string[] = [];
  for (let m = 0; m < members; m++) {
    // Seeds 11 and 12 share nothing; a shared seed for the first half would be identical rollouts.
    const g = generateRollout({ seed: 11 + m, calls, firstPrompt: 1000, sampled: 30, glue: 40, retry: true, subagent: true, title: true });
    const sessionId = `bench${String(m).padStart(4, '0')}`;
    const lines = [
      JSON.stringify({ type: 'session', ...g.session, session_id: sessionId }),
      ...g.records.map((r) => JSON.stringify({ type: 'call', ...r, session_id: sessionId })),
    ];
    writeFileSync(join(batchPaths(dir).capture, 'sessions', `${sessionId}.jsonl`), `${lines.join('\n')}\n`);
    const id = `r${m}`;
    ids.push(id);
    const reward = m % 3 === 0 ? 1 : 0;
    writeRolloutState(dir, {
      rollout_id: id,
      group_id: 'g0',
      member: m,
      task: 'bench',
      harness: 'react',
      state: 'done',
      class: reward ? 'completed' : 'policy_failure',
      reward,
      rewards: { reward },
      trainable: true,
      session_id: sessionId,
      attempts: [
        {
          attempt: 0,
          session_id: sessionId,
          started_at: at,
          ended_at: at,
          out_dir: `attempts/${id}/0`,
          outcome: 'finished',
          trainable: true,
        },
      ],
      policy_version: null,
      queued_at: at,
      started_at: at,
      ended_at: at,
      duration_ms: 1,
      error: null,
      backend_ref: null,
      n_calls: g.records.length,
    });
  }
  const manifest: BatchManifest = {
    schema_version: 1,
    batch_id: 'bench-group',
    created_at: at,
    backend: 'docker',
    harnesses: ['react'],
    group_size: members,
    tasks: [{ name: 'bench', dir: 'tasks/bench' }],
    groups: [{ group_id: 'g0', task: 'bench', harness: 'react', rollout_ids: ids }],
    sampling: trainingSampling(1),
    policy_version: null,
    timeout_sec: 600,
    on_timeout: 'discard',
    parallel: 1,
    engine_url: null,
    model: null,
    k8s: null,
  };
  writeJsonAtomic(batchPaths(dir).manifest, manifest);
}

const GROUP_PAINT_PROBE = `
  window.__hlGroupPaint = new Promise((resolve) => {
    const check = () => {
      if (document.querySelector('[data-testid="group-view"]')) requestAnimationFrame(() => resolve(performance.now()));
      else requestAnimationFrame(check);
    };
    requestAnimationFrame(check);
  });`;

export async function benchGroupView(
  browser: Browser,
  dir: string,
  opts: { members: number; calls: number; webviewPage: string },
): Promise<GroupSample> {
  const batch = join(dir, 'group-batch');
  writeGroupBatch(batch, opts.members, opts.calls);
  const t = performance.now();
  const data = buildGroupView(batch, 'g0');
  const buildMs = performance.now() - t;
  const report = join(dir, 'group.html');
  writeFileSync(report, buildGroupReportHtml(data, loadViewerAssets()));
  const out: GroupSample = {
    members: opts.members,
    calls_per_member: opts.calls,
    build_ms: buildMs,
    report_mib: statSync(report).size / 2 ** 20,
    firstPaintMs: { report: 0, webview: 0 },
    domNodes: { report: 0, webview: 0 },
    heapMiB: { report: 0, webview: 0 },
  };
  for (const mode of ['report', 'webview'] as const) {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    await page.addInitScript(GROUP_PAINT_PROBE);
    let t0 = 0;
    if (mode === 'report') await page.goto(`file://${report}`, { waitUntil: 'commit' });
    else {
      await page.goto(`file://${opts.webviewPage}`);
      await page.waitForSelector('#app');
      await page.evaluate((g) => Object.assign(window, { __g: g }), data);
      t0 = await page.evaluate(() => {
        const now = performance.now();
        window.postMessage({ type: 'loadGroup', group: (window as unknown as { __g: unknown }).__g }, '*');
        return now;
      });
    }
    const painted = await page.evaluate(() => (window as unknown as { __hlGroupPaint: Promise<number> }).__hlGroupPaint);
    out.firstPaintMs[mode] = painted - t0;
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Performance.enable');
    await cdp.send('HeapProfiler.collectGarbage');
    const { metrics } = await cdp.send('Performance.getMetrics');
    out.domNodes[mode] = metrics.find((x) => x.name === 'Nodes')?.value ?? 0;
    out.heapMiB[mode] = (metrics.find((x) => x.name === 'JSHeapUsedSize')?.value ?? 0) / 2 ** 20;
    await page.close();
  }
  return out;
}
