#!/usr/bin/env bash
# The GPU kit's runner (built by deploy/gpu-kit.sh; deploy/GPU.md).
#
#   gpu-kit/run.sh OUT_DIR           # on the GPU machine: everything, < 5 min
#   gpu-kit/run.sh --check [OUT_DIR] # anywhere: the kit is self-contained
#
# A run finds the CUDA libraries where the machine keeps them (the CUDA
# toolkit, the nvidia-* packages of its Python, PyTorch's lib), then runs
# each gpu-labelled test, the CUDA profiler on zoo:transformer and
# zoo:resnet50 at batch 8, a one-rank NCCL communicator, the runtime's CUDA
# rank program on the golden world-1 programs, and the profiler on
# the models of data/models.txt at the batch dgx-h100 plans use (with their
# plans' fused groups), each under its own timeout. OUT_DIR/profile.db then
# holds every measurement under the GPU's device kind, for
# `braid profile export`.
# After every step it rewrites OUT_DIR/summary.json and OUT_DIR/junit.xml,
# so a run cut short still returns what it did. Exit 0 when nothing failed.
# BRAID_KIT_SKIP="profile-models ..." leaves the named steps out (a short
# run when the device time left is short).
set -uo pipefail
kit=$(cd "$(dirname "$0")" && pwd)
# The kit measures; it reads no shipped measurements (costmodel/profiles).
export BRAID_PROFILES=none
# Shared libraries a kit binary may need from the machine: glibc, the CUDA
# driver and the CUDA libraries.
allow=(libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 ld-linux-x86-64.so.2
  libcuda.so.1 libcudart.so.13 libnvrtc.so.13 libcublas.so.13 libcublasLt.so.13
  libcudnn.so.9 libnccl.so.2)
cuda_libs=(libcudart.so.13 libnvrtc.so.13 libnvrtc-builtins.so.13.0 libcublas.so.13
  libcublasLt.so.13 libcudnn.so.9 libnccl.so.2)
max_glibc=2.36
max_kit_mib=48

check=0
if [[ ${1:-} == --check ]]; then
  check=1
  shift
fi
out=${1:-}
if [[ -z $out ]]; then
  if [[ $check -eq 1 ]]; then
    out=$(mktemp -d)
  else
    echo "usage: run.sh OUT_DIR | run.sh --check [OUT_DIR]" >&2
    exit 2
  fi
fi
mkdir -p "$out/logs" "$out/junit"
out=$(cd "$out" && pwd)
: >"$out/steps.tsv"

# ---- where the CUDA libraries are ----
lib_dirs=()
add_dir() { [[ -d $1 ]] && lib_dirs+=("$1"); }
for d in "${CUDA_HOME:-}/lib64" "${CUDA_PATH:-}/lib64" /usr/local/cuda/lib64 \
  /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/targets/sbsa-linux/lib \
  /usr/lib/x86_64-linux-gnu; do
  [[ -n $d && $d != /lib64 ]] && add_dir "$d"
done
for py in python3 python; do
  command -v "$py" >/dev/null || continue
  while IFS= read -r d; do add_dir "$d"; done < <(timeout 60 "$py" - 2>/dev/null <<'PY'
import os
try:
    import nvidia
    for base in list(nvidia.__path__):
        for d in sorted(os.listdir(base)):
            lib = os.path.join(base, d, "lib")
            if os.path.isdir(lib):
                print(lib)
except Exception:
    pass
try:
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec and spec.origin:
        print(os.path.join(os.path.dirname(spec.origin), "lib"))
except Exception:
    pass
PY
)
  break
done
: >"$out/libraries.tsv"
ld_path="$kit/lib"
for so in "${cuda_libs[@]}"; do
  where=""
  for d in "${lib_dirs[@]}"; do
    if [[ -e $d/$so ]]; then
      where=$d/$so
      [[ ":$ld_path:" == *":$d:"* ]] || ld_path="$ld_path:$d"
      break
    fi
  done
  printf '%s\t%s\n' "$so" "${where:--}" >>"$out/libraries.tsv"
done
driver=$( (ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}') || true)
printf '%s\t%s\n' libcuda.so.1 "${driver:--}" >>"$out/libraries.tsv"
export LD_LIBRARY_PATH="$ld_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
sed 's/^/library: /' "$out/libraries.tsv"

# ---- the machine ----
{
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host=$(hostname)"
  echo "cpu=$(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)"
  echo "glibc=$(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')"
  if command -v nvidia-smi >/dev/null; then
    echo "gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "gpus=$(nvidia-smi -L 2>/dev/null | wc -l)"
  fi
  echo "torch=$(timeout 60 python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null)"
  echo "kit_commit=$(cat "$kit/COMMIT" 2>/dev/null)"
  echo "check=$check"
} >"$out/machine.txt"

summarize() { python3 "$kit/summarize.py" "$kit" "$out" >/dev/null 2>>"$out/logs/summarize.log"; }

# step NAME TIMEOUT_S COMMAND...: runs it, logs, records rc and seconds.
step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc
  if [[ " ${BRAID_KIT_SKIP:-} " == *" $name "* ]]; then
    echo "== $name: left out (BRAID_KIT_SKIP)"
    return
  fi
  t0=$(date +%s%N)
  echo "== $name (timeout ${limit}s)"
  timeout -k 10 "$limit" "$@" >"$out/logs/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((($(date +%s%N) - t0) / 1000000))" >>"$out/steps.tsv"
  tail -n 3 "$out/logs/$name.log" | sed 's/^/   /'
  echo "   rc=$rc"
  summarize
}

