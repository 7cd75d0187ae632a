// The Harness Lab terminal's PATH, without vscode: a `harness-lab` shim in the extension's global
// storage that runs the bundled CLI (dist/cli.js) with the extension host's node, and one shim per
// installed harness CLI that runs it from the harness cache on the Node it needs. A .vsix user has
// no `harness-lab` on PATH otherwise, and toasts and docs name it.
import { chmodSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { installedHarnesses } from '../harness/install.js';
import { harnessSpec } from '../harness/wiring.js';

const sh = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The `harness-lab` shim: the bundled CLI on this node (Electron's runs as plain node with ELECTRON_RUN_AS_NODE). */
export function labShim(nodePath: string, cliJs: string): string {
  return `#!/bin/sh\n# Written by the Harness Lab extension: the bundled CLI on the editor's node.\nELECTRON_RUN_AS_NODE=1 exec ${sh(nodePath)} ${sh(cliJs)} "$@"\n`;
}

/** A harness shim: its binary from the cache, with the Node it needs first on PATH. */
export function harnessShim(bin: string, nodeBin: string | null): string {
  const path = nodeBin ? `PATH=${sh(nodeBin)}:"$PATH" ` : '';
  return `#!/bin/sh\n# Written by the Harness Lab extension: a harness CLI from the harness cache.\n${path}exec ${sh(bin)} "$@"\n`;
}

/** Writes the shims into `dir` (emptied first, so an uninstalled harness's shim goes); returns the commands written. */
export function writeShims(dir: string, opts: { nodePath: string; cliJs: string; harnessRoot?: string }): string[] {
  mkdirSync(dir, { recursive: true });
  for (const f of readdirSync(dir)) rmSync(join(dir, f), { force: true });
  const write = (name: string, text: string) => {
    writeFileSync(join(dir, name), text);
    chmodSync(join(dir, name), 0o755);
    return name;
  };
  const names = [write('harness-lab', labShim(opts.nodePath, opts.cliJs))];
  for (const h of installedHarnesses(opts.harnessRoot)) {
    const bin = harnessSpec(h.name).bin;
    if (!names.includes(bin)) names.push(write(bin, harnessShim(h.bin, h.nodeBin)));
  }
  return names;
}

/** The terminal's PATH: the shims first, then the editor's own PATH. */
export function labTerminalPath(shimDir: string, basePath: string | undefined): string {
  return [shimDir, ...(basePath ? [basePath] : [])].join(delimiter);
}
