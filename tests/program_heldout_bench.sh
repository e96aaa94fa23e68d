#!/usr/bin/env bash
# Held-out accuracy of the program simulation on cpu-local (BENCHMARKS.md,
# "Programs priced from an earlier run's clocks"). Per model, on a fresh
# profile store:
#  1. `braid plan --parallel --strategy ROW` writes each row's plan
#     (data_parallel, expert:megatron, braid), priced on priors;
#  2. `braid run --profile` trains the three programs interleaved on 2 bound
#     braid-rank ranks and stores what the ranks clocked inside the steps
#     (ops, fused groups, collectives nothing overlapped);
#  3. the rows are planned again on that store (their fusion search and
#     program simulation now priced by step 2's clocks), and braid's own
#     choice (no --strategy) too;
#  4. a second `braid run` (no --profile: nothing of this run prices it)
#     trains braid's choice first and the three rows after it, interleaved;
#     each row's program simulation is set against its measured median with
#     the 95% CI, and braid's choice against each row (the per-round paired
#     difference, choice minus row).
# One line per cell; RAW_DIR keeps every plan and JSON output.
#
#   tests/program_heldout_bench.sh [BUILD_DIR]
#   MODELS=tests/data/mlp8x1024_opset14.onnx ROUNDS=5 ITERS=10 tests/program_heldout_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
BRAID="$BUILD/bin/braid"
MODELS="${MODELS:-tests/data/mlp8x1024_opset14.onnx tests/data/transformer_encoder_train_opset14.onnx tests/data/gpt_decoder_train_opset14.onnx}"
ROWS=(data_parallel expert:megatron braid)
ROUNDS="${ROUNDS:-5}"
ITERS="${ITERS:-10}"
WARMUP="${WARMUP:-3}"
BUDGET="${BUDGET:-30}"
RAW_DIR="${RAW_DIR:-$(mktemp -d)}"
mkdir -p "$RAW_DIR"
echo "raw output: $RAW_DIR" >&2
for model in $MODELS; do
  name=$(basename "$model" .onnx)
  db="$RAW_DIR/$name.db"
  rm -f "$db"
  plan() {  # plan ROW OUT (ROW "" : braid's choice)
    local strategy=()
    [[ -n "$1" ]] && strategy=(--strategy "$1")
    "$BRAID" plan "$model" --parallel --cluster cpu-local --ranks 2 --no-pipeline --db "$db" \
      --budget-s "$BUDGET" --seed 1 "${strategy[@]}" --json -o "$2" > "$2.stdout" 2> "$2.stderr"
  }
  run() {  # run OUT [--profile] PLAN...
    local out=$1 extra=() first=""
    shift
    if [[ "$1" == --profile ]]; then extra=(--profile); shift; fi
    first=$1
    shift
    local also=()
    for p in "$@"; do also+=(--also-plan "$p"); done
    "$BRAID" run "$model" --plan "$first" "${also[@]}" --ranks 2 --pin-cores true --rounds "$ROUNDS" \
      --iters "$ITERS" --warmup "$WARMUP" --db "$db" --json "${extra[@]}" > "$out" 2> "$out.stderr"
  }
  first=()
  for row in "${ROWS[@]}"; do
    plan "$row" "$RAW_DIR/$name.$row.p1.json"
    first+=("$RAW_DIR/$name.$row.p1.json")
  done
  echo "$name: profiling run (${#first[@]} programs)" >&2
  run "$RAW_DIR/$name.profile.json" --profile "${first[@]}"
  second=()
  for row in "${ROWS[@]}"; do
    plan "$row" "$RAW_DIR/$name.$row.p2.json"
    second+=("$RAW_DIR/$name.$row.p2.json")
  done
  plan "" "$RAW_DIR/$name.chosen.p2.json"
  echo "$name: held-out run" >&2
  run "$RAW_DIR/$name.heldout.json" "$RAW_DIR/$name.chosen.p2.json" "${second[@]}"
  python3 - "$RAW_DIR/$name.heldout.json" "$RAW_DIR/$name.chosen.p2.json.stdout" "$name" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
chosen = json.load(open(sys.argv[2]))["chosen"]
rows = run["strategies"]  # braid's choice first, then each row
for r in rows[1:]:
    print(f'{sys.argv[3]:34s} {r["strategy"]:30s} sim {r["program_simulated_ms"]:8.2f} ms  '
          f'measured {r["measured_ms"]:8.2f} ms {r["measured_interval_text"]:>24s}  '
          f'error {100 * r["program_simulated_error"]:+6.1f}%  '
          f'choice - this per round {r["plan_minus_this"]["median_ms"]:+7.2f} ms {r["plan_minus_this"]["interval_text"]}')
c = rows[0]
print(f'{sys.argv[3]:34s} braid chose {chosen}: sim {c["program_simulated_ms"]:.2f} ms, measured '
      f'{c["measured_ms"]:.2f} ms {c["measured_interval_text"]}')
EOF
done
