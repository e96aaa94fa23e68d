#!/usr/bin/env bash
# Fusion that really runs: per model, measure op profiles in-graph,
# plan on cpu-local from them, then run the plan on 2 Gloo ranks with its
# fused groups executed by braid's CPU fused executor, next to the same plan
# unfused (compute-only strategies, interleaved iteration by iteration), and
# print the predicted against the measured fusion gain (unfused minus fused
# compute time; median of the paired per-iteration differences and its 95%
# confidence interval). --profile also times every fused kernel where it runs
# (stored as fused-op profiles) so the second prediction is from measurements.
# Round 2 plans again with those fused-op profiles (a fused kernel measured
# slower than its members is no longer chosen) and runs that plan the same way.
#   tests/fusion_gain_bench.sh           (DB=..., OUT=..., ITERS=... to override)
# Run it on a quiet machine: iteration times are wall-clock.
cd "$(dirname "$0")/.."
B=${BRAID:-./build/bin/braid}
DB=${DB:-/tmp/fusion-gain.db}
OUT=${OUT:-/tmp/fusion-gain}
mkdir -p $OUT
rm -f $DB $DB-wal $DB-shm
echo "start $(date +%T) load $(cat /proc/loadavg)"
$B profile comm --ranks 2 --db $DB > $OUT/comm.txt 2>&1 || { cat $OUT/comm.txt; exit 1; }
for spec in "mlp8x1024|tests/data/mlp8x1024_opset14.onnx" "transformer_encoder|tests/data/transformer_encoder_train_opset14.onnx" "resnet18|tests/data/resnet18_train_opset13.onnx"; do
  name=${spec%%|*}; model=${spec#*|}
  $B profile $model --device cpu --ranks 2 --iters ${PROFILE_ITERS:-16} --db $DB > $OUT/$name.profile.txt 2>&1 || { cat $OUT/$name.profile.txt; exit 1; }
  for round in 1 2; do
    $B plan $model --cluster cpu-local --ranks 2 --db $DB --budget-s 30 -o $OUT/$name.r$round.plan.json > $OUT/$name.r$round.plan.txt 2>&1 || { cat $OUT/$name.r$round.plan.txt; exit 1; }
    echo "== $name round $round $(date +%T) load $(cat /proc/loadavg)"
    grep -E "^plan|cost sources" $OUT/$name.r$round.plan.txt
    $B run $model --ranks 2 --db $DB --plan $OUT/$name.r$round.plan.json --iters ${ITERS:-24} --warmup 3 --profile --json > $OUT/$name.r$round.run.json 2> $OUT/$name.r$round.run.err || { cat $OUT/$name.r$round.run.err; exit 1; }
    python3 - "$OUT/$name.r$round.run.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
g = j["fusion_gain"]
rows = {r["strategy"]: r for r in j["strategies"]}
cu, cf = rows["compute_unfused"], rows["compute_fused"]
pred_before = cu["predicted_before_profile_ms"] - cf["predicted_before_profile_ms"]
print(f"  fused kernels {g['fused_groups']}; compute unfused {cu['measured_ms']:.2f} ms, fused {cf['measured_ms']:.2f} ms (medians)")
print(f"  fusion gain measured {g['measured_median_ms']:.3f} ms [{g['measured_interval']} {g['measured_ci95_ms'][0]:.3f}, {g['measured_ci95_ms'][1]:.3f}]")
print(f"  predicted before this run's profiles {pred_before:.3f} ms; from them (fused kernels measured in-graph) {g['predicted_ms']:.3f} ms: "
      f"{'inside' if g['prediction_in_ci'] else 'outside'} the CI, {100*g['relative_error']:.0f}% from the median")
print(f"  load {j['load_before']} -> {j['load_after']}")
PY
  done
done
echo "end $(date +%T)"
