// The shipped bundle must load with nothing but `vscode` and Node built-ins: the .vsix is packaged
// with --no-dependencies, so any top-level require of a package would break activation.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

const bundle = join(__dirname, '..', '..', 'dist', 'extension.js');

test('dist/extension.js loads outside the repository with only a vscode stub', () => {
  assert.ok(existsSync(bundle), `${bundle} is missing: run \`npm run build\` first`);
  const dir = mkdtempSync(join(tmpdir(), 'hl-bundle-'));
  try {
    mkdirSync(join(dir, 'node_modules', 'vscode'), { recursive: true });
    // Any vscode API touched at load time (not at activation) would throw on this stub.
    writeFileSync(
      join(dir, 'node_modules', 'vscode', 'index.js'),
      'module.exports = new Proxy({}, { get(_t, k) { if (typeof k === "symbol" || k === "__esModule") return undefined; throw new Error("vscode." + String(k) + " used at load time"); } });\n',
    );
    copyFileSync(bundle, join(dir, 'extension.js'));
    const out = execFileSync(
      process.execPath,
      ['-e', 'const e = require("./extension.js"); console.log(typeof e.activate, typeof e.deactivate)'],
      { cwd: dir, encoding: 'utf8', env: { PATH: process.env.PATH, NODE_PATH: '' } },
    );
    assert.equal(out.trim(), 'function function');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
