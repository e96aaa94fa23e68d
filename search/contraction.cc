#include "search/contraction.h"

#include <algorithm>
#include <deque>
#include <numeric>
#include <queue>
#include <string>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "costmodel/op_cost.h"
#include "graph/ops.h"

namespace braid::search {

using graph::Graph;
using graph::Op;
using graph::OpId;
using graph::Phase;
using graph::TensorId;
using graph::TensorRole;

bool MayFuse(const Op& op) {
  if (op.opaque) return false;
  if (op.phase != Phase::kForward && op.phase != Phase::kBackward) return false;
  const graph::OpCategory c = graph::CategoryOf(op.kind);
  if (c == graph::OpCategory::kCollective || c == graph::OpCategory::kUpdate ||
      c == graph::OpCategory::kControlFlow || c == graph::OpCategory::kOpaque) {
    return false;
  }
  return graph::IsFusible(op);
}

namespace {

std::string OpName(const Graph& g, OpId o) { return absl::StrCat("'", g.op(o).name, "'"); }

std::string GroupName(const Graph& g, const FusionGroup& grp, int gi) {
  std::vector<std::string> names;
  for (OpId o : grp.ops) names.push_back(g.op(o).name);
  return absl::StrCat("group ", gi, " {", absl::StrJoin(names, ", "), "}");
}

std::string NodeName(const Graph& g, const Plan& p, const TaskNode& n) {
  switch (n.kind) {
    case TaskNode::Kind::kGroup:
      return GroupName(g, p.groups[n.index], n.index);
    case TaskNode::Kind::kOp:
      return absl::StrCat("op ", OpName(g, n.index));
    case TaskNode::Kind::kBucket:
      return absl::StrCat("bucket ", n.index);
  }
  return "?";
}

struct Dsu {
  std::vector<int> parent;
  explicit Dsu(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int Find(int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void Union(int a, int b) { parent[Find(a)] = Find(b); }
};

bool Contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

absl::Status CheckGroups(const Graph& g, const Plan& plan, std::vector<int>* nondup_group,
                         std::vector<std::vector<int>>* groups_of) {
  const int n_ops = g.num_ops();
  nondup_group->assign(n_ops, -1);
  groups_of->assign(n_ops, {});
  for (int gi = 0; gi < static_cast<int>(plan.groups.size()); ++gi) {
    const FusionGroup& grp = plan.groups[gi];
    if (grp.ops.empty()) return absl::InvalidArgumentError(absl::StrCat("group ", gi, " is empty"));
    for (OpId o : grp.ops) {
      if (o < 0 || o >= n_ops) {
        return absl::InvalidArgumentError(absl::StrCat("group ", gi, ": op id ", o, " out of range"));
      }
    }
    for (OpId o : grp.duplicated) {
      if (o < 0 || o >= n_ops || !Contains(grp.ops, o)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "group ", gi, ": duplicated op ",
            (o >= 0 && o < n_ops) ? OpName(g, o) : absl::StrCat(o), " is not a member"));
      }
    }
    for (OpId o : grp.ops) {
      const Op& op = g.op(o);
      if (!MayFuse(op)) {
        return absl::InvalidArgumentError(absl::StrCat(
            GroupName(g, grp, gi), ": op ", OpName(g, o), " (type ", op.type, ", phase ",
            std::string(graph::PhaseName(op.phase)),
            ") may not be fused: only fusible forward/backward compute ops can"));
      }
      if (Contains((*groups_of)[o], gi)) {
        return absl::InvalidArgumentError(
            absl::StrCat("group ", gi, " lists op ", OpName(g, o), " twice"));
      }
      (*groups_of)[o].push_back(gi);
      if (!Contains(grp.duplicated, o)) {
        if ((*nondup_group)[o] >= 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "op ", OpName(g, o), " is a non-duplicated member of groups ", (*nondup_group)[o],
              " and ", gi, ": an op has one home; mark all but one as duplicated"));
        }
        (*nondup_group)[o] = gi;
      }
    }
    // Realizable: at most one library call (cuBLAS/cuDNN) per fused kernel.
    OpId library = graph::kNoId;
    for (OpId o : grp.ops) {
      if (!costmodel::IsLibraryOp(g.op(o))) continue;
      if (library != graph::kNoId) {
        return absl::InvalidArgumentError(absl::StrCat(
            GroupName(g, grp, gi), " holds two library ops, ", OpName(g, library), " (",
            g.op(library).type, ") and ", OpName(g, o), " (", g.op(o).type,
            "): a fused kernel holds at most one MatMul/Gemm/Conv library call"));
      }
      library = o;
    }
    // Connected through tensors between members; duplicated members feed one.
    std::vector<OpId> members = grp.ops;
    std::sort(members.begin(), members.end());
    auto index_of = [&](OpId o) {
      auto it = std::lower_bound(members.begin(), members.end(), o);
      return (it != members.end() && *it == o) ? static_cast<int>(it - members.begin()) : -1;
    };
    Dsu dsu(static_cast<int>(members.size()));
    for (OpId o : members) {
      bool feeds_member = false;
      for (TensorId t : g.op(o).outputs) {
        for (OpId c : g.tensor(t).consumers) {
          int ci = index_of(c);
          if (ci >= 0 && c != o) {
            dsu.Union(index_of(o), ci);
            feeds_member = true;
          }
        }
      }
      if (!feeds_member && Contains(grp.duplicated, o)) {
        return absl::InvalidArgumentError(absl::StrCat(GroupName(g, grp, gi), ": duplicated op ",
                                                       OpName(g, o),
                                                       " feeds no member of the group"));
      }
    }
    for (size_t i = 1; i < members.size(); ++i) {
      if (dsu.Find(static_cast<int>(i)) != dsu.Find(0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            GroupName(g, grp, gi), " is not connected: op ", OpName(g, members[i]),
            " shares no tensor path with op ", OpName(g, members[0]), " inside the group"));
      }
    }
  }
  return absl::OkStatus();
}

