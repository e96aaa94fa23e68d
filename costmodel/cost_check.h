// A cost model's answers for a graph checked before a search or a
// simulation relies on them: every op's time, the fused kernels of the
// graph's producer/consumer pairs that the fusion backend can run, the
// gradients' collective and the slowdowns finite, non-negative and below
// kMaxPredictedSeconds. The event simulator treats a non-finite duration as
// a programmer bug (it CHECK-fails), so a job or command checks here first
// and fails with a message naming the op instead. Fused groups a search
// forms later are priced through the same sources, each of which validates
// what it returns (ClusterCostModel falls back to the corrected roofline
// when a fused-op estimate is not usable).
//
//   if (absl::Status s = CheckCostsFinite(train_graph, cost_model); !s.ok()) return s;
#ifndef BRAID_COSTMODEL_COST_CHECK_H_
#define BRAID_COSTMODEL_COST_CHECK_H_

#include "absl/status/status.h"
#include "costmodel/cost_model.h"
#include "graph/graph.h"

namespace braid::costmodel {

// No single kernel or collective braid plans takes longer than this (about
// 31 years): a larger prediction means the model or cluster is not one
// braid can plan for.
inline constexpr double kMaxPredictedSeconds = 1e9;

// A kernel or collective time braid can plan with: finite, non-negative
// and at most kMaxPredictedSeconds.
bool PlausibleSeconds(double s);

// At most this many fused pairs are checked, one per distinct pair of op
// types (the first in graph order): each distinct kind of fused kernel
// once, in one batch of estimator work.
inline constexpr int kMaxFusedPairsChecked = 256;

// InvalidArgument naming the first op, fused pair of ops (or the gradient
// collective) whose predicted time is not finite or exceeds
// kMaxPredictedSeconds.
absl::Status CheckCostsFinite(const graph::Graph& g, CostModel& cm, int group_size);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_COST_CHECK_H_
