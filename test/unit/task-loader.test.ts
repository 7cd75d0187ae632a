import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  TaskError,
  allowTemplateVariables,
  allowedTemplateVariables,
  findTasks,
  loadTask,
  resolveEnvTemplate,
  sizeToMb,
} from '../../src/tasks/task.js';

const EXAMPLES = join(__dirname, '..', '..', 'examples', 'tasks');

function makeTask(files: Record<string, string>): string {
  const dir = join(mkdtempSync(join(tmpdir(), 'hl-task-')), 'my-task');
  const all: Record<string, string> = {
    'instruction.md': 'Do the thing.\n',
    'tests/test.sh': '#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n',
    'task.toml': '',
    ...files,
  };
  for (const [rel, text] of Object.entries(all)) {
    mkdirSync(join(dir, rel, '..'), { recursive: true });
    writeFileSync(join(dir, rel), text);
  }
  return dir;
}

function rejects(dir: string, file: string, field: string | undefined, detail: RegExp): void {
  assert.throws(
    () => loadTask(dir),
    (err: unknown) => {
      assert.ok(err instanceof TaskError, `expected a TaskError, got ${String(err)}`);
      assert.equal(err.file, file);
      assert.equal(err.field, field);
      assert.match(err.message, detail);
      return true;
    },
  );
}

test('the current schema (1.4): task table, timeouts, resources, verifier env, policy and solution', () => {
  const t = loadTask(join(EXAMPLES, 'hello-file'));
  assert.equal(t.name, 'hello-file');
  assert.equal(t.fullName, 'harness-lab/hello-file');
  assert.equal(t.schemaVersion, '1.4');
  assert.deepEqual(t.legacy, []);
  assert.equal(t.agentTimeoutSec, 300);
  assert.equal(t.verifierTimeoutSec, 60);
  assert.equal(t.environment.cpus, 1);
  assert.equal(t.environment.memoryMb, 2048);
  assert.equal(t.environment.networkMode, 'no-network', 'the offline example declares it');
  assert.equal(t.agentNetworkMode, 'no-network');
  assert.ok(t.environment.dockerfile?.endsWith('environment/Dockerfile'));
  assert.ok(t.policyFile?.endsWith('hello-file/policy.json'));
  assert.ok(t.solutionDir?.endsWith('hello-file/solution'));
  assert.match(t.instruction, /Hello, world!/);
});

test('legacy keys: root version, memory = "2G", allow_internet, no [task] table', () => {
  const t = loadTask(join(EXAMPLES, 'fix-script'));
  assert.equal(t.name, 'fix-script');
  assert.equal(t.schemaVersion, '1.0');
  assert.equal(t.environment.memoryMb, 2048);
  assert.equal(t.environment.networkMode, 'public');
  assert.deepEqual(t.verifierEnv, { SUM_CASES: '2 3 5;10 -4 6;0 0 0;7 8 15' });
  assert.deepEqual(t.legacy.sort(), [
    'environment.allow_internet -> network_mode',
    'environment.memory -> memory_mb',
    'version -> schema_version',
  ]);

  const offline = loadTask(
    makeTask({ 'task.toml': 'version = "1.0"\n[environment]\nallow_internet = false\nstorage = "10G"\nmemory = "512M"\n' }),
  );
  assert.equal(offline.environment.networkMode, 'no-network');
  assert.equal(offline.agentNetworkMode, 'no-network');
  assert.equal(offline.environment.storageMb, 10240);
  assert.equal(offline.environment.memoryMb, 512);
  assert.equal(offline.verifierTimeoutSec, 600, 'Harbor default');
  assert.equal(offline.agentTimeoutSec, undefined, 'Harbor default: no agent timeout');
});

test("[agent].network_mode overrides the environment's for the agent phase", () => {
  const t = loadTask(makeTask({ 'task.toml': '[agent]\nnetwork_mode = "no-network"\n[environment]\nnetwork_mode = "public"\n' }));
  assert.equal(t.environment.networkMode, 'public');
  assert.equal(t.agentNetworkMode, 'no-network');
  assert.equal(loadTask(makeTask({ 'task.toml': '' })).agentNetworkMode, 'public', 'Harbor default');
  rejects(makeTask({ 'task.toml': '[agent]\nnetwork_mode = "lan"\n' }), 'my-task/task.toml', 'agent.network_mode', /.+/);
});

test('the current key wins over its legacy spelling', () => {
  const t = loadTask(makeTask({ 'task.toml': '[environment]\nmemory_mb = 1024\nmemory = "4G"\n' }));
  assert.equal(t.environment.memoryMb, 1024);
});

test('size strings', () => {
  assert.equal(sizeToMb('2G'), 2048);
  assert.equal(sizeToMb('1.5Gi'), 1536);
  assert.equal(sizeToMb('512M'), 512);
  assert.equal(sizeToMb('512MB'), 512);
  assert.equal(sizeToMb('2048'), 2048);
  assert.equal(sizeToMb('lots'), undefined);
});

