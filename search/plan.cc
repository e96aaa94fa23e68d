#include "search/plan.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "xxhash.h"

namespace braid::search {

using graph::Graph;
using graph::OpId;
using graph::TensorId;
using graph::TensorRole;

Plan NoFusionPlan(const Graph& g) {
  Plan p;
  std::vector<TensorId> grads;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).role == TensorRole::kGradient) grads.push_back(t);
  }
  // Order by the topological position of the producer (ties: tensor id).
  absl::StatusOr<std::vector<OpId>> topo = g.TopologicalOrder();
  std::vector<int> pos(g.num_ops(), 0);
  if (topo.ok()) {
    for (size_t i = 0; i < topo->size(); ++i) pos[(*topo)[i]] = static_cast<int>(i);
  } else {
    for (OpId o = 0; o < g.num_ops(); ++o) pos[o] = o;
  }
  auto key = [&](TensorId t) {
    OpId prod = g.tensor(t).producer;
    return std::make_pair(prod == graph::kNoId ? -1 : pos[prod], t);
  };
  std::stable_sort(grads.begin(), grads.end(),
                   [&](TensorId a, TensorId b) { return key(a) < key(b); });
  for (TensorId t : grads) p.buckets.push_back(Bucket{{t}});
  return p;
}

Plan Canonicalize(const Plan& p) {
  Plan c;
  for (const FusionGroup& grp : p.groups) {
    FusionGroup n = grp;
    std::sort(n.ops.begin(), n.ops.end());
    n.ops.erase(std::unique(n.ops.begin(), n.ops.end()), n.ops.end());
    std::sort(n.duplicated.begin(), n.duplicated.end());
    n.duplicated.erase(std::unique(n.duplicated.begin(), n.duplicated.end()),
                       n.duplicated.end());
    if (n.ops.empty()) continue;
    if (n.ops.size() == 1 && n.duplicated.empty()) continue;
    c.groups.push_back(std::move(n));
  }
  std::sort(c.groups.begin(), c.groups.end(),
            [](const FusionGroup& a, const FusionGroup& b) { return a.ops < b.ops; });
  c.buckets = p.buckets;
  return c;
}

uint64_t PlanFingerprint(const Plan& p) {
  Plan c = Canonicalize(p);
  std::vector<int32_t> buf;
  buf.push_back(static_cast<int32_t>(c.groups.size()));
  for (const FusionGroup& g : c.groups) {
    buf.push_back(static_cast<int32_t>(g.ops.size()));
    buf.insert(buf.end(), g.ops.begin(), g.ops.end());
    buf.push_back(static_cast<int32_t>(g.duplicated.size()));
    buf.insert(buf.end(), g.duplicated.begin(), g.duplicated.end());
  }
  buf.push_back(static_cast<int32_t>(c.buckets.size()));
  for (const Bucket& b : c.buckets) {
    buf.push_back(static_cast<int32_t>(b.grads.size()));
    buf.insert(buf.end(), b.grads.begin(), b.grads.end());
  }
  return XXH3_64bits(buf.data(), buf.size() * sizeof(int32_t));
}

std::vector<std::vector<std::string>> GroupNames(const graph::Graph& g, const Plan& p) {
  std::vector<std::vector<std::string>> out;
  for (const FusionGroup& grp : p.groups) {
    if (!grp.duplicated.empty() || grp.ops.size() < 2) continue;
    std::vector<std::string>& names = out.emplace_back();
    for (graph::OpId op : grp.ops) names.push_back(g.op(op).name);
  }
  return out;
}

std::vector<std::vector<std::string>> BucketNames(const graph::Graph& g, const Plan& p) {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : p.buckets) {
    std::vector<std::string>& names = out.emplace_back();
    for (graph::TensorId t : b.grads) names.push_back(g.tensor(t).name);
  }
  return out;
}

