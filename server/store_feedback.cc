// Store: the measured-feedback tables (migration 8): report credentials,
// runs, rank reports folded into run aggregates, measured plans, rollbacks
// and the audit log.
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/stats.h"
#include "base/status_macros.h"
#include "server/internal/store_rows.h"
#include "server/store.h"

namespace braid::server {

namespace sql = base::sql;

namespace {

absl::Status AppendAuditLocked(sql::Database& db, const AuditEntry& e) {
  ASSIGN_OR_RETURN(sql::Statement st,
                   db.Prepare("INSERT INTO audit_log(at, actor, action, job_id, detail) "
                              "VALUES(?, ?, ?, ?, ?)"));
  st.BindDouble(1, e.at_unix_s);
  st.BindText(2, e.actor);
  st.BindText(3, e.action);
  st.BindText(4, e.job_id);
  st.BindText(5, e.detail);
  return st.Run();
}

absl::Status MarkMeasuredRolledBack(sql::Database& db, const std::string& job_id,
                                    const std::string& sha256, bool rolled_back) {
  // A job rollback marks that job's aggregate; a shared one every job's.
  ASSIGN_OR_RETURN(sql::Statement st,
                   db.Prepare(job_id.empty()
                                  ? "UPDATE measured_plans SET rolled_back = ? WHERE plan_sha256 = ?"
                                  : "UPDATE measured_plans SET rolled_back = ? "
                                    "WHERE plan_sha256 = ? AND job_id = ?"));
  st.BindInt64(1, rolled_back ? 1 : 0);
  st.BindText(2, sha256);
  if (!job_id.empty()) st.BindText(3, job_id);
  return st.Run();
}

constexpr char kRollbackColumns[] =
    "id, job_id, scope, shared_key, job_key, saved_key, replaced_sha256, credential_sha256, "
    "reason, actor, created_at, restored_at, restored_by";

RollbackRecord ReadRollback(const sql::Statement& st) {
  RollbackRecord r;
  r.id = st.ColumnText(0);
  r.job_id = st.ColumnText(1);
  r.scope = st.ColumnText(2);
  r.shared_key = st.ColumnText(3);
  r.job_key = st.ColumnText(4);
  r.saved_key = st.ColumnText(5);
  r.replaced_sha256 = st.ColumnText(6);
  r.credential_sha256 = st.ColumnText(7);
  r.reason = st.ColumnText(8);
  r.actor = st.ColumnText(9);
  r.created_unix_s = st.ColumnDouble(10);
  r.restored_unix_s = st.ColumnDouble(11);
  r.restored_by = st.ColumnText(12);
  return r;
}

absl::StatusOr<std::vector<RollbackRecord>> ReadRollbacks(sql::Statement& st) {
  std::vector<RollbackRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return out;
    out.push_back(ReadRollback(st));
  }
}

}  // namespace

void RunAggregate::Add(const std::vector<double>& plan_s, const std::vector<double>& baseline_s) {
  const bool first = ranks_reported == 0;
  ++ranks_reported;
  if (!baseline_s.empty()) ++baseline_ranks;
  const size_t n = first ? plan_s.size() : std::min(plan_max.size(), plan_s.size());
  plan_max.resize(n, 0);
  for (size_t i = 0; i < n; ++i) plan_max[i] = std::max(plan_max[i], plan_s[i]);
  if (baseline_ranks != ranks_reported) {
    baseline_max.clear();  // some rank did not measure the baseline
    return;
  }
  baseline_max.resize(n, 0);
  for (size_t i = 0; i < n; ++i) baseline_max[i] = std::max(baseline_max[i], baseline_s[i]);
}

absl::StatusOr<std::string> Store::JobCredentialSha256(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare("SELECT report_credential_sha256 FROM jobs WHERE id = ?"));
  st.BindText(1, job_id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  return st.ColumnText(0);
}

