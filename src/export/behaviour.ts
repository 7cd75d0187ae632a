// Behaviour metrics of one rollout: the numbers RL is meant to move (tool use, failures and recovery,
// self-verification, tool coverage, turns to first success). The rules are written out in
// docs/behaviour-metrics.md; every regex and cut-off here is one of those rules, so change both together.
//
// Pure: no Node APIs, so the audit, the report and the webview can all use it.
import type { CallRecord, ChatMessage } from '../capture/types.js';
import type { AtifTrajectory } from '../harness/atif.js';

export type ToolOutcome = 'ok' | 'failed' | 'unknown';

export interface ToolCallFact {
  /** 0-based position of the model call on the main agent path. */
  turn: number;
  call_id: string;
  tool_call_id: string;
  name: string;
  /** The arguments as the model wrote them (JSON text). */
  arguments: string;
  /** The shell command when the tool is a shell, else null. */
  command: string | null;
  outcome: ToolOutcome;
  /** Which rule decided the outcome (docs/behaviour-metrics.md). */
  why: string;
  mutates: boolean;
  check: 'test' | 'read_back' | null;
}

export type CheckKind = 'test' | 'read_back' | 'run';

export interface RolloutBehaviour {
  /** Model calls on the main agent path. */
  turns: number;
  tool_calls: number;
  failed_tool_calls: number;
  /** Tool calls whose result was never seen (the rollout ended first, or no result could be matched). */
  unknown_tool_calls: number;
  /** Failed tool calls followed later by a successful, different tool call. */
  recovered_failures: number;
  /** recovered_failures / failed_tool_calls; null without a failure. */
  error_recovery: number | null;
  self_verified: boolean;
  /** The tool call that counts as the check, when self_verified. */
  verification: { turn: number; name: string; kind: CheckKind } | null;
  tools_used: string[];
  tools_offered: string[];
  /** Distinct tools used / distinct tools offered; null when no tool was offered. */
  tool_coverage: number | null;
  /** 1-based turn of the first successful tool call; null when none succeeded. */
  turns_to_first_success: number | null;
  /** Ends in a model answer without tool calls. */
  final_answer: boolean;
  facts: ToolCallFact[];
}

