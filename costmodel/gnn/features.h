// What the fused-op estimator sees of a fused group (DisCo §4.3.1): one row
// of numbers per member op, the data edges between members, and a few
// group-level numbers. This part is LibTorch-free; gnn_model.h turns a batch
// of FeatureGraphs into padded tensors.
//
//   OpVocabulary vocab = OpVocabulary::Build({"Conv", "Relu", "Add"});
//   std::vector<MemberTime> t = MemberTimes(model, g, ops);  // profile or roofline
//   FeatureGraph f = ExtractFeatures(g, ops, t, vocab);
//
// Every feature is a function of what FusedSignature(g, ops) encodes (types,
// shapes, dtypes, attributes, member-local edges, which outputs leave) plus
// the members' single-op times, so the estimator can cache predictions by
// signature.
#ifndef BRAID_COSTMODEL_GNN_FEATURES_H_
#define BRAID_COSTMODEL_GNN_FEATURES_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "costmodel/op_cost.h"
#include "graph/graph.h"

namespace braid::costmodel::gnn {

// Node features, in this order (raw values; the model normalizes them with
// the training set's mean and standard deviation):
//   log(1+input bytes), log(1+output bytes), log(1+FLOPs),
//   log(single-op seconds), measured (1) or roofline (0),
//   log2(1+d) of the first output's shape right-aligned to rank 4 (leading
//   dims beyond 4 folded into the first), the same for inputs 0 and 1,
//   inputs produced outside the group, whether an output leaves the group,
//   one-hot of the op category (graph::OpCategory; known even for op types
//   the vocabulary lacks).
// The op type itself is a vocabulary index (FeatureGraph::type_ids) that the
// model embeds.
inline constexpr int kNumCategories = 15;  // graph::OpCategory::kOpaque + 1
inline constexpr int kNodeFeatures = 19 + kNumCategories;
// Group features: log(sum of member seconds), log(1+boundary bytes), members.
inline constexpr int kGroupFeatures = 3;
// Names the features above and the target; stored in checkpoints, which a
// different schema refuses.
inline constexpr char kFeatureSchema[] =
    "v1:optype_embed,log_in_bytes,log_out_bytes,log_flops,log_member_s,measured,"
    "out_shape4,in0_shape4,in1_shape4,ext_inputs,leaves,category15"
    "|group:log_sum_member_s,log_boundary_bytes,members"
    "|adj:data_edges_symmetric+self|target:log(fused_s/sum_member_s)";

// Op type -> embedding index; 0 is "unknown" (types not seen in training).
class OpVocabulary {
 public:
  // Index 1.. in sorted order of the distinct names (deterministic).
  static OpVocabulary Build(std::vector<std::string> types);
  int Index(const std::string& type) const;
  int size() const { return static_cast<int>(names_.size()) + 1; }  // with "unknown"
  const std::vector<std::string>& names() const { return names_; }  // index i+1

 private:
  std::vector<std::string> names_;
  absl::flat_hash_map<std::string, int> index_;
};

// One member's single-op time and whether it was measured.
struct MemberTime {
  double seconds = 0;
  bool measured = false;
};

// The members' single-op times from a cost model without estimator
// (ComputeTime(g, {op}): a profile when the store has one, else the
// roofline), in the order of `ops` sorted and deduplicated.
std::vector<MemberTime> MemberTimes(ClusterCostModel& model, const graph::Graph& g,
                                    std::span<const graph::OpId> ops);

struct FeatureGraph {
  int num_nodes = 0;
  std::vector<int32_t> type_ids;  // [num_nodes]
  std::vector<float> nodes;       // [num_nodes * kNodeFeatures], raw
  std::vector<uint8_t> adj;       // [num_nodes * num_nodes], symmetric, self loops
  std::array<float, kGroupFeatures> group{};
  double log_sum_member_s = 0;  // the base the model's log ratio is added to
};

// The features of the group `ops` of `g` (sorted and deduplicated: node i is
// the i-th smallest op id). `times` has one entry per node.
FeatureGraph ExtractFeatures(const graph::Graph& g, std::span<const graph::OpId> ops,
                             std::span<const MemberTime> times, const OpVocabulary& vocab);

// Mean and standard deviation of each feature over a training set (nodes
// over all nodes, group over all groups); a constant feature gets std 1.
struct FeatureStats {
  std::vector<float> node_mean, node_std;    // kNodeFeatures
  std::vector<float> group_mean, group_std;  // kGroupFeatures
};
FeatureStats ComputeStats(std::span<const FeatureGraph> graphs);

// The ops sorted and deduplicated (the order FusedSignature and the
// features use).
std::vector<graph::OpId> SortedGroup(std::span<const graph::OpId> ops);

// A 128-bit hash of exactly what FusedSignature(g, members) spells out
// (member types, input and output dtypes and shapes, attributes, member-local
// edges, which outputs leave), computed without building the string: about
// ten times faster, which is what makes an estimator cache hit cheap. Equal
// signatures give equal keys; different ones collide with probability
// ~2^-128. `members` must be sorted and deduplicated (SortedGroup).
struct GroupKey {
  uint64_t lo = 0, hi = 0;
  bool operator==(const GroupKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const GroupKey& k) {
    return H::combine(std::move(h), k.lo, k.hi);
  }
};
GroupKey StructuralKey(const graph::Graph& g, std::span<const graph::OpId> members);

}  // namespace braid::costmodel::gnn

#endif  // BRAID_COSTMODEL_GNN_FEATURES_H_
