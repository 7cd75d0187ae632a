// Synthetic captured rollouts for the viewer's tests and benchmark: an agent chain with tool glue,
// optionally a discarded retry, a subagent root, a compaction root, a toolless title call, a turn with
// misaligned logprobs and one with none. Deterministic for a seed. Token ids map to words, so the
// texts of sampled tokens come from their bytes and prompt texts can be served as a /detokenize table.
import type { CallRecord, ChatMessage } from '../src/capture/types.js';
import type { SessionInfo } from '../src/capture/types.js';
import { seededRandom } from '../src/engine/prng.js';

const WORDS =
  ' the| a| file| run| test|.|,|\n| def| return| import| os| print|(|)|:| =| if| for| in| x| y| 0| 1| ok| error| path| read| write| bash| ls| cat| grep| echo| true| false|{|}|"| and| not'.split(
    '|',
  );
export const SPECIAL = { imStart: 100000, imEnd: 100001 } as const;

/** Text of a generated token id (what a tokenizer's /detokenize would answer). */
export function tokenText(id: number): string {
  if (id === SPECIAL.imStart) return '<|im_start|>';
  if (id === SPECIAL.imEnd) return '<|im_end|>';
  return WORDS[id % WORDS.length]!;
}

export interface GeneratorOptions {
  seed?: number;
  /** Calls on the main agent chain. */
  calls: number;
  /** Tokens of the first prompt (system + task). */
  firstPrompt?: number;
  /** Mean sampled tokens per call. */
  sampled?: number;
  /** Mean tokens the harness adds per turn (tool results). */
  glue?: number;
  retry?: boolean;
  subagent?: boolean;
  compaction?: boolean;
  title?: boolean;
  misaligned?: boolean;
  missing?: boolean;
}

export interface GeneratedRollout {
  session: SessionInfo;
  records: CallRecord[];
  /** id -> text for every id used (the stub engine's vocabulary). */
  vocab: Record<string, string>;
}

const enc = new TextEncoder();

