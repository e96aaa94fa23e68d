#include "search/machine_mapping.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace braid::search {

using costmodel::MachineView;

int MachineMappingProblem::AddLeaf(int op_id) {
  nodes.push_back({.kind = SpNode::Kind::kLeaf, .op = op_id});
  return static_cast<int>(nodes.size()) - 1;
}

int MachineMappingProblem::AddSeries(int left, int right, std::vector<BoundaryTensor> crossing) {
  nodes.push_back({.kind = SpNode::Kind::kSeries,
                   .left = left,
                   .right = right,
                   .crossing = std::move(crossing)});
  return static_cast<int>(nodes.size()) - 1;
}

int MachineMappingProblem::AddParallel(int left, int right) {
  nodes.push_back({.kind = SpNode::Kind::kParallel, .left = left, .right = right});
  return static_cast<int>(nodes.size()) - 1;
}

const MachineMappingCache::Entry* MachineMappingCache::Find(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  return &it->second;
}

void MachineMappingCache::Insert(const std::string& key, Entry entry) {
  entries_.insert_or_assign(key, std::move(entry));
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Range {
  int start = 0;
  int count = 0;
};

// Devices of a view, computed directly (no cluster needed).
std::vector<int> Devices(const MachineView& v) {
  std::vector<int> out = {v.start};
  for (size_t d = 0; d < v.dims.size(); ++d) {
    std::vector<int> next;
    for (int base : out)
      for (int i = 0; i < v.dims[d]; ++i) next.push_back(base + i * v.strides[d]);
    out = std::move(next);
  }
  return out;
}

bool ViewInRange(const MachineView& v, Range r) {
  if (v.dims.size() != v.strides.size() || v.dims.empty()) return false;
  for (int dev : Devices(v))
    if (dev < r.start || dev >= r.start + r.count) return false;
  return true;
}

std::string PlacementKey(int op, const OpPlacement& p) {
  return absl::StrCat(op, ":", p.config, "@", costmodel::MachineViewString(p.view));
}

using Fixed = std::map<int, OpPlacement>;  // op id -> placement fixed by a series split

// Checks the tree shape and collects, per node, the op ids below it and a
// structural fingerprint (the subtree part of the memo key).
class TreeInfo {
 public:
  absl::Status Init(const MachineMappingProblem& p) {
    if (p.resources.num_devices < 1)
      return absl::InvalidArgumentError("machine mapping: num_devices must be >= 1");
    for (size_t i = 0; i < p.ops.size(); ++i) {
      if (!op_index_.emplace(p.ops[i].id, static_cast<int>(i)).second)
        return absl::InvalidArgumentError(absl::StrCat("machine mapping: duplicate op id ", p.ops[i].id));
      for (const OpConfig& c : p.ops[i].configs)
        if (c.num_devices < 1)
          return absl::InvalidArgumentError(absl::StrCat("machine mapping: op ", p.ops[i].id,
                                                         " config '", c.name, "' has < 1 device"));
    }
    if (p.root < 0 || p.root >= static_cast<int>(p.nodes.size()))
      return absl::InvalidArgumentError("machine mapping: root is not a node");
    ops_below_.resize(p.nodes.size());
    fingerprint_.resize(p.nodes.size());
    visited_.assign(p.nodes.size(), false);
    absl::Status s = Visit(p, p.root);
    if (!s.ok()) return s;
    if (ops_below_[p.root].size() != p.ops.size())
      return absl::InvalidArgumentError("machine mapping: some op has no leaf in the tree");
    return absl::OkStatus();
  }

  const MappedOp& Op(const MachineMappingProblem& p, int id) const {
    return p.ops[op_index_.at(id)];
  }
  bool HasOp(int id) const { return op_index_.contains(id); }
  const std::set<int>& OpsBelow(int node) const { return ops_below_[node]; }
  const std::string& Fingerprint(int node) const { return fingerprint_[node]; }

 private:
  absl::Status Visit(const MachineMappingProblem& p, int n) {
    if (n < 0 || n >= static_cast<int>(p.nodes.size()))
      return absl::InvalidArgumentError(absl::StrCat("machine mapping: bad node index ", n));
    if (visited_[n])
      return absl::InvalidArgumentError(absl::StrCat("machine mapping: node ", n, " used twice"));
    visited_[n] = true;
    const SpNode& node = p.nodes[n];
    if (node.kind == SpNode::Kind::kLeaf) {
      if (!op_index_.contains(node.op))
        return absl::InvalidArgumentError(absl::StrCat("machine mapping: leaf of unknown op ", node.op));
      if (!leaf_ops_.insert(node.op).second)
        return absl::InvalidArgumentError(absl::StrCat("machine mapping: op ", node.op, " in two leaves"));
      ops_below_[n] = {node.op};
      fingerprint_[n] = absl::StrCat("L", node.op);
      return absl::OkStatus();
    }
    for (int child : {node.left, node.right}) {
      absl::Status s = Visit(p, child);
      if (!s.ok()) return s;
    }
    ops_below_[n] = ops_below_[node.left];
    ops_below_[n].insert(ops_below_[node.right].begin(), ops_below_[node.right].end());
    if (node.kind == SpNode::Kind::kParallel) {
      fingerprint_[n] = absl::StrCat("P(", fingerprint_[node.left], ",", fingerprint_[node.right], ")");
      return absl::OkStatus();
    }
    std::string tensors;
    for (const BoundaryTensor& t : node.crossing) {
      if (!ops_below_[node.left].contains(t.producer_op) ||
          !ops_below_[node.right].contains(t.consumer_op))
        return absl::InvalidArgumentError(
            absl::StrCat("machine mapping: crossing tensor ", t.producer_op, "->", t.consumer_op,
                         " of node ", n, " does not go from its left to its right side"));
      absl::StrAppend(&tensors, ";", t.producer_op, ">", t.consumer_op, ":", t.bytes);
    }
    fingerprint_[n] = absl::StrCat("S(", fingerprint_[node.left], ",", fingerprint_[node.right],
                                   tensors, ")");
    return absl::OkStatus();
  }

  absl::flat_hash_map<int, int> op_index_;
  std::vector<std::set<int>> ops_below_;
  std::vector<std::string> fingerprint_;
  std::vector<bool> visited_;
  std::set<int> leaf_ops_;
};

using Entry = MachineMappingCache::Entry;

class Solver {
 public:
  Solver(const MachineMappingProblem& p, const TreeInfo& info, MachineMappingCostModel& model,
         MachineMappingCache& cache, int64_t max_boundary)
      : p_(p), info_(info), model_(model), cache_(cache), max_boundary_(max_boundary) {
    resource_tag_ = p.resources.cluster
                        ? absl::StrCat(costmodel::ClusterFingerprint(*p.resources.cluster), "/",
                                       p.resources.max_view_dims)
                        : "1d";
  }

  absl::StatusOr<Entry> Solve(int n, Range r, const Fixed& fixed_all) {
    Fixed fixed = Restrict(fixed_all, n);
    std::string key = absl::StrCat(resource_tag_, "|", info_.Fingerprint(n), "|", r.start, "+",
                                   r.count);
    for (const auto& [op, pl] : fixed) absl::StrAppend(&key, "|", PlacementKey(op, pl));
    if (const Entry* e = cache_.Find(key)) return *e;
    absl::StatusOr<Entry> e;
    const SpNode& node = p_.nodes[n];
    switch (node.kind) {
      case SpNode::Kind::kLeaf: e = SolveLeaf(node, r, fixed); break;
      case SpNode::Kind::kSeries: e = SolveSeries(node, r, fixed); break;
      case SpNode::Kind::kParallel: e = SolveParallel(node, r, fixed); break;
    }
    if (e.ok()) cache_.Insert(key, *e);
    return e;
  }

 private:
  Fixed Restrict(const Fixed& fixed, int n) const {
    Fixed out;
    for (const auto& [op, pl] : fixed)
      if (info_.OpsBelow(n).contains(op)) out.emplace(op, pl);
    return out;
  }

  // Every (config, view) of `op` inside `r`, or just its fixed placement.
  absl::StatusOr<std::vector<OpPlacement>> Choices(const MappedOp& op, Range r, const Fixed& fixed) {
    std::vector<OpPlacement> out;
    if (auto it = fixed.find(op.id); it != fixed.end()) {
      const OpPlacement& pl = it->second;
      if (ViewInRange(pl.view, r) && pl.config >= 0 &&
          pl.config < static_cast<int>(op.configs.size()) &&
          costmodel::NumViewDevices(pl.view) == op.configs[pl.config].num_devices)
        out.push_back(pl);
      return out;
    }
    for (int c = 0; c < static_cast<int>(op.configs.size()); ++c) {
      absl::StatusOr<std::vector<MachineView>> views =
          CandidateViews(p_.resources, op.configs[c], r.start, r.count);
      if (!views.ok()) return views.status();
      for (MachineView& v : *views) out.push_back({.config = c, .view = std::move(v)});
    }
    return out;
  }

  absl::StatusOr<Entry> SolveLeaf(const SpNode& node, Range r, const Fixed& fixed) {
    const MappedOp& op = info_.Op(p_, node.op);
    absl::StatusOr<std::vector<OpPlacement>> choices = Choices(op, r, fixed);
    if (!choices.ok()) return choices.status();
    Entry best;
    best.result.cost = kInf;
    for (const OpPlacement& pl : *choices) {
      absl::StatusOr<double> c = model_.OpCost(op, op.configs[pl.config], pl.view);
      if (!c.ok()) return c.status();
      if (std::isfinite(*c) && *c < best.result.cost) {
        best.feasible = true;
        best.result.cost = *c;
        best.result.placements = {{op.id, pl}};
      }
    }
    return best;
  }

  absl::StatusOr<Entry> SolveSeries(const SpNode& node, Range r, const Fixed& fixed) {
    // The ops at the boundary; their placements are enumerated here and fixed
    // for the two sub-problems.
    std::vector<int> boundary;
    for (const BoundaryTensor& t : node.crossing)
      for (int op : {t.producer_op, t.consumer_op})
        if (std::find(boundary.begin(), boundary.end(), op) == boundary.end()) boundary.push_back(op);
    std::vector<std::vector<OpPlacement>> choices;
    int64_t combos = 1;
    for (int op : boundary) {
      absl::StatusOr<std::vector<OpPlacement>> c = Choices(info_.Op(p_, op), r, fixed);
      if (!c.ok()) return c.status();
      combos *= static_cast<int64_t>(c->size());
      if (combos > max_boundary_)
        return absl::ResourceExhaustedError(absl::StrCat(
            "machine mapping: series split with more than ", max_boundary_, " boundary placements"));
      choices.push_back(std::move(*c));
    }
    Entry best;
    best.result.cost = kInf;
    std::vector<size_t> idx(boundary.size(), 0);
    for (int64_t k = 0; k < combos; ++k) {
      Fixed inner = fixed;
      for (size_t b = 0; b < boundary.size(); ++b) inner[boundary[b]] = choices[b][idx[b]];
      absl::StatusOr<Entry> combo = SeriesWith(node, r, inner);
      if (!combo.ok()) return combo.status();
      if (combo->feasible && combo->result.cost < best.result.cost) best = std::move(*combo);
      for (size_t b = 0; b < idx.size() && ++idx[b] == choices[b].size(); ++b) idx[b] = 0;
    }
    return best;
  }

  absl::StatusOr<Entry> SeriesWith(const SpNode& node, Range r, const Fixed& inner) {
    Entry out;
    absl::StatusOr<Entry> l = Solve(node.left, r, inner);
    if (!l.ok()) return l.status();
    if (!l->feasible) return out;
    absl::StatusOr<Entry> rt = Solve(node.right, r, inner);
    if (!rt.ok()) return rt.status();
    if (!rt->feasible) return out;
    double move = 0;
    for (const BoundaryTensor& t : node.crossing) {
      absl::StatusOr<double> m =
          model_.MovementCost(t, info_.Op(p_, t.producer_op), inner.at(t.producer_op),
                              info_.Op(p_, t.consumer_op), inner.at(t.consumer_op));
      if (!m.ok()) return m.status();
      move += *m;
    }
    if (!std::isfinite(move)) return out;
    out.feasible = true;
    out.result.cost = l->result.cost + move + rt->result.cost;
    out.result.placements = l->result.placements;
    out.result.placements.insert(rt->result.placements.begin(), rt->result.placements.end());
    return out;
  }

  absl::StatusOr<Entry> SolveParallel(const SpNode& node, Range r, const Fixed& fixed) {
    Entry best;
    best.result.cost = kInf;
    auto consider = [&](Range a, Range b, bool concurrent) -> absl::Status {
      absl::StatusOr<Entry> l = Solve(node.left, a, fixed);
      if (!l.ok()) return l.status();
      if (!l->feasible) return absl::OkStatus();
      absl::StatusOr<Entry> rt = Solve(node.right, b, fixed);
      if (!rt.ok()) return rt.status();
      if (!rt->feasible) return absl::OkStatus();
      double c = concurrent ? std::max(l->result.cost, rt->result.cost)
                            : l->result.cost + rt->result.cost;
      if (c < best.result.cost) {
        best.feasible = true;
        best.result.cost = c;
        best.result.placements = l->result.placements;
        best.result.placements.insert(rt->result.placements.begin(), rt->result.placements.end());
      }
      return absl::OkStatus();
    };
    absl::Status s = consider(r, r, /*concurrent=*/false);
    for (int k = 1; s.ok() && k < r.count; ++k) {
      Range lo = {r.start, k}, hi = {r.start + k, r.count - k};
      s = consider(lo, hi, true);
      if (s.ok()) s = consider(hi, lo, true);
    }
    if (!s.ok()) return s;
    return best;
  }

  const MachineMappingProblem& p_;
  const TreeInfo& info_;
  MachineMappingCostModel& model_;
  MachineMappingCache& cache_;
  int64_t max_boundary_;
  std::string resource_tag_;
};

struct Evaluated {
  double cost = 0;
  std::set<int> devices;
};

absl::StatusOr<Evaluated> Eval(const MachineMappingProblem& p, const TreeInfo& info,
                               MachineMappingCostModel& model, const Fixed& pl, int n) {
  const SpNode& node = p.nodes[n];
  if (node.kind == SpNode::Kind::kLeaf) {
    auto it = pl.find(node.op);
    if (it == pl.end())
      return absl::InvalidArgumentError(absl::StrCat("machine mapping: op ", node.op, " not placed"));
    const MappedOp& op = info.Op(p, node.op);
    if (it->second.config < 0 || it->second.config >= static_cast<int>(op.configs.size()))
      return absl::InvalidArgumentError(absl::StrCat("machine mapping: op ", node.op, " bad config"));
    absl::StatusOr<double> c = model.OpCost(op, op.configs[it->second.config], it->second.view);
    if (!c.ok()) return c.status();
    std::vector<int> devs = Devices(it->second.view);
    return Evaluated{*c, std::set<int>(devs.begin(), devs.end())};
  }
  absl::StatusOr<Evaluated> l = Eval(p, info, model, pl, node.left);
  if (!l.ok()) return l;
  absl::StatusOr<Evaluated> r = Eval(p, info, model, pl, node.right);
  if (!r.ok()) return r;
  Evaluated out;
  out.devices = l->devices;
  out.devices.insert(r->devices.begin(), r->devices.end());
  if (node.kind == SpNode::Kind::kParallel) {
    bool separable = *l->devices.rbegin() < *r->devices.begin() ||
                     *r->devices.rbegin() < *l->devices.begin();
    out.cost = separable ? std::max(l->cost, r->cost) : l->cost + r->cost;
    return out;
  }
  out.cost = l->cost + r->cost;
  for (const BoundaryTensor& t : node.crossing) {
    absl::StatusOr<double> m = model.MovementCost(t, info.Op(p, t.producer_op), pl.at(t.producer_op),
                                                  info.Op(p, t.consumer_op), pl.at(t.consumer_op));
    if (!m.ok()) return m.status();
    out.cost += *m;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<MachineView>> CandidateViews(const MachineResources& resources,
                                                        const OpConfig& config, int start,
                                                        int count) {
  std::vector<MachineView> out;
  const int d = config.num_devices;
  if (d < 1 || d > count) return out;
  if (!resources.cluster) {
    for (int s = start; s + d <= start + count; ++s)
      out.push_back({.start = s, .dims = {d}, .strides = {1}});
    return out;
  }
  if (d > resources.cluster->num_ranks) return out;
  absl::StatusOr<std::vector<MachineView>> all =
      costmodel::EnumerateMachineViews(*resources.cluster, d, resources.max_view_dims);
  if (!all.ok()) return all.status();
  for (MachineView& v : *all)
    if (ViewInRange(v, {start, count})) out.push_back(std::move(v));
  return out;
}

absl::StatusOr<MachineMappingResult> FindOptimalMachineMapping(const MachineMappingProblem& problem,
                                                               MachineMappingCostModel& model,
                                                               MachineMappingCache* cache,
                                                               int64_t max_boundary_choices) {
  TreeInfo info;
  if (absl::Status s = info.Init(problem); !s.ok()) return s;
  if (problem.resources.cluster && problem.resources.num_devices > problem.resources.cluster->num_ranks)
    return absl::InvalidArgumentError("machine mapping: num_devices exceeds the cluster's ranks");
  MachineMappingCache local;
  Solver solver(problem, info, model, cache ? *cache : local, max_boundary_choices);
  absl::StatusOr<Entry> e = solver.Solve(problem.root, {0, problem.resources.num_devices}, {});
  if (!e.ok()) return e.status();
  if (!e->feasible)
    return absl::NotFoundError(absl::StrCat("machine mapping: no feasible mapping of ",
                                            problem.ops.size(), " ops onto ",
                                            problem.resources.num_devices, " devices"));
  return e->result;
}

absl::StatusOr<double> EvaluateMachineMapping(const MachineMappingProblem& problem,
                                              MachineMappingCostModel& model,
                                              const std::map<int, OpPlacement>& placements) {
  TreeInfo info;
  if (absl::Status s = info.Init(problem); !s.ok()) return s;
  absl::StatusOr<Evaluated> e = Eval(problem, info, model, placements, problem.root);
  if (!e.ok()) return e.status();
  return e->cost;
}

}  // namespace braid::search