// Returns per-op the bucket of the AllReduce op reducing a bucketed gradient
// (-1 otherwise) and fills bucket_of_grad.
absl::StatusOr<std::vector<int>> CheckBuckets(const Graph& g, const Plan& plan,
                                              std::vector<int>* bucket_of_grad) {
  bucket_of_grad->assign(g.num_tensors(), -1);
  std::vector<int> bucket_of_op(g.num_ops(), -1);
  for (int bi = 0; bi < static_cast<int>(plan.buckets.size()); ++bi) {
    const Bucket& b = plan.buckets[bi];
    if (b.grads.empty()) return absl::InvalidArgumentError(absl::StrCat("bucket ", bi, " is empty"));
    for (TensorId t : b.grads) {
      if (t < 0 || t >= g.num_tensors()) {
        return absl::InvalidArgumentError(absl::StrCat("bucket ", bi, ": tensor id ", t, " out of range"));
      }
      const graph::Tensor& ten = g.tensor(t);
      if (ten.role != TensorRole::kGradient) {
        return absl::InvalidArgumentError(absl::StrCat("bucket ", bi, ": tensor '", ten.name,
                                                       "' is not a gradient"));
      }
      if ((*bucket_of_grad)[t] >= 0) {
        return absl::InvalidArgumentError(absl::StrCat("gradient '", ten.name, "' is in buckets ",
                                                       (*bucket_of_grad)[t], " and ", bi));
      }
      (*bucket_of_grad)[t] = bi;
      OpId allreduce = graph::kNoId;
      for (OpId c : ten.consumers) {
        if (g.op(c).kind == graph::OpKind::kAllReduce) {
          if (allreduce != graph::kNoId) {
            return absl::InvalidArgumentError(
                absl::StrCat("gradient '", ten.name, "' has two AllReduce consumers"));
          }
          allreduce = c;
        }
      }
      if (allreduce == graph::kNoId) {
        return absl::InvalidArgumentError(
            absl::StrCat("bucket ", bi, ": gradient '", ten.name, "' has no AllReduce consumer"));
      }
      if (g.op(allreduce).inputs.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat("AllReduce ", OpName(g, allreduce),
                                                       " reduces ", g.op(allreduce).inputs.size(),
                                                       " tensors; bucketing expects one"));
      }
      bucket_of_op[allreduce] = bi;
    }
  }
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).role == TensorRole::kGradient && (*bucket_of_grad)[t] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient '", g.tensor(t).name, "' is in no bucket"));
    }
  }
  return bucket_of_op;
}