absl::Status Store::InsertAttempt(const RunAttempt& a, int max_attempts,
                                  double retain_after_unix_s) {
  std::lock_guard<std::mutex> lock(mu_);
  sql::Transaction txn(db_);
  RETURN_IF_ERROR(txn.Begin());
  // Retention: the job's runs older than the limit go, reports and all.
  for (const char* q :
       {"DELETE FROM rank_reports WHERE attempt_id IN "
        "(SELECT attempt_id FROM run_attempts WHERE job_id = ? AND created_at < ?)",
        "DELETE FROM run_aggregates WHERE attempt_id IN "
        "(SELECT attempt_id FROM run_attempts WHERE job_id = ? AND created_at < ?)",
        "DELETE FROM run_attempts WHERE job_id = ? AND created_at < ?"}) {
    ASSIGN_OR_RETURN(sql::Statement st, db_.Prepare(q));
    st.BindText(1, a.job_id);
    st.BindDouble(2, retain_after_unix_s);
    RETURN_IF_ERROR(st.Run());
  }
  {
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("SELECT COUNT(*) FROM run_attempts WHERE job_id = ?"));
    st.BindText(1, a.job_id);
    RETURN_IF_ERROR(st.Step().status());
    if (st.ColumnInt64(0) >= max_attempts) {
      return absl::ResourceExhaustedError(
          absl::StrCat("job ", a.job_id, " has ", st.ColumnInt64(0),
                       " runs stored, the server's limit: submit the job again for more"));
    }
  }
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare("INSERT INTO run_attempts(attempt_id, job_id, world_size, "
                               "started_by, created_at) VALUES(?, ?, ?, ?, ?)"));
  st.BindText(1, a.attempt_id);
  st.BindText(2, a.job_id);
  st.BindInt64(3, a.world_size);
  st.BindText(4, a.started_by);
  st.BindDouble(5, a.created_unix_s);
  RETURN_IF_ERROR(st.Run());
  return txn.Commit();
}

absl::StatusOr<std::optional<RunAttempt>> Store::GetAttempt(const std::string& attempt_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare("SELECT attempt_id, job_id, world_size, started_by, created_at "
                               "FROM run_attempts WHERE attempt_id = ?"));
  st.BindText(1, attempt_id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<RunAttempt>();
  RunAttempt a;
  a.attempt_id = st.ColumnText(0);
  a.job_id = st.ColumnText(1);
  a.world_size = static_cast<int>(st.ColumnInt64(2));
  a.started_by = st.ColumnText(3);
  a.created_unix_s = st.ColumnDouble(4);
  return std::optional<RunAttempt>(std::move(a));
}

