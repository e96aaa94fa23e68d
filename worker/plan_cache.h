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
// protobuf's JSON mapping -- the plan together with the digest the server gave
// for it (plan_sha256, proto/plan_digest.h) -- written to a temporary file and
// renamed so a reader never sees half a plan. Every read checks the plan
// against that digest: a file that was corrupted or planted without the
// matching digest is refused (a miss, logged), never served. The digest covers
// what the ranks enact (the plan); the other fields (plan_json, baselines) are
// not checked. It is no secret: whoever can write the directory can also
// write a plan with its own digest, which only a check against the server
// catches (the activator's ranks make it), so the directory belongs to the
// worker's user alone. The server is asked first (a plan may be re-costed there); the
// cache answers only when the server cannot be reached (UNAVAILABLE or
// DEADLINE_EXCEEDED). Any other server answer (NOT_FOUND,
// FAILED_PRECONDITION, ...) is returned as is. A plan the server gave is
// served even when it cannot be cached (a read-only or full cache
// directory): the failure is logged and reported in FetchedPlan.
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
  // (it becomes a file name) or is empty/longer than 128 bytes, or when the
  // plan's plan_sha256 is not the digest of its plan (nothing is written);
  // Internal naming the path when the file cannot be written.
  absl::Status Put(const std::string& key, const braid::v1::GetPlanResponse& plan);
  // nullopt when absent; DataLoss naming the file when it does not parse or
  // its plan does not match the digest stored with it.
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
  // Why a plan fetched from the server was not cached; empty when it was
  // (or when it came from the cache).
  std::string cache_error;
};

using PlanFetcher =
    std::function<absl::StatusOr<braid::v1::GetPlanResponse>(const std::string& job_id)>;

// Asks `fetch`; on success stores the plan under `job_id` (a failure to store
// it is logged and set in cache_error; the plan is returned all the same);
// when the server is unreachable serves the cached copy once it matches its
// digest (Unavailable naming the server error and the cache miss when there
// is none, or naming the file and why it was refused when it does not
// verify).
absl::StatusOr<FetchedPlan> FetchPlanCached(const PlanFetcher& fetch, LocalPlanCache& cache,
                                            const std::string& job_id);

// $BRAID_PLAN_CACHE, else $XDG_CACHE_HOME/braid/plans, else ~/.cache/braid/plans.
std::string DefaultPlanCacheDir();

}  // namespace braid::worker

#endif  // BRAID_WORKER_PLAN_CACHE_H_
