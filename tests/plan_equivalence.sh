#!/usr/bin/env bash
# Shows that braid's plans and simulated times did not change: for every zoo
# model, `braid plan zoo:M --cluster disco-a --db none --seed 0 --json` (with
# a patience that ends the search before its time budget, so the result is
# deterministic) must give the same fusion groups, buckets and per-strategy
# iteration_ms as the golden file tests/data/plan_golden/M.json.
#
#   tests/plan_equivalence.sh [BRAID_BIN]            # compare, exit 1 on a difference
#   tests/plan_equivalence.sh --update [BRAID_BIN]   # rewrite the golden files
#   MODELS="mlp resnet50" tests/plan_equivalence.sh  # a subset
set -euo pipefail
cd "$(dirname "$0")/.."
update=0
if [[ "${1:-}" == "--update" ]]; then update=1; shift; fi
BRAID="${1:-build/bin/braid}"
PATIENCE="${PATIENCE:-100}"
MODELS="${MODELS:-mlp dlrm rnnlm transformer reformer vgg19 resnet50 resnext50 inception_v3 bert_large gpt3_layers}"
golden=tests/data/plan_golden
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for m in $MODELS; do
  start=$(date +%s.%N)
  "$BRAID" plan "zoo:$m" --cluster disco-a --db none --seed 0 --patience "$PATIENCE" \
    --budget-s 3600 --json > "$tmp/$m.raw"
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  # The deterministic part: plan and simulated times (not search_seconds).
  python3 - "$tmp/$m.raw" "$tmp/$m.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
if j["stop_reason"] == "time budget":
    sys.exit(f"{j['model']}: the search hit its time budget; the result is not deterministic")
keep = {k: j[k] for k in ("model", "cluster", "ranks", "iteration_ms", "best_baseline",
                          "candidates_evaluated", "stop_reason", "plan")}
json.dump(keep, open(sys.argv[2], "w"), indent=1, sort_keys=True)
open(sys.argv[2], "a").write("\n")
PY
  if ((update)); then
    cp "$tmp/$m.json" "$golden/$m.json"
    printf "%-14s updated (%.1f s)\n" "$m" "$secs"
  elif cmp -s "$tmp/$m.json" "$golden/$m.json"; then
    printf "%-14s same plan and times (%.1f s)\n" "$m" "$secs"
  else
    printf "%-14s DIFFERS\n" "$m"
    diff <(head -c 4000 "$golden/$m.json") <(head -c 4000 "$tmp/$m.json") | head -20 || true
    fail=1
  fi
done
exit $fail
