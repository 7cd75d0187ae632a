// `harness-lab serve`: the rollout server a trainer's harness worker calls (OpenEnv's Harbor
// protocol, TRL's HarborSessionFactory unchanged). Flags in; src/serve/ does the work.
import { resolve } from 'node:path';
import { isLoopbackHost } from '../capture/auth.js';
import { DatasetSpecError, loadSplit, parseDatasetSpec, type ServedSplit } from '../serve/datasets.js';
import { RolloutService } from '../serve/rollouts.js';
import { ServeServer } from '../serve/server.js';
import { backendModule, BackendUnavailableError } from '../batch/backends/index.js';
import { defaultParallel } from '../batch/plan.js';
import { allowTemplateVariables } from '../tasks/task.js';
import { defineCommand, UsageError } from './args.js';

export const serveCommand = defineCommand({
  name: 'serve',
  summary: "serve rollouts to trainers over OpenEnv's Harbor protocol (TRL's worker)",
  usage: `usage: harness-lab serve --dataset NAME=DIR [--dataset NAME=DIR ...] [--host H] [--port P]
                          [--admin-key K] [--max-concurrent N] [--backend docker|k8s]
                          [--parallel N] [--session-idle S] [--state-dir DIR]
                          [--breaker-after K] [--max-starting N] [--start-timeout S]
                          [--context CTX] [--namespace NS] [--registry REG] [--queue NAME] [--run NAME]
                          [--allowed-host NAME]... [--allow-env NAME]...

A rollout server speaking OpenEnv's Harbor wire protocol: GET /harbor_env/splits, POST
/harbor_env/num_tasks|task_range|task, a /ws WebSocket whose step frame calls the tool
run_rollout, and the JSON-RPC session methods on POST /mcp. Point TRL's HarborSessionFactory
at http://H:P. Each rollout runs on the batch backend in a sandbox, captured through a proxy
with the sampling the trainer asked for pinned on every call, and comes back with its turns
(token ids, logprobs, loss masks) and the verifier's reward; a failed rollout is a result with
ok false and reward null. A request without llm_url uses the embedded engine (each task's
policy.json).

  --dataset NAME=DIR  a split: the Harbor tasks under DIR, in path order (repeatable)
  --host H            bind address (default 127.0.0.1; beyond loopback needs --admin-key)
  --port P            default 8000 (0: any free port; the URL is printed)
  --allowed-host NAME a name trainers reach the server by beyond loopback and the bound address
                      (repeatable); any other Host header, and any web page's Origin, is refused
  --admin-key K       required on every route but /health (Authorization: Bearer K, or the
                      key in the server URL: http://trainer:K@H:P, which an unchanged TRL
                      client sends as Basic auth), or HARNESS_LAB_ADMIN_KEY
  --max-concurrent N  sessions at once (default 4, OpenEnv's MAX_CONCURRENT_ENVS); one over
                      gets CAPACITY_REACHED, nothing queues. A session made over /mcp and left
                      unused (no socket, no rollout) is closed after --session-idle S (default 600)
  --parallel N        sandboxes at once over every session (default: from the cores and the
                      tasks' [environment] cpus and memory_mb, as batch does); a session past it
                      waits for a slot with its socket open (pings answered)
  --backend B         docker (default) or k8s (--context, --namespace (default: default),
                      --registry, --queue: the cluster target, as for batch submit)
  --run NAME          with k8s: the training run this server serves (train submit sets it); every
                      object it makes in the cluster is labelled harness-lab/owner-run=NAME, and
                      train cancel removes what a server killed before its cleanup left
  --breaker-after K   after K infra failures in a row no sandbox starts (trainers get FACTORY_ERROR)
                      until the backend answers its probe again (default 10; 0: off)
  --max-starting N    sandboxes starting at once, apart from --parallel (default 4; 0: no cap)
  --start-timeout S   wall budget of one sandbox start-up, an infra failure past it (default 300)
  --state-dir DIR     rollout states, captured sessions, sandbox logs (default ./harness-lab-serve);
                      a server restarted on the same DIR marks rollouts it was running as
                      interrupted (their captures are kept) and removes their sandboxes
  --allow-env NAME    a host variable task templates (\${NAME} in [environment].env, [verifier].env)
                      may copy into the sandbox (repeatable; or HARNESS_LAB_ALLOW_ENV=A,B); others
                      are refused, the lab's HARNESS_LAB_* keys always`,
  flags: {
    dataset: { type: 'string', multiple: true },
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'integer', default: 8000 },
    'allowed-host': { type: 'string', multiple: true },
    'admin-key': { type: 'string' },
    'max-concurrent': { type: 'integer', default: 4 },
    parallel: { type: 'integer' },
    'session-idle': { type: 'integer', default: 600 },
    context: { type: 'string' },
    namespace: { type: 'string' },
    registry: { type: 'string' },
    queue: { type: 'string' },
    run: { type: 'string' },
    backend: { type: 'string', default: 'docker' },
    'state-dir': { type: 'string', default: 'harness-lab-serve' },
    'allow-env': { type: 'string', multiple: true },
    'breaker-after': { type: 'integer' },
    'max-starting': { type: 'integer' },
    'start-timeout': { type: 'integer' },
  },
  run: async ({ flags }) => {
    allowTemplateVariables(flags['allow-env']);
    if (!flags.dataset.length) throw new UsageError('--dataset NAME=DIR is required (at least one split)', { showUsage: true });
    if (flags.backend !== 'docker' && flags.backend !== 'k8s')
      throw new UsageError(`--backend must be docker or k8s, got '${flags.backend}'`);
    if (flags['max-concurrent'] < 1) throw new UsageError('--max-concurrent must be at least 1');
    if (flags.run !== undefined && flags.backend !== 'k8s')
      throw new UsageError(`--run labels what the server makes in a cluster: it needs --backend k8s, not ${flags.backend}`);
    const adminKey = flags['admin-key'] ?? process.env.HARNESS_LAB_ADMIN_KEY;
    if (!isLoopbackHost(flags.host) && !adminKey)
      throw new UsageError(`--host ${flags.host} is beyond loopback: give --admin-key K (or HARNESS_LAB_ADMIN_KEY)`);
    const splits = new Map<string, ServedSplit>();
    for (const spec of flags.dataset) {
      let parsed;
      try {
        parsed = parseDatasetSpec(spec);
      } catch (err) {
        if (err instanceof DatasetSpecError) throw new UsageError(err.message);
        throw err;
      }
      if (splits.has(parsed.name)) throw new UsageError(`--dataset ${parsed.name} is given twice`);
      const split = loadSplit(parsed.name, parsed.dir);
      if (split.error) process.stderr.write(`split ${parsed.name}: ${split.error}\n`);
      splits.set(parsed.name, split);
    }
    try {
      await backendModule(flags.backend);
    } catch (err) {
      if (err instanceof BackendUnavailableError) throw new UsageError(err.message);
      throw err;
    }
    const log = (line: string) => process.stderr.write(`${new Date().toISOString()} ${line}\n`);
    const allTasks = [...splits.values()].flatMap((s) => s.tasks);
    const parallel = flags.parallel ?? (allTasks.length ? defaultParallel(allTasks) : 1);
    if (parallel < 1) throw new UsageError('--parallel must be at least 1');
    if (flags['start-timeout'] !== undefined && flags['start-timeout'] < 1)
      throw new UsageError('--start-timeout must be at least 1 second');
    const rollouts = new RolloutService({
      stateDir: resolve(flags['state-dir']),
      backend: flags.backend,
      splits,
      log,
      parallel,
      breakerAfter: flags['breaker-after'],
      maxStarting: flags['max-starting'],
      startTimeoutSec: flags['start-timeout'],
      ...(flags.backend === 'k8s'
        ? {
            k8s: {
              context: flags.context ?? null,
              namespace: flags.namespace ?? 'default',
              registry: flags.registry ?? null,
              queue_name: flags.queue ?? null,
              ...(flags.run ? { owner_run: flags.run } : {}),
            },
          }
        : {}),
    });
    const recovered = await rollouts.recover();
    if (recovered.interrupted.length)
      log(
        `marked ${recovered.interrupted.length} rollout(s) a previous server was running as interrupted: ${recovered.interrupted.join(', ')}`,
      );
    if (recovered.removed.length) log(`removed ${recovered.removed.length} sandbox(es) a previous server left`);
    rollouts.startReaper();
    const server = await ServeServer.start({
      host: flags.host,
      port: flags.port,
      allowedHosts: flags['allowed-host'],
      splits,
      rollouts,
      maxConcurrent: flags['max-concurrent'],
      sessionIdleMs: Math.max(1, flags['session-idle']) * 1000,
      ...(adminKey ? { adminKey } : {}),
      log,
    });
    process.stdout.write(
      `harness-lab serve: ${server.url} (${[...splits.values()].map((s) => `${s.name}: ${s.tasks.length} task(s)`).join(', ')}; ` +
        `max ${flags['max-concurrent']} sessions, ${parallel} sandboxes at once; ${flags.backend} backend)\n`,
    );
    await new Promise<void>((done) => {
      const stop = () => done();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    });
    log('stopping: running rollouts are stopped and their sandboxes removed');
    await server.close();
    await rollouts.close();
    return 0;
  },
});
