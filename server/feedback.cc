#include "server/feedback.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/digest.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace braid::server {

namespace {

constexpr char kJobRollbackKeyPrefix[] = "rollback:job:";
constexpr char kSavedKeyPrefix[] = "rollback:saved:";

std::string ShortSha(const std::string& sha) { return sha.substr(0, 12); }

std::string ReporterActor(const std::string& job_id, const std::string& credential_sha,
                          const std::string& peer) {
  return absl::StrCat("ranks of job ", job_id, " (credential ", ShortSha(credential_sha),
                      ") from ", peer.empty() ? "in-process" : peer);
}

}  // namespace

bool RateLimiter::Allow(const std::string& key) {
  if (!(rate_ > 0)) return true;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= kMaxKeys) {
      // Forget the buckets that have refilled: they hold no state.
      for (auto b = buckets_.begin(); b != buckets_.end();) {
        const double t = b->second.tokens +
                         rate_ * std::chrono::duration<double>(now - b->second.last).count();
        b = t >= burst_ ? buckets_.erase(b) : std::next(b);
      }
      if (buckets_.size() >= kMaxKeys) return false;
    }
    it = buckets_.emplace(key, Bucket{burst_, now}).first;
  }
  Bucket& b = it->second;
  b.tokens = std::min(burst_, b.tokens + rate_ * std::chrono::duration<double>(now - b.last).count());
  b.last = now;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

std::string PeerHost(std::string_view peer) {
  const size_t colon = peer.rfind(':');
  const size_t first = peer.find(':');
  // "ipv4:HOST:PORT", "ipv6:[HOST]:PORT": drop the port; anything else as is.
  if (colon == std::string_view::npos || colon == first) return std::string(peer);
  return std::string(peer.substr(0, colon));
}

FeedbackManager::FeedbackManager(Store* store, FeedbackOptions options, RollbackMaker make_rollback,
                                 Digester digest)
    : store_(store),
      options_(options),
      make_rollback_(std::move(make_rollback)),
      digest_(std::move(digest)),
      limiter_(options.report_rate_per_s, options.report_burst) {}

std::string FeedbackManager::NewCredential() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 8; ++i) absl::StrAppend(&out, absl::StrFormat("%08x", rd()));
  return out;
}

std::string FeedbackManager::CredentialSha256(std::string_view credential) {
  return Sha256Hex(credential);
}

std::shared_ptr<std::mutex> FeedbackManager::JobLock(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(locks_mu_);
  if (job_locks_.size() > 1024) {
    std::erase_if(job_locks_, [](const auto& kv) { return kv.second.expired(); });
  }
  std::shared_ptr<std::mutex> m = job_locks_[job_id].lock();
  if (m == nullptr) {
    m = std::make_shared<std::mutex>();
    job_locks_[job_id] = m;
  }
  return m;
}

absl::StatusOr<FeedbackManager::JobState> FeedbackManager::LoadJob(const std::string& job_id,
                                                                   const std::string& credential) {
  JobState s;
  ASSIGN_OR_RETURN(s.job, store_->GetJob(job_id));  // NotFound
  ASSIGN_OR_RETURN(std::string want, store_->JobCredentialSha256(job_id));
  if (want.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " has no report credential: submit the job again to get one"));
  }
  if (!DigestsEqual(CredentialSha256(credential), want)) {
    return absl::PermissionDeniedError(
        absl::StrCat("report_credential: not job ", job_id,
                     "'s (SubmitGraphResponse.report_credential of that job)"));
  }
  if (s.job.phase != JobPhase::kDone) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is ", std::string(JobPhaseName(s.job.phase)), ": no plan to measure"));
  }
  ASSIGN_OR_RETURN(std::optional<PlanRecord> plan, store_->GetPlan(s.job.plan_key));
  if (!plan.has_value()) {
    return absl::InternalError(absl::StrCat("job ", job_id, " is done but its plan is missing"));
  }
  s.served = *std::move(plan);
  ASSIGN_OR_RETURN(s.served_digest, digest_(s.served, s.job));
  return s;
}

