#!/usr/bin/env bash
# The GNN fused-op estimator in the search: per model on cpu-local
# at 2 ranks, op profiles measured in-graph, then two plans from the same
# profile store -- unmeasured fused kernels costed by the GNN (the shipped
# checkpoint; `braid plan`'s default where it matches this CPU) and by the
# corrected roofline (--estimator none) -- both run for real on the same
# Gloo ranks, interleaved iteration by iteration. Prints each plan's
# predicted iteration time under both cost models next to its measured
# median, and the paired per-iteration difference gnn plan - roofline plan
# with its 95% confidence interval.
#   tests/gnn_plan_bench.sh           (DB=..., OUT=..., ITERS=... to override)
# Run it on a quiet machine: iteration times are wall-clock.
cd "$(dirname "$0")/.."
B=${BRAID:-./build/bin/braid}
DB=${DB:-/tmp/gnn-plan.db}
OUT=${OUT:-/tmp/gnn-plan}
mkdir -p $OUT
rm -f $DB $DB-wal $DB-shm
echo "start $(date +%T) load $(cat /proc/loadavg)"
$B profile comm --ranks 2 --db $DB > $OUT/comm.txt 2>&1 || { cat $OUT/comm.txt; exit 1; }
for spec in ${MODELS:-"mlp8x1024|tests/data/mlp8x1024_opset14.onnx" "transformer_encoder|tests/data/transformer_encoder_train_opset14.onnx" "resnet18|tests/data/resnet18_train_opset13.onnx"}; do
  name=${spec%%|*}; model=${spec#*|}
  $B profile $model --device cpu --ranks 2 --iters ${PROFILE_ITERS:-16} --db $DB > $OUT/$name.profile.txt 2>&1 || { cat $OUT/$name.profile.txt; exit 1; }
  for est in auto none; do
    $B plan $model --cluster cpu-local --ranks 2 --db $DB --budget-s ${BUDGET:-20} --seed 1 --estimator $est -o $OUT/$name.$est.plan.json > $OUT/$name.$est.plan.txt 2>&1 || { cat $OUT/$name.$est.plan.txt; exit 1; }
  done
  echo "== $name $(date +%T) load $(cat /proc/loadavg)"
  grep -E "^plan|cost sources|fused-op estimator" $OUT/$name.auto.plan.txt | sed 's/^/  gnn plan:      /'
  grep -E "^plan|cost sources" $OUT/$name.none.plan.txt | sed 's/^/  roofline plan: /'
  $B run $model --ranks 2 --db $DB --plan $OUT/$name.auto.plan.json --vs-plan $OUT/$name.none.plan.json --iters ${ITERS:-30} --warmup 3 --json > $OUT/$name.run.json 2> $OUT/$name.run.err || { cat $OUT/$name.run.err; exit 1; }
  python3 - "$OUT/$name.run.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rows = {r["strategy"]: r for r in j["strategies"]}
for label, key, model_key in (("gnn plan", "plan", "predicted_ms"), ("roofline plan", "vs_plan", "predicted_roofline_ms")):
    r = rows[key]
    own = r[model_key]
    print(f"  {label:14s} measured {r['measured_ms']:8.2f} ms (IQR {r['measured_iqr_ms']:.2f}); predicted by the GNN model "
          f"{r['predicted_ms']:8.2f} ms ({100*abs(r['predicted_ms']-r['measured_ms'])/r['measured_ms']:.1f}% off), by the roofline model "
          f"{r['predicted_roofline_ms']:8.2f} ms ({100*abs(r['predicted_roofline_ms']-r['measured_ms'])/r['measured_ms']:.1f}% off); "
          f"by its own model {100*abs(own-r['measured_ms'])/r['measured_ms']:.1f}% off")
v = j["plan_vs_plan"]
verdict = "gnn plan slower" if v["plan_slower"] else "gnn plan faster" if v["plan_faster"] else "no difference resolved"
print(f"  gnn plan - roofline plan per iteration: median {v['plan_minus_vs_plan_median_ms']:.3f} ms "
      f"[{v['interval']} {v['ci95_ms'][0]:.3f}, {v['ci95_ms'][1]:.3f}]: {verdict}")
print(f"  estimator {j['estimator']}; load {j['load_before']} -> {j['load_after']}")
PY
done
echo "end $(date +%T)"
