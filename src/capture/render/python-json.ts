// Python's `json.dumps(value, ensure_ascii=False)` in TypeScript: what vLLM's tool parsers write
// tool-call arguments as, and what Jinja templates' `tojson` produces. Shared by the proxy's answer
// parser and the embedded engine's scripted policy so both write arguments the same way.

/** Python's `json.dumps(value, ensure_ascii=False)`: ", " and ": " separators, keys in order. */
export function pythonJsonDumps(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string' || typeof value === 'boolean') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new Error(`cannot serialise ${value} as JSON`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(pythonJsonDumps).join(', ')}]`;
  if (typeof value === 'object') {
    return `{${Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => `${JSON.stringify(k)}: ${pythonJsonDumps(v)}`)
      .join(', ')}}`;
  }
  throw new Error(`cannot serialise a ${typeof value} as JSON`);
}
