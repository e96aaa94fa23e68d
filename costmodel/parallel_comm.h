// The communication a sequence of PCG parallel ops (graph/parallel_ops.h)
// performs, as collectives the comm model (costmodel/comm_model.h) can cost.
//
// Unity (§3.3) fuses adjacent pairs at run time; so does this mapping. With P
// the bytes of one piece of the op's input (PieceBytes), d the op's degree:
//   Reduce(d), Replicate(d)         one AllReduce of P over d ranks
//   Reduce(d), Partition(any, d)    one ReduceScatter, input buffer P, d ranks
//   Combine(a, d), Replicate(d)     one AllGather, output buffer d*P, d ranks
//   Combine(a, d), Partition(b, d)  one AllToAll, send buffer P, d ranks (a != b;
//                                   with a == b the pair is the identity: nothing)
//   Partition(a, d), Combine(a, d)  the identity: nothing
//   Combine(a, d) alone             AllGather, output buffer d*P (see below)
//   Reduce(d) alone                 AllReduce of P (see below)
//   Replicate(d) alone              Broadcast of P to d ranks
//   Partition alone                 nothing: the consumer's tasks hold the whole
//                                   piece already and slice it locally
//   Pipeline, Batch                 nothing: the send/recv between stages is the
//                                   pipeline schedule's, not a collective
// Pairs are matched greedily from the left. Byte counts follow comm_model.h's
// (nccl-tests) convention.
//
// Combine alone leaves the combined piece on 1 of every d tasks: a Gather. The
// gathering rank must take in (d-1)/d of the output through its link, which is
// a ring AllGather's bandwidth term, so it is costed as AllGather.
// Reduce alone is costed as AllReduce: the bandwidth-optimal reduce
// (Rabenseifner: reduce-scatter then gather to the root) moves 2(d-1)/d * P
// through the root's link, exactly the ring AllReduce term, and AllReduce is the
// collective the workers benchmark most, so a fitted coefficient applies.
//
// Every collective the table needs (AllReduce, ReduceScatter, AllGather,
// AllToAll, Broadcast) is a CommModel collective; no ratio of another is used.
// The group is costed as CommModel lays groups out (the first d ranks);
// costing on a machine view's links is costmodel/machine_view.h's part.
//
//   std::vector<ParallelOp> ops = {ParallelOp::Reduce(4), ParallelOp::Replicate(4)};
//   auto steps = ParallelOpsComm(ops, *ParseParallelShape("f32[1024,256]x4"));
//   // {{kAllReduce, 1 MiB, group 4, 1 group, ops [0, 2)}}
//   double t = *ParallelOpsCommTime(CommModel(spec), ops, shape);
#ifndef BRAID_COSTMODEL_PARALLEL_COMM_H_
#define BRAID_COSTMODEL_PARALLEL_COMM_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/comm_model.h"
#include "costmodel/cost_model.h"
#include "graph/parallel_ops.h"
#include "graph/parallel_shape.h"

namespace braid::costmodel {

// One collective a parallel op (or a fused pair) performs. `num_groups`
// groups of `group_size` ranks run it at once on disjoint ranks, each moving
// `bytes`.
struct CollectiveStep {
  Collective collective = Collective::kAllReduce;
  int64_t bytes = 0;
  int group_size = 0;
  int num_groups = 0;
  int first_op = 0;  // index of the first op it realizes in the sequence
  int num_ops = 1;   // 2 for a fused pair

  bool operator==(const CollectiveStep&) const = default;
};

// "AllReduce(1048576 B x 4 ranks x 1 groups; ops 0-1)".
std::string CollectiveStepString(const CollectiveStep& s);

// The collectives `ops`, applied in order to `in`, perform (table above).
// InvalidArgument when the sequence is invalid on `in` (ApplyParallelOps's
// error).
absl::StatusOr<std::vector<CollectiveStep>> ParallelOpsComm(
    std::span<const graph::ParallelOp> ops, const graph::ParallelTensorShape& in);

// Seconds for the steps, one after another, each group costed by `model`.
double CollectiveStepsTime(const CommModel& model, std::span<const CollectiveStep> steps);
// ParallelOpsComm, then CollectiveStepsTime.
absl::StatusOr<double> ParallelOpsCommTime(const CommModel& model,
                                           std::span<const graph::ParallelOp> ops,
                                           const graph::ParallelTensorShape& in);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_PARALLEL_COMM_H_
