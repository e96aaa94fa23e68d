// In-memory progress history of search jobs: one point per progress update
// (elapsed search time, best predicted iteration time, candidates costed),
// for the status page's best-cost-over-time chart. It is fed by a
// JobManager::SubscribeAll listener and is not persisted: after a restart a
// job's history starts again with the resumed search (the store keeps only
// the latest checkpoint).
//
//   JobHistory history({.max_points = 256});
//   jobs.SubscribeAll([&](const JobRecord& r, int64_t) { history.Record(r); });
//   std::vector<ProgressPoint> points = history.Get(job_id);
#ifndef BRAID_SERVER_JOB_HISTORY_H_
#define BRAID_SERVER_JOB_HISTORY_H_

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/store.h"

namespace braid::server {

struct ProgressPoint {
  double elapsed_s = 0;
  double best_cost_s = 0;
  int64_t candidates = 0;
  bool operator==(const ProgressPoint&) const = default;
};

struct JobHistoryOptions {
  // Points kept per job; when full, every other point is dropped (the first
  // and the newest stay), so a long search keeps its whole shape.
  int max_points = 256;
  int max_jobs = 1024;  // the oldest recorded job is forgotten beyond this
};

class JobHistory {
 public:
  explicit JobHistory(JobHistoryOptions options = {});

  // Appends the record's checkpoint if the search has started (best cost
  // > 0) and it differs from the last point. Thread-safe.
  void Record(const JobRecord& r);
  std::vector<ProgressPoint> Get(const std::string& job_id) const;

 private:
  JobHistoryOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::vector<ProgressPoint>> points_;
  std::deque<std::string> order_;  // job ids, first recorded first
};

}  // namespace braid::server

#endif  // BRAID_SERVER_JOB_HISTORY_H_
