#!/usr/bin/env bash
# Generates braid's Python gRPC client from proto/braid/v1/*.proto into OUT
# (default: build/python) with protoc and gRPC's Python plugin (or grpc_tools).
# Run the launcher with Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf).
# Generated code is never committed: run this at build or test time.
#
#   client/python/generate.sh [OUT]
#   PYTHONPATH=build/python python3 client/python/braid_launcher.py --help
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:-$ROOT/build/python}"
mkdir -p "$OUT"
# Debian 12's python3-grpc-tools (1.14) bundles a protoc too old for proto3
# `optional` fields (strategy.proto's SearchOptions), so the system protoc
# (3.21, protobuf-compiler) with gRPC's Python plugin (protobuf-compiler-grpc)
# is preferred; grpc_tools is the fallback where those are missing.
if command -v protoc >/dev/null && command -v grpc_python_plugin >/dev/null; then
  protoc -I "$ROOT/proto" --python_out="$OUT" --grpc_python_out="$OUT" \
    --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" "$ROOT"/proto/braid/v1/*.proto
else
  "${PYTHON:-python3}" -m grpc_tools.protoc -I "$ROOT/proto" --python_out="$OUT" \
    --grpc_python_out="$OUT" "$ROOT"/proto/braid/v1/*.proto
fi
# Package markers so `import braid.v1.strategy_pb2` works.
touch "$OUT/braid/__init__.py" "$OUT/braid/v1/__init__.py"
echo "generated the braid Python client into $OUT"
