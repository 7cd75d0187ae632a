// Native harness logs -> ATIF (harbor-and-atif.md 6.5, 6.6): one agent step per model call, with the
// harness's own completion-token count, so atif-check.ts can compare it with the captured calls.
// Converters are lenient readers of formats that change between releases: unknown lines are skipped,
// and a log with no usable record gives undefined (verdict "none"), never a made-up trajectory.
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parseAtif, type AtifTrajectory } from './atif.js';

type Json = Record<string, unknown>;

interface StepIn {
  message: string;
  completion: number | null;
  prompt: number | null;
  cached?: number | null;
  model?: string;
  toolCalls?: { id: string; name: string; args: unknown }[];
  timestamp?: string;
}

function obj(v: unknown): Json | undefined {
  return v && typeof v === 'object' && !Array.isArray(v) ? (v as Json) : undefined;
}
function num(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}
function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

function jsonLines(path: string): Json[] {
  if (!existsSync(path)) return [];
  const out: Json[] = [];
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    const t = line.trim();
    if (!t.startsWith('{')) continue;
    try {
      const v = obj(JSON.parse(t));
      if (v) out.push(v);
    } catch {
      // a progress line or a partial write
    }
  }
  return out;
}

function filesUnder(dir: string, pattern: RegExp): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d).sort()) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (pattern.test(name)) out.push(p);
    }
  };
  walk(dir);
  return out;
}

function argsObject(v: unknown): Json {
  if (typeof v === 'string') {
    try {
      return obj(JSON.parse(v)) ?? { input: v };
    } catch {
      return { input: v };
    }
  }
  return obj(v) ?? {};
}

/** Builds a valid ATIF document from per-call steps; undefined when there are none. */
export function toTrajectory(agent: string, steps: StepIn[], sessionId?: string): AtifTrajectory | undefined {
  if (!steps.length) return undefined;
  const now = new Date().toISOString();
  const doc = {
    schema_version: 'ATIF-v1.7',
    ...(sessionId ? { session_id: sessionId } : {}),
    agent: { name: agent, version: 'unknown' },
    steps: steps.map((s, i) => ({
      step_id: i + 1,
      timestamp: s.timestamp ?? now,
      source: 'agent',
      ...(s.model ? { model_name: s.model } : {}),
      message: s.message,
      ...(s.toolCalls?.length
        ? { tool_calls: s.toolCalls.map((c) => ({ tool_call_id: c.id, function_name: c.name, arguments: argsObject(c.args) })) }
        : {}),
      metrics: {
        ...(s.prompt !== null ? { prompt_tokens: s.prompt } : {}),
        ...(s.completion !== null ? { completion_tokens: s.completion } : {}),
        ...(s.cached != null ? { cached_tokens: s.cached } : {}),
      },
      llm_call_count: 1,
    })),
  };
  return parseAtif(doc, `${agent} native log`);
}

/**
 * claude-code: the session transcripts (projects/<cwd>/<session>.jsonl) carry each assistant
 * message's final usage; the stream-json output only the usage at message start (output 0), so it
 * is the fallback. One assistant message (by message.id) per model call.
 */
export function claudeToAtif(agentDir: string): AtifTrajectory | undefined {
  const transcripts = filesUnder(join(agentDir, 'native', 'projects'), /\.jsonl$/);
  return claudeMessagesToAtif(transcripts.length ? transcripts : [join(agentDir, 'claude-code.txt')]);
}

function claudeMessagesToAtif(paths: string[]): AtifTrajectory | undefined {
  const byId = new Map<string, StepIn>();
  let session: string | undefined;
  for (const ev of paths.flatMap(jsonLines)) {
    if (ev.type !== 'assistant') continue;
    const m = obj(ev.message);
    if (!m) continue;
    session ??= str(ev.session_id) || undefined;
    if (m.model === '<synthetic>') continue;
    const id = str(m.id) || `m${byId.size}`;
    const usage = obj(m.usage) ?? {};
    const seen = byId.get(id);
    const step = seen ?? { message: '', completion: null, prompt: null, toolCalls: [] };
    for (const block of Array.isArray(m.content) ? m.content : []) {
      const b = obj(block) ?? {};
      if (b.type === 'text' && !step.message.includes(str(b.text))) step.message += str(b.text);
      if (b.type === 'tool_use' && !step.toolCalls!.some((c) => c.id === str(b.id)))
        step.toolCalls!.push({ id: str(b.id), name: str(b.name), args: b.input });
    }
    step.completion = num(usage.output_tokens) ?? step.completion;
    const input = num(usage.input_tokens);
    if (input !== null) step.prompt = input + (num(usage.cache_read_input_tokens) ?? 0) + (num(usage.cache_creation_input_tokens) ?? 0);
    step.cached = num(usage.cache_read_input_tokens);
    step.model = str(m.model) || undefined;
    byId.set(id, step);
  }
  return toTrajectory('claude-code', [...byId.values()], session);
}

