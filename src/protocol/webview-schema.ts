// Host-side validation of webview -> host messages (inbound messages are untrusted). The envelope
// (`type`, and `seq` for requests) comes from the descriptors in messages.ts; each message adds only
// the zod form of its parameters, which the compiler holds to the descriptor's parameter type.
import { z } from 'zod';
import { WEBVIEW_MESSAGES, type ParamsOf, type WebviewMessage } from './messages.js';

type Methods = typeof WEBVIEW_MESSAGES;

const PARAMS = {
  ready: z.strictObject({ version: z.literal(1) }),
  attachTrajectory: z.strictObject({}),
  details: z.strictObject({ node_id: z.string().min(1).max(200) }),
  openGroupMember: z.strictObject({ rollout_id: z.string().min(1).max(500) }),
  replayRollout: z.strictObject({}),
  forkFromTurn: z.strictObject({ node_id: z.string().min(1).max(200) }),
} satisfies { [K in keyof Methods]: z.ZodType<ParamsOf<Methods[K]>> };

/** A descriptor's whole message: its parameters, `type`, and `seq` for a request. */
function envelope(method: keyof Methods) {
  const withType = PARAMS[method].extend({ type: z.literal(method) });
  return WEBVIEW_MESSAGES[method].kind === 'request' ? withType.extend({ seq: z.int().nonnegative() }) : withType;
}

const methods = Object.keys(WEBVIEW_MESSAGES) as (keyof Methods)[];
export const WebviewMessageSchema = z.discriminatedUnion(
  'type',
  methods.map(envelope) as [ReturnType<typeof envelope>, ...ReturnType<typeof envelope>[]],
);

// Each schema parses to exactly its descriptor's parameter type (satisfies above checks one way; a
// message without parameters has nothing to compare).
type SameParams = {
  [K in keyof Methods]: [keyof ParamsOf<Methods[K]>] extends [never]
    ? true
    : [ParamsOf<Methods[K]>] extends [z.infer<(typeof PARAMS)[K]>]
      ? true
      : false;
}[keyof Methods];
const _sameParams: false extends SameParams ? false : true = true;
void _sameParams;

/** Host side: validate one inbound message, or say why it was rejected. */
export function parseWebviewMessage(value: unknown): { ok: true; msg: WebviewMessage } | { ok: false; error: string } {
  const res = WebviewMessageSchema.safeParse(value);
  if (res.success) return { ok: true, msg: res.data as WebviewMessage };
  return { ok: false, error: res.error.issues.map((i) => `${i.path.join('.') || '(message)'}: ${i.message}`).join('; ') };
}
