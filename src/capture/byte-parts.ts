// A body kept as the chunks it arrived in, read without joining them.
//
// Why: at a 128k-token context a harness's request is 0.55 MB and the engine's answer, with its
// prompt echo, 0.6 MB. Joining each into one Buffer copied 1.15 MB a turn into fresh memory, for
// comparisons that are one memcmp each. V8 counts the ArrayBuffers allocated since its last major
// collection against the old generation's limit, so the copies also started collections: over two
// 24-turn loops at 128k a proxy made 14-17 of them with the joins and 5 without (the rest of a
// turn's buffers, about 1.8 MB, are Node's socket reads and HTTP parser copies). Everything that
// reads a whole body goes through here: it compares ranges chunk by chunk and joins only the small
// ranges it decodes.

/** The chunks of one body, in order, with each one's start offset. Chunks are never changed. */
export class ByteParts {
  readonly length: number;
  private readonly starts: number[];

  readonly parts: readonly Buffer[];

  constructor(parts: readonly Buffer[]) {
    // Empty chunks are left out, so every chunk holds the offsets it starts at.
    this.parts = parts.some((p) => p.length === 0) ? parts.filter((p) => p.length > 0) : parts;
    this.starts = [];
    let n = 0;
    for (const p of this.parts) {
      this.starts.push(n);
      n += p.length;
    }
    this.length = n;
  }

  static of(bytes: Buffer | readonly Buffer[]): ByteParts {
    return new ByteParts(Buffer.isBuffer(bytes) ? [bytes] : bytes);
  }

  /** The chunk holding offset `pos` (the last chunk for `pos === length`). */
  private partAt(pos: number): number {
    let lo = 0;
    let hi = this.parts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.starts[mid]! <= pos) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  byteAt(pos: number): number | undefined {
    if (pos < 0 || pos >= this.length) return undefined;
    const k = this.partAt(pos);
    return this.parts[k]![pos - this.starts[k]!];
  }

  /** Bytes [from, to) as one Buffer: a view when they lie in one chunk, else joined. */
  slice(from = 0, to = this.length): Buffer {
    from = Math.max(0, Math.min(from, this.length));
    to = Math.max(from, Math.min(to, this.length));
    if (this.parts.length === 0) return Buffer.alloc(0);
    const k = this.partAt(from);
    const local = from - this.starts[k]!;
    const part = this.parts[k]!;
    if (to - from <= part.length - local) return part.subarray(local, local + to - from);
    const out = Buffer.allocUnsafe(to - from);
    let written = 0;
    for (let j = k; written < out.length; j++) {
      const p = this.parts[j]!;
      const start = j === k ? local : 0;
      written += p.copy(out, written, start, Math.min(p.length, start + out.length - written));
    }
    return out;
  }

  /** All bytes as one Buffer (the chunk itself when there is one). */
  whole(): Buffer {
    return this.parts.length === 1 ? this.parts[0]! : this.slice();
  }

  toString(encoding: BufferEncoding = 'utf8', from = 0, to = this.length): string {
    return this.slice(from, to).toString(encoding);
  }

  /** The first offset at or after `from` where `needle` starts, or -1; matches may span chunks. */
  indexOf(needle: Buffer, from = 0): number {
    if (needle.length === 0) return Math.min(from, this.length);
    if (this.parts.length === 0 || from >= this.length) return -1;
    const edge = needle.length - 1;
    for (let k = this.partAt(Math.max(0, from)); k < this.parts.length; k++) {
      const part = this.parts[k]!;
      const start = this.starts[k]!;
      const local = part.indexOf(needle, Math.max(0, from - start));
      if (local >= 0) return start + local;
      // A match across this chunk's end: search its last `edge` bytes with what follows them.
      if (edge > 0 && k + 1 < this.parts.length) {
        const windowFrom = Math.max(from, start + part.length - edge);
        const window = this.slice(windowFrom, Math.min(this.length, start + part.length + edge));
        const at = window.indexOf(needle);
        if (at >= 0) return windowFrom + at;
      }
    }
    return -1;
  }

  includes(needle: Buffer): boolean {
    return this.indexOf(needle) >= 0;
  }

  /** Whether bytes [pos, pos + expected.length) equal `expected`: one memcmp per chunk it spans. */
  equalsAt(pos: number, expected: Buffer): boolean {
    if (pos < 0 || pos + expected.length > this.length) return false;
    if (expected.length === 0) return true;
    let k = this.partAt(pos);
    let local = pos - this.starts[k]!;
    let done = 0;
    while (done < expected.length) {
      const part = this.parts[k]!;
      const n = Math.min(part.length - local, expected.length - done);
      if (part.compare(expected, done, done + n, local, local + n) !== 0) return false;
      done += n;
      k++;
      local = 0;
    }
    return true;
  }

  /** Length of the common prefix with `other`: memcmp over aligned ranges, halving inside the first that differs. */
  commonPrefix(other: ByteParts): number {
    const limit = Math.min(this.length, other.length);
    let pos = 0;
    while (pos < limit) {
      const a = this.span(pos);
      const b = other.span(pos);
      const n = Math.min(a.buf.length - a.at, b.buf.length - b.at, limit - pos);
      if (a.buf.compare(b.buf, b.at, b.at + n, a.at, a.at + n) === 0) {
        pos += n;
        continue;
      }
      // Invariant: equal before lo, different somewhere before hi.
      let lo = 0;
      let hi = n;
      while (hi - lo > 64) {
        const mid = (lo + hi) >>> 1;
        if (a.buf.compare(b.buf, b.at + lo, b.at + mid, a.at + lo, a.at + mid) === 0) lo = mid;
        else hi = mid;
      }
      while (lo < hi && a.buf[a.at + lo] === b.buf[b.at + lo]) lo++;
      return pos + lo;
    }
    return limit;
  }

  private span(pos: number): { buf: Buffer; at: number } {
    const k = this.partAt(pos);
    return { buf: this.parts[k]!, at: pos - this.starts[k]! };
  }
}
