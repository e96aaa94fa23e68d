// Internal to the model zoo (graph/zoo.cc): the per-family model builders that
// zoo.cc registers. Not for use outside graph/zoo*.cc; call BuildZooModel().
#ifndef BRAID_GRAPH_INTERNAL_ZOO_H_
#define BRAID_GRAPH_INTERNAL_ZOO_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace braid::graph::zoo_internal {

// The widths and lengths of one zoo model at one ZooSize; zoo.cc holds each
// model's published and sample values. A builder reads only the fields its
// model has. Layer counts and the op sequence of a layer are not dims: every
// size of a model has the same layers.
struct ZooDims {
  // Vision.
  int64_t image = 0;        // input height = width
  int64_t channel_div = 1;  // every conv's published channel count is divided by this
  int64_t classes = 0;      // classifier outputs
  int64_t fc = 0;           // VGG classifier width; DLRM top-MLP width
  // Sequence models. `width` is d_model, the LSTM hidden size or the MLP width.
  int64_t width = 0;
  int64_t heads = 0;
  int64_t ffn = 0;        // feed-forward inner width
  int64_t seq = 0;        // tokens per sequence (RNNLM: unrolled steps)
  int64_t vocab = 0;      // token vocabulary (the embedding table's rows)
  int64_t positions = 0;  // BERT: position-embedding rows (>= seq)
  int64_t chunk = 0;      // Reformer: attention chunk length (divides seq)
  // DLRM.
  int64_t dense = 0;    // dense features
  int64_t bottom = 0;   // bottom-MLP hidden width
  int64_t embed = 0;    // embedding dim (the bottom MLP's output)
  int64_t rows = 0;     // rows per embedding table
  int64_t lookups = 0;  // indices per lookup
};

// Vision models (zoo_vision.cc).
absl::StatusOr<Graph> BuildVgg19(int64_t batch, const ZooDims& dims);
absl::StatusOr<Graph> BuildResNet50(int64_t batch, const ZooDims& dims);
absl::StatusOr<Graph> BuildResNeXt50(int64_t batch, const ZooDims& dims);
absl::StatusOr<Graph> BuildInceptionV3(int64_t batch, const ZooDims& dims);

// Attention models (zoo_attention.cc).
absl::StatusOr<Graph> BuildTransformerBase(int64_t batch, const ZooDims& dims);
absl::StatusOr<Graph> BuildBertLarge(int64_t batch, const ZooDims& dims);
absl::StatusOr<Graph> BuildReformer(int64_t batch, const ZooDims& dims);
absl::StatusOr<Graph> BuildGpt3Layers(int64_t batch, const ZooDims& dims);

}  // namespace braid::graph::zoo_internal

#endif  // BRAID_GRAPH_INTERNAL_ZOO_H_
