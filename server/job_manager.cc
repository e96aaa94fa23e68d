#include "server/job_manager.h"

#include <chrono>
#include <utility>

#include "nlohmann/json.hpp"
#include "proto/plan_digest.h"
#include "search/baselines.h"
#include "search/plan.h"
#include "server/job_graph.h"
#include "server/plan_proto.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "costmodel/comm_model.h"
#include "costmodel/cost_check.h"
#include "costmodel/op_cost.h"
#include "glog/logging.h"
#include "graph/fingerprint.h"
#include "graph/program.h"
#include "graph/text_format.h"
#include "graph/training.h"
#include "search/backtracking.h"
#include "search/parallel_plan.h"
#include "search/parallel_strategies.h"

namespace braid::server {

namespace v1 = braid::v1;

struct JobManager::Runtime {
  JobRecord record;  // guarded by mu_
  int64_t version = 0;  // guarded by mu_
  bool running = false;  // guarded by mu_
  std::optional<graph::Graph> training;  // set by Submit or Import
  std::optional<graph::Graph> forward;   // same (parallel jobs plan from it)
  std::optional<costmodel::ClusterSpec> cluster;
  std::atomic<bool> cancel{false};
  std::mutex persist_mu;
  int64_t persisted_version = 0;  // guarded by persist_mu
};

namespace {

absl::StatusOr<std::unique_ptr<costmodel::ClusterCostModel>> MakeCostModel(
    const costmodel::ClusterSpec& cluster, costmodel::ProfileStore* profiles,
    const std::string& profile_db) {
  ASSIGN_OR_RETURN(costmodel::CommModel comm, costmodel::CommModelFromStore(cluster, profiles));
  return std::make_unique<costmodel::ClusterCostModel>(
      cluster, profiles, costmodel::FusedOpEstimatorFor(cluster, profile_db), std::move(comm));
}

absl::Status Prefixed(std::string_view field, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(std::string(field), ": ", s.message()));
}

// A job answered from the plan cache: done, with the cached plan's figures.
void RecordCacheHit(JobRecord& r, const std::string& key, const CachedPlan& hit) {
  r.plan_key = key;
  r.from_cache = true;
  r.recosted = hit.recosted;
  r.best_cost_s = hit.record.predicted_s;
  r.rolled_back = hit.record.rolled_back;
  r.rollback_reason = hit.record.rollback_reason;
  r.rollback_job = hit.record.rollback_job;
  r.phase = JobPhase::kDone;
}

// Whether a cached parallel entry can serve a parallel job: it has its
// section, with the row's program or why the lowering refused the row
// (entries stored before programs were kept have neither; they are planned
// again).
bool ServesParallel(const std::optional<ParallelSection>& section) {
  return section.has_value() && (!section->program_json.empty() || !section->program_error.empty());
}

}  // namespace

JobManager::JobManager(Store* store, costmodel::ProfileStore* profiles, TaskQueue* tasks,
                       JobManagerOptions options)
    : store_(store), profiles_(profiles), tasks_(tasks), options_(options), cache_(store) {
  feedback_ = std::make_unique<FeedbackManager>(
      store, options_.feedback,
      [this](const JobRecord& job, const PlanRecord& served, const std::string& digest,
             const std::string& reason) { return RollBackPlan(job, served, digest, reason); },
      [](const PlanRecord& record, const JobRecord& job) -> absl::StatusOr<std::string> {
        ASSIGN_OR_RETURN(v1::Plan p, PlanRecordToProto(record, job.graph_fingerprint,
                                                       job.cluster_fingerprint));
        return PlanDigest(p);
      });
  CHECK_GE(options_.max_concurrent_searches, 1);
  CHECK_GE(options_.queue_size, 1);
}

JobManager::~JobManager() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_searches_ = true;
  cv_.notify_all();
  for (std::thread& t : runners_) t.join();
}

