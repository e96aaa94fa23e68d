// The job manager: accepts search jobs, persists them before acknowledging,
// runs at most `max_concurrent_searches` searches at once from a bounded
// queue, checkpoints their progress, serves plans from the plan cache, and
// resumes unfinished jobs after a restart.
//
// Phases: queued -> importing -> [profiling] -> searching -> done | failed |
// cancelled. Importing builds the training graph and the cost model and
// checks the plan cache; profiling creates tasks for ops the profile store
// lacks when a remote worker for the device kind is live (the search does not
// wait for them: their results bump the profile generation, so later
// look-ups re-cost the plan).
//
//   JobManager jobs(store, profiles, &tasks, {.max_concurrent_searches = 1});
//   RETURN_IF_ERROR(jobs.Start());                 // resumes unfinished jobs
//   absl::StatusOr<JobRecord> j = jobs.Submit(std::move(request));
//   jobs.Subscribe(j->id, [](const JobRecord& r, int64_t version) { ... });
//   absl::StatusOr<JobPlan> plan = jobs.GetPlan(j->id);
//
// Restart semantics. A checkpoint holds the progress (best cost,
// candidates, elapsed) and, whenever it improved, the best plan so far
// (Store::SaveCheckpointPlan). A resumed job re-runs its search with the same
// seed and the checkpointed plan as an extra starting point
// (SearchConfig::initial_plans), so it never ends worse than where it stopped.
//
// Cancellation. Cancel() and shutdown raise flags that the search polls in
// its baselines, steps and plan evaluations (search::StopToken), so a search
// stops within tens of milliseconds and frees its slot; the job is marked
// cancelled at once.
//
// Crash safety. A run of a job is counted in SQLite before it starts and
// taken back when it ends in a controlled way (done, failed, cancelled,
// shutdown); a job whose runs were interrupted by the process dying
// max_interrupted_runs times is failed at the next Start() instead of being
// resumed, so one bad job cannot keep a supervised server in a crash loop.
// Whatever a run throws fails that job, never the process.
//
// Parallel jobs (JobOptions::parallel). The search is search::PlanParallel on
// the job's forward graph over the cluster's ranks: the strategy table, then
// the fusion search on each fitting strategy's per-device training graph
// (the job's budget split evenly between the strategies that may reach it;
// the same cancel/stop flags; progress summed over the searches, the best
// cost the best of any strategy so far). The chosen plan is stored with its
// ParallelSection -- per-device forward text (round-trip checked), degrees,
// the "parallel" JSON with every strategy's simulated time -- in the plan
// cache under the job's key (whole-model fingerprint, cluster, options with
// "parallel":true) and per job (Store::PutJobParallel); the job then records
// the per-device training graph's fingerprint (server/job_graph.h). A cache
// hit restores the section to the new job. Pipeline rows are left out of the
// table (their stages are not fused: no single per-device graph to serve).
// Parallel searches keep no
// checkpoint plan (a plan names one strategy's per-device graph): a resumed
// parallel job searches again from the start, with the same seed.
//
// Measured feedback is server/feedback.h's FeedbackManager (who may report,
// runs, per-job and shared rollbacks, restores, calibration); Submit issues
// each job's report credential, and the manager builds a rollback's
// DDP-bucket baseline for it (RollBackPlan).
#ifndef BRAID_SERVER_JOB_MANAGER_H_
#define BRAID_SERVER_JOB_MANAGER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "costmodel/profile_store.h"
#include "graph/graph.h"
#include "search/parallel_plan.h"
#include "server/feedback.h"
#include "server/plan_cache.h"
#include "server/plan_feedback.h"
#include "server/store.h"
#include "server/task_queue.h"

namespace braid::server {

struct JobManagerOptions {
  int max_concurrent_searches = 1;
  int queue_size = 64;  // queued (not yet running) jobs; more is ResourceExhausted
  int search_threads = 1;  // SearchConfig::threads per search
  double checkpoint_interval_s = 1.0;
  // A job whose runs were interrupted by the process dying (crash, kill -9,
  // OOM) this many times is failed at the next Start() instead of resumed.
  int max_interrupted_runs = 2;
  // The profile store's SQLite file, for the fused-op estimator
  // (costmodel::FusedOpEstimatorFor); "" when none.
  std::string profile_db_path;
  FeedbackOptions feedback;
};

struct SubmitRequest {
  std::string name;
  graph::Graph forward;            // the imported forward model
  costmodel::ClusterSpec cluster;  // before options.ranks is applied
  JobOptions options;
};

// Counters for the status page and /metrics (this process only).
struct JobManagerStats {
  int queued = 0;   // waiting for a runner
  int running = 0;  // importing, profiling or searching
  int64_t candidates_evaluated = 0;  // by the searches of this process
  int64_t plan_cache_hits = 0;       // jobs served from the plan cache
  int64_t plan_cache_misses = 0;     // jobs that had to search
};

struct JobPlan {
  PlanRecord record;
  bool from_cache = false;
  bool recosted = false;
};

class JobManager {
 public:
  // Called with a job's record and a version that grows with every change.
  using Listener = std::function<void(const JobRecord&, int64_t version)>;

