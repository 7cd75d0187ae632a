// `harnessLab.*` settings, parsed with zod at the boundary so a bad value gets a clear message
// instead of a half-configured proxy. Keys mirror package.json contributes.configuration.
import { z } from 'zod';

export const SETTINGS_SECTION = 'harnessLab';

const httpUrl = z
  .string()
  .trim()
  .refine((v) => v === '' || /^https?:\/\/[^\s/]+/.test(v), { message: 'must be an http:// or https:// URL' });

export const SettingsSchema = z.object({
  engineUrl: httpUrl.default(''),
  model: z.string().trim().default(''),
  proxyHost: z.string().trim().min(1, 'must not be empty').default('127.0.0.1'),
  proxyPort: z.number().int().min(0).max(65535).default(0),
  dataDir: z.string().trim().default(''),
  /** Where Run with Harness and Validate write their rollouts; empty: `.harness-lab/rollouts` (task-rollout-model.ts). */
  rolloutsDir: z.string().trim().default(''),
  autoStart: z.boolean().default(false),
  maxModelCalls: z.number().int().min(0).default(0),
  /** Where the Batches view looks for batch directories (and Submit Rollout Batch writes them), relative to the workspace folder. */
  batchesFolder: z.string().trim().default('harness-lab-batches'),
  // Cluster batches (ux-cluster): the engine as the cluster reaches it, the registry images go to,
  // and whether a finished batch's cluster objects are kept.
  clusterEngineUrl: httpUrl.default(''),
  clusterRegistry: z.string().trim().default(''),
  keepClusterObjects: z.boolean().default(false),
});

export type HarnessLabSettings = z.infer<typeof SettingsSchema>;

export class SettingsError extends Error {}

/**
 * Settings whose contributed key differs from the schema's, or that have an older name: `harnessLab.engineURL`
 * (so the Settings editor titles it "Engine URL"), with the older `engineUrl` read when the new one is empty;
 * `rolloutsDir`, with the older `runsDir` ("run" means a training run) read when the new one is empty.
 */
export const SETTING_KEYS: Record<string, readonly string[]> = {
  engineUrl: ['engineURL', 'engineUrl'],
  rolloutsDir: ['rolloutsDir', 'runsDir'],
};

/** The contributed key a command writes for a schema key. */
export function settingKey(schemaKey: string): string {
  return SETTING_KEYS[schemaKey]?.[0] ?? schemaKey;
}

/** `get(key)` reads one setting (vscode's WorkspaceConfiguration.get has this shape). */
export function readSettings(get: (key: string) => unknown): HarnessLabSettings {
  const raw: Record<string, unknown> = {};
  for (const key of Object.keys(SettingsSchema.shape)) {
    const value =
      (SETTING_KEYS[key] ?? [key]).map((k) => get(k)).find((v) => v !== undefined && v !== null && v !== '') ?? get(settingKey(key));
    if (value !== undefined && value !== null) raw[key] = value;
  }
  const parsed = SettingsSchema.safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${SETTINGS_SECTION}.${i.path.join('.')}: ${i.message}`);
    throw new SettingsError(`Invalid Harness Lab settings: ${issues.join('; ')}`);
  }
  return parsed.data;
}
