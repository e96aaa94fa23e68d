// Internal to the model zoo (graph/zoo.cc): the per-family model builders that
// zoo.cc registers. Not for use outside graph/zoo*.cc; call BuildZooModel().
#ifndef BRAID_GRAPH_INTERNAL_ZOO_H_
#define BRAID_GRAPH_INTERNAL_ZOO_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace braid::graph::zoo_internal {

// Vision models (zoo_vision.cc), ImageNet-sized inputs.
absl::StatusOr<Graph> BuildVgg19(int64_t batch);
absl::StatusOr<Graph> BuildResNet50(int64_t batch);
absl::StatusOr<Graph> BuildResNeXt50(int64_t batch);
absl::StatusOr<Graph> BuildInceptionV3(int64_t batch);

// Attention models (zoo_attention.cc).
absl::StatusOr<Graph> BuildTransformerBase(int64_t batch);
absl::StatusOr<Graph> BuildBertLarge(int64_t batch);
absl::StatusOr<Graph> BuildReformer(int64_t batch);
absl::StatusOr<Graph> BuildGpt3Layers(int64_t batch);

}  // namespace braid::graph::zoo_internal

#endif  // BRAID_GRAPH_INTERNAL_ZOO_H_