nlohmann::json PlanToJson(const Graph& g, const Plan& p) {
  nlohmann::json j;
  j["format"] = "braid.plan.v1";
  nlohmann::json groups = nlohmann::json::array();
  for (const FusionGroup& grp : p.groups) {
    nlohmann::json ops = nlohmann::json::array();
    for (OpId o : grp.ops) ops.push_back(g.op(o).name);
    nlohmann::json dup = nlohmann::json::array();
    for (OpId o : grp.duplicated) dup.push_back(g.op(o).name);
    groups.push_back({{"ops", ops}, {"duplicated", dup}});
  }
  j["groups"] = groups;
  nlohmann::json buckets = nlohmann::json::array();
  for (const Bucket& b : p.buckets) {
    nlohmann::json names = nlohmann::json::array();
    for (TensorId t : b.grads) names.push_back(g.tensor(t).name);
    buckets.push_back(names);
  }
  j["buckets"] = buckets;
  return j;
}

namespace {

absl::StatusOr<std::vector<OpId>> ResolveOps(const std::map<std::string, OpId, std::less<>>& index,
                                             const nlohmann::json& names,
                                             const std::string& where) {
  if (!names.is_array()) return absl::InvalidArgumentError(absl::StrCat(where, " is not an array"));
  std::vector<OpId> out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!names[i].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "[", i, "] is not a string"));
    }
    const std::string name = names[i].get<std::string>();
    auto it = index.find(name);
    if (it == index.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "[", i, "]: no op named '", name, "' in the graph"));
    }
    out.push_back(it->second);
  }
  return out;
}

}  // namespace

absl::StatusOr<Plan> PlanFromJson(const Graph& g, const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("plan JSON is not an object");
  if (j.contains("format") && j["format"] != "braid.plan.v1") {
    return absl::InvalidArgumentError(
        absl::StrCat("plan JSON: unsupported format ", j["format"].dump()));
  }
  std::map<std::string, OpId, std::less<>> op_index;
  for (OpId o = 0; o < g.num_ops(); ++o) op_index.emplace(g.op(o).name, o);

  Plan p;
  if (j.contains("groups")) {
    const nlohmann::json& groups = j["groups"];
    if (!groups.is_array()) return absl::InvalidArgumentError("plan JSON: 'groups' is not an array");
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const nlohmann::json& grp = groups[gi];
      const std::string where = absl::StrCat("groups[", gi, "]");
      if (!grp.is_object() || !grp.contains("ops")) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object with 'ops'"));
      }
      FusionGroup fg;
      ASSIGN_OR_RETURN(std::vector<OpId> ops, ResolveOps(op_index, grp["ops"], where + ".ops"));
      fg.ops = std::move(ops);
      if (grp.contains("duplicated")) {
        ASSIGN_OR_RETURN(std::vector<OpId> dup,
                         ResolveOps(op_index, grp["duplicated"], where + ".duplicated"));
        fg.duplicated = std::move(dup);
      }
      p.groups.push_back(std::move(fg));
    }
  }
  if (j.contains("buckets")) {
    const nlohmann::json& buckets = j["buckets"];
    if (!buckets.is_array()) return absl::InvalidArgumentError("plan JSON: 'buckets' is not an array");
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
      const nlohmann::json& b = buckets[bi];
      if (!b.is_array()) {
        return absl::InvalidArgumentError(absl::StrCat("buckets[", bi, "] is not an array"));
      }
      Bucket bucket;
      for (size_t k = 0; k < b.size(); ++k) {
        if (!b[k].is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("buckets[", bi, "][", k, "] is not a string"));
        }
        const std::string name = b[k].get<std::string>();
        absl::StatusOr<TensorId> t = g.FindTensor(name);
        if (!t.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("buckets[", bi, "][", k,
                                                         "]: no tensor named '", name,
                                                         "' in the graph"));
        }
        bucket.grads.push_back(*t);
      }
      p.buckets.push_back(std::move(bucket));
    }
  }
  return p;
}

std::string PlanSummary(const Plan& p) {
  size_t fused_ops = 0, dups = 0;
  for (const FusionGroup& g : p.groups) {
    fused_ops += g.ops.size();
    dups += g.duplicated.size();
  }
  size_t grads = 0;
  for (const Bucket& b : p.buckets) grads += b.grads.size();
  return absl::StrCat(p.groups.size(), " groups (", fused_ops, " ops, ", dups,
                      " duplicated), ", p.buckets.size(), " buckets (", grads, " gradients)");
}

}  // namespace braid::search
