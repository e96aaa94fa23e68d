// A fusion plan for one training graph: which compute ops run fused into one
// kernel (op fusion, DisCo §2.2) and which gradients share one AllReduce
// (tensor fusion, DisCo §2.3). The search (search/backtracking.h) and the
// baselines (search/baselines.h) produce plans; search/lowering.h turns a plan
// into the simulator's task graph; search/validity.h checks one.
//
// Semantics:
//  - A FusionGroup is a connected set of fusible compute ops run as one kernel.
//    An op listed in `ops` but not in `duplicated` has the group as its home:
//    ops outside the group that read its outputs wait for the whole group
//    (non-duplicate fusion, DisCo Fig. 1(ii)).
//  - An op listed in `duplicated` is recomputed inside the group for the
//    group's own members, and its home stays elsewhere: a standalone replica
//    (when no group holds it as a non-duplicated member) or another group.
//    Outside consumers read the home's output, so it is available early
//    (duplicate fusion, DisCo Fig. 1(iii)). A standalone replica nobody reads
//    is dead and not executed (XLA removes producers fused into every user).
//  - Ops in no group run unfused.
//  - `buckets` partition the graph's gradient tensors; each bucket is one
//    AllReduce over the concatenated gradients, issued on the communication
//    channel strictly in bucket order (PyTorch DDP issues buckets in index
//    order; the search keeps buckets in gradient production order).
//
//   Plan p;
//   p.groups.push_back({.ops = {relu, add}, .duplicated = {}});
//   p.buckets.push_back({.grads = {w1_grad, w2_grad}});
//   std::string json = PlanToJson(g, p).dump();
//   absl::StatusOr<Plan> back = PlanFromJson(g, nlohmann::json::parse(json));
#ifndef BRAID_SEARCH_PLAN_H_
#define BRAID_SEARCH_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "nlohmann/json.hpp"

namespace braid::search {

struct FusionGroup {
  std::vector<graph::OpId> ops;         // members (including duplicated ones)
  std::vector<graph::OpId> duplicated;  // subset of ops: recomputed inside only

  bool operator==(const FusionGroup&) const = default;
};

struct Bucket {
  std::vector<graph::TensorId> grads;  // kGradient tensors, in buffer order

  bool operator==(const Bucket&) const = default;
};

struct Plan {
  std::vector<FusionGroup> groups;
  std::vector<Bucket> buckets;  // issue order

  bool operator==(const Plan&) const = default;
};

// The plan with no op fusion and one bucket per gradient, buckets ordered by
// the graph's topological order of the gradients' AllReduce ops (the order the
// training-graph builder emits gradients in).
Plan NoFusionPlan(const graph::Graph& g);

// Canonical form: members and duplicated lists sorted ascending, groups of a
// single non-duplicated op dropped (they are unfused ops), groups sorted by
// their smallest member. Bucket contents and order are kept: they are
// meaningful.
Plan Canonicalize(const Plan& p);

// 64-bit fingerprint of Canonicalize(p) (xxHash3). Equal plans give equal
// fingerprints in every process.
uint64_t PlanFingerprint(const Plan& p);

// JSON by op and tensor NAMES, so a plan is stable across processes:
//   {"format": "braid.plan.v1",
//    "groups": [{"ops": ["relu1", "add1"], "duplicated": []}],
//    "buckets": [["fc.weight.grad", "fc.bias.grad"]]}
nlohmann::json PlanToJson(const graph::Graph& g, const Plan& p);
// Resolves names against `g`. InvalidArgument naming the unknown op/tensor or
// the malformed field. Does not run ValidatePlan.
absl::StatusOr<Plan> PlanFromJson(const graph::Graph& g, const nlohmann::json& j);

// The buckets by gradient tensor name, in issue order (LoweringOptions::
// gradient_buckets).
std::vector<std::vector<std::string>> BucketNames(const graph::Graph& g, const Plan& p);

// The op fusion groups by op name, leaving out groups with duplicated
// (recomputed) members, which a per-device program does not repeat
// (LoweringOptions::fusion_groups).
std::vector<std::vector<std::string>> GroupNames(const graph::Graph& g, const Plan& p);

// Human-readable one-line summary: "12 groups (3 duplicated ops), 5 buckets".
std::string PlanSummary(const Plan& p);

}  // namespace braid::search

#endif  // BRAID_SEARCH_PLAN_H_
