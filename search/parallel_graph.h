// One device's graph under a parallelization: what the fusion search and the
// simulator see of a parallel plan (Unity's PCG lowered to one task, with its
// parallel ops made explicit).
//
// BuildPerDeviceForward takes the forward graph and the per-op configs the
// parallelization pass chose (search/parallelize.h) and emits the forward ops
// one device runs, every tensor at its piece shape, with the layout changes
// between them as explicit ops:
//  - a transition that moves data (LayoutTransition + TransitionComm) becomes
//    one collective op per CollectiveStep (AllGather, ReduceScatter,
//    AllReduce, AllToAll, ...) with attrs `group_size` and `comm_time_s`, the
//    step's time on the links of the group it really uses
//    (ViewTransitionStepTime: model groups inside a node, data groups strided
//    across nodes), which the lowering takes instead of the contiguous-group
//    CommModel time;
//  - a Partition of copies is local slicing: a Slice op;
//  - a tensor already in the wanted layout is reused (one transition per
//    (tensor, layout), as Unity's fan-out Combine/Replicate is shared).
// An op with several outputs (Split's segments, Dropout's mask, training
// BatchNormalization's statistics, a replicated LSTM's states) emits each at
// its piece shape, with attributes restated for the piece (PieceAttrs: a
// segmented Split's sizes); consumers of output k read output k.
// Graph inputs are loaded in each consumer's layout (each device reads its
// piece of the batch); a parameter exists once, in its first consumer's
// layout. The graph output is brought to a layout split on dim 0 only (the
// data split), so the loss reads whole rows.
//
// A plan running strands side by side (parallelize.h) gets the program of
// its busiest device: that device's own strands at their group's degrees,
// no other group's, and per strand output it receives a piece of, one
// AllToAll op (fed by what it sends) carrying its share of the block's
// AllToAll time; a strand weight's gradient AllReduce stays among its
// group's devices (grad_devices, priced by CollectiveTimeOnDevices).
//
// The training-graph builder then adds backward ops, the adjoint collective
// of every forward one (AllGather <-> ReduceScatter, AllReduce <-> AllReduce,
// AllToAll <-> AllToAll; the same bytes, as the pass's backward_comm_factor
// 1 assumes) and the gradient AllReduces over the data group
// (each parameter's: its consumer's data degree). DataGroupCostModel prices those on
// the data part of the view, so a data group strided across nodes pays the
// NIC, not NVLink.
//
//   ParallelizeResult r = *ParallelizeForward(fwd, cluster, cm);
//   PerDeviceGraph pd = *BuildPerDeviceForward(fwd, cluster, r);
//   Graph train = *BuildPerDeviceTraining(pd, graph::Optimizer::kAdam);
//   DataGroupCostModel dcm(cm, cluster, pd.degree);
//   SearchResult s = *RunFusionSearch(train, dcm, cfg);   // joint with fusion
#ifndef BRAID_SEARCH_PARALLEL_GRAPH_H_
#define BRAID_SEARCH_PARALLEL_GRAPH_H_

#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "graph/graph.h"
#include "graph/training.h"
#include "search/parallelize.h"
#include "search/stop_token.h"

namespace braid::search {

struct PerDeviceGraph {
  graph::Graph forward{""};
  int degree = 1;        // devices
  int data_degree = 1;   // the largest gradient AllReduce group
  int model_degree = 1;  // degree / data_degree
  // Per parameter (by name): the group its gradient is all-reduced over,
  // its consumer's data degree (a plan may mix data degrees: DLRM's
  // embedding tables split over every device, its MLPs data parallel), or
  // the weight's copies where they are more (a replicated op's weights are
  // copied on every device, their gradients partial sums over all).
  std::map<std::string, int> grad_group;
  // Per parameter of a strand run side by side: the devices of its group
  // (its gradient's AllReduce stays among them); absent: all `degree`.
  std::map<std::string, int> grad_devices;
  bool mixed_data_degrees = false;
  int collectives = 0;   // forward collective ops inserted
  int slices = 0;        // forward local Slice ops inserted
  double forward_comm_s = 0;  // their comm_time_s, summed
};

// InvalidArgument when `r` has no config for an op of `forward`; errors of
// LayoutTransition otherwise; StopToken::ToStatus once `stop` fires (polled
// every few hundred ops).
absl::StatusOr<PerDeviceGraph> BuildPerDeviceForward(const graph::Graph& forward,
                                                     const costmodel::ClusterSpec& cluster,
                                                     const ParallelizeResult& r,
                                                     const StopToken& stop = StopToken());

// The training graph of a per-device graph: BuildTrainingGraph, then every
// gradient AllReduce's group_size set to its parameter's grad_group.
absl::StatusOr<graph::Graph> BuildPerDeviceTraining(const PerDeviceGraph& pd,
                                                    graph::Optimizer optimizer);

// A cost model for a per-device graph: compute from `base`; collectives (the
// gradient buckets: the forward ones carry comm_time_s) over a group of g
// ranks priced on the data part of the [g, degree / g] view of `cluster`.
class DataGroupCostModel final : public costmodel::CostModel {
 public:
  DataGroupCostModel(costmodel::CostModel& base, costmodel::ClusterSpec cluster, int degree)
      : base_(base), cluster_(std::move(cluster)), degree_(degree) {}

  using CostModel::ComputeTime;
  costmodel::OpTime ComputeTime(const graph::Graph& g,
                                std::span<const graph::OpId> ops) override {
    return base_.ComputeTime(g, ops);
  }
  double CollectiveTime(costmodel::Collective c, int64_t bytes, int group_size) override;
  // On the data part of the [g, devices / g] view: a strand's group.
  double CollectiveTimeOnDevices(costmodel::Collective c, int64_t bytes, int group_size,
                                 int devices) override;
  double ComputeSlowdownDuringComm() const override { return base_.ComputeSlowdownDuringComm(); }
  double CommSlowdownDuringCompute() const override { return base_.CommSlowdownDuringCompute(); }
  double BucketPackTime(int64_t bytes) const override { return base_.BucketPackTime(bytes); }
  const costmodel::FusionBackend* fusion_backend() const override {
    return base_.fusion_backend();
  }
  bool PrefetchesFused() const override { return base_.PrefetchesFused(); }
  void PrefetchFused(const graph::Graph& g,
                     std::span<const std::vector<graph::OpId>> groups) override {
    base_.PrefetchFused(g, groups);
  }
  std::string Generation() const override { return base_.Generation(); }

 private:
  costmodel::CostModel& base_;
  costmodel::ClusterSpec cluster_;
  int degree_;
};

}  // namespace braid::search

#endif  // BRAID_SEARCH_PARALLEL_GRAPH_H_