// Finds a cycle among nodes left with unmet dependencies after Kahn.
std::string DescribeCycle(const Graph& g, const Plan& plan, const Contraction& c,
                          const std::vector<int>& indegree) {
  int start = -1;
  for (int n = 0; n < static_cast<int>(c.nodes.size()); ++n) {
    if (indegree[n] > 0) {
      start = n;
      break;
    }
  }
  if (start < 0) return "unknown cycle";
  // Walk dependencies inside the unprocessed set until a node repeats.
  std::vector<int> seen_at(c.nodes.size(), -1);
  std::vector<int> path;
  int cur = start;
  while (seen_at[cur] < 0) {
    seen_at[cur] = static_cast<int>(path.size());
    path.push_back(cur);
    int next = -1;
    for (int d : c.nodes[cur].deps) {
      if (indegree[d] > 0) {
        next = d;
        break;
      }
    }
    if (next < 0) return absl::StrCat("cycle through ", NodeName(g, plan, c.nodes[cur]));
    cur = next;
  }
  std::vector<std::string> names;
  for (size_t i = seen_at[cur]; i < path.size(); ++i) {
    names.push_back(NodeName(g, plan, c.nodes[path[i]]));
  }
  std::reverse(names.begin(), names.end());
  names.push_back(names.front());
  return absl::StrJoin(names, " -> ");
}

}  // namespace

absl::StatusOr<Contraction> Contract(const Graph& g, const Plan& plan,
                                     const costmodel::FusionBackend* backend) {
  ASSIGN_OR_RETURN(std::vector<OpId> topo, g.TopologicalOrder());
  return Contract(g, plan, topo, StopToken(), backend);
}

