// A training run's scalars per step, read from its log (or a metrics file): the lab's JSON lines
// (`{"step": 3, "reward_mean": 0.5, ...}`, docs/training-runs.md), the dicts Hugging Face's Trainer
// prints for TRL (`{'loss': 0.01, 'reward': 0.5, 'reward_std': 0.2, 'kl': 0.001, 'learning_rate': 1e-06,
// 'epoch': 0.1}`), and veRL's console logger (`step:3 - critic/score/mean:0.5 - actor/pg_loss:0.01`).
// Names are mapped onto five canonical series (reward_mean, reward_std, loss, kl, learning_rate);
// every other numeric key is kept under its own name. Lines that are none of these are skipped.

export const CANONICAL_METRICS = ['reward_mean', 'reward_std', 'loss', 'kl', 'learning_rate'] as const;
export type CanonicalMetric = (typeof CANONICAL_METRICS)[number];

/** Trainer names for each canonical series, first match wins (TRL, veRL and common spellings). */
const ALIASES: Record<CanonicalMetric, readonly string[]> = {
  reward_mean: ['reward_mean', 'reward', 'rewards/mean', 'train/reward', 'critic/score/mean', 'critic/rewards/mean'],
  reward_std: ['reward_std', 'rewards/std', 'train/reward_std', 'critic/score/std', 'critic/rewards/std'],
  loss: ['loss', 'train/loss', 'actor/pg_loss', 'actor/loss'],
  kl: ['kl', 'train/kl', 'actor/kl_loss', 'actor/ppo_kl', 'actor/kl'],
  learning_rate: ['learning_rate', 'lr', 'train/learning_rate', 'actor/lr'],
};

const STEP_KEYS = ['step', 'global_step', 'training/global_step', 'train/global_step'];

export interface MetricPoint {
  step: number;
  value: number;
}

export interface RunMetrics {
  /** Points per series, sorted by step; a step logged twice keeps its last value. */
  series: Record<string, MetricPoint[]>;
  /** Lines that carried metrics. */
  lines: number;
  /** Which formats were seen (json, hf-dict, verl). */
  formats: string[];
}

const NUMBER = /^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$/;

function toNumber(v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isFinite(v) ? v : undefined;
  if (typeof v === 'string' && NUMBER.test(v.trim())) return Number(v.trim());
  return undefined;
}

/** One log line's scalars and the format it was in; undefined for a line without metrics. */
export function parseMetricLine(line: string): { step: number | undefined; values: Record<string, number>; format: string } | undefined {
  const text = line.trim();
  const brace = text.indexOf('{');
  if (brace >= 0 && text.endsWith('}')) {
    const body = text.slice(brace);
    // The lab's JSON lines (or any JSON object of numbers).
    try {
      const obj = JSON.parse(body) as unknown;
      if (obj && typeof obj === 'object' && !Array.isArray(obj)) return fromRecord(obj as Record<string, unknown>, 'json');
    } catch {
      // not JSON: maybe a Python dict
    }
    // Hugging Face Trainer's printed dict: 'key': number (or a quoted number).
    const values: Record<string, unknown> = {};
    for (const m of body.matchAll(/'([^']+)':\s*('([^']*)'|[-+0-9.eE]+|nan|inf|-inf)/g)) values[m[1]!] = m[3] ?? m[2];
    if (Object.keys(values).length) return fromRecord(values, 'hf-dict');
    return undefined;
  }
  // veRL: "step:3 - key:value - key:value".
  const v = /(?:^|\s)step:(\d+)\s+-\s+(.*)$/.exec(text);
  if (v) {
    const values: Record<string, unknown> = { step: v[1] };
    for (const part of v[2]!.split(/\s+-\s+/)) {
      const i = part.lastIndexOf(':');
      if (i > 0) values[part.slice(0, i).trim()] = part.slice(i + 1).trim();
    }
    return fromRecord(values, 'verl');
  }
  return undefined;
}

