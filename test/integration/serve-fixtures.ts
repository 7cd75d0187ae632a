// A `harness-lab serve` process and a client sending exactly the frames OpenEnv's Harbor client
// (TRL's HarborSessionFactory) sends: the task API over HTTP, a /ws session whose step frame calls
// run_rollout, and the /mcp session-create variant. Shared by the serve tests and the serve bench.
/* eslint-disable @typescript-eslint/no-explicit-any -- wire JSON from the server under test, checked field by field as a Python client reads it */
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Docker from 'dockerode';
import WebSocket from 'ws';
import { RolloutStateSchema, type RolloutState } from '../../src/batch/state.js';
import { LABEL } from '../../src/sandbox/docker-client.js';

export const REPO = join(__dirname, '..', '..');
const EXAMPLES = join(REPO, 'examples', 'tasks');

export interface ServeProcess {
  url: string;
  child: ChildProcess;
  stderr: () => string;
  /** Resolves when the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export function startServe(args: string[], env: NodeJS.ProcessEnv = {}): Promise<ServeProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(REPO, 'src', 'cli', 'main.ts'), 'serve', '--port', '0', ...args], {
    cwd: REPO,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal })),
  );
  child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      const m = /harness-lab serve: (http:\/\/\S+) /.exec(out);
      if (m) resolve({ url: m[1]!, child, stderr: () => err, exited });
    });
    void exited.then((e) => reject(new Error(`serve exited (${e.code ?? e.signal}) before listening: ${err}`)));
  });
}

/** A hello-file-shaped task whose shell tool takes `sleepSec`, and whose harness asks for `asked` sampling on every call. */
export function slowTask(root: string, folder: string, sleepSec: number, asked: Record<string, number>): string {
  const dir = join(root, folder);
  cpSync(join(EXAMPLES, 'hello-file'), dir, { recursive: true });
  const toml = readFileSync(join(dir, 'task.toml'), 'utf8').replace('name = "harness-lab/hello-file"', `name = "serve-test/${folder}"`);
  writeFileSync(join(dir, 'task.toml'), `${toml}\n[environment.env]\nHARNESS_LAB_REACT_SAMPLING = '${JSON.stringify(asked)}'\n`);
  const instruction = `Create a file named \`${folder}.txt\` in the current working directory whose content is exactly \`done\`.`;
  writeFileSync(join(dir, 'instruction.md'), `${instruction}\n`);
  writeFileSync(
    join(dir, 'policy.json'),
    JSON.stringify({
      name: folder,
      rules: [
        {
          when: { last_message: `Create a file named \`${folder}.txt\`` },
          then: { call: { tool: '^(bash|exec_command|shell)$', input: `sleep ${sleepSec} && printf 'done' > ${folder}.txt` } },
        },
      ],
      fallback: { say: `I created ${folder}.txt.` },
    }),
  );
  writeFileSync(
    join(dir, 'tests', 'test.sh'),
    `#!/bin/bash\nmkdir -p /logs/verifier\nif [ "$(cat /app/${folder}.txt 2>/dev/null)" = "done" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n`,
  );
  return dir;
}

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

export interface WsOutcome {
  /** Every frame the server sent, parsed. */
  frames: any[];
  /** The close code the client saw (1006: the connection dropped without a close frame). */
  closeCode: number;
}

/**
 * run_rollout's arguments as TRL's HarborSessionFactory fills them (every field it sends), for the
 * reference harness on task 0 of split `train`; tests override what they vary.
 */
export function runRolloutArgs(overrides: Record<string, unknown>): Record<string, unknown> {
  return {
    split: 'train',
    task_index: 0,
    harness: 'react',
    sandbox: 'docker',
    reward_key: 'reward',
    keep_sandbox: false,
    force_build: false,
    llm_url: '',
    model: '',
    api_key: 'EMPTY',
    auth_header: null,
    agent_timeout_sec: 120,
    agent_step_limit: 20,
    ...overrides,
  };
}

/** The run_rollout step frame exactly as OpenEnv's client sends it. */
export function stepFrame(args: Record<string, unknown>) {
  return { type: 'step', data: { type: 'call_tool', tool_name: 'run_rollout', arguments: args } };
}

/**
 * One OpenEnv-style session on /ws: connect (optionally to an existing session), send `frames`
 * one after another, each after the previous reply, then `{"type":"close"}`. Resolves with what
 * came back when the socket closes, however it closes.
 */
export function wsSession(
  baseUrl: string,
  frames: unknown[],
  opts: { sessionId?: string; onOpen?: () => void; onSocket?: (ws: WebSocket) => void } = {},
): Promise<WsOutcome> {
  const url = `${baseUrl.replace(/^http/, 'ws')}/ws${opts.sessionId ? `?session_id=${encodeURIComponent(opts.sessionId)}` : ''}`;
  const ws = new WebSocket(url);
  opts.onSocket?.(ws);
  const got: any[] = [];
  const queue = [...frames];
  const sendNext = () => {
    const next = queue.shift();
    ws.send(typeof next === 'string' ? next : JSON.stringify(next ?? { type: 'close' }));
  };
  return new Promise((resolve, reject) => {
    ws.on('open', () => {
      opts.onOpen?.();
      sendNext();
    });
    ws.on('message', (data) => {
      got.push(JSON.parse(data.toString()));
      if (ws.readyState === ws.OPEN && (queue.length || got.length)) sendNext();
    });
    ws.on('error', () => {});
    ws.on('close', (code) => resolve({ frames: got, closeCode: code }));
    ws.on('unexpected-response', (_req, res) => reject(new Error(`ws upgrade refused: ${res.statusCode}`)));
  });
}

/** The HarborRolloutResult in an observation frame, the way OpenEnv's client unwraps it. */
export function rolloutResult(frame: any): any {
  if (frame?.type !== 'observation') throw new Error(`not an observation: ${JSON.stringify(frame).slice(0, 500)}`);
  const result = frame.data.observation.result;
  const text = typeof result === 'string' ? result : Array.isArray(result) ? result[0].text : result.content[0].text;
  return JSON.parse(text);
}

/**
 * An engine front that records every chat request body it forwards (what the engine saw) and every
 * JSON answer the engine gave to one (what it sampled), in front of the scripted policy engine.
 */
export async function recordingFront(engineUrl: string): Promise<{ url: string; bodies: any[]; answers: any[]; server: Server }> {
  const bodies: any[] = [];
  const answers: any[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      // Chat completions, and token-id completions (the proxy renders in token-in mode); not rescoring.
      const recorded = (req.url?.endsWith('/chat/completions') || req.url?.endsWith('/v1/completions')) && body.length > 0;
      if (recorded) bodies.push(JSON.parse(body.toString('utf8')));
      void fetch(`${engineUrl.replace(/\/+$/, '')}${req.url}`, {
        method: req.method,
        headers: { 'content-type': 'application/json' },
        ...(body.length ? { body } : {}),
      }).then(
        async (up) => {
          const text = Buffer.from(await up.arrayBuffer());
          if (recorded && up.ok && (up.headers.get('content-type') ?? '').includes('json')) answers.push(JSON.parse(text.toString('utf8')));
          res.writeHead(up.status, { 'content-type': up.headers.get('content-type') ?? 'application/json' });
          res.end(text);
        },
        (err: unknown) => {
          res.writeHead(502);
          res.end(String(err));
        },
      );
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bodies, answers, server };
}

/** The sandboxes of one serve state dir's batches (other servers may share the Docker daemon). */
export async function servedContainers(docker: Docker, stateDir: string): Promise<Docker.ContainerInfo[]> {
  const root = join(stateDir, 'engines');
  const batches = new Set(existsSync(root) ? readdirSync(root).map((id) => `serve-${id}`) : []);
  const all = await docker.listContainers({ all: true, filters: JSON.stringify({ label: [LABEL.rollout] }) });
  return all.filter((c) => batches.has(c.Labels[LABEL.batch] ?? ''));
}

/** The HarborTurn -> TrainingTrace turn mapping TRL's client does (checked with our strict TrainingTurnSchema). */
export function asTrainingTurn(t: any) {
  return {
    node_id: t.node_id,
    prompt_token_ids: t.prompt_token_ids,
    completion_token_ids: t.completion_token_ids,
    per_token_logps: t.per_token_logps,
    loss_mask: t.loss_mask,
    request: { messages: t.request_messages, tools: t.request_tools },
    response: { choices: [{ message: { role: 'assistant', content: t.text }, finish_reason: t.finish_reason }] },
    metadata: {
      node_id: t.node_id,
      index: t.turn,
      model: null,
      n_tools: t.n_tools,
      harness_session_id: null,
      sampling_params: t.sampling_params,
      requested_sampling_params: t.requested_sampling_params,
    },
  };
}

/** Rollout state files of a serve state dir, each with its engine's directory. */
export function servedStates(stateDir: string): { dir: string; state: RolloutState }[] {
  const root = join(stateDir, 'engines');
  if (!existsSync(root)) return [];
  return readdirSync(root).flatMap((e) => {
    const dir = join(root, e, 'rollouts');
    return existsSync(dir)
      ? readdirSync(dir)
          .filter((n) => n.endsWith('.json'))
          .map((n) => ({ dir: join(root, e), state: RolloutStateSchema.parse(JSON.parse(readFileSync(join(dir, n), 'utf8'))) }))
      : [];
  });
}

/** The stored call lines of a session in an engine directory's capture. */
export function capturedCalls(dir: string, sessionId: string): string[] {
  const file = join(dir, 'capture', 'sessions', `${sessionId}.jsonl`);
  return existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => l.includes('"type":"call"'))
    : [];
}
