// Metrics files as runs of the Training Curves panel (pure: no vscode; curves-file-command.ts is the command).
import { readFile } from 'node:fs/promises';
import { basename, dirname, extname } from 'node:path';
import { parseMetricsFile } from '../training/metrics.js';
import type { ShownRun } from './training-curves-page.js';

/** The run name a metrics file is shown under: a trainer_state.json by its checkpoint folder, else the file's name. */
export function metricsFileRunName(file: string): string {
  const name = basename(file);
  if (name === 'trainer_state.json') return `${basename(dirname(file))}/trainer_state`;
  return name.slice(0, name.length - extname(name).length) || name;
}

/** Reads and parses each file; a file that holds no metrics fails the command, naming it. */
export async function metricsFileRuns(files: string[]): Promise<ShownRun[]> {
  return Promise.all(
    files.map(async (file): Promise<ShownRun> => {
      const metrics = parseMetricsFile(await readFile(file, 'utf8'), file);
      return { name: metricsFileRunName(file), metrics, data: null, dataFile: null, note: null, source: file };
    }),
  );
}
