#!/usr/bin/env bash
# The skip rule of gpu-labelled tests, through ctest itself: a binary whose
# tests all skipped is reported skipped, one with a skipped and a failed test
# is reported failed, one with a passed and a skipped test passes. And every
# gpu-labelled test of this build carries that rule (SKIP_RETURN_CODE 77, no
# SKIP_REGULAR_EXPRESSION, which would call the mixed binary skipped).
# Usage: gpu_skip_rule_test.sh FIXTURE_BINARY BUILD_DIR
set -euo pipefail
fixture=$1
build=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/CTestTestfile.cmake" <<CT
add_test(mixed "$fixture" "--gtest_filter=Mixed.*")
set_tests_properties(mixed PROPERTIES SKIP_RETURN_CODE 77)
add_test(all_skip "$fixture" "--gtest_filter=AllSkip.*")
set_tests_properties(all_skip PROPERTIES SKIP_RETURN_CODE 77)
add_test(pass_and_skip "$fixture" "--gtest_filter=PassAndSkip.*")
set_tests_properties(pass_and_skip PROPERTIES SKIP_RETURN_CODE 77)
CT
fail=0
verdict() {  # NAME -> ctest's verdict line for it
  (cd "$dir" && ctest -R "^$1\$" 2>&1 || true) | grep -E "Test +#[0-9]+: $1 " || true
}
check() {  # NAME WANT_REGEX
  local v
  v=$(verdict "$1")
  if [[ "$v" =~ $2 ]]; then
    echo "ok: $1: $v"
  else
    echo "FAIL: $1: want /$2/, got: $v"
    fail=1
  fi
}
check mixed 'Failed'
check all_skip 'Skipped'
check pass_and_skip 'Passed'

# The build's own gpu tests (every CTestTestfile.cmake under BUILD_DIR).
n=0
while IFS= read -r line; do
  name=$(sed -E 's/^set_tests_properties\(\[=\[([^]]+)\]=\].*/\1/' <<<"$line")
  n=$((n + 1))
  if ! grep -q 'SKIP_RETURN_CODE "77"' <<<"$line" || grep -q SKIP_REGULAR_EXPRESSION <<<"$line"; then
    echo "FAIL: gpu test $name lacks the skip rule: $line"
    fail=1
  fi
done < <(find "$build" -name CTestTestfile.cmake -exec grep -h 'LABELS "gpu"' {} +)
if [[ $n -eq 0 ]]; then
  echo "FAIL: no gpu-labelled test found under $build"
  fail=1
fi
echo "$n gpu-labelled tests checked"
exit $fail
