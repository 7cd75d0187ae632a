// Environment that points every supported harness at one capture session. Variable names follow
// what each harness actually reads (docs/harnesses.md):
//   OpenAI SDKs, Qwen Code, pi:  OPENAI_BASE_URL (+/v1), OPENAI_API_KEY, OPENAI_MODEL
//   Claude Code / Anthropic SDK: ANTHROPIC_BASE_URL (no /v1), ANTHROPIC_API_KEY (sent as x-api-key)
//   Gemini CLI / Google GenAI:   GOOGLE_GEMINI_BASE_URL (no path), GEMINI_API_KEY
//   Codex:                       ignores OPENAI_BASE_URL; reads a provider from $CODEX_HOME/config.toml
//                                whose env_key names the variable holding the key.
//   Copilot CLI:                 COPILOT_PROVIDER_BASE_URL (+/v1), COPILOT_PROVIDER_API_KEY, COPILOT_OFFLINE
//   Kilo Code:                   KILO_CONFIG_CONTENT (a JSON config with the provider)
//   OpenClaw:                    OPENCLAW_CONFIG_PATH -> a config file with the provider
//   Continue (cn):               CONTINUE_GLOBAL_DIR -> a folder whose config.yaml has the model
import { join } from 'node:path';
import type { DialectName } from '../capture/types.js';
import { continueConfig, opencodeConfig, openclawConfig } from '../harness/wiring.js';

export interface CaptureTarget {
  /** Proxy base URL without a trailing slash, e.g. http://127.0.0.1:41234 */
  proxyUrl: string;
  /** The key harnesses present as their API key (a minted key, or the session id for an unkeyed session). */
  sessionKey: string;
  /** The session's id, when it differs from its key: what the Sessions tree and exports name. */
  sessionId?: string;
  /** Model name to announce to harnesses that need one (the proxy maps it to the engine's). */
  model?: string;
  /** A CODEX_HOME prepared with `codexConfigToml` for this session, if any. */
  codexHome?: string;
  /** A folder holding `harnessConfigFiles(target)` for this session (OpenClaw's and Continue's configs), if any. */
  configDir?: string;
}

/** Provider id the terminal's harness configs use (never `openai`: some harnesses route that specially). */
const TERMINAL_PROVIDER = 'harnesslab';

/** `provider/model` names are split on the first slash by these harnesses: hand them the leaf (the proxy serves its own model anyway). */
export function modelLeaf(model: string | undefined): string {
  return model?.split('/').pop() || 'harness-lab';
}

/** Config files (relative to `configDir`) for the harnesses that read the proxy only from a file. */
export function harnessConfigFiles(target: CaptureTarget): { path: string; content: string }[] {
  const t = { proxyUrl: base(target.proxyUrl), sessionKey: target.sessionKey, model: modelLeaf(target.model) };
  return [
    { path: 'openclaw/openclaw.json', content: `${JSON.stringify(openclawConfig(t), null, 2)}\n` },
    { path: 'continue/config.yaml', content: continueConfig(t) },
  ];
}

export const CODEX_KEY_VAR = 'HARNESS_LAB_API_KEY';

function base(url: string): string {
  const parsed = new URL(url);
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error(`proxy URL must be http(s): ${url}`);
  return url.replace(/\/+$/, '');
}

/** Hosts that must bypass any corporate HTTP proxy so harness traffic reaches the local capture proxy. */
export function withLoopbackNoProxy(current: string | undefined): string {
  const entries = (current ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const host of ['127.0.0.1', 'localhost', '::1']) if (!entries.includes(host)) entries.push(host);
  return entries.join(',');
}

/** Variables for an integrated terminal whose harnesses all talk to the capture session. */
export function capturedTerminalEnv(
  target: CaptureTarget,
  inherited: { NO_PROXY?: string; no_proxy?: string } = {},
): Record<string, string> {
  const url = base(target.proxyUrl);
  const key = target.sessionKey;
  const noProxy = withLoopbackNoProxy(inherited.NO_PROXY ?? inherited.no_proxy);
  const env: Record<string, string> = {
    HARNESS_LAB_PROXY_URL: url,
    HARNESS_LAB_SESSION: target.sessionId ?? key,
    HARNESS_LAB_SESSION_KEY: key,
    [CODEX_KEY_VAR]: key,
    OPENAI_BASE_URL: `${url}/v1`,
    OPENAI_API_BASE: `${url}/v1`,
    OPENAI_API_KEY: key,
    CODEX_API_KEY: key,
    ANTHROPIC_BASE_URL: url,
    ANTHROPIC_API_KEY: key,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    GOOGLE_GEMINI_BASE_URL: url,
    GEMINI_API_KEY: key,
    NO_PROXY: noProxy,
    no_proxy: noProxy,
  };
  if (target.model) {
    env.OPENAI_MODEL = target.model;
    // Claude Code picks other models for aliases and sub-agents; name the same one everywhere (as the
    // harness wiring table in src/harness/wiring.ts does).
    for (const name of [
      'ANTHROPIC_MODEL',
      'ANTHROPIC_DEFAULT_SONNET_MODEL',
      'ANTHROPIC_DEFAULT_OPUS_MODEL',
      'ANTHROPIC_DEFAULT_HAIKU_MODEL',
      'CLAUDE_CODE_SUBAGENT_MODEL',
    ])
      env[name] = target.model;
  }
  if (target.codexHome) env.CODEX_HOME = target.codexHome;
  // GitHub Copilot CLI in BYOK mode: no GitHub login, no network besides the provider.
  env.COPILOT_PROVIDER_BASE_URL = `${url}/v1`;
  env.COPILOT_PROVIDER_TYPE = 'openai';
  env.COPILOT_PROVIDER_API_KEY = key;
  env.COPILOT_OFFLINE = 'true';
  if (target.model) env.COPILOT_MODEL = target.model;
  // Kilo Code takes its whole config from the environment (`kilo run --model harnesslab/<model>`).
  env.KILO_CONFIG_CONTENT = JSON.stringify({
    ...opencodeConfig({ proxyUrl: url, sessionKey: key, model: modelLeaf(target.model) }),
    $schema: 'https://kilo.ai/config.json',
  });
  env.KILO_DISABLE_MODELS_FETCH = '1';
  env.KILO_TELEMETRY_LEVEL = 'off';
  if (target.configDir) {
    env.OPENCLAW_CONFIG_PATH = join(target.configDir, 'openclaw', 'openclaw.json');
    env.OPENCLAW_NO_AUTO_UPDATE = '1';
    env.CONTINUE_GLOBAL_DIR = join(target.configDir, 'continue');
    env.CONTINUE_CLI_ENABLE_TELEMETRY = '0';
  }
  return env;
}

