#include "server/job_history.h"

#include <cmath>

#include "glog/logging.h"

namespace braid::server {

JobHistory::JobHistory(JobHistoryOptions options) : options_(options) {
  CHECK_GE(options_.max_points, 4);
  CHECK_GE(options_.max_jobs, 1);
}

void JobHistory::Record(const JobRecord& r) {
  if (!(r.best_cost_s > 0) || !std::isfinite(r.best_cost_s)) return;
  const ProgressPoint p{r.elapsed_s, r.best_cost_s, r.candidates};
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = points_.try_emplace(r.id);
  if (inserted) {
    order_.push_back(r.id);
    if (static_cast<int>(order_.size()) > options_.max_jobs) {
      points_.erase(order_.front());
      order_.pop_front();
    }
  }
  std::vector<ProgressPoint>& v = it->second;
  if (!v.empty() && v.back() == p) return;
  if (static_cast<int>(v.size()) >= options_.max_points) {
    // Keep points 0, 2, 4, ... and always the last one.
    std::vector<ProgressPoint> kept;
    kept.reserve(v.size() / 2 + 1);
    for (size_t i = 0; i < v.size(); i += 2) kept.push_back(v[i]);
    if (kept.back() != v.back()) kept.push_back(v.back());
    v = std::move(kept);
  }
  v.push_back(p);
}

std::vector<ProgressPoint> JobHistory::Get(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = points_.find(job_id);
  return it == points_.end() ? std::vector<ProgressPoint>() : it->second;
}

}  // namespace braid::server
