// Machine views (Unity §3.2): where the tasks of a parallel op run. A view is
// an n-dimensional array of devices (n <= 3) laid over the cluster's ranks
// (ranks fill nodes in order, costmodel/cluster.h): task (i_0, ..., i_{n-1})
// runs on rank start + sum_k i_k * strides[k]. An op with parallel degrees
// d_0 x ... x d_{n-1} maps onto a view with those dims; what links a
// dimension's groups cross decides what its collectives cost.
//
//   ClusterSpec c = ...;                            // 2 nodes x 4 GPUs
//   MachineView v = {.start = 0, .dims = {2, 4}, .strides = {4, 1}};
//   *ViewDevices(v, c);                             // 0 1 2 3 4 5 6 7
//   ViewDimLink l0 = *ViewDimensionLink(v, c, 0);   // inter-node, NIC share
//   ViewDimLink l1 = *ViewDimensionLink(v, c, 1);   // intra-node NVLink
//   double t = RingCost(Collective::kAllReduce, 4, l1).At(bytes);
//   auto views = EnumerateMachineViews(c, /*num_devices=*/4);
//
// Enumeration keeps the search linear-ish in the device count, as Unity asks
// of its "effective" views: strides are divisors of the rank count (1, a
// node's width, ...), every view dimension has size >= 2 (a size-1 dimension
// changes nothing; only a 1-device view is {1}), and the devices must be
// distinct and inside the cluster.
#ifndef BRAID_COSTMODEL_MACHINE_VIEW_H_
#define BRAID_COSTMODEL_MACHINE_VIEW_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/cost_model.h"

namespace braid::costmodel {

inline constexpr int kMaxViewDims = 3;

struct MachineView {
  int start = 0;
  std::vector<int> dims;
  std::vector<int> strides;

  bool operator==(const MachineView&) const = default;
};

// Product of the dims.
int64_t NumViewDevices(const MachineView& v);
// "0:[2,4]/[4,1]" (start:dims/strides).
std::string MachineViewString(const MachineView& v);

// InvalidArgument naming the violated rule: 1..kMaxViewDims dims, as many
// strides, dims and strides >= 1, start >= 0, every device < spec.num_ranks,
// no device used twice.
absl::Status ValidateMachineView(const MachineView& v, const ClusterSpec& spec);

// The device (rank) of every task, tasks in row-major order (the last
// dimension varies fastest). Validates first.
absl::StatusOr<std::vector<int>> ViewDevices(const MachineView& v, const ClusterSpec& spec);

// Every view of `num_devices` devices with 1..max_dims dimensions (rules
// above), ordered by number of dims, dims, strides, start. InvalidArgument
// for num_devices outside [1, num_ranks] or max_dims outside [1, 3];
// ResourceExhausted when there would be more than `max_views`.
absl::StatusOr<std::vector<MachineView>> EnumerateMachineViews(const ClusterSpec& spec,
                                                               int num_devices,
                                                               int max_dims = kMaxViewDims,
                                                               int max_views = 100000);

// The slowest kind of link the groups along one view dimension use.
enum class LinkLevel : uint8_t {
  kIntraNode,    // every group within one node (and one NVLink island)
  kCrossIsland,  // within a node, across NVLink islands (nvlink_islands only)
  kInterNode,    // some group spans nodes
};
std::string_view LinkLevelName(LinkLevel l);  // "intra_node", "cross_island", "inter_node"

// The link a view dimension's collectives run on: per-direction bandwidth
// each rank gets on the slowest hop, and its latency.
//   kIntraNode    intra.bandwidth, intra.latency_s
//   kCrossIsland  min(intra, cross-island) bandwidth, max of the latencies
//                 (as CommModel prices a group spanning islands)
//   kInterNode    nics_per_node * nic_bandwidth / k, network latency, where k
//                 is the most view devices on one node: the collectives of all
//                 the dimension's groups run at once and that node's ranks
//                 share its NICs (CommModel's hierarchical inter stage shares
//                 them the same way).
struct ViewDimLink {
  LinkLevel level = LinkLevel::kIntraNode;
  double bandwidth = 0;
  double latency_s = 0;
};

// InvalidArgument for an invalid view or dim out of range; FailedPrecondition
// for a dimension of size 1, which uses no link.
absl::StatusOr<ViewDimLink> ViewDimensionLink(const MachineView& v, const ClusterSpec& spec,
                                              int dim);

// The ring (nccl-tests) cost of one collective over `n` ranks all on `link`:
// the flat priors of costmodel/comm_model.h with B and a taken from the view
// dimension. 0 for n <= 1.
LinearCost RingCost(Collective c, int n, const ViewDimLink& link);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_MACHINE_VIEW_H_
