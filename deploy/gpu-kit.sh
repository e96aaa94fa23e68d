#!/usr/bin/env bash
# Builds the GPU kit: a folder to copy to a GPU machine that has the CUDA
# driver and libraries but no build environment, and run there in one go
# (gpu-kit/run.sh OUT_DIR; deploy/GPU.md). It holds every gpu-labelled test
# of the build, the CUDA profiler (braid-cuda-profile), the NCCL rank program
# (braid-nccl-rank), the runtime's CUDA rank program (braid-cuda-rank), the
# golden files of the CUDA op test and of world-1 runtime training, the models to
# measure at dgx-h100 batch sizes with their dgx-h100 plans, and the kit's
# scripts (from deploy/gpu-kit/). Binaries are relinked from the main build's
# static libraries with libstdc++, libgcc, abseil, glog, gflags, protobuf and
# GoogleTest static (deploy/gpu-kit/relink.py); only the CUDA toolkit and
# driver libraries and glibc stay dynamic, plus the few shared libraries the
# kit carries in lib/.
#
#   deploy/gpu-kit.sh [--no-build] [BUILD_DIR [KIT_DIR]]   # build/, gpu-kit/
#   gpu-kit/run.sh --check                                  # here, without a GPU
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_first=1
if [[ ${1:-} == --no-build ]]; then
  build_first=0
  shift
fi
build=$(cd "${1:-$root/build}" && pwd)
kit=${2:-$root/gpu-kit}
programs=(braid-cuda-profile braid-nccl-rank braid-cuda-rank)

# Every test carrying the gpu label (not the fixtures ctest would add to them).
mapfile -t tests < <(cd "$build" && ctest --show-only=json-v1 | python3 -c '
import json, sys
for t in json.load(sys.stdin)["tests"]:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    if "gpu" in props.get("LABELS", []):
        print(t["name"])')
if [[ ${#tests[@]} -eq 0 ]]; then
  echo "gpu-kit: the build at $build has no gpu-labelled test (configured without the CUDA toolkit?)" >&2
  exit 1
fi
if [[ $build_first -eq 1 ]]; then
  echo "gpu-kit: building ${tests[*]} ${programs[*]} braid-cuda-golden"
  ninja -C "$build" "${tests[@]}" "${programs[@]}" braid-cuda-golden braid-runtime-golden braid
fi

rm -rf "$kit"
mkdir -p "$kit/tests" "$kit/bin" "$kit/lib" "$kit/data"
bundle=$(mktemp)
trap 'rm -f "$bundle"' EXIT
for t in "${tests[@]}"; do
  echo "gpu-kit: relinking test $t"
  python3 "$root/deploy/gpu-kit/relink.py" "$build" "$t" "$kit/tests/$t" >>"$bundle"
done
for p in "${programs[@]}"; do
  echo "gpu-kit: relinking $p"
  python3 "$root/deploy/gpu-kit/relink.py" "$build" "$p" "$kit/bin/$p" >>"$bundle"
done
sort -u "$bundle" | while read -r lib; do
  [[ -n $lib ]] && cp -L "$lib" "$kit/lib/"
done
strip --strip-unneeded "$kit"/tests/* "$kit"/bin/* "$kit"/lib/*

"$build/bin/braid-cuda-golden" --out "$kit/data/cuda_op_golden.bin"
# World-1 CPU-runtime training the runtime's CUDA backend is checked against
# (runtime_cuda_gpu_test, braid-cuda-rank).
mkdir -p "$kit/data/runtime"
"$build/bin/braid-runtime-golden" --model zoo:mlp@sample --steps 3 --out "$kit/data/runtime/mlp_sample.json"
"$build/bin/braid-runtime-golden" --model "$root/tests/data/gpt_decoder_train_opset14.onnx" --steps 3 \
  --out "$kit/data/runtime/gpt_decoder.json"
gpt_plan=$(mktemp)
"$build/bin/braid" plan "$root/tests/data/gpt_decoder_train_opset14.onnx" --cluster dgx-h100 --db none \
  --json >"$gpt_plan"
"$build/bin/braid-runtime-golden" --model "$root/tests/data/gpt_decoder_train_opset14.onnx" --steps 3 \
  --plan "$gpt_plan" --out "$kit/data/runtime/gpt_decoder_plan.json"
rm -f "$gpt_plan"
# The models measured at dgx-h100 batch sizes, and their dgx-h100 plans (the
# fused groups braid chooses for them).
mkdir -p "$kit/data/plans"
grep -v '^#' "$root/deploy/gpu-kit/models.txt" | grep -v '^ *$' >"$kit/data/models.txt"
while read -r m; do
  echo "gpu-kit: planning zoo:$m on dgx-h100"
  "$build/bin/braid" plan "zoo:$m" --cluster dgx-h100 --db none --json >"$kit/data/plans/$m.json"
done <"$kit/data/models.txt"
printf '%s\n' "${tests[@]}" >"$kit/tests.txt"
cp "$root/deploy/gpu-kit/run.sh" "$root/deploy/gpu-kit/summarize.py" "$kit/"
chmod +x "$kit/run.sh"
(cd "$root" && git rev-parse HEAD 2>/dev/null || echo unknown) >"$kit/COMMIT"
echo "gpu-kit: $(du -sh "$kit" | cut -f1) in $kit (${#tests[@]} tests, ${#programs[@]} programs)"