test('broken tasks name the file and the field', () => {
  rejects(makeTask({ 'task.toml': '[agent]\ntimeout_sec = "fast"\n' }), 'my-task/task.toml', 'agent.timeout_sec', /number/);
  rejects(makeTask({ 'task.toml': '[environment]\ncpus = -1\n' }), 'my-task/task.toml', 'environment.cpus', /.+/);
  rejects(
    makeTask({ 'task.toml': '[environment]\nmemory = "lots"\n' }),
    'my-task/task.toml',
    'environment.memory',
    /cannot read size 'lots'/,
  );
  rejects(makeTask({ 'task.toml': '[environment]\nnetwork_mode = "sometimes"\n' }), 'my-task/task.toml', 'environment.network_mode', /.+/);
  rejects(makeTask({ 'task.toml': '[agent\ntimeout_sec = 1\n' }), 'my-task/task.toml', 'line 1, column 2', /not valid TOML/);
  rejects(makeTask({ 'task.toml': '[verifier.env]\nTOKEN = 3\n' }), 'my-task/task.toml', 'verifier.env.TOKEN', /string/);
  rejects(makeTask({ 'task.toml': '[environment]\nos = "windows"\n' }), 'my-task/task.toml', 'environment.os', /windows/);
  rejects(makeTask({ 'task.toml': '[[steps]]\nname = "one"\n' }), 'my-task/task.toml', 'steps', /multi-step/);
  rejects(makeTask({ 'instruction.md': '  \n' }), 'my-task/instruction.md', undefined, /empty/);
  const noTests = makeTask({});
  rmSync(join(noTests, 'tests'), { recursive: true });
  rejects(noTests, 'my-task/tests/test.sh', undefined, /missing/);
  const noInstruction = makeTask({});
  rmSync(join(noInstruction, 'instruction.md'));
  rejects(noInstruction, 'my-task/instruction.md', undefined, /missing/);
  const noToml = makeTask({});
  rmSync(join(noToml, 'task.toml'));
  rejects(noToml, 'my-task/task.toml', undefined, /missing/);
});

test('env templates resolve ${VAR} and ${VAR:-default} of allowed variables; an unset variable names the field', () => {
  const env = { HOSTV: 'v', HARNESS_LAB_ALLOW_ENV: 'HOSTV, MISSING' };
  assert.deepEqual(resolveEnvTemplate({ A: '${HOSTV}', B: 'x-${NOPE:-fallback}', C: 'plain' }, env, 't/task.toml', 'verifier.env'), {
    A: 'v',
    B: 'x-fallback',
    C: 'plain',
  });
  assert.throws(
    () => resolveEnvTemplate({ K: '${MISSING}' }, env, 't/task.toml', 'verifier.env'),
    /t\/task.toml: verifier.env.K: needs host variable MISSING/,
  );
});

test('env templates refuse variables the user did not allow, and HARNESS_LAB_* secrets even when allowed', () => {
  const host = { HOME: '/root', SECRET_TOKEN: 's3cret', HARNESS_LAB_ADMIN_KEY: 'hla-admin', HARNESS_LAB_ENGINE_API_KEY: 'sk-engine' };
  assert.throws(
    () => resolveEnvTemplate({ TOKEN: '${SECRET_TOKEN}' }, host, 't/task.toml', 'environment.env'),
    (e: Error) =>
      e instanceof TaskError &&
      /^t\/task.toml: environment.env.TOKEN: asks for host variable SECRET_TOKEN, which is not allowed: pass --allow-env SECRET_TOKEN/.test(
        e.message,
      ),
  );
  // A default stands in for a variable that is not allowed: the host's value is never read.
  assert.deepEqual(resolveEnvTemplate({ H: '${HOME:-/home/agent}' }, host, 't/task.toml', 'environment.env'), { H: '/home/agent' });
  const allowed = { ...host, HARNESS_LAB_ALLOW_ENV: 'HOME,HARNESS_LAB_ADMIN_KEY,HARNESS_LAB_ENGINE_API_KEY' };
  assert.deepEqual(resolveEnvTemplate({ H: '${HOME}' }, allowed, 't/task.toml', 'environment.env'), { H: '/root' });
  for (const [field, value] of [
    ['KEY', '${HARNESS_LAB_ADMIN_KEY}'],
    ['E', 'Bearer ${HARNESS_LAB_ENGINE_API_KEY:-none}'],
    ['L', '${harness_lab_admin_key}'],
  ] as const) {
    for (const env of [host, allowed]) {
      assert.throws(
        () => resolveEnvTemplate({ [field]: value }, env, 'my-task/task.toml', 'verifier.env'),
        (e: Error) =>
          e instanceof TaskError &&
          e.message.startsWith(`my-task/task.toml: verifier.env.${field}: asks for host variable`) &&
          /HARNESS_LAB_\* variables .* never go into a sandbox/.test(e.message) &&
          !e.message.includes('hla-admin') &&
          !e.message.includes('sk-engine'),
      );
    }
  }
});

test('--allow-env adds to HARNESS_LAB_ALLOW_ENV without repeating names', () => {
  const env: NodeJS.ProcessEnv = { HARNESS_LAB_ALLOW_ENV: 'A' };
  allowTemplateVariables(['B', 'A', ' C '], env);
  assert.equal(env.HARNESS_LAB_ALLOW_ENV, 'A,B,C');
  assert.deepEqual([...allowedTemplateVariables(env)], ['A', 'B', 'C']);
  allowTemplateVariables([], env);
  assert.equal(env.HARNESS_LAB_ALLOW_ENV, 'A,B,C');
});

test('findTasks lists the shipped example tasks', () => {
  const found = findTasks(EXAMPLES).map((d) => d.split('/').pop());
  assert.deepEqual(found, ['fix-script', 'hello-file', 'sum-numbers']);
});
