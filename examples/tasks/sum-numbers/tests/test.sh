#!/bin/bash
# Reward 1 when sum.txt holds the sum of the numbers in numbers.txt (50) and numbers.txt is unchanged.
# HARNESS_LAB_WORKDIR / HARNESS_LAB_LOGS are set only by the local sandbox; Docker uses /app and /logs.
app="${HARNESS_LAB_WORKDIR:-/app}"
out="${HARNESS_LAB_LOGS:-/logs}/verifier"
mkdir -p "$out"
want=$(grep -v '^#' "$app/numbers.txt" | awk '{ s += $1 } END { print s }')
got=$(tr -d '[:space:]' < "$app/sum.txt" 2>/dev/null)
if [ "$want" = "50" ] && [ "$got" = "$want" ]; then
  echo "sum.txt is correct ($got)"
  echo 1 > "$out/reward.txt"
else
  echo "sum.txt is '$got', want 50 (numbers.txt sums to '$want')"
  echo 0 > "$out/reward.txt"
fi
