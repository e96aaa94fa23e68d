// The parallelization pass: per-op parallel configurations of a forward graph
// chosen jointly with Unity's machine-mapping DP (search/machine_mapping.h),
// costed on the links each collective's group really uses.
//
// Every forward op becomes a leaf of the DP with its candidate configs
// (search/parallel_config.h) at total degree = all devices. A tensor read by
// several ops also gets a fan-out leaf right after its producer, whose
// choices are the input layouts its readers may need: the producer pays one
// transition to it and each reader one from it, so the AllGather feeding Q,
// K and V is paid once (Unity's PCG has one Combine/Replicate there). The
// series decomposition is a left-deep chain in topological order: the split
// before leaf k carries every tensor leaf k reads from earlier leaves (so a
// residual is moved exactly once, at its consumer). Leaves stay live until
// their last reader, and the DP enumerates the live leaves' placements, so
// the candidates are kept small (ParallelizeOptions::max_model_dims).
//
// Degrees -> devices. A config's data degree D (output dim 0, the batch) and
// model degree M (everything else: other output dims, the contraction split)
// map onto the 2-D view {start 0, dims [D, M], strides [M, 1]}: model groups
// are consecutive ranks (inside a node when M divides the node width), data
// groups are strided across nodes. For costing, a view dim that straddles
// node boundaries is cut into an inter-node part and an intra-node part (the
// "physical" sub-dims). A collective runs on the sub-dims of the part it
// acts on: Partition/Combine of tensor dim 0 -> the data part, any other
// dim or the replica dim -> the model part, both -> all; a weight gradient's
// AllReduce -> the data part. Each sub-dim is priced with ViewDimensionLink +
// RingCost; a group over several sub-dims is hierarchical (ReduceScatter
// inner-first, AllReduce/AllGather outer, ...), as NCCL does across nodes.
// CommModel's "first d ranks" groups are not used: a 2-rank data group
// across nodes costs NIC bandwidth, not NVLink.
//
// Costs (seconds per training iteration):
//   OpCost       = (1 + backward_factor) * forward shard time   [backward ~ 2x
//                  forward: the input and the weight gradient each cost about
//                  one forward GEMM]
//                + weight-gradient AllReduce over the data group
//   MovementCost = (1 + backward_comm_factor) * transition time   [the adjoint
//                  parallel ops of a transition move the same bytes:
//                  AllGather <-> ReduceScatter, AllReduce <-> AllReduce]
// Ops whose kind parallel_config.h cannot split get one opaque config: data
// parallel on dim 0 of every activation when the degree divides it (else
// replicated), their compute time divided by that degree.
//
//   ClusterSpec c = *WithRanks(*LoadCluster("dgx-h100"), 16);
//   ClusterCostModel cm(c, nullptr, nullptr, CommModel(c));
//   absl::StatusOr<ParallelizeResult> r = ParallelizeForward(g, c, cm);
//   r->time_s;  r->ops[i].config;  r->ops[i].data_degree;  r->ops[i].view;
#ifndef BRAID_SEARCH_PARALLELIZE_H_
#define BRAID_SEARCH_PARALLELIZE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "costmodel/machine_view.h"
#include "graph/graph.h"
#include "search/parallel_config.h"

namespace braid::search {

struct ParallelizeOptions {
  // Total degree of every op; 0: all ranks of the cluster.
  int degree = 0;
  // Backward compute time as a multiple of forward.
  double backward_factor = 2.0;
  // Backward communication of a layout transition as a multiple of forward.
  double backward_comm_factor = 1.0;
  // Most output/contraction dims besides dim 0 that may carry a degree
  // (1: the model part sits on one dim, as in Megatron). Keeps the DP's
  // boundary enumeration small; 0: no limit.
  int max_model_dims = 1;
  // Optional restriction of the candidates (e.g. pure data parallelism for a
  // baseline): a config is kept when it returns true.
  std::function<bool(const graph::Graph&, graph::OpId, const ParallelConfig&)> filter;
  // Bound passed to FindOptimalMachineMapping.
  int64_t max_boundary_choices = 1 << 22;
};

// The chosen parallelization of one op.
struct OpParallelization {
  graph::OpId op = graph::kNoId;
  std::string name;
  ParallelConfig config;
  bool opaque = false;       // no parallel_config.h support: the data fallback
  int data_degree = 1;       // D: degree of output dim 0
  int model_degree = 1;      // M: the rest
  costmodel::MachineView view;  // [D, M] / [M, 1] (1-D when D or M is 1)
  double compute_s = 0;      // forward + backward shard time
  double grad_sync_s = 0;    // weight-gradient AllReduce over the data group
};

struct ParallelizeResult {
  double time_s = 0;  // the DP's cost: compute + sync + movement
  std::vector<OpParallelization> ops;  // in topological order
  const OpParallelization* Find(std::string_view op_name) const;
};

// InvalidArgument for a degree outside [1, num_ranks] or an invalid cluster;
// NotFound when some op has no config left at that degree (after `filter`);
// other errors as FindOptimalMachineMapping's.
absl::StatusOr<ParallelizeResult> ParallelizeForward(const graph::Graph& forward,
                                                     const costmodel::ClusterSpec& cluster,
                                                     costmodel::CostModel& cm,
                                                     const ParallelizeOptions& options = {});

// The canonical view of a config with data degree `d` and model degree `m`
// (see the top of the file).
costmodel::MachineView ConfigView(int d, int m);

// Seconds for one collective of `bytes` over a group of `group_size` ranks
// that spans the given part of the [d, m] view on `cluster`: part 0 = data,
// 1 = model, 2 = both. Exposed for tests.
absl::StatusOr<double> ViewCollectiveTime(const costmodel::ClusterSpec& cluster, int d, int m,
                                          int part, costmodel::Collective c, int64_t bytes,
                                          int group_size);

}  // namespace braid::search

#endif  // BRAID_SEARCH_PARALLELIZE_H_
