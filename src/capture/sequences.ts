// Root-to-leaf paths -> training sequences with loss masks (protocol 10.4 and 11.1).
//
// A path concatenates, per node, its context span (the root's whole prompt; for a child, the prompt
// after the parent's prompt+completion: tool results, user turns, template glue) as mask 0, then its
// sampled ids as mask 1 with their behaviour logprobs. A turn without usable logprobs keeps its tokens
// as context (mask 0, logprob 0.0): a target without a real behaviour logprob would make the
// importance ratio a ratio against an invented number.
import { checkSequence, finding, isFatal } from './findings.js';
import type { GraphNode, RolloutGraph } from './graph.js';

export type PathRole = 'agent' | 'auxiliary' | 'discarded';

export interface FlatPath {
  input_ids: number[];
  loss_mask: number[];
  logprobs: number[];
  /** Length of the root's prompt: the tokens before the first sampled token. */
  prompt_len: number;
}

export interface TrainingSequence extends FlatPath {
  role: PathRole;
  root_id: string;
  node_ids: string[];
  n_turns: number;
  n_trainable: number;
  /** Lengths of the runs of mask 1, in order: the join key against a harness's own trace (ATIF). */
  turn_lengths: number[];
  trainable: boolean;
  validation: string[];
}

/** Flatten one root-to-leaf path. Null when a node on it has no prompt ids: no exact token sequence exists. */
export function flattenPath(path: readonly GraphNode[]): FlatPath | null {
  const input_ids: number[] = [];
  const loss_mask: number[] = [];
  const logprobs: number[] = [];
  let prompt_len = 0;
  let parent: GraphNode | null = null;
  for (const node of path) {
    if (node.domain !== 'tokens') return null;
    const from = parent ? parent.promptLength + parent.sampled_ids.length : 0;
    const prompt = node.prompt_ids;
    for (let i = from; i < prompt.length; i++) {
      input_ids.push(prompt[i]!);
      loss_mask.push(0);
      logprobs.push(0);
    }
    if (!parent) prompt_len = input_ids.length;
    const lps = node.sampled_logprobs;
    const usable = lps !== null && lps.length === node.sampled_ids.length;
    for (let i = 0; i < node.sampled_ids.length; i++) {
      input_ids.push(node.sampled_ids[i]!);
      loss_mask.push(usable ? 1 : 0);
      logprobs.push(usable ? lps[i]! : 0);
    }
    parent = node;
  }
  return { input_ids, loss_mask, logprobs, prompt_len };
}

export function turnLengths(mask: readonly number[]): number[] {
  const out: number[] = [];
  let run = 0;
  for (const m of mask) {
    if (m === 1) run++;
    else if (run) {
      out.push(run);
      run = 0;
    }
  }
  if (run) out.push(run);
  return out;
}

/**
 * Roles of paths (10.4). Tools only discriminate when some live paths carry a tool manifest and others
 * do not (an agent chain plus a toolless title generator). A harness that never sends tools (it parses
 * actions from text) has every live path as agent work; at `tokens` level only those with trainable tokens.
 */
export function assignRoles(
  paths: readonly (readonly GraphNode[])[],
  nTrainable: readonly number[],
  discarded: ReadonlySet<string>,
  trainableCapture: boolean,
): PathRole[] {
  const isDiscarded = (p: readonly GraphNode[]) => discarded.has(p[p.length - 1]!.node_id);
  const hasTools = (p: readonly GraphNode[]) => p.some((n) => n.n_tools > 0);
  const anyTools = paths.some((p) => !isDiscarded(p) && hasTools(p));
  return paths.map((p, i) => {
    if (isDiscarded(p)) return 'discarded';
    if (anyTools) return hasTools(p) ? 'agent' : 'auxiliary';
    if (trainableCapture) return nTrainable[i]! > 0 ? 'agent' : 'auxiliary';
    return 'agent';
  });
}

export interface SequenceOptions {
  /** `tokens` capture and not an evaluation session: only then are sequences validated or trainable. */
  trainableCapture: boolean;
  /** Precomputed `graph.discarded()`, to avoid recomputing it. */
  discarded?: ReadonlySet<string>;
}