absl::StatusOr<RunAggregate> Store::AddRankReport(const RankReport& r) {
  std::lock_guard<std::mutex> lock(mu_);
  sql::Transaction txn(db_);
  RETURN_IF_ERROR(txn.Begin());
  {
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("INSERT OR IGNORE INTO rank_reports(job_id, plan_sha256, "
                                 "attempt_id, rank, iterations, plan_median_s, baseline_median_s, "
                                 "source, reported_at) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    st.BindText(1, r.job_id);
    st.BindText(2, r.plan_sha256);
    st.BindText(3, r.attempt_id);
    st.BindInt64(4, r.rank);
    st.BindInt64(5, static_cast<int64_t>(r.plan_s.size()));
    st.BindDouble(6, Summarize(r.plan_s).median_s);
    st.BindDouble(7, Summarize(r.baseline_s).median_s);
    st.BindText(8, r.source);
    st.BindDouble(9, r.reported_unix_s);
    RETURN_IF_ERROR(st.Run());
    if (db_.Changes() != 1) {
      return absl::AlreadyExistsError(absl::StrCat("rank ", r.rank, " already reported run ",
                                                   r.attempt_id, " of job ", r.job_id,
                                                   ": a new run needs a new attempt (StartRun)"));
    }
  }
  RunAggregate agg;
  agg.world_size = r.world_size;
  {
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("SELECT world_size, ranks_reported, baseline_ranks, plan_max, "
                                 "baseline_max FROM run_aggregates WHERE job_id = ? AND "
                                 "plan_sha256 = ? AND attempt_id = ?"));
    st.BindText(1, r.job_id);
    st.BindText(2, r.plan_sha256);
    st.BindText(3, r.attempt_id);
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (row) {
      agg.world_size = static_cast<int>(st.ColumnInt64(0));
      agg.ranks_reported = static_cast<int>(st.ColumnInt64(1));
      agg.baseline_ranks = static_cast<int>(st.ColumnInt64(2));
      ASSIGN_OR_RETURN(agg.plan_max, internal::TimesFromJson(st.ColumnText(3)));
      ASSIGN_OR_RETURN(agg.baseline_max, internal::TimesFromJson(st.ColumnText(4)));
    }
  }
  agg.Add(r.plan_s, r.baseline_s);
  {
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("INSERT OR REPLACE INTO run_aggregates(job_id, plan_sha256, "
                                 "attempt_id, world_size, ranks_reported, baseline_ranks, "
                                 "plan_max, baseline_max, updated_at) "
                                 "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    st.BindText(1, r.job_id);
    st.BindText(2, r.plan_sha256);
    st.BindText(3, r.attempt_id);
    st.BindInt64(4, agg.world_size);
    st.BindInt64(5, agg.ranks_reported);
    st.BindInt64(6, agg.baseline_ranks);
    st.BindText(7, internal::TimesJson(agg.plan_max));
    st.BindText(8, internal::TimesJson(agg.baseline_max));
    st.BindDouble(9, r.reported_unix_s);
    RETURN_IF_ERROR(st.Run());
  }
  RETURN_IF_ERROR(txn.Commit());
  return agg;
}

absl::StatusOr<int64_t> Store::CountRankReports(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare("SELECT COUNT(*) FROM rank_reports WHERE job_id = ?"));
  st.BindText(1, job_id);
  RETURN_IF_ERROR(st.Step().status());
  return st.ColumnInt64(0);
}

absl::Status Store::SaveFeedback(const MeasuredPlan& m) {
  std::lock_guard<std::mutex> lock(mu_);
  sql::Transaction txn(db_);
  RETURN_IF_ERROR(txn.Begin());
  {
    ASSIGN_OR_RETURN(
        sql::Statement st,
        db_.Prepare("INSERT OR REPLACE INTO measured_plans(job_id, plan_sha256, "
                    "cluster_fingerprint, predicted_s, measured_s, baseline_s, ranks_reported, "
                    "world_size, rolled_back, updated_at, job_kind, plausible) "
                    "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    st.BindText(1, m.job_id);
    st.BindText(2, m.plan_sha256);
    st.BindText(3, m.cluster_fingerprint);
    st.BindDouble(4, m.predicted_s);
    st.BindDouble(5, m.measured_s);
    st.BindDouble(6, m.baseline_s);
    st.BindInt64(7, m.ranks_reported);
    st.BindInt64(8, m.world_size);
    st.BindInt64(9, m.rolled_back ? 1 : 0);
    st.BindDouble(10, NowUnixSeconds());
    st.BindText(11, m.job_kind);
    st.BindInt64(12, m.plausible ? 1 : 0);
    RETURN_IF_ERROR(st.Run());
  }
  {
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("UPDATE jobs SET measured_predicted_s = ?, measured_s = ?, "
                                 "measured_baseline_s = ?, updated_at = ? WHERE id = ?"));
    st.BindDouble(1, m.predicted_s);
    st.BindDouble(2, m.measured_s);
    st.BindDouble(3, m.baseline_s);
    st.BindInt64(4, static_cast<int64_t>(NowUnixSeconds()));
    st.BindText(5, m.job_id);
    RETURN_IF_ERROR(st.Run());
    if (db_.Changes() != 1) return absl::NotFoundError(absl::StrCat("job ", m.job_id, " not found"));
  }
  return txn.Commit();
}

absl::StatusOr<std::vector<MeasuredPlan>> Store::CalibrationSamples(
    const std::string& cluster_fingerprint, const std::string& job_kind, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(
      sql::Statement st,
      db_.Prepare("SELECT job_id, plan_sha256, cluster_fingerprint, predicted_s, measured_s, "
                  "baseline_s, ranks_reported, world_size, rolled_back, job_kind, plausible "
                  "FROM measured_plans WHERE cluster_fingerprint = ? AND job_kind = ? AND "
                  "plausible = 1 AND rolled_back = 0 ORDER BY updated_at DESC LIMIT ?"));
  st.BindText(1, cluster_fingerprint);
  st.BindText(2, job_kind);
  st.BindInt64(3, limit);
  std::vector<MeasuredPlan> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    MeasuredPlan m;
    m.job_id = st.ColumnText(0);
    m.plan_sha256 = st.ColumnText(1);
    m.cluster_fingerprint = st.ColumnText(2);
    m.predicted_s = st.ColumnDouble(3);
    m.measured_s = st.ColumnDouble(4);
    m.baseline_s = st.ColumnDouble(5);
    m.ranks_reported = static_cast<int>(st.ColumnInt64(6));
    m.world_size = static_cast<int>(st.ColumnInt64(7));
    m.rolled_back = st.ColumnInt64(8) != 0;
    m.job_kind = st.ColumnText(9);
    m.plausible = st.ColumnInt64(10) != 0;
    out.push_back(std::move(m));
  }
  return out;
}

