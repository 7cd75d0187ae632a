// Model families the proxy can render and parse for, chosen the way vLLM's `--tool-call-parser` and
// `--reasoning-parser` are chosen per model. A family is recognised from the model's own chat template
// (the markers it writes), so a fine-tune with the same template is the same family.

export type FamilyName = 'qwen3' | 'qwen3_coder' | 'llama3' | 'mistral' | 'deepseek' | 'gpt_oss' | 'glm' | 'kimi_k2' | 'unknown';

export interface FamilyInfo {
  name: FamilyName;
  /** Whether the proxy can render, bridge and parse for this family (token-in mode). */
  supported: boolean;
  /** vLLM's parser names for the same format (for the docs' table and error messages). */
  toolParser: string | null;
  reasoningParser: string | null;
  /** Marker texts the parser looks for, as single tokens of the vocabulary. */
  markers?: { thinkStart: string; thinkEnd: string; toolCallStart: string; toolCallEnd: string };
  /**
   * What a tool-call block holds: `json` (hermes: `{"name": …, "arguments": {…}}`) or `xml`
   * (qwen3_coder: `<function=NAME>` then `<parameter=KEY>\nVALUE\n</parameter>` per argument).
   */
  toolCallBody?: 'json' | 'xml';
  /** Texts of tokens that end an assistant turn, beyond the tokenizer's eos ids. */
  stopTexts: string[];
}

export const FAMILIES: Record<FamilyName, FamilyInfo> = {
  qwen3: {
    name: 'qwen3',
    supported: true,
    toolParser: 'hermes',
    reasoningParser: 'qwen3',
    markers: { thinkStart: '<think>', thinkEnd: '</think>', toolCallStart: '<tool_call>', toolCallEnd: '</tool_call>' },
    toolCallBody: 'json',
    stopTexts: ['<|im_end|>', '<|endoftext|>'],
  },
  // Qwen3-Coder and Qwen3.5: the same ChatML turns and <tool_call> blocks, arguments as XML parameters.
  qwen3_coder: {
    name: 'qwen3_coder',
    supported: true,
    toolParser: 'qwen3_coder',
    reasoningParser: 'qwen3',
    markers: { thinkStart: '<think>', thinkEnd: '</think>', toolCallStart: '<tool_call>', toolCallEnd: '</tool_call>' },
    toolCallBody: 'xml',
    stopTexts: ['<|im_end|>', '<|endoftext|>'],
  },
  llama3: { name: 'llama3', supported: false, toolParser: 'llama3_json', reasoningParser: null, stopTexts: [] },
  mistral: { name: 'mistral', supported: false, toolParser: 'mistral', reasoningParser: 'mistral', stopTexts: [] },
  deepseek: { name: 'deepseek', supported: false, toolParser: 'deepseek_v3', reasoningParser: 'deepseek_r1', stopTexts: [] },
  gpt_oss: { name: 'gpt_oss', supported: false, toolParser: 'openai', reasoningParser: 'openai_gptoss', stopTexts: [] },
  glm: { name: 'glm', supported: false, toolParser: 'glm45', reasoningParser: 'glm45', stopTexts: [] },
  kimi_k2: { name: 'kimi_k2', supported: false, toolParser: 'kimi_k2', reasoningParser: 'kimi_k2', stopTexts: [] },
  unknown: { name: 'unknown', supported: false, toolParser: null, reasoningParser: null, stopTexts: [] },
};

/** The family whose wire format the chat template writes. Order matters: Qwen3-Coder templates also write <tool_call>. */
export function detectFamily(chatTemplate: string): FamilyInfo {
  const has = (s: string) => chatTemplate.includes(s);
  if (has('<function=') && has('<parameter=')) return FAMILIES.qwen3_coder;
  if (has('<tool_call>') && has('<|im_start|>')) return FAMILIES.qwen3;
  if (has('<|start_header_id|>')) return FAMILIES.llama3;
  if (has('[TOOL_CALLS]')) return FAMILIES.mistral;
  if (has('tool▁calls▁begin')) return FAMILIES.deepseek;
  if (has('<|channel|>')) return FAMILIES.gpt_oss;
  if (has('<arg_key>')) return FAMILIES.glm;
  if (has('<|tool_calls_section_begin|>')) return FAMILIES.kimi_k2;
  return FAMILIES.unknown;
}

/** Raised when token-in mode is asked for a model whose format the proxy cannot parse. */
export class UnsupportedFamilyError extends Error {
  constructor(
    readonly family: FamilyInfo,
    readonly model: string,
  ) {
    const supported = Object.values(FAMILIES)
      .filter((f) => f.supported)
      .map((f) => f.name)
      .join(', ');
    super(
      `token-in mode (--render proxy) cannot parse answers of ${model}: its chat template is of the ${family.name} family` +
        `${family.toolParser ? ` (vLLM --tool-call-parser ${family.toolParser})` : ''}, and the proxy parses only ${supported}. ` +
        'Use --render engine (the engine renders the chat template and parses the answer).',
    );
    this.name = 'UnsupportedFamilyError';
  }
}
