#!/bin/bash
# reward.json {"reward": passed/total} over the cases in SUM_CASES ("a b expected;...").
app="${HARNESS_LAB_WORKDIR:-/app}"
out="${HARNESS_LAB_LOGS:-/logs}/verifier"
mkdir -p "$out"
passed=0; total=0
IFS=';' read -ra cases <<< "${SUM_CASES:-2 3 5}"
for c in "${cases[@]}"; do
  read -r a b want <<< "$c"
  total=$((total + 1))
  got=$(cd "$app" && timeout 10 bash sum.sh "$a" "$b" 2>&1)
  if [ "$got" = "$want" ]; then passed=$((passed + 1)); echo "ok   sum.sh $a $b = $got"; else echo "FAIL sum.sh $a $b = $got (want $want)"; fi
done
reward=$(awk -v p="$passed" -v t="$total" 'BEGIN { printf "%.4f", p / t }')
printf '{"reward": %s, "passed": %d, "total": %d}\n' "$reward" "$passed" "$total" > "$out/reward.json"
