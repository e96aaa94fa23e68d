// The server's durable state in one SQLite file (WAL mode, numbered
// migrations, base/sqlite.h wrappers): imported graphs, clusters, jobs
// with their search checkpoints, cached plans (and their rollbacks),
// profiling tasks, workers, and the iteration times training ranks measured.
//
// Measured profiles are NOT here: they live in the profile store
// (costmodel/profile_store.h), which migrates its own schema with the same
// `schema_version` table name, so it gets its own file (the server's
// --profile-db, default "<db>.profiles"). Two migration lists in one file
// would clash on that table.
//
//   absl::StatusOr<std::unique_ptr<Store>> store = Store::Open("/var/lib/braid/jobs.db");
//   RETURN_IF_ERROR((*store)->InsertJob(job, forward_text, cluster_json));
//   absl::StatusOr<JobRecord> j = (*store)->GetJob(job.id);
//
// Thread-safe: one connection guarded by one mutex (calls are short).
#ifndef BRAID_SERVER_STORE_H_
#define BRAID_SERVER_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/sqlite.h"

namespace braid::server {

enum class JobPhase : uint8_t {
  kQueued,
  kImporting,
  kProfiling,
  kSearching,
  kDone,
  kFailed,
  kCancelled
};
std::string_view JobPhaseName(JobPhase p);  // "queued", "importing", ...
absl::StatusOr<JobPhase> ParseJobPhase(std::string_view name);
bool IsFinal(JobPhase p);  // done, failed or cancelled

// Search options after defaults were applied.
struct JobOptions {
  double alpha = 1.05;
  int beta = 10;
  uint64_t seed = 0;
  double budget_s = 60;
  int ranks = 0;  // 0: the cluster's num_ranks
  int patience = 1000;
  int batch = 0;  // 0: the model's default
  bool op_fusion = true;  // false: buckets only (search::RunBucketOnlySearch)
  // true: the parallelization is chosen too (search::PlanParallel); the plan
  // then names the per-device training graph (ParallelSection).
  bool parallel = false;
  // With parallel: the plan of this strategy row instead of the fastest
  // (search::ParallelPlanOptions::strategy_row); "" = the fastest.
  std::string strategy_row;
  // With parallel: no pipeline rows (the service plans none anyway).
  bool no_pipeline = false;
  // With parallel: the per-device program normalizes training-mode
  // BatchNormalization with whole-batch statistics
  // (search::LoweringOptions::sync_batch_norm).
  bool sync_batch_norm = false;

  bool operator==(const JobOptions&) const = default;
};
// Canonical JSON text (fixed key order, doubles with %.17g): the options part
// of the plan-cache key and the jobs.options column.
std::string JobOptionsToJson(const JobOptions& o);
absl::StatusOr<JobOptions> JobOptionsFromJson(std::string_view text);

// The per-device side of a parallel plan (JobOptions::parallel): the chosen
// strategy, the per-device forward graph the plan's groups and buckets refer
// to (through search::BuildPerDeviceTraining, whose fingerprint is
// training_fingerprint) and the plan's "parallel" JSON
// (search::ParallelPlanJson plus "strategies": every row's simulated time,
// and "grad_group": each parameter's gradient AllReduce group), with the
// chosen row's per-device program (graph::ProgramToJson text) or why the
// lowering refused the row. Kept with the cached plan (so a cache hit
// restores it) and per job.
struct ParallelSection {
  std::string strategy;
  int degree = 0;        // devices
  int data_degree = 0;   // the largest gradient group
  int model_degree = 0;  // degree / data_degree
  std::string forward_text;          // graph/text_format.h
  std::string training_fingerprint;  // 16 hex digits
  std::string json;
  // Both empty for sections stored before programs were kept.
  std::string program_json;   // canonical graph::ProgramToJson text
  std::string program_error;  // why the row has no program