absl::StatusOr<StartedRun> FeedbackManager::StartRun(const RunRequest& req) {
  if (!limiter_.Allow(PeerHost(req.peer))) {
    return absl::ResourceExhaustedError(
        "too many reports and runs from this client: retry in a few seconds");
  }
  ASSIGN_OR_RETURN(JobState s, LoadJob(req.job_id, req.credential));
  if (req.world_size != s.job.options.ranks) {
    return absl::InvalidArgumentError(absl::StrCat("world_size: job ", req.job_id, " runs on ",
                                                   s.job.options.ranks, " ranks, got ",
                                                   req.world_size));
  }
  RunAttempt a;
  a.attempt_id = RandomId("run-");
  a.job_id = req.job_id;
  a.world_size = req.world_size;
  a.started_by = absl::StrCat(req.source, " from ", req.peer.empty() ? "in-process" : req.peer);
  a.created_unix_s = NowUnixSeconds();
  RETURN_IF_ERROR(store_->InsertAttempt(a, options_.max_attempts_per_job,
                                        a.created_unix_s - options_.retention_s));
  return StartedRun{a.attempt_id, a.world_size, s.served_digest};
}

absl::StatusOr<MeasurementOutcome> FeedbackManager::Report(const MeasurementReport& rep) {
  if (!limiter_.Allow(PeerHost(rep.peer))) {
    return absl::ResourceExhaustedError(
        "too many reports and runs from this client: retry in a few seconds");
  }
  std::shared_ptr<std::mutex> job_mu = JobLock(rep.job_id);
  std::lock_guard<std::mutex> job_lock(*job_mu);
  ASSIGN_OR_RETURN(JobState s, LoadJob(rep.job_id, rep.credential));
  const JobRecord& job = s.job;
  ASSIGN_OR_RETURN(std::optional<RunAttempt> attempt, store_->GetAttempt(rep.attempt_id));
  if (!attempt.has_value() || attempt->job_id != job.id) {
    return absl::NotFoundError(absl::StrCat("attempt_id: no run '", rep.attempt_id.substr(0, 40),
                                            "' of job ", job.id, " (StartRun begins one)"));
  }
  if (rep.world_size != attempt->world_size) {
    return absl::InvalidArgumentError(absl::StrCat("world_size: run ", attempt->attempt_id,
                                                   " has ", attempt->world_size, " ranks, got ",
                                                   rep.world_size));
  }
  const PlanRecord& rec = s.served;
  const std::string digest = rep.plan_sha256.empty() ? s.served_digest : rep.plan_sha256;
  // A late report of the plan a rollback replaced is kept, never judged.
  const bool replaced = rec.rolled_back && digest == rec.rolled_back_from;
  if (digest != s.served_digest && !replaced) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan_sha256: measured a different plan (", digest.substr(0, 16), "...) than job ",
        job.id, " is served (", s.served_digest.substr(0, 16), "...)"));
  }
  RankReport row;
  row.job_id = job.id;
  row.plan_sha256 = digest;
  row.attempt_id = attempt->attempt_id;
  row.rank = rep.rank;
  row.world_size = rep.world_size;
  row.plan_s = rep.plan_s;
  row.baseline_s = rep.baseline_s;
  row.source = rep.source;
  row.reported_unix_s = NowUnixSeconds();
  ASSIGN_OR_RETURN(RunAggregate run, store_->AddRankReport(row));  // AlreadyExists
  const AggregatedTimes agg = Aggregated(run);

  MeasuredPlan m;
  m.job_id = job.id;
  m.plan_sha256 = digest;
  m.cluster_fingerprint = job.cluster_fingerprint;
  m.predicted_s = replaced ? rec.rolled_back_predicted_s : rec.predicted_s;
  m.measured_s = agg.measured_s;
  m.baseline_s = agg.baseline_median_s;
  m.ranks_reported = agg.ranks_reported;
  m.world_size = rep.world_size;
  m.rolled_back = replaced;
  m.job_kind = JobKind(job.options);
  m.plausible = PlausibleForCalibration(m.measured_s, m.predicted_s);
  if (!m.plausible && agg.ranks_reported == rep.world_size) {
    LOG(WARNING) << "job " << job.id << ": measured " << m.measured_s << " s against a prediction of "
                 << m.predicted_s << " s: kept for the job, left out of the cluster's calibration";
  }
  std::optional<PlanRecord> rollback;
  // Judged once every rank of the run reported, and only for a plan that is
  // not the baseline already nor one an operator restored.
  if (!rec.rolled_back && !replaced && agg.ranks_reported == rep.world_size &&
      rec.origin != "baseline:ddp") {
    if (std::optional<RollbackVerdict> verdict = JudgeRollback(agg, rep.world_size, rep.source)) {
      ASSIGN_OR_RETURN(bool pinned, RestoredBefore(job.id, rec.key, s.served_digest, false));
      if (pinned) {
        LOG(WARNING) << "job " << job.id << ": measured slower than DDP (" << verdict->reason
                     << "), but an operator restored this plan: not rolled back";
      } else {
        ASSIGN_OR_RETURN(std::string cred, store_->JobCredentialSha256(job.id));
        absl::StatusOr<std::optional<PlanRecord>> r =
            RollBackJob(s, verdict->reason, ReporterActor(job.id, cred, rep.peer));
        if (!r.ok()) {
          LOG(ERROR) << "job " << job.id << ": rolling back its plan failed: " << r.status();
        } else if (r->has_value()) {
          rollback = **std::move(r);
          m.rolled_back = true;
        }
      }
    }
  }
  RETURN_IF_ERROR(store_->SaveFeedback(m));
  version_.fetch_add(1, std::memory_order_acq_rel);

  MeasurementOutcome out;
  out.ranks_reported = agg.ranks_reported;
  out.measured_s = agg.measured_s;
  out.baseline_s = agg.baseline_median_s;
  out.predicted_s = m.predicted_s;
  const PlanRecord& now = rollback.has_value() ? *rollback : rec;
  out.rolled_back = now.rolled_back;
  out.rollback_reason = RollbackReasonFor(job.id, now.rollback_job, now.rollback_reason);
  ASSIGN_OR_RETURN(out.calibration, Calibration(job.cluster_fingerprint, m.job_kind));
  return out;
}