absl::Status JobManager::Start() {
  CHECK(runners_.empty()) << "JobManager::Start called twice";
  if (tasks_ != nullptr) {
    ASSIGN_OR_RETURN(int n, tasks_->RequeueAllLeased());
    if (n > 0) LOG(INFO) << "re-queued " << n << " profiling tasks leased before the restart";
  }
  ASSIGN_OR_RETURN(std::vector<JobRecord> unfinished, store_->UnfinishedJobs());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (JobRecord& rec : unfinished) {
      if (rec.interrupted_runs >= options_.max_interrupted_runs) {
        // The process died while running this job that often: resuming it
        // again would likely crash again (a crash loop under a supervisor).
        rec.phase = JobPhase::kFailed;
        rec.error = absl::StrCat("the server stopped ", rec.interrupted_runs,
                                 " times while running this job (crash or kill); not resumed");
        LOG(WARNING) << "job " << rec.id << ": " << rec.error;
        RETURN_IF_ERROR(store_->UpdateJob(rec));
        continue;
      }
      rec.phase = JobPhase::kQueued;
      ++rec.resumed;
      RETURN_IF_ERROR(store_->UpdateJob(rec));
      auto rt = std::make_shared<Runtime>();
      rt->record = rec;
      queue_.push_back(rec.id);
      active_.emplace(rec.id, std::move(rt));
    }
  }
  changes_.fetch_add(1, std::memory_order_acq_rel);
  if (!queue_.empty()) LOG(INFO) << "resuming " << queue_.size() << " unfinished jobs";
  for (int i = 0; i < options_.max_concurrent_searches; ++i) {
    runners_.emplace_back([this] { RunnerLoop(); });
  }
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> JobManager::Submit(SubmitRequest req) {
  JobRecord rec;
  rec.id = RandomId("job-");
  rec.name = req.name;
  rec.options = req.options;
  const int ranks = req.options.ranks > 0 ? req.options.ranks : req.cluster.num_ranks;
  rec.options.ranks = ranks;
  absl::StatusOr<costmodel::ClusterSpec> cluster = costmodel::WithRanks(req.cluster, ranks);
  if (!cluster.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("options.ranks: ", cluster.status().message()));
  }
  graph::TrainingOptions topts;
  topts.ranks = ranks;
  absl::StatusOr<graph::Graph> train = graph::BuildTrainingGraph(req.forward, topts);
  if (!train.ok()) return Prefixed("model", train.status());
  absl::StatusOr<std::string> forward_fp = graph::FingerprintHex(req.forward);
  if (!forward_fp.ok()) return Prefixed("model", forward_fp.status());
  absl::StatusOr<std::string> graph_fp = graph::FingerprintHex(*train);
  if (!graph_fp.ok()) return Prefixed("model", graph_fp.status());
  rec.forward_fingerprint = *forward_fp;
  rec.graph_fingerprint = *graph_fp;
  rec.cluster_fingerprint = costmodel::ClusterFingerprint(*cluster);
  const std::string key = PlanCacheKey(rec.graph_fingerprint, rec.cluster_fingerprint, rec.options);
  ASSIGN_OR_RETURN(std::unique_ptr<costmodel::ClusterCostModel> cm,
                   MakeCostModel(*cluster, profiles_, options_.profile_db_path));
  if (absl::Status s = costmodel::CheckCostsFinite(*train, *cm, ranks); !s.ok()) {
    return Prefixed("model", s);
  }
  ASSIGN_OR_RETURN(std::optional<PlanRecord> fresh, cache_.LookupFresh(key, cm->Generation()));
  // A parallel key's entry always has its section; one without (or without
  // its program) is a miss.
  if (fresh.has_value() && rec.options.parallel && !ServesParallel(fresh->parallel)) fresh.reset();
  const std::string forward_text = graph::ToText(req.forward);
  const std::string cluster_json = costmodel::ClusterToJson(*cluster);
  rec.report_credential = FeedbackManager::NewCredential();
  const std::string credential_sha = FeedbackManager::CredentialSha256(rec.report_credential);

  std::lock_guard<std::mutex> lock(mu_);
  if (fresh.has_value()) {
    rec.phase = JobPhase::kDone;
    rec.plan_key = key;
    rec.from_cache = true;
    rec.best_cost_s = fresh->predicted_s;
    rec.rolled_back = fresh->rolled_back;
    rec.rollback_reason = fresh->rollback_reason;
    rec.rollback_job = fresh->rollback_job;
    if (fresh->parallel.has_value()) {
      // The plan names the per-device training graph: the job records it.
      rec.graph_fingerprint = fresh->parallel->training_fingerprint;
      rec.parallel_strategy = fresh->parallel->strategy;
      rec.parallel_data_degree = fresh->parallel->data_degree;
      rec.parallel_model_degree = fresh->parallel->model_degree;
    }
    RETURN_IF_ERROR(store_->InsertJob(&rec, forward_text, cluster_json,
                                      fresh->parallel.has_value() ? &*fresh->parallel : nullptr,
                                      credential_sha));
    cache_hits_.fetch_add(1, std::memory_order_relaxed);
    changes_.fetch_add(1, std::memory_order_acq_rel);
    return rec;
  }
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int>(queue_.size()) >= options_.queue_size) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job queue is full (", queue_.size(), " jobs waiting, --queue-size ", options_.queue_size,
        "); retry later"));
  }
  RETURN_IF_ERROR(store_->InsertJob(&rec, forward_text, cluster_json, nullptr, credential_sha));
  auto rt = std::make_shared<Runtime>();
  rt->record = rec;
  rt->record.report_credential.clear();  // only Submit's answer holds it
  rt->training = *std::move(train);
  rt->cluster = *std::move(cluster);
  rt->forward = std::move(req.forward);
  active_.emplace(rec.id, std::move(rt));
  queue_.push_back(rec.id);
  changes_.fetch_add(1, std::memory_order_acq_rel);
  cv_.notify_one();
  return rec;
}