/** Rule F1: the Anthropic dialect turns a tool_result with is_error into this prefix. */
const TOOL_ERROR_PREFIX = /^\s*\[Tool Error\]/;
/** Rule F2: an exit status written by the harness or the tool ("[exit code 1]", "exit status: 2", "exit_code": 1). */
const EXIT_STATUS =
  /\bexit(?:ed)?(?:[ _-]?with)?[ _-]?(?:code|status)["']?\s*[:=]?\s*(-?\d+|none|null)\b|\breturn ?code["']?\s*[:=]\s*(-?\d+)/gi;
/** Rule F3: error markers at the start of a line, or the shell's and the OS's own failure texts. */
const ERROR_MARKERS = [
  /^\s*(?:error|fatal|panic)\b[:!\s]/im,
  /^Traceback \(most recent call last\)/m,
  /^\s*[A-Za-z_.]*(?:Error|Exception):/m,
  /\bcommand not found\b/i,
  /\bNo such file or directory\b/,
  /\bPermission denied\b/,
  /^\[error:/im,
];

/** Decides a tool result's outcome; the last exit status in the text wins over markers (rule order F1, F2, F3). */
export function toolResultOutcome(text: string): { outcome: Exclude<ToolOutcome, 'unknown'>; why: string } {
  if (TOOL_ERROR_PREFIX.test(text)) return { outcome: 'failed', why: 'F1 tool error flag' };
  let last: string | null = null;
  for (const m of text.matchAll(EXIT_STATUS)) last = (m[1] ?? m[2] ?? '').toLowerCase();
  if (last !== null)
    return last === '0' ? { outcome: 'ok', why: 'F2 exit status 0' } : { outcome: 'failed', why: `F2 exit status ${last}` };
  for (const re of ERROR_MARKERS) if (re.test(text)) return { outcome: 'failed', why: `F3 error marker ${re.source}` };
  return { outcome: 'ok', why: 'F4 no failure marker' };
}

function messageText(content: ChatMessage['content'] | unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return content
      .map((p) => (p && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string' ? (p as { text: string }).text : ''))
      .join('');
  return '';
}

const SHELL_TOOL =
  /^(bash|shell|sh|exec|execute|exec_command|shell_command|run|run_command|run_shell_command|terminal|command|local_shell|container\.exec)$/i;
const WRITE_TOOL = /write|edit|create|patch|apply|replace|insert|str_replace|delete|move|rename/i;
const READ_TOOL = /^(read|read_file|readfile|view|open|cat|open_file|read_many_files)$/i;
/** A regex that matches where any of `alternatives` does (a long alternation, written as a list). */
const anyOf = (...alternatives: RegExp[]) => new RegExp(alternatives.map((r) => `(?:${r.source})`).join('|'));
/** A shell command that changes files (redirection into a file, in-place edits, file operations). */
const WRITE_COMMAND = anyOf(
  /(^|[^0-9&])>>?\s*[^&\s|]/,
  /\bsed\s+(-[a-zA-Z]*i|--in-place)/,
  /\btee\b/,
  /\b(mv|cp|rm|touch|mkdir|patch|truncate|chmod|install)\s/,
  /\bgit\s+(apply|checkout|restore|commit)\b/,
  /\bpython3?\s+-c\b.*\bopen\([^)]*['"]w/,
);
/** A shell command that runs tests or the program's own check. */
const TEST_COMMAND = anyOf(
  /\b(pytest|py\.test|unittest|tox|nox|jest|vitest|mocha|go\s+test|cargo\s+test|npm\s+(run\s+)?test|yarn\s+test|pnpm\s+test)\b/,
  /\b(make\s+(test|check)|ctest|rspec|phpunit|bats|node\s+--test|tsx\s+--test|mvn\s+test|gradle\s+test)\b/,
  /(^|[;&|]\s*|\s)(\.\/)?(tests?|run_tests?|check)(\.sh)?(\s|$)/,
);
/** Interpreters: `bash sum.sh`, `python3 app.py`, ... run a file (a changed one, for rule V3 run). */
const INTERPRETER = /^(bash|sh|zsh|python3?|node|tsx|ruby|perl|php|deno)$/;
/** A shell command that reads a file back. */
const READ_COMMAND = /\b(cat|head|tail|less|more|diff|cmp|wc|grep|rg|sha256sum|md5sum|stat|ls|nl|od|xxd|git\s+(diff|status|show))\b/;

/**
 * What a shell command checks (rule V3), given the paths changed before it: tests at any time; running
 * or reading back a changed file only after a change.
 */
function shellCheck(command: string, written: ReadonlySet<string>): CheckKind | null {
  if (TEST_COMMAND.test(command)) return 'test';
  if (WRITE_COMMAND.test(command) || written.size === 0) return null;
  const touches = [...pathsOf({}, command)].some((p) => written.has(p));
  if (!touches) return null;
  const first = command.trim().split(/\s+/)[0] ?? '';
  if (INTERPRETER.test(first) || /^\.\//.test(first)) return 'run';
  return READ_COMMAND.test(command) ? 'read_back' : null;
}

function parseArgs(text: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(text);
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

function shellCommand(name: string, args: Record<string, unknown>): string | null {
  const raw = args.command ?? args.cmd ?? args.script ?? args.input;
  const text = typeof raw === 'string' ? raw : Array.isArray(raw) ? raw.filter((x) => typeof x === 'string').join(' ') : null;
  if (text !== null && (SHELL_TOOL.test(name) || args.command !== undefined || args.cmd !== undefined)) return text;
  return null;
}

/** Paths a tool call touches, for "read the file back": the arguments' path-like strings and the command's words. */
function pathsOf(args: Record<string, unknown>, command: string | null): Set<string> {
  const out = new Set<string>();
  for (const k of ['path', 'file', 'file_path', 'filename', 'filepath', 'target_file', 'absolute_path']) {
    const v = args[k];
    if (typeof v === 'string' && v) out.add(v.replace(/^\.\//, ''));
  }
  if (command)
    for (const w of command.split(/[\s;|&<>'"()]+/)) if (/[./]/.test(w) && !/^-/.test(w) && w.length > 1) out.add(w.replace(/^\.\//, ''));
  return out;
}

/**
 * The main agent path: the agent sequence with the most calls (the harness's own loop; subagents and
 * side calls are auxiliary). Without sequences, every answered call in arrival order.
 */
export function mainPath(doc: {
  calls: readonly CallRecord[];
  sequences?: readonly { role: string; node_ids: readonly string[] }[];
}): CallRecord[] {
  const byId = new Map(doc.calls.map((c) => [c.call_id, c]));
  const agents = (doc.sequences ?? []).filter((s) => s.role === 'agent');
  if (agents.length) {
    const best = agents.reduce((a, b) => (b.node_ids.length > a.node_ids.length ? b : a));
    return best.node_ids.map((id) => byId.get(id)).filter((c): c is CallRecord => c !== undefined);
  }
  return [...doc.calls].filter((c) => c.engine_response !== null).sort((a, b) => a.index - b.index);
}

/**
 * Tool results by tool_call_id: the tool messages of every later request on the path (rule R1), then
 * the ATIF trajectory's observations for calls whose result never reached a request (rule R2).
 */
function toolResults(path: readonly CallRecord[], atif: AtifTrajectory | null | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const c of path)
    for (const m of c.engine_request?.messages ?? [])
      if (m.role === 'tool' && m.tool_call_id && !out.has(m.tool_call_id)) out.set(m.tool_call_id, messageText(m.content));
  for (const step of atif?.steps ?? [])
    for (const r of step.observation?.results ?? []) {
      if (!r.source_call_id || out.has(r.source_call_id)) continue;
      out.set(
        r.source_call_id,
        typeof r.content === 'string' ? r.content : (r.content ?? []).map((p) => (p.type === 'text' ? p.text : '')).join(''),
      );
    }
  return out;
}

export function rolloutBehaviour(
  doc: { calls: readonly CallRecord[]; sequences?: readonly { role: string; node_ids: readonly string[] }[] },
  atif?: AtifTrajectory | null,
): RolloutBehaviour {
  const path = mainPath(doc);
  const results = toolResults(path, atif);
  const facts: ToolCallFact[] = [];
  const offered = new Set<string>();
  path.forEach((c, turn) => {
    for (const t of c.engine_request?.tools ?? []) if (t?.function?.name) offered.add(t.function.name);
    for (const tc of c.engine_response?.choices?.[0]?.message?.tool_calls ?? []) {
      const name = tc.function?.name ?? '';
      const argText = tc.function?.arguments ?? '';
      const args = parseArgs(argText);
      const command = shellCommand(name, args);
      const result = results.get(tc.id);
      const decided = result === undefined ? { outcome: 'unknown' as const, why: 'R3 no tool result seen' } : toolResultOutcome(result);
      const mutates = command !== null ? WRITE_COMMAND.test(command) : WRITE_TOOL.test(name) && !READ_TOOL.test(name);
      const check: ToolCallFact['check'] =
        command !== null
          ? TEST_COMMAND.test(command)
            ? 'test'
            : READ_COMMAND.test(command) && !mutates
              ? 'read_back'
              : null
          : READ_TOOL.test(name)
            ? 'read_back'
            : null;
      facts.push({
        turn,
        call_id: c.call_id,
        tool_call_id: tc.id,
        name,
        arguments: argText,
        command,
        outcome: decided.outcome,
        why: decided.why,
        mutates,
        check,
      });
    }
  });

  const failed = facts.filter((f) => f.outcome === 'failed');
  // Error recovery (rule E1): a later tool call that succeeded and is not the same call again.
  let recovered = 0;
  for (const f of failed) {
    const i = facts.indexOf(f);
    if (facts.slice(i + 1).some((g) => g.outcome === 'ok' && (g.name !== f.name || g.arguments !== f.arguments))) recovered++;
  }

  // Self-verification (rules V1-V4): after the last change, before the final answer, the work is checked.
  const last = path[path.length - 1];
  const finalAnswer =
    last !== undefined && (last.engine_response?.choices?.[0]?.message?.tool_calls?.length ?? 0) === 0 && last.engine_response !== null;
  let verification: RolloutBehaviour['verification'] = null;
  if (finalAnswer) {
    const lastWrite = facts.map((f) => f.mutates).lastIndexOf(true);
    const written = new Set<string>();
    for (const f of facts.slice(0, lastWrite + 1))
      if (f.mutates) for (const p of pathsOf(parseArgs(f.arguments), f.command)) written.add(p);
    const change = facts[lastWrite];
    // V4: a compound command that checks after its own last change (`sed -i ... && bash sum.sh 2 3`).
    if (change?.command && change.outcome !== 'unknown') {
      const parts = change.command.split(/&&|\|\||;|\n/);
      let k = parts.length - 1;
      while (k >= 0 && !WRITE_COMMAND.test(parts[k]!)) k--;
      for (const part of parts.slice(k + 1)) {
        const kind = shellCheck(part, written);
        if (kind) {
          verification = { turn: change.turn, name: change.name, kind };
          break;
        }
      }
    }
    for (const f of verification ? [] : facts.slice(lastWrite + 1)) {
      if (f.outcome === 'unknown') continue;
      const kind =
        f.command !== null
          ? shellCheck(f.command, written)
          : f.check === 'read_back' && [...pathsOf(parseArgs(f.arguments), null)].some((p) => written.has(p))
            ? 'read_back'
            : null;
      if (kind) {
        verification = { turn: f.turn, name: f.name, kind };
        break;
      }
    }
  }

  const used = [...new Set(facts.map((f) => f.name))].sort();
  const offeredList = [...offered].sort();
  const firstOk = facts.find((f) => f.outcome === 'ok');
  return {
    turns: path.length,
    tool_calls: facts.length,
    failed_tool_calls: failed.length,
    unknown_tool_calls: facts.filter((f) => f.outcome === 'unknown').length,
    recovered_failures: recovered,
    error_recovery: failed.length ? recovered / failed.length : null,
    self_verified: verification !== null,
    verification,
    tools_used: used,
    tools_offered: offeredList,
    tool_coverage: offeredList.length ? used.filter((u) => offered.has(u)).length / offeredList.length : null,
    turns_to_first_success: firstOk ? firstOk.turn + 1 : null,
    final_answer: finalAnswer,
    facts,
  };
}

export interface BehaviourAggregate {
  rollouts: number;
  mean_tool_calls: number | null;
  mean_failed_tool_calls: number | null;
  /** Share of failed tool calls that were recovered (pooled over the rollouts). */
  error_recovery: number | null;
  /** Share of rollouts with a self-verification. */
  self_verification: number | null;
  mean_tool_coverage: number | null;
  /** Mean over the rollouts that had a success. */
  mean_turns_to_first_success: number | null;
  /** Share of rollouts with no successful tool call. */
  no_success_share: number | null;
}

const avg = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);

export function aggregateBehaviour(list: readonly RolloutBehaviour[]): BehaviourAggregate {
  const failed = list.reduce((a, b) => a + b.failed_tool_calls, 0);
  return {
    rollouts: list.length,
    mean_tool_calls: avg(list.map((b) => b.tool_calls)),
    mean_failed_tool_calls: avg(list.map((b) => b.failed_tool_calls)),
    error_recovery: failed ? list.reduce((a, b) => a + b.recovered_failures, 0) / failed : null,
    self_verification: list.length ? list.filter((b) => b.self_verified).length / list.length : null,
    mean_tool_coverage: avg(list.flatMap((b) => (b.tool_coverage === null ? [] : [b.tool_coverage]))),
    mean_turns_to_first_success: avg(list.flatMap((b) => (b.turns_to_first_success === null ? [] : [b.turns_to_first_success]))),
    no_success_share: list.length ? list.filter((b) => b.turns_to_first_success === null).length / list.length : null,
  };
}
