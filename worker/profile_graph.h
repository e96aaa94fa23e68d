// The loop every profiler backend shares: each distinct (op type, signature)
// of a graph measured once and stored under the backend's device kind, keys
// already in the store skipped, collectives left to the collective
// benchmarks. LibTorch- and CUDA-free, so the CPU and CUDA backends both use it.
//
//   absl::StatusOr<ProfileGraphReport> r = ProfileDistinctOps(g, *store, CpuDeviceKind(),
//       [&](const graph::Graph& g, graph::OpId op) { return profiler.ProfileOp(g, op); });
#ifndef BRAID_WORKER_PROFILE_GRAPH_H_
#define BRAID_WORKER_PROFILE_GRAPH_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "costmodel/profile_store.h"
#include "graph/graph.h"
#include "worker/cpu_profiler.h"

namespace braid::worker {

using OpProfileFn =
    std::function<absl::StatusOr<OpProfile>(const graph::Graph& g, graph::OpId op)>;

// Unimplemented results count as unsupported, other errors as failed (both
// listed in `errors`); fails only when the store cannot be written.
absl::StatusOr<ProfileGraphReport> ProfileDistinctOps(const graph::Graph& g,
                                                      costmodel::ProfileStore& store,
                                                      const std::string& device_kind,
                                                      const OpProfileFn& measure);

}  // namespace braid::worker

#endif  // BRAID_WORKER_PROFILE_GRAPH_H_