namespace {

// A running job's record is fresher in memory than in the store, except for
// what the training ranks reported, which only the store holds.
JobRecord WithFeedback(JobRecord fresh, const JobRecord& stored) {
  fresh.measured_predicted_s = stored.measured_predicted_s;
  fresh.measured_s = stored.measured_s;
  fresh.measured_baseline_s = stored.measured_baseline_s;
  fresh.rolled_back = stored.rolled_back;
  fresh.rollback_reason = stored.rollback_reason;
  fresh.rollback_job = stored.rollback_job;
  return fresh;
}

}  // namespace

absl::StatusOr<JobRecord> JobManager::Get(const std::string& id) {
  ASSIGN_OR_RETURN(JobRecord stored, store_->GetJob(id));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(id);
  if (it != active_.end()) return WithFeedback(it->second->record, stored);
  return stored;
}

absl::StatusOr<std::vector<JobRecord>> JobManager::List(int limit) {
  ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, store_->ListJobs(limit));
  std::lock_guard<std::mutex> lock(mu_);
  for (JobRecord& j : jobs) {
    auto it = active_.find(j.id);
    if (it != active_.end()) j = WithFeedback(it->second->record, j);  // fresher than the last checkpoint
  }
  return jobs;
}

absl::StatusOr<JobRecord> JobManager::Cancel(const std::string& id) {
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = active_.find(id);
    if (it != active_.end()) {
      rt = it->second;
      rt->cancel = true;
      if (!rt->running) {
        std::erase(queue_, id);
        active_.erase(it);
      }
    }
  }
  if (rt == nullptr) return store_->GetJob(id);  // finished (or unknown: NotFound)
  Finish(*rt, JobPhase::kCancelled, "cancelled by request");
  std::lock_guard<std::mutex> lock(mu_);
  return rt->record;
}

absl::StatusOr<JobPlan> JobManager::GetPlan(const std::string& id) {
  ASSIGN_OR_RETURN(JobRecord rec, Get(id));
  if (rec.phase != JobPhase::kDone) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " is ",
                                                      std::string(JobPhaseName(rec.phase)),
                                                      ": no plan", rec.error.empty() ? "" : ": ",
                                                      rec.error));
  }
  ASSIGN_OR_RETURN(std::optional<PlanRecord> plan, store_->GetPlan(rec.plan_key));
  if (!plan.has_value()) {
    return absl::InternalError(absl::StrCat("job ", id, " is done but its plan is missing"));
  }
  return JobPlan{*plan, rec.from_cache, rec.recosted};
}

absl::StatusOr<MeasurementOutcome> JobManager::ReportMeasurement(const MeasurementReport& rep) {
  ASSIGN_OR_RETURN(MeasurementOutcome out, feedback_->Report(rep));
  changes_.fetch_add(1, std::memory_order_acq_rel);
  return out;
}

absl::StatusOr<std::optional<PlanRecord>> JobManager::RollBackPlan(const JobRecord& job,
                                                                   const PlanRecord& served,
                                                                   const std::string& served_digest,
                                                                   const std::string& reason) {
  ASSIGN_OR_RETURN(StoredJobGraph jg, LoadJobGraph(*store_, job));
  ASSIGN_OR_RETURN(std::unique_ptr<costmodel::ClusterCostModel> cm,
                   MakeCostModel(jg.cluster, profiles_, options_.profile_db_path));
  JobCostModel jcm(*cm, jg.cluster, jg.parallel);  // per-device for a parallel job
  ASSIGN_OR_RETURN(search::BaselineResults b, search::RunBaselines(jg.training, jcm.get()));
  ASSIGN_OR_RETURN(PlanRecord r, MakeRollbackRecord(served, jg.training, b, jcm.get(),
                                                    {reason, job.id, served_digest}));
  ASSIGN_OR_RETURN(v1::Plan p, PlanRecordToProto(r, job.graph_fingerprint, job.cluster_fingerprint));
  if (PlanDigest(p) == served_digest) return std::optional<PlanRecord>();
  return std::optional<PlanRecord>(std::move(r));
}

