#!/usr/bin/env bash
# Installs the real-workbench test host for the extension e2e test: code-server 4.100.3 from npm
# (VS Code 1.100.3 on Node 20) plus Debian's chromium, on an offline host.
# Idempotent: a complete install is detected and left alone.
#
#   scripts/code-server-install.sh            # installs into $CODE_SERVER_DIR
#   CODE_SERVER_DIR=/opt/cs scripts/code-server-install.sh
#
# The e2e tests and the test-run provisioning (scripts/provision.ts) look in the same place (test/e2e/code-server.ts).
set -euo pipefail

VERSION=4.100.3
# @vscode/ripgrep as pinned by VS Code 1.100 (lib/vscode/package.json) and the release tag it downloads.
RG_PKG_VERSION=1.15.11
RG_TAG=v13.0.0-10
DIR="${CODE_SERVER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/harness-lab/code-server-$VERSION}"
BIN="$DIR/node_modules/.bin/code-server"

log() { printf '[code-server-install] %s\n' "$*"; }

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v rg >/dev/null 2>&1 || need_apt+=(ripgrep)
[ -e /usr/include/gssapi/gssapi.h ] || need_apt+=(libkrb5-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt-get install ${need_apt[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "[code-server-install] need root to apt-get install ${need_apt[*]}" >&2
    exit 1
  fi
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" >/dev/null
fi

node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" != 20 ]; then
  echo "[code-server-install] code-server $VERSION needs Node 20 (found $(node -v))" >&2
  exit 1
fi

if [ -x "$BIN" ] && [ -e "$DIR/.install-complete" ] && "$BIN" --version 2>/dev/null | grep -q "^$VERSION "; then
  log "code-server $VERSION already installed in $DIR"
  exit 0
fi

# Fix 2 of the reference: @vscode/ripgrep's postinstall downloads rg; it first looks in this cache.
tmp="$(node -p 'require("os").tmpdir()')"
cache="$tmp/vscode-ripgrep-cache-$RG_PKG_VERSION"
asset="ripgrep-$RG_TAG-x86_64-unknown-linux-musl.tar.gz"
if [ ! -s "$cache/$asset" ]; then
  log "seeding ripgrep cache $cache/$asset from $(command -v rg)"
  staging="$(mktemp -d)"
  cp "$(command -v rg)" "$staging/rg"
  mkdir -p "$cache"
  tar czf "$cache/$asset" -C "$staging" rg
  rm -rf "$staging"
fi

mkdir -p "$DIR"
rm -f "$DIR/.install-complete"
[ -e "$DIR/package.json" ] || printf '{ "name": "harness-lab-code-server", "private": true }\n' > "$DIR/package.json"
log "npm install code-server@$VERSION into $DIR (about 2-3 minutes)"
start=$(date +%s)
# Fix 3: node-pty's postinstall runs `npx node-gyp`, which needs npm_config_yes=true.
# Fix 1 (kerberos needs GSSAPI headers) is the libkrb5-dev package above.
( cd "$DIR" && npm_config_yes=true npm install "code-server@$VERSION" --unsafe-perm --foreground-scripts \
    --no-audit --no-fund --loglevel=error ) > "$DIR/install.log" 2>&1 || {
  echo "[code-server-install] npm install failed; last lines of $DIR/install.log:" >&2
  tail -40 "$DIR/install.log" >&2
  exit 1
}
"$BIN" --version | grep -q "^$VERSION " || { echo "[code-server-install] $BIN --version is not $VERSION" >&2; exit 1; }
touch "$DIR/.install-complete"
log "installed code-server $VERSION in $(( $(date +%s) - start ))s"
