// A thread-safe memoizing wrapper around a CostModel, for one graph. The
// search evaluates thousands of candidate plans that share most of their
// kernels; each distinct kernel (op set) and collective size is asked of the
// underlying model once. Calls into the wrapped model are serialized under a
// mutex, so candidate evaluation may run on several threads even when the
// wrapped model is not thread-safe.
//
//   CachedCostModel cached(cost_model);
//   Lower(g, plan, cached);  // from any thread
#ifndef BRAID_SEARCH_COST_CACHE_H_
#define BRAID_SEARCH_COST_CACHE_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "costmodel/cost_model.h"
#include "graph/graph.h"

namespace braid::search {

class CachedCostModel final : public costmodel::CostModel {
 public:
  // `base` must outlive this object. All calls must pass the same graph.
  explicit CachedCostModel(costmodel::CostModel& base);

  using CostModel::ComputeTime;
  costmodel::OpTime ComputeTime(const graph::Graph& g,
                                std::span<const graph::OpId> ops) override;
  double CollectiveTime(costmodel::Collective c, int64_t bytes, int group_size) override;
  double CollectiveTimeOnDevices(costmodel::Collective c, int64_t bytes, int group_size,
                                 int devices) override {
    return base_.CollectiveTimeOnDevices(c, bytes, group_size, devices);
  }
  // Forwards the groups this cache has not costed yet (each once).
  bool PrefetchesFused() const override { return prefetches_; }
  void PrefetchFused(const graph::Graph& g,
                     std::span<const std::vector<graph::OpId>> groups) override;
  double ComputeSlowdownDuringComm() const override { return slowdown_; }
  double CommSlowdownDuringCompute() const override { return comm_slowdown_; }
  double BucketPackTime(int64_t bytes) const override { return base_.BucketPackTime(bytes); }
  std::string Generation() const override { return generation_; }
  const costmodel::FusionBackend* fusion_backend() const override {
    return base_.fusion_backend();
  }

  int64_t hits() const;
  int64_t misses() const;

 private:
  struct VecHash {
    size_t operator()(const std::vector<graph::OpId>& v) const;
  };
  costmodel::CostModel& base_;
  const double slowdown_;
  const double comm_slowdown_;
  const std::string generation_;
  const bool prefetches_;
  mutable std::mutex mu_;
  std::vector<std::optional<costmodel::OpTime>> single_;  // per op
  std::unordered_map<std::vector<graph::OpId>, costmodel::OpTime, VecHash> compute_;
  std::map<std::tuple<int, int64_t, int>, double> collective_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace braid::search

#endif  // BRAID_SEARCH_COST_CACHE_H_