absl::StatusOr<double> JobManager::Calibration(const JobRecord& job) {
  return feedback_->Calibration(job.cluster_fingerprint, JobKind(job.options));
}

absl::StatusOr<int64_t> JobManager::Subscribe(const std::string& id, Listener listener) {
  std::lock_guard<std::mutex> llock(listeners_mu_);
  JobRecord rec;
  int64_t version = 0;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = active_.find(id);
    if (it != active_.end()) {
      rec = it->second->record;
      version = it->second->version;
      found = true;
    }
  }
  if (!found) {
    ASSIGN_OR_RETURN(JobRecord stored, store_->GetJob(id));
    rec = std::move(stored);
  }
  listener(rec, version);
  const int64_t sub = next_subscription_++;
  listeners_.emplace(sub, std::make_pair(id, std::move(listener)));
  return sub;
}

void JobManager::Unsubscribe(int64_t subscription) {
  std::lock_guard<std::mutex> llock(listeners_mu_);
  listeners_.erase(subscription);
  all_listeners_.erase(subscription);
}

int64_t JobManager::SubscribeAll(Listener listener) {
  std::lock_guard<std::mutex> llock(listeners_mu_);
  const int64_t sub = next_subscription_++;
  all_listeners_.emplace(sub, std::move(listener));
  return sub;
}

JobManagerStats JobManager::Stats() {
  JobManagerStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.queued = static_cast<int>(queue_.size());
    for (const auto& [id, rt] : active_) s.running += rt->running ? 1 : 0;
  }
  s.candidates_evaluated = candidates_total_.load(std::memory_order_relaxed);
  s.plan_cache_hits = cache_hits_.load(std::memory_order_relaxed);
  s.plan_cache_misses = cache_misses_.load(std::memory_order_relaxed);
  return s;
}

void JobManager::Notify(const std::string& id, const JobRecord& record, int64_t version) {
  std::lock_guard<std::mutex> llock(listeners_mu_);
  for (auto& [sub, entry] : listeners_) {
    if (entry.first == id) entry.second(record, version);
  }
  for (auto& [sub, listener] : all_listeners_) listener(record, version);
}

void JobManager::Update(Runtime& rt, const std::function<void(JobRecord&)>& change, bool persist) {
  JobRecord snapshot;
  int64_t version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (IsFinal(rt.record.phase)) return;
    change(rt.record);
    version = ++rt.version;
    snapshot = rt.record;
  }
  changes_.fetch_add(1, std::memory_order_acq_rel);
  if (persist) {
    std::lock_guard<std::mutex> plock(rt.persist_mu);
    if (version > rt.persisted_version) {
      if (absl::Status s = store_->UpdateJob(snapshot); !s.ok()) {
        LOG(ERROR) << "job " << snapshot.id << ": checkpoint failed: " << s;
      }
      rt.persisted_version = version;
    }
  }
  Notify(snapshot.id, snapshot, version);
}

void JobManager::Finish(Runtime& rt, JobPhase phase, const std::string& error) {
  Update(rt, [&](JobRecord& r) {
    r.phase = phase;
    r.error = error;
  }, /*persist=*/true);
}

void JobManager::RunnerLoop() {
  while (true) {
    std::shared_ptr<Runtime> rt;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      const std::string id = queue_.front();
      queue_.pop_front();
      auto it = active_.find(id);
      if (it == active_.end()) continue;
      rt = it->second;
      rt->running = true;
    }
    RunJob(rt);
    std::lock_guard<std::mutex> lock(mu_);
    active_.erase(rt->record.id);
  }
}

absl::Status JobManager::Import(Runtime& rt) {
  if (rt.cluster.has_value() && rt.training.has_value() && rt.forward.has_value()) {
    return absl::OkStatus();
  }
  const JobRecord& rec = rt.record;  // the ids used here never change
  ASSIGN_OR_RETURN(StoredJobGraph jg, LoadJobGraph(*store_, rec));
  rt.cluster = std::move(jg.cluster);
  rt.training = std::move(jg.training);
  rt.forward = std::move(jg.forward);
  return absl::OkStatus();
}

void JobManager::RunJob(const std::shared_ptr<Runtime>& rt_ptr) {
  Runtime& rt = *rt_ptr;
  // Counted (and persisted) before anything can crash; a controlled end
  // takes it back, so what remains after a restart counts interruptions.
  Update(rt, [](JobRecord& r) {
    r.phase = JobPhase::kImporting;
    ++r.interrupted_runs;
  }, true);
  // A job's failure is the job's: whatever a step throws fails this job
  // with the reason and leaves the server running.
  try {
    RunJobSteps(rt);
  } catch (const std::exception& e) {
    Finish(rt, JobPhase::kFailed, absl::StrCat("internal error while running the job: ", e.what()));
  } catch (...) {
    Finish(rt, JobPhase::kFailed, "internal error while running the job: unknown exception");
  }
  if (stop_searches_) {  // shutdown: this run ended in a controlled way
    Update(rt, [](JobRecord& r) { r.interrupted_runs = std::max(0, r.interrupted_runs - 1); },
           true);
  }
}

