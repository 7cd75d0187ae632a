// The engine behind `harness-lab rollout` when no --engine-url is given: the task's scripted policy
// (policy.json next to the task, in the engine's policy format, src/engine/policy.ts) decides each
// turn's text and the embedded CPU engine scores exactly those tokens, so ids and logprobs are a real
// model's. HARNESS_LAB_POLICY_ENGINE=fake swaps in the in-repo vLLM-shaped fake (no model load).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { startFakeEngine, type FakeAnswer } from '../engine/fake-engine.js';
import { ScriptedPolicy } from '../engine/policy.js';
import { Prng } from '../engine/prng.js';

export interface PolicyEngine {
  url: string;
  model: string;
  /** What serves the answers, for the header `harness-lab rollout -v` prints. */
  description: string;
  close(): Promise<void>;
}

/** A task's sampling policy, beside its policy.json: what batches on the embedded engine follow by default. */
export const SAMPLING_POLICY_FILE = 'policy.sampling.json';

/**
 * The policy a batch on the embedded engine follows for a task: its sampling variant when it has one
 * (a GRPO group needs members that can act differently, and a scripted policy does the same moves
 * whatever the temperature), else its policy.json. Single runs keep policy.json (reproducible).
 */
export function batchPolicyFile(task: { dir: string; policyFile: string | undefined; instruction?: string }): string | undefined {
  const sampling = join(task.dir, SAMPLING_POLICY_FILE);
  if (!existsSync(sampling)) return task.policyFile;
  // A copy of a task whose instruction was rewritten (its policy.json with it) keeps the original's
  // sampling policy, which no longer knows the task: the batch follows the copy's own policy.json.
  if (task.instruction !== undefined && !policyKnowsTask(ScriptedPolicy.load(sampling), task.instruction)) return task.policyFile;
  return sampling;
}

/** Whether a rule of `policy` is keyed on the task's instruction (its last_message or task pattern matches it); a turn script always is. */
export function policyKnowsTask(policy: ScriptedPolicy, instruction: string): boolean {
  const rules = policy.spec.rules ?? [];
  if (!rules.length) return true;
  return rules.some((r) => [r.when.last_message, r.when.task].some((p) => p !== undefined && new RegExp(p, 'i').test(instruction)));
}

/** Every turn the policy does not script ends the episode politely rather than sampling noise. */
const FALLBACK_TEXT = 'Done.';

export function policyAnswer(
  policy: ScriptedPolicy,
  messages: Parameters<ScriptedPolicy['decide']>[0],
  tools: Parameters<ScriptedPolicy['decide']>[1],
  seed?: unknown,
): FakeAnswer {
  // A request's seed draws a `choose` as the embedded engine draws it (one sampler per request), so a
  // batch's members (each with its own seed) make the same moves on either engine; no seed: Math.random.
  const rng = typeof seed === 'number' && Number.isSafeInteger(seed) ? new Prng(seed) : undefined;
  const decision = policy.decide(messages, tools, rng ? () => rng.next() : undefined);
  if (decision.kind === 'sample') return { content: FALLBACK_TEXT };
  return {
    content: decision.content ?? (decision.toolCalls.length ? null : FALLBACK_TEXT),
    tool_calls: decision.toolCalls.map((c) => ({ name: c.name, arguments: c.arguments })),
  };
}

function messageText(m: Parameters<ScriptedPolicy['decide']>[0][number]): string {
  if (typeof m.content === 'string') return m.content;
  if (Array.isArray(m.content)) return m.content.map((p) => (typeof p.text === 'string' ? p.text : '')).join('');
  return '';
}

/**
 * One embedded engine for a batch of several tasks: each call goes to the policy of the task whose
 * instruction appears in the conversation (every harness passes the instruction on verbatim, wrapped
 * in its own prompt); a call that names no task (a title request) gets the short fallback.
 */
export class TaskRoutedPolicy extends ScriptedPolicy {
  private readonly routes: { needle: string; policy: ScriptedPolicy }[];

  constructor(tasks: { instruction: string; policyFile: string }[]) {
    super({}, tasks.map((t) => t.policyFile).join(', '));
    this.routes = tasks.map((t) => ({ needle: t.instruction.trim().slice(0, 400), policy: ScriptedPolicy.load(t.policyFile) }));
  }

  override get samples(): boolean {
    return this.routes.some((r) => r.policy.samples);
  }

  override decide(
    messages: Parameters<ScriptedPolicy['decide']>[0],
    tools: Parameters<ScriptedPolicy['decide']>[1],
    random?: () => number,
  ): ReturnType<ScriptedPolicy['decide']> {
    const text = messages
      .filter((m) => m.role === 'user' || m.role === 'system')
      .map(messageText)
      .join('\n');
    const route = this.routes.find((r) => text.includes(r.needle));
    return route ? route.policy.decide(messages, tools, random) : { kind: 'script', content: FALLBACK_TEXT, toolCalls: [] };
  }
}

export async function startPolicyEngine(
  policyFile: string | ScriptedPolicy,
  kind = process.env.HARNESS_LAB_POLICY_ENGINE ?? 'embedded',
  /** Names clients reach it by besides loopback (a cluster Service in front of it). */
  allowedHosts?: readonly string[],
): Promise<PolicyEngine> {
  const policy = typeof policyFile === 'string' ? ScriptedPolicy.load(policyFile) : policyFile;
  if (kind === 'embedded') {
    const { startEmbeddedEngine } = await import('../engine/embedded-engine.js');
    const engine = await startEmbeddedEngine({ policy, ...(allowedHosts ? { allowedHosts } : {}) });
    const model = engine.engine.modelName;
    return {
      url: engine.url,
      model,
      description: `embedded engine (${model}) with scripted policy ${policy.source} at ${engine.url}`,
      close: () => engine.close(),
    };
  }
  if (kind !== 'fake') throw new Error(`HARNESS_LAB_POLICY_ENGINE must be embedded or fake, got '${kind}'`);
  const engine = await startFakeEngine({
    model: 'harness-lab/policy',
    ...(allowedHosts ? { allowedHosts } : {}),
    script: (request) => policyAnswer(policy, request.messages, request.tools, request.seed),
  });
  return {
    url: engine.url,
    model: engine.model,
    description: `scripted policy ${policy.source} (vLLM-shaped in-repo engine at ${engine.url})`,
    close: () => engine.close(),
  };
}
