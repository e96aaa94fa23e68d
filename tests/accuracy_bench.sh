#!/usr/bin/env bash
# Simulator accuracy on real executions: rebuilds a profile
# store, measures collectives and ops on this machine, plans each model, then
# runs it for real on 2 Gloo ranks (braid run) and prints predicted vs measured:
# predicted from the separate `braid profile` run, and from op profiles timed
# in compute-only iterations and allreduces timed in probe iterations, both
# interleaved with the measured ones (--profile), which keeps the machine's
# drift between runs out of the comparison.
# Run it on a quiet machine: iteration times are wall-clock.
#   tests/accuracy_bench.sh            (DB=..., OUT=..., ITERS=... to override)
# Fresh profile store, comm benchmark, then per model: op profiles, a plan, and the run.
cd "$(dirname "$0")/.."
B=${BRAID:-./build/bin/braid}
DB=${DB:-/tmp/exec-final.db}
OUT=${OUT:-/tmp/exec-out}
mkdir -p $OUT
rm -f $DB $DB-wal $DB-shm
echo "start $(date +%T) load $(cat /proc/loadavg)"
$B profile comm --ranks 2 --db $DB > $OUT/comm.txt 2>&1
tail -2 $OUT/comm.txt
for spec in "mlp8x1024|tests/data/mlp8x1024_opset14.onnx" "encoder_d256|tests/data/transformer_encoder_d256_opset14.onnx" "resnet18|tests/data/resnet18_train_opset13.onnx"; do
  name=${spec%%|*}; model=${spec#*|}
  $B profile $model --device cpu --ranks 2 --iters ${PROFILE_ITERS:-16} --db $DB > $OUT/$name.profile.txt 2>&1
  grep -E "in-graph|compute-only" $OUT/$name.profile.txt
  $B plan $model --cluster cpu-local --ranks 2 --db $DB --budget-s 20 -o $OUT/$name.plan.json > $OUT/$name.plan.txt 2>&1
  echo "== $name $(date +%T) load $(cat /proc/loadavg)"
  $B run $model --ranks 2 --db $DB --plan $OUT/$name.plan.json --iters ${ITERS:-20} --warmup 3 --diagnose --profile --json > $OUT/$name.run.json 2> $OUT/$name.run.err
  python3 -c "
import json;j=json.load(open('$OUT/$name.run.json'))
print('load', j['load_before'], '->', j['load_after'])
p=j['in_run_profile']
print('in-run profile: compute-only %.1f ms, sum of op means %.1f ms, pack %.1f ms; allreduce fit %s' % (p['compute_only_ms'], p['sum_of_op_means_ms'], p['pack_ms'], p.get('allreduce_fit')))
for r in j['strategies']: print('%-15s %3d pred %8.2f (separate profile %8.2f, err %5.1f%%) meas %8.2f iqr %6.2f err %5.1f%% pack %5.1f wait %5.1f' % (r['strategy'], r['buckets'], r['predicted_ms'], r['predicted_before_profile_ms'], 100*r['error_before_profile'], r['measured_ms'], r['measured_iqr_ms'], 100*r['error'], r['measured_pack_ms'], r['measured_wait_ms']))
"
done
