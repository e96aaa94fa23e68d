#include "server/store.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/internal/store_rows.h"

namespace braid::server {

namespace sql = base::sql;

namespace {

// Numbered schema migrations; append only, never edit a released one.
constexpr sql::Migration kMigrations[] = {
    {1,
     "CREATE TABLE graphs("
     "  fingerprint TEXT PRIMARY KEY,"  // forward graph, graph/fingerprint.h
     "  text TEXT NOT NULL,"             // braid text format (round-trips exactly)
     "  created_at INTEGER NOT NULL);"
     "CREATE TABLE clusters("
     "  fingerprint TEXT PRIMARY KEY,"  // costmodel ClusterFingerprint
     "  json TEXT NOT NULL);"
     "CREATE TABLE jobs("
     "  id TEXT PRIMARY KEY,"
     "  seq INTEGER NOT NULL UNIQUE,"
     "  name TEXT NOT NULL,"
     "  forward_fingerprint TEXT NOT NULL REFERENCES graphs(fingerprint),"
     "  cluster_fingerprint TEXT NOT NULL REFERENCES clusters(fingerprint),"
     "  options TEXT NOT NULL,"
     "  phase TEXT NOT NULL,"
     "  error TEXT NOT NULL,"
     "  best_cost_s REAL NOT NULL,"
     "  candidates INTEGER NOT NULL,"
     "  elapsed_s REAL NOT NULL,"
     "  graph_fingerprint TEXT NOT NULL,"
     "  plan_key TEXT NOT NULL,"
     "  from_cache INTEGER NOT NULL,"
     "  recosted INTEGER NOT NULL,"
     "  resumed INTEGER NOT NULL,"
     "  created_at INTEGER NOT NULL,"
     "  updated_at INTEGER NOT NULL);"
     "CREATE INDEX jobs_phase ON jobs(phase);"
     "CREATE TABLE plans("
     "  key TEXT PRIMARY KEY,"
     "  generation TEXT NOT NULL,"
     "  plan_json TEXT NOT NULL,"
     "  predicted_s REAL NOT NULL,"
     "  origin TEXT NOT NULL,"
     "  baselines_json TEXT NOT NULL,"
     "  fo_bound_s REAL NOT NULL,"
     "  updated_at INTEGER NOT NULL);"},
    {2,
     "CREATE TABLE workers("
     "  id TEXT PRIMARY KEY,"
     "  name TEXT NOT NULL,"
     "  device_kind TEXT NOT NULL,"
     "  slots INTEGER NOT NULL,"
     "  last_heartbeat REAL NOT NULL);"
     "CREATE TABLE tasks("
     "  id TEXT PRIMARY KEY,"
     "  device_kind TEXT NOT NULL,"
     "  op_type TEXT NOT NULL,"
     "  signature TEXT NOT NULL,"
     "  shapes_json TEXT NOT NULL,"
     "  op_graph_text TEXT NOT NULL,"
     "  state TEXT NOT NULL,"
     "  worker_id TEXT NOT NULL,"
     "  lease_id TEXT NOT NULL,"
     "  lease_deadline REAL NOT NULL,"
     "  attempts INTEGER NOT NULL,"
     "  error TEXT NOT NULL,"
     "  created_seq INTEGER NOT NULL,"
     "  UNIQUE(device_kind, op_type, signature));"
     "CREATE INDEX tasks_queue ON tasks(state, device_kind, created_seq);"},
    {3,
     // The best plan a running search has found so far: an interrupted job
     // resumes its search from it (search::SearchConfig::initial_plans).
     "ALTER TABLE jobs ADD COLUMN checkpoint_plan TEXT NOT NULL DEFAULT '';"},
    {4,
     // Runs of the job that started and never ended in a controlled way (the
     // process crashed or was killed while running it): past a limit the
     // job fails instead of being resumed into the same crash.
     "ALTER TABLE jobs ADD COLUMN interrupted_runs INTEGER NOT NULL DEFAULT 0;"},
    {5,
     // The plan's predicted compute and comm busy times (the braid row of
     // `braid submit`; -1: a plan stored before them), and the DDP-bucket
     // baseline's buckets the activator measures the plan against.
     "ALTER TABLE plans ADD COLUMN compute_s REAL NOT NULL DEFAULT -1;"
     "ALTER TABLE plans ADD COLUMN comm_s REAL NOT NULL DEFAULT -1;"
     "ALTER TABLE plans ADD COLUMN ddp_buckets_json TEXT NOT NULL DEFAULT '';"},
    {6,
     // Measured feedback (ReportMeasurement): each rank's iteration times per
     // (job, plan digest), their aggregate per (job, plan) for the cluster's
     // calibration, the job's latest figures, and the rollback of a cached
     // plan measured slower than the DDP-bucket baseline.
     "CREATE TABLE measurements("
     "  job_id TEXT NOT NULL REFERENCES jobs(id),"
     "  plan_sha256 TEXT NOT NULL,"
     "  rank INTEGER NOT NULL,"
     "  world_size INTEGER NOT NULL,"
     "  plan_times TEXT NOT NULL,"      // JSON array of seconds per iteration
     "  baseline_times TEXT NOT NULL,"  // same, paired; [] when not measured
     "  source TEXT NOT NULL,"
     "  reported_at REAL NOT NULL,"
     "  PRIMARY KEY(job_id, plan_sha256, rank));"
     "CREATE TABLE measured_plans("
     "  job_id TEXT NOT NULL REFERENCES jobs(id),"
     "  plan_sha256 TEXT NOT NULL,"
     "  cluster_fingerprint TEXT NOT NULL,"
     "  predicted_s REAL NOT NULL,"
     "  measured_s REAL NOT NULL,"
     "  baseline_s REAL NOT NULL,"
     "  ranks_reported INTEGER NOT NULL,"
     "  world_size INTEGER NOT NULL,"
     "  rolled_back INTEGER NOT NULL,"
     "  updated_at REAL NOT NULL,"
     "  PRIMARY KEY(job_id, plan_sha256));"
     "CREATE INDEX measured_plans_cluster ON measured_plans(cluster_fingerprint);"
     "ALTER TABLE jobs ADD COLUMN measured_predicted_s REAL NOT NULL DEFAULT 0;"
     "ALTER TABLE jobs ADD COLUMN measured_s REAL NOT NULL DEFAULT 0;"
     "ALTER TABLE jobs ADD COLUMN measured_baseline_s REAL NOT NULL DEFAULT 0;"
     "ALTER TABLE plans ADD COLUMN rolled_back INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE plans ADD COLUMN rollback_reason TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE plans ADD COLUMN rollback_job TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE plans ADD COLUMN rolled_back_from TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE plans ADD COLUMN rolled_back_predicted_s REAL NOT NULL DEFAULT 0;"},
    {7,
     // Parallel plans (JobOptions::parallel): the per-device side of a
     // cached plan (so a cache hit restores it) and of each parallel job
     // (what its training graph is rebuilt from: the per-device forward
     // graph with ranks = data_degree). parallel_json '' = not parallel.
     "ALTER TABLE plans ADD COLUMN parallel_strategy TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE plans ADD COLUMN parallel_degree INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE plans ADD COLUMN parallel_data_degree INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE plans ADD COLUMN parallel_model_degree INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE plans ADD COLUMN parallel_forward_text TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE plans ADD COLUMN parallel_training_fingerprint TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE plans ADD COLUMN parallel_json TEXT NOT NULL DEFAULT '';"
     "CREATE TABLE job_parallel("
     "  job_id TEXT PRIMARY KEY REFERENCES jobs(id),"
     "  strategy TEXT NOT NULL,"
     "  degree INTEGER NOT NULL,"
     "  data_degree INTEGER NOT NULL,"
     "  model_degree INTEGER NOT NULL,"
     "  forward_text TEXT NOT NULL,"          // per-device forward graph, text format
     "  training_fingerprint TEXT NOT NULL,"  // its training graph (ranks = data_degree)
     "  json TEXT NOT NULL,"                  // the plan's "parallel" JSON
     "  updated_at INTEGER NOT NULL);"},
    {8,
     // Trusted feedback (server/feedback.h): each job's report credential
     // (its SHA-256), runs (attempts) of a plan on the job's ranks, one
     // bounded summary per (job, plan, attempt, rank) and the run's
     // aggregate folded as ranks report (per-rank iteration arrays are no
     // longer kept), the job kind and plausibility of each measured plan
     // (calibration), rollbacks per job or of the shared entry, and the
     // audit log of rollbacks and restores.
     "ALTER TABLE jobs ADD COLUMN report_credential_sha256 TEXT NOT NULL DEFAULT '';"
     "DROP TABLE measurements;"
     "CREATE TABLE run_attempts("
     "  attempt_id TEXT PRIMARY KEY,"
     "  job_id TEXT NOT NULL REFERENCES jobs(id),"
     "  world_size INTEGER NOT NULL,"
     "  started_by TEXT NOT NULL,"
     "  created_at REAL NOT NULL);"
     "CREATE INDEX run_attempts_job ON run_attempts(job_id, created_at);"
     "CREATE TABLE rank_reports("
     "  job_id TEXT NOT NULL REFERENCES jobs(id),"
     "  plan_sha256 TEXT NOT NULL,"
     "  attempt_id TEXT NOT NULL,"
     "  rank INTEGER NOT NULL,"
     "  iterations INTEGER NOT NULL,"
     "  plan_median_s REAL NOT NULL,"
     "  baseline_median_s REAL NOT NULL,"  // 0: not measured
     "  source TEXT NOT NULL,"
     "  reported_at REAL NOT NULL,"
     "  PRIMARY KEY(job_id, plan_sha256, attempt_id, rank));"
     "CREATE TABLE run_aggregates("
     "  job_id TEXT NOT NULL REFERENCES jobs(id),"
     "  plan_sha256 TEXT NOT NULL,"
     "  attempt_id TEXT NOT NULL,"
     "  world_size INTEGER NOT NULL,"
     "  ranks_reported INTEGER NOT NULL,"
     "  baseline_ranks INTEGER NOT NULL,"
     "  plan_max TEXT NOT NULL,"      // JSON array, seconds per iteration
     "  baseline_max TEXT NOT NULL,"  // same
     "  updated_at REAL NOT NULL,"
     "  PRIMARY KEY(job_id, plan_sha256, attempt_id));"
     "ALTER TABLE measured_plans ADD COLUMN job_kind TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE measured_plans ADD COLUMN plausible INTEGER NOT NULL DEFAULT 1;"
     "CREATE INDEX measured_plans_calibration "
     "  ON measured_plans(cluster_fingerprint, job_kind, updated_at);"
     "CREATE TABLE rollbacks("
     "  id TEXT PRIMARY KEY,"
     "  job_id TEXT NOT NULL,"
     "  scope TEXT NOT NULL,"  // "job" or "shared"
     "  shared_key TEXT NOT NULL,"
     "  job_key TEXT NOT NULL,"
     "  saved_key TEXT NOT NULL,"
     "  replaced_sha256 TEXT NOT NULL,"
     "  credential_sha256 TEXT NOT NULL,"
     "  reason TEXT NOT NULL,"
     "  actor TEXT NOT NULL,"
     "  created_at REAL NOT NULL,"
     "  restored_at REAL NOT NULL DEFAULT 0,"
     "  restored_by TEXT NOT NULL DEFAULT '');"
     "CREATE INDEX rollbacks_job ON rollbacks(job_id, created_at);"
     "CREATE INDEX rollbacks_shared ON rollbacks(shared_key, replaced_sha256);"
     "CREATE TABLE audit_log("
     "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
     "  at REAL NOT NULL,"
     "  actor TEXT NOT NULL,"
     "  action TEXT NOT NULL,"
     "  job_id TEXT NOT NULL,"
     "  detail TEXT NOT NULL);"},
    {9,
     // Where each plan's predicted compute time comes from (measured, GNN,
     // corrected roofline, prior shares; "" for plans stored before).
     "ALTER TABLE plans ADD COLUMN cost_sources_json TEXT NOT NULL DEFAULT '';"},
    {10,
     // The per-device program of a parallel plan's row (graph/program.h,
     // canonical JSON text) or why the lowering refused the row, with the
     // cached plan and with each parallel job. '' and '' for sections
     // stored before: a cache entry without either is planned again.
     "ALTER TABLE plans ADD COLUMN parallel_program_json TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE plans ADD COLUMN parallel_program_error TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE job_parallel ADD COLUMN program_json TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE job_parallel ADD COLUMN program_error TEXT NOT NULL DEFAULT '';"},
};

constexpr std::string_view kPhaseNames[] = {"queued",    "importing", "profiling", "searching",
                                            "done",      "failed",    "cancelled"};
constexpr std::string_view kTaskStateNames[] = {"queued", "leased", "done", "failed"};

absl::StatusOr<TaskState> ParseTaskState(std::string_view s) {
  for (size_t i = 0; i < std::size(kTaskStateNames); ++i) {
    if (kTaskStateNames[i] == s) return static_cast<TaskState>(i);
  }
  return absl::DataLossError(absl::StrCat("tasks.state: unknown value '", std::string(s), "'"));
}

constexpr char kJobColumns[] =
    "id, seq, name, forward_fingerprint, cluster_fingerprint, options, phase, error, "
    "best_cost_s, candidates, elapsed_s, graph_fingerprint, plan_key, from_cache, recosted, "
    "resumed, created_at, interrupted_runs";

// kJobColumns read back, with the measured figures and the rollback state
// of the job's plan (jobs LEFT JOIN plans): append a WHERE/ORDER clause.
constexpr char kJobSelect[] =
    "SELECT jobs.id, jobs.seq, jobs.name, jobs.forward_fingerprint, jobs.cluster_fingerprint, "
    "jobs.options, jobs.phase, jobs.error, jobs.best_cost_s, jobs.candidates, jobs.elapsed_s, "
    "jobs.graph_fingerprint, jobs.plan_key, jobs.from_cache, jobs.recosted, jobs.resumed, "
    "jobs.created_at, jobs.interrupted_runs, jobs.measured_predicted_s, jobs.measured_s, "
    "jobs.measured_baseline_s, COALESCE(plans.rolled_back, 0), COALESCE(plans.rollback_reason, ''), "
    "COALESCE(plans.rollback_job, ''), COALESCE(job_parallel.strategy, ''), "
    "COALESCE(job_parallel.data_degree, 0), COALESCE(job_parallel.model_degree, 0) "
    "FROM jobs LEFT JOIN plans ON plans.key = jobs.plan_key "
    "LEFT JOIN job_parallel ON job_parallel.job_id = jobs.id ";

absl::StatusOr<JobRecord> ReadJob(const sql::Statement& st) {
  JobRecord j;
  j.id = st.ColumnText(0);
  j.seq = st.ColumnInt64(1);
  j.name = st.ColumnText(2);
  j.forward_fingerprint = st.ColumnText(3);
  j.cluster_fingerprint = st.ColumnText(4);
  ASSIGN_OR_RETURN(JobOptions o, JobOptionsFromJson(st.ColumnText(5)));
  j.options = o;
  absl::StatusOr<JobPhase> p = ParseJobPhase(st.ColumnText(6));
  if (!p.ok()) return absl::DataLossError(absl::StrCat("jobs.phase of ", j.id, ": ", p.status().message()));
  j.phase = *p;
  j.error = st.ColumnText(7);
  j.best_cost_s = st.ColumnDouble(8);
  j.candidates = st.ColumnInt64(9);
  j.elapsed_s = st.ColumnDouble(10);
  j.graph_fingerprint = st.ColumnText(11);
  j.plan_key = st.ColumnText(12);
  j.from_cache = st.ColumnInt64(13) != 0;
  j.recosted = st.ColumnInt64(14) != 0;
  j.resumed = static_cast<int>(st.ColumnInt64(15));
  j.created_unix_s = st.ColumnInt64(16);
  j.interrupted_runs = static_cast<int>(st.ColumnInt64(17));
  j.measured_predicted_s = st.ColumnDouble(18);
  j.measured_s = st.ColumnDouble(19);
  j.measured_baseline_s = st.ColumnDouble(20);
  j.rolled_back = st.ColumnInt64(21) != 0;
  j.rollback_reason = st.ColumnText(22);
  j.rollback_job = st.ColumnText(23);
  j.parallel_strategy = st.ColumnText(24);
  j.parallel_data_degree = static_cast<int>(st.ColumnInt64(25));
  j.parallel_model_degree = static_cast<int>(st.ColumnInt64(26));
  return j;
}

constexpr char kTaskColumns[] =
    "id, device_kind, op_type, signature, shapes_json, op_graph_text, state, worker_id, "
    "lease_id, lease_deadline, attempts, error";

absl::StatusOr<TaskRecord> ReadTask(const sql::Statement& st) {
  TaskRecord t;
  t.id = st.ColumnText(0);
  t.device_kind = st.ColumnText(1);
  t.op_type = st.ColumnText(2);
  t.signature = st.ColumnText(3);
  t.shapes_json = st.ColumnText(4);
  t.op_graph_text = st.ColumnText(5);
  ASSIGN_OR_RETURN(TaskState s, ParseTaskState(st.ColumnText(6)));
  t.state = s;
  t.worker_id = st.ColumnText(7);
  t.lease_id = st.ColumnText(8);
  t.lease_deadline_unix_s = st.ColumnDouble(9);
  t.attempts = static_cast<int>(st.ColumnInt64(10));
  t.error = st.ColumnText(11);
  return t;
}

int64_t NowInt() { return static_cast<int64_t>(NowUnixSeconds()); }

}  // namespace

std::string_view JobPhaseName(JobPhase p) { return kPhaseNames[static_cast<int>(p)]; }

absl::StatusOr<JobPhase> ParseJobPhase(std::string_view name) {
  for (size_t i = 0; i < std::size(kPhaseNames); ++i) {
    if (kPhaseNames[i] == name) return static_cast<JobPhase>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown job phase '", std::string(name), "'"));
}

bool IsFinal(JobPhase p) {
  return p == JobPhase::kDone || p == JobPhase::kFailed || p == JobPhase::kCancelled;
}

std::string_view TaskStateName(TaskState s) { return kTaskStateNames[static_cast<int>(s)]; }

std::string JobOptionsToJson(const JobOptions& o) {
  // %.17g keeps doubles exact; keys in a fixed order make the text canonical.
  // "no_pipeline", "op_fusion", "parallel", "strategy_row" and
  // "sync_batch_norm" only when not their defaults: the keys of jobs and
  // cached plans from before they existed stay the same.
  return absl::StrFormat(
      R"({"alpha":%.17g,"batch":%d,"beta":%d,"budget_s":%.17g,%s%s%s"patience":%d,"ranks":%d,"seed":%d%s%s})",
      o.alpha, o.batch, o.beta, o.budget_s, o.no_pipeline ? R"("no_pipeline":true,)" : "",
      o.op_fusion ? "" : R"("op_fusion":false,)", o.parallel ? R"("parallel":true,)" : "",
      o.patience, o.ranks, o.seed,
      o.strategy_row.empty()
          ? std::string()
          : absl::StrCat(R"(,"strategy_row":)", nlohmann::json(o.strategy_row).dump()),
      o.sync_batch_norm ? R"(,"sync_batch_norm":true)" : "");
}

absl::StatusOr<JobOptions> JobOptionsFromJson(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::DataLossError(absl::StrCat("job options are not a JSON object: ", std::string(text)));
  }
  JobOptions o;
  try {
    o.alpha = j.at("alpha").get<double>();
    o.batch = j.at("batch").get<int>();
    o.beta = j.at("beta").get<int>();
    o.budget_s = j.at("budget_s").get<double>();
    o.patience = j.at("patience").get<int>();
    o.ranks = j.at("ranks").get<int>();
    o.seed = j.at("seed").get<uint64_t>();
    o.op_fusion = j.value("op_fusion", true);
    o.parallel = j.value("parallel", false);
    o.no_pipeline = j.value("no_pipeline", false);
    o.strategy_row = j.value("strategy_row", std::string());
    o.sync_batch_norm = j.value("sync_batch_norm", false);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("job options: ", e.what()));
  }
  return o;
}

