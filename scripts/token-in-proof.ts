// The token-in proof (#25, docs/token-in-results.md): every registry harness on the sum-numbers task
// (four turns: three shell calls and the answer) in a Docker sandbox, the embedded engine answering with
// a policy that reasons before every action and one that writes its tool calls its own way, once with
// the proxy rendering (token in, token out) and once with the engine rendering (chat completions).
// Per run: the reward, samples per rollout, tokens sent to the trainer against the merged length, and
// per agent turn how its prompt was made (bridge or full render, and why), whether the prompt ids the
// engine received (recorded by a relay between proxy and engine) are the bridge construction (the
// anchor's exact prompt + sampled ids, then the bridge), and the bridged prompt's drift from a full
// render of the same messages.
//
//   node --import tsx scripts/token-in-proof.ts [--harnesses a,b] [--policies thinking,raw-args]
//     [--modes proxy,engine] [--out FILE.md] [--json FILE.json] [--jsonl FILE.jsonl]
//   node --import tsx scripts/token-in-proof.ts --table FILE.jsonl   (the table of runs already made)
//
// Heavy (one Docker rollout per harness, policy and mode, about a minute each on two cores): run it
// once, not in a loop. The integration test (test/integration/token-in-harnesses.test.ts) uses the
// same functions.
import { once } from 'node:events';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { CaptureProxy } from '../src/capture/proxy.js';
import { sampleAccount, type SampleAccount } from '../src/capture/samples.js';
import type { CallRecord } from '../src/capture/types.js';
import { startEmbeddedEngine, type EmbeddedEngine } from '../src/engine/embedded-engine.js';
import { shippedPoliciesDir } from '../src/engine/policy.js';
import { harnessNames } from '../src/harness/registry.js';
import { validateHarness } from '../src/sandbox/validate.js';

export const REPO = join(__dirname, '..');
export const PROOF_TASK = join(REPO, 'examples', 'tasks', 'sum-numbers');
export const PROOF_POLICIES = { thinking: 'sum-numbers-thinking', 'raw-args': 'sum-numbers-raw-args' } as const;
export type ProofPolicy = keyof typeof PROOF_POLICIES;
export type ProofMode = 'proxy' | 'engine';

/** Every harness of the registry: the reference one, then those the issue measured splitting every turn, then the rest. */
export function proofHarnesses(): string[] {
  const first = ['react', 'gemini-cli', 'claude-code', 'openclaw', 'continue', 'codex'];
  const all = harnessNames();
  return [...first.filter((n) => all.includes(n)), ...all.filter((n) => !first.includes(n))];
}

/**
 * A pass-through between the proxy and the engine that keeps the token-id prompts the engine was sent
 * (`POST /v1/completions` with a list of ids): what the engine received, independent of what the
 * proxy recorded.
 */
export class PromptRecorder {
  private constructor(
    private readonly server: Server,
    readonly url: string,
    readonly prompts: number[][],
  ) {}

