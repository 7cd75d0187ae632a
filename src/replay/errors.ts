/** A replay, fork or verify that cannot start, in the user's terms (the CLI prints the message and exits 1). */
export class ReplayError extends Error {}
