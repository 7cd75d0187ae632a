// Opening rollouts from disk for the viewer, the report and `atif-check`: a rollout document
// (`*.rollout.json`), a captured session file (the store's `<session>.jsonl`) or TrainingTrace lines
// (`*.jsonl` from `harness-lab export`), plus the harness's ATIF trajectory when one is attached or found.
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import type { RolloutDocument, RolloutGraphJson } from '../capture/rollout.js';
import { parseRolloutDocument, parseTraceLines, readRolloutFile, RolloutFileError, rolloutFileKind } from '../capture/rollout-file.js';
import type { TrainingTrace } from '../capture/trace.js';
import { AtifParseError, joinContinuations, parseAtif, type AtifTrajectory } from '../harness/atif.js';
import { atifCheck, type AtifCheckResult } from '../harness/atif-check.js';
import { attachRescore, rescorePathFor } from './rescore-attach.js';
import { VIEWER_DATA_VERSION, viewerDataFromRollout, type ViewerData, type ViewerTurn } from '../protocol/viewer-data.js';

export interface LoadedRollout {
  data: ViewerData;
  /** Null for TrainingTrace files, which hold no raw calls (no ATIF check possible). */
  doc: RolloutDocument | null;
  path: string;
}

/** A rollout from a file's text; what the file holds is decided by rolloutFileKind, `path` names it in errors. */
export function rolloutFromText(text: string, path: string): LoadedRollout {
  const base = basename(path);
  const kind = rolloutFileKind(text);
  if (kind === 'session') {
    // The store's own reader reads the file (its codec and torn-line rules), as every other reader does.
    const { doc, info } = readRolloutFile(path, { includeDiscarded: true, includeTraces: false, checkCalls: true });
    return { data: viewerDataFromRollout(doc, { key: path, title: `${base} (session ${info.session_id})` }), doc, path };
  }
  if (kind === 'traces') return { data: viewerDataFromTraces(parseTraceLines(text, base), { key: path, title: base }), doc: null, path };
  const doc = parseRolloutDocument(text, base);
  return { data: viewerDataFromRollout(doc, { key: path, title: base }), doc, path };
}

const ROLE_RANK = { agent: 2, auxiliary: 1, discarded: 0 } as const;

/** TrainingTrace lines -> ViewerData: the traces' paths merged by node id into one graph. */
export function viewerDataFromTraces(traces: readonly TrainingTrace[], opts: { key: string; title: string }): ViewerData {
  const turns = new Map<string, ViewerTurn>();
  const parentOf = new Map<string, string | null>();
  for (const tr of traces) {
    tr.turns.forEach((t, k) => {
      parentOf.set(t.node_id, k === 0 ? null : tr.node_ids[k - 1]!);
      const p = t.prompt_token_ids.length;
      const trained = tr.trainable && t.completion_token_ids.length > 0 && t.loss_mask.slice(p).every((m) => m === 1);
      const had = turns.get(t.node_id);
      if (had) {
        if (ROLE_RANK[tr.role] > ROLE_RANK[had.role]) had.role = tr.role;
        had.trained ||= trained;
        return;
      }
      const hasLogprobs = t.loss_mask.slice(p).some((m) => m === 1);
      turns.set(t.node_id, {
        node_id: t.node_id,
        index: t.metadata.index,
        parent_id: null,
        root_id: tr.root_id,
        children: [],
        discarded: tr.role === 'discarded',
        role: tr.role,
        prompt_ids: t.prompt_token_ids,
        sampled_ids: t.completion_token_ids,
        logprobs: hasLogprobs ? t.per_token_logps : null,
        trained,
        top: null,
        sampled_text: null,
        flags:
          hasLogprobs || t.completion_token_ids.length === 0
            ? []
            : ['masked in the trace (mask 0): no usable behaviour logprobs were captured for this turn'],
        findings: [],
        finish_reason: t.response.choices[0]?.finish_reason ?? null,
        n_tools: t.metadata.n_tools,
        model: t.metadata.model,
        latency_ms: null,
        started_at: null,
        request_messages: t.request.messages,
        response_message: t.response.choices[0]?.message ?? null,
        raw: null,
      });
    });
  }
  const list = [...turns.values()].sort((a, b) => a.index - b.index || (a.node_id < b.node_id ? -1 : 1));
  for (const t of list) {
    t.parent_id = parentOf.get(t.node_id) ?? null;
    if (t.parent_id) turns.get(t.parent_id)?.children.push(t.node_id);
  }
  const graph: RolloutGraphJson = {
    nodes: list.map((t) => ({
      node_id: t.node_id,
      index: t.index,
      parent_id: t.parent_id,
      root_id: t.root_id,
      children: t.children,
      discarded: t.discarded,
      role: t.role,
    })),
    roots: list.filter((t) => t.parent_id === null).map((t) => t.node_id),
    leaves: list.filter((t) => t.children.length === 0).map((t) => t.node_id),
    forks: list.filter((t) => t.children.length > 1).map((t) => ({ parent_id: t.node_id, children: t.children })),
  };
  const first = traces[0]!;
  return {
    version: VIEWER_DATA_VERSION,
    key: opts.key,
    title: opts.title,
    source: 'trace',
    session_id: first.session_id,
    capture_level: 'tokens',
    rollout_type: 'train',
    metadata: {},
    stats: null,
    validation: [...new Set(traces.flatMap((t) => t.validation))],
    graph,
    turns: list,
    token_texts: {},
    atif: null,
  };
}

export function loadRollout(path: string): LoadedRollout {
  const abs = resolve(path);
  if (!existsSync(abs)) throw new RolloutFileError(`no such file: ${path}`);
  const rollout = rolloutFromText(readFileSync(abs, 'utf8'), abs);
  // A `harness-lab rescore` report next to the rollout colours its sampled tokens by drift.
  attachRescore(rollout.data, rescorePathFor(abs));
  return rollout;
}

/** Where a harness's trajectory usually sits relative to a rollout file (Harbor trial layout included). */
export function findTrajectory(rolloutPath: string): string | null {
  const dir = dirname(resolve(rolloutPath));
  const stem = basename(rolloutPath).replace(/\.(rollout\.json|jsonl|json)$/i, '');
  const candidates = [
    join(dir, `${stem}.trajectory.json`),
    join(dir, 'trajectory.json'),
    join(dir, 'agent', 'trajectory.json'),
    join(dir, '..', 'agent', 'trajectory.json'),
  ];
  return candidates.find((c) => existsSync(c)) ?? null;
}

/** A trajectory file with its continuation files (context-summarisation splits) joined. */
export async function loadTrajectory(path: string): Promise<AtifTrajectory> {
  const abs = resolve(path);
  if (!existsSync(abs)) throw new AtifParseError(`no such trajectory file: ${path}`);
  const first = parseAtif(await readFile(abs, 'utf8'), basename(abs));
  return joinContinuations(first, async (ref) => {
    const file = resolve(dirname(abs), ref);
    return existsSync(file) ? parseAtif(await readFile(file, 'utf8'), basename(file)) : null;
  });
}

/** Run the cross-check of a loaded rollout against a trajectory file. */
export async function checkTrajectory(rollout: LoadedRollout, trajectoryPath: string): Promise<AtifCheckResult> {
  if (!rollout.doc)
    throw new RolloutFileError(
      `${basename(rollout.path)} holds TrainingTrace lines, which do not keep every captured call; cross-check the rollout document or the session file instead`,
    );
  return atifCheck(rollout.doc, await loadTrajectory(trajectoryPath));
}