/**
 * A sampled turn shared by several live agent paths (a fork whose branches all continued) is trained
 * in one row only: the path whose leaf came last (the main one, what a one-row-per-rollout export
 * takes) keeps it, earlier paths keep it as context (mask 0, logprob 0). Returns, per path, the turns
 * it gave up. Mutates `flats`.
 */
function trainOnce(paths: readonly (readonly GraphNode[])[], flats: (FlatPath | null)[], roles: readonly PathRole[]): GraphNode[][] {
  const claimed = new Set<string>();
  const out: GraphNode[][] = paths.map(() => []);
  for (let i = paths.length - 1; i >= 0; i--) {
    const flat = flats[i];
    if (!flat || roles[i] !== 'agent') continue;
    let parent: GraphNode | null = null;
    let pos = 0;
    for (const node of paths[i]!) {
      pos += node.promptLength - (parent ? parent.promptLength + parent.sampled_ids.length : 0);
      const n = node.sampled_ids.length;
      if (claimed.has(node.node_id)) {
        let had = false;
        for (let k = pos; k < pos + n; k++) {
          if (flat.loss_mask[k] === 1) had = true;
          flat.loss_mask[k] = 0;
          flat.logprobs[k] = 0;
        }
        if (had) out[i]!.push(node);
      } else claimed.add(node.node_id);
      pos += n;
      parent = node;
    }
  }
  return out;
}

/**
 * One sequence per root-to-leaf path (discarded ones included, labelled), in leaf arrival order,
 * aligned with `graph.paths()`. `trainable` here is the row's own verdict; rollout-level findings can
 * still veto it (rollout.ts).
 */
export function buildSequences(graph: RolloutGraph, opts: SequenceOptions): { paths: GraphNode[][]; sequences: TrainingSequence[] } {
  const paths = graph.paths();
  const discarded = opts.discarded ?? graph.discarded();
  const flats = paths.map(flattenPath);
  let nTrainable = flats.map((f) => (f ? f.loss_mask.reduce((a, b) => a + b, 0) : 0));
  const roles = assignRoles(paths, nTrainable, discarded, opts.trainableCapture);
  const repeated = opts.trainableCapture ? trainOnce(paths, flats, roles) : paths.map(() => []);
  nTrainable = flats.map((f) => (f ? f.loss_mask.reduce((a, b) => a + b, 0) : 0));
  const sequences = paths.map((path, i): TrainingSequence => {
    const flat = flats[i] ?? { input_ids: [], loss_mask: [], logprobs: [], prompt_len: 0 };
    const validation: string[] = [];
    if (opts.trainableCapture) {
      if (!flats[i]) {
        const bare = path.find((n) => n.domain !== 'tokens')!;
        validation.push(
          finding(
            'FATAL',
            'no_prompt_ids',
            `turn ${bare.index} (${bare.node_id}) has no prompt token ids, so this path has no exact token sequence`,
          ),
        );
      } else {
        validation.push(...checkSequence(flat));
        const shared = repeated[i]!;
        if (shared.length > 0) {
          const which = shared.map((n) => `turn ${n.index} (${n.sampled_ids.length} tokens)`).join(', ');
          validation.push(
            finding('INFO', 'repeated_target', `${which}: shared with a later agent path that trains them; context here (mask 0)`),
          );
        }
        const contextOnly = path.filter((n) => n.sampled_ids.length > 0 && n.sampled_logprobs === null);
        if (contextOnly.length > 0) {
          const which = contextOnly.map((n) => `turn ${n.index} (${n.sampled_ids.length} tokens)`).join(', ');
          validation.push(finding('WARN', 'untrained_turns', `${which}: no usable behaviour logprobs, kept as context (mask 0)`));
        }
      }
    }
    const role = roles[i]!;
    return {
      role,
      root_id: path[0]!.node_id,
      node_ids: path.map((n) => n.node_id),
      n_turns: path.length,
      prompt_len: flat.prompt_len,
      n_trainable: nTrainable[i]!,
      turn_lengths: turnLengths(flat.loss_mask),
      input_ids: flat.input_ids,
      loss_mask: flat.loss_mask,
      logprobs: flat.logprobs,
      trainable: opts.trainableCapture && role === 'agent' && !validation.some(isFatal),
      validation,
    };
  });
  return { paths, sequences };
}
