// Pieces of the timing executor (worker/executor.h) shared by its launcher
// side (executor.cc) and its rank side (executor_rank.cc). Not an API.
#ifndef BRAID_WORKER_EXECUTOR_INTERNAL_H_
#define BRAID_WORKER_EXECUTOR_INTERNAL_H_

#include <map>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "nlohmann/json.hpp"
#include "worker/executor.h"

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

}  // namespace braid::worker::internal

#endif  // BRAID_WORKER_EXECUTOR_INTERNAL_H_
