#!/usr/bin/env bash
# The runtime's layering (../shared/DESIGN.md): worker/runtime/ (sources,
# tests, CMake) uses nothing from search/ or client/, and its core library
# (braid_runtime: interpreter, checkpoints) includes no LibTorch header and
# links no LibTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
if grep -rnE '#include "(search|client)/' worker/runtime/; then
  echo "worker/runtime/ includes search/ or client/ headers" >&2
  fail=1
fi
if grep -nE 'braid::(search|cli|cli_torch|strategy_client|server)\b' worker/runtime/CMakeLists.txt; then
  echo "worker/runtime/CMakeLists.txt depends on search/, client/ or server/" >&2
  fail=1
fi
core="worker/runtime/interpreter.h worker/runtime/interpreter.cc worker/runtime/checkpoint.h worker/runtime/checkpoint.cc"
if grep -nE '#include [<"](ATen|torch|c10|gloo)/' $core; then
  echo "the runtime core includes LibTorch" >&2
  fail=1
fi
# The core library's DEPS line names no LibTorch.
core_deps=$(awk '/braid_add_library\(NAME runtime SRCS/,/\)$/' worker/runtime/CMakeLists.txt)
if [[ -z "$core_deps" ]]; then
  echo "worker/runtime/CMakeLists.txt: no braid_add_library(NAME runtime ...)" >&2
  fail=1
elif grep -q 'TORCH' <<<"$core_deps"; then
  echo "the runtime core links LibTorch: $core_deps" >&2
  fail=1
fi
# Every file the core includes from braid is LibTorch-free too.
for f in $(grep -hoE '#include "[^"]+"' $core | sed 's/#include "//; s/"//' | sort -u); do
  [[ -f "$f" ]] || continue
  if grep -nE '#include [<"](ATen|torch|c10)/' "$f"; then
    echo "the runtime core includes $f, which includes LibTorch" >&2
    fail=1
  fi
done
[[ $fail == 0 ]] && echo "worker/runtime/ layering ok"
exit $fail