/** $CODEX_HOME/config.toml routing Codex through the capture proxy (Responses wire API). */
export function codexConfigToml(target: CaptureTarget): string {
  const url = base(target.proxyUrl);
  const model = target.model ?? 'harness-lab';
  const q = (s: string) => JSON.stringify(s); // TOML basic strings share JSON's escapes
  return [
    '# Written by Harness Lab for one capture session; safe to delete.',
    `model = ${q(model)}`,
    'model_provider = "harness_lab"',
    'check_for_update_on_startup = false',
    '',
    '[model_providers.harness_lab]',
    'name = "Harness Lab capture proxy"',
    `base_url = ${q(`${url}/v1`)}`,
    `env_key = ${q(CODEX_KEY_VAR)}`,
    'wire_api = "responses"',
    '',
    '[analytics]',
    'enabled = false',
    '',
  ].join('\n');
}

export interface EnvSnippet {
  dialect: DialectName | 'codex';
  label: string;
  /** POSIX shell lines to paste into a terminal. */
  text: string;
}

/** One copy-paste snippet per dialect, for harnesses started outside VS Code. */
export function envSnippets(target: CaptureTarget): EnvSnippet[] {
  const env = capturedTerminalEnv(target);
  const exp = (names: string[]) =>
    names
      .filter((n) => env[n] !== undefined)
      .map((n) => `export ${n}=${shellQuote(env[n] as string)}`)
      .join('\n');
  const url = base(target.proxyUrl);
  return [
    {
      dialect: 'openai_chat',
      label: 'OpenAI Chat Completions (Qwen Code, opencode, OpenAI SDKs)',
      text: exp(['OPENAI_BASE_URL', 'OPENAI_API_KEY', 'OPENAI_MODEL']),
    },
    {
      dialect: 'openai_responses',
      label: 'OpenAI Responses (OpenAI SDKs, pi)',
      text: exp(['OPENAI_BASE_URL', 'OPENAI_API_KEY', 'OPENAI_MODEL']),
    },
    {
      dialect: 'anthropic_messages',
      label: 'Anthropic Messages (Claude Code)',
      text: exp(['ANTHROPIC_BASE_URL', 'ANTHROPIC_API_KEY', 'ANTHROPIC_MODEL', 'CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC']),
    },
    {
      dialect: 'google_gemini',
      label: 'Google Gemini (Gemini CLI; also set security.auth.selectedType="gemini-api-key")',
      text: exp(['GOOGLE_GEMINI_BASE_URL', 'GEMINI_API_KEY']),
    },
    {
      dialect: 'openai_chat',
      label: 'GitHub Copilot CLI (BYOK, offline)',
      text: exp(['COPILOT_PROVIDER_BASE_URL', 'COPILOT_PROVIDER_TYPE', 'COPILOT_PROVIDER_API_KEY', 'COPILOT_OFFLINE', 'COPILOT_MODEL']),
    },
    {
      dialect: 'openai_chat',
      label: `Kilo Code (then: kilo run --model ${TERMINAL_PROVIDER}/${modelLeaf(target.model)})`,
      text: exp(['KILO_CONFIG_CONTENT', 'KILO_DISABLE_MODELS_FETCH', 'KILO_TELEMETRY_LEVEL']),
    },
    {
      dialect: 'codex',
      label: 'Codex (custom provider; OPENAI_BASE_URL is ignored by Codex)',
      text:
        `${exp([CODEX_KEY_VAR])}\ncodex -c model_provider=harness_lab -c model_providers.harness_lab.name=harness_lab ` +
        `-c model_providers.harness_lab.base_url=${shellQuote(`${url}/v1`)} -c model_providers.harness_lab.env_key=${CODEX_KEY_VAR} ` +
        `-c model_providers.harness_lab.wire_api=responses`,
    },
  ];
}

export function shellQuote(value: string): string {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}
