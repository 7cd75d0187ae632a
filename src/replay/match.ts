// The match ladder of a replay: how a call the harness makes now compares with the recorded one.
//   exact      the same engine request (messages, tools and every field the harness chose);
//   tolerated  differences the harness makes by itself from run to run (generated ids, timestamps,
//              dates, temp paths, the host's kernel release), listed field by field with the rule
//              that explained each; tool results that differ from the recorded ones are listed apart
//              (the task's environment answered differently, not the harness);
//   none       any other difference: the replay halts there, and the first differing field is shown.
// Fields the proxy itself sets (model, stream, sampling, token-capture flags) are not the harness's
// and are not compared.
import { PINNABLE_SAMPLING_KEYS, type ChatMessage, type ChatRequest } from '../capture/types.js';

export type MatchLevel = 'exact' | 'tolerated' | 'none';

export interface FieldDifference {
  /** Where, e.g. `messages[0].content` or `tools[3].function.description`. */
  path: string;
  recorded: unknown;
  replayed: unknown;
  /** For a tolerated difference: the rules that explain it (e.g. `uuid`, `date`). */
  rules?: string[];
}

export interface CallMatch {
  level: MatchLevel;
  tolerated: FieldDifference[];
  /** Differences inside tool results (role `tool` messages): reported, never a reason to halt. */
  toolOutputs: FieldDifference[];
  /** For `none`: the first difference no rule explains. */
  firstDifference: FieldDifference | null;
}

/** Set by the proxy (served model, capture level, pinned or neutral sampling), so not compared. */
const PROXY_FIELDS = new Set([
  'model',
  'stream',
  'stream_options',
  'logprobs',
  'top_logprobs',
  'return_token_ids',
  'return_tokens_as_token_ids',
  ...PINNABLE_SAMPLING_KEYS,
  'max_tokens',
]);

const MONTH = '(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*';
const DAY = '(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*';

/** The run-to-run noise a harness makes by itself, each with a name the report uses. Order matters. */
export const TOLERANCE_RULES: readonly { name: string; pattern: RegExp }[] = [
  { name: 'uuid', pattern: /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi },
  // A weekday before an ISO date goes with it ("[Wed 2026-12-02 15:52 UTC]", openclaw's prompt stamp).
  {
    name: 'timestamp',
    pattern: new RegExp(`(?:\\b${DAY},? )?\\d{4}-\\d{2}-\\d{2}[T ]\\d{2}:\\d{2}(?::\\d{2}(?:\\.\\d+)?)?(?:Z|[+-]\\d{2}:?\\d{2})?`, 'g'),
  },
  { name: 'date', pattern: new RegExp(`(?:${DAY},? )?(?:${MONTH} \\d{1,2},? \\d{4}|\\d{1,2} ${MONTH},? \\d{4})`, 'g') },
  { name: 'date', pattern: new RegExp(`(?:\\b${DAY},? )?(?:\\b\\d{4}[-/]\\d{1,2}[-/]\\d{1,2}\\b|\\b\\d{1,2}/\\d{1,2}/\\d{4}\\b)`, 'g') },
  { name: 'time', pattern: /\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AP]M)?(?:\s?(?:UTC|GMT|[A-Z]{3,4}))?\b/g },
  { name: 'temp path', pattern: /(?:\/tmp|\/var\/tmp|\/private\/var\/folders|\/var\/folders)(?:\/[\w.@+-]+)+/g },
  // The host's kernel release, which a sandbox shares and harnesses write into their prompts
  // (claude-code "OS Version: Linux 6.18.44-fc-v1045", openclaw "os=Linux 6.18.44-fc-v1045 (x64)"):
  // a fixture recorded on one host replays on another.
  { name: 'os version', pattern: /\b(?:Linux|Darwin|Windows_NT) \d+(?:\.\d+)+(?:[-+~][\w.+~-]*)?/g },
  { name: 'pid', pattern: /\b(?:PGID|PID|pid|process id)[:=]?\s*\d+/g },
  { name: 'epoch', pattern: /\b1[5-9]\d{8}(?:\d{3})?\b/g },
  { name: 'duration', pattern: /\b\d+(?:\.\d+)?\s?(?:ms|milliseconds?|s|secs?|seconds?)\b/g },
  // An id named as one ("Chunk ID: 904213", codex's exec output): random hex that may be all digits.
  { name: 'labelled id', pattern: /\b(?:chunk|session|request|call|trace) id:?\s*[0-9a-f]{4,}\b/gi },
  { name: 'hex id', pattern: /\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}\b/gi },
];

/** The string with each run-to-run noise replaced by its rule's name, and the rules that fired. */
function normalise(text: string): { text: string; rules: Set<string> } {
  const rules = new Set<string>();
  let out = text;
  for (const rule of TOLERANCE_RULES) {
    out = out.replace(rule.pattern, () => {
      rules.add(rule.name);
      return `<${rule.name}>`;
    });
  }
  return { text: out, rules };
}