void JobManager::RunJobSteps(Runtime& rt) {
  if (absl::Status s = Import(rt); !s.ok()) return Finish(rt, JobPhase::kFailed, s.ToString());
  absl::StatusOr<std::unique_ptr<costmodel::ClusterCostModel>> cm =
      MakeCostModel(*rt.cluster, profiles_, options_.profile_db_path);
  if (!cm.ok()) return Finish(rt, JobPhase::kFailed, cm.status().ToString());
  if (absl::Status s = costmodel::CheckCostsFinite(*rt.training, **cm, rt.cluster->num_ranks);
      !s.ok()) {
    return Finish(rt, JobPhase::kFailed, s.ToString());
  }
  JobRecord rec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rec = rt.record;
  }
  const std::string key = PlanCacheKey(rec.graph_fingerprint, rec.cluster_fingerprint, rec.options);
  if (rec.options.parallel) return RunParallelJob(rt, rec, key, **cm);
  absl::StatusOr<std::optional<CachedPlan>> hit = cache_.Lookup(key, *rt.training, **cm);
  if (!hit.ok()) return Finish(rt, JobPhase::kFailed, hit.status().ToString());
  if (hit->has_value()) {
    Update(rt, [&](JobRecord& r) { RecordCacheHit(r, key, **hit); }, true);
    cache_hits_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  cache_misses_.fetch_add(1, std::memory_order_relaxed);

  const std::string& kind = rt.cluster->device.kind;
  if (tasks_ != nullptr && tasks_->HasLiveWorker(kind)) {
    Update(rt, [](JobRecord& r) { r.phase = JobPhase::kProfiling; }, true);
    absl::StatusOr<int> created = tasks_->CreateTasksForMisses(*rt.training, kind);
    if (!created.ok()) {
      LOG(WARNING) << "job " << rec.id << ": creating profiling tasks failed: " << created.status();
    } else if (*created > 0) {
      LOG(INFO) << "job " << rec.id << ": " << *created << " profiling tasks for " << kind;
    }
  }

  if (rt.cancel || stop_searches_) return;  // recorded by Cancel(), or resumes on restart
  Update(rt, [](JobRecord& r) { r.phase = JobPhase::kSearching; }, true);
  search::SearchConfig cfg;
  cfg.alpha = rec.options.alpha;
  cfg.beta = rec.options.beta;
  cfg.seed = rec.options.seed;
  cfg.patience = rec.options.patience;
  cfg.time_budget_s = rec.options.budget_s;
  cfg.threads = options_.search_threads;
  double last_checkpoint_s = 0;
  int64_t last_candidates = 0;
  // Resume from the best plan an earlier run of this job checkpointed.
  if (absl::StatusOr<std::string> saved = store_->CheckpointPlan(rec.id);
      saved.ok() && !saved->empty()) {
    nlohmann::json j = nlohmann::json::parse(*saved, nullptr, /*allow_exceptions=*/false);
    absl::StatusOr<search::Plan> p =
        j.is_discarded() ? absl::StatusOr<search::Plan>(absl::DataLossError("bad JSON"))
                         : search::PlanFromJson(*rt.training, j);
    if (p.ok()) {
      cfg.initial_plans.push_back(*std::move(p));
    } else {
      LOG(WARNING) << "job " << rec.id << ": ignoring its checkpointed plan: " << p.status();
    }
  }
  // Cancel() and shutdown reach the search directly: it polls both flags in
  // its baselines, steps and evaluations, so the runner and its slot are
  // free within tens of ms (the search then returns Cancelled or a partial
  // result, both ignored below).
  cfg.cancel = &rt.cancel;
  cfg.stop.AddFlag(&stop_searches_);
  bool unsaved_plan = false;
  cfg.progress = [&](const search::SearchProgress& p) {
    candidates_total_.fetch_add(p.candidates_evaluated - last_candidates,
                                std::memory_order_relaxed);
    last_candidates = p.candidates_evaluated;
    unsaved_plan = unsaved_plan || p.improved;
    const bool persist = p.elapsed_s - last_checkpoint_s >= options_.checkpoint_interval_s;
    if (persist) last_checkpoint_s = p.elapsed_s;
    if (persist && unsaved_plan && p.best_plan != nullptr) {
      absl::Status s =
          store_->SaveCheckpointPlan(rec.id, search::PlanToJson(*rt.training, *p.best_plan).dump());
      if (!s.ok()) LOG(ERROR) << "job " << rec.id << ": saving the checkpoint plan failed: " << s;
      unsaved_plan = !s.ok();
    }
    Update(rt, [&](JobRecord& r) {
      r.best_cost_s = p.best_cost_s;
      r.candidates = p.candidates_evaluated;
      r.elapsed_s = p.elapsed_s;
    }, persist);
  };
  absl::StatusOr<search::SearchResult> result =
      rec.options.op_fusion ? search::RunFusionSearch(*rt.training, **cm, cfg)
                            : search::RunBucketOnlySearch(*rt.training, **cm, cfg);
  if (stop_searches_) return;  // shutdown: the job resumes on the next Start()
  if (rt.cancel) return;       // Cancel() already recorded it
  if (!result.ok()) return Finish(rt, JobPhase::kFailed, result.status().ToString());
  absl::StatusOr<PlanRecord> stored =
      cache_.Insert(key, *rt.training, *result, (*cm)->Generation(), std::nullopt,
                    CostSourcesJson(*rt.training, result->plan, **cm));
  if (!stored.ok()) return Finish(rt, JobPhase::kFailed, stored.status().ToString());
  // The plan's fused kernels go to the workers of its device kind to be
  // measured: a later plan for this cluster (or this plan re-costed when
  // its cache entry goes stale with the new profiles) costs them from
  // measurements instead of corrected rooflines.
  if (tasks_ != nullptr && !result->plan.groups.empty() && tasks_->HasLiveWorker(kind)) {
    std::vector<std::vector<graph::OpId>> groups;
    for (const search::FusionGroup& grp : result->plan.groups) groups.push_back(grp.ops);
    absl::StatusOr<int> fused = tasks_->CreateFusedTasks(*rt.training, groups, kind);
    if (!fused.ok()) {
      LOG(WARNING) << "job " << rec.id << ": creating fused-op profiling tasks failed: "
                   << fused.status();
    } else if (*fused > 0) {
      LOG(INFO) << "job " << rec.id << ": " << *fused << " fused-op profiling tasks for " << kind;
    }
  }
  Update(rt, [&](JobRecord& r) {
    r.plan_key = key;
    r.best_cost_s = stored->predicted_s;
    r.rolled_back = stored->rolled_back;
    r.rollback_reason = stored->rollback_reason;
    r.rollback_job = stored->rollback_job;
    r.candidates = result->stats.candidates_generated;
    r.elapsed_s = result->stats.elapsed_s;
    r.phase = JobPhase::kDone;
  }, true);
}

