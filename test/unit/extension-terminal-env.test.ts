import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import {
  CODEX_KEY_VAR,
  capturedTerminalEnv,
  codexConfigToml,
  envSnippets,
  harnessConfigFiles,
  shellQuote,
  withLoopbackNoProxy,
} from '../../src/extension/terminal-env.js';

const target = { proxyUrl: 'http://127.0.0.1:41234/', sessionKey: 'sabc123', model: 'Qwen/Qwen3-0.6B' };

test('captured terminal env points every harness family at the session', () => {
  const env = capturedTerminalEnv(target);
  // OpenAI-style clients append /chat/completions to a base that ends in /v1.
  assert.equal(env.OPENAI_BASE_URL, 'http://127.0.0.1:41234/v1');
  assert.equal(env.OPENAI_API_KEY, 'sabc123');
  assert.equal(env.OPENAI_MODEL, 'Qwen/Qwen3-0.6B');
  // Anthropic SDK and Gemini CLI add their own /v1 and /v1beta paths: no suffix here.
  assert.equal(env.ANTHROPIC_BASE_URL, 'http://127.0.0.1:41234');
  assert.equal(env.ANTHROPIC_API_KEY, 'sabc123');
  assert.equal(env.ANTHROPIC_AUTH_TOKEN, undefined, 'setting both Anthropic credentials makes Claude Code warn about an auth conflict');
  assert.equal(env.CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, '1');
  for (const alias of ['ANTHROPIC_MODEL', 'ANTHROPIC_DEFAULT_HAIKU_MODEL', 'CLAUDE_CODE_SUBAGENT_MODEL'])
    assert.equal(env[alias], 'Qwen/Qwen3-0.6B', alias);
  assert.equal(env.GOOGLE_GEMINI_BASE_URL, 'http://127.0.0.1:41234');
  assert.equal(env.GEMINI_API_KEY, 'sabc123');
  assert.equal(env.CODEX_API_KEY, 'sabc123');
  assert.equal(env[CODEX_KEY_VAR], 'sabc123');
  assert.equal(env.HARNESS_LAB_SESSION, 'sabc123');
  assert.equal(env.CODEX_HOME, undefined, 'no CODEX_HOME unless one was prepared');
  assert.equal(capturedTerminalEnv({ ...target, codexHome: '/d/codex' }).CODEX_HOME, '/d/codex');
  assert.equal(capturedTerminalEnv({ proxyUrl: 'http://127.0.0.1:1', sessionKey: 'k' }).OPENAI_MODEL, undefined);
});

test('loopback is added to NO_PROXY so a corporate proxy does not swallow harness traffic', () => {
  assert.equal(withLoopbackNoProxy(undefined), '127.0.0.1,localhost,::1');
  assert.equal(withLoopbackNoProxy('corp.example, localhost'), 'corp.example,localhost,127.0.0.1,::1');
  const env = capturedTerminalEnv(target, { no_proxy: '.internal' });
  assert.equal(env.NO_PROXY, '.internal,127.0.0.1,localhost,::1');
  assert.equal(env.no_proxy, env.NO_PROXY);
});

test('a non-http proxy URL is refused with the URL in the message', () => {
  assert.throws(() => capturedTerminalEnv({ proxyUrl: 'ftp://127.0.0.1:1', sessionKey: 'k' }), /ftp:\/\/127\.0\.0\.1:1/);
  assert.throws(() => capturedTerminalEnv({ proxyUrl: 'not a url', sessionKey: 'k' }));
});

