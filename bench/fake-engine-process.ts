// The fake vLLM engine in its own process, so its CPU work does not share an event loop with the
// proxy under test. Prints one JSON line `{"url": ..., "model": ...}` on stdout once listening and
// exits when stdin closes (its parent died) or on SIGTERM/SIGINT.
//
// Think times come from a seeded generator, re-seeded by a `seed <n>` line on stdin before each
// measured run: every path then draws the same think times (common random numbers), so the
// difference between paths' percentiles is overhead, not sampling noise of the think time.
import { Server } from 'node:net';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { startFakeEngine } from '../src/engine/fake-engine.js';
import { parseThinkMs } from './processes.js';
import { seededRandom } from '../src/engine/prng.js';

const { values } = parseArgs({ options: { 'think-ms': { type: 'string', default: '500,1500' }, port: { type: 'string', default: '0' } } });

// vLLM (uvicorn) listens with a backlog of 2048; node's default is 511. startFakeEngine has no
// backlog option, so this process raises the default for its one server: with 511, a burst of new
// connections overflows the accept queue and the dropped SYNs come back as 1 s / 3 s retransmits,
// which would be charged to the engine instead of to the hop under test.
const ENGINE_BACKLOG = 2048;
const listen = Server.prototype.listen as (this: Server, ...args: unknown[]) => Server;
(Server.prototype as unknown as { listen: (...args: unknown[]) => Server }).listen = function (this: Server, ...args: unknown[]) {
  const [port, host, callback] = args;
  if (typeof port === 'number' && typeof host === 'string' && typeof callback === 'function')
    return listen.call(this, { port, host, backlog: ENGINE_BACKLOG }, callback);
  return listen.apply(this, args);
};

async function main(): Promise<void> {
  // Only this process's Math.random: the fake engine draws its think time from it.
  Math.random = seededRandom(1);
  const engine = await startFakeEngine({ thinkMs: parseThinkMs(values['think-ms']), port: Number(values.port) });
  // The fake engine keeps every request for tests; here that would only grow its heap (and its GC
  // pauses) over the run, biasing whichever path is measured last.
  const trim = setInterval(() => {
    engine.requests.length = 0;
    engine.responses.length = 0;
  }, 1000);
  process.stdout.write(`${JSON.stringify({ url: engine.url, model: engine.model, pid: process.pid })}\n`);
  const stop = () => {
    clearInterval(trim);
    void engine.close().then(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  createInterface({ input: process.stdin })
    .on('line', (line) => {
      const match = /^seed (\d+)$/.exec(line.trim());
      if (match) Math.random = seededRandom(Number(match[1]));
    })
    .on('close', stop);
}

main().catch((err: unknown) => {
  process.stderr.write(`fake engine: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
