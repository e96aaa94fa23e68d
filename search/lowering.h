// Lowering: (training graph, plan) -> the simulator's task graph
// (costmodel/sim_graph.h), on one device and one communication channel, as
// DisCo's simulator does (§4.4: the schedule of one device, AllReduces on a
// channel that overlaps compute).
//
//  - one compute task per fusion group (duration: CostModel::ComputeTime over
//    all members, duplicated ones included) and per unfused op, including the
//    live standalone replica of each duplicated op;
//  - dependencies through tensors: a reader outside a group waits for the
//    group's task, or for the replica's task when the producer is duplicated;
//  - one communication task per bucket, CollectiveTime(kAllReduce, sum of the
//    bucket's gradient bytes, group_size of its AllReduce ops), waiting for the
//    producers of all its gradients; comm_order is the plan's bucket order;
//    readers of a reduced gradient (the updates) wait for its bucket; where
//    CostModel::BucketPackTime > 0 (CPU clusters), a compute task copying the
//    bucket's gradients into its flat buffer sits between them and the
//    collective;
//  - compute_slowdown = CostModel::ComputeSlowdownDuringComm() and
//    comm_slowdown = CostModel::CommSlowdownDuringCompute();
//  - memory: a task allocates the tensors it materializes (outputs read by
//    another task, or graph outputs) when it starts and frees them when all
//    their readers are done (a gradient is freed when the readers of its
//    reduced value are: AllReduce works in place); tensors internal to a fused
//    kernel are never allocated; inputs, parameters, constants and optimizer
//    state are resident.
//
//   absl::StatusOr<costmodel::SimGraph> sg = Lower(g, plan, cost_model);
//   costmodel::SimResult r = costmodel::Simulate(*sg);
#ifndef BRAID_SEARCH_LOWERING_H_
#define BRAID_SEARCH_LOWERING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cost_model.h"
#include "costmodel/sim_graph.h"
#include "graph/graph.h"
#include "search/contraction.h"
#include "search/plan.h"
#include "search/stop_token.h"

namespace braid::search {

// Validates the plan (search/validity.h) and lowers it.
absl::StatusOr<costmodel::SimGraph> Lower(const graph::Graph& g, const Plan& plan,
                                          costmodel::CostModel& cm);

// Knobs for callers that lower many plans of one graph (the search).
struct LowerOptions {
  // false: tasks get empty names (nobody traces a search candidate).
  bool task_names = true;
  // ResidentBytes(g) computed once; < 0: computed here.
  int64_t resident_bytes = -1;
  // Polled every kStopPollTasks tasks (costing an op may query a profile
  // store): once it fires LowerContraction returns StopToken::ToStatus.
  const StopToken* stop = nullptr;
  static constexpr int kStopPollTasks = 256;
};

// Bytes of the parameters, optimizer state, inputs and constants of `g`.
int64_t ResidentBytes(const graph::Graph& g);

// Lowers a plan whose contraction is already built (Contract(g, plan)).
// `node_task`, when not null, receives the task id of each contraction node.
absl::StatusOr<costmodel::SimGraph> LowerContraction(const graph::Graph& g, const Plan& plan,
                                                     const Contraction& c,
                                                     costmodel::CostModel& cm,
                                                     std::vector<int>* node_task = nullptr,
                                                     const LowerOptions& options = {});

// The collective an op type performs (AllReduce, AllGather, ReduceScatter,
// Broadcast, AllToAll, Send/Recv); InvalidArgument for another type.
absl::StatusOr<costmodel::Collective> CollectiveOf(const graph::Op& op);

}  // namespace braid::search

#endif  // BRAID_SEARCH_LOWERING_H_