absl::StatusOr<std::optional<PlanRecord>> FeedbackManager::RollBackJob(const JobState& s,
                                                                       const std::string& reason,
                                                                       const std::string& actor) {
  const JobRecord& job = s.job;
  ASSIGN_OR_RETURN(std::optional<PlanRecord> baseline,
                   make_rollback_(job, s.served, s.served_digest, reason));
  if (!baseline.has_value()) return baseline;
  ASSIGN_OR_RETURN(std::string cred, store_->JobCredentialSha256(job.id));
  RollbackRecord r;
  r.id = RandomId("rb-");
  r.job_id = job.id;
  r.scope = "job";
  r.shared_key = s.served.key;
  r.job_key = absl::StrCat(kJobRollbackKeyPrefix, job.id);
  r.replaced_sha256 = s.served_digest;
  r.credential_sha256 = cred;
  r.reason = reason;
  r.actor = actor;
  r.created_unix_s = NowUnixSeconds();
  PlanRecord mine = *baseline;
  mine.key = r.job_key;
  RETURN_IF_ERROR(store_->SaveRollback(r, mine, r.job_key, nullptr));
  version_.fetch_add(1, std::memory_order_acq_rel);
  LOG(WARNING) << "job " << job.id << ": plan rolled back to the DDP baseline for this job: "
               << reason;
  ASSIGN_OR_RETURN(int losers, store_->CountJobRollbackCredentials(r.shared_key, r.replaced_sha256));
  if (losers >= options_.shared_rollback_jobs) {
    ASSIGN_OR_RETURN(bool pinned, RestoredBefore(job.id, r.shared_key, r.replaced_sha256, true));
    if (!pinned) {
      RETURN_IF_ERROR(RollBackShared(
          s, r.shared_key,
          absl::StrCat(reason, "; ", losers, " jobs measured this plan slower than DDP"),
          absl::StrCat(losers, " jobs' ranks, last ", actor)));
    }
  }
  return std::optional<PlanRecord>(std::move(mine));
}

