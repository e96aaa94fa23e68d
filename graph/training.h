// The training-graph builder: graph-level autodiff.
//
// From a forward graph it builds one data-parallel training iteration on each
// of N ranks: the forward ops, a loss if the forward graph has none, backward
// ops per op type, exactly one gradient per parameter, one AllReduce per
// gradient in the order gradients are produced, and one optimizer update per
// parameter. Every op carries FLOPs and bytes (graph/ops.h).
//
//   TrainingOptions opts;
//   opts.ranks = 8;
//   absl::StatusOr<Graph> train = BuildTrainingGraph(forward, opts);
#ifndef BRAID_GRAPH_TRAINING_H_
#define BRAID_GRAPH_TRAINING_H_

#include "graph/graph.h"

namespace braid::graph {

enum class Optimizer : uint8_t { kSgdMomentum, kAdam };

struct TrainingOptions {
  int ranks = 1;                         // data-parallel world size (AllReduce group)
  Optimizer optimizer = Optimizer::kSgdMomentum;
};

// Fails with InvalidArgument when the forward graph is invalid or contains an
// op whose backward braid cannot build (the message names the op and type).
absl::StatusOr<Graph> BuildTrainingGraph(const Graph& forward, const TrainingOptions& options);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_TRAINING_H_
