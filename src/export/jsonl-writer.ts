// A JSON-lines file written with backpressure: `write` waits while the stream's buffer is full, so a
// producer can never queue more than one buffer's worth of rows. The file appears under its name only
// when `commit` succeeds (written to a temp file, fsynced, renamed); `abort` leaves nothing behind.
import { createWriteStream, type WriteStream } from 'node:fs';
import { open, rename, rm } from 'node:fs/promises';
import { once } from 'node:events';
import { finished } from 'node:stream/promises';

export class JsonlWriter {
  private readonly tmp: string;
  private readonly stream: WriteStream;
  private failed: Error | null = null;
  bytes = 0;
  lines = 0;

  constructor(readonly file: string) {
    this.tmp = `${file}.${process.pid}.partial`;
    this.stream = createWriteStream(this.tmp, { flags: 'w' });
    this.stream.on('error', (err) => {
      this.failed = err;
    });
  }

  async write(value: unknown): Promise<void> {
    if (this.failed) throw this.failed;
    const text = `${JSON.stringify(value)}\n`;
    this.bytes += Buffer.byteLength(text);
    this.lines++;
    if (this.stream.write(text)) return;
    // Wait for the buffer to drain, or fail with the stream; drop both listeners either way.
    const done = new AbortController();
    try {
      await Promise.race([
        once(this.stream, 'drain', { signal: done.signal }),
        once(this.stream, 'error', { signal: done.signal }).then(([e]) => Promise.reject(e as Error)),
      ]);
    } finally {
      done.abort();
    }
  }

  async commit(): Promise<void> {
    if (this.failed) throw this.failed;
    this.stream.end();
    await finished(this.stream);
    const handle = await open(this.tmp, 'r+');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(this.tmp, this.file);
  }

  async abort(): Promise<void> {
    if (!this.stream.closed) {
      const closed = once(this.stream, 'close').catch(() => undefined);
      this.stream.destroy();
      await closed;
    }
    await rm(this.tmp, { force: true });
  }
}
