// Prompt-token texts fetched while a session is live and kept with its capture, so the viewer reads
// text for every token after the engine is gone. Off the call's hot path: a recorded call only
// queues its prompt ids; a debounced flush asks the engine's /detokenize (vLLM, or the embedded
// engine) for the ids not known yet and writes `<dataDir>/token-texts/<session>.json`.
// No vscode import (unit-tested).
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { fetchTokenTexts } from '../capture/token-text.js';
import type { CallRecord } from '../capture/types.js';
import { Disposable, toDisposable } from './lifecycle.js';

const StoredTexts = z.object({ engine_url: z.string(), model: z.string().nullable(), texts: z.record(z.string(), z.string()) });

interface Pending {
  engineUrl: string;
  model: string | null;
  ids: Set<number>;
}

export class LiveTokenTexts extends Disposable {
  private readonly pending = new Map<string, Pending>();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private flushing: Promise<void> = Promise.resolve();
  private readonly abort = new AbortController();

  constructor(
    private readonly dataDir: () => string | undefined,
    private readonly log: { warn(m: string): void },
    private readonly delayMs = 500,
  ) {
    super();
    this._register(
      toDisposable(() => {
        if (this.timer) clearTimeout(this.timer);
        this.abort.abort();
      }),
    );
  }

  private file(sessionId: string): string | undefined {
    const dir = this.dataDir();
    return dir && /^[\w.-]+$/.test(sessionId) ? join(dir, 'token-texts', `${sessionId}.json`) : undefined;
  }

  /** The texts kept for a session (an unreadable file counts as none). */
  read(sessionId: string): Record<string, string> | undefined {
    const file = this.file(sessionId);
    if (!file || !existsSync(file)) return undefined;
    try {
      return StoredTexts.parse(JSON.parse(readFileSync(file, 'utf8'))).texts;
    } catch (err) {
      this.log.warn(`ignoring ${file}: ${err instanceof Error ? err.message : String(err)}`);
      return undefined;
    }
  }

  delete(sessionId: string): void {
    const file = this.file(sessionId);
    if (file) rmSync(file, { force: true });
  }

  /** Queues a recorded call's prompt ids (returns at once; the fetch happens later). */
  noteCall(rec: CallRecord): void {
    if (!rec.prompt_token_ids?.length || !rec.engine_url || rec.error) return;
    let p = this.pending.get(rec.session_id);
    if (!p) this.pending.set(rec.session_id, (p = { engineUrl: rec.engine_url, model: rec.model ?? null, ids: new Set() }));
    for (const id of rec.prompt_token_ids) p.ids.add(id);
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      this.flushing = this.flushing.then(() => this.flush());
    }, this.delayMs);
  }

  /** Resolves once everything queued so far is fetched and written (tests, deactivation). */
  async idle(): Promise<void> {
    while (this.timer || this.pending.size) {
      if (this.timer) {
        clearTimeout(this.timer);
        this.timer = undefined;
        this.flushing = this.flushing.then(() => this.flush());
      }
      await this.flushing;
    }
    await this.flushing;
  }

  private async flush(): Promise<void> {
    const batch = [...this.pending.entries()];
    this.pending.clear();
    for (const [sessionId, p] of batch) {
      const file = this.file(sessionId);
      if (!file) continue;
      const known = this.read(sessionId) ?? {};
      const todo = [...p.ids].filter((id) => known[id] === undefined);
      if (!todo.length) continue;
      try {
        const r = await fetchTokenTexts(p.engineUrl, todo, { signal: this.abort.signal, ...(p.model ? { model: p.model } : {}) });
        if (!Object.keys(r.texts).length) continue;
        mkdirSync(join(file, '..'), { recursive: true });
        const tmp = `${file}.tmp`;
        writeFileSync(tmp, JSON.stringify({ engine_url: p.engineUrl, model: p.model, texts: { ...known, ...r.texts } }));
        renameSync(tmp, file);
      } catch (err) {
        if (!this.abort.signal.aborted)
          this.log.warn(`prompt-token texts for session ${sessionId} not kept: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }
}
