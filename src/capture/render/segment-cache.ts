// Tokenizing a long conversation once, not every turn. A tokenizer splits the text at its added
// special tokens before normalising, pre-tokenizing and merging, so the ids of
// `A<|im_end|>B` are the ids of `A<|im_end|>` followed by those of `B`: text cut right after a special
// token tokenizes piece by piece to exactly the ids of the whole. The cache keeps the ids of each such
// piece (a system prompt, one message) by its text, so a turn that resends a 128k-token history
// tokenizes only the pieces it has not seen: the new messages (and, across the sessions of a group,
// the shared prompt is tokenized once). The tokenizing itself is always the library's; only the cut
// points are chosen here, and only at special tokens that strip no whitespace around them (an
// `lstrip`/`rstrip` token reaches into its neighbours, so it is never a cut point).

/** An added token as tokenizer.json lists it. */
export interface AddedTokenSpec {
  content?: unknown;
  special?: unknown;
  lstrip?: unknown;
  rstrip?: unknown;
  single_word?: unknown;
}

/** The texts after which a tokenizer's output splits cleanly: special, non-stripping added tokens. */
export function cutTokens(addedTokens: readonly AddedTokenSpec[]): string[] {
  return addedTokens
    .filter((t) => typeof t.content === 'string' && t.content !== '' && t.special === true && !t.lstrip && !t.rstrip && !t.single_word)
    .map((t) => t.content as string);
}

const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export interface SegmentCacheStats {
  hits: number;
  misses: number;
  /** Characters of text tokenized by the library (misses). */
  encodedChars: number;
  entries: number;
  cachedChars: number;
}

export class SegmentCache {
  private readonly cut: RegExp | null;
  /** Insertion order is recency: a hit moves its entry to the end; the oldest are evicted first. */
  private readonly entries = new Map<string, Int32Array<ArrayBuffer>>();
  private chars = 0;
  private readonly stats = { hits: 0, misses: 0, encodedChars: 0 };

  constructor(
    cutAfter: readonly string[],
    private readonly encodePiece: (text: string) => number[],
    /** Characters of text kept (with their ids); 32M characters is about 8M tokens. */
    private readonly maxChars = 32_000_000,
    /** Pieces shorter than this are tokenized every time (cheaper than keeping them). */
    private readonly minChars = 256,
  ) {
    // Longest first, so a token that another one starts with never cuts the longer one short.
    const sorted = [...new Set(cutAfter)].sort((a, b) => b.length - a.length);
    this.cut = sorted.length ? new RegExp(sorted.map(escapeRegex).join('|'), 'g') : null;
  }

  /** The text cut after each special token (the pieces concatenate to the text). */
  pieces(text: string): string[] {
    if (!this.cut) return [text];
    const out: string[] = [];
    let from = 0;
    this.cut.lastIndex = 0;
    for (let m = this.cut.exec(text); m; m = this.cut.exec(text)) {
      const end = m.index + m[0].length;
      out.push(text.slice(from, end));
      from = end;
    }
    if (from < text.length) out.push(text.slice(from));
    return out;
  }

  /**
   * The ids of `text`, as a typed array: pieces are kept as typed arrays and the result is one
   * allocation and a copy per piece. At 108k tokens, pushing the ids into a JS array and converting
   * it for the main thread cost about 5 ms a full render and left 2 MB of garbage in a thread whose
   * heap (the vocabulary) is 130 MB, so each major collection there is long.
   */
  encode(text: string): Int32Array<ArrayBuffer> {
    const parts: Int32Array<ArrayBuffer>[] = [];
    let total = 0;
    const add = (ids: Int32Array<ArrayBuffer>) => {
      parts.push(ids);
      total += ids.length;
    };
    // Short neighbours are tokenized together: fewer library calls for a bridge's glue and short turns.
    let run = '';
    const flush = () => {
      if (run === '') return;
      this.stats.encodedChars += run.length;
      add(Int32Array.from(this.encodePiece(run)));
      run = '';
    };
    for (const piece of this.pieces(text)) {
      if (piece.length < this.minChars) {
        run += piece;
        continue;
      }
      flush();
      let ids = this.entries.get(piece);
      if (ids) {
        this.stats.hits++;
        this.entries.delete(piece);
        this.entries.set(piece, ids);
      } else {
        this.stats.misses++;
        this.stats.encodedChars += piece.length;
        ids = Int32Array.from(this.encodePiece(piece));
        this.keep(piece, ids);
      }
      add(ids);
    }
    flush();
    if (parts.length === 1) return parts[0]!.slice();
    const out = new Int32Array(total);
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }

  private keep(piece: string, ids: Int32Array<ArrayBuffer>): void {
    if (piece.length > this.maxChars) return;
    this.entries.set(piece, ids);
    this.chars += piece.length;
    for (const [key] of this.entries) {
      if (this.chars <= this.maxChars) break;
      this.entries.delete(key);
      this.chars -= key.length;
    }
  }

  snapshot(): SegmentCacheStats {
    return { ...this.stats, entries: this.entries.size, cachedChars: this.chars };
  }
}