absl::StatusOr<Contraction> Contract(const Graph& g, const Plan& plan,
                                     std::span<const OpId> topo_order, const StopToken& stop,
                                     const costmodel::FusionBackend* backend) {
  const std::span<const OpId>* topo = &topo_order;
  std::vector<int> nondup_group;
  std::vector<std::vector<int>> groups_of;
  RETURN_IF_ERROR(CheckGroups(g, plan, &nondup_group, &groups_of));
  if (backend != nullptr) {
    for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
      if (absl::Status s = backend->CanImplement(g, plan.groups[gi].ops); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("group ", gi, " (", g.op(plan.groups[gi].ops[0]).name, ", ",
                         plan.groups[gi].ops.size(), " ops): ", s.message()));
      }
    }
  }
  Contraction c;
  ASSIGN_OR_RETURN(std::vector<int> bucket_of_op, CheckBuckets(g, plan, &c.bucket_of_grad));
  if (stop.StopRequested()) return stop.ToStatus("contraction");
  if (static_cast<int>(topo_order.size()) != g.num_ops()) {
    return absl::InvalidArgumentError("topological order does not cover the graph's ops");
  }

  const int n_ops = g.num_ops();
  std::vector<char> is_output(g.num_tensors(), 0);
  for (TensorId t : g.outputs()) is_output[t] = 1;

  // Which standalone replicas are live: ops in no group as home run standalone;
  // an op only duplicated inside groups runs standalone iff something outside
  // those groups reads it. Decided consumers-first (reverse topological).
  std::vector<char> standalone(n_ops, 0);
  for (auto it = topo->rbegin(); it != topo->rend(); ++it) {
    const OpId p = *it;
    if (nondup_group[p] >= 0 || bucket_of_op[p] >= 0) continue;
    if (groups_of[p].empty()) {
      standalone[p] = 1;
      continue;
    }
    bool needed = false;
    for (TensorId t : g.op(p).outputs) {
      if (is_output[t]) needed = true;
      for (OpId cons : g.tensor(t).consumers) {
        if (needed) break;
        if (bucket_of_op[cons] >= 0 || standalone[cons]) {
          needed = true;
          break;
        }
        auto outside = [&](int gi) { return !Contains(groups_of[p], gi); };
        if (nondup_group[cons] >= 0 && outside(nondup_group[cons])) needed = true;
        for (int gi : groups_of[cons]) {
          if (outside(gi)) needed = true;
        }
      }
    }
    standalone[p] = needed ? 1 : 0;
  }

  // Nodes.
  c.home.assign(n_ops, -1);
  for (int gi = 0; gi < static_cast<int>(plan.groups.size()); ++gi) {
    TaskNode n;
    n.kind = TaskNode::Kind::kGroup;
    n.index = gi;
    n.ops = plan.groups[gi].ops;
    std::sort(n.ops.begin(), n.ops.end());
    n.key = n.ops.front();
    c.group_node.push_back(static_cast<int>(c.nodes.size()));
    c.nodes.push_back(std::move(n));
  }
  for (OpId o = 0; o < n_ops; ++o) {
    if (nondup_group[o] >= 0) c.home[o] = c.group_node[nondup_group[o]];
    if (!standalone[o]) continue;
    TaskNode n;
    n.kind = TaskNode::Kind::kOp;
    n.index = o;
    n.ops = {o};
    n.key = o;
    c.home[o] = static_cast<int>(c.nodes.size());
    c.nodes.push_back(std::move(n));
  }
  for (int bi = 0; bi < static_cast<int>(plan.buckets.size()); ++bi) {
    TaskNode n;
    n.kind = TaskNode::Kind::kBucket;
    n.index = bi;
    c.bucket_node.push_back(static_cast<int>(c.nodes.size()));
    c.nodes.push_back(std::move(n));
  }
  for (OpId o = 0; o < n_ops; ++o) {
    if (bucket_of_op[o] >= 0) {
      const int node = c.bucket_node[bucket_of_op[o]];
      c.home[o] = node;
      c.nodes[node].ops.push_back(o);
    }
  }
  for (int bi = 0; bi < static_cast<int>(plan.buckets.size()); ++bi) {
    TaskNode& n = c.nodes[c.bucket_node[bi]];
    std::sort(n.ops.begin(), n.ops.end());
    n.key = n.ops.front();
  }

  if (stop.StopRequested()) return stop.ToStatus("contraction");
  // Dependencies through tensors.
  for (int ni = 0; ni < static_cast<int>(c.nodes.size()); ++ni) {
    TaskNode& n = c.nodes[ni];
    const bool is_group = n.kind == TaskNode::Kind::kGroup;
    for (OpId m : n.ops) {
      for (TensorId t : g.op(m).inputs) {
        const OpId q = g.tensor(t).producer;
        if (q == graph::kNoId) continue;
        if (is_group && Contains(groups_of[q], n.index)) continue;
        const int h = c.home[q];
        if (h < 0 || h == ni) {
          return absl::InternalError(absl::StrCat("lowering: op ", OpName(g, m), " reads '",
                                                  g.tensor(t).name, "' of op ", OpName(g, q),
                                                  ", which no task computes for it"));
        }
        n.deps.push_back(h);
        c.nodes[h].readers.push_back(ni);
        c.nodes[h].materialized.push_back(t);
      }
    }
  }
  for (TaskNode& n : c.nodes) {
    for (std::vector<int>* v : {&n.deps, &n.readers}) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    if (n.kind != TaskNode::Kind::kBucket) {
      for (OpId m : n.ops) {
        if (c.home[m] != &n - c.nodes.data()) continue;
        for (TensorId t : g.op(m).outputs) {
          if (is_output[t]) n.materialized.push_back(t);
        }
      }
    }
    std::sort(n.materialized.begin(), n.materialized.end());
    n.materialized.erase(std::unique(n.materialized.begin(), n.materialized.end()),
                         n.materialized.end());
  }

  if (stop.StopRequested()) return stop.ToStatus("contraction");
  // Kahn, ties by smallest op id: the task order of the lowered graph, and
  // the acyclicity check of the contracted graph.
  const int nn = static_cast<int>(c.nodes.size());
  std::vector<int> indegree(nn, 0);
  std::vector<std::vector<int>> users(nn);
  for (int ni = 0; ni < nn; ++ni) {
    indegree[ni] = static_cast<int>(c.nodes[ni].deps.size());
    for (int d : c.nodes[ni].deps) users[d].push_back(ni);
  }
  using Entry = std::pair<OpId, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
  for (int ni = 0; ni < nn; ++ni) {
    if (indegree[ni] == 0) ready.emplace(c.nodes[ni].key, ni);
  }
  c.order.reserve(nn);
  while (!ready.empty()) {
    const int ni = ready.top().second;
    ready.pop();
    c.order.push_back(ni);
    for (int u : users[ni]) {
      if (--indegree[u] == 0) ready.emplace(c.nodes[u].key, u);
    }
  }
  if (static_cast<int>(c.order.size()) != nn) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan makes the graph cyclic: ", DescribeCycle(g, plan, c, indegree)));
  }
  return c;
}