check_failed=0
if [[ $check -eq 1 ]]; then
  # Every binary's needs resolve inside the kit or to the allow-list.
  for f in "$kit"/tests/* "$kit"/bin/* "$kit"/lib/*; do
    while IFS= read -r so; do
      if [[ ! -e $kit/lib/$so ]] && ! printf '%s\n' "${allow[@]}" | grep -qxF "$so"; then
        echo "check: $(basename "$f") needs $so: neither in the kit nor allowed"
        check_failed=1
      fi
    done < <(readelf -d "$f" | sed -nE 's/.*\(NEEDED\).*\[(.+)\]/\1/p')
    while IFS= read -r so; do
      if ! printf '%s\n' "${allow[@]}" | grep -qxF "$so"; then
        echo "check: $(basename "$f"): ldd finds no $so outside the allow-list"
        check_failed=1
      fi
    done < <(env -i LD_LIBRARY_PATH="$kit/lib" ldd "$f" 2>/dev/null | awk '/not found/{print $1}')
    g=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
    if [[ -n $g && $(printf '%s\n%s\n' "$g" "$max_glibc" | sort -V | tail -1) != "$max_glibc" ]]; then
      echo "check: $(basename "$f") needs glibc $g (> $max_glibc)"
      check_failed=1
    fi
  done
  kib=$(du -sk "$kit" | cut -f1)
  if ((kib > max_kit_mib * 1024)); then
    echo "check: the kit is $((kib / 1024)) MiB (limit $max_kit_mib MiB)"
    check_failed=1
  fi
  if [[ $(sort "$kit/tests.txt") != $(ls "$kit/tests" | sort) ]]; then
    echo "check: tests/ does not hold exactly the tests of tests.txt"
    check_failed=1
  fi
  echo "check: dependencies, glibc <= $max_glibc, $((kib / 1024)) MiB: $([[ $check_failed -eq 0 ]] && echo ok || echo FAILED)"
fi

# ---- the run (without a GPU every test skips and the profiler fails) ----
while IFS= read -r t; do
  [[ -z $t ]] && continue
  step "test-$t" "${BRAID_KIT_TEST_TIMEOUT:-100}" env BRAID_CUDA_GOLDEN="$kit/data/cuda_op_golden.bin" \
    BRAID_RUNTIME_GOLDEN_DIR="$kit/data/runtime" \
    BRAID_NCCL_RANK_BINARY="$kit/bin/braid-nccl-rank" \
    "$kit/tests/$t" --gtest_output="xml:$out/junit/$t.xml" --gtest_color=no
done <"$kit/tests.txt"

step profile 110 "$kit/bin/braid-cuda-profile" --model transformer --model resnet50 --batch 8 \
  --fused 12 --budget-s 40 --repetitions 7 --store "$out/profile.db" --jsonl "$out/profile.jsonl"

ncclw=$(mktemp -d)
step nccl-1rank 60 "$kit/bin/braid-nccl-rank" --id-file "$ncclw/id" --device 0 --out "$out/nccl-1rank.txt" \
  --rank 0 --world 1 --collectives AllReduce,AllGather,ReduceScatter,Broadcast \
  --sizes 1048576,67108864 --warmup 3 --repetitions 10
rm -rf "$ncclw"

# The runtime's CUDA rank program on the golden programs: world-1 training,
# compared with the CPU runtime's losses and parameters.
for g in "$kit"/data/runtime/*.json; do
  n=$(basename "$g" .json)
  rundir=$(mktemp -d)
  step "runtime-$n" 120 "$kit/bin/braid-cuda-rank" --program "$g" --id-dir "$rundir" \
    --out "$out/runtime-$n.json"
  rm -rf "$rundir"
done

models=()
while IFS= read -r m; do [[ -n $m ]] && models+=(--model "$m"); done <"$kit/data/models.txt"
step profile-models "${BRAID_KIT_MODELS_TIMEOUT:-240}" "$kit/bin/braid-cuda-profile" "${models[@]}" \
  --plan-dir "$kit/data/plans" --fused 6 --budget-s 20 --repetitions 7 --max-seconds-per-op 0.3 \
  --store "$out/profile.db" --jsonl "$out/profile.jsonl"

summarize
python3 "$kit/summarize.py" --validate "$kit" "$out" || check_failed=1
echo "results: $out/summary.json $out/junit.xml"
if [[ $check -eq 1 ]]; then
  exit $check_failed
fi
python3 - "$out/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
c = s["counts"]
bad = [x["name"] + " (" + x["verdict"] + ")" for x in s["steps"]
       if x["verdict"] in ("failed", "timeout")]
print(f"tests: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped; steps failed: "
      + ", ".join(bad))
sys.exit(1 if c["failed"] or bad else 0)
PY
