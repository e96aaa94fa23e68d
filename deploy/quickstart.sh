#!/usr/bin/env bash
# Sets braid up, then runs its main job end to end on a bundled model: builds
# the ResNet-50 training graph for 12 data-parallel ranks, searches joint op and
# tensor fusion, and prints the plan's speed-up against the baselines.
#
#   ./deploy/quickstart.sh [MODEL] [CLUSTER]
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/setup.sh >/dev/null
MODEL="${1:-zoo:resnet50}"
CLUSTER="${2:-disco-a}"
BUILD_DIR="${BRAID_BUILD_DIR:-build}"
echo "== braid plan $MODEL --cluster $CLUSTER"
"$BUILD_DIR/bin/braid" plan "$MODEL" --cluster "$CLUSTER" -o "$BUILD_DIR/quickstart-plan.json"
echo "plan written to $BUILD_DIR/quickstart-plan.json"