export function generateRollout(opts: GeneratorOptions): GeneratedRollout {
  const rnd = seededRandom(opts.seed ?? 1);
  const vocabSize = 5000;
  const tok = () => Math.floor(rnd() * vocabSize);
  const words = (n: number) => Array.from({ length: n }, tok);
  const around = (mean: number) => Math.max(1, Math.round(mean * (0.5 + rnd())));
  const records: CallRecord[] = [];
  const used = new Set<number>();
  let index = 0;

  const record = (
    prompt: number[],
    sampled: number[],
    o: { nTools?: number; logprobs?: number[] | null; system?: string; tag: string },
  ): CallRecord => {
    for (const id of prompt) used.add(id);
    for (const id of sampled) used.add(id);
    const logprobs = o.logprobs !== undefined ? o.logprobs : sampled.map(() => -Math.pow(rnd(), 3) * 6);
    const i = index++;
    const id = `${o.tag}${String(i).padStart(4, '0')}`.slice(0, 12).padEnd(12, '0');
    const messages: ChatMessage[] = [
      { role: 'system', content: o.system ?? 'You are a coding agent.' },
      { role: 'user', content: `call ${i}` },
    ];
    const reply: ChatMessage = { role: 'assistant', content: sampled.map(tokenText).join('') };
    return {
      call_id: id,
      session_id: 'bench',
      index: i,
      dialect: 'openai_chat',
      path: '/v1/chat/completions',
      stream: false,
      started_at: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
      ended_at: new Date(Date.UTC(2026, 0, 1, 0, 0, i + 1)).toISOString(),
      latency_ms: 900,
      harness_session_id: null,
      request: { headers: { 'content-type': 'application/json' }, body: { model: 'm', messages } },
      engine_url: 'http://127.0.0.1:1',
      engine_request: { model: 'm', messages, ...(o.nTools ? { tools: [{ type: 'function', function: { name: 'bash' } }] } : {}) },
      engine_response: {
        id: `chatcmpl-${id}`,
        object: 'chat.completion',
        created: 0,
        model: 'm',
        choices: [{ index: 0, message: reply, finish_reason: 'stop' }],
      },
      response_body: { id: `chatcmpl-${id}`, choices: [{ index: 0, message: reply, finish_reason: 'stop' }] },
      model: 'm',
      finish_reason: 'stop',
      usage: { prompt_tokens: prompt.length, completion_tokens: sampled.length, total_tokens: prompt.length + sampled.length },
      n_tools: o.nTools ?? 1,
      requested_sampling_params: { temperature: 1 },
      sampling_params: { temperature: 1, logprobs: true },
      findings: [],
      error: null,
      prompt_token_ids: prompt,
      completion_token_ids: sampled,
      logprobs,
      top_logprobs:
        logprobs && logprobs.length === sampled.length
          ? sampled.map((s, k) => [
              { token_id: s, token: tokenText(s), logprob: logprobs[k]! },
              { token_id: (s + 1) % vocabSize, token: tokenText((s + 1) % vocabSize), logprob: logprobs[k]! - 1.5 },
            ])
          : null,
      token_bytes: sampled.map((s) => [...enc.encode(tokenText(s))]),
    };
  };

  const firstPrompt = [SPECIAL.imStart, ...words((opts.firstPrompt ?? 200) - 2), SPECIAL.imEnd];
  let prompt = firstPrompt;
  const retryAt = Math.min(1, opts.calls - 1);
  const compactAt = opts.compaction ? Math.max(retryAt + 2, opts.calls - 3) : -1;
  for (let k = 0; k < opts.calls; k++) {
    if (k === compactAt) {
      // The harness summarised its history: same system prompt and task, then a summary.
      prompt = [...firstPrompt, ...words(around(opts.glue ?? 30) * 2)];
    }
    if (opts.retry && k === retryAt) records.push(record(prompt, [...words(around(opts.sampled ?? 40)), SPECIAL.imEnd], { tag: 'r' }));
    if (opts.title && k === 1)
      records.push(record([SPECIAL.imStart, ...words(40), SPECIAL.imEnd], words(6), { nTools: 0, system: 'Write a title.', tag: 't' }));
    if (opts.subagent && k === Math.floor(opts.calls / 2)) {
      let sp = [SPECIAL.imStart, ...words(60), SPECIAL.imEnd];
      for (let s = 0; s < 2; s++) {
        const sampled = [...words(around(opts.sampled ?? 40)), SPECIAL.imEnd];
        records.push(record(sp, sampled, { system: 'You are a search subagent.', tag: 's' }));
        sp = [...sp, ...sampled, ...words(around(opts.glue ?? 30))];
      }
    }
    const sampled = [...words(around(opts.sampled ?? 40)), SPECIAL.imEnd];
    let logprobs: number[] | null | undefined;
    if (opts.misaligned && k === opts.calls - 2) logprobs = sampled.slice(1).map(() => -0.3);
    if (opts.missing && k === opts.calls - 1) logprobs = null;
    records.push(record(prompt, sampled, { tag: 'a', ...(logprobs !== undefined ? { logprobs } : {}) }));
    prompt = [...prompt, ...sampled, SPECIAL.imStart, ...words(around(opts.glue ?? 30)), SPECIAL.imEnd];
  }
  const vocab: Record<string, string> = {};
  for (const id of used) vocab[id] = tokenText(id);
  const session: SessionInfo = {
    session_id: 'bench',
    created_at: '2026-01-01T00:00:00.000Z',
    model: 'm',
    engine_url: 'http://127.0.0.1:1',
    max_model_calls: 0,
    metadata: { harness: 'generator' },
    capture_level: 'tokens',
  };
  return { session, records, vocab };
}

/** Sum of prompt + sampled tokens over all calls: the token positions a viewer holds. */
export function tokenPositions(records: readonly CallRecord[]): number {
  return records.reduce((a, r) => a + (r.prompt_token_ids?.length ?? 0) + (r.completion_token_ids?.length ?? 0), 0);
}