  static async start(target: string): Promise<PromptRecorder> {
    const to = new URL(target);
    const prompts: number[][] = [];
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        if (req.method === 'POST' && req.url?.startsWith('/v1/completions')) {
          try {
            const prompt = (JSON.parse(body.toString('utf8')) as { prompt?: unknown }).prompt;
            if (Array.isArray(prompt) && prompt.every((x) => typeof x === 'number')) prompts.push(prompt as number[]);
          } catch {
            // not JSON: the engine will say so
          }
        }
        const out = httpRequest(
          { host: to.hostname, port: to.port, path: req.url, method: req.method, headers: { ...req.headers, host: to.host } },
          (up) => {
            res.writeHead(up.statusCode ?? 502, up.headers);
            up.pipe(res);
          },
        );
        out.on('error', (err) => {
          if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: `relay: ${err.message}` } }));
        });
        out.end(body);
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return new PromptRecorder(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`, prompts);
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}

export interface TurnProof {
  call_id: string;
  index: number;
  kind: 'bridge' | 'full' | 'chat';
  /** Why a full render (a new root), when it is one. */
  new_root_reason: string | null;
  /** The engine received exactly the ids the proxy recorded as this call's prompt. */
  engine_received: boolean | null;
  /** Bridge turns: the prompt starts with the anchor's exact prompt + sampled ids, and the bridge runs to its end. */
  bridge_construction: boolean | null;
  /** Anchor tokens a full render of the same messages would change (from their first difference to the anchor's end). */
  drift_tokens: number | null;
  /** Bridged prompt length minus the full render's (TRL's sweep reports this: e.g. +2 per tool call). */
  length_delta: number | null;
  n_prompt: number;
  n_sampled: number;
}

export interface ProofRun {
  harness: string;
  policy: ProofPolicy;
  mode: ProofMode;
  reward: number | null;
  /** The rollout passed the capture contract and ATIF checks of `validate`. */
  contract_ok: boolean;
  samples: SampleAccount | null;
  /** Agent turns in arrival order. */
  turns: TurnProof[];
  /** FATAL findings on the rollout's calls or paths. */
  fatal: string[];
  error: string | null;
  seconds: number;
}

const same = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/** Per-turn facts of one rollout's agent calls (graph nodes on an agent path). */
export function turnProofs(calls: readonly CallRecord[], agentIds: ReadonlySet<string>, received: readonly number[][] | null): TurnProof[] {
  const byId = new Map(calls.map((c) => [c.call_id, c]));
  return calls
    .filter((c) => agentIds.has(c.call_id))
    .map((c) => {
      const prompt = c.prompt_token_ids ?? [];
      const r = c.render;
      let construction: boolean | null = null;
      if (r?.kind === 'bridge') {
        const anchor = r.anchor_call_id ? byId.get(r.anchor_call_id) : undefined;
        const anchorIds = anchor ? [...(anchor.prompt_token_ids ?? []), ...(anchor.completion_token_ids ?? [])] : null;
        construction =
          anchorIds !== null &&
          r.anchor_tokens === anchorIds.length &&
          same(prompt.slice(0, anchorIds.length), anchorIds) &&
          r.bridge_span !== null &&
          r.bridge_span[0] >= anchorIds.length &&
          r.bridge_span[1] === prompt.length;
      }
      return {
        call_id: c.call_id,
        index: c.index,
        kind: r ? r.kind : 'chat',
        new_root_reason: r?.new_root_reason ?? null,
        engine_received: received === null ? null : received.some((p) => same(p, prompt)),
        bridge_construction: construction,
        drift_tokens: r?.full_render?.drift_tokens ?? null,
        length_delta: r?.full_render ? prompt.length - r.full_render.tokens : null,
        n_prompt: prompt.length,
        n_sampled: c.completion_token_ids?.length ?? 0,
      };
    });
}

/** One harness on the proof task through `proxy` (already rendering in `mode`). */
export async function proofRun(opts: {
  harness: string;
  policy: ProofPolicy;
  mode: ProofMode;
  proxy: CaptureProxy;
  model: string;
  recorder: PromptRecorder | null;
  outDir: string;
}): Promise<ProofRun> {
  const started = Date.now();
  const base = { harness: opts.harness, policy: opts.policy, mode: opts.mode };
  try {
    const before = opts.recorder?.prompts.length ?? 0;
    const table = await validateHarness({
      harness: opts.harness,
      taskDir: PROOF_TASK,
      sandbox: 'docker',
      proxy: opts.proxy,
      model: opts.model,
      outDir: opts.outDir,
      handleSignals: false,
    });
    const doc = table.rollout.rollout;
    const agentIds = new Set((doc?.graph.nodes ?? []).filter((n) => n.role === 'agent' && !n.discarded).map((n) => n.node_id));
    const received = opts.recorder ? opts.recorder.prompts.slice(before) : null;
    const fatal = [
      ...(doc?.validation ?? []),
      ...(doc?.calls ?? []).flatMap((c) => c.findings),
      ...(doc?.sequences ?? []).flatMap((s) => s.validation),
    ].filter((f) => f.startsWith('[FATAL]'));
    return {
      ...base,
      reward: table.rollout.reward,
      contract_ok: table.ok,
      samples: doc ? sampleAccount(doc) : null,
      turns: doc ? turnProofs(doc.calls, agentIds, opts.mode === 'proxy' ? received : null) : [],
      fatal: [...new Set(fatal)],
      error:
        table.rollout.error ??
        (table.ok
          ? null
          : table.rows
              .filter((r) => !r.ok)
              .map((r) => `${r.check}: ${r.detail}`)
              .join('; ')),
      seconds: (Date.now() - started) / 1000,
    };
  } catch (err) {
    return {
      ...base,
      reward: null,
      contract_ok: false,
      samples: null,
      turns: [],
      fatal: [],
      error: (err as Error).message,
      seconds: (Date.now() - started) / 1000,
    };
  }
}

/** An engine for one policy, a relay that records its prompts, and a capture proxy per mode. */
export class ProofRig {
  private constructor(
    readonly engine: EmbeddedEngine,
    readonly recorder: PromptRecorder,
    readonly proxies: Record<ProofMode, CaptureProxy>,
  ) {}

  static async start(policy: ProofPolicy, modes: readonly ProofMode[]): Promise<ProofRig> {
    const dir = shippedPoliciesDir();
    if (!dir) throw new Error('examples/policies/ not found');
    const engine = await startEmbeddedEngine({ policy: join(dir, `${PROOF_POLICIES[policy]}.json`) });
    const recorder = await PromptRecorder.start(engine.url);
    const proxies = {} as Record<ProofMode, CaptureProxy>;
    try {
      for (const mode of modes) {
        proxies[mode] = await CaptureProxy.start({
          engineUrl: recorder.url,
          model: engine.engine.modelName,
          dataDir: mkdtempSync(join(tmpdir(), `hl-tito-${mode}-`)),
          captureLevel: 'tokens',
          render: mode,
          renderModel: engine.modelPath,
          // The drift table reports every bridged turn's difference from a full render.
          fullRenderCheck: 'always',
        });
        if (mode === 'proxy') await proxies[mode].tokenInEngine();
      }
    } catch (err) {
      for (const p of Object.values(proxies)) await p.close();
      await recorder.close();
      await engine.close();
      throw err;
    }
    return new ProofRig(engine, recorder, proxies);
  }

  async close(): Promise<void> {
    for (const p of Object.values(this.proxies)) await p.close();
    await this.recorder.close();
    await this.engine.close();
  }
}

/**
 * Harness by harness, each policy and mode: a harness that the machine's time runs out on still has
 * every cell of the ones before it. `done` (harness, policy, mode) runs are skipped (a resumed matrix).
 */
export async function runProofMatrix(opts: {
  harnesses: string[];
  policies: ProofPolicy[];
  modes: ProofMode[];
  log?: (line: string) => void;
  onRun?: (run: ProofRun) => void;
  done?: ReadonlySet<string>;
}): Promise<ProofRun[]> {
  const runs: ProofRun[] = [];
  const rigs = new Map<ProofPolicy, ProofRig>();
  try {
    for (const policy of opts.policies) rigs.set(policy, await ProofRig.start(policy, opts.modes));
    for (const harness of opts.harnesses) {
      for (const policy of opts.policies) {
        const rig = rigs.get(policy)!;
        for (const mode of opts.modes) {
          if (opts.done?.has(runKey({ harness, policy, mode }))) continue;
          const run = await proofRun({
            harness,
            policy,
            mode,
            proxy: rig.proxies[mode],
            model: rig.engine.engine.modelName,
            recorder: rig.recorder,
            outDir: mkdtempSync(join(tmpdir(), 'hl-tito-out-')),
          });
          runs.push(run);
          opts.onRun?.(run);
          opts.log?.(formatRunLine(run));
        }
      }
    }
  } finally {
    for (const rig of rigs.values()) await rig.close();
  }
  return runs;
}

export const runKey = (r: Pick<ProofRun, 'harness' | 'policy' | 'mode'>) => `${r.harness}/${r.policy}/${r.mode}`;

export function formatRunLine(r: ProofRun): string {
  const s = r.samples;
  const turns = r.turns
    .map((t) => (t.kind === 'bridge' ? `b${t.drift_tokens ?? '?'}` : t.kind === 'full' ? `F(${t.new_root_reason ?? 'first'})` : 'c'))
    .join(' ');
  return `${r.policy} ${r.mode} ${r.harness}: reward ${r.reward ?? '-'}, ${s ? `${s.samples} sample(s), ${s.tokens_to_trainer}/${s.merged_tokens} tokens` : 'no account'}, turns [${turns}]${r.error ? `, ERROR ${r.error}` : ''} (${r.seconds.toFixed(0)} s)`;
}

const n = (x: number) => x.toLocaleString('en-US');

/**
 * The results table (markdown): per harness and policy, both modes side by side, and the token-in
 * turns: how each prompt was made, the drift of a full render from the bridge, and the two checks.
 */
export function formatProofTable(runs: readonly ProofRun[]): string {
  const key = (r: ProofRun) => `${r.policy}\u0000${r.harness}`;
  const rows = new Map<string, { policy: ProofPolicy; harness: string; proxy?: ProofRun; engine?: ProofRun }>();
  for (const r of runs) {
    const row = rows.get(key(r)) ?? { policy: r.policy, harness: r.harness };
    row[r.mode] = r;
    rows.set(key(r), row);
  }
  const cell = (r: ProofRun | undefined) => {
    if (!r) return ['–', '–', '–'];
    if (!r.samples) return [`error: ${(r.error ?? 'no capture').slice(0, 60)}`, '–', '–'];
    return [
      r.reward !== null ? String(r.reward) : r.error ? `none (${r.error.split(';')[0]!.slice(0, 50)})` : '–',
      String(r.samples.samples),
      `${n(r.samples.tokens_to_trainer)} (${(r.samples.tokens_to_trainer / r.samples.merged_tokens).toFixed(2)}x)`,
    ];
  };
  const signed = (x: number | null) => (x === null ? '?' : x > 0 ? `+${x}` : String(x));
  const drift = (r: ProofRun | undefined) =>
    r
      ? r.turns
          .map((t) =>
            t.kind === 'bridge'
              ? `${t.drift_tokens ?? '?'} (${signed(t.length_delta)})`
              : `new root (${t.new_root_reason ?? 'first call'})`,
          )
          .join(', ')
      : '–';
  const checks = (r: ProofRun | undefined) => {
    if (!r || r.turns.length === 0) return '–';
    const bridged = r.turns.filter((t) => t.kind === 'bridge');
    const received = r.turns.filter((t) => t.engine_received).length;
    const built = bridged.filter((t) => t.bridge_construction).length;
    return `${received}/${r.turns.length} received, ${built}/${bridged.length} bridges exact`;
  };
  const lines = [
    '| policy | harness | token-in reward | token-in samples | token-in tokens to trainer (x merged) | chat reward | chat samples | chat tokens to trainer (x merged) | token-in drift per turn: anchor tokens a full render changes (bridge length − full render length) | engine prompt = construction |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const row of rows.values()) {
    const [pr, ps, pt] = cell(row.proxy);
    const [cr, cs, ct] = cell(row.engine);
    lines.push(
      `| ${row.policy} | ${row.harness} | ${pr} | ${ps} | ${pt} | ${cr} | ${cs} | ${ct} | ${drift(row.proxy)} | ${checks(row.proxy)} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      harnesses: { type: 'string' },
      policies: { type: 'string' },
      modes: { type: 'string' },
      out: { type: 'string' },
      json: { type: 'string' },
      jsonl: { type: 'string' },
      table: { type: 'string' },
    },
  });
  if (values.table) {
    const runs = readFileSync(values.table, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as ProofRun);
    process.stdout.write(formatProofTable(runs));
    return;
  }
  const list = (v: string | undefined) =>
    v
      ? v
          .split(',')
          .map((x) => x.trim())
          .filter(Boolean)
      : null;
  const harnesses = list(values.harnesses) ?? proofHarnesses();
  const policies = (list(values.policies) ?? Object.keys(PROOF_POLICIES)) as ProofPolicy[];
  for (const p of policies)
    if (!(p in PROOF_POLICIES)) throw new Error(`--policies: unknown '${p}' (${Object.keys(PROOF_POLICIES).join(', ')})`);
  const modes = (list(values.modes) ?? ['proxy', 'engine']) as ProofMode[];
  for (const m of modes) if (m !== 'proxy' && m !== 'engine') throw new Error(`--modes: unknown '${m}' (proxy, engine)`);
  // --jsonl: each run appended as it ends, so a long matrix stopped half way keeps what it measured;
  // runs already in the file (without an error) are not made again.
  const jsonl = values.jsonl;
  const earlier =
    jsonl && existsSync(jsonl)
      ? readFileSync(jsonl, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as ProofRun)
      : [];
  const done = new Set(earlier.filter((r) => r.error === null).map(runKey));
  const fresh = await runProofMatrix({
    harnesses,
    policies,
    modes,
    done,
    log: (l) => process.stderr.write(`${l}\n`),
    onRun: jsonl ? (r) => appendFileSync(jsonl, `${JSON.stringify(r)}\n`) : undefined,
  });
  const runs = [...earlier.filter((r) => done.has(runKey(r))), ...fresh];
  const table = formatProofTable(runs);
  process.stdout.write(table);
  if (values.out) writeFileSync(values.out, table);
  if (values.json) writeFileSync(values.json, `${JSON.stringify(runs, null, 2)}\n`);
}

if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(`token-in-proof: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}
