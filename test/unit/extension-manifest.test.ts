// package.json contributions agree with the code: every command is registered and contributed,
// every menu/welcome link points at a real command, settings match the zod schema.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { SETTING_KEYS, SettingsSchema, readSettings } from '../../src/extension/settings.js';

const root = join(__dirname, '..', '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const contributes = pkg.contributes;
/** The viewer's view type, read from its source (the module imports vscode, so it cannot load here). */
const ROLLOUT_VIEW_TYPE_NAME = /ROLLOUT_VIEW_TYPE = '([^']+)'/.exec(
  readFileSync(join(root, 'src', 'extension', 'rollout-viewer-panel.ts'), 'utf8'),
)![1];
const GROUP_VIEW_TYPE_NAME = /GROUP_VIEW_TYPE = '([^']+)'/.exec(
  readFileSync(join(root, 'src', 'extension', 'group-view-panel.ts'), 'utf8'),
)![1];
const contributed = new Set<string>(contributes.commands.map((c: { command: string }) => c.command));
const registered = new Set(
  [...readFileSync(join(root, 'src/extension/commands.ts'), 'utf8').matchAll(/^\s+'(harnessLab\.[A-Za-z]+)':/gm)].map((m) => m[1]!),
);

test('the issue\'s commands exist with category "Harness Lab"', () => {
  const titles = new Map<string, string>(contributes.commands.map((c: { command: string; title: string }) => [c.title, c.command]));
  for (const title of [
    'Start Proxy',
    'Stop Proxy',
    'New Capture Session',
    'Open Captured Terminal',
    'Set Engine URL',
    'Set Admin Key',
    'Probe Engine',
    'Delete Session',
    'Show Log',
  ]) {
    assert.ok(titles.has(title), `missing command "${title}"`);
  }
  assert.ok([...titles.keys()].some((t) => t.startsWith('Export Session')));
  for (const c of contributes.commands) assert.equal(c.category, 'Harness Lab', c.command);
});

test('every contributed command is registered in commands.ts and vice versa', () => {
  assert.deepEqual([...contributed].sort(), [...registered].sort());
});

test('commands.ts is the only file of the extension that registers commands', () => {
  const registering = readdirSync(join(root, 'src/extension')).filter((f) =>
    readFileSync(join(root, 'src/extension', f), 'utf8').includes('registerCommand('),
  );
  assert.deepEqual(registering, ['commands.ts']);
});

test('menus and welcome links only name real commands', () => {
  const builtins = new Set(['workbench.action.files.openFolder']);
  for (const [menu, items] of Object.entries(contributes.menus) as [string, { command: string }[]][]) {
    for (const item of items) assert.ok(contributed.has(item.command), `${menu} names unknown ${item.command}`);
  }
  for (const w of contributes.viewsWelcome) {
    for (const m of (w.contents as string).matchAll(/\(command:([\w.]+)\)/g))
      assert.ok(contributed.has(m[1]!) || builtins.has(m[1]!), `welcome of ${w.view} links unknown ${m[1]}`);
  }
});

test('the Harness Lab container holds Sessions, Tasks, Engines, Batches and Training Runs, each with welcome content', () => {
  assert.deepEqual(
    contributes.viewsContainers.activitybar.map((c: { id: string }) => c.id),
    ['harnessLab'],
  );
  const views = contributes.views.harnessLab.map((v: { id: string; name: string }) => `${v.id}:${v.name}`);
  assert.deepEqual(views, [
    'harnessLab.sessions:Sessions',
    'harnessLab.tasks:Tasks',
    'harnessLab.engines:Engines',
    'harnessLab.batches:Batches',
    'harnessLab.trainingRuns:Training Runs',
  ]);
  for (const v of contributes.views.harnessLab)
    assert.ok(
      contributes.viewsWelcome.some((w: { view: string }) => w.view === v.id),
      `no welcome for ${v.id}`,
    );
});