absl::Status Store::SaveRollback(const RollbackRecord& r, const PlanRecord& plan,
                                 const std::string& job_plan_key, const PlanRecord* saved) {
  std::lock_guard<std::mutex> lock(mu_);
  sql::Transaction txn(db_);
  RETURN_IF_ERROR(txn.Begin());
  if (saved != nullptr) RETURN_IF_ERROR(internal::PutPlanLocked(db_, *saved));
  RETURN_IF_ERROR(internal::PutPlanLocked(db_, plan));
  if (!job_plan_key.empty()) {
    ASSIGN_OR_RETURN(sql::Statement st, db_.Prepare("UPDATE jobs SET plan_key = ? WHERE id = ?"));
    st.BindText(1, job_plan_key);
    st.BindText(2, r.job_id);
    RETURN_IF_ERROR(st.Run());
    if (db_.Changes() != 1) return absl::NotFoundError(absl::StrCat("job ", r.job_id, " not found"));
  }
  {
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare(absl::StrCat("INSERT INTO rollbacks(", kRollbackColumns,
                                              ") VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")));
    st.BindText(1, r.id);
    st.BindText(2, r.job_id);
    st.BindText(3, r.scope);
    st.BindText(4, r.shared_key);
    st.BindText(5, r.job_key);
    st.BindText(6, r.saved_key);
    st.BindText(7, r.replaced_sha256);
    st.BindText(8, r.credential_sha256);
    st.BindText(9, r.reason);
    st.BindText(10, r.actor);
    st.BindDouble(11, r.created_unix_s);
    st.BindDouble(12, r.restored_unix_s);
    st.BindText(13, r.restored_by);
    RETURN_IF_ERROR(st.Run());
  }
  RETURN_IF_ERROR(MarkMeasuredRolledBack(db_, r.scope == "shared" ? "" : r.job_id,
                                         r.replaced_sha256, true));
  RETURN_IF_ERROR(AppendAuditLocked(
      db_, AuditEntry{r.created_unix_s, r.actor, absl::StrCat("rollback:", r.scope), r.job_id,
                      absl::StrCat("plan ", r.replaced_sha256.substr(0, 16), " of ",
                                   r.shared_key.substr(0, 32), ": ", r.reason)}));
  return txn.Commit();
}

absl::StatusOr<std::vector<RollbackRecord>> Store::Rollbacks(const std::string& job_id, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare(absl::StrCat("SELECT ", kRollbackColumns, " FROM rollbacks ",
                                            job_id.empty() ? "" : "WHERE job_id = ? ",
                                            "ORDER BY created_at DESC, rowid DESC LIMIT ?")));
  int i = 1;
  if (!job_id.empty()) st.BindText(i++, job_id);
  st.BindInt64(i, limit);
  return ReadRollbacks(st);
}

