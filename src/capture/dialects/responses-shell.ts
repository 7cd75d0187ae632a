// The Responses API's shell tools (`local_shell` from codex, `shell` from newer clients) as one
// synthetic `shell` function the engine can call, and its calls mapped back to the item the client declared.
import type { ChatTool, ChatToolCall, JsonObject } from '../types.js';
import { isObject } from './common.js';

export type ShellKind = 'local_shell' | 'shell';

/** Which shell tool the request declared, if any (codex: `local_shell`; newer clients: `shell`). */
export function shellKind(tools: unknown): ShellKind | null {
  if (!Array.isArray(tools)) return null;
  for (const tool of tools) if (isObject(tool) && (tool.type === 'local_shell' || tool.type === 'shell')) return tool.type;
  return null;
}

export function shellDeclaration(tool: JsonObject): ChatTool {
  return {
    type: 'function',
    function: {
      name: 'shell',
      description: typeof tool.description === 'string' ? tool.description : 'Run shell commands in the local workspace.',
      parameters: {
        type: 'object',
        properties: {
          cmd: { type: 'string' },
          commands: { type: 'array', items: { type: 'string' } },
          timeout_ms: { type: 'number' },
          max_output_length: { type: 'number' },
        },
      },
    },
  };
}

const SHELL_EXTRAS = ['timeout_ms', 'max_output_length', 'working_directory', 'env', 'user'];
const SHELL_WRAPPERS = new Set(['bash', 'sh', 'zsh', '/bin/bash', '/bin/sh', '/bin/zsh']);

/** A local_shell/shell action -> JSON arguments of the synthetic `shell` function. */
export function localShellArguments(action: unknown): string {
  if (typeof action === 'string') return action;
  if (!isObject(action)) return '{}';
  const args: JsonObject = {};
  const { command, commands } = action;
  if (typeof command === 'string') {
    const trimmed = command.trim();
    if (/^[{[]/.test(trimmed)) {
      try {
        JSON.parse(trimmed);
        return trimmed;
      } catch {
        // a command that merely starts with a brace
      }
    }
    args.cmd = command;
  } else if (Array.isArray(command) && command.every((c) => typeof c === 'string')) {
    // local_shell exec argv; `bash -lc X` is how we render a cmd, so read it back the same way.
    const argv = command as string[];
    args.cmd = argv.length === 3 && SHELL_WRAPPERS.has(argv[0]!) && /^-l?c$/.test(argv[1]!) ? argv[2]! : argv.join(' ');
  } else if (Array.isArray(commands)) {
    const list = commands.filter((c): c is string => typeof c === 'string');
    if (list.length === 1) args.cmd = list[0];
    else args.commands = list;
  } else {
    for (const [k, v] of Object.entries(action)) if (k !== 'type') args[k] = v;
    return JSON.stringify(args);
  }
  for (const key of SHELL_EXTRAS) if (action[key] !== undefined && action[key] !== null) args[key] = action[key];
  return JSON.stringify(args);
}

/** A `shell` tool call -> the shell item the client declared. */
export function localShellItem(kind: ShellKind, call: ChatToolCall, suffix: string): JsonObject {
  let parsed: unknown;
  try {
    parsed = JSON.parse(call.function.arguments);
  } catch {
    parsed = undefined;
  }
  const args = isObject(parsed) ? parsed : {};
  let commands: string[] = [];
  if (Array.isArray(args.commands)) commands = args.commands.filter((c): c is string => typeof c === 'string');
  else if (typeof args.cmd === 'string') commands = [args.cmd];
  else if (typeof args.command === 'string') commands = [args.command];
  else if (!isObject(parsed) && call.function.arguments) commands = [call.function.arguments];
  if (kind === 'shell') {
    const action: JsonObject = { commands };
    for (const key of ['timeout_ms', 'max_output_length']) if (args[key] !== undefined) action[key] = args[key];
    return { type: 'shell_call', id: `sh_${suffix}`, call_id: call.id, status: 'completed', action };
  }
  const action: JsonObject = { type: 'exec', command: ['bash', '-lc', commands.join(' && ')], env: isObject(args.env) ? args.env : {} };
  for (const key of ['timeout_ms', 'working_directory', 'user']) if (args[key] !== undefined) action[key] = args[key];
  return { type: 'local_shell_call', id: `lsh_${suffix}`, call_id: call.id, status: 'completed', action };
}
