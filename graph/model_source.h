// Loads a forward model from wherever a user names one: `zoo:NAME` (optionally
// `zoo:NAME@BATCH`, and `@sample` for the zoo's small sample size:
// `zoo:NAME@sample`, `zoo:NAME@sample@BATCH`), an ONNX file, or a file in
// braid's text format.
//
//   std::vector<std::string> warnings;
//   absl::StatusOr<Graph> g = LoadModel("zoo:resnet50", {}, &warnings);
//   absl::StatusOr<Graph> s = LoadModel("zoo:resnet50@sample", {}, &warnings);
//   absl::StatusOr<Graph> h = LoadModel("model.onnx", {}, &warnings);
#ifndef BRAID_GRAPH_MODEL_SOURCE_H_
#define BRAID_GRAPH_MODEL_SOURCE_H_

#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"
#include "graph/onnx_import.h"
#include "graph/zoo.h"

namespace braid::graph {

struct LoadOptions {
  // Per-rank batch; 0 keeps the zoo default / the ONNX file's own batch (its
  // symbolic batch dims become OnnxImportOptions::default_batch).
  int batch = 0;
  OnnxImportOptions onnx;
};

// A zoo source, `zoo:NAME` followed by at most one `@BATCH` (a positive
// integer) and at most one `@sample`, in either order.
struct ZooSource {
  std::string name;
  int batch = 0;  // 0: none given
  ZooSize size = ZooSize::kPublished;
  int width_pct = 100;  // "@w50": the sample size at 50% width (BuildZooModel)
};

// Whether `source` names a zoo model (starts with `zoo:`).
bool IsZooSource(std::string_view source);

// InvalidArgument naming `source` when it is not `zoo:` followed by a name and
// valid suffixes. Does not check that the model exists (BuildZooModel does).
absl::StatusOr<ZooSource> ParseZooSource(std::string_view source);

// Errors name the source: NotFound for a missing file or zoo model,
// InvalidArgument for content that is not a model.
absl::StatusOr<Graph> LoadModel(std::string_view source, const LoadOptions& options,
                                std::vector<std::string>* warnings);

// Imports in-memory model bytes: braid text format when they start with the
// `graph` header, ONNX otherwise. `what` names the bytes in errors.
absl::StatusOr<Graph> LoadModelBytes(std::string_view bytes, std::string_view what,
                                     const LoadOptions& options, std::vector<std::string>* warnings);

// A model's batch: dim 0 of its first input with a shape; 0 when none. A
// parallel plan splits the model at the global batch (per-rank batch x
// ranks), which `braid plan --parallel` and parallel jobs rebuild it at.
int64_t ModelBatch(const Graph& g);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_MODEL_SOURCE_H_
