// ONNX import: ModelProto -> braid forward graph.
//
// Runs ONNX shape inference, folds compile-time subgraphs (Constant, Identity,
// Shape/Gather/Unsqueeze/Concat shape arithmetic, ...), recognizes weights
// exported as graph inputs as parameters by how they are used, and keeps ops it
// does not know as opaque ops with a warning.
//
//   std::vector<std::string> warnings;
//   absl::StatusOr<Graph> g = ImportOnnxFile("resnet50.onnx", {}, &warnings);
#ifndef BRAID_GRAPH_ONNX_IMPORT_H_
#define BRAID_GRAPH_ONNX_IMPORT_H_

#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace braid::graph {

struct OnnxImportOptions {
  // Value for symbolic or unknown dimensions (usually the batch).
  int64_t default_batch = 1;
  // Refuse models larger than this (bytes).
  int64_t max_model_bytes = int64_t{2} << 30;
  // Import in a forked child process (graph/import_sandbox.h): a model that
  // crashes or hangs libonnx's shape inference fails with InvalidArgument
  // (or DeadlineExceeded after isolate_timeout_s) instead of killing the
  // caller. Off only where the caller is itself a disposable process.
  bool isolate = true;
  double isolate_timeout_s = 120;
  // Restate attention's packed projections and merged batch-head dims with
  // the dims a head split shards (graph/canonicalize.h). Off only to compare
  // against the graph as exported.
  bool canonicalize = true;
};

// Errors: NotFound (missing file), InvalidArgument (not a ModelProto, truncated,
// corrupt, cyclic, unsupported opset), each naming what is wrong.
absl::StatusOr<Graph> ImportOnnxFile(const std::string& path, const OnnxImportOptions& options,
                                     std::vector<std::string>* warnings);
absl::StatusOr<Graph> ImportOnnxBytes(std::string_view bytes, const OnnxImportOptions& options,
                                      std::vector<std::string>* warnings);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_ONNX_IMPORT_H_
