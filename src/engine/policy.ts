// Scripted policies: a file that decides the completion text of each turn, so real harnesses can run
// multi-turn tool loops on a CPU model that could never plan one. The engine then scores exactly
// these tokens through the model (teacher forcing); ids and logprobs stay the model's own.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { z } from 'zod';
import type { ChatMessage, ChatTool } from '../capture/types.js';

const regexSource = z.string().superRefine((s, ctx) => {
  try {
    new RegExp(s, 'i');
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: `not a valid regular expression: ${(err as Error).message}` });
  }
});

const sampledAsSchema = z
  .object({
    /** `python` is the template's (`", "`, `": "`), `compact` has no spaces, `pretty` indents by two. */
    spacing: z.enum(['python', 'compact', 'pretty']).default('python'),
    /** Key order of the call object and its arguments: as given (the template's: name first) or reversed. */
    key_order: z.enum(['given', 'reversed']).default('given'),
  })
  .strict();

const callSchema = z
  .object({
    /** Regular expression (case-insensitive) matched against the offered tool names; first match wins. */
    tool: regexSource,
    /** Exact arguments object. */
    arguments: z.record(z.string(), z.unknown()).optional(),
    /** A single string put into the tool's first required string parameter (e.g. `command`, `cmd`). */
    input: z.string().optional(),
    /**
     * Further arguments added only for the keys the offered tool declares (e.g. `description` for the
     * shell tools that have one), so one policy serves every harness and a call can carry several keys.
     */
    also: z.record(z.string(), z.unknown()).optional(),
    /**
     * How the call's JSON is written in the sampled text, when not the way the Qwen3 template re-renders
     * it: a real model samples its own spacing and key order, which the harness then sends back parsed.
     */
    sampled_as: sampledAsSchema.optional(),
  })
  .strict()
  .refine((c) => (c.arguments === undefined) !== (c.input === undefined), { message: 'give exactly one of "arguments" or "input"' });

const scriptedSchema = z
  .object({
    say: z.string().optional(),
    think: z.string().optional(),
    call: z.union([callSchema, z.array(callSchema).min(1)]).optional(),
  })
  .strict()
  .refine((a) => a.say !== undefined || a.call !== undefined, { message: 'an action needs "say" and/or "call"' });

/**
 * A sampled move: one of several actions, drawn per request with the request's sampler (its seed, or
 * the engine's stream), weighted (default: equal). What makes a group's rollouts differ on a CPU model.
 */
const chooseSchema = z
  .object({
    choose: z.array(z.union([z.literal('sample'), scriptedSchema])).min(2),
    weights: z.array(z.number().positive().finite()).optional(),
  })
  .strict()
  .refine((a) => a.weights === undefined || a.weights.length === a.choose.length, { message: '"weights" needs one weight per choice' });

const actionSchema = z.union([z.literal('sample'), scriptedSchema, chooseSchema]);

const ruleSchema = z
  .object({
    when: z
      .object({
        /** Turn index: the number of assistant messages already in the conversation. */
        turn: z.number().int().nonnegative().optional(),
        last_role: z.enum(['system', 'user', 'assistant', 'tool']).optional(),
        /** Regular expression matched against the last message's text. */
        last_message: regexSource.optional(),
        /** Regular expression that some offered tool name must match. */
        tools: regexSource.optional(),
        /** Regular expression matched against the first user message's text (the task). */
        task: regexSource.optional(),
      })
      .strict(),
    then: actionSchema,
  })
  .strict();

export const policySchema = z
  .object({
    name: z.string().optional(),
    description: z.string().optional(),
    /** Actions by turn index; a turn listed here wins over the rules. */
    turns: z.array(actionSchema).optional(),
    rules: z.array(ruleSchema).optional(),
    /** What to do when nothing matched: "sample" (the model decides) unless given. */
    fallback: actionSchema.optional(),
  })
  .strict();

export type PolicyFile = z.infer<typeof policySchema>;
type Action = z.infer<typeof actionSchema>;
type Call = z.infer<typeof callSchema>;

export type SampledAs = z.infer<typeof sampledAsSchema>;

/** One scripted tool call; `sampledAs` set when its JSON is written otherwise than the template does. */
export interface ScriptedToolCall {
  name: string;
  arguments: Record<string, unknown>;
  sampledAs?: SampledAs;
}

/** What the policy decided for one turn: text to force, or let the model sample. */
export type PolicyDecision = { kind: 'sample' } | { kind: 'script'; reasoning?: string; content?: string; toolCalls: ScriptedToolCall[] };

export class ScriptedPolicy {
  constructor(
    readonly spec: PolicyFile,
    readonly source: string,
  ) {}

  /** Parses a policy document; errors name the file and the offending field. */
  static parse(json: unknown, source: string): ScriptedPolicy {
    const r = policySchema.safeParse(json);
    if (!r.success) {
      const issues = r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
      throw new Error(`invalid policy ${source}: ${issues}`);
    }
    return new ScriptedPolicy(r.data, source);
  }

