// The group view of a real batch: `harness-lab batch submit` on Docker with the reference harness and
// codex (a real harness CLI) on two tasks (one the policy solves, one it answers wrongly), group size 2,
// answered by the embedded engine under the tasks' scripted policies. Then `harness-lab report --batch
// --group` opened in chromium: the batch histogram holds both rewards, codex's members diverge at a
// known call (its prompt carries per-run facts), and the no-contrast groups are flagged.
// Needs Docker with the base images, the codex CLI, `npm run build` and /usr/bin/chromium.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium as pw, type Browser, type Page } from 'playwright-core';
import { buildGroupView } from '../../src/report/group-view.js';
import { EXAMPLES, cli, dockerReady } from '../integration/sandbox-fixtures.js';
import { chromium, missingViewerPrerequisite } from './viewer-pages.js';

const SHELL = '^(bash|exec_command|run_shell_command|shell)$';

/** hello-file with another file and content, and a policy that writes the wrong content: reward 0. */
function wrongTask(root: string): string {
  const dir = join(root, 'wrong-answer');
  cpSync(join(EXAMPLES, 'hello-file'), dir, { recursive: true });
  writeFileSync(
    join(dir, 'instruction.md'),
    'Create a file named `answer.txt` in the current working directory whose content is exactly `42`.\n',
  );
  writeFileSync(
    join(dir, 'task.toml'),
    readFileSync(join(dir, 'task.toml'), 'utf8').replace('name = "harness-lab/hello-file"', 'name = "group-test/wrong-answer"'),
  );
  writeFileSync(
    join(dir, 'policy.json'),
    JSON.stringify({
      name: 'wrong',
      rules: [
        { when: { last_message: 'Create a file named `answer.txt`' }, then: { call: { tool: SHELL, input: "printf '41' > answer.txt" } } },
      ],
      fallback: { say: 'I wrote answer.txt.' },
    }),
  );
  writeFileSync(
    join(dir, 'tests', 'test.sh'),
    '#!/bin/bash\nmkdir -p /logs/verifier\nif [ "$(cat /app/answer.txt 2>/dev/null)" = "42" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n',
  );
  return dir;
}

describe('group view of a real Docker batch in chromium', () => {
  const root = mkdtempSync(join(tmpdir(), 'hl-group-docker-'));
  const batch = join(root, 'batch');
  let browser: Browser;
  let page: Page;
  const errors: string[] = [];

  before(async () => {
    const missing = missingViewerPrerequisite();
    if (missing) assert.fail(`the group view browser tests cannot run: ${missing}`);
    await dockerReady();
    const tasks = join(root, 'tasks');
    cpSync(join(EXAMPLES, 'fix-script'), join(tasks, 'fix-script'), { recursive: true });
    // Every fix-script member solves it (the histogram's counts): its scripted policy.json, not the sampling one.
    rmSync(join(tasks, 'fix-script', 'policy.sampling.json'));
    wrongTask(tasks);
    const r = await cli([
      'batch',
      'submit',
      '--tasks',
      join(tasks, '*'),
      '--harness',
      'react,codex',
      '--group-size',
      '2',
      '--parallel',
      '2',
      '--out',
      batch,
    ]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    browser = await pw.launch({ executablePath: chromium(), args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  });
  after(async () => {
    await browser?.close();
  });

  test('histogram of both rewards, the divergence point of codex members, no contrast flagged', async () => {
    const data = buildGroupView(batch, 'fix-script.codex');
    assert.deepEqual(
      data.members.map((m) => [m.class, m.reward]),
      [
        ['completed', 1],
        ['completed', 1],
      ],
    );
    const d = data.divergences[0]!;
    assert.ok(d.call !== null, 'codex members part somewhere (its prompts carry per-run facts)');
    const out = join(root, 'codex.html');
    const r = await cli(['report', '--batch', batch, '--group', 'fix-script.codex', '-o', out]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`fix-script\\.codex\\.0 and fix-script\\.codex\\.1 diverge at call ${d.call! + 1}`));
    await page.goto(`file://${out}`);
    await page.waitForSelector('[data-testid="group-view"]');
    assert.equal(await page.$$eval('[data-testid="member-card"]', (e) => e.length), 2);
    const counts = await page.$$eval('[data-testid="histogram-batch"] rect.hist-bar', (els) =>
      els.map((e) => Number(e.getAttribute('data-count'))),
    );
    assert.deepEqual([counts[0], counts[9]], [4, 4], 'wrong-answer x2 harnesses x2 at 0, fix-script at 1');
    const harness = await page.$$eval('[data-testid="histogram-harness-codex"] rect.hist-bar', (els) =>
      els.map((e) => Number(e.getAttribute('data-count'))),
    );
    assert.deepEqual([harness[0], harness[9]], [2, 2]);
    const text = (await page.textContent('[data-testid="divergence-text"]'))!;
    assert.match(text, new RegExp(`first diverge at call ${d.call! + 1}`));
    if (d.token_index !== null) assert.equal(await page.$$eval('.div-strip td.div', (e) => e.length), 2);
    assert.match((await page.textContent('[data-testid="teaches-nothing"]'))!, /every kept member has reward 1/);
    const behaviourRows = await page.$$eval('[data-testid="behaviour-table"] tbody tr', (e) => e.length);
    assert.equal(behaviourRows, 2 + 3, 'two members, then group, harness and batch');
    const react = buildGroupView(batch, 'wrong-answer.react');
    assert.deepEqual(
      react.members.map((m) => [m.class, m.reward]),
      [
        ['policy_failure', 0],
        ['policy_failure', 0],
      ],
    );
    assert.equal(react.behaviour.batch.rollouts, 8);
    assert.deepEqual(errors, []);
  });
});