test('codex config routes the Responses wire API through the proxy with the key from the env', () => {
  const toml = codexConfigToml(target);
  assert.match(toml, /^model_provider = "harness_lab"$/m);
  assert.match(toml, /^base_url = "http:\/\/127\.0\.0\.1:41234\/v1"$/m);
  assert.match(toml, new RegExp(`^env_key = "${CODEX_KEY_VAR}"$`, 'm'));
  assert.match(toml, /^wire_api = "responses"$/m);
  assert.match(toml, /^model = "Qwen\/Qwen3-0\.6B"$/m);
  const quoted = codexConfigToml({ ...target, model: 'a"b\\c' });
  assert.match(quoted, /^model = "a\\"b\\\\c"$/m);
});

test('env snippets are valid shell that exports the same values', () => {
  const snippets = envSnippets({ ...target, sessionKey: "it's" });
  assert.deepEqual(
    snippets.map((s) => s.dialect),
    ['openai_chat', 'openai_responses', 'anthropic_messages', 'google_gemini', 'openai_chat', 'openai_chat', 'codex'],
  );
  const env = capturedTerminalEnv({ ...target, sessionKey: "it's" });
  for (const s of snippets.filter((x) => x.dialect !== 'codex')) {
    const out = execFileSync('bash', ['-c', `${s.text}\nenv -0`], { encoding: 'utf8', env: { PATH: process.env.PATH } });
    const seen = Object.fromEntries(
      out
        .split('\0')
        .filter(Boolean)
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    const exported = [...s.text.matchAll(/^export (\w+)=/gm)].map((m) => m[1]!);
    assert.ok(exported.length > 0, s.label);
    for (const name of exported) assert.equal(seen[name], env[name], `${s.label}: ${name}`);
    assert.ok(
      exported.some((name) => seen[name]!.includes("it's")),
      `${s.label} carries the session key`,
    );
  }
  assert.match(snippets.find((s) => s.dialect === 'codex')!.text, /model_providers\.harness_lab\.base_url=http:\/\/127\.0\.0\.1:41234\/v1/);
});

test('shellQuote leaves plain words alone and quotes everything else', () => {
  assert.equal(shellQuote('http://127.0.0.1:1/v1'), 'http://127.0.0.1:1/v1');
  assert.equal(shellQuote('a b'), "'a b'");
  assert.equal(shellQuote("it's"), `'it'\\''s'`);
  assert.equal(shellQuote('$HOME'), "'$HOME'");
});

test('the newer harnesses: Copilot and Kilo from the env, OpenClaw and Continue from config files in configDir', () => {
  const env = capturedTerminalEnv({ ...target, configDir: '/d/cfg' });
  assert.equal(env.COPILOT_PROVIDER_BASE_URL, 'http://127.0.0.1:41234/v1');
  assert.equal(env.COPILOT_PROVIDER_API_KEY, 'sabc123');
  assert.equal(env.COPILOT_OFFLINE, 'true');
  assert.equal(env.COPILOT_MODEL, 'Qwen/Qwen3-0.6B');
  const kilo = JSON.parse(env.KILO_CONFIG_CONTENT!) as {
    provider: Record<string, { options: { baseURL: string; apiKey: string }; models: Record<string, unknown> }>;
  };
  assert.deepEqual(kilo.provider.harnesslab!.options, { baseURL: 'http://127.0.0.1:41234/v1', apiKey: 'sabc123' });
  assert.deepEqual(
    Object.keys(kilo.provider.harnesslab!.models),
    ['Qwen3-0.6B'],
    'the leaf: `harnesslab/Qwen/Qwen3-0.6B` would split wrongly',
  );
  assert.equal(env.OPENCLAW_CONFIG_PATH, '/d/cfg/openclaw/openclaw.json');
  assert.equal(env.CONTINUE_GLOBAL_DIR, '/d/cfg/continue');
  assert.equal(capturedTerminalEnv(target).OPENCLAW_CONFIG_PATH, undefined, 'no config path unless the files were written');
  const files = Object.fromEntries(harnessConfigFiles(target).map((f) => [f.path, f.content]));
  const openclaw = JSON.parse(files['openclaw/openclaw.json']!) as {
    models: { providers: Record<string, { baseUrl: string; apiKey: string }> };
    agents: { defaults: { model: { primary: string } } };
  };
  assert.equal(openclaw.models.providers.harnesslab!.baseUrl, 'http://127.0.0.1:41234/v1');
  assert.equal(openclaw.models.providers.harnesslab!.apiKey, 'sabc123');
  assert.equal(openclaw.agents.defaults.model.primary, 'harnesslab/Qwen3-0.6B');
  const cont = JSON.parse(files['continue/config.yaml']!) as { models: { apiBase: string; apiKey: string }[] };
  assert.deepEqual([cont.models[0]!.apiBase, cont.models[0]!.apiKey], ['http://127.0.0.1:41234/v1', 'sabc123']);
});