std::string RandomId(std::string_view prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return absl::StrFormat("%s%016x", std::string(prefix), rng());
}

double NowUnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::span<const sql::Migration> Store::Migrations() { return kMigrations; }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  ASSIGN_OR_RETURN(sql::Database db, sql::Database::Open(path));
  RETURN_IF_ERROR(db.Execute("PRAGMA foreign_keys=ON"));
  RETURN_IF_ERROR(sql::Migrate(db, kMigrations));
  return std::unique_ptr<Store>(new Store(std::move(db)));
}

namespace {

absl::Status PutJobParallelLocked(sql::Database& db, const std::string& job_id,
                                  const ParallelSection& p) {
  ASSIGN_OR_RETURN(
      sql::Statement st,
      db.Prepare("INSERT OR REPLACE INTO job_parallel(job_id, strategy, degree, data_degree, "
                 "model_degree, forward_text, training_fingerprint, json, program_json, "
                 "program_error, updated_at) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  st.BindText(1, job_id);
  st.BindText(2, p.strategy);
  st.BindInt64(3, p.degree);
  st.BindInt64(4, p.data_degree);
  st.BindInt64(5, p.model_degree);
  st.BindText(6, p.forward_text);
  st.BindText(7, p.training_fingerprint);
  st.BindText(8, p.json);
  st.BindText(9, p.program_json);
  st.BindText(10, p.program_error);
  st.BindInt64(11, NowInt());
  return st.Run();
}

}  // namespace

absl::Status Store::InsertJob(JobRecord* job, std::string_view forward_text,
                              std::string_view cluster_json, const ParallelSection* parallel,
                              std::string_view credential_sha256) {
  std::lock_guard<std::mutex> lock(mu_);
  sql::Transaction txn(db_);
  RETURN_IF_ERROR(txn.Begin());
  const int64_t now = NowInt();
  {
    ASSIGN_OR_RETURN(
        sql::Statement st,
        db_.Prepare("INSERT OR IGNORE INTO graphs(fingerprint, text, created_at) VALUES(?, ?, ?)"));
    st.BindText(1, job->forward_fingerprint);
    st.BindText(2, forward_text);
    st.BindInt64(3, now);
    RETURN_IF_ERROR(st.Run());
  }
  {
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("INSERT OR IGNORE INTO clusters(fingerprint, json) VALUES(?, ?)"));
    st.BindText(1, job->cluster_fingerprint);
    st.BindText(2, cluster_json);
    RETURN_IF_ERROR(st.Run());
  }
  ASSIGN_OR_RETURN(sql::Statement seq, db_.Prepare("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs"));
  RETURN_IF_ERROR(seq.Step());
  job->seq = seq.ColumnInt64(0);
  job->created_unix_s = now;
  ASSIGN_OR_RETURN(
      sql::Statement st,
      db_.Prepare(absl::StrCat(
          "INSERT INTO jobs(", kJobColumns,
          ", updated_at) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")));
  st.BindText(1, job->id);
  st.BindInt64(2, job->seq);
  st.BindText(3, job->name);
  st.BindText(4, job->forward_fingerprint);
  st.BindText(5, job->cluster_fingerprint);
  st.BindText(6, JobOptionsToJson(job->options));
  st.BindText(7, JobPhaseName(job->phase));
  st.BindText(8, job->error);
  st.BindDouble(9, job->best_cost_s);
  st.BindInt64(10, job->candidates);
  st.BindDouble(11, job->elapsed_s);
  st.BindText(12, job->graph_fingerprint);
  st.BindText(13, job->plan_key);
  st.BindInt64(14, job->from_cache ? 1 : 0);
  st.BindInt64(15, job->recosted ? 1 : 0);
  st.BindInt64(16, job->resumed);
  st.BindInt64(17, now);
  st.BindInt64(18, job->interrupted_runs);
  st.BindInt64(19, now);
  RETURN_IF_ERROR(st.Run());
  if (!credential_sha256.empty()) {
    ASSIGN_OR_RETURN(sql::Statement cred,
                     db_.Prepare("UPDATE jobs SET report_credential_sha256 = ? WHERE id = ?"));
    cred.BindText(1, credential_sha256);
    cred.BindText(2, job->id);
    RETURN_IF_ERROR(cred.Run());
  }
  if (parallel != nullptr) RETURN_IF_ERROR(PutJobParallelLocked(db_, job->id, *parallel));
  return txn.Commit();
}

absl::Status Store::PutJobParallel(const std::string& job_id, const ParallelSection& parallel) {
  std::lock_guard<std::mutex> lock(mu_);
  return PutJobParallelLocked(db_, job_id, parallel);
}

absl::StatusOr<std::optional<ParallelSection>> Store::GetJobParallel(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare("SELECT strategy, degree, data_degree, model_degree, forward_text, "
                               "training_fingerprint, json, program_json, program_error "
                               "FROM job_parallel WHERE job_id = ?"));
  st.BindText(1, job_id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<ParallelSection>();
  ParallelSection p;
  p.strategy = st.ColumnText(0);
  p.degree = static_cast<int>(st.ColumnInt64(1));
  p.data_degree = static_cast<int>(st.ColumnInt64(2));
  p.model_degree = static_cast<int>(st.ColumnInt64(3));
  p.forward_text = st.ColumnText(4);
  p.training_fingerprint = st.ColumnText(5);
  p.json = st.ColumnText(6);
  p.program_json = st.ColumnText(7);
  p.program_error = st.ColumnText(8);
  return std::optional<ParallelSection>(std::move(p));
}

absl::Status Store::UpdateJob(const JobRecord& job) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(
      sql::Statement st,
      db_.Prepare(
          "UPDATE jobs SET phase = ?, error = ?, best_cost_s = ?, candidates = ?, elapsed_s = ?, "
          "graph_fingerprint = ?, plan_key = ?, from_cache = ?, recosted = ?, resumed = ?, "
          "interrupted_runs = ?, updated_at = ? WHERE id = ?"));
  st.BindText(1, JobPhaseName(job.phase));
  st.BindText(2, job.error);
  st.BindDouble(3, job.best_cost_s);
  st.BindInt64(4, job.candidates);
  st.BindDouble(5, job.elapsed_s);
  st.BindText(6, job.graph_fingerprint);
  st.BindText(7, job.plan_key);
  st.BindInt64(8, job.from_cache ? 1 : 0);
  st.BindInt64(9, job.recosted ? 1 : 0);
  st.BindInt64(10, job.resumed);
  st.BindInt64(11, job.interrupted_runs);
  st.BindInt64(12, NowInt());
  st.BindText(13, job.id);
  RETURN_IF_ERROR(st.Run());
  if (db_.Changes() != 1) return absl::NotFoundError(absl::StrCat("job ", job.id, " not found"));
  return absl::OkStatus();
}

