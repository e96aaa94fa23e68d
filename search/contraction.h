// The task structure of a plan, before costing: one node per fused kernel,
// per unfused op (including live standalone replicas of duplicated ops) and
// per AllReduce bucket, with dependencies through tensors. Building it checks
// the plan (search/validity.h is a thin wrapper) and lowering
// (search/lowering.h) adds durations and memory to it.
//
//   absl::StatusOr<Contraction> c = Contract(g, plan);
//   for (int n : c->order) { const TaskNode& node = c->nodes[n]; ... }
#ifndef BRAID_SEARCH_CONTRACTION_H_
#define BRAID_SEARCH_CONTRACTION_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/fusion_backend.h"
#include "graph/graph.h"
#include "search/plan.h"
#include "search/stop_token.h"

namespace braid::search {

struct TaskNode {
  enum class Kind : uint8_t { kGroup, kOp, kBucket };
  Kind kind = Kind::kOp;
  int index = 0;                    // group index, op id, or bucket index
  std::vector<graph::OpId> ops;     // ops it executes (bucket: its AllReduce ops)
  std::vector<int> deps;            // node ids, ascending, unique
  std::vector<int> readers;         // nodes reading a tensor it materializes
  std::vector<graph::TensorId> materialized;  // outputs read outside or graph outputs
  graph::OpId key = 0;              // smallest op id: tie-break for orders
};

struct Contraction {
  std::vector<TaskNode> nodes;
  std::vector<int> order;        // a topological order of nodes (ties by key)
  std::vector<int> home;         // per op: node whose output outside readers use; -1 if none
  std::vector<int> group_node;   // per plan group
  std::vector<int> bucket_node;  // per plan bucket
  std::vector<int> bucket_of_grad;  // per tensor: bucket index or -1
};

// Checks `plan` against `g` and builds its task structure. InvalidArgument
// naming the offending group, op, tensor or bucket when the plan is invalid:
// a member that may not be fused, two library ops (costmodel::IsLibraryOp)
// in one group, an op that is the non-duplicated member of two groups, a
// disconnected group, a duplicated op that feeds no member of its group,
// buckets that do not partition the gradients, or a fusion that makes the
// contracted graph cyclic. With a `backend`, also a group the backend cannot
// run as one kernel (costmodel::FusionBackend::CanImplement).
absl::StatusOr<Contraction> Contract(const graph::Graph& g, const Plan& plan,
                                     const costmodel::FusionBackend* backend = nullptr);
// Same, with `topo` = g.TopologicalOrder() computed once by a caller that
// contracts many plans of one graph (the search), and `stop` polled between
// the phases (each linear in the graph): once it fires the result is
// StopToken::ToStatus.
absl::StatusOr<Contraction> Contract(const graph::Graph& g, const Plan& plan,
                                     std::span<const graph::OpId> topo,
                                     const StopToken& stop = StopToken(),
                                     const costmodel::FusionBackend* backend = nullptr);

// Position of each node in the order the simulator runs compute (one device,
// FIFO ready queue, DisCo §4.4), with communication assumed to finish at once:
// gradients are produced by backward ops that never wait on communication, so
// this is the gradient production order.
std::vector<int> ProductionPositions(const Contraction& c);

// Reorders plan->buckets (and c's bucket bookkeeping) by the production
// position of each bucket's last gradient (ties: first gradient, then old
// index): the order DisCo's simulator issues AllReduces in.
void SortBucketsByProduction(const graph::Graph& g, Plan* plan, Contraction* c);

// Same, for a plan alone. Fails when the plan is invalid.
absl::StatusOr<Plan> SortBucketsByProduction(const graph::Graph& g, Plan plan);

// True when a compute op may be a member of a fusion group: graph::IsFusible
// (no collective, control-flow, opaque or recurrent op), and a forward or
// backward op (optimizer updates are never fused).
bool MayFuse(const graph::Op& op);

}  // namespace braid::search

#endif  // BRAID_SEARCH_CONTRACTION_H_
