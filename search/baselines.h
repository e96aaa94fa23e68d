// The baselines of DisCo §6.1, built as plans and costed with the same
// lowering, simulator and cost model as braid's search, each with its
// system's documented defaults:
//
//  no_fusion          no op fusion, one AllReduce per gradient.
//  xla_op_fusion      XLA GPU instruction fusion (GpuInstructionFusion
//                     without, then with duplication), see
//                     XlaOpFusionGroups; one AllReduce per gradient.
//  allreduce_combiner XLA AllReduceCombiner: neighbouring AllReduces in
//                     production order combined up to
//                     xla_gpu_all_reduce_combine_threshold_bytes (30 MiB) and
//                     256 ops (gpu_compiler.cc passes combine_threshold_count
//                     = 256); no op fusion.
//  jax_default        both XLA passes: op fusion, then the combiner.
//  horovod            Horovod tensor fusion: the background loop wakes every
//                     HOROVOD_CYCLE_TIME (1 ms) and fuses the gradients that
//                     became ready since, in ready order, up to
//                     HOROVOD_FUSION_THRESHOLD (128 MiB) per buffer
//                     (horovod/common/operations.cc: SetTensorFusionThreshold
//                     Bytes(128 * 1024 * 1024), SetCycleTimeMs(1)). Ready times
//                     come from simulating no_fusion. The wait for the next
//                     cycle tick only decides the grouping; the simulated
//                     AllReduce starts when its gradients are ready.
//  ddp                PyTorch DDP (torch 1.13): after the first iteration the
//                     Reducer rebuilds its buckets in gradient-ready order with
//                     limits [_DEFAULT_FIRST_BUCKET_BYTES = 1 MiB, bucket_cap_mb
//                     = 25 MiB] (compute_bucket_assignment_by_size with
//                     tensor_indices); buckets are reduced strictly in index
//                     order. Ready order comes from simulating no_fusion, ties
//                     broken by reverse registration order (registration =
//                     order of the parameters' first use in the forward graph):
//                     for a sequential model this is reverse registration
//                     order. No op fusion.
//
// The fully-overlapped bound FO (DisCo §6.2) over a set of evaluated plans is
// max(min over plans of compute_s, min over plans of comm_s): no plan among
// them can compute faster or communicate faster, so FO is a lower bound for
// every one of them. BaselineResults::fo_bound_s is over the baselines only;
// callers comparing braid's plan too pass all SimResults to
// FullyOverlappedBound.
//
//   absl::StatusOr<BaselineResults> b = RunBaselines(g, cost_model);
//   const EvaluatedPlan& best = b->Best();
#ifndef BRAID_SEARCH_BASELINES_H_
#define BRAID_SEARCH_BASELINES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cost_model.h"
#include "costmodel/simulator.h"
#include "graph/graph.h"
#include "search/plan.h"
#include "search/stop_token.h"