absl::Status Store::SaveCheckpointPlan(const std::string& job_id, const std::string& plan_json) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare("UPDATE jobs SET checkpoint_plan = ?, updated_at = ? WHERE id = ?"));
  st.BindText(1, plan_json);
  st.BindInt64(2, NowInt());
  st.BindText(3, job_id);
  RETURN_IF_ERROR(st.Run());
  if (db_.Changes() != 1) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> Store::CheckpointPlan(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st, db_.Prepare("SELECT checkpoint_plan FROM jobs WHERE id = ?"));
  st.BindText(1, job_id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  return st.ColumnText(0);
}

absl::StatusOr<std::vector<JobRecord>> Store::QueryJobs(std::string_view where_and_order,
                                                        int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare(absl::StrCat(kJobSelect, std::string(where_and_order), " LIMIT ?")));
  st.BindInt64(1, limit);
  std::vector<JobRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(JobRecord j, ReadJob(st));
    out.push_back(std::move(j));
  }
  return out;
}

absl::StatusOr<JobRecord> Store::GetJob(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare(absl::StrCat(kJobSelect, "WHERE jobs.id = ?")));
  st.BindText(1, id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("job_id: no job '", id, "'"));
  return ReadJob(st);
}

absl::StatusOr<std::vector<JobRecord>> Store::ListJobs(int limit) {
  return QueryJobs("ORDER BY jobs.seq DESC", limit);
}

