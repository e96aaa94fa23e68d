// Random fused ops for the fused-op estimator's training set (DisCo §5.2): pick
// an op, fuse it with one of its predecessors, and keep fusing the group with
// a predecessor, each step kept only when the device's fusion backend can run
// the grown group as one kernel and the group stays convex (no path leaves it
// and comes back). Deterministic for a seed, so a stopped sampling run
// resumes by drawing the same groups again.
//
//   FusedSamplerOptions o{.count = 500, .seed = 7};
//   std::vector<std::vector<graph::OpId>> groups = SampleFusedGroups(training, CpuFusionBackend(), o);
#ifndef BRAID_COSTMODEL_FUSED_SAMPLER_H_
#define BRAID_COSTMODEL_FUSED_SAMPLER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "costmodel/fusion_backend.h"
#include "graph/graph.h"

namespace braid::costmodel {

struct FusedSamplerOptions {
  int count = 100;     // distinct groups wanted (fewer when the graph has fewer)
  int min_ops = 2;
  int max_ops = 12;    // a draw stops growing at a size uniform in [min_ops, max_ops]
  uint64_t seed = 1;
  int max_draws = 0;   // 0: 40 * count
};

// Distinct groups (by FusedSignature), each sorted by op id, in draw order.
std::vector<std::vector<graph::OpId>> SampleFusedGroups(const graph::Graph& g,
                                                        const FusionBackend& backend,
                                                        const FusedSamplerOptions& options);

// True when no path of `g` leaves `group` (sorted op ids) and re-enters it.
bool IsConvex(const graph::Graph& g, std::span<const graph::OpId> group);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_FUSED_SAMPLER_H_