  // `store` must outlive the manager; `profiles` and `tasks` may be null.
  JobManager(Store* store, costmodel::ProfileStore* profiles, TaskQueue* tasks,
             JobManagerOptions options);
  // Stops running searches without finishing their jobs (they resume on the
  // next Start()), as a crash would.
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Re-queues unfinished jobs and leased tasks, then starts the runners.
  absl::Status Start();

  // InvalidArgument when the graph cannot be trained or options.ranks does
  // not fit the cluster; ResourceExhausted when the queue is full.
  absl::StatusOr<JobRecord> Submit(SubmitRequest request);
  absl::StatusOr<JobRecord> Get(const std::string& id);
  absl::StatusOr<JobRecord> Cancel(const std::string& id);
  absl::StatusOr<std::vector<JobRecord>> List(int limit);
  // FailedPrecondition while the job has no plan.
  absl::StatusOr<JobPlan> GetPlan(const std::string& id);

  // FeedbackManager::Report (see there); `report` is validated by the
  // caller (StrategyApi).
  absl::StatusOr<MeasurementOutcome> ReportMeasurement(const MeasurementReport& report);
  // measured / predicted on the job's cluster for its kind (plan_feedback.h);
  // 0 when nothing was reported.
  absl::StatusOr<double> Calibration(const JobRecord& job);
  // Runs, rollbacks, restores (server/feedback.h).
  FeedbackManager& feedback() { return *feedback_; }
  // Grows with every stored report: served plans (rollbacks) and
  // calibrations may have changed, so responses memoized before are stale.
  int64_t FeedbackVersion() const { return feedback_->Version(); }

  // Calls `listener` with the current record at once, then on every change
  // until Unsubscribe (after which it is never called). Listeners run on the
  // manager's threads under its listener lock: they must not call back into
  // the manager.
  absl::StatusOr<int64_t> Subscribe(const std::string& id, Listener listener);
  void Unsubscribe(int64_t subscription);
  // Like Subscribe, for every job and without the initial call (status
  // pages record progress histories with it). Same listener rules.
  int64_t SubscribeAll(Listener listener);

  JobManagerStats Stats();
  // Grows with every change to any job (submission, progress, phase), so a
  // status page can reuse what it rendered while the count stays the same.
  int64_t ChangeCount() const { return changes_.load(std::memory_order_acquire); }

 private:
  struct Runtime;

  void RunnerLoop();
  void RunJob(const std::shared_ptr<Runtime>& rt);
  void RunJobSteps(Runtime& rt);
  // The cache look-up and search of a parallel job (after Import).
  void RunParallelJob(Runtime& rt, const JobRecord& rec, const std::string& key,
                      costmodel::CostModel& cm);
  absl::Status Import(Runtime& rt);
  // Applies `change` to the record (unless final), persists when `persist`,
  // notifies listeners.
  void Update(Runtime& rt, const std::function<void(JobRecord&)>& change, bool persist);
  void Finish(Runtime& rt, JobPhase phase, const std::string& error);
  void Notify(const std::string& id, const JobRecord& record, int64_t version);
  // The DDP-bucket baseline of `job`'s training graph as the rolled-back
  // entry replacing `served` (digest `served_digest`); nullopt when that
  // baseline is the served plan itself.
  absl::StatusOr<std::optional<PlanRecord>> RollBackPlan(const JobRecord& job,
                                                        const PlanRecord& served,
                                                        const std::string& served_digest,
                                                        const std::string& reason);

  Store* store_;
  costmodel::ProfileStore* profiles_;
  TaskQueue* tasks_;
  JobManagerOptions options_;
  PlanCache cache_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Runtime>> active_;  // queued or running
  std::deque<std::string> queue_;
  bool stopping_ = false;
  std::atomic<bool> stop_searches_{false};
  std::vector<std::thread> runners_;

  std::mutex listeners_mu_;
  int64_t next_subscription_ = 1;
  std::map<int64_t, std::pair<std::string, Listener>> listeners_;
  std::map<int64_t, Listener> all_listeners_;

  std::unique_ptr<FeedbackManager> feedback_;

  std::atomic<int64_t> changes_{0};
  std::atomic<int64_t> candidates_total_{0};
  std::atomic<int64_t> cache_hits_{0};
  std::atomic<int64_t> cache_misses_{0};
};

}  // namespace braid::server

#endif  // BRAID_SERVER_JOB_MANAGER_H_