absl::StatusOr<std::vector<JobRecord>> Store::UnfinishedJobs() {
  return QueryJobs("WHERE jobs.phase NOT IN ('done', 'failed', 'cancelled') ORDER BY jobs.seq ASC",
                   std::numeric_limits<int>::max());
}

absl::StatusOr<std::string> Store::GetGraphText(const std::string& fp) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st, db_.Prepare("SELECT text FROM graphs WHERE fingerprint = ?"));
  st.BindText(1, fp);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no stored graph ", fp));
  return st.ColumnText(0);
}

absl::StatusOr<std::string> Store::GetClusterJson(const std::string& fp) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare("SELECT json FROM clusters WHERE fingerprint = ?"));
  st.BindText(1, fp);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no stored cluster ", fp));
  return st.ColumnText(0);
}

namespace internal {

constexpr char kPlanColumns[] =
    "key, generation, plan_json, predicted_s, origin, baselines_json, fo_bound_s, compute_s, "
    "comm_s, ddp_buckets_json, rolled_back, rollback_reason, rollback_job, rolled_back_from, "
    "rolled_back_predicted_s, parallel_strategy, parallel_degree, parallel_data_degree, "
    "parallel_model_degree, "
    "parallel_forward_text, parallel_training_fingerprint, parallel_json, cost_sources_json, "
    "parallel_program_json, parallel_program_error";

absl::Status PutPlanLocked(sql::Database& db, const PlanRecord& p) {
  ASSIGN_OR_RETURN(sql::Statement st,
                   db.Prepare(absl::StrCat("INSERT OR REPLACE INTO plans(", kPlanColumns,
                                           ", updated_at) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                                           "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")));
  st.BindText(1, p.key);
  st.BindText(2, p.generation);
  st.BindText(3, p.plan_json);
  st.BindDouble(4, p.predicted_s);
  st.BindText(5, p.origin);
  st.BindText(6, p.baselines_json);
  st.BindDouble(7, p.fo_bound_s);
  st.BindDouble(8, p.compute_s);
  st.BindDouble(9, p.comm_s);
  st.BindText(10, p.ddp_buckets_json);
  st.BindInt64(11, p.rolled_back ? 1 : 0);
  st.BindText(12, p.rollback_reason);
  st.BindText(13, p.rollback_job);
  st.BindText(14, p.rolled_back_from);
  st.BindDouble(15, p.rolled_back_predicted_s);
  const ParallelSection none;
  const ParallelSection& par = p.parallel.has_value() ? *p.parallel : none;
  st.BindText(16, par.strategy);
  st.BindInt64(17, par.degree);
  st.BindInt64(18, par.data_degree);
  st.BindInt64(19, par.model_degree);
  st.BindText(20, par.forward_text);
  st.BindText(21, par.training_fingerprint);
  st.BindText(22, par.json);
  st.BindText(23, p.cost_sources_json);
  st.BindText(24, par.program_json);
  st.BindText(25, par.program_error);
  st.BindInt64(26, NowInt());
  return st.Run();
}

absl::StatusOr<std::optional<PlanRecord>> GetPlanLocked(sql::Database& db, const std::string& key) {
  ASSIGN_OR_RETURN(sql::Statement st,
                   db.Prepare(absl::StrCat("SELECT ", kPlanColumns, " FROM plans WHERE key = ?")));
  st.BindText(1, key);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<PlanRecord>();
  PlanRecord p;
  p.key = st.ColumnText(0);
  p.generation = st.ColumnText(1);
  p.plan_json = st.ColumnText(2);
  p.predicted_s = st.ColumnDouble(3);
  p.origin = st.ColumnText(4);
  p.baselines_json = st.ColumnText(5);
  p.fo_bound_s = st.ColumnDouble(6);
  p.compute_s = st.ColumnDouble(7);
  p.comm_s = st.ColumnDouble(8);
  p.ddp_buckets_json = st.ColumnText(9);
  p.rolled_back = st.ColumnInt64(10) != 0;
  p.rollback_reason = st.ColumnText(11);
  p.rollback_job = st.ColumnText(12);
  p.rolled_back_from = st.ColumnText(13);
  p.rolled_back_predicted_s = st.ColumnDouble(14);
  p.cost_sources_json = st.ColumnText(22);
  if (!st.ColumnText(21).empty()) {
    ParallelSection par;
    par.strategy = st.ColumnText(15);
    par.degree = static_cast<int>(st.ColumnInt64(16));
    par.data_degree = static_cast<int>(st.ColumnInt64(17));
    par.model_degree = static_cast<int>(st.ColumnInt64(18));
    par.forward_text = st.ColumnText(19);
    par.training_fingerprint = st.ColumnText(20);
    par.json = st.ColumnText(21);
    par.program_json = st.ColumnText(23);
    par.program_error = st.ColumnText(24);
    p.parallel = std::move(par);
  }
  return std::optional<PlanRecord>(std::move(p));
}

std::string TimesJson(const std::vector<double>& v) { return nlohmann::json(v).dump(); }

absl::StatusOr<std::vector<double>> TimesFromJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return absl::DataLossError("measurements: times are not a JSON array");
  std::vector<double> out;
  out.reserve(j.size());
  for (const nlohmann::json& v : j) {
    if (!v.is_number()) return absl::DataLossError("measurements: a time is not a number");
    out.push_back(v.get<double>());
  }
  return out;
}

}  // namespace internal

absl::Status Store::PutPlan(const PlanRecord& p) {
  std::lock_guard<std::mutex> lock(mu_);
  return internal::PutPlanLocked(db_, p);
}

absl::StatusOr<std::optional<PlanRecord>> Store::GetPlan(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return internal::GetPlanLocked(db_, key);
}

absl::StatusOr<bool> Store::InsertTaskIfAbsent(const TaskRecord& t) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(
      sql::Statement st,
      db_.Prepare(absl::StrCat("INSERT OR IGNORE INTO tasks(", kTaskColumns,
                               ", created_seq) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                               " (SELECT COALESCE(MAX(created_seq), 0) + 1 FROM tasks))")));
  st.BindText(1, t.id);
  st.BindText(2, t.device_kind);
  st.BindText(3, t.op_type);
  st.BindText(4, t.signature);
  st.BindText(5, t.shapes_json);
  st.BindText(6, t.op_graph_text);
  st.BindText(7, TaskStateName(t.state));
  st.BindText(8, t.worker_id);
  st.BindText(9, t.lease_id);
  st.BindDouble(10, t.lease_deadline_unix_s);
  st.BindInt64(11, t.attempts);
  st.BindText(12, t.error);
  RETURN_IF_ERROR(st.Run());
  return db_.Changes() == 1;
}

absl::StatusOr<TaskRecord> Store::GetTask(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare(absl::StrCat("SELECT ", kTaskColumns, " FROM tasks WHERE id = ?")));
  st.BindText(1, id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("task_id: no task '", id, "'"));
  return ReadTask(st);
}

absl::StatusOr<std::vector<TaskRecord>> Store::LeaseTasks(const std::string& device_kind,
                                                          const std::string& worker_id, int max,
                                                          double deadline_unix_s) {
  std::lock_guard<std::mutex> lock(mu_);
  sql::Transaction txn(db_);
  RETURN_IF_ERROR(txn.Begin());
  ASSIGN_OR_RETURN(
      sql::Statement sel,
      db_.Prepare(absl::StrCat(
          "SELECT ", kTaskColumns,
          " FROM tasks WHERE state = 'queued' AND device_kind = ? ORDER BY created_seq LIMIT ?")));
  sel.BindText(1, device_kind);
  sel.BindInt64(2, max);
  std::vector<TaskRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, sel.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(TaskRecord t, ReadTask(sel));
    out.push_back(std::move(t));
  }
  ASSIGN_OR_RETURN(
      sql::Statement upd,
      db_.Prepare(
          "UPDATE tasks SET state = 'leased', worker_id = ?, lease_id = ?, lease_deadline = ?, "
          "attempts = attempts + 1 WHERE id = ?"));
  for (TaskRecord& t : out) {
    t.state = TaskState::kLeased;
    t.worker_id = worker_id;
    t.lease_id = RandomId("lease-");
    t.lease_deadline_unix_s = deadline_unix_s;
    ++t.attempts;
    upd.Reset();
    upd.BindText(1, t.worker_id);
    upd.BindText(2, t.lease_id);
    upd.BindDouble(3, t.lease_deadline_unix_s);
    upd.BindText(4, t.id);
    RETURN_IF_ERROR(upd.Run());
  }
  RETURN_IF_ERROR(txn.Commit());
  return out;
}

absl::StatusOr<int> Store::RequeueExpired(double now_unix_s) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(
      sql::Statement st,
      std::isinf(now_unix_s)
          ? db_.Prepare("UPDATE tasks SET state = 'queued', lease_id = '' WHERE state = 'leased'")
          : db_.Prepare("UPDATE tasks SET state = 'queued', lease_id = '' "
                        "WHERE state = 'leased' AND lease_deadline < ?"));
  if (!std::isinf(now_unix_s)) st.BindDouble(1, now_unix_s);
  RETURN_IF_ERROR(st.Run());
  return static_cast<int>(db_.Changes());
}