namespace braid::search {

struct BaselineConfig {
  int64_t xla_all_reduce_combine_threshold_bytes = 30LL * 1024 * 1024;
  int xla_all_reduce_combine_threshold_count = 256;
  // GPU fusion size limit (gpu_fusible.h kMaxOperandsAndOutputsPerFusion).
  int xla_max_operands_and_outputs_per_fusion = 64;
  int64_t horovod_fusion_threshold_bytes = 128LL * 1024 * 1024;
  double horovod_cycle_time_s = 1e-3;
  int64_t ddp_first_bucket_bytes = 1024 * 1024;
  int64_t ddp_bucket_cap_bytes = 25LL * 1024 * 1024;
};

struct EvaluatedPlan {
  std::string name;
  Plan plan;
  costmodel::SimResult sim;
};

struct BaselineResults {
  // In this order: no_fusion, xla_op_fusion, allreduce_combiner, jax_default,
  // horovod, ddp; a prefix of it (never empty) when a stop cut them short.
  std::vector<EvaluatedPlan> baselines;
  bool complete = true;  // false: cut short by a StopToken
  double fo_bound_s = 0;  // FullyOverlappedBound over the baselines
  const EvaluatedPlan& Best() const;  // smallest iteration time (first on ties)
  const EvaluatedPlan* Find(std::string_view name) const;
};

// Runs the baselines in order, polling `stop` between them, inside the XLA
// fusion pass and inside each plan's contraction and lowering. When it fires
// the baselines finished so far are returned (complete = false), or
// Cancelled / DeadlineExceeded (StopToken::ToStatus) when none has finished.
absl::StatusOr<BaselineResults> RunBaselines(const graph::Graph& g, costmodel::CostModel& cm,
                                             const BaselineConfig& cfg = {},
                                             const StopToken& stop = StopToken());

// Lowers and simulates one plan.
absl::StatusOr<costmodel::SimResult> EvaluatePlan(const graph::Graph& g, const Plan& plan,
                                                  costmodel::CostModel& cm);

// The one fully-overlapped figure braid reports (DisCo §6.2's FO), used by
// every command and benchmark: max(min compute_s, min comm_s) over the
// simulated plans `results` (for one plan: max(compute_s, comm_s), the time
// if its compute and communication overlapped completely); 0 for none.
double FullyOverlappedBound(std::span<const costmodel::SimResult> results);

// DisCo Table 1's speed-up of a plan over a baseline: (T_baseline - T) / T.
double Speedup(double baseline_s, double plan_s);

// The share of the gap between the best baseline and FO that a plan closes:
// (T_best - T) / (T_best - T_FO). std::nullopt when the best baseline is
// already at FO (within 1e-12 relative): there is no gap to close, and
// neither 0% nor 100% would be true.
std::optional<double> FoGapClosed(double best_baseline_s, double plan_s, double fo_s);

// --- The pieces, exposed for tests and for other passes. ---

// XLA GPU instruction fusion as gpu_compiler.cc runs it: GpuInstructionFusion
// with may_duplicate=false, then again with may_duplicate=true
// (xla/service/gpu/gpu_compiler.cc; InstructionFusion::ShouldFuse in
// xla/service/instruction_fusion.cc). Each pass visits consumers in reverse
// topological order (ReversePostOrderFusionQueue); a consumer's operands are
// tried latest-produced first, one fusion at a time, re-trying the grown
// fusion until no operand fuses. A producer fuses into a consumer when
//  - both may be fused (search::MayFuse), the consumer is not a library call
//    (MatMul/Gemm/Conv and their gradients run as cuBLAS/cuDNN calls, into
//    which XLA's GPU InstructionFusion does not fuse: they are neither loop
//    nor input fusible; bias/activation epilogues are folded into them
//    before, by the library rewriters, LibraryEpilogueGroups) and is not a
//    Gather/scatter-add;
//  - the producer is loop-fusible and cheap: elementwise or data movement
//    (reductions, normalizations, softmax, pooling and losses are fusion
//    roots: XLA refuses "producer is a reduction");
//  - the producer is a standalone op: GPU refuses "the producer is a
//    fusion", so in the second pass the fusions made by the first are
//    consumers only (visited at their root);
//  - the producer's only user is the consumer, or (second pass only) it is
//    duplicated, which needs all of: it is not expensive (IsExpensive:
//    divisions, square roots, transcendentals, random numbers: "expensive
//    producer would be duplicated"), and ComputeGloballyUnfusible does not
//    forbid it (it reads more than one non-scalar input, its inputs are
//    larger than its outputs, and some user is not a fusible consumer);
//  - the fused kernel keeps at most xla_max_operands_and_outputs_per_fusion
//    distinct external inputs plus outputs (FusionWouldBeTooLarge).
// The two passes matter: with duplication allowed from the start, backward
// fusions pull in cheap forward producers one at a time and, through them,
// whole chains (ResNet's residual Add/Relu chain) that they then recompute
// and whose inputs they re-read; XLA only duplicates ops the first pass left
// standalone, i.e. ops with several users whose chains are already fused.
// A producer all of whose users now hold a copy becomes a non-duplicated
// member of the last fusion (XLA removes the dead original).
// Not modelled: FusionMerger, multi-output and horizontal fusion, the
// "expensive producer into an operand-reusing consumer" rule, and XLA's cap
// on code duplication: a long chain of cheap ops that each have a second
// user (a Relu chain with its backward) is duplicated into every fusion
// below it, quadratic work that only `stop` bounds.
// `stop` is polled before every fusion attempt; once it fires the groups
// formed so far are returned (a valid, partial fusion), and callers that need
// the whole pass check `stop` afterwards.
// With a `backend` (the cost model's), the library-call rewriters run first
// (LibraryEpilogueGroups) and every fusion must pass backend->CanImplement.
std::vector<FusionGroup> XlaOpFusionGroups(const graph::Graph& g, const BaselineConfig& cfg,
                                           const StopToken& stop = StopToken(),
                                           const costmodel::FusionBackend* backend = nullptr);

// XLA AllReduceCombiner over gradients in production order: a group closes
// when adding the next would exceed `threshold_bytes` or the group holds
// `threshold_count` AllReduces. Returns groups of indices into `bytes`.
std::vector<std::vector<int>> CombineAllReduces(std::span<const int64_t> bytes,
                                                int64_t threshold_bytes, int threshold_count);

// torch.distributed's compute_bucket_assignment_by_size for tensors given in
// gradient-ready order (the rebuilt-bucket path): per dtype key, a tensor is
// appended to its key's open bucket, which closes once its size reaches the
// current limit; limits advance through `limits` and stay at the last.
// Buckets come out in closing order, then the open ones by key's first
// appearance. Returns groups of indices into `bytes`.
std::vector<std::vector<int>> DdpBucketAssignment(std::span<const int64_t> bytes,
                                                  std::span<const int> dtype_keys,
                                                  std::span<const int64_t> limits);

// Horovod: gradient i becomes ready at ready_s[i]; the cycle that handles it
// is ceil(ready_s / cycle_s); within a cycle, in ready order (ties: index),
// consecutive gradients of the same dtype key are fused while the buffer
// stays within `threshold_bytes`; the first that does not fit starts the next
// buffer (Controller::FuseResponses). Returns groups of indices, in issue
// order.
std::vector<std::vector<int>> HorovodBuckets(std::span<const double> ready_s,
                                             std::span<const int64_t> bytes,
                                             std::span<const int> dtype_keys,
                                             int64_t threshold_bytes, double cycle_s);

}  // namespace braid::search

#endif  // BRAID_SEARCH_BASELINES_H_
