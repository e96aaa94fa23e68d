#!/usr/bin/env bash
# The numerics matrix of the one runtime (BENCHMARKS.md): for each model,
# rank count and plan row, `braid plan --parallel --strategy ROW` writes the
# row's plan and `braid run --check` trains its per-device program on the
# ranks against a world-1 run of the same model. One line per cell: the
# row, whether the lowering made a program, the largest relative error, and
# what of the plan's fusion ran: "fused/groups" (the program's fusion groups
# run as one fused kernel, of those it has) and its gradient buckets.
#
# PLAN_FLAGS go to `braid plan` (e.g. --sync-batchnorm), CHECK_FLAGS to
# `braid run --check` (e.g. --float64, --no-dropout).
#
#   tests/runtime_numerics_matrix.sh [BUILD_DIR] [STEPS]
#   MODELS="zoo:mlp@sample" RANKS="2" ROWS="data_parallel braid" tests/runtime_numerics_matrix.sh
#   MODELS=tests/data/resnet18_train_opset13.onnx PLAN_FLAGS=--sync-batchnorm \
#     CHECK_FLAGS=--float64 tests/runtime_numerics_matrix.sh
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
STEPS="${2:-3}"
BRAID="$BUILD/bin/braid"
MODELS="${MODELS:-tests/data/mlp8x1024_opset14.onnx tests/data/transformer_encoder_train_opset14.onnx tests/data/gpt_decoder_train_opset14.onnx tests/data/resnet18_train_opset13.onnx tests/data/gpt2_cattn_train_opset14.onnx zoo:mlp@sample zoo:transformer@sample}"
RANKS="${RANKS:-2 4}"
ROWS="${ROWS:-data_parallel expert:megatron braid}"
BUDGET="${BUDGET:-60}"
read -r -a plan_flags <<<"${PLAN_FLAGS:-}"
read -r -a check_flags <<<"${CHECK_FLAGS:-}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-44s %5s %-16s %-16s %12s %-9s %7s %s\n' model ranks row program max_rel_err fused buckets result
fail=0
for m in $MODELS; do
  for n in $RANKS; do
    for row in $ROWS; do
      plan="$tmp/plan.json"
      rm -f "$plan"
      extra=(--strategy "$row")
      [[ "$row" == braid ]] && extra=(--no-pipeline)
      if ! "$BRAID" plan "$m" --parallel --cluster cpu-local --ranks "$n" --db none \
          --budget-s "$BUDGET" "${extra[@]}" "${plan_flags[@]}" -o "$plan" >"$tmp/plan.log" 2>&1; then
        printf '%-44s %5s %-16s %-16s %12s %-9s %7s %s\n' "$m" "$n" "$row" "-" "-" "-" "-" \
          "no plan: $(tail -1 "$tmp/plan.log" | cut -c1-100)"
        continue
      fi
      chosen=$(python3 -c "import json,sys; p=json.load(open('$plan')); print(p.get('program',{}).get('row','-'))")
      if ! python3 -c "import json,sys; sys.exit(0 if 'program' in json.load(open('$plan')) else 1)"; then
        why=$(python3 -c "import json; print(json.load(open('$plan')).get('program_error','?')[:100])")
        printf '%-44s %5s %-16s %-16s %12s %-9s %7s %s\n' "$m" "$n" "$row" "none" "-" "-" "-" "$why"
        continue
      fi
      if "$BRAID" run "$m" --plan "$plan" --ranks "$n" --check --steps "$STEPS" "${check_flags[@]}" --json \
          >"$tmp/check.json" 2>"$tmp/check.log"; then
        status=ok
      else
        status=FAILED
        fail=1
      fi
      err=$(python3 -c "import json; print('%.2e' % json.load(open('$tmp/check.json'))['numerics']['max_rel_error'])" 2>/dev/null || echo "-")
      [[ "$err" == "-" ]] && status="error: $(tail -1 "$tmp/check.log" | cut -c1-100)"
      fused=$(python3 -c "import json; j=json.load(open('$tmp/check.json')); g=j['fusion_groups']; print('%d/%d' % (g['fused'], g['in_program']))" 2>/dev/null || echo "-")
      buckets=$(python3 -c "import json; print(json.load(open('$tmp/check.json'))['gradient_buckets'])" 2>/dev/null || echo "-")
      printf '%-44s %5s %-16s %-16s %12s %-9s %7s %s\n' "$m" "$n" "$row" "$chosen" "$err" "$fused" "$buckets" "$status"
    done
  done
done
exit $fail
