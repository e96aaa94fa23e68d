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
//
// Layout of the result (the search and the simulator rely on it):
//  - the forward tensors and ops first, same names and order, phase kForward;
//  - if the first forward output is not a scalar, a loss (phase kForward):
//    SoftmaxCrossEntropyLoss for [batch, classes] (new kInput i64 "labels"
//    [batch]) or [batch, seq, vocab] outputs (labels [batch, seq], both
//    reshaped to rows), else a mean-squared loss (Sub, Mul, ReduceMean) against
//    a new kInput "target"; its output is the f32 scalar "loss", which then
//    leads outputs();
//  - backward ops (phase kBackward) named "<forward op>.grad...";
//  - for each parameter p, in gradient-production order: the kGradient tensor
//    "p.grad" and, right after the op producing it, the AllReduce
//    "p.grad.allreduce" (phase kCommunication, attr group_size = ranks) into
//    the kActivation "p.grad.reduced";
//  - last, one update per parameter in that order (phase kUpdate, op
//    "p.update"): SgdMomentumUpdate(p, p.grad.reduced, p.momentum) ->
//    (p.new, p.momentum.new) or AdamUpdate(p, p.grad.reduced, p.adam_m,
//    p.adam_v) -> (p.new, p.adam_m.new, p.adam_v.new); the state tensors are
//    kOptimizerState.
// A forward parameter the loss does not depend on (an auxiliary head, an
// integer table) is not trained: its role becomes kConstant.
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