absl::Status Store::UpdateTask(const TaskRecord& t) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(
      sql::Statement st,
      db_.Prepare("UPDATE tasks SET state = ?, worker_id = ?, lease_id = ?, lease_deadline = ?, "
                  "attempts = ?, error = ? WHERE id = ?"));
  st.BindText(1, TaskStateName(t.state));
  st.BindText(2, t.worker_id);
  st.BindText(3, t.lease_id);
  st.BindDouble(4, t.lease_deadline_unix_s);
  st.BindInt64(5, t.attempts);
  st.BindText(6, t.error);
  st.BindText(7, t.id);
  return st.Run();
}

absl::StatusOr<int> Store::CountTasks(TaskState state) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st, db_.Prepare("SELECT COUNT(*) FROM tasks WHERE state = ?"));
  st.BindText(1, TaskStateName(state));
  RETURN_IF_ERROR(st.Step());
  return static_cast<int>(st.ColumnInt64(0));
}

absl::Status Store::UpsertWorker(const WorkerRecord& w) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(
      sql::Statement st,
      db_.Prepare("INSERT OR REPLACE INTO workers(id, name, device_kind, slots, last_heartbeat) "
                  "VALUES(?, ?, ?, ?, ?)"));
  st.BindText(1, w.id);
  st.BindText(2, w.name);
  st.BindText(3, w.device_kind);
  st.BindInt64(4, w.slots);
  st.BindDouble(5, w.last_heartbeat_unix_s);
  return st.Run();
}

