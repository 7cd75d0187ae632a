// Where Run with Harness / Validate write, and how a validation reads as a table (pure; no vscode).
import { isAbsolute, join } from 'node:path';
import type { ValidationTable } from '../sandbox/validate.js';

/**
 * Where rollouts are written: harnessLab.rolloutsDir (empty: .harness-lab/rollouts) under the first
 * workspace folder, else global storage.
 */
export function rolloutsDir(setting: string, workspaceFolder: string | undefined, globalStorage: string): string {
  if (setting && isAbsolute(setting)) return setting;
  if (workspaceFolder) return join(workspaceFolder, setting || '.harness-lab/rollouts');
  return join(globalStorage, 'rollouts');
}

function mdCell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\r?\n/g, '<br>');
}

export function validationMarkdown(t: ValidationTable, cancelled = false): string {
  return [
    `# ${t.harness}: capture contract on task ${t.task} (${t.sandbox})`,
    '',
    cancelled
      ? '**Cancelled**: the sandbox was removed before the rollout finished.'
      : `**${t.ok ? 'PASS' : 'FAIL'}**: ${t.rows.filter((r) => r.ok).length} of ${t.rows.length} checks pass.`,
    '',
    '| Check | Result | Detail |',
    '| --- | --- | --- |',
    ...t.rows.map((r) => `| ${mdCell(r.check)} | ${r.ok ? 'PASS' : '**FAIL**'} | ${mdCell(r.detail)} |`),
    '',
    `Rollout: \`${t.rollout.out_dir}\` (session \`${t.rollout.session_id}\`)`,
    '',
  ].join('\n');
}
