import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { CODEX_KEY_VAR, capturedTerminalEnv, codexConfigToml, envSnippets, shellQuote, withLoopbackNoProxy } from '../../src/extension/terminal-env.js';

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
  for (const alias of ['ANTHROPIC_MODEL', 'ANTHROPIC_DEFAULT_HAIKU_MODEL', 'CLAUDE_CODE_SUBAGENT_MODEL']) assert.equal(env[alias], 'Qwen/Qwen3-0.6B', alias);
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
  assert.deepEqual(snippets.map((s) => s.dialect), ['openai_chat', 'openai_responses', 'anthropic_messages', 'google_gemini', 'codex']);
  for (const s of snippets.filter((x) => x.dialect !== 'codex')) {
    const out = execFileSync('bash', ['-c', `${s.text}\nenv`], { encoding: 'utf8', env: { PATH: process.env.PATH } });
    const seen = Object.fromEntries(out.trim().split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
    const key = s.dialect === 'google_gemini' ? 'GEMINI_API_KEY' : s.dialect === 'anthropic_messages' ? 'ANTHROPIC_API_KEY' : 'OPENAI_API_KEY';
    assert.equal(seen[key], "it's", `${s.dialect}: ${s.text}`);
  }
  assert.match(snippets.find((s) => s.dialect === 'codex')!.text, /model_providers\.harness_lab\.base_url=http:\/\/127\.0\.0\.1:41234\/v1/);
});

test('shellQuote leaves plain words alone and quotes everything else', () => {
  assert.equal(shellQuote('http://127.0.0.1:1/v1'), 'http://127.0.0.1:1/v1');
  assert.equal(shellQuote('a b'), "'a b'");
  assert.equal(shellQuote("it's"), `'it'\\''s'`);
  assert.equal(shellQuote('$HOME'), "'$HOME'");
});
