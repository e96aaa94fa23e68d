// Trusted measured feedback: who may report a job's iteration times, what a
// losing run changes, and how an operator undoes it.
//
// Trust model. Every job gets a report credential when it is submitted
// (SubmitGraphResponse.report_credential, 256 random bits, shown once to the
// submitter; the store keeps its SHA-256). The submitter -- a launcher,
// `braid submit`, braid.torch -- hands it to the job's training ranks. A run
// of the plan on those ranks begins with StartRun (credential required),
// which issues the attempt id every rank of the run reports under; a second
// report of the same (plan, attempt, rank) is refused, and the world size
// is the job's. The client token alone lets a caller submit and read jobs,
// not speak for another job's ranks.
//
// What a verdict changes. A run that loses to the DDP-bucket baseline beyond
// the measured spread (plan_feedback.h) rolls back that job's plan only:
// the job is moved to a private plan entry holding the baseline, and the
// shared plan-cache entry other jobs are served is untouched. The shared
// entry is rolled back when jobs with at least `shared_rollback_jobs`
// distinct credentials lost with the same plan, or when an operator
// confirms a job's rollback (ConfirmRollback). An operator lists rollbacks
// and restores them (RestorePlan); a plan an operator restored is not rolled
// back again by later runs of that job (nor the shared entry by that
// plan's later runs). Every rollback, confirmation and restore goes to the
// audit log with who caused it.
//
// Cost. A report reads and writes one run aggregate (store.h RunAggregate),
// however many reports came before it; per-rank rows are one summary each;
// runs older than the retention are deleted when the job's next run starts,
// and a job has at most max_attempts_per_job runs. Reports and runs are rate
// limited per client address. Reports of one job are serialized by that
// job's lock; building the baseline of a rollback holds no lock other jobs
// need.
//
//   FeedbackManager fb(store, options, make_rollback);
//   absl::StatusOr<StartedRun> run = fb.StartRun({job, credential, 2, "activate", peer});
//   absl::StatusOr<MeasurementOutcome> o = fb.Report(report);  // with run->attempt_id
#ifndef BRAID_SERVER_FEEDBACK_H_
#define BRAID_SERVER_FEEDBACK_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/plan_feedback.h"
#include "server/store.h"

namespace braid::server {

struct FeedbackOptions {
  int max_attempts_per_job = 256;
  double retention_s = 30 * 86400.0;
  // Per client address: reports and runs per second, and the burst allowed.
  double report_rate_per_s = 50;
  double report_burst = 200;
  // Distinct jobs (credentials) whose runs lost with the same plan before
  // the shared cache entry is rolled back.
  int shared_rollback_jobs = 2;
};

struct StartedRun {
  std::string attempt_id;
  int world_size = 0;
  std::string plan_sha256;
};

// A token bucket per key (a client address), bounded in keys.
class RateLimiter {
 public:
  RateLimiter(double rate_per_s, double burst) : rate_(rate_per_s), burst_(burst) {}
  // Takes one token from `key`'s bucket; false when it is empty.
  bool Allow(const std::string& key);

 private:
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
  };
  static constexpr size_t kMaxKeys = 4096;
  double rate_;
  double burst_;
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
};

class FeedbackManager {
 public:
  // The DDP-bucket baseline of `job`'s training graph as the entry replacing
  // `served` (digest `served_digest`), keyed as `served`; nullopt when that
  // baseline is the served plan itself. Slow (runs the baselines).
  using RollbackMaker = std::function<absl::StatusOr<std::optional<PlanRecord>>(
      const JobRecord& job, const PlanRecord& served, const std::string& served_digest,
      const std::string& reason)>;
  // The digest of `record` as `job` is served it (proto/plan_digest.h).
  using Digester =
      std::function<absl::StatusOr<std::string>(const PlanRecord& record, const JobRecord& job)>;

  FeedbackManager(Store* store, FeedbackOptions options, RollbackMaker make_rollback,
                  Digester digest);

  // A new credential (64 hex digits) and its stored form.
  static std::string NewCredential();
  static std::string CredentialSha256(std::string_view credential);

  // NotFound, FailedPrecondition (no plan yet, no credential), PermissionDenied
  // (wrong credential), InvalidArgument (world size), ResourceExhausted
  // (rate, runs).
  absl::StatusOr<StartedRun> StartRun(const RunRequest& request);
  // As StartRun, and: NotFound for an attempt not of this job,
  // AlreadyExists for a second report of a rank, FailedPrecondition for a
  // plan the job is not served.
  absl::StatusOr<MeasurementOutcome> Report(const MeasurementReport& report);
  // measured / predicted of the job's cluster and kind; 0 before any report.
  absl::StatusOr<double> Calibration(const std::string& cluster_fingerprint,
                                     const std::string& job_kind);

  absl::StatusOr<std::vector<RollbackRecord>> Rollbacks(const std::string& job_id, int limit);
  absl::StatusOr<std::vector<AuditEntry>> Audit(const std::string& job_id, int limit);
  // Operator actions (the caller checked the admin token); `actor` names
  // them in the audit log. Restore: FailedPrecondition when the job's plan
  // has no rollback in effect. Confirm: when the job has no rollback of
  // its own in effect.
  absl::StatusOr<std::vector<RollbackRecord>> Restore(const std::string& job_id,
                                                      const std::string& actor,
                                                      const std::string& reason);
  absl::StatusOr<std::vector<RollbackRecord>> Confirm(const std::string& job_id,
                                                      const std::string& actor,
                                                      const std::string& reason);

  // Grows with every stored report, rollback and restore.
  int64_t Version() const { return version_.load(std::memory_order_acquire); }

 private:
  struct JobState {
    JobRecord job;
    PlanRecord served;
    std::string served_digest;
  };
  // The job, done, with its served plan and credential checked.
  absl::StatusOr<JobState> LoadJob(const std::string& job_id, const std::string& credential);
  std::shared_ptr<std::mutex> JobLock(const std::string& job_id);
  // Rolls back `s`'s plan for its job; then the shared entry when enough
  // jobs lost with it. Returns the job's record after it.
  absl::StatusOr<std::optional<PlanRecord>> RollBackJob(const JobState& s, const std::string& reason,
                                                        const std::string& actor);
  // Rolls back the shared entry `shared_key` (serving `digest`) to the
  // baseline `job` measured against; `why` and `actor` for the record.
  absl::Status RollBackShared(const JobState& s, const std::string& shared_key,
                              const std::string& reason, const std::string& actor);
  absl::StatusOr<bool> RestoredBefore(const std::string& job_id, const std::string& shared_key,
                                      const std::string& sha256, bool shared);

  Store* store_;
  FeedbackOptions options_;
  RollbackMaker make_rollback_;
  Digester digest_;
  RateLimiter limiter_;
  std::mutex locks_mu_;
  std::map<std::string, std::weak_ptr<std::mutex>> job_locks_;
  std::mutex shared_mu_;  // promotions and restores of shared entries
  std::atomic<int64_t> version_{0};
};

// "ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7": a client's address without its
// port (one bucket per host).
std::string PeerHost(std::string_view peer);

}  // namespace braid::server

#endif  // BRAID_SERVER_FEEDBACK_H_
