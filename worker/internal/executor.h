// Pieces of the timing executor (worker/executor.h) shared by its launcher
// side (executor.cc) and its rank side (executor_rank.cc). Not an API.
#ifndef BRAID_WORKER_INTERNAL_EXECUTOR_H_
#define BRAID_WORKER_INTERNAL_EXECUTOR_H_

#include <map>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "nlohmann/json.hpp"
#include "worker/executor.h"

namespace c10d {
class ProcessGroupGloo;
}  // namespace c10d

namespace braid::worker::internal {

struct GradientMaps {
  std::map<graph::TensorId, graph::TensorId> reduced_to_grad;  // "p.grad.reduced" -> "p.grad"
  std::vector<graph::TensorId> gradients;                      // every kGradient tensor
};

// InvalidArgument naming the op when the graph has a collective that is not
// one AllReduce of one gradient.
absl::StatusOr<GradientMaps> MapGradients(const graph::Graph& g);

// The graph's TopologicalOrder without collectives.
std::vector<graph::OpId> DefaultOrder(const graph::Graph& g);

// {"warmup", "iterations", "verify_allreduce", "strategies": [{"name",
// "buckets": [[tensor ids]], "after_backward", "compute_only", "order": [op ids]}]}; ids are
// stable because the ranks parse the graph from its text form.
nlohmann::json StrategiesToJson(const std::vector<ExecStrategy>& strategies,
                                const TrainBenchOptions& options);

// One rank's timed run of the strategies in `spec` (StrategiesToJson's
// format) on an existing Gloo group: the loop both braid-train-rank (`braid
// run`, the profilers) and the activator (worker/activator.h) run, so the two
// execute plans alike. Per strategy, in spec order.
struct RankResults {
  std::vector<std::vector<double>> times;  // wall seconds per timed iteration
  std::vector<std::vector<double>> cpu;    // compute-thread CPU seconds
  std::vector<ExecBookkeeping> books;
  std::vector<std::vector<std::pair<graph::OpId, double>>> op_log;  // time_ops
  std::vector<std::vector<double>> pack_log;
  std::vector<std::vector<std::pair<int64_t, double>>> probe_log;
  int64_t pack_bytes = 0;
};
absl::StatusOr<RankResults> RunStrategiesOnRank(const graph::Graph& g, const nlohmann::json& spec,
                                                c10d::ProcessGroupGloo& pg, int world);

// A rank process's settings: one LibTorch and one OpenBLAS thread, freed
// memory kept (worker/timing.h), denormals flushed.
void SetUpRankProcess();

}  // namespace braid::worker::internal

#endif  // BRAID_WORKER_INTERNAL_EXECUTOR_H_
