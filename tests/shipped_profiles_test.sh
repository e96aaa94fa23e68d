#!/usr/bin/env bash
# The measured profiles the repository ships (costmodel/profiles) reach the
# plans of the presets they describe, with and without a profile store, and
# go through `braid profile import` / `export` unchanged.
# Usage: shipped_profiles_test.sh BRAID_BINARY PROFILES_DIR
set -euo pipefail
braid=$1
dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
measured() {  # prints braid's measured share of a dgx-h100 resnet50 plan
  "$braid" plan zoo:resnet50 --cluster dgx-h100 "$@" 2>&1 |
    sed -nE 's/^cost sources +measured ([0-9.]+)%.*/\1/p'
}
with=$(BRAID_PROFILES=$dir measured --db none)
with_db=$(BRAID_PROFILES=$dir measured --db "$tmp/plan.db")
without=$(BRAID_PROFILES=none measured --db none)
echo "measured share: shipped $with% (no store), $with_db% (empty store), turned off $without%"
awk -v a="$with" 'BEGIN { exit !(a >= 30) }' || { echo "FAIL: shipped profiles unused"; fail=1; }
[[ $with == "$with_db" ]] || { echo "FAIL: the store changes the shipped share"; fail=1; }
[[ $without == 0.0 ]] || { echo "FAIL: BRAID_PROFILES=none still measured"; fail=1; }

for f in "$dir"/*.json; do
  kind=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["device_kind"])' "$f")
  BRAID_PROFILES=none "$braid" profile import "$f" --db "$tmp/import.db"
  BRAID_PROFILES=none "$braid" profile export --db "$tmp/import.db" --device-kind "$kind" \
    --out "$tmp/back.json"
  python3 - "$f" "$tmp/back.json" <<'PY' || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
if sorted(map(tuple, a["ops"])) != sorted(map(tuple, b["ops"])) or a["comm"] != b["comm"]:
    print(f"FAIL: {sys.argv[1]} does not come back from import/export unchanged")
    sys.exit(1)
print(f"{sys.argv[1]}: {len(a['ops'])} op profiles round-trip")
PY
done
exit $fail
