// The Batches view and Submit Rollout Batch in a real workbench: code-server 4.100.3 with the platform
// .vsix installed as a user installs it (#28) and a workspace holding one Harbor task (hello-file) and
// a broken batch directory. As a user would: the view shows the broken directory as an error item
// naming its file; "Harness Lab: Submit Rollout Batch..." from the palette, the quick picks (task,
// harness react, group size 2, backend docker), progress in a notification; the batch appears in the
// view, its two rollouts finish on real Docker with their class and reward, the group shows its mean,
// std and NO CONTRAST; a rollout opens in the rollout viewer from <batch>/capture. The scripted policy
// answers through the in-repo vLLM-shaped engine (HARNESS_LAB_POLICY_ENGINE=fake, in the extension
// host's environment, which the batch's lab inherits). Beside it, a batch submitted with the CLI
// (`dist/cli.js batch submit --out <workspace>/harness-lab-batches/from-cli`) appears and finishes
// in the same view. On the finished batch, as a user reviews it: Audit Batch from the batch row's
// context menu shows the audit (the group, its rollouts, NO CONTRAST, the contract) in a Markdown
// preview and raises the no-contrast group as a warning whose Show Audit brings it back; Audit Batch
// from the palette picks the CLI's batch; Open Group View from the group row shows both members with
// their rewards side by side, a member opens in the rollout viewer from there, and a window reload
// restores the group view. Last, a batch of a
// task that sleeps is cancelled from its notification: its sandboxes are removed and its rollouts
// queued again for `batch resume`.
// Screenshots: test-artifacts/e2e/batches-*.png.
import * as assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { Frame, Page } from 'playwright-core';
import { readManifest, readRolloutStates } from '../../src/batch/state.js';
import { LABEL, connectDocker } from '../../src/sandbox/docker-client.js';
import { missingPrerequisite, pickFromContextMenu, runCommand } from './code-server.js';
import {
  ARTIFACTS,
  ROOT,
  openRolloutRow,
  openWorkbench,
  pick,
  showBatchesView,
  submitBatch,
  viewerFrame,
  workbenchLogLines,
  type Workbench,
} from './workbench.js';

let workbench: Workbench | undefined;
let stateDir = '';
let cliChild: ChildProcess | undefined;

after(async () => {
  if (cliChild?.exitCode === null) cliChild.kill('SIGTERM');
  await workbench?.close();
  if (stateDir && !process.env.HL_E2E_KEEP) rmSync(stateDir, { recursive: true, force: true });
});

const shot = (page: Page, name: string) => page.screenshot({ path: join(ARTIFACTS, `batches-${name}.png`) });