function tolerates(recorded: unknown, replayed: unknown): string[] | null {
  if (typeof recorded === 'number' && typeof replayed === 'number') {
    const epoch = (n: number) => Number.isInteger(n) && n > 1.5e9 && n < 2e12;
    return epoch(recorded) && epoch(replayed) ? ['epoch'] : null;
  }
  if (typeof recorded !== 'string' || typeof replayed !== 'string') return null;
  const a = normalise(recorded);
  const b = normalise(replayed);
  if (a.text !== b.text) return null;
  const rules = new Set([...a.rules, ...b.rules]);
  return rules.size ? [...rules] : null;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function keyPath(base: string, key: string | number): string {
  if (typeof key === 'number') return `${base}[${key}]`;
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(key) ? (base ? `${base}.${key}` : key) : `${base}[${JSON.stringify(key)}]`;
}

/** Every leaf where two JSON values differ (a missing key or a length change is one difference), in document order. */
export function jsonDifferences(a: unknown, b: unknown, path = '', out: FieldDifference[] = [], limit = 200): FieldDifference[] {
  if (out.length >= limit) return out;
  if (Array.isArray(a) && Array.isArray(b)) {
    const n = Math.min(a.length, b.length);
    for (let i = 0; i < n; i++) jsonDifferences(a[i], b[i], keyPath(path, i), out, limit);
    if (a.length !== b.length && out.length < limit) out.push({ path: `${path}.length`, recorded: a.length, replayed: b.length });
    return out;
  }
  if (isPlainObject(a) && isPlainObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
    for (const key of keys) {
      if (!(key in b)) out.push({ path: keyPath(path, key), recorded: a[key], replayed: undefined });
      else if (!(key in a)) out.push({ path: keyPath(path, key), recorded: undefined, replayed: b[key] });
      else jsonDifferences(a[key], b[key], keyPath(path, key), out, limit);
      if (out.length >= limit) break;
    }
    return out;
  }
  if (a !== b && !(Number.isNaN(a) && Number.isNaN(b))) out.push({ path, recorded: a, replayed: b });
  return out;
}

/** The parts of an engine request the harness decided (see PROXY_FIELDS). */
function harnessPart(request: ChatRequest): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(request)) if (!PROXY_FIELDS.has(key)) out[key] = value;
  return out;
}

function toolMessageIndex(path: string, messages: readonly ChatMessage[]): boolean {
  const m = /^messages\[(\d+)\]/.exec(path);
  return m !== null && messages[Number(m[1])]?.role === 'tool';
}

/** Where a call stands on the ladder against its recorded counterpart. */
export function matchCall(recorded: { request: ChatRequest }, replayed: { request: ChatRequest }): CallMatch {
  const diffs = jsonDifferences(harnessPart(recorded.request), harnessPart(replayed.request));
  const tolerated: FieldDifference[] = [];
  const toolOutputs: FieldDifference[] = [];
  let firstDifference: FieldDifference | null = null;
  for (const d of diffs) {
    const rules = tolerates(d.recorded, d.replayed);
    if (rules) tolerated.push({ ...d, rules });
    else if (toolMessageIndex(d.path, recorded.request.messages) && toolMessageIndex(d.path, replayed.request.messages))
      toolOutputs.push(d);
    else {
      firstDifference = d;
      break;
    }
  }
  const level: MatchLevel = firstDifference ? 'none' : tolerated.length || toolOutputs.length ? 'tolerated' : 'exact';
  return { level, tolerated, toolOutputs, firstDifference };
}

const WINDOW = 60;

function clip(text: string, from: number, to: number): string {
  const start = Math.max(0, from);
  const end = Math.min(text.length, to);
  return `${start > 0 ? '…' : ''}${text.slice(start, end)}${end < text.length ? '…' : ''}`;
}

function shown(value: unknown): string {
  if (value === undefined) return '(absent)';
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 2 * WINDOW ? `${text.slice(0, 2 * WINDOW)}…` : text;
}

/** The difference as a small unified diff: the field, then the recorded and the replayed value around the first changed character. */
export function formatDifference(d: FieldDifference): string {
  const lines = [`field ${d.path}`];
  if (typeof d.recorded === 'string' && typeof d.replayed === 'string') {
    const a = d.recorded;
    const b = d.replayed;
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    lines.push(`  at character ${i}:`);
    lines.push(`  - recorded: ${JSON.stringify(clip(a, i - WINDOW / 2, i + WINDOW))}`);
    lines.push(`  + replayed: ${JSON.stringify(clip(b, i - WINDOW / 2, i + WINDOW))}`);
  } else {
    lines.push(`  - recorded: ${shown(d.recorded)}`);
    lines.push(`  + replayed: ${shown(d.replayed)}`);
  }
  return lines.join('\n');
}
