// The machine-mapping dynamic program of Unity §5.2: given a series-parallel
// decomposition of a PCG whose operators each have a few candidate parallel
// configurations, choose for every operator a configuration and a machine
// view so that the per-iteration time is minimal.
//
//   * Series(left, right): every op of `left` finishes before any op of
//     `right` starts; both run on the same devices. The tensors crossing the
//     split are moved between the producer's and the consumer's layout, so the
//     DP fixes the placement of the ops at the boundary and takes
//     min over those of cost(left) + movement + cost(right).
//   * Parallel(left, right): no data flows between the two sides. Either the
//     devices are cut into two disjoint contiguous ranges and the two sides run
//     at once (max of the costs; each side may take either part), or both run
//     one after the other on all the devices (sum).
//
// Sub-results are memoized on (subtree, device range, fixed boundary
// placements) in a MachineMappingCache, which may outlive one call: Unity's
// cross-invocation subgraph cache. Subtrees are keyed by structure and op ids,
// so the same op id must mean the same op (and the same candidate configs)
// across the calls that share a cache.
//
//   MachineMappingProblem p;
//   p.ops = {{.id = 0, .name = "mm0", .configs = {{"dp1", 1}, {"dp2", 2}}},
//            {.id = 1, .name = "mm1", .configs = {{"dp2", 2}}}};
//   int a = p.AddLeaf(0), b = p.AddLeaf(1);
//   p.root = p.AddSeries(a, b, {{.producer_op = 0, .consumer_op = 1}});
//   p.resources = {.num_devices = 4};          // or .cluster = spec
//   MachineMappingCache cache;
//   absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(p, model, &cache);
//   r->cost;  r->placements.at(0).config;  r->placements.at(0).view;
#ifndef BRAID_SEARCH_MACHINE_MAPPING_H_
#define BRAID_SEARCH_MACHINE_MAPPING_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/machine_view.h"

namespace braid::search {

// One candidate parallel configuration of an op: a name the cost model
// understands (e.g. "dp2xtp2") and the number of tasks, hence devices, it
// needs. Views of exactly that many devices are considered for it.
struct OpConfig {
  std::string name;
  int num_devices = 1;

  bool operator==(const OpConfig&) const = default;
};

// An operator of the problem and its candidate configurations.
struct MappedOp {
  int id = 0;  // unique within a problem; what the cost model is asked about
  std::string name;
  std::vector<OpConfig> configs;
};

// A tensor crossing a series split: produced by an op in the left subtree and
// consumed by an op in the right one. `bytes` is for the cost model.
struct BoundaryTensor {
  int producer_op = 0;
  int consumer_op = 0;
  int64_t bytes = 0;
};

// Where and how one op runs.
struct OpPlacement {
  int config = 0;  // index into MappedOp::configs
  costmodel::MachineView view;

  bool operator==(const OpPlacement&) const = default;
};

// Node of the series-parallel decomposition tree (an arena in the problem).
struct SpNode {
  enum class Kind : uint8_t { kLeaf, kSeries, kParallel };
  Kind kind = Kind::kLeaf;
  int op = -1;  // kLeaf: the op id
  int left = -1, right = -1;
  std::vector<BoundaryTensor> crossing;  // kSeries only
};

// The devices the problem may use: ranks 0..num_devices-1. With a cluster,
// the candidate views of an op are the cluster's EnumerateMachineViews for
// the config's device count (restricted to the current range); without one,
// contiguous 1-D views {start, [d], [1]}.
struct MachineResources {
  int num_devices = 1;
  std::optional<costmodel::ClusterSpec> cluster;
  int max_view_dims = costmodel::kMaxViewDims;
};

struct MachineMappingProblem {
  std::vector<MappedOp> ops;
  std::vector<SpNode> nodes;
  int root = -1;
  MachineResources resources;

  int AddLeaf(int op_id);
  int AddSeries(int left, int right, std::vector<BoundaryTensor> crossing);
  int AddParallel(int left, int right);
};

// What the DP asks of a cost model. Infinity (or any non-finite value) means
// "this op cannot run so" (e.g. it does not fit in memory); an error status
// aborts the search and is returned as is.
class MachineMappingCostModel {
 public:
  virtual ~MachineMappingCostModel() = default;
  // Seconds for `op` with `config` on `view`.
  virtual absl::StatusOr<double> OpCost(const MappedOp& op, const OpConfig& config,
                                        const costmodel::MachineView& view) = 0;
  // Seconds to move `tensor` from its producer's layout (config, view) to its
  // consumer's; 0 when the layouts agree.
  virtual absl::StatusOr<double> MovementCost(const BoundaryTensor& tensor,
                                              const MappedOp& producer,
                                              const OpPlacement& producer_placement,
                                              const MappedOp& consumer,
                                              const OpPlacement& consumer_placement) = 0;
};

struct MachineMappingResult {
  double cost = 0;
  std::map<int, OpPlacement> placements;  // op id -> placement
};

// Memo of sub-results, shareable across calls (see the top of the file).
class MachineMappingCache {
 public:
  struct Entry {
    bool feasible = false;
    MachineMappingResult result;
  };
  const Entry* Find(const std::string& key);
  void Insert(const std::string& key, Entry entry);
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  size_t size() const { return entries_.size(); }

 private:
  absl::flat_hash_map<std::string, Entry> entries_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

// InvalidArgument for a malformed problem (bad node indices, a node used
// twice, unknown or duplicate op ids, a crossing tensor whose ends are not on
// the right sides, configs with < 1 device, num_devices < 1); NotFound when
// no assignment is feasible (every config too large for the devices, or the
// cost model rules every choice out); ResourceExhausted when a series split
// would enumerate more than `max_boundary_choices` boundary placements.
absl::StatusOr<MachineMappingResult> FindOptimalMachineMapping(
    const MachineMappingProblem& problem, MachineMappingCostModel& model,
    MachineMappingCache* cache = nullptr, int64_t max_boundary_choices = 1 << 20);

// The cost of one full assignment (every op placed), evaluated as the DP
// defines it: series = left + movement + right; parallel = max when some
// contiguous cut separates the devices of the two sides, else the sum.
// Used to check the DP by brute force. InvalidArgument when an op is missing.
absl::StatusOr<double> EvaluateMachineMapping(const MachineMappingProblem& problem,
                                              MachineMappingCostModel& model,
                                              const std::map<int, OpPlacement>& placements);

// The candidate views for `config` inside ranks [start, start + count).
absl::StatusOr<std::vector<costmodel::MachineView>> CandidateViews(
    const MachineResources& resources, const OpConfig& config, int start, int count);

}  // namespace braid::search

#endif  // BRAID_SEARCH_MACHINE_MAPPING_H_
