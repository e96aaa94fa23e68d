// The worker's local plan cache ("cluster-resident" plans): plans fetched from
// braid-server are kept as files in a cache directory, so a training job that
// restarts finds its plan even while the server is unreachable.
//
//   LocalPlanCache cache("/var/cache/braid/plans");
//   auto fetch = [&](const std::string& id) { return GetPlanFromServer(id); };
//   absl::StatusOr<FetchedPlan> p = FetchPlanCached(fetch, cache, "job-0123456789abcdef");
//   // p->plan (braid::v1::GetPlanResponse), p->from_local_cache
//
// One file per key (a job id): <dir>/<key>.json, the GetPlanResponse in
// protobuf's JSON mapping, written to a temporary file and renamed so a
// reader never sees half a plan. The server is asked first (a plan may be
// re-costed there); the cache answers only when the server cannot be reached
// (UNAVAILABLE or DEADLINE_EXCEEDED). Any other server answer (NOT_FOUND,
// FAILED_PRECONDITION, ...) is returned as is.
#ifndef BRAID_WORKER_PLAN_CACHE_H_
#define BRAID_WORKER_PLAN_CACHE_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "braid/v1/strategy.pb.h"

namespace braid::worker {

class LocalPlanCache {
 public:
  explicit LocalPlanCache(std::string dir) : dir_(std::move(dir)) {}

  // InvalidArgument when the key has characters other than [A-Za-z0-9._-]
  // (it becomes a file name) or is empty/longer than 128 bytes.
  absl::Status Put(const std::string& key, const braid::v1::GetPlanResponse& plan);
  // nullopt when absent; DataLoss naming the file when it does not parse.
  absl::StatusOr<std::optional<braid::v1::GetPlanResponse>> Get(const std::string& key) const;
  absl::StatusOr<std::string> PathFor(const std::string& key) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

struct FetchedPlan {
  braid::v1::GetPlanResponse plan;
  bool from_local_cache = false;
  std::string path;  // the cache file
};

using PlanFetcher =
    std::function<absl::StatusOr<braid::v1::GetPlanResponse>(const std::string& job_id)>;

// Asks `fetch`; on success stores the plan under `job_id`; when the server is
// unreachable serves the cached copy (Unavailable naming the server error
// and the cache miss when there is none).
absl::StatusOr<FetchedPlan> FetchPlanCached(const PlanFetcher& fetch, LocalPlanCache& cache,
                                            const std::string& job_id);

// $BRAID_PLAN_CACHE, else $XDG_CACHE_HOME/braid/plans, else ~/.cache/braid/plans.
std::string DefaultPlanCacheDir();

}  // namespace braid::worker

#endif  // BRAID_WORKER_PLAN_CACHE_H_