  bool operator==(const ParallelSection&) const = default;
};

struct JobRecord {
  std::string id;
  int64_t seq = 0;  // submission order, assigned by InsertJob
  std::string name;
  std::string forward_fingerprint;  // graphs key: the imported forward graph
  std::string cluster_fingerprint;  // clusters key: the spec with ranks applied
  JobOptions options;
  JobPhase phase = JobPhase::kQueued;
  std::string error;
  // Search checkpoint (progress callback).
  double best_cost_s = 0;
  int64_t candidates = 0;
  double elapsed_s = 0;
  std::string graph_fingerprint;  // training graph; set once imported
  std::string plan_key;           // plans key; set when done
  bool from_cache = false;
  bool recosted = false;  // the cached plan was re-costed under a newer generation
  int resumed = 0;  // restarts survived
  int64_t created_unix_s = 0;
  // Runs that started and never ended in a controlled way: the process
  // crashed or was killed while running the job (JobManager fails a job
  // instead of resuming it once this reaches max_interrupted_runs).
  int interrupted_runs = 0;
  // What the training ranks measured (ReportMeasurement) for the plan they
  // reported last; 0: nothing reported. Written only by SaveFeedback
  // (UpdateJob leaves them alone).
  double measured_predicted_s = 0;
  double measured_s = 0;           // median over iterations of the slowest rank
  double measured_baseline_s = 0;  // same for the DDP-bucket baseline; 0: not measured
  // Read from the job's plan (PlanRecord::rolled_back ...), never written
  // through the job.
  bool rolled_back = false;
  std::string rollback_reason;
  std::string rollback_job;
  // A parallel job's chosen strategy and degrees once planned (read from
  // its ParallelSection, never written through the job); "" / 0 otherwise.
  std::string parallel_strategy;
  int parallel_data_degree = 0;
  int parallel_model_degree = 0;
  // The job's report credential, set by JobManager::Submit for its answer
  // only: the store keeps its SHA-256, never the credential.
  std::string report_credential;
};

struct PlanRecord {
  std::string key;  // PlanCacheKey(): graph, cluster and options
  std::string generation;  // cost-model Generation() the costs come from
  std::string plan_json;
  double predicted_s = 0;
  std::string origin;
  std::string baselines_json;  // [{"name", "iteration_s", "compute_s", "comm_s", "overlap_ratio"}]
  double fo_bound_s = 0;
  // The plan's predicted compute and comm busy times; -1: stored before
  // they were kept.
  double compute_s = -1;
  double comm_s = -1;
  // The DDP-bucket baseline's buckets, [["grad", ...], ...] (what the
  // activator measures the plan against); "": not known.
  std::string ddp_buckets_json;
  // The searched plan was measured slower than the DDP-bucket baseline on
  // `rollback_job`'s ranks; the plan above is that baseline since.
  bool rolled_back = false;
  std::string rollback_reason;
  std::string rollback_job;
  std::string rolled_back_from;          // PlanDigest of the replaced plan
  double rolled_back_predicted_s = 0;    // its predicted iteration time
  // Set for a parallel plan: the groups and buckets above name its
  // per-device training graph.
  std::optional<ParallelSection> parallel;
  // Shares of the plan's predicted compute time by source:
  // {"measured", "gnn", "corrected_roofline", "prior"} (CostSourcesJson);
  // "" when not known.
  std::string cost_sources_json;
};

// One run of a job's plan on its training ranks (Strategy.StartRun): every
// rank of the run reports under its attempt id.
struct RunAttempt {
  std::string attempt_id;
  std::string job_id;
  int world_size = 0;
  std::string started_by;  // who asked for it (audit)
  double created_unix_s = 0;
};

// One training rank's report of a plan's iteration times (ReportMeasurement),
// validated: stored once per (job, plan, attempt, rank).
struct RankReport {
  std::string job_id;
  std::string plan_sha256;
  std::string attempt_id;
  int rank = 0;
  int world_size = 1;
  std::vector<double> plan_s;
  std::vector<double> baseline_s;  // empty, or paired with plan_s
  std::string source;
  double reported_unix_s = 0;
};

// The ranks of one run (job, plan, attempt) folded together as they report,
// so that a report reads one row however many came before it. An iteration
// of data-parallel training ends when its slowest rank does: per iteration
// index the value is the maximum over the reported ranks, over the
// iterations every one of them reported (the shortest report's length).
struct RunAggregate {
  int world_size = 0;
  int ranks_reported = 0;
  int baseline_ranks = 0;            // ranks that also measured the baseline
  std::vector<double> plan_max;      // per iteration
  std::vector<double> baseline_max;  // same; meaningful when baseline_ranks == ranks_reported

