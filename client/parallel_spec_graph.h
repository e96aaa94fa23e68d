// The graph and the per-op configurations of what the hand-written parallel
// trainer (worker/parallel_train.h) runs: what maps a pipeline plan onto it
// (client/parallel_plan_exec.h) until pipeline stages run on the runtime.
//
// The forward graph (ParallelTrainForwardGraph) is the model as PyTorch
// exports it: per Linear MatMul(x, W[in, out]) + Add(bias) (+ Relu); per
// transformer block LayerNorm, Q/K/V Linears, Reshape/Transpose into heads,
// MatMul(Q, Kᵀ), Scale, Softmax, MatMul(P, V), Transpose/Reshape back, the
// output Linear, residual Add, LayerNorm, W1, Relu, W2, residual Add.
//
// ExecutedConfigs gives every op the search::ParallelConfig the ranks really
// run: Linears per the spec (data: out[D, 1]; column: out[.., M]; row:
// reduction M), attention head-parallel (dim 1 of [B, H, S, *]) under
// Megatron, and everything else following its input; an op whose input the
// ranks hold replicated in the model group (after a row layer's all-reduce:
// bias, residual, LayerNorm, loss) runs replicated (replica_degree M). A row
// layer feeding a row layer reduce-scatters on features; with
// loss_rows_split the last row layer's bias Add runs out[D*M, 1]. A stage
// with stage_relu_first starts with that ReLU.
// ForcedStrategy turns that into ParallelizeOptions: the filter keeps exactly
// the executed config of every op whose config the DP can express (Unity's
// candidates never replicate a computation, so the replicated ops keep their
// candidates and the DP picks).
//
//   absl::StatusOr<graph::Graph> g = ParallelTrainForwardGraph(spec);
//   absl::StatusOr<search::ParallelizeOptions> o = ForcedStrategy(spec, *g);
#ifndef BRAID_CLIENT_PARALLEL_SPEC_GRAPH_H_
#define BRAID_CLIENT_PARALLEL_SPEC_GRAPH_H_

#include <map>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "search/parallel_config.h"
#include "search/parallelize.h"
#include "worker/parallel_train.h"

namespace braid::client {

// The hand-written trainer's spec (worker/parallel_train.h).
using worker::LayerParallel;
using worker::ParallelTrainSpec;
using worker::TransformerShape;

// The forward graph braid's pass sees for the spec's model (global shapes,
// batch = spec.batch). InvalidArgument for an invalid spec; Unimplemented for
// a pipeline (one graph per stage).
absl::StatusOr<graph::Graph> ParallelTrainForwardGraph(const ParallelTrainSpec& spec);

// The config every forward op of `g` (ParallelTrainForwardGraph(spec)) runs
// under on the ranks, at total degree spec.ranks.
absl::StatusOr<std::map<graph::OpId, search::ParallelConfig>> ExecutedConfigs(
    const ParallelTrainSpec& spec, const graph::Graph& g);

// ParallelizeOptions whose filter forces ExecutedConfigs; degree =
// data_degree x model_degree, memory not checked. The options hold a copy of
// the configs; `g` must be the graph they are used with.
absl::StatusOr<search::ParallelizeOptions> ForcedStrategy(const ParallelTrainSpec& spec,
                                                          const graph::Graph& g);

}  // namespace braid::client

#endif  // BRAID_CLIENT_PARALLEL_SPEC_GRAPH_H_
