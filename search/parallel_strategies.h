// The strategy table: the parallelization pass (search/parallelize.h) next to
// the strategies it is measured against in Unity's evaluation
// (papers/unity-joint-algebraic-parallelization.txt §6.2): pure data
// parallelism, the expert-designed strategies that apply to the graph
// (Megatron-LM for transformer layers, Neo for DLRM's embedding tables), and
// braid's own search. Every row is a ParallelizeForward run over the same
// candidate configs (search/parallel_config.h), the data-parallel and expert
// rows restricted by a ParallelizeOptions::filter, so all rows are priced by
// the same cost model and braid's space contains every other row's plan.
//
// Rows, in order:
//   data_parallel    every op at data degree = all devices (weights
//                    replicated, gradients all-reduced).
//   expert:megatron  present when the graph has attention (a Softmax between
//                    two batched activation MatMuls): weight MatMuls column-
//                    then row-parallel in Megatron's pairs (Q/K/V and the
//                    first MLP Linear column, the output projection and the
//                    second MLP Linear row) and attention MatMuls head-parallel over
//                    a model group of M devices inside a node, the other ops
//                    at the same data degree D = degree / M; M is chosen
//                    best-of over the divisors of the degree that fit a node
//                    (Megatron users sweep the degrees, Unity §6.2). Also
//                    present for a stack of Linears (HasLinearStack: an MLP
//                    without attention, convolutions or embedding tables):
//                    Megatron's MLP block, the Linears column then row
//                    parallel in pairs (a Linear after a column-parallel one
//                    is row parallel, every other one column parallel).
//   expert:dlrm      present when a Gather reads a parameter table
//                    (embeddings): the tables column-split over all devices
//                    with their bag reduction (Neo, Unity's [38]; Neo's row
//                    split is not offered: no per-device program masks the
//                    ids outside a device's rows), every other op data
//                    parallel.
//   braid            ParallelizeForward with the memory check (one DP per data
//                    degree) and once unrestricted (ops may mix data degrees);
//                    the faster plan that fits.
// Every plan's per-device memory is checked against the device: a plan that
// does not fit keeps has_plan (its time and memory are reported) with status
// ResourceExhausted naming the bytes. A row without a plan at all (no config
// at that degree) has has_plan = false and the DP's status.
//
//   costmodel::ClusterSpec c = *WithRanks(*LoadCluster("summit"), 24);
//   costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
//   StrategyTableOptions o;
//   o.base.optimizer = graph::Optimizer::kAdam;
//   absl::StatusOr<std::vector<StrategyRow>> rows = ParallelStrategyTable(g, c, cm, o);
//   for (const StrategyRow& r : *rows) r.name, r.result.time_s, r.status.ok();
#ifndef BRAID_SEARCH_PARALLEL_STRATEGIES_H_
#define BRAID_SEARCH_PARALLEL_STRATEGIES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "graph/graph.h"
#include "search/parallelize.h"

namespace braid::search {

struct StrategyRow {
  std::string name;         // "data_parallel", "expert:megatron", "expert:dlrm", "braid"
  std::string description;  // one line: what the strategy is
  absl::Status status;      // OK, or why there is no plan (e.g. ResourceExhausted: over device memory)
  bool has_plan = false;
  ParallelizeResult result;  // valid when has_plan (time_s, ops, memory, candidates)
  double search_s = 0;       // wall seconds this row's search took
};

struct StrategyTableOptions {
  ParallelizeOptions base;      // degree, optimizer, memory options...
  bool include_expert = true;   // add expert rows where a published strategy applies
  // false: the table starts after data_parallel (a caller that costed it
  // first with DataParallelRow).
  bool include_data_parallel = true;
};

// The data_parallel row alone, as the table makes it. base.stop's deadline
// does not cut it short (every plan is at least this one); its flags do.
absl::StatusOr<StrategyRow> DataParallelRow(const graph::Graph& forward,
                                            const costmodel::ClusterSpec& cluster,
                                            costmodel::CostModel& cm,
                                            const ParallelizeOptions& base);

// Rows: data_parallel (every op data parallel over all devices, memory checked:
// a model that does not fit gets status ResourceExhausted with the bytes),
// expert rows that apply to this graph (Megatron for transformer layers: weight
// MatMuls column/row and head-parallel attention inside a node, data parallelism
// across nodes, degrees chosen best-of as Megatron users do (Unity §6.2);
// DLRM (Neo, the Unity paper's ref [38]): embedding tables model-parallel, dense
// ops data parallel; tables whole on one device each (table-wise) where that
// is faster), and braid (ParallelizeForward unrestricted, memory checked;
// when its plan runs strands side by side, braid:all-devices follows: the
// best plan with every op on every device, the kind the executor runs).
// Detect applicability from the graph's structure (attention = Softmax between
// batched MatMuls; embeddings = Gather reading a parameter table), not its name.
absl::StatusOr<std::vector<StrategyRow>> ParallelStrategyTable(
    const graph::Graph& forward, const costmodel::ClusterSpec& cluster,
    costmodel::CostModel& cm, const StrategyTableOptions& options);

// The structural tests behind the expert rows (exposed for tests).
bool HasAttention(const graph::Graph& forward);
bool HasEmbeddingTables(const graph::Graph& forward);
// At least two weight MatMuls, and no attention, convolution or embedding.
bool HasLinearStack(const graph::Graph& forward);

}  // namespace braid::search

#endif  // BRAID_SEARCH_PARALLEL_STRATEGIES_H_