  // Folds one rank's times in.
  void Add(const std::vector<double>& plan_s, const std::vector<double>& baseline_s);
};

// The aggregate of a (job, plan)'s rank reports: one value per measured
// plan for the cluster's calibration (plan_feedback.h).
struct MeasuredPlan {
  std::string job_id;
  std::string plan_sha256;
  std::string cluster_fingerprint;
  double predicted_s = 0;
  double measured_s = 0;
  double baseline_s = 0;  // 0: not measured
  int ranks_reported = 0;
  int world_size = 0;
  bool rolled_back = false;  // the plan was rolled back: not a calibration sample
  // The job's kind (plan_feedback.h JobKind): calibration is per cluster and kind.
  std::string job_kind;
  // measured / predicted within the plausible range (plan_feedback.h): only
  // plausible plans calibrate the cluster; the others count for their job.
  bool plausible = true;
};

// A plan rolled back to the DDP-bucket baseline, for one job ("job": the
// job's plan_key moved to a private entry, the shared cache entry untouched)
// or for the shared plan-cache entry ("shared": the entry replaced, the plan
// it held kept under `saved_key` so a restore can put it back).
struct RollbackRecord {
  std::string id;
  std::string job_id;
  std::string scope;       // "job" or "shared"
  std::string shared_key;  // the plan-cache key of the replaced plan
  std::string job_key;     // "job": the job's private entry
  std::string saved_key;   // "shared": where the replaced entry is kept
  std::string replaced_sha256;
  std::string credential_sha256;  // of the job whose ranks measured it ("job")
  std::string reason;
  std::string actor;
  double created_unix_s = 0;
  double restored_unix_s = 0;  // 0: in effect
  std::string restored_by;
};

struct AuditEntry {
  double at_unix_s = 0;
  std::string actor;
  std::string action;
  std::string job_id;
  std::string detail;
};

enum class TaskState : uint8_t { kQueued, kLeased, kDone, kFailed };
std::string_view TaskStateName(TaskState s);

struct TaskRecord {
  std::string id;
  std::string device_kind;
  std::string op_type;
  std::string signature;
  std::string shapes_json;  // {"inputs": [[dtype, [dims]]...], "outputs": [...]}
  std::string op_graph_text;
  TaskState state = TaskState::kQueued;
  std::string worker_id;
  std::string lease_id;
  double lease_deadline_unix_s = 0;
  int attempts = 0;
  std::string error;
};

struct WorkerRecord {
  std::string id;
  std::string name;
  std::string device_kind;
  int slots = 1;
  double last_heartbeat_unix_s = 0;
};

class Store {
 public:
  // ":memory:" gives a private in-memory store (tests).
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  // The numbered migrations, for tests.
  static std::span<const base::sql::Migration> Migrations();

  // --- Jobs. InsertJob stores the graph, the cluster and the job (and its
  // parallel section when given) in one transaction and sets job->seq. ---
  // `credential_sha256`: of the job's report credential (JobCredentialSha256).
  absl::Status InsertJob(JobRecord* job, std::string_view forward_text,
                         std::string_view cluster_json,
                         const ParallelSection* parallel = nullptr,
                         std::string_view credential_sha256 = {});
  absl::Status UpdateJob(const JobRecord& job);
  // The best plan of a running search (JSON, search::PlanToJson), kept so an
  // interrupted job resumes from it; "" when none was saved.
  absl::Status SaveCheckpointPlan(const std::string& job_id, const std::string& plan_json);
  absl::StatusOr<std::string> CheckpointPlan(const std::string& job_id);
  absl::StatusOr<JobRecord> GetJob(const std::string& id);  // NotFound naming the id
  absl::StatusOr<std::vector<JobRecord>> ListJobs(int limit);  // newest first
  absl::StatusOr<std::vector<JobRecord>> UnfinishedJobs();     // oldest first
  absl::StatusOr<std::string> GetGraphText(const std::string& forward_fingerprint);
  absl::StatusOr<std::string> GetClusterJson(const std::string& cluster_fingerprint);
  // A parallel job's section (insert or replace); nullopt when it has none.
  absl::Status PutJobParallel(const std::string& job_id, const ParallelSection& parallel);
  absl::StatusOr<std::optional<ParallelSection>> GetJobParallel(const std::string& job_id);

  // --- Plans. ---
  absl::Status PutPlan(const PlanRecord& plan);  // insert or replace
  absl::StatusOr<std::optional<PlanRecord>> GetPlan(const std::string& key);

