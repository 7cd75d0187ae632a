// A compressed (radix) trie over integer sequences: the index behind RolloutGraph's prefix linking.
//
// Why a trie and not a table of prefix hashes: linking needs two questions answered per new call,
// and both are walks along ONE sequence, the new call's own:
//   * backward: which earlier call's prompt+completion is the longest prefix of my prompt?
//     -> walk my prompt down the trie; every "end" marker passed is a candidate.
//   * forward (late arrivals): which earlier calls have a prompt that starts with my prompt+completion?
//     -> walk my end down the trie, then visit the subtree below it, stopping at the first "end"
//        marker on each branch (any call ending there is a longer parent than me for everything below).
// Both cost O(length of my sequences) plus the calls actually re-parented, never a scan of earlier
// calls or of their tokens. Matches are exact by construction, so there is no collision to verify.
//
// Edges do not copy tokens: an edge label is a slice of the sequence that created it, because every
// sequence passing through a trie node shares the path to it. Memory is O(number of sequences).

/** A read-only integer sequence seen as `head ++ tail` (prompt ++ completion) without concatenating. */
export class Seq {
  readonly length: number;
  /** The head's length when the sequence was made: a token-in prompt array may grow at its end later. */
  readonly headLength: number;
  constructor(
    readonly head: readonly number[],
    readonly tail: readonly number[] = [],
  ) {
    this.headLength = head.length;
    this.length = head.length + tail.length;
  }
  at(i: number): number {
    const h = this.headLength;
    return (i < h ? this.head[i] : this.tail[i - h]) as number;
  }
}

export class TrieNode<M> {
  children: Map<number, TrieNode<M>> | null = null;
  /** Members whose end sequence (prompt ++ completion) is exactly the path to this node. */
  enders: M[] | null = null;
  /** Members whose prompt is exactly the path to this node. */
  prompts: M[] | null = null;
  constructor(
    /** Any sequence through this node; the edge label is seq[start, depth). */
    public seq: Seq,
    public start: number,
    readonly depth: number,
  ) {}
}

export class PrefixTrie<M> {
  readonly root = new TrieNode<M>(new Seq([]), 0, 0);
  /** Token comparisons plus trie steps since construction; a deterministic cost meter for tests and benches. */
  work = 0;

  /**
   * Walk `s[0, len)` from `from` (at depth `from.depth`, whose path must equal `s[0, from.depth)`),
   * creating and splitting nodes so that a node exists at exactly depth `len`, and return it.
   * `visit` sees every node on the way with depth in (from.depth, len], shallowest first.
   */
  descend(s: Seq, len: number, visit?: (node: TrieNode<M>) => void, from: TrieNode<M> = this.root): TrieNode<M> {
    let node = from;
    let d = from.depth;
    while (d < len) {
      this.work++;
      const first = s.at(d);
      let child = node.children?.get(first);
      if (!child) {
        child = new TrieNode<M>(s, d, len);
        (node.children ??= new Map()).set(first, child);
        visit?.(child);
        return child;
      }
      const stop = Math.min(child.depth, len);
      let i = d + 1;
      while (i < stop && child.seq.at(i) === s.at(i)) i++;
      this.work += i - d;
      if (i < child.depth) {
        // Diverged (or ended) inside the edge: split it at i. The lower half keeps its own label.
        const mid = new TrieNode<M>(child.seq, d, i);
        mid.children = new Map([[child.seq.at(i), child]]);
        child.start = i;
        node.children!.set(first, mid);
        child = mid;
      }
      node = child;
      d = i;
      visit?.(node);
    }
    return node;
  }

  /**
   * Visit `start` and its subtree in depth-first order. `enter` returns false to skip a node's
   * children (the caller's pruning rule).
   */
  walkBelow(start: TrieNode<M>, enter: (node: TrieNode<M>) => boolean): void {
    const stack = [start];
    while (stack.length > 0) {
      const node = stack.pop()!;
      this.work++;
      if (!enter(node) || !node.children) continue;
      for (const child of node.children.values()) stack.push(child);
    }
  }
}