absl::Status FeedbackManager::RollBackShared(const JobState& s, const std::string& shared_key,
                                             const std::string& reason, const std::string& actor) {
  std::lock_guard<std::mutex> lock(shared_mu_);
  ASSIGN_OR_RETURN(std::optional<PlanRecord> current, store_->GetPlan(shared_key));
  if (!current.has_value()) {
    return absl::NotFoundError(absl::StrCat("plan-cache entry ", shared_key, " is gone"));
  }
  if (current->rolled_back) return absl::OkStatus();  // done before
  ASSIGN_OR_RETURN(std::string current_digest, digest_(*current, s.job));
  if (current_digest != s.served_digest) {
    // The entry was re-searched or re-costed into another plan since.
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::optional<PlanRecord> baseline,
                   make_rollback_(s.job, *current, current_digest, reason));
  if (!baseline.has_value()) return absl::OkStatus();
  RollbackRecord r;
  r.id = RandomId("rb-");
  r.job_id = s.job.id;
  r.scope = "shared";
  r.shared_key = shared_key;
  r.saved_key = absl::StrCat(kSavedKeyPrefix, r.id);
  r.replaced_sha256 = current_digest;
  r.reason = reason;
  r.actor = actor;
  r.created_unix_s = NowUnixSeconds();
  PlanRecord saved = *current;
  saved.key = r.saved_key;
  baseline->key = shared_key;
  RETURN_IF_ERROR(store_->SaveRollback(r, *baseline, "", &saved));
  version_.fetch_add(1, std::memory_order_acq_rel);
  LOG(WARNING) << "plan-cache entry " << shared_key.substr(0, 32)
               << "... rolled back to the DDP baseline for every job: " << reason;
  return absl::OkStatus();
}

absl::StatusOr<bool> FeedbackManager::RestoredBefore(const std::string& job_id,
                                                     const std::string& shared_key,
                                                     const std::string& sha256, bool shared) {
  ASSIGN_OR_RETURN(std::vector<RollbackRecord> all, store_->RollbacksOfPlan(shared_key, sha256));
  for (const RollbackRecord& r : all) {
    if (r.restored_unix_s == 0) continue;
    if (shared ? r.scope == "shared" : (r.job_id == job_id)) return true;
  }
  return false;
}

absl::StatusOr<double> FeedbackManager::Calibration(const std::string& cluster_fingerprint,
                                                    const std::string& job_kind) {
  ASSIGN_OR_RETURN(std::vector<MeasuredPlan> samples,
                   store_->CalibrationSamples(cluster_fingerprint, job_kind, kCalibrationSamples));
  return server::Calibration(samples);
}

absl::StatusOr<std::vector<RollbackRecord>> FeedbackManager::Rollbacks(const std::string& job_id,
                                                                       int limit) {
  return store_->Rollbacks(job_id, limit);
}

absl::StatusOr<std::vector<AuditEntry>> FeedbackManager::Audit(const std::string& job_id,
                                                               int limit) {
  return store_->Audit(job_id, limit);
}