namespace {

// The section stored for PlanParallel's result: the per-device forward
// graph as text (checked to rebuild to the training graph the plan names:
// collective attrs such as comm_time_s included), the "parallel" JSON
// with every strategy's simulated time, and the served row's per-device
// program as `braid plan --parallel -o` lowers it (or why the lowering
// refused the row: the plan is kept without one).
absl::StatusOr<ParallelSection> MakeParallelSection(const graph::Graph& forward,
                                                    const costmodel::ClusterSpec& cluster,
                                                    const search::ParallelPlanResult& r,
                                                    const search::ParallelPlanOptions& options) {
  // The row whose fused plan this is (r.device, r.training, r.fusion): the
  // chosen one, unless a pipeline row was chosen (not run by the service:
  // see RunParallelJob); then the fastest simulated fused row, which those are.
  int served = r.chosen;
  if (served < 0 || r.rows[served].pipeline) {
    served = -1;
    for (int i = 0; i < static_cast<int>(r.rows.size()); ++i) {
      const search::ParallelPlanRow& row = r.rows[i];
      if (row.pipeline || !row.fused_status.ok()) continue;
      if (served < 0 || row.simulated_s < r.rows[served].simulated_s) served = i;
    }
    if (served < 0) return absl::InternalError("PlanParallel returned no fused row");
  }
  const search::ParallelPlanRow& chosen = r.rows[served];
  ParallelSection p;
  p.strategy = chosen.strategy.name;
  p.degree = r.device.degree;
  p.data_degree = r.device.data_degree;
  p.model_degree = r.device.model_degree;
  p.forward_text = graph::ToText(r.device.forward);
  ASSIGN_OR_RETURN(p.training_fingerprint, graph::FingerprintHex(r.training));
  // ParallelPlanJson takes the submitted graph (a substituted row uses its own).
  nlohmann::json j = search::ParallelPlanJson(forward, chosen, cluster);
  j["strategies"] = search::ParallelStrategyRowsJson(r);
  j["chosen_by"] = r.chosen_by;
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [param, group] : r.device.grad_group) groups[param] = group;
  j["grad_group"] = std::move(groups);
  if (!r.device.grad_devices.empty()) {
    nlohmann::json devices = nlohmann::json::object();
    for (const auto& [param, n] : r.device.grad_devices) devices[param] = n;
    j["grad_devices"] = std::move(devices);
  }
  p.json = j.dump();
  // The served row's program, as PlanParallel priced it.
  absl::StatusOr<graph::Program> program = search::PlanRowProgram(forward, r, served, options);
  if (program.ok()) {
    p.program_json = graph::ProgramToJson(*program).dump();
  } else {
    p.program_error = std::string(program.status().message());
  }
  absl::StatusOr<graph::Graph> rebuilt = ParallelTrainingGraph(p);
  if (!rebuilt.ok()) {
    return absl::InternalError(absl::StrCat(
        "the per-device graph of strategy ", p.strategy,
        " does not round-trip through the text format: ", rebuilt.status().message()));
  }
  return p;
}

}  // namespace