/** opencode (and its fork kilo) run --format json: a step_finish event per model call, carrying its token counts. */
export function opencodeEventsToAtif(path: string, agent = 'opencode'): AtifTrajectory | undefined {
  const steps: StepIn[] = [];
  let current: StepIn = { message: '', completion: null, prompt: null, toolCalls: [] };
  let session: string | undefined;
  for (const ev of jsonLines(path)) {
    const part = obj(ev.part) ?? {};
    session ??= str(ev.sessionID) || str(part.sessionID) || undefined;
    if (ev.type === 'text') current.message += str(part.text);
    if (ev.type === 'tool_use') current.toolCalls!.push({ id: str(part.callID), name: str(part.tool), args: obj(part.state)?.input });
    if (ev.type === 'step_finish') {
      const tokens = obj(part.tokens) ?? {};
      const cache = obj(tokens.cache) ?? {};
      current.completion = (num(tokens.output) ?? 0) + (num(tokens.reasoning) ?? 0);
      current.prompt = (num(tokens.input) ?? 0) + (num(cache.read) ?? 0);
      current.cached = num(cache.read);
      steps.push(current);
      current = { message: '', completion: null, prompt: null, toolCalls: [] };
    }
  }
  return toTrajectory(agent, steps, session);
}

/** codex session rollout-*.jsonl: a token_count event (last_token_usage) after each model call. */
export function codexSessionsToAtif(dir: string): AtifTrajectory | undefined {
  const steps: StepIn[] = [];
  let session: string | undefined;
  for (const file of filesUnder(dir, /^rollout-.*\.jsonl$/)) {
    let pending: StepIn = { message: '', completion: null, prompt: null, toolCalls: [] };
    let lastTotal = '';
    for (const line of jsonLines(file)) {
      const p = obj(line.payload) ?? {};
      if (line.type === 'session_meta') session ??= str(p.id) || undefined;
      if (line.type === 'response_item') {
        if (p.type === 'message' && p.role === 'assistant') {
          for (const c of Array.isArray(p.content) ? p.content : []) pending.message += str(obj(c)?.text);
        }
        if (p.type === 'function_call' || p.type === 'custom_tool_call')
          pending.toolCalls!.push({ id: str(p.call_id), name: str(p.name), args: p.arguments ?? p.input });
      }
      if (line.type === 'event_msg' && p.type === 'token_count') {
        const info = obj(p.info);
        const last = obj(info?.last_token_usage);
        const total = JSON.stringify(info?.total_token_usage ?? null);
        if (!last || total === lastTotal) continue; // repeated status, not a new call
        lastTotal = total;
        pending.completion = num(last.output_tokens);
        pending.prompt = num(last.input_tokens);
        pending.cached = num(last.cached_input_tokens);
        pending.timestamp = str(line.timestamp) || undefined;
        steps.push(pending);
        pending = { message: '', completion: null, prompt: null, toolCalls: [] };
      }
    }
  }
  return toTrajectory('codex', steps, session);
}

/** gemini-cli session-*.json (chat recording): one "gemini" message per model call with its tokens. */
export function geminiSessionsToAtif(dir: string): AtifTrajectory | undefined {
  const steps: StepIn[] = [];
  let session: string | undefined;
  for (const file of filesUnder(dir, /^session-.*\.jsonl?$/)) {
    let records: Json[] = [];
    if (file.endsWith('.jsonl')) {
      records = jsonLines(file);
      session ??= str(records[0]?.sessionId) || undefined;
    } else {
      try {
        const doc = obj(JSON.parse(readFileSync(file, 'utf8'))) ?? {};
        session ??= str(doc.sessionId) || undefined;
        records = (Array.isArray(doc.messages) ? doc.messages : []).map((m) => obj(m) ?? {});
      } catch {
        continue;
      }
    }
    // The .jsonl recording appends a message again when it changes (tool calls, then results):
    // the last record of an id is the message, in the order ids first appeared.
    const latest = new Map<string, Json>();
    records.forEach((m, i) => {
      if (m.type === 'gemini') latest.set(str(m.id) || `#${i}`, m);
    });
    for (const m of latest.values()) {
      const tokens = obj(m.tokens) ?? {};
      const calls = (Array.isArray(m.toolCalls) ? m.toolCalls : []).map((c) => obj(c) ?? {});
      steps.push({
        message: typeof m.content === 'string' ? m.content : '',
        completion: num(tokens.output) === null ? null : (num(tokens.output) ?? 0) + (num(tokens.thoughts) ?? 0),
        prompt: num(tokens.input),
        cached: num(tokens.cached),
        model: str(m.model) || undefined,
        timestamp: str(m.timestamp) || undefined,
        toolCalls: calls.map((c) => ({ id: str(c.id), name: str(c.name), args: c.args })),
      });
    }
  }
  return toTrajectory('gemini-cli', steps, session);
}

/**
 * pi --session-dir *.jsonl: assistant messages carry usage.output (harbor-and-atif.md 7). OpenClaw keeps
 * the same session events (version 4) in SQLite; the sandbox exports them to a .jsonl first.
 */
