#!/usr/bin/env bash
# Installs, builds and runs every braid test. GPU tests (ctest label `gpu`)
# skip themselves when no device is present.
#
#   ./deploy/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# Every target and every package the tests use (not a BRAID_TARGETS subset).
BRAID_TARGETS= ./deploy/setup.sh
BUILD_DIR="${BRAID_BUILD_DIR:-build}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${BRAID_JOBS:-$(nproc)}" "$@"
