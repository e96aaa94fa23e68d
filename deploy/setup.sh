#!/usr/bin/env bash
# Installs what braid needs on a fresh Debian 12 machine and builds it (Release)
# into build/. Idempotent: packages already present are not reinstalled and the
# build is incremental (ccache when present).
#
#   ./deploy/setup.sh                       # install + configure + build everything
#   BRAID_TARGETS="braid" ./deploy/setup.sh # only these targets and what they need
#   BRAID_BUILD_DIR=out ./deploy/setup.sh
#
# With BRAID_TARGETS the packages that only the tests and benchmarks use at
# run time (Chromium, Python with PyTorch, PyYAML) are left out too; a later
# full run installs them. While packages install and while it builds, a line
# at least every 30 s (when the output is a terminal, ninja's own status line
# replaces the build's lines).
set -euo pipefail
cd "$(dirname "$0")/.."

# What configuring and building any braid target needs.
BUILD_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev
  libabsl-dev libgoogle-glog-dev libgtest-dev libgmock-dev
  libsqlite3-dev sqlite3 nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libxxhash-dev
  libonnx-dev libtorch-dev libgloo-dev
  # oneDNN: the CPU fused executor's GEMM/convolution primitives with post-ops.
  libdnnl-dev
  # Z3: proves the PCG substitution rules (search/substitutions/rule_proof_test).
  libz3-dev
  # LibTorch falls back to the reference BLAS (about 40x slower) without it.
  libopenblas0-pthread
)
# What the tests and benchmarks use at run time.
TEST_PACKAGES=(
  # tests/dashboard_e2e_test.sh renders the HTTP dashboard headless.
  chromium
  python3 python3-grpcio python3-protobuf
  # braid.torch (client/python/braid/torch.py): its test and benchmark.
  python3-torch python3-torchvision
  # deploy/make-tls.sh and the deployment checks (tests/deploy_manifests_test.py).
  openssl python3-yaml
)

START_S=$SECONDS
elapsed() { printf '%d:%02d' $(((SECONDS - START_S) / 60)) $(((SECONDS - START_S) % 60)); }

# Runs "$@" with its output passed through; after 20 s without a line, a
# "still running" line ($1 names the step) with the time since setup began.
STAMP=$(mktemp)
trap 'rm -f "$STAMP" "$STAMP.steps"' EXIT
ticker() {
  local label=$1 nap
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  while true; do
    sleep 5 &
    nap=$!
    wait "$nap"
    local last now
    last=$(stat -c %Y "$STAMP" 2>/dev/null) || return 0
    now=$(date +%s)
    if ((now - last >= 20)); then
      local steps=""
      [[ -s "$STAMP.steps" ]] && steps=": $(cat "$STAMP.steps" 2>/dev/null)"
      echo "braid setup: $label$steps, $(elapsed) elapsed"
      : >"$STAMP"
    fi
  done
}
with_ticker() {
  local label=$1
  shift
  : >"$STAMP"
  ticker "$label" &
  local tick=$! rc=0
  "$@" 2>&1 | while IFS= read -r line; do
    printf '%s\n' "$line"
    : >"$STAMP"
  done || rc=$?
  kill "$tick" 2>/dev/null || true
  wait "$tick" 2>/dev/null || true
  return "$rc"
}

PACKAGES=("${BUILD_PACKAGES[@]}")
if [[ -z "${BRAID_TARGETS:-}" ]]; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  took="the build's, on a minimal Debian 12: 1 to 2.5 minutes, 426 packages, 351 MB"
  if [[ -z "${BRAID_TARGETS:-}" ]]; then took+="; the tests' (Chromium, PyTorch) not timed"; fi
  echo "braid setup: installing ${#missing[@]} Debian packages and their dependencies ($took," \
    "BENCHMARKS.md): ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  with_ticker "apt-get update still running" $SUDO apt-get update -q
  with_ticker "installing packages" $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  echo "braid setup: packages installed, $(elapsed) elapsed"
fi

BUILD_DIR="${BRAID_BUILD_DIR:-build}"
JOBS="${BRAID_JOBS:-$(nproc)}"
if command -v ccache >/dev/null; then
  export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
  ccache --max-size=5G >/dev/null 2>&1 || true
fi
echo "braid setup: configuring $BUILD_DIR/ (Release)"
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${BRAID_CMAKE_ARGS:-} >"$BUILD_DIR/configure.log" 2>&1 ||
  { cat "$BUILD_DIR/configure.log"; exit 1; }
grep -E "^-- braid:|^CMake Warning" "$BUILD_DIR/configure.log" || true

TARGET_ARGS=()
if [[ -n "${BRAID_TARGETS:-}" ]]; then
  read -r -a targets <<<"$BRAID_TARGETS"
  TARGET_ARGS=(--target "${targets[@]}")
  echo "braid setup: building ${targets[*]} with $JOBS jobs (braid alone without ccache: 127 steps," \
    "13 CPU-minutes: 6 min 18 s measured on 2 idle cores, 12 to 15 while other builds shared" \
    "them, BENCHMARKS.md; seconds with a warm ccache)"
else
  echo "braid setup: building everything with $JOBS jobs (519 steps with the CUDA toolkit; without" \
    "ccache well over the 24 CPU-minutes of the 230 steps braid alone once pulled, so well over" \
    "12 minutes on 2 cores, BENCHMARKS.md; minutes with a warm ccache)"
fi
if [[ -t 1 ]]; then
  cmake --build "$BUILD_DIR" -j "$JOBS" "${TARGET_ARGS[@]}"  # ninja's own status line
else
  # Piped into a log: one progress line per 5% of the steps instead of one per
  # file, and one at least every 30 s (the ticker, during slow steps);
  # compiler messages pass through. Read by bash line by line: awk would
  # hold the lines back in its input buffer.
  build_lines() {
    local line n total pct last=-5 re='^\[([0-9]+)/([0-9]+)\] '
    while IFS= read -r line; do
      if [[ $line =~ $re ]]; then
        n=${BASH_REMATCH[1]} total=${BASH_REMATCH[2]}
        pct=$((100 * n / total))
        echo "$n of $total steps built ($pct%)" >"$STAMP.steps"
        if ((n > 0 && (pct >= last + 5 || n == total))); then
          echo "braid setup: built $n of $total steps ($pct%), $(elapsed) elapsed"
          : >"$STAMP"
          last=$pct
        fi
      else
        printf '%s\n' "$line"
        : >"$STAMP"
      fi
    done
  }
  : >"$STAMP"
  ticker "building" &
  TICK=$!
  rc=0
  cmake --build "$BUILD_DIR" -j "$JOBS" "${TARGET_ARGS[@]}" 2>&1 | build_lines || rc=$?
  kill "$TICK" 2>/dev/null || true
  wait "$TICK" 2>/dev/null || true
  ((rc == 0)) || exit "$rc"
fi
echo "braid setup: built into $BUILD_DIR/ (binaries in $BUILD_DIR/bin/), $(elapsed) elapsed"
