// Pipeline parallelism as a choice of the parallelization (Unity §5.3): the
// forward graph cut into S sequential stages, each stage parallelized by the
// machine-mapping DP on its own degree / S devices, the micro-batches run in
// the 1F1B order (search/pipeline_schedule.h).
//
// Cuts: positions in topological order where exactly one activation crosses
// (the stage boundary sends one tensor) and no parameter is read on both
// sides. The S - 1 cuts are the ones closest to equal shares of the forward
// compute (the cost model's op times). Each stage is a graph of its own (the
// crossing tensor becomes its input) planned by ParallelizeForward on the
// first degree / S ranks of the cluster (stages are alike: same devices,
// same links).
//
// Time of one iteration with m micro-batches: each stage is planned and
// costed by the DP on its graph at the micro-batch's shapes (dim 0 of the
// inputs and activations divided by m: kernels are costed at the size they
// run at, so small micro-batches pay their lower efficiency); a micro-batch's
// forward is the stage's DP forward compute plus half its movement, the
// backward the rest; the 1F1B makespan over the stages, plus the slowest
// stage's gradient synchronization (once per iteration, after the flush). A
// boundary transfer is one SendRecv of the crossing tensor's per-device
// piece. Memory per device: the stage's PerDeviceMemory for one micro-batch
// with its activations times the micro-batches in flight (1F1B: S - s for
// stage s; GPipe: m).
//
//   PipelinePlanOptions o;  o.stages = {2, 4};  o.micro_batches = {1, 4, 8};
//   auto c = PipelineCandidates(fwd, cluster, cm, o);   // best m per S
//   c->at(0).time_s; c->at(0).stage_begin; c->at(0).stage_plans[s].ops;
#ifndef BRAID_SEARCH_PIPELINE_PLAN_H_
#define BRAID_SEARCH_PIPELINE_PLAN_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "graph/graph.h"
#include "search/parallel_memory.h"
#include "search/parallelize.h"
#include "search/pipeline_schedule.h"

namespace braid::search {

struct PipelinePlanOptions {
  ParallelizeOptions stage;          // each stage's DP (degree: set per stage)
  std::vector<int> stages = {2, 4};  // stage counts tried (those dividing the degree)
  std::vector<int> micro_batches = {1, 2, 4, 8, 16};  // those dividing the batch
  PipelineOrder order = PipelineOrder::k1F1B;
};

struct PipelineCandidate {
  int stages = 0;
  int micro_batches = 0;
  // Index into the forward graph's topological order of each stage's first op.
  std::vector<int> stage_begin;
  std::vector<ParallelizeResult> stage_plans;  // per stage, on degree / stages devices
  PipelineTiming timing;                       // the 1F1B schedule
  double grad_sync_s = 0;                      // the slowest stage's
  double transfer_s = 0;                       // one boundary transfer per micro-batch
  double time_s = 0;                           // timing.iteration_s + grad_sync_s
  DeviceMemory memory;                         // the fullest stage's device
  absl::Status status;                         // OK, or over memory
};

// One candidate per stage count that divides the degree and has enough cut
// points, with its best micro-batch count (fastest that fits; else fastest).
// Empty when the graph has no cut point. Errors of ParallelizeForward.
// Once options.stage.stop fires, the candidates complete by then (each
// with the best micro-batch count tried).
absl::StatusOr<std::vector<PipelineCandidate>> PipelineCandidates(
    const graph::Graph& forward, const costmodel::ClusterSpec& cluster, costmodel::CostModel& cm,
    const PipelinePlanOptions& options);

// The single-activation cut points of `forward`: positions k in its
// topological order such that ops [0, k) and [k, n) share exactly one
// activation and no parameter. Exposed for tests.
absl::StatusOr<std::vector<int>> PipelineCutPoints(const graph::Graph& forward);

}  // namespace braid::search

#endif  // BRAID_SEARCH_PIPELINE_PLAN_H_
