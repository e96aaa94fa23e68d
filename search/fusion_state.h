// The mutable form of a plan that the backtracking search (DisCo §4.5)
// mutates: every op is a node of the current "HLO module" (fused groups are
// one node), and the three optimization methods are cheap edits of it:
//
//  (i)   non-duplicate fusion: a random computation node absorbs a random
//        fusible predecessor node p; p's other successors now read the fused
//        node (DisCo Fig. 1(ii)). Rejected when it would close a cycle
//        (p -> x -> node through an outside x).
//  (ii)  duplicate fusion: the node absorbs a copy of p (marked duplicated);
//        p stays as the replica feeding p's other successors (Fig. 1(iii)).
//        When p has no other successor this is (i). Never creates a cycle.
//  (iii) AllReduce fusion: a random bucket merges with a neighbouring one.
//        Neighbours (DisCo §3.2): buckets holding a gradient produced by the
//        node producing one of the chosen bucket's gradients, or by a
//        predecessor or successor of that node; in addition, this
//        implementation counts the buckets just before and after in issue
//        order (= production order) as neighbours: in an unfused backward
//        graph the weight-gradient ops are rarely adjacent to each other, so
//        the structural rule alone would leave most buckets without one.
//
// Fusions (i) and (ii) are rejected (and redrawn by RandomApply) when the
// fused node would hold two library ops (costmodel::IsLibraryOp: a kernel
// holds at most one cuBLAS/cuDNN call, search/validity.h), or when the
// context's fusion backend cannot run the fused node as one kernel.
//
// The search keeps each state's buckets in production order.
//
//   SearchContext ctx(g);
//   FusionState s = FusionState::FromPlan(ctx, NoFusionPlan(g)).value();
//   std::mt19937_64 rng(1);
//   s.RandomApply(Method::kNonDuplicate, 5, rng);
//   Plan p = s.ToPlan();
#ifndef BRAID_SEARCH_FUSION_STATE_H_
#define BRAID_SEARCH_FUSION_STATE_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "costmodel/fusion_backend.h"
#include "graph/graph.h"
#include "search/plan.h"
#include "search/stop_token.h"

namespace braid::search {

enum class Method : uint8_t { kNonDuplicate, kDuplicate, kAllReduce };

// Per-graph facts the states share (immutable after construction, except the
// traversal scratch, which makes mutations single-threaded).
class SearchContext {
 public:
  // `backend` (may be null: structural rules only) decides which merged
  // nodes are kernels the device runs; it must outlive the context.
  explicit SearchContext(const graph::Graph& g,
                         const costmodel::FusionBackend* backend = nullptr);
  const costmodel::FusionBackend* backend() const { return backend_; }
  const graph::Graph& graph() const { return g_; }
  bool fusible(graph::OpId o) const { return fusible_[o] != 0; }
  bool is_graph_output(graph::TensorId t) const { return is_output_[t] != 0; }
  bool library(graph::OpId o) const { return library_[o] != 0; }

 private:
  friend class FusionState;
  const graph::Graph& g_;
  const costmodel::FusionBackend* backend_;
  std::vector<char> fusible_;
  std::vector<char> is_output_;
  std::vector<char> library_;
  // DFS scratch.
  mutable std::vector<uint32_t> stamp_;
  mutable uint32_t epoch_ = 0;
  mutable std::vector<int> stack_;
};

class FusionState {
 public:
  // Fails when the plan is invalid (ValidatePlan), or with
  // StopToken::ToStatus when `stop` fires while it is checked.
  static absl::StatusOr<FusionState> FromPlan(const SearchContext& ctx, const Plan& plan,
                                              const StopToken& stop = StopToken());

  // Canonical groups; buckets in the state's order.
  Plan ToPlan() const;
  // Replaces the bucket order (same buckets, e.g. sorted by production).
  void SetBuckets(const std::vector<Bucket>& buckets);

  // Applies `method` n times, each time at a random applicable place
  // (a failed draw, e.g. one that would close a cycle, is re-drawn, at most
  // kAttemptsPerApplication times per application). Returns how many
  // applications succeeded. A huge n with nothing left to apply ends soon:
  // at once, consuming no randomness, when nothing can be drawn (no fusible
  // node, fewer than two buckets), and after kMaxFailedApplications failed
  // applications in a row (then almost surely nothing applies; the search
  // asks for at most kMaxBeta, so this never changes its results). Returns
  // early, the state partly edited, when `stop` fires (polled before every
  // draw: a draw costs at most one graph traversal).
  int RandomApply(Method method, int n, std::mt19937_64& rng, const StopToken& stop = StopToken());
  static constexpr int kAttemptsPerApplication = 16;
  static constexpr int kMaxFailedApplications = 1000;

  // The deterministic edits behind the methods, by op: `consumer` and
  // `producer` name any op of the two nodes; `producer`'s node must be a
  // predecessor of `consumer`'s. InvalidArgument when not applicable (not
  // fusible, not a predecessor, would create a cycle).
  absl::Status FuseNonDuplicate(graph::OpId consumer, graph::OpId producer);
  absl::Status FuseDuplicate(graph::OpId consumer, graph::OpId producer);
  // Merges buckets a and b (indices in the current order): the merged bucket
  // takes the later position, the earlier bucket's gradients first.
  absl::Status MergeBuckets(int a, int b);
  // Bucket indices that are neighbours of bucket b (sorted).
  std::vector<int> NeighbourBuckets(int b) const;

  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Node {
    std::vector<graph::OpId> members;  // ops whose home this node is
    std::vector<graph::OpId> dups;     // duplicated copies computed inside
  };
  explicit FusionState(const SearchContext* ctx) : ctx_(ctx) {}

  bool Contains(int node, graph::OpId op) const;
  std::vector<int> PredNodes(int node) const;      // sorted, unique
  std::vector<int> SuccNodes(int node) const;      // sorted, unique
  bool NodeFusible(int node) const;
  bool Reaches(int from, int target) const;
  void MergeInto(int into, int from);              // non-duplicate
  // The ops of `from` that duplicate fusion copies into `into`.
  std::vector<graph::OpId> DuplicateCopy(int into, int from) const;
  void DuplicateInto(int into, const std::vector<graph::OpId>& copy);
  // Whether library ops a and b (kNoId = none) may share a kernel.
  static bool LibraryCompatible(graph::OpId a, graph::OpId b) {
    return a == graph::kNoId || b == graph::kNoId || a == b;
  }
  void RemoveLive(int node);
  // OK when the backend (if any) runs node `n` plus `extra` ops as one kernel.
  absl::Status BackendAccepts(int n, const std::vector<graph::OpId>& extra) const;
  absl::Status CheckFusionPair(graph::OpId consumer, graph::OpId producer, int* n, int* p) const;
  bool TryRandom(Method method, std::mt19937_64& rng);
  // Whether TryRandom has anything to draw from; when not, it fails without
  // using `rng`.
  bool CanDraw(Method method) const;

  const SearchContext* ctx_;
  std::vector<Node> nodes_;                // indexed by node id (= founding op id)
  std::vector<graph::OpId> library_of_;    // node -> its library op, kNoId
  std::vector<int> home_;                  // op -> node id
  std::vector<std::vector<int>> dup_in_;   // op -> nodes holding a duplicate
  std::vector<int> live_;                  // fusible live nodes (for sampling)
  std::vector<int> live_pos_;              // node -> index in live_, -1 if none
  std::vector<std::vector<graph::TensorId>> buckets_;
  std::vector<int> bucket_of_;             // tensor -> bucket index, -1
};

}  // namespace braid::search

#endif  // BRAID_SEARCH_FUSION_STATE_H_
