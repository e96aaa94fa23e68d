#!/usr/bin/env bash
# Sets braid up, then runs its main job end to end on a bundled model: builds
# the ResNet-50 training graph for 12 data-parallel ranks, searches joint op and
# tensor fusion on the embedded strategy service (`braid submit`), and prints
# the plan's speed-up against the baselines.
#
#   ./deploy/quickstart.sh [MODEL] [CLUSTER]
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== setting braid up: Debian packages, then the build (minutes on a fresh machine; seconds after)"
./deploy/setup.sh
MODEL="${1:-zoo:resnet50}"
CLUSTER="${2:-disco-a}"
BUILD_DIR="${BRAID_BUILD_DIR:-build}"
echo "== braid submit $MODEL --cluster $CLUSTER (embedded service: no server needed)"
# With no --server the CLI runs braid-server in-process on the SQLite file
# service.db beside the profile store ($XDG_CACHE_HOME/braid/, ~/.cache/braid/)
# with an in-process CPU profiling worker, follows the search with a progress
# bar, then prints the plan and its speed-up against the baselines.
"$BUILD_DIR/bin/braid" submit "$MODEL" --cluster "$CLUSTER"
echo "== the job, its plan and what each decision gains:"
echo "   $BUILD_DIR/bin/braid jobs; $BUILD_DIR/bin/braid plan get JOB; $BUILD_DIR/bin/braid plan explain JOB"
