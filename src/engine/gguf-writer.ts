// A minimal GGUF v3 writer: metadata key/values plus F32/F16 tensors, the subset llama.cpp needs to
// load a small dense model. Layout per ggml's gguf.cpp: header, KV pairs, tensor infos, padding to
// the alignment, then the tensor data, each tensor starting on an aligned offset.
import { open } from 'node:fs/promises';

const ALIGNMENT = 32;

export enum GgufType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

export type GgufValue =
  | { type: GgufType.UINT32 | GgufType.INT32 | GgufType.FLOAT32 | GgufType.UINT64; value: number }
  | { type: GgufType.BOOL; value: boolean }
  | { type: GgufType.STRING; value: string }
  | { type: GgufType.ARRAY; itemType: GgufType.STRING; value: readonly string[] }
  | { type: GgufType.ARRAY; itemType: GgufType.INT32 | GgufType.FLOAT32; value: ArrayLike<number> };

export enum GgmlType {
  F32 = 0,
  F16 = 1,
}

export interface GgufTensor {
  name: string;
  /** ggml order: dims[0] is the innermost (row length). */
  dims: number[];
  type: GgmlType;
  data: Float32Array;
}

/** Grows a byte buffer as values are appended (little-endian, as GGUF requires). */
class ByteSink {
  private buf = Buffer.alloc(1 << 20);
  length = 0;

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.length + n) size *= 2;
    const next = Buffer.alloc(size);
    this.buf.copy(next, 0, 0, this.length);
    this.buf = next;
  }
  u32(v: number): void {
    this.reserve(4);
    this.buf.writeUInt32LE(v, this.length);
    this.length += 4;
  }
  i32(v: number): void {
    this.reserve(4);
    this.buf.writeInt32LE(v, this.length);
    this.length += 4;
  }
  u64(v: number): void {
    this.reserve(8);
    this.buf.writeBigUInt64LE(BigInt(v), this.length);
    this.length += 8;
  }
  f32(v: number): void {
    this.reserve(4);
    this.buf.writeFloatLE(v, this.length);
    this.length += 4;
  }
  u8(v: number): void {
    this.reserve(1);
    this.buf.writeUInt8(v, this.length);
    this.length += 1;
  }
  str(s: string): void {
    const bytes = Buffer.from(s, 'utf8');
    this.u64(bytes.length);
    this.reserve(bytes.length);
    bytes.copy(this.buf, this.length);
    this.length += bytes.length;
  }
  pad(alignment: number): void {
    const rem = this.length % alignment;
    if (rem === 0) return;
    this.reserve(alignment - rem);
    this.buf.fill(0, this.length, this.length + alignment - rem);
    this.length += alignment - rem;
  }
  bytes(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

function writeValue(sink: ByteSink, v: GgufValue): void {
  sink.u32(v.type);
  switch (v.type) {
    case GgufType.UINT32:
      sink.u32(v.value);
      return;
    case GgufType.INT32:
      sink.i32(v.value);
      return;
    case GgufType.FLOAT32:
      sink.f32(v.value);
      return;
    case GgufType.UINT64:
      sink.u64(v.value);
      return;
    case GgufType.BOOL:
      sink.u8(v.value ? 1 : 0);
      return;
    case GgufType.STRING:
      sink.str(v.value);
      return;
    case GgufType.ARRAY: {
      sink.u32(v.itemType);
      sink.u64(v.value.length);
      if (v.itemType === GgufType.STRING) for (const s of v.value as readonly string[]) sink.str(s);
      else if (v.itemType === GgufType.INT32) for (let i = 0; i < v.value.length; i++) sink.i32((v.value as ArrayLike<number>)[i]!);
      else for (let i = 0; i < v.value.length; i++) sink.f32((v.value as ArrayLike<number>)[i]!);
      return;
    }
  }
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** IEEE-754 binary32 -> binary16 bits, round to nearest even (what numpy's astype(float16) does). */
export function toHalf(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rest > mid || (rest === mid && half & 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && half & 1)) half++;
  e = half >>> 10;
  return sign | (e >= 0x1f ? 0x7c00 : half);
}

function tensorBytes(t: GgufTensor): Buffer {
  if (t.type === GgmlType.F32) return Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  const half = new Uint16Array(t.data.length);
  for (let i = 0; i < t.data.length; i++) half[i] = toHalf(t.data[i]!);
  // GGUF is little-endian, as is every platform node-llama-cpp ships binaries for.
  return Buffer.from(half.buffer, half.byteOffset, half.byteLength);
}

/** Writes a GGUF v3 file. Throws if a tensor's data does not match its dims. */
export async function writeGguf(path: string, metadata: Record<string, GgufValue>, tensors: GgufTensor[]): Promise<void> {
  const head = new ByteSink();
  head.u32(0x46554747); // "GGUF"
  head.u32(3);
  head.u64(tensors.length);
  head.u64(Object.keys(metadata).length);
  for (const [key, value] of Object.entries(metadata)) {
    head.str(key);
    writeValue(head, value);
  }
  const blobs: Buffer[] = [];
  let offset = 0;
  for (const t of tensors) {
    const count = t.dims.reduce((a, b) => a * b, 1);
    if (count !== t.data.length) throw new Error(`tensor ${t.name}: dims ${t.dims.join('x')} do not match ${t.data.length} values`);
    head.str(t.name);
    head.u32(t.dims.length);
    for (const d of t.dims) head.u64(d);
    head.u32(t.type);
    head.u64(offset);
    const blob = tensorBytes(t);
    blobs.push(blob);
    offset += Math.ceil(blob.length / ALIGNMENT) * ALIGNMENT;
  }
  head.pad(ALIGNMENT);
  const fh = await open(path, 'w');
  try {
    await fh.write(head.bytes());
    const zeros = Buffer.alloc(ALIGNMENT);
    for (const blob of blobs) {
      await fh.write(blob);
      const rem = blob.length % ALIGNMENT;
      if (rem) await fh.write(zeros, 0, ALIGNMENT - rem);
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
}