/** The webview content frame (code-server nests it: iframe.webview > #active-frame) that shows `selector`. */
async function webviewFrame(page: Page, selector: string, timeout = 60_000): Promise<Frame> {
  const deadline = Date.now() + timeout;
  for (;;) {
    for (const f of page.frames()) {
      if (f.name() !== 'active-frame' && !f.url().includes('fake.html')) continue;
      if (
        await f
          .locator(selector)
          .count()
          .catch(() => 0)
      )
        return f;
    }
    if (Date.now() > deadline) throw new Error(`no webview shows ${selector}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Clicks a notification's button: on its toast while shown, else in the notification center (toasts hide after a while). */
async function clickNotificationButton(page: Page, text: string, button: string): Promise<void> {
  const toast = page.locator('.notification-toast', { hasText: text });
  if (await toast.isVisible()) {
    await toast.hover();
    if (
      await toast
        .locator('.monaco-button', { hasText: button })
        .click({ timeout: 5_000 })
        .then(
          () => true,
          () => false,
        )
    )
      return;
  }
  await runCommand(page, 'Notifications: Show Notifications');
  const item = page.locator('.notifications-center .notification-list-item', { hasText: text }).first();
  await item.waitFor({ timeout: 10_000 });
  await item.hover();
  await item.locator('.monaco-button', { hasText: button }).click({ timeout: 10_000 });
}

test(
  'Batches view and Submit Rollout Batch: a Docker batch of react x 1 task x 2 appears, finishes with classes and rewards, a rollout opens in the viewer; Audit Batch and Open Group View on it',
  { timeout: 780_000 },
  async () => {
    const missing = missingPrerequisite();
    if (missing) assert.fail(`real-workbench e2e cannot run: ${missing}`);
    const built = spawnSync(process.execPath, ['esbuild.mjs'], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(built.status, 0, built.stderr);
    mkdirSync(ARTIFACTS, { recursive: true });
    for (const f of readdirSync(ARTIFACTS)) if (f.startsWith('batches-')) rmSync(join(ARTIFACTS, f));

    stateDir = mkdtempSync(join(tmpdir(), 'hl-batches-e2e-'));
    const workspace = join(stateDir, 'workspace');
    const batches = join(workspace, 'harness-lab-batches');
    cpSync(join(ROOT, 'examples', 'tasks', 'hello-file'), join(workspace, 'tasks', 'hello-file'), { recursive: true });
    // The CLI's batch runs a copy under another name (its own group and rollout ids in the view).
    const cliTask = join(stateDir, 'cli-tasks', 'cli-hello');
    cpSync(join(ROOT, 'examples', 'tasks', 'hello-file'), cliTask, { recursive: true });
    writeFileSync(
      join(cliTask, 'task.toml'),
      readFileSync(join(cliTask, 'task.toml'), 'utf8').replace('name = "harness-lab/hello-file"', 'name = "e2e/cli-hello"'),
    );
    // A task whose policy sleeps in its tool: the batch to cancel.
    const sleepy = join(workspace, 'tasks', 'sleepy');
    cpSync(join(ROOT, 'examples', 'tasks', 'hello-file'), sleepy, { recursive: true });
    writeFileSync(
      join(sleepy, 'task.toml'),
      readFileSync(join(sleepy, 'task.toml'), 'utf8').replace('name = "harness-lab/hello-file"', 'name = "e2e/sleepy"'),
    );
    writeFileSync(join(sleepy, 'instruction.md'), 'Create a file named `sleepy.txt` after a long nap.\n');
    writeFileSync(
      join(sleepy, 'policy.json'),
      JSON.stringify({
        name: 'sleepy',
        rules: [{ when: { last_message: 'Create a file named `sleepy.txt`' }, then: { call: { tool: '^bash$', input: 'sleep 600' } } }],
        fallback: { say: 'Done.' },
      }),
    );
    // A batch directory a killed lab or a hand edit broke: the view names its file.
    mkdirSync(join(batches, 'broken'), { recursive: true });
    writeFileSync(join(batches, 'broken', 'batch.json'), '{"schema_version": 1, "batch_id": ');

    workbench = await openWorkbench({ stateDir, workspace, env: { HARNESS_LAB_POLICY_ENGINE: 'fake' }, vsix: true });
    const { page } = workbench;

    try {
      const view = await showBatchesView(page);
      const broken = view.locator('.monaco-list-row', { hasText: 'broken: cannot read batch.json' });
      await broken.waitFor({ timeout: 30_000 });
      assert.match(await broken.innerText(), /not JSON/);
      await shot(page, '01-view-broken-dir');

      // A batch from the CLI into the same folder, while the view is open.
      const fromCli = join(batches, 'from-cli');
      const cli = (cliChild = spawn(
        process.execPath,
        [join(ROOT, 'dist', 'cli.js'), 'batch', 'submit', '--tasks', cliTask, '--harness', 'react', '--group-size', '2', '--out', fromCli],
        { cwd: workspace, env: { ...process.env, HARNESS_LAB_POLICY_ENGINE: 'fake' }, stdio: ['ignore', 'pipe', 'pipe'] },
      ));
      let cliOut = '';
      cli.stdout.on('data', (b: Buffer) => (cliOut += b.toString()));
      cli.stderr.on('data', (b: Buffer) => (cliOut += b.toString()));
      const cliDone = new Promise<number | null>((res) => cli.on('close', res));

      await submitBatch(page, { task: 'tasks/hello-file', harness: 'react', groupSize: 2, backend: 'docker' });

      const toast = page.locator('.notification-toast', { hasText: /Harness Lab: batch b\d{8}-\d{6}-[0-9a-f]{4}/ });
      await toast.waitFor({ timeout: 60_000 });
      assert.ok(await toast.locator('.monaco-button, a', { hasText: 'Cancel' }).count(), 'the progress notification offers Cancel');
      const batchRow = view.locator('.monaco-list-row[aria-level="1"]', { hasText: /^\s*b\d{8}-\d{6}-[0-9a-f]{4}/ }).first();
      await batchRow.waitFor({ timeout: 30_000 });
      await shot(page, '02-submitted');

      // Both members finish on real Docker: class and reward on each rollout row, the group's statistics.
      const r0 = view.locator('.monaco-list-row', { hasText: '#0 hello-file.react.0' });
      const r1 = view.locator('.monaco-list-row', { hasText: '#1 hello-file.react.1' });
      await r0.filter({ hasText: 'completed · reward 1' }).waitFor({ timeout: 360_000 });
      await r1.filter({ hasText: 'completed · reward 1' }).waitFor({ timeout: 120_000 });
      const group = view.locator('.monaco-list-row', { hasText: 'hello-file.react' }).filter({ hasText: 'mean' }).first();
      await group.filter({ hasText: '2/2 · mean 1 · std 0 · NO CONTRAST' }).waitFor({ timeout: 30_000 });
      await batchRow.filter({ hasText: /finished · 2\/2 finished · docker/ }).waitFor({ timeout: 60_000 });
      assert.match(await r0.innerText(), /completed · reward 1 · [\d.]+ (m?s|m \d+ s)/, 'a rollout row shows its duration');
      await page.locator('.notification-toast', { hasText: /finished: 2 done, 0 discarded of 2/ }).waitFor({ timeout: 60_000 });
      // The CLI's batch, in the same view: written by another process, seen through the file watcher.
      assert.equal(await cliDone, 0, cliOut);
      const cliRow = view.locator('.monaco-list-row[aria-level="1"]', { hasText: /from-cli \(b\d{8}-\d{6}-[0-9a-f]{4}\)/ });
      // The CLI's lab ends after its rollouts: it closes its proxy and engine and tears the batch down.
      // (An attempt a loaded machine failed in the sandbox backend is retried; the row then also says its rate.)
      await cliRow
        .filter({ hasText: /finished · 2\/2 finished · (infra-failed \d+\/\d+ \(\d+%\) · )?docker/ })
        .waitFor({ timeout: 180_000 });
      await view
        .locator('.monaco-list-row', { hasText: '#1 cli-hello.react.1' })
        .filter({ hasText: 'completed · reward 1' })
        .waitFor({ timeout: 30_000 });
      await shot(page, '03-finished');

      // What the view showed is what the batch directory holds.
      const dirs = readdirSync(batches).filter((d) => d !== 'broken' && d !== 'from-cli');
      assert.equal(dirs.length, 1);
      const dir = join(batches, dirs[0]!);
      const m = readManifest(dir);
      assert.deepEqual([m.backend, m.harnesses, m.group_size, m.engine_url], ['docker', ['react'], 2, null]);
      const states = readRolloutStates(dir);
      assert.deepEqual(
        states.map((s) => [s.rollout_id, s.class, s.reward]),
        [
          ['hello-file.react.0', 'completed', 1],
          ['hello-file.react.1', 'completed', 1],
        ],
      );
      assert.ok(existsSync(join(dir, 'capture', 'sessions', `${states[0]!.session_id}.jsonl`)));

      // A rollout opens in the rollout viewer, from its captured session in <batch>/capture.
      await openRolloutRow(page, r0, states[0]!.session_id!);
      const frame = viewerFrame(page);
      await frame.locator('[data-testid="counts"]').waitFor({ timeout: 60_000 });
      assert.equal(await frame.locator('.graph-row').count(), states[0]!.n_calls, 'the viewer shows every call of the rollout');
      assert.ok(Number(await frame.locator('[data-testid="counts"]').getAttribute('data-sampled')) > 0, 'sampled tokens captured');
      await shot(page, '04-rollout-viewer');

      // Audit Batch from the batch row: the audit as a Markdown preview, the no-contrast group as a warning.
      await runCommand(page, 'View: Close All Editors');
      await pickFromContextMenu(page, batchRow, 'Audit Batch');
      const warning = page.locator('.notification-toast', { hasText: `Audit of batch ${m.batch_id}: groups without contrast` });
      await warning.waitFor({ timeout: 60_000 });
      assert.match(
        await warning.innerText(),
        /Group hello-file\.react has no contrast: every kept reward is 1, so all its advantages are 0 and it teaches nothing/,
      );
      const audit = await webviewFrame(page, `h1:has-text("Audit of batch ${m.batch_id}")`);
      const auditText = await audit.locator('body').innerText();
      for (const want of [
        'Problems',
        'hello-file.react — NO CONTRAST',
        'hello-file.react.0',
        'hello-file.react.1',
        states[0]!.session_id!,
        states[1]!.session_id!,
        'Policy versions and staleness',
        'Capture contract',
        'Every kept rollout (2) holds it',
        'Behaviour',
      ]) {
        assert.ok(auditText.includes(want), `the audit shows "${want}":\n${auditText}`);
      }
      assert.match(auditText, /hello-file\.react\s+hello-file\s+react\s+2\/2\s+\[1, 1\]\s+1\s+0\s+NO CONTRAST/, 'the groups table row');
      await warning.hover();
      await shot(page, '05-audit');
      // Closed, it comes back from the warning's Show Audit.
      await runCommand(page, 'View: Close All Editors');
      await page.locator('.tab', { hasText: /audit/i }).waitFor({ state: 'detached', timeout: 15_000 });
      await clickNotificationButton(page, `Audit of batch ${m.batch_id}`, 'Show Audit');
      await webviewFrame(page, `h1:has-text("Audit of batch ${m.batch_id}")`, 30_000);
      // From the palette: a quick pick of the view's batches (the broken directory is not offered).
      await runCommand(page, 'View: Close All Editors');
      await runCommand(page, 'Harness Lab: Audit Batch');
      const batchPick = page.locator('.quick-input-list .monaco-list-row');
      await batchPick.first().waitFor({ timeout: 15_000 });
      const offered = await batchPick.allInnerTexts();
      assert.ok(!offered.some((t) => t.includes('broken')), `the broken directory is not offered: ${offered.join(' | ')}`);
      await pick(page, 'from-cli');
      const cliAudit = await webviewFrame(page, 'h1:has-text("Audit of batch")');
      assert.match(await cliAudit.locator('body').innerText(), /cli-hello\.react\.0[\s\S]*cli-hello\.react\.1/);
      await shot(page, '06-audit-palette');

      // Open Group View from the group row: both members side by side with their rewards; one opens in the viewer.
      await runCommand(page, 'View: Close All Editors');
      await runCommand(page, 'Notifications: Clear All Notifications');
      await pickFromContextMenu(page, group, 'Open Group View');
      await page.locator('.tab', { hasText: 'Group hello-file.react' }).waitFor({ timeout: 30_000 });
      const groupView = await webviewFrame(page, '[data-testid="group-view"]');
      const cards = groupView.locator('[data-testid="member-card"]');
      assert.deepEqual(await cards.evaluateAll((els) => els.map((e) => e.getAttribute('data-rollout'))), [
        'hello-file.react.0',
        'hello-file.react.1',
      ]);
      assert.deepEqual(await groupView.locator('[data-testid="member-reward"]').allInnerTexts(), ['reward 1', 'reward 1']);
      assert.deepEqual(await groupView.locator('[data-testid="member-class"]').allInnerTexts(), ['completed', 'completed']);
      assert.match(await groupView.locator('[data-testid="group-stats"]').innerText(), /rewards \[1, 1\] mean 1\.000 std 0\.000/);
      assert.match(await groupView.locator('[data-testid="teaches-nothing"]').innerText(), /teaches nothing/);
      assert.equal(await groupView.locator('[data-testid="histogram-group"]').getAttribute('data-counts'), '0,0,0,0,0,0,0,0,0,2');
      await shot(page, '07-group-view');
      await cards.nth(1).locator('[data-testid="open-member"]').click();
      await page.locator('.tab', { hasText: `${states[1]!.session_id}.jsonl` }).waitFor({ timeout: 30_000 });
      const memberViewer = await webviewFrame(page, '[data-testid="counts"]');
      assert.equal(
        await memberViewer.locator('.graph-row').count(),
        states[1]!.n_calls,
        'the member opens in the rollout viewer with every call',
      );
      assert.ok(await page.locator('.tab', { hasText: 'Group hello-file.react' }).count(), 'the group view stays open beside it');
      await shot(page, '08-group-member-viewer');

      // A window reload brings the group view back (its webview kept the batch and group as its state).
      await runCommand(page, 'Developer: Reload Window');
      await page.locator('.monaco-workbench').waitFor({ timeout: 60_000 });
      const restoredTab = page.locator('.tab', { hasText: 'Group hello-file.react' });
      await restoredTab.waitFor({ timeout: 60_000 });
      await restoredTab.click();
      // A restore that shows nothing fails here (seen rarely in CI): the workbench as it was, for the next look.
      const restored = await webviewFrame(page, '[data-testid="group-view"] [data-testid="member-card"]').catch(async (err: unknown) => {
        await shot(page, '08b-group-view-not-restored').catch(() => undefined);
        // What each webview shows and what the workbench logged about webviews and the extension.
        const frames = await Promise.all(
          page.frames().map(
            async (f) =>
              `${f.name()} ${f.url().slice(0, 80)}: ${(
                await f
                  .locator('body')
                  .innerText({ timeout: 2_000 })
                  .catch(() => '?')
              ).slice(0, 200)}`,
          ),
        );
        throw new Error(
          `${(err as Error).message}\nframes:\n${frames.join('\n')}\nlogs:\n${workbenchLogLines(stateDir, /webview|serializ|group view|harness.?lab|activat|error/i)}`,
        );
      });
      assert.deepEqual(
        await restored.locator('[data-testid="member-reward"]').allInnerTexts(),
        ['reward 1', 'reward 1'],
        'the restored view shows the group, read again from the batch',
      );
      assert.match(await restored.locator('[data-testid="group-stats"]').innerText(), /rewards \[1, 1\] mean 1\.000 std 0\.000/);
      await shot(page, '08b-group-view-restored');
      // And the member's rollout file beside it (the custom editor reopens its file).
      await page.locator('.tab', { hasText: `${states[1]!.session_id}.jsonl` }).click();
      const restoredMember = await webviewFrame(page, '[data-testid="counts"]');
      assert.equal(await restoredMember.locator('.graph-row').count(), states[1]!.n_calls, 'the restored rollout viewer shows every call');

      // Cancel from the progress notification: the runner's cancel path (batch cancel) stops the lab.
      await runCommand(page, 'View: Close All Editors');
      await submitBatch(page, { task: 'tasks/sleepy', harness: 'react', groupSize: 2, backend: 'docker' });
      const s0 = view.locator('.monaco-list-row', { hasText: '#0 sleepy.react.0' });
      const s1 = view.locator('.monaco-list-row', { hasText: '#1 sleepy.react.1' });
      await s0.filter({ hasText: /running/ }).waitFor({ timeout: 120_000 });
      await s1.filter({ hasText: /running/ }).waitFor({ timeout: 120_000 });
      const sleepyDir = join(
        batches,
        readdirSync(batches).find((d) => !['broken', 'from-cli', dirs[0]].includes(d))!,
      );
      const sleepyId = readManifest(sleepyDir).batch_id;
      const docker = await connectDocker();
      const containers = () => docker.listContainers({ all: true, filters: JSON.stringify({ label: [`${LABEL.batch}=${sleepyId}`] }) });
      const deadline = Date.now() + 120_000;
      while ((await containers()).length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 500));
      assert.equal((await containers()).length, 2, 'both sleepy sandboxes run before the cancel');
      const progress = page.locator('.notification-toast', { hasText: `Harness Lab: batch ${sleepyId}` });
      await progress.hover();
      await shot(page, '09-running');
      await progress.locator('.monaco-button', { hasText: 'Cancel' }).click({ timeout: 15_000 });
      await page.locator('.notification-toast', { hasText: `batch ${sleepyId} cancelled` }).waitFor({ timeout: 120_000 });
      const sleepyRow = view.locator('.monaco-list-row[aria-level="1"]', { hasText: sleepyId });
      await sleepyRow.filter({ hasText: /cancelled · 0\/2 finished/ }).waitFor({ timeout: 30_000 });
      await s0.filter({ hasText: 'queued' }).waitFor({ timeout: 30_000 });
      await shot(page, '10-cancelled');
      assert.deepEqual(await containers(), [], 'cancel removed the batch sandboxes');
      assert.deepEqual(
        readRolloutStates(sleepyDir).map((x) => [x.state, x.attempts.map((a) => a.outcome)]),
        [
          ['queued', ['cancelled']],
          ['queued', ['cancelled']],
        ],
      );
    } catch (err) {
      await shot(page, '99-failure').catch(() => undefined);
      throw err;
    }
  },
);
