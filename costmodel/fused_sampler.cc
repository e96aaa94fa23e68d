#include "costmodel/fused_sampler.h"

#include <algorithm>
#include <random>
#include <unordered_set>

#include "costmodel/op_cost.h"
#include "costmodel/profile_store.h"

namespace braid::costmodel {
namespace {

bool Contains(std::span<const graph::OpId> sorted, graph::OpId o) {
  return std::binary_search(sorted.begin(), sorted.end(), o);
}

// Ops a sample may hold: compute ops with outputs (communication is not a
// kernel of the fused executor).
bool Samplable(const graph::Graph& g, graph::OpId id) {
  const graph::Op& op = g.op(id);
  return !op.outputs.empty() && !IsCommunicationOp(op);
}

// Producers of the group's inputs that are not members.
std::vector<graph::OpId> Predecessors(const graph::Graph& g, std::span<const graph::OpId> group) {
  std::vector<graph::OpId> out;
  for (graph::OpId m : group) {
    for (graph::TensorId t : g.op(m).inputs) {
      const graph::OpId p = g.tensor(t).producer;
      if (p == graph::kNoId || Contains(group, p)) continue;
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

bool IsConvex(const graph::Graph& g, std::span<const graph::OpId> group) {
  if (group.size() < 2) return true;
  const graph::OpId last = group.back();
  // Walk forward from the group's outside consumers; op ids are a
  // topological order, so nothing past the last member can lead back.
  std::vector<graph::OpId> stack;
  std::unordered_set<graph::OpId> seen;
  auto push_consumers = [&](graph::OpId op) {
    for (graph::TensorId t : g.op(op).outputs) {
      for (graph::OpId c : g.tensor(t).consumers) {
        if (c <= last && !Contains(group, c) && seen.insert(c).second) stack.push_back(c);
      }
    }
  };
  for (graph::OpId m : group) push_consumers(m);
  while (!stack.empty()) {
    const graph::OpId o = stack.back();
    stack.pop_back();
    for (graph::TensorId t : g.op(o).outputs) {
      for (graph::OpId c : g.tensor(t).consumers) {
        if (Contains(group, c)) return false;
      }
    }
    push_consumers(o);
  }
  return true;
}

std::vector<std::vector<graph::OpId>> SampleFusedGroups(const graph::Graph& g,
                                                        const FusionBackend& backend,
                                                        const FusedSamplerOptions& options) {
  std::vector<graph::OpId> seeds;
  for (graph::OpId id = 0; id < g.num_ops(); ++id) {
    if (Samplable(g, id)) seeds.push_back(id);
  }
  std::vector<std::vector<graph::OpId>> out;
  if (seeds.empty() || options.count <= 0) return out;
  std::mt19937_64 rng(options.seed);
  std::unordered_set<std::string> signatures;
  const int max_draws = options.max_draws > 0 ? options.max_draws : 40 * options.count;
  const int lo = std::max(2, options.min_ops);
  const int hi = std::max(lo, options.max_ops);
  for (int draw = 0; draw < max_draws && static_cast<int>(out.size()) < options.count; ++draw) {
    const graph::OpId start = seeds[std::uniform_int_distribution<size_t>(0, seeds.size() - 1)(rng)];
    const int target = std::uniform_int_distribution<int>(lo, hi)(rng);
    std::vector<graph::OpId> group = {start};
    while (static_cast<int>(group.size()) < target) {
      std::vector<graph::OpId> preds = Predecessors(g, group);
      std::shuffle(preds.begin(), preds.end(), rng);
      bool grown = false;
      for (graph::OpId p : preds) {
        if (!Samplable(g, p)) continue;
        std::vector<graph::OpId> next = group;
        next.insert(std::upper_bound(next.begin(), next.end(), p), p);
        if (!IsConvex(g, next) || !backend.CanImplement(g, next).ok()) continue;
        group = std::move(next);
        grown = true;
        break;
      }
      if (!grown) break;
    }
    if (static_cast<int>(group.size()) < lo) continue;
    if (signatures.insert(FusedSignature(g, group)).second) out.push_back(std::move(group));
  }
  return out;
}

}  // namespace braid::costmodel
