// The parts of the proxy's rollout document the engine loop test reads.
export type { CallRecord } from '../../src/capture/types.js';

export interface RolloutDocumentLike {
  capture_level: string;
  calls: unknown[];
  graph: { roots: string[]; leaves: string[]; forks: unknown[]; nodes: { node_id: string; index: number; parent_id: string | null }[] };
  traces: { trainable: boolean; input_ids: number[]; loss_mask: number[] }[];
}