absl::StatusOr<std::optional<WorkerRecord>> Store::GetWorker(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(
      sql::Statement st,
      db_.Prepare("SELECT id, name, device_kind, slots, last_heartbeat FROM workers WHERE id = ?"));
  st.BindText(1, id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<WorkerRecord>();
  WorkerRecord w;
  w.id = st.ColumnText(0);
  w.name = st.ColumnText(1);
  w.device_kind = st.ColumnText(2);
  w.slots = static_cast<int>(st.ColumnInt64(3));
  w.last_heartbeat_unix_s = st.ColumnDouble(4);
  return std::optional<WorkerRecord>(std::move(w));
}

absl::StatusOr<std::vector<std::string>> Store::LiveDeviceKinds(double since_unix_s) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(
      sql::Statement st,
      db_.Prepare(
          "SELECT DISTINCT device_kind FROM workers WHERE last_heartbeat >= ? ORDER BY device_kind"));
  st.BindDouble(1, since_unix_s);
  std::vector<std::string> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(st.ColumnText(0));
  }
  return out;
}

absl::StatusOr<std::vector<WorkerRecord>> Store::ListWorkers() {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare("SELECT id, name, device_kind, slots, last_heartbeat FROM workers "
                               "ORDER BY last_heartbeat DESC, id"));
  std::vector<WorkerRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    WorkerRecord w;
    w.id = st.ColumnText(0);
    w.name = st.ColumnText(1);
    w.device_kind = st.ColumnText(2);
    w.slots = static_cast<int>(st.ColumnInt64(3));
    w.last_heartbeat_unix_s = st.ColumnDouble(4);
    out.push_back(std::move(w));
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<JobPhase, int64_t>>> Store::CountJobsByPhase() {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare("SELECT phase, COUNT(*) FROM jobs GROUP BY phase ORDER BY phase"));
  std::vector<std::pair<JobPhase, int64_t>> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    ASSIGN_OR_RETURN(JobPhase phase, ParseJobPhase(st.ColumnText(0)));
    out.emplace_back(phase, st.ColumnInt64(1));
  }
  return out;
}

}  // namespace braid::server
