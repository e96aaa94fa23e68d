// Lowering a parallel plan to the per-device program (graph/program.h) that
// every rank runs exactly.
//
// From the forward graph and the per-op configurations of a plan row
// (search/parallelize.h), the lowering builds one device's forward graph on
// a device mesh and then its training graph:
//
//  - The mesh. Every op's view [d, m] (data degree d, model degree m) must
//    share one mesh: its axes are the prime factors of the boundaries
//    {1, m of every op, world}, major first, so the model part of a view is
//    the minor axes whose sizes multiply to m and the data part the rest
//    (degrees whose boundaries do not nest are Unimplemented).
//  - Placements. An op's output dim 0 is split over its view's data axes, a
//    model dim over model axes (major first), its partial sums (a reduction
//    split) over the next model axes; each input dim takes the axes of the
//    output dim (or the reduction) it corresponds to under the op's kind
//    (MatMul/Gemm operands, broadcasting, Transpose's perm, Reshape's runs,
//    Conv/BatchNorm channels, Gather's table and indices).
//  - Redistribution between a producer's placement and a consumer's need,
//    XLA-style: partial sums AllReduce over their axes; axes a dim no longer
//    splits AllGather, minor first; axes newly splitting a dim are a local
//    rank-relative Slice (attribute shard_axes). Each op carries its mesh
//    axes and dim.
//  - Loads. Parameters are loaded once in their first consumer's placement
//    (a second placement is reached by redistribution, so a parameter has
//    one gradient); data inputs and constants in each consumer's placement.
//  - Training. graph::BuildTrainingGraph differentiates the per-device
//    forward graph with true adjoints (AllGather <-> ReduceScatter on the
//    same dim and axis, AllReduce -> AllReduce, a rank-relative Slice -> a
//    rank-relative Pad). Each rank's graph is one part of a global graph
//    whose loss is the sum of the ranks' losses scaled by 1/world (the loss
//    seed): a rank's loss is the mean over its rows, and the rows of one
//    data shard are held by world/d ranks, so the sum is the mean over the
//    global batch. Every parameter's gradient is then summed over every mesh
//    axis on which the parameter is replicated, which is the exact gradient
//    of the global loss, whatever the ops computed redundantly.
//
// The program of a world-1 run (LowerWorldOne) is the same lowering with
// every op unsplit on an empty mesh: `braid run --check` trains both from
// the same seed and compares them.
//
//   graph::Program p = *LowerProgram(forward, row.result.ops, {.row = "braid"});
//   graph::Program ref = *LowerWorldOne(forward, {});
#ifndef BRAID_SEARCH_PROGRAM_LOWERING_H_
#define BRAID_SEARCH_PROGRAM_LOWERING_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/program.h"
#include "graph/training.h"
#include "search/parallelize.h"
#include "search/stop_token.h"

namespace braid::search {

struct LoweringOptions {
  graph::Optimizer optimizer = graph::Optimizer::kSgdMomentum;
  uint64_t seed = 1;
  std::string row;
  // Training-mode BatchNormalization on a split batch normalizes with the
  // statistics of the whole batch (SyncBN: sums all-reduced over the data
  // axes, the op decomposed into ReduceSum, AllReduce and elementwise ops)
  // instead of each shard's own (PyTorch DDP without SyncBN, the default).
  bool sync_batch_norm = false;
  // The plan's gradient buckets (gradient tensor names, search::Bucket):
  // the program runs each bucket's gradient AllReduces as one
  // (graph::Program::buckets).
  std::vector<std::vector<std::string>> gradient_buckets;
  // The plan's op fusion groups (op names of the per-device training graph
  // the fusion search ran on): the program keeps each group whose members
  // are all compute ops of its own graph (graph::Program::groups).
  std::vector<std::vector<std::string>> fusion_groups;
  // Stops the lowering between its phases and every 1024 ops
  // (StopToken::ToStatus); none by default.
  StopToken stop;
};

// Unimplemented (naming the op, its kind and config) for configurations the
// lowering cannot execute exactly: strands side by side, a dim-0 degree
// other than the view's data degree, an operand correspondence the op kind
// does not define; InvalidArgument when `ops` does not cover `forward`.
absl::StatusOr<graph::Program> LowerProgram(const graph::Graph& forward,
                                            const std::vector<OpParallelization>& ops,
                                            const LoweringOptions& options);

// The world-1 program of `forward`: every op unsplit on an empty mesh.
absl::StatusOr<graph::Program> LowerWorldOne(const graph::Graph& forward,
                                             const LoweringOptions& options);

}  // namespace braid::search

#endif  // BRAID_SEARCH_PROGRAM_LOWERING_H_
