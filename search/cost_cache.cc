#include "search/cost_cache.h"

#include <unordered_set>

#include "xxhash.h"

namespace braid::search {

CachedCostModel::CachedCostModel(costmodel::CostModel& base)
    : base_(base),
      slowdown_(base.ComputeSlowdownDuringComm()),
      comm_slowdown_(base.CommSlowdownDuringCompute()),
      generation_(base.Generation()),
      prefetches_(base.PrefetchesFused()) {}

size_t CachedCostModel::VecHash::operator()(const std::vector<graph::OpId>& v) const {
  return static_cast<size_t>(XXH3_64bits(v.data(), v.size() * sizeof(graph::OpId)));
}

costmodel::OpTime CachedCostModel::ComputeTime(const graph::Graph& g,
                                               std::span<const graph::OpId> ops) {
  if (ops.size() == 1) {
    // Unfused ops: every candidate asks for all of them; an array beats
    // hashing a one-element vector.
    const graph::OpId op = ops[0];
    std::lock_guard<std::mutex> lock(mu_);
    if (single_.size() != static_cast<size_t>(g.num_ops())) single_.assign(g.num_ops(), {});
    if (single_[op].has_value()) {
      ++hits_;
      return *single_[op];
    }
    ++misses_;
    single_[op] = base_.ComputeTime(g, ops);
    return *single_[op];
  }
  std::vector<graph::OpId> key(ops.begin(), ops.end());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = compute_.find(key);
  if (it != compute_.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  costmodel::OpTime t = base_.ComputeTime(g, ops);
  compute_.emplace(std::move(key), t);
  return t;
}

void CachedCostModel::PrefetchFused(const graph::Graph& g,
                                    std::span<const std::vector<graph::OpId>> groups) {
  if (!prefetches_) return;
  std::vector<std::vector<graph::OpId>> fresh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::unordered_set<std::vector<graph::OpId>, VecHash> seen;
    for (const std::vector<graph::OpId>& grp : groups) {
      if (grp.size() < 2 || compute_.count(grp) > 0 || !seen.insert(grp).second) continue;
      fresh.push_back(grp);
    }
  }
  if (!fresh.empty()) base_.PrefetchFused(g, fresh);
}

double CachedCostModel::CollectiveTime(costmodel::Collective c, int64_t bytes, int group_size) {
  const auto key = std::make_tuple(static_cast<int>(c), bytes, group_size);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = collective_.find(key);
  if (it != collective_.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  const double t = base_.CollectiveTime(c, bytes, group_size);
  collective_.emplace(key, t);
  return t;
}

int64_t CachedCostModel::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t CachedCostModel::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace braid::search
