#!/bin/bash
# Reward 1 when hello.txt holds exactly "Hello, world!" (a trailing newline is tolerated).
# HARNESS_LAB_WORKDIR / HARNESS_LAB_LOGS are set only by the local sandbox; Docker uses /app and /logs.
app="${HARNESS_LAB_WORKDIR:-/app}"
out="${HARNESS_LAB_LOGS:-/logs}/verifier"
mkdir -p "$out"
if [ -f "$app/hello.txt" ] && [ "$(cat "$app/hello.txt")" = "Hello, world!" ]; then
  echo "hello.txt is correct"
  echo 1 > "$out/reward.txt"
else
  echo "hello.txt is missing or wrong: $(head -c 200 "$app/hello.txt" 2>&1)"
  echo 0 > "$out/reward.txt"
fi