  /** A policy file path, or the name of a shipped policy in examples/policies/. */
  static load(fileOrName: string): ScriptedPolicy {
    const path = existsSync(fileOrName) ? resolve(fileOrName) : shippedPolicyPath(fileOrName);
    if (!path) {
      throw new Error(
        `policy '${fileOrName}' is neither a file nor a shipped policy (${listShippedPolicies().join(', ') || 'none found'})`,
      );
    }
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(path, 'utf8'));
    } catch (err) {
      throw new Error(`policy ${path} is not valid JSON: ${(err as Error).message}`);
    }
    return ScriptedPolicy.parse(json, path);
  }

  /** Whether some action draws between moves (`choose`): a group's rollouts can then differ. */
  get samples(): boolean {
    const actions = [
      ...(this.spec.turns ?? []),
      ...(this.spec.rules ?? []).map((r) => r.then),
      ...(this.spec.fallback ? [this.spec.fallback] : []),
    ];
    return actions.some((a) => typeof a === 'object' && 'choose' in a);
  }

  /** `random` draws a `choose` (uniform in [0, 1)); the engine passes the request's sampler. */
  decide(messages: ChatMessage[], tools: ChatTool[] | undefined, random: () => number = Math.random): PolicyDecision {
    const turn = messages.filter((m) => m.role === 'assistant').length;
    const toolNames = (tools ?? []).map((t) => t.function.name);
    const candidates: Action[] = [];
    const scripted = this.spec.turns?.[turn];
    if (scripted !== undefined) candidates.push(scripted);
    const last = messages[messages.length - 1];
    const task = messages.find((m) => m.role === 'user');
    for (const rule of this.spec.rules ?? []) {
      const w = rule.when;
      if (w.turn !== undefined && w.turn !== turn) continue;
      if (w.last_role !== undefined && last?.role !== w.last_role) continue;
      if (w.last_message !== undefined && !new RegExp(w.last_message, 'i').test(messageText(last))) continue;
      if (w.task !== undefined && !new RegExp(w.task, 'i').test(messageText(task))) continue;
      if (w.tools !== undefined && !toolNames.some((n) => new RegExp(w.tools!, 'i').test(n))) continue;
      candidates.push(rule.then);
    }
    candidates.push(this.spec.fallback ?? 'sample');
    for (const action of candidates) {
      const decision = resolveAction(action, tools ?? [], random);
      if (decision) return decision;
    }
    return { kind: 'sample' };
  }
}

/** null when the action calls a tool that is not offered (the next candidate is tried). */
function resolveAction(action: Action, tools: ChatTool[], random: () => number): PolicyDecision | null {
  if (action === 'sample') return { kind: 'sample' };
  if ('choose' in action) return resolveAction(drawChoice(action, random()), tools, random);
  const calls = action.call === undefined ? [] : Array.isArray(action.call) ? action.call : [action.call];
  const toolCalls: ScriptedToolCall[] = [];
  for (const call of calls) {
    const tool = tools.find((t) => new RegExp(call.tool, 'i').test(t.function.name));
    if (!tool) return null;
    toolCalls.push({
      name: tool.function.name,
      arguments: callArguments(call, tool),
      ...(call.sampled_as ? { sampledAs: call.sampled_as } : {}),
    });
  }
  return { kind: 'script', reasoning: action.think, content: action.say, toolCalls };
}

/** The choice `u` (in [0, 1)) lands on, by cumulative weight. */
function drawChoice(action: z.infer<typeof chooseSchema>, u: number): Action {
  const weights = action.weights ?? action.choose.map(() => 1);
  const total = weights.reduce((a, w) => a + w, 0);
  let x = u * total;
  for (let i = 0; i < action.choose.length; i++) {
    x -= weights[i]!;
    if (x < 0) return action.choose[i]!;
  }
  return action.choose[action.choose.length - 1]!;
}

function callArguments(call: Call, tool: ChatTool): Record<string, unknown> {
  const params = (tool.function.parameters ?? {}) as { properties?: Record<string, { type?: unknown }>; required?: unknown };
  const props = params.properties ?? {};
  let args: Record<string, unknown>;
  if (call.arguments) args = { ...call.arguments };
  else {
    const required = Array.isArray(params.required) ? (params.required as string[]) : [];
    const isString = (k: string) => props[k]?.type === 'string' || props[k]?.type === undefined;
    const key = required.find((k) => k in props && isString(k)) ?? Object.keys(props).find(isString) ?? 'command';
    args = { [key]: call.input };
  }
  for (const [k, v] of Object.entries(call.also ?? {})) if (k in props && !(k in args)) args[k] = v;
  return args;
}

function messageText(m: ChatMessage | undefined): string {
  if (!m || m.content === undefined || m.content === null) return '';
  if (typeof m.content === 'string') return m.content;
  return m.content.map((p) => (typeof p.text === 'string' ? p.text : '')).join('');
}

/** examples/policies/ of this checkout or package (found by walking up from this file). */
export function shippedPoliciesDir(): string | null {
  let dir = __dirname;
  for (;;) {
    const candidate = join(dir, 'examples', 'policies');
    if (existsSync(candidate)) return candidate;
    const up = dirname(dir);
    if (up === dir) return null;
    dir = up;
  }
}

function shippedPolicyPath(name: string): string | null {
  const dir = shippedPoliciesDir();
  if (!dir || !/^[\w.-]+$/.test(name)) return null;
  const path = join(dir, name.endsWith('.json') ? name : `${name}.json`);
  return existsSync(path) ? path : null;
}

export function listShippedPolicies(): string[] {
  const dir = shippedPoliciesDir();
  if (!dir) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .map((f) => f.replace(/\.json$/, ''))
    .sort();
}