absl::StatusOr<std::vector<RollbackRecord>> Store::RollbacksOfPlan(
    const std::string& shared_key, const std::string& replaced_sha256) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare(absl::StrCat("SELECT ", kRollbackColumns, " FROM rollbacks WHERE "
                                            "shared_key = ? AND replaced_sha256 = ? "
                                            "ORDER BY created_at DESC, rowid DESC LIMIT 1000")));
  st.BindText(1, shared_key);
  st.BindText(2, replaced_sha256);
  return ReadRollbacks(st);
}

absl::StatusOr<int> Store::CountJobRollbackCredentials(const std::string& shared_key,
                                                       const std::string& replaced_sha256) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare("SELECT COUNT(DISTINCT credential_sha256) FROM rollbacks WHERE "
                               "scope = 'job' AND shared_key = ? AND replaced_sha256 = ? AND "
                               "restored_at = 0 AND credential_sha256 != ''"));
  st.BindText(1, shared_key);
  st.BindText(2, replaced_sha256);
  RETURN_IF_ERROR(st.Step().status());
  return static_cast<int>(st.ColumnInt64(0));
}

absl::Status Store::RestoreRollback(const RollbackRecord& r, const std::string& restored_by,
                                    const AuditEntry& audit) {
  std::lock_guard<std::mutex> lock(mu_);
  sql::Transaction txn(db_);
  RETURN_IF_ERROR(txn.Begin());
  if (r.scope == "shared") {
    ASSIGN_OR_RETURN(std::optional<PlanRecord> saved, internal::GetPlanLocked(db_, r.saved_key));
    if (!saved.has_value()) {
      return absl::DataLossError(absl::StrCat("rollback ", r.id, ": the replaced plan (",
                                              r.saved_key, ") is missing"));
    }
    saved->key = r.shared_key;
    RETURN_IF_ERROR(internal::PutPlanLocked(db_, *saved));
  } else {
    // The job serves the shared entry again (whatever it holds now).
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("UPDATE jobs SET plan_key = ? WHERE id = ? AND plan_key = ?"));
    st.BindText(1, r.shared_key);
    st.BindText(2, r.job_id);
    st.BindText(3, r.job_key);
    RETURN_IF_ERROR(st.Run());
  }
  {
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("UPDATE rollbacks SET restored_at = ?, restored_by = ? "
                                 "WHERE id = ? AND restored_at = 0"));
    st.BindDouble(1, audit.at_unix_s);
    st.BindText(2, restored_by);
    st.BindText(3, r.id);
    RETURN_IF_ERROR(st.Run());
    if (db_.Changes() != 1) {
      return absl::FailedPreconditionError(absl::StrCat("rollback ", r.id, " is not in effect"));
    }
  }
  RETURN_IF_ERROR(MarkMeasuredRolledBack(db_, r.scope == "shared" ? "" : r.job_id,
                                         r.replaced_sha256, false));
  RETURN_IF_ERROR(AppendAuditLocked(db_, audit));
  return txn.Commit();
}

absl::Status Store::AppendAudit(const AuditEntry& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  return AppendAuditLocked(db_, entry);
}

absl::StatusOr<std::vector<AuditEntry>> Store::Audit(const std::string& job_id, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(sql::Statement st,
                   db_.Prepare(absl::StrCat("SELECT at, actor, action, job_id, detail FROM "
                                            "audit_log ",
                                            job_id.empty() ? "" : "WHERE job_id = ? ",
                                            "ORDER BY seq DESC LIMIT ?")));
  int i = 1;
  if (!job_id.empty()) st.BindText(i++, job_id);
  st.BindInt64(i, limit);
  std::vector<AuditEntry> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(AuditEntry{st.ColumnDouble(0), st.ColumnText(1), st.ColumnText(2),
                             st.ColumnText(3), st.ColumnText(4)});
  }
  return out;
}

}  // namespace braid::server