export function piSessionsToAtif(dir: string, agent = 'pi'): AtifTrajectory | undefined {
  const steps: StepIn[] = [];
  for (const file of filesUnder(dir, /\.jsonl$/)) {
    for (const line of jsonLines(file)) {
      const m = obj(line.message);
      if (line.type !== 'message' || m?.role !== 'assistant') continue;
      const usage = obj(m.usage) ?? {};
      const content = Array.isArray(m.content) ? m.content.map((c) => obj(c) ?? {}) : [];
      steps.push({
        message: content
          .filter((c) => c.type === 'text')
          .map((c) => str(c.text))
          .join(''),
        completion: num(usage.output),
        prompt: num(usage.input) === null ? null : (num(usage.input) ?? 0) + (num(usage.cacheRead) ?? 0),
        cached: num(usage.cacheRead),
        toolCalls: content.filter((c) => c.type === 'toolCall').map((c) => ({ id: str(c.id), name: str(c.name), args: c.arguments })),
      });
    }
  }
  return toTrajectory(agent, steps);
}

/** qwen-code chat recording (projects/<cwd>/chats/<session>.jsonl): assistant records with usageMetadata. */
export function qwenChatsToAtif(dir: string): AtifTrajectory | undefined {
  const steps: StepIn[] = [];
  let session: string | undefined;
  for (const file of filesUnder(dir, /\.jsonl$/)) {
    for (const rec of jsonLines(file)) {
      if (rec.type !== 'assistant') continue;
      session ??= str(rec.sessionId) || undefined;
      const usage = obj(rec.usageMetadata) ?? {};
      const parts = (Array.isArray(obj(rec.message)?.parts) ? (obj(rec.message)!.parts as unknown[]) : []).map((p) => obj(p) ?? {});
      const out = num(usage.candidatesTokenCount);
      steps.push({
        message: parts.map((p) => (p.thought ? '' : str(p.text))).join(''),
        completion: out === null ? null : out + (num(usage.thoughtsTokenCount) ?? 0),
        prompt: num(usage.promptTokenCount),
        cached: num(usage.cachedContentTokenCount),
        model: str(rec.model) || undefined,
        timestamp: str(rec.timestamp) || undefined,
        toolCalls: parts
          .map((p) => obj(p.functionCall))
          .filter((c): c is Json => Boolean(c))
          .map((c) => ({ id: str(c.id), name: str(c.name), args: c.args })),
      });
    }
  }
  return toTrajectory('qwen-code', steps, session);
}

/** GitHub Copilot CLI session-state/<id>/events.jsonl: a session.usage_record before each assistant.message. */
export function copilotEventsToAtif(dir: string): AtifTrajectory | undefined {
  const steps: StepIn[] = [];
  let session: string | undefined;
  for (const file of filesUnder(dir, /^events\.jsonl$/)) {
    let usage: Json | undefined;
    for (const ev of jsonLines(file)) {
      const data = obj(ev.data) ?? {};
      if (ev.type === 'session.start') session ??= str(data.sessionId) || undefined;
      if (ev.type === 'session.usage_record') usage = obj(data.usage);
      if (ev.type !== 'assistant.message' || !usage) continue;
      const requests = (Array.isArray(data.toolRequests) ? data.toolRequests : []).map((r) => obj(r) ?? {});
      steps.push({
        message: str(data.content),
        completion: num(usage.outputTokens),
        prompt: num(usage.inputTokens),
        cached: num(usage.cacheReadTokens),
        model: str(data.model) || undefined,
        timestamp: str(ev.timestamp) || undefined,
        toolCalls: requests.map((r) => ({ id: str(r.toolCallId), name: str(r.name), args: r.arguments })),
      });
      usage = undefined; // one usage record per model call
    }
  }
  return toTrajectory('copilot', steps, session);
}

/** Continue (cn) sessions/<id>.json: each assistant message of `history` carries its call's usage. */
export function continueSessionsToAtif(dir: string): AtifTrajectory | undefined {
  const steps: StepIn[] = [];
  let session: string | undefined;
  for (const file of filesUnder(dir, /\.json$/)) {
    if (file.endsWith('sessions.json')) continue; // the index, not a session
    let doc: Json;
    try {
      doc = obj(JSON.parse(readFileSync(file, 'utf8'))) ?? {};
    } catch {
      continue;
    }
    for (const item of Array.isArray(doc.history) ? doc.history : []) {
      const m = obj(obj(item)?.message);
      const usage = obj(m?.usage);
      if (m?.role !== 'assistant' || !usage) continue;
      session ??= str(doc.sessionId) || undefined;
      const calls = (Array.isArray(m.toolCalls) ? m.toolCalls : []).map((c) => obj(c) ?? {});
      steps.push({
        message: typeof m.content === 'string' ? m.content : '',
        completion: num(usage.completion_tokens),
        prompt: num(usage.prompt_tokens),
        cached: num(obj(usage.prompt_tokens_details)?.cached_tokens),
        model: str(usage.model) || undefined,
        toolCalls: calls.map((c) => ({ id: str(c.id), name: str(obj(c.function)?.name), args: obj(c.function)?.arguments })),
      });
    }
  }
  return toTrajectory('continue', steps, session);
}