function fromRecord(
  obj: Record<string, unknown>,
  format: string,
): { step: number | undefined; values: Record<string, number>; format: string } | undefined {
  const nums: Record<string, number> = {};
  for (const [k, v] of Object.entries(obj)) {
    const n = toNumber(v);
    if (n !== undefined) nums[k] = n;
  }
  const stepKey = STEP_KEYS.find((k) => nums[k] !== undefined);
  const step = stepKey ? nums[stepKey] : undefined;
  const values: Record<string, number> = {};
  const used = new Set<string>(STEP_KEYS);
  for (const metric of CANONICAL_METRICS) {
    const key = ALIASES[metric].find((k) => nums[k] !== undefined && !used.has(k));
    if (key) {
      values[metric] = nums[key]!;
      used.add(key);
    }
  }
  // A bare JSON object with no canonical series and no step is not a metrics line (e.g. a config dump).
  if (!Object.keys(values).length && step === undefined) return undefined;
  for (const [k, v] of Object.entries(nums)) if (!used.has(k) && !(k in values)) values[k] = v;
  return { step, values, format };
}

/**
 * Every metrics line of a log, in order. A line without a step (Hugging Face's dicts) takes the next
 * step after the last one seen, so a TRL log's points are numbered 1, 2, 3, ... per logging call.
 */
export function parseMetrics(text: string): RunMetrics {
  const series: Record<string, Map<number, number>> = {};
  const formats = new Set<string>();
  let lines = 0;
  let lastStep = 0;
  for (const line of text.split('\n')) {
    const parsed = parseMetricLine(line);
    if (!parsed) continue;
    lines++;
    formats.add(parsed.format);
    const step = parsed.step ?? lastStep + 1;
    lastStep = step;
    for (const [k, v] of Object.entries(parsed.values)) (series[k] ??= new Map()).set(step, v);
  }
  const out: Record<string, MetricPoint[]> = {};
  for (const [k, m] of Object.entries(series)) out[k] = [...m].map(([step, value]) => ({ step, value })).sort((a, b) => a.step - b.step);
  return { series: out, lines, formats: [...formats] };
}

/**
 * A metrics file a trainer writes, by its content: Hugging Face Trainer's `trainer_state.json` (TRL's
 * trainers save it in every checkpoint folder; its `log_history` holds one dict per logging step, with
 * `step`), or JSON lines, one object per step: the lab's metric lines, or `{"step": n, "data": {...}}`
 * (a logger that nests the scalars) flattened. Throws, naming the file, when it is neither.
 */
export function parseMetricsFile(text: string, file: string): RunMetrics {
  const trimmed = text.trim();
  if (trimmed.startsWith('{') && !trimmed.includes('\n{')) {
    let doc: unknown;
    try {
      doc = JSON.parse(trimmed);
    } catch {
      doc = undefined;
    }
    const history = (doc as { log_history?: unknown } | undefined)?.log_history;
    if (doc !== undefined && Array.isArray(history)) {
      const lines = history.filter((h): h is Record<string, unknown> => !!h && typeof h === 'object' && !Array.isArray(h));
      return parseMetrics(lines.map((h) => JSON.stringify(h)).join('\n'));
    }
  }
  const flattened = trimmed.split('\n').map((line) => {
    const t = line.trim();
    if (!t.startsWith('{')) return line;
    try {
      const obj = JSON.parse(t) as { step?: unknown; data?: unknown };
      if (obj && typeof obj === 'object' && obj.data && typeof obj.data === 'object' && !Array.isArray(obj.data))
        return JSON.stringify({ step: obj.step, ...(obj.data as Record<string, unknown>) });
    } catch {
      // not JSON: parseMetrics skips it
    }
    return line;
  });
  const metrics = parseMetrics(flattened.join('\n'));
  if (!metrics.lines)
    throw new Error(
      `${file} holds no metrics: expected JSON lines with a step and scalars, or a trainer_state.json with log_history (docs/training-runs.md)`,
    );
  return metrics;
}