test('settings in package.json match the schema, including defaults', () => {
  const all = contributes.configuration.properties as Record<
    string,
    { default: unknown; markdownDeprecationMessage?: string; scope?: string; markdownDescription?: string }
  >;
  // Deprecated keys are older names still read (settings.ts SETTING_KEYS); the rest map one to one.
  const props = Object.fromEntries(Object.entries(all).filter(([, v]) => !v.markdownDeprecationMessage));
  const schemaKey = (k: string) => Object.entries(SETTING_KEYS).find(([, keys]) => keys[0] === k)?.[0] ?? k;
  assert.deepEqual(
    Object.keys(props)
      .map((k) => schemaKey(k.replace(/^harnessLab\./, '')))
      .sort(),
    Object.keys(SettingsSchema.shape).sort(),
  );
  const defaults = readSettings(() => undefined) as Record<string, unknown>;
  for (const [key, spec] of Object.entries(props))
    assert.deepEqual(spec.default, defaults[schemaKey(key.replace(/^harnessLab\./, ''))], key);
  // On the User tab in remote workbenches (code-server): no machine scopes; "Engine URL" as the title.
  for (const [key, spec] of Object.entries(all)) assert.ok(!spec.scope?.startsWith('machine'), `${key} is machine-scoped`);
  assert.ok(all['harnessLab.engineURL'], 'harnessLab.engineURL (titled "Engine URL")');
  assert.match(all['harnessLab.proxyHost']?.markdownDescription ?? '', /\(command:harnessLab\.setAdminKey\)/);
  assert.equal(props['harnessLab.proxyHost']!.default, '127.0.0.1');
  assert.ok(!Object.keys(props).some((k) => /key|token|secret/i.test(k)), 'no credentials in settings (SecretStorage only)');
});

test('activation: after startup (status bar item, opt-in auto-start), for restored viewers, commands and views implicit', () => {
  // Activation itself does no network or Docker work, so activating after startup costs little and
  // makes the status bar item visible and harnessLab.autoStart effective. A rollout viewer or group view
  // restored at window reload needs its serializer before startup has finished.
  assert.deepEqual(pkg.activationEvents, [
    'onStartupFinished',
    `onWebviewPanel:${ROLLOUT_VIEW_TYPE_NAME}`,
    `onWebviewPanel:${GROUP_VIEW_TYPE_NAME}`,
  ]);
  assert.equal(pkg.main, './dist/extension.js');
  assert.equal(pkg.engines.vscode, '^1.100.0');
  assert.match(pkg.scripts.package, /scripts\/package-vsix\.mjs --target linux-x64/);
});

test('the .vsix allow-list ships only bundles (with the tokenizer thread), the CLI and reference harness, examples, media, docs, README, LICENSE and package.json', () => {
  const vsce = join(root, 'node_modules', '.bin', 'vsce');
  const files = execFileSync(vsce, ['ls', '--no-dependencies'], { cwd: root, encoding: 'utf8' }).trim().split('\n').filter(Boolean);
  const allowed = [
    /^package\.json$/,
    /^README\.md$/,
    /^LICENSE$/,
    /^dist\/(extension|cli|react-harness|tokenizer-worker)\.js$/,
    /^examples\/[^/]+(\/[^/]+)*$/,
    /^dist\/webview\/[^/]+(\/[^/]+)*$/,
    /^media\/[^/]+(\/[^/]+)*$/,
    /^docs\/[^/]+\.md$/,
  ];
  for (const f of files)
    assert.ok(
      allowed.some((re) => re.test(f)),
      `${f} would be packaged`,
    );
  for (const f of [
    'package.json',
    'README.md',
    'LICENSE',
    'media/harness-lab.svg',
    'docs/exports.md',
    'docs/training-runs.md',
    'docs/behaviour-metrics.md',
  ])
    assert.ok(files.includes(f), `${f} missing from the package (messages and menus name it)`);
  assert.ok(existsSync(join(root, 'dist', 'extension.js')), 'dist/extension.js is missing: run `npm run build`');
  for (const f of ['dist/extension.js', 'dist/cli.js', 'dist/react-harness.js', 'examples/tasks/hello-file/task.toml'])
    assert.ok(files.includes(f), `${f} is not packaged (the commands load it; Submit Rollout Batch runs dist/cli.js)`);
  assert.ok(!files.some((f) => f.endsWith('.map')), 'no source maps in the package');
});
