#!/usr/bin/env bash
# The worker's and the runtime's layering (../shared/DESIGN.md): worker/
# (sources, tests, CMake DEPS; worker/runtime/ and worker/cuda/ included)
# uses nothing from search/ or client/ (the plan carries the programs), and
# the runtime's core library (braid_runtime: interpreter, checkpoints)
# includes no LibTorch header and links no LibTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
if grep -rnE '#include "(search|client)/' worker/; then
  echo "worker/ includes search/ or client/ headers" >&2
  fail=1
fi
# server/ only in tests (the worker agent's run against a real server).
if grep -rnE '#include "server/' worker/ | grep -v '_test\.cc:'; then
  echo "worker/ sources include server/ headers" >&2
  fail=1
fi
# braid::server is allowed as a test dependency only (TEST_DEPS: the worker
# agent's tests run against a real server).
if grep -rnE 'braid::(search|substitutions|cli|cli_torch|server)\b' --include=CMakeLists.txt worker/ |
    grep -vE 'TEST_DEPS braid::server$'; then
  echo "worker/ CMake depends on search/, client/ or server/" >&2
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
[[ $fail == 0 ]] && echo "worker/ layering ok"
exit $fail
