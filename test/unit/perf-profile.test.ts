// The bench's perf report reader: categories, main thread against the others, heaviest symbols.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { categoryOf, msPerCallByCategory, perfBreakdown } from '../../bench/perf-profile.js';

const REPORT = `
     6.00%    100:node     [k] finish_task_switch.isra.0
     5.00%    100:node     [.] v8::internal::Scavenger::ScavengeObject<v8::internal::FullHeapObjectSlot>
     4.00%    100:node     [.] JS:*encode /work/main/dist/cli.js:22161:13
     3.00%    100:node     [.] v8::internal::JsonParser<unsigned char>::ParseJsonNumber
     2.00%    105:node     [.] v8::internal::compiler::GraphReducer::ReduceTop
     2.00%    105:node     [.] v8::internal::ConcurrentMarking::RunMajor
     1.50%    100:node     [.] _int_malloc
     1.00%    100:node     [.] Builtins_LoadIC
     0.50%    107:node     [.] node::BaseObject::BaseObject
not a sample line
`;

test('perf breakdown: each symbol in its category, the main thread (the pid) apart from the rest, heaviest first', () => {
  const b = perfBreakdown(REPORT, 100);
  assert.equal(b.samples_pct, 25);
  assert.deepEqual(b.total, { kernel: 6, gc: 7, js: 5, json: 3, compiler: 2, malloc: 1.5, 'other-native': 0.5 });
  assert.deepEqual(b.main, { kernel: 6, gc: 5, js: 5, json: 3, malloc: 1.5 });
  assert.deepEqual(b.other_threads, { gc: 2, compiler: 2, 'other-native': 0.5 });
  assert.deepEqual(
    Object.keys(b.total),
    ['gc', 'kernel', 'js', 'json', 'compiler', 'malloc', 'other-native'],
    'categories sorted by share',
  );
  assert.deepEqual(b.top[0], { symbol: '[k] finish_task_switch.isra.0', pct: 6 });
  assert.equal(b.top.length, 9);
});

test('perf categories: kernel before anything, GC and compiler threads by V8 namespace, JS frames and builtins as js', () => {
  assert.equal(categoryOf('[k] ext4_create'), 'kernel');
  assert.equal(categoryOf('[.] v8::internal::Sweeper::RawSweep'), 'gc');
  assert.equal(categoryOf('[.] v8::internal::compiler::PersistentMap<x>::operator=='), 'compiler');
  assert.equal(categoryOf('[.] JS:^handleModelCall /x/dist/cli.js:1:2'), 'js');
  assert.equal(categoryOf('[.] Builtins_CallFunction_ReceiverIsAny'), 'js');
  assert.equal(categoryOf('[.] __memmove_avx512_unaligned_erms'), 'malloc');
  assert.equal(categoryOf('[.] sha1_block_data_order_shaext'), 'other-native');
});

test('ms per call by category: shares averaged over rounds (each normalised to what it sampled) times CPU per call', () => {
  const round = (total: Record<string, number>): Parameters<typeof msPerCallByCategory>[0][number] => ({
    samples_pct: Object.values(total).reduce((a, b) => a + b, 0),
    total,
    main: {},
    other_threads: {},
    top: [],
  });
  // Round 1 sampled 50% in all (a percent limit): js and gc half of it each. Round 2: js a quarter, gc half.
  const rounds = [round({ js: 25, gc: 25 }), round({ js: 25, gc: 50, kernel: 25 })];
  const ms = msPerCallByCategory(rounds, 2);
  assert.deepEqual(ms, { gc: 1, js: 0.75, kernel: 0.25 });
  assert.equal(
    Object.values(ms).reduce((a, b) => a + b, 0),
    2,
    'the categories add up to the CPU per call',
  );
  assert.deepEqual(msPerCallByCategory([], 2), {});
});