void JobManager::RunParallelJob(Runtime& rt, const JobRecord& rec, const std::string& key,
                                costmodel::CostModel& cm) {
  // A cached entry's section names the per-device graph its plan refers to:
  // the look-up (and re-costing of a stale entry) runs on that graph.
  absl::StatusOr<std::optional<PlanRecord>> entry = store_->GetPlan(key);
  if (!entry.ok()) return Finish(rt, JobPhase::kFailed, entry.status().ToString());
  if (entry->has_value() && (*entry)->parallel.has_value()) {
    absl::StatusOr<graph::Graph> train = ParallelTrainingGraph(*(*entry)->parallel);
    if (!train.ok()) {
      LOG(WARNING) << "plan cache: ignoring parallel entry " << key << ": " << train.status();
    } else {
      JobCostModel jcm(cm, *rt.cluster, (*entry)->parallel);
      absl::StatusOr<std::optional<CachedPlan>> hit = cache_.Lookup(key, *train, jcm.get());
      if (!hit.ok()) return Finish(rt, JobPhase::kFailed, hit.status().ToString());
      if (hit->has_value() && ServesParallel((*hit)->record.parallel)) {
        const ParallelSection& par = *(*hit)->record.parallel;
        if (absl::Status s = store_->PutJobParallel(rec.id, par); !s.ok()) {
          return Finish(rt, JobPhase::kFailed, s.ToString());
        }
        Update(rt, [&](JobRecord& r) {
          r.graph_fingerprint = par.training_fingerprint;
          r.parallel_strategy = par.strategy;
          r.parallel_data_degree = par.data_degree;
          r.parallel_model_degree = par.model_degree;
          RecordCacheHit(r, key, **hit);
        }, true);
        cache_hits_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
  }
  cache_misses_.fetch_add(1, std::memory_order_relaxed);

  if (rt.cancel || stop_searches_) return;  // recorded by Cancel(), or resumes on restart
  Update(rt, [](JobRecord& r) { r.phase = JobPhase::kSearching; }, true);
  search::ParallelPlanOptions o;
  // The optimizer the service's training graphs are built with.
  o.table.base.optimizer = graph::TrainingOptions{}.optimizer;
  o.op_fusion = rec.options.op_fusion;
  // The service serves one per-device training graph with its groups and
  // buckets; pipeline rows (stages over micro-batches, not fused) have no
  // such graph, so they are left out of the table here (options.no_pipeline
  // or not).
  o.pipeline = false;
  // A requested row (ParseSubmitRequest admits only non-pipeline row names)
  // is the plan; a row this model's table lacks, or one without a plan,
  // fails the job with PlanParallel's InvalidArgument naming the rows.
  o.strategy_row = rec.options.strategy_row;
  o.lowering.sync_batch_norm = rec.options.sync_batch_norm;
  search::SearchConfig& cfg = o.fusion;
  cfg.alpha = rec.options.alpha;
  cfg.beta = rec.options.beta;
  cfg.seed = rec.options.seed;
  cfg.patience = rec.options.patience;
  cfg.threads = options_.search_threads;
  // Each fitting strategy gets its own fusion search: data parallel, braid,
  // braid on the graph the algebraic substitutions rewrote (when one is
  // predicted faster), and the expert rows that apply (Megatron where the
  // graph has attention or is a stack of Linears, DLRM's where it has
  // embedding tables). Split so that all of them together stay within the
  // job's budget.
  const int searches = 3 +
                       (search::HasAttention(*rt.forward) || search::HasLinearStack(*rt.forward) ? 1 : 0) +
                       (search::HasEmbeddingTables(*rt.forward) ? 1 : 0);
  cfg.time_budget_s = rec.options.budget_s / searches;
  // The job's budget bounds the whole parallel search, table and DP runs
  // included; cfg.cancel and cfg.stop reach every phase of it.
  o.time_budget_s = rec.options.budget_s;
  cfg.cancel = &rt.cancel;
  cfg.stop.AddFlag(&stop_searches_);
  // Progress over the strategies' searches, one after another: each starts
  // from zero candidates and elapsed time.
  const auto start = std::chrono::steady_clock::now();
  int64_t done_candidates = 0, last_candidates = 0;
  double last_elapsed = 0, last_checkpoint_s = 0, best = 0;
  cfg.progress = [&](const search::SearchProgress& p) {
    if (p.candidates_evaluated < last_candidates || p.elapsed_s < last_elapsed) {
      done_candidates += last_candidates;  // the next strategy's search began
      last_candidates = 0;
    }
    candidates_total_.fetch_add(p.candidates_evaluated - last_candidates,
                                std::memory_order_relaxed);
    last_candidates = p.candidates_evaluated;
    last_elapsed = p.elapsed_s;
    if (p.best_cost_s > 0 && (best == 0 || p.best_cost_s < best)) best = p.best_cost_s;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool persist = elapsed - last_checkpoint_s >= options_.checkpoint_interval_s;
    if (persist) last_checkpoint_s = elapsed;
    Update(rt, [&](JobRecord& r) {
      r.best_cost_s = best;
      r.candidates = done_candidates + p.candidates_evaluated;
      r.elapsed_s = elapsed;
    }, persist);
  };
  absl::StatusOr<search::ParallelPlanResult> result =
      search::PlanParallel(*rt.forward, *rt.cluster, cm, o);
  if (stop_searches_) return;  // shutdown: the job resumes on the next Start()
  if (rt.cancel) return;       // Cancel() already recorded it
  if (!result.ok()) return Finish(rt, JobPhase::kFailed, result.status().ToString());
  absl::StatusOr<ParallelSection> section =
      MakeParallelSection(*rt.forward, *rt.cluster, *result, o);
  if (!section.ok()) return Finish(rt, JobPhase::kFailed, section.status().ToString());
  absl::StatusOr<PlanRecord> stored =
      cache_.Insert(key, result->training, result->fusion, cm.Generation(), *section,
                    CostSourcesJson(result->training, result->fusion.plan, cm));
  if (!stored.ok()) return Finish(rt, JobPhase::kFailed, stored.status().ToString());
  // What the key serves now (a rolled-back entry kept over this search has
  // its own section): the job records that.
  const ParallelSection par = stored->parallel.value_or(*section);
  if (absl::Status s = store_->PutJobParallel(rec.id, par); !s.ok()) {
    return Finish(rt, JobPhase::kFailed, s.ToString());
  }
  const std::string& kind = rt.cluster->device.kind;
  if (tasks_ != nullptr && tasks_->HasLiveWorker(kind)) {
    // The per-device graph's ops (piece shapes) and fused kernels.
    absl::StatusOr<int> created = tasks_->CreateTasksForMisses(result->training, kind);
    if (!created.ok()) {
      LOG(WARNING) << "job " << rec.id << ": creating profiling tasks failed: " << created.status();
    }
    std::vector<std::vector<graph::OpId>> groups;
    for (const search::FusionGroup& grp : result->fusion.plan.groups) groups.push_back(grp.ops);
    if (!groups.empty()) {
      absl::StatusOr<int> fused = tasks_->CreateFusedTasks(result->training, groups, kind);
      if (!fused.ok()) {
        LOG(WARNING) << "job " << rec.id << ": creating fused-op profiling tasks failed: "
                     << fused.status();
      }
    }
  }
  const int64_t candidates = done_candidates + last_candidates;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Update(rt, [&](JobRecord& r) {
    r.graph_fingerprint = par.training_fingerprint;
    r.parallel_strategy = par.strategy;
    r.parallel_data_degree = par.data_degree;
    r.parallel_model_degree = par.model_degree;
    r.plan_key = key;
    r.best_cost_s = stored->predicted_s;
    r.rolled_back = stored->rolled_back;
    r.rollback_reason = stored->rollback_reason;
    r.rollback_job = stored->rollback_job;
    r.candidates = candidates;
    r.elapsed_s = elapsed;
    r.phase = JobPhase::kDone;
  }, true);
}

}  // namespace braid::server
