import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { GgmlType, GgufType, toHalf, writeGguf } from '../../src/engine/gguf-writer.js';
import { readFromLlamaCppBundle } from '../../src/engine/llama-source.js';
import { QWEN3_SPECIAL_TOKENS } from '../../src/engine/tiny-model.js';

test('float16 conversion rounds to nearest even, with subnormals and overflow', () => {
  assert.equal(toHalf(1), 0x3c00);
  assert.equal(toHalf(-2), 0xc000);
  assert.equal(toHalf(65504), 0x7bff);
  assert.equal(toHalf(1e6), 0x7c00);
  assert.equal(toHalf(1e-5), 0x00a8);
  assert.equal(toHalf(0), 0);
  assert.equal(toHalf(1 + 2 ** -11), 0x3c00, 'a tie rounds to even');
  assert.equal(toHalf(1 + 3 * 2 ** -11), 0x3c02);
});

test('a written GGUF reads back through node-llama-cpp with metadata and tensor shapes', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hl-gguf-'));
  try {
    const path = join(dir, 'x.gguf');
    await writeGguf(
      path,
      {
        'general.architecture': { type: GgufType.STRING, value: 'llama' },
        'x.count': { type: GgufType.UINT32, value: 7 },
        'x.flag': { type: GgufType.BOOL, value: true },
        'x.words': { type: GgufType.ARRAY, itemType: GgufType.STRING, value: ['a', 'ĠbÃ©'] },
        'x.ints': { type: GgufType.ARRAY, itemType: GgufType.INT32, value: [1, -2, 3] },
      },
      [
        { name: 'a.weight', dims: [3, 2], type: GgmlType.F32, data: new Float32Array([1, 2, 3, 4, 5, 6]) },
        { name: 'b.weight', dims: [5], type: GgmlType.F16, data: new Float32Array(5).fill(0.5) },
      ],
    );
    const { readGgufFileInfo } = await import('node-llama-cpp');
    const info = await readGgufFileInfo(path, { readTensorInfo: true });
    const md = info.metadata as unknown as { x: { count: number; flag: boolean; words: string[]; ints: number[] } };
    assert.equal(info.version, 3);
    assert.deepEqual([md.x.count, md.x.flag, md.x.words, md.x.ints], [7, true, ['a', 'ĠbÃ©'], [1, -2, 3]]);
    const tensors = info.fullTensorInfo ?? info.tensorInfo ?? [];
    assert.deepEqual(
      tensors.map((t) => [t.name, t.dimensions.map(Number), t.ggmlType]),
      [
        ['a.weight', [3, 2], 0],
        ['b.weight', [5], 1],
      ],
    );
    assert.equal(Number(tensors[1]!.offset) % 32, 0, 'tensor data is aligned');
    await assert.rejects(
      writeGguf(path, {}, [{ name: 'bad', dims: [2, 2], type: GgmlType.F32, data: new Float32Array(3) }]),
      /do not match/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the llama.cpp bundle in node-llama-cpp holds the Qwen vocabulary and the Qwen3 template', async () => {
  const files = await readFromLlamaCppBundle(['models/templates/Qwen-Qwen3-0.6B.jinja']);
  const template = files.get('models/templates/Qwen-Qwen3-0.6B.jinja')!.toString('utf8');
  assert.match(template, /enable_thinking is defined and enable_thinking is false/);
  assert.match(template, /<tool_call>/);
  await assert.rejects(readFromLlamaCppBundle(['models/no-such-file']), /missing from the llama\.cpp source bundle/);
  assert.equal(QWEN3_SPECIAL_TOKENS.length, 151668 - 151643 + 1);
});