absl::StatusOr<std::vector<RollbackRecord>> FeedbackManager::Restore(const std::string& job_id,
                                                                     const std::string& actor,
                                                                     const std::string& reason) {
  std::shared_ptr<std::mutex> job_mu = JobLock(job_id);
  std::lock_guard<std::mutex> job_lock(*job_mu);
  std::lock_guard<std::mutex> shared_lock(shared_mu_);
  ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(job_id));
  ASSIGN_OR_RETURN(std::vector<RollbackRecord> mine, store_->Rollbacks(job_id, 1000));
  // What the job's plan is rolled back by: its own rollback, and the shared
  // entry's (whoever's runs caused it) when the job is served that entry or
  // returns to it.
  std::vector<RollbackRecord> undo;
  std::string shared_key = job.plan_key;
  for (const RollbackRecord& r : mine) {
    if (r.restored_unix_s != 0 || r.scope != "job") continue;
    undo.push_back(r);
    shared_key = r.shared_key;
  }
  ASSIGN_OR_RETURN(std::optional<PlanRecord> shared, store_->GetPlan(shared_key));
  if (shared.has_value() && shared->rolled_back) {
    ASSIGN_OR_RETURN(std::vector<RollbackRecord> of_plan,
                     store_->RollbacksOfPlan(shared_key, shared->rolled_back_from));
    for (const RollbackRecord& r : of_plan) {
      if (r.restored_unix_s == 0 && r.scope == "shared") undo.push_back(r);
    }
  }
  if (undo.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, "'s plan has no rollback in effect"));
  }
  const double now = NowUnixSeconds();
  for (RollbackRecord& r : undo) {
    RETURN_IF_ERROR(store_->RestoreRollback(
        r, actor,
        AuditEntry{now, actor, "restore", job_id,
                   absl::StrCat("rollback ", r.id, " (", r.scope, ") undone",
                                reason.empty() ? "" : ": ", reason)}));
    r.restored_unix_s = now;
    r.restored_by = actor;
    LOG(WARNING) << "job " << job_id << ": rollback " << r.id << " (" << r.scope
                 << ") restored by " << actor;
  }
  version_.fetch_add(1, std::memory_order_acq_rel);
  return undo;
}

absl::StatusOr<std::vector<RollbackRecord>> FeedbackManager::Confirm(const std::string& job_id,
                                                                     const std::string& actor,
                                                                     const std::string& reason) {
  std::shared_ptr<std::mutex> job_mu = JobLock(job_id);
  std::lock_guard<std::mutex> job_lock(*job_mu);
  ASSIGN_OR_RETURN(std::vector<RollbackRecord> mine, store_->Rollbacks(job_id, 1000));
  const RollbackRecord* own = nullptr;
  for (const RollbackRecord& r : mine) {
    if (r.restored_unix_s == 0 && r.scope == "job") {
      own = &r;
      break;
    }
  }
  if (own == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has no rollback of its own in effect to confirm"));
  }
  // The shared entry as the job was served it before its rollback.
  JobState s;
  ASSIGN_OR_RETURN(s.job, store_->GetJob(job_id));
  ASSIGN_OR_RETURN(std::optional<PlanRecord> shared, store_->GetPlan(own->shared_key));
  if (!shared.has_value()) {
    return absl::NotFoundError(absl::StrCat("plan-cache entry ", own->shared_key, " is gone"));
  }
  if (shared->rolled_back) {
    return absl::FailedPreconditionError("the shared plan-cache entry is rolled back already");
  }
  s.served = *shared;
  s.served_digest = own->replaced_sha256;
  RETURN_IF_ERROR(store_->AppendAudit(AuditEntry{
      NowUnixSeconds(), actor, "confirm", job_id,
      absl::StrCat("rollback ", own->id, " made the shared entry's",
                   reason.empty() ? "" : ": ", reason)}));
  RETURN_IF_ERROR(RollBackShared(s, own->shared_key,
                                 absl::StrCat(own->reason, "; confirmed by ", actor), actor));
  ASSIGN_OR_RETURN(std::vector<RollbackRecord> made,
                   store_->RollbacksOfPlan(own->shared_key, own->replaced_sha256));
  std::erase_if(made, [](const RollbackRecord& r) {
    return r.scope != "shared" || r.restored_unix_s != 0;
  });
  if (made.empty()) {
    return absl::FailedPreconditionError(
        "the shared plan-cache entry no longer serves the plan this job rolled back");
  }
  return made;
}

}  // namespace braid::server
