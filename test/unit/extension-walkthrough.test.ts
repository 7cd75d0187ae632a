// The Get Started walkthrough and the view layout (#28): six steps (engine, proxy, captured terminal,
// a run, a batch, a group view), each with a link to a real command and a shipped page; the five views
// of the container get initial sizes so none is squeezed at 900 px, Training Runs folded.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

const root = join(__dirname, '..', '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const contributes = pkg.contributes;
const commands = new Set<string>(contributes.commands.map((c: { command: string }) => c.command));
const viewIds = new Set<string>(contributes.views.harnessLab.map((v: { id: string }) => v.id));

interface Step {
  id: string;
  title: string;
  description: string;
  media: { markdown?: string };
  completionEvents?: string[];
}

test('Get Started: engine, proxy, captured terminal, a run, a batch, a group view; each step links a real command and a shipped page', () => {
  const [walkthrough] = contributes.walkthroughs as { id: string; title: string; steps: Step[] }[];
  assert.ok(walkthrough, 'a walkthrough is contributed');
  assert.equal(walkthrough.title, 'Get Started with Harness Lab');
  assert.deepEqual(
    walkthrough.steps.map((s) => s.id),
    ['engine', 'proxy', 'terminal', 'run', 'batch', 'group'],
  );
  const vscodeignore = readFileSync(join(root, '.vscodeignore'), 'utf8');
  assert.match(vscodeignore, /^!media\/\*\*$/m, 'media/ is packaged');
  for (const step of walkthrough.steps) {
    const links = [...step.description.matchAll(/\(command:([\w.]+)\)/g)].map((m) => m[1]!);
    assert.ok(links.length > 0, `step ${step.id} has a command link`);
    // A view's focus command (`<view id>.focus`) is the workbench's own.
    for (const c of links) assert.ok(commands.has(c) || viewIds.has(c.replace(/\.focus$/, '')), `step ${step.id} links unknown ${c}`);
    assert.ok(step.media.markdown && existsSync(join(root, step.media.markdown)), `step ${step.id}'s page ${step.media.markdown} exists`);
    assert.match(step.media.markdown!, /^media\//, 'the page is under media/ (shipped)');
    for (const e of step.completionEvents ?? [])
      assert.ok(commands.has(e.replace(/^onCommand:/, '')), `step ${step.id} completes on unknown ${e}`);
  }
});

test('the Harness Lab views start at sizes that leave Batches room; Training Runs starts folded', () => {
  const views = contributes.views.harnessLab as { id: string; initialSize?: number; visibility?: string }[];
  for (const v of views) assert.ok(typeof v.initialSize === 'number' && v.initialSize > 0, `${v.id} has an initial size`);
  const size = (id: string) => views.find((v) => v.id === id)!.initialSize!;
  assert.ok(size('harnessLab.batches') >= 2 * size('harnessLab.engines'), 'Batches gets more room than the one-row Engines view');
  assert.equal(views.find((v) => v.id === 'harnessLab.trainingRuns')!.visibility, 'collapsed');
});

test('the lifecycle commands: Restart Proxy while it runs, Stop Embedded Engine while one runs', () => {
  const byId = new Map<string, { title: string; enablement?: string }>(
    contributes.commands.map((c: { command: string; title: string; enablement?: string }) => [c.command, c]),
  );
  assert.equal(byId.get('harnessLab.restartProxy')?.title, 'Restart Proxy');
  assert.equal(byId.get('harnessLab.restartProxy')?.enablement, 'harnessLab.proxyRunning');
  assert.equal(byId.get('harnessLab.stopEmbeddedEngine')?.title, 'Stop Embedded Engine');
  assert.equal(byId.get('harnessLab.stopEmbeddedEngine')?.enablement, 'harnessLab.embeddedEngineRunning');
  const extension = readFileSync(join(root, 'src', 'extension', 'extension.ts'), 'utf8');
  assert.match(extension, /'setContext', 'harnessLab\.embeddedEngineRunning'/, 'the context key the enablement reads is set');
});