  // --- Measured feedback (ReportMeasurement; server/feedback.h). ---
  // SHA-256 (hex) of the job's report credential; "" for a job without one.
  absl::StatusOr<std::string> JobCredentialSha256(const std::string& job_id);
  // Inserts the attempt unless the job has `max_attempts` already
  // (ResourceExhausted); first deletes the job's runs older than
  // `retain_after_unix_s` (their rank reports and aggregates).
  absl::Status InsertAttempt(const RunAttempt& attempt, int max_attempts,
                             double retain_after_unix_s);
  absl::StatusOr<std::optional<RunAttempt>> GetAttempt(const std::string& attempt_id);
  // Stores the rank's report and folds it into its run's aggregate, in one
  // transaction; AlreadyExists when the rank reported this (job, plan,
  // attempt) before. Returns the aggregate after the report.
  absl::StatusOr<RunAggregate> AddRankReport(const RankReport& report);
  // Rank reports stored for a run (tests and storage bounds).
  absl::StatusOr<int64_t> CountRankReports(const std::string& job_id);
  // In one transaction: the (job, plan) aggregate and the job's measured figures.
  absl::Status SaveFeedback(const MeasuredPlan& measured);
  // The newest `limit` plausible, not rolled back measured plans of a
  // cluster and job kind (the calibration's samples).
  absl::StatusOr<std::vector<MeasuredPlan>> CalibrationSamples(
      const std::string& cluster_fingerprint, const std::string& job_kind, int limit);
  // In one transaction: `plan` stored (PutPlan), `job_id`'s plan key set to
  // `job_plan_key` when not empty, the rollback row and its audit entry, and
  // the measured aggregates of the replaced plan of that job marked rolled
  // back. For a shared rollback, `saved` (the replaced entry under
  // rollback.saved_key) is stored too.
  absl::Status SaveRollback(const RollbackRecord& rollback, const PlanRecord& plan,
                            const std::string& job_plan_key, const PlanRecord* saved);
  // Rollbacks in effect or not, newest first; `job_id` "" for every job.
  absl::StatusOr<std::vector<RollbackRecord>> Rollbacks(const std::string& job_id, int limit);
  // Every rollback (any scope, in effect or not) of `replaced_sha256` under
  // `shared_key`.
  absl::StatusOr<std::vector<RollbackRecord>> RollbacksOfPlan(const std::string& shared_key,
                                                              const std::string& replaced_sha256);
  // The distinct credentials of jobs whose own rollbacks of `replaced_sha256`
  // under `shared_key` are in effect.
  absl::StatusOr<int> CountJobRollbackCredentials(const std::string& shared_key,
                                                  const std::string& replaced_sha256);
  // Undoes a rollback in one transaction: marks it restored, puts back what
  // it replaced (a job's plan key, or the shared entry from saved_key), and
  // unmarks the replaced plan's measured aggregates; with the audit entry.
  absl::Status RestoreRollback(const RollbackRecord& rollback, const std::string& restored_by,
                               const AuditEntry& audit);
  absl::Status AppendAudit(const AuditEntry& entry);
  absl::StatusOr<std::vector<AuditEntry>> Audit(const std::string& job_id, int limit);

  // --- Tasks. ---
  // Inserts a queued task unless one with the same (device kind, op type,
  // signature) exists; returns whether it was inserted.
  absl::StatusOr<bool> InsertTaskIfAbsent(const TaskRecord& task);
  absl::StatusOr<TaskRecord> GetTask(const std::string& id);
  // Leases up to `max` queued tasks of `device_kind`, oldest first.
  absl::StatusOr<std::vector<TaskRecord>> LeaseTasks(const std::string& device_kind,
                                                     const std::string& worker_id, int max,
                                                     double deadline_unix_s);
  // Leased tasks whose deadline is before `now` (all leased tasks when `now`
  // is +inf) go back to the queue; returns how many.
  absl::StatusOr<int> RequeueExpired(double now_unix_s);
  absl::Status UpdateTask(const TaskRecord& task);
  absl::StatusOr<int> CountTasks(TaskState state);

  // --- Workers. ---
  absl::Status UpsertWorker(const WorkerRecord& w);
  absl::StatusOr<std::optional<WorkerRecord>> GetWorker(const std::string& id);
  // Device kinds with a worker whose heartbeat is at or after `since`.
  absl::StatusOr<std::vector<std::string>> LiveDeviceKinds(double since_unix_s);
  // Every registered worker, newest heartbeat first (the status page).
  absl::StatusOr<std::vector<WorkerRecord>> ListWorkers();
  // Number of jobs per phase (phases without jobs are absent).
  absl::StatusOr<std::vector<std::pair<JobPhase, int64_t>>> CountJobsByPhase();

 private:
  explicit Store(base::sql::Database db) : db_(std::move(db)) {}
  absl::StatusOr<std::vector<JobRecord>> QueryJobs(std::string_view where_and_order, int limit);

  std::mutex mu_;
  base::sql::Database db_;
};

// A random identifier: prefix + 16 hex digits.
std::string RandomId(std::string_view prefix);
double NowUnixSeconds();

}  // namespace braid::server

#endif  // BRAID_SERVER_STORE_H_
