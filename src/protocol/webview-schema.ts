// Host-side validation of webview -> host messages. Inbound messages are untrusted.
import { z } from 'zod';
import { MSG, type WebviewMessage } from './messages.js';

export const WebviewMessageSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal(MSG.ready), version: z.literal(1) }),
  /** Ask the host to pick a trajectory.json and run the ATIF cross-check. */
  z.strictObject({ type: z.literal(MSG.attachTrajectory), seq: z.int().nonnegative() }),
  z.strictObject({ type: z.literal(MSG.details), seq: z.int().nonnegative(), node_id: z.string().min(1).max(200) }),
]);

// The schema and the hand-written union must agree.
type Parsed = z.infer<typeof WebviewMessageSchema>;
const _sameShape: [Parsed] extends [WebviewMessage] ? ([WebviewMessage] extends [Parsed] ? true : false) : false = true;
void _sameShape;

/** Host side: validate one inbound message, or say why it was rejected. */
export function parseWebviewMessage(value: unknown): { ok: true; msg: WebviewMessage } | { ok: false; error: string } {
  const res = WebviewMessageSchema.safeParse(value);
  if (res.success) return { ok: true, msg: res.data };
  return { ok: false, error: res.error.issues.map((i) => `${i.path.join('.') || '(message)'}: ${i.message}`).join('; ') };
}

