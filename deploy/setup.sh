#!/usr/bin/env bash
# Installs what braid needs on a fresh Debian 12 machine and builds it (Release)
# into build/. Idempotent: packages already present are not reinstalled and the
# build is incremental (ccache when present).
#
#   ./deploy/setup.sh            # install + configure + build
#   BRAID_BUILD_DIR=out ./deploy/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev
  libabsl-dev libgoogle-glog-dev libgtest-dev libgmock-dev
  libsqlite3-dev sqlite3 nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libxxhash-dev chromium
  libonnx-dev libtorch-dev libgloo-dev
  # oneDNN: the CPU fused executor's GEMM/convolution primitives with post-ops.
  libdnnl-dev
  # Z3: proves the PCG substitution rules (search/substitutions/rule_proof_test).
  libz3-dev
  # LibTorch falls back to the reference BLAS (about 40x slower) without it.
  libopenblas0-pthread
  python3 python3-grpcio python3-protobuf
  # braid.torch (client/python/braid/torch.py): its test and benchmark.
  python3-torch python3-torchvision
  # deploy/make-tls.sh and the deployment checks (tests/deploy_manifests_test.py).
  openssl python3-yaml
)

missing=()
for p in "${PACKAGES[@]}"; do
  [[ "$p" == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "braid setup: installing ${#missing[@]} Debian packages (a few minutes on a fresh machine): ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
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
echo "braid setup: building with $JOBS jobs (a fresh build takes about 15 minutes on 2 cores)"
if [[ -t 1 ]]; then
  cmake --build "$BUILD_DIR" -j "$JOBS"  # ninja's own status line
else
  # Piped into a log: one progress line per 5% instead of one per file;
  # compiler messages pass through.
  cmake --build "$BUILD_DIR" -j "$JOBS" | awk '
    /^\[[0-9]+\/[0-9]+\] / {
      split(substr($1, 2, length($1) - 2), a, "/")
      pct = int(100 * a[1] / a[2])
      if (pct >= last + 5 || a[1] == a[2]) { printf "braid setup: built %d of %d steps (%d%%)\n", a[1], a[2], pct; last = pct; fflush() }
      next
    }
    { print; fflush() }'
fi
echo "braid setup: built into $BUILD_DIR/ (binaries in $BUILD_DIR/bin/)"