std::vector<int> ProductionPositions(const Contraction& c) {
  const int nn = static_cast<int>(c.nodes.size());
  std::vector<int> indegree(nn, 0);
  std::vector<std::vector<int>> users(nn);
  for (int ni = 0; ni < nn; ++ni) {
    indegree[ni] = static_cast<int>(c.nodes[ni].deps.size());
    for (int d : c.nodes[ni].deps) users[d].push_back(ni);
  }
  auto by_key = [&](int a, int b) {
    return std::make_pair(c.nodes[a].key, a) < std::make_pair(c.nodes[b].key, b);
  };
  std::vector<int> initial;
  for (int ni = 0; ni < nn; ++ni) {
    if (indegree[ni] == 0) initial.push_back(ni);
  }
  std::sort(initial.begin(), initial.end(), by_key);
  std::deque<int> fifo(initial.begin(), initial.end());
  std::vector<int> pos(nn, nn);
  int next = 0;
  std::vector<int> released;
  while (!fifo.empty()) {
    const int ni = fifo.front();
    fifo.pop_front();
    pos[ni] = next++;
    released.clear();
    for (int u : users[ni]) {
      if (--indegree[u] == 0) released.push_back(u);
    }
    std::sort(released.begin(), released.end(), by_key);
    fifo.insert(fifo.end(), released.begin(), released.end());
  }
  return pos;
}

void SortBucketsByProduction(const Graph& g, Plan* plan, Contraction* c) {
  const std::vector<int> pos = ProductionPositions(*c);
  const int nb = static_cast<int>(plan->buckets.size());
  std::vector<std::tuple<int, int, int>> keys(nb);  // (last, first, old index)
  for (int bi = 0; bi < nb; ++bi) {
    int last = -1, first = static_cast<int>(pos.size());
    for (TensorId t : plan->buckets[bi].grads) {
      const int p = pos[c->home[g.tensor(t).producer]];
      last = std::max(last, p);
      first = std::min(first, p);
    }
    keys[bi] = {last, first, bi};
  }
  std::sort(keys.begin(), keys.end());
  std::vector<Bucket> buckets(nb);
  std::vector<int> bucket_node(nb);
  for (int k = 0; k < nb; ++k) {
    const int old = std::get<2>(keys[k]);
    buckets[k] = std::move(plan->buckets[old]);
    bucket_node[k] = c->bucket_node[old];
    c->nodes[bucket_node[k]].index = k;
    for (TensorId t : buckets[k].grads) c->bucket_of_grad[t] = k;
  }
  plan->buckets = std::move(buckets);
  c->bucket_node = std::move(bucket_node);
}

absl::StatusOr<Plan> SortBucketsByProduction(const Graph& g, Plan plan) {
  ASSIGN_OR_RETURN(Contraction c, Contract(g, plan));
  SortBucketsByProduction(g, &plan, &c);
  return plan;
}

}  // namespace braid::search
