// Tests of the job manager: persistence across a restart, cancellation, the
// bounded queue, the plan cache (hit, generation change -> re-cost), and
// measured feedback with a rollback across a restart; parallel jobs
// (JobOptions::parallel): the per-device plan and its section across a
// restart and a cache hit, re-costing, cancel/shutdown, rollback, and a
// cluster nothing fits.
#include "server/job_manager.h"

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "gmock/gmock.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "base/sqlite.h"
#include "base/status_macros.h"
#include "graph/builder.h"
#include "graph/fingerprint.h"
#include "graph/program.h"
#include "graph/text_format.h"
#include "proto/plan_digest.h"
#include "search/baselines.h"
#include "search/plan.h"
#include "server/job_graph.h"
#include "server/plan_proto.h"
#include "server/status_json.h"

namespace braid::server {
namespace {

namespace v1 = braid::v1;
using ::testing::HasSubstr;

std::string TempDb(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/braid_job_manager_test";
  std::filesystem::create_directories(dir);
  std::string path = dir + "/" + name;
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  return path;
}

SubmitRequest MlpRequest(double budget_s, int patience, uint64_t seed = 7) {
  SubmitRequest r;
  r.name = "mlp";
  r.forward = *graph::BuildZooModel("mlp");
  r.cluster = *costmodel::ClusterPreset("cpu-local");
  r.options.ranks = 2;
  r.options.budget_s = budget_s;
  r.options.patience = patience;
  r.options.seed = seed;
  return r;
}

// Polls until `pred` holds for the job (`limit_s` at most).
JobRecord WaitFor(JobManager& jobs, const std::string& id,
                  const std::function<bool(const JobRecord&)>& pred, int limit_s = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limit_s);
  while (true) {
    absl::StatusOr<JobRecord> r = jobs.Get(id);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || pred(*r) || std::chrono::steady_clock::now() > deadline) return *r;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool Final(const JobRecord& r) { return IsFinal(r.phase); }

// One run of `job`'s plan (StartRun with its credential) in which every
// rank reports `plan_s` / `baseline_s`; the last rank's outcome.
absl::StatusOr<MeasurementOutcome> ReportRun(JobManager& jobs, const JobRecord& submitted,
                                             const std::vector<double>& plan_s,
                                             const std::vector<double>& baseline_s,
                                             const std::string& source = "braid-worker activate") {
  RunRequest run{submitted.id, submitted.report_credential, submitted.options.ranks, source, ""};
  ASSIGN_OR_RETURN(StartedRun started, jobs.feedback().StartRun(run));
  absl::StatusOr<MeasurementOutcome> out = absl::InternalError("no rank");
  for (int rank = 0; rank < submitted.options.ranks; ++rank) {
    MeasurementReport r;
    r.job_id = submitted.id;
    r.rank = rank;
    r.world_size = submitted.options.ranks;
    r.source = source;
    r.plan_s = plan_s;
    r.baseline_s = baseline_s;
    r.credential = submitted.report_credential;
    r.attempt_id = started.attempt_id;
    out = jobs.ReportMeasurement(r);
    if (!out.ok()) return out;
  }
  return out;
}

// Eight interleaved pairs where the plan loses to DDP by about 2 ms.
std::pair<std::vector<double>, std::vector<double>> LosingPairs() {
  std::vector<double> plan_s, baseline_s;
  for (int i = 0; i < 8; ++i) {
    plan_s.push_back(0.012 + 1e-4 * (i % 3));
    baseline_s.push_back(0.010 + 1e-4 * (i % 2));
  }
  return {plan_s, baseline_s};
}

struct Env {
  explicit Env(const std::string& path) {
    store = *Store::Open(path);
    profiles = *costmodel::ProfileStore::Open(":memory:");
  }
  std::unique_ptr<Store> store;
  std::unique_ptr<costmodel::ProfileStore> profiles;
};

TEST(JobManagerTest, JobSurvivesACrashMidSearchAndCompletesAfterRestart) {
  const std::string path = TempDb("restart.db");
  Env env(path);
  std::string id;
  {
    JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {.checkpoint_interval_s = 0});
    ASSERT_TRUE(jobs.Start().ok());
    absl::StatusOr<JobRecord> j = jobs.Submit(MlpRequest(/*budget_s=*/2, /*patience=*/1 << 30));
    ASSERT_TRUE(j.ok()) << j.status();
    id = j->id;
    // Persisted before Submit returned (the runner may have moved it on).
    absl::StatusOr<JobRecord> stored = env.store->GetJob(id);
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_FALSE(IsFinal(stored->phase));
    WaitFor(jobs, id, [](const JobRecord& r) { return r.candidates > 0; });
  }  // "crash": the manager goes away mid-search
  JobRecord ckpt = *env.store->GetJob(id);
  EXPECT_EQ(ckpt.phase, JobPhase::kSearching);
  EXPECT_EQ(ckpt.interrupted_runs, 0);  // a shutdown is a controlled end
  EXPECT_GT(ckpt.candidates, 0);
  EXPECT_GT(ckpt.best_cost_s, 0);

  env.store.reset();
  env.store = *Store::Open(path);  // a new process opens the same file
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  JobRecord done = WaitFor(jobs, id, Final);
  EXPECT_EQ(done.phase, JobPhase::kDone) << done.error;
  EXPECT_EQ(done.resumed, 1);
  absl::StatusOr<JobPlan> plan = jobs.GetPlan(id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->record.predicted_s, done.best_cost_s);
  EXPECT_EQ(env.store->GetJob(id)->phase, JobPhase::kDone);
}

TEST(JobManagerTest, AJobThatKeepsKillingTheProcessIsFailedNotResumed) {
  const std::string path = TempDb("interrupted.db");
  Env env(path);
  std::string once, twice;
  {
    JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
    // Not started: the jobs stay queued, as if the process died before.
    once = jobs.Submit(MlpRequest(/*budget_s=*/1, /*patience=*/20))->id;
    twice = jobs.Submit(MlpRequest(/*budget_s=*/1, /*patience=*/20))->id;
  }
  // What a process killed mid-run leaves: the run counted, never taken back.
  for (const auto& [id, runs] : {std::pair{once, 1}, std::pair{twice, 2}}) {
    JobRecord r = *env.store->GetJob(id);
    r.phase = JobPhase::kSearching;
    r.interrupted_runs = runs;
    ASSERT_TRUE(env.store->UpdateJob(r).ok());
  }
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {.max_interrupted_runs = 2});
  ASSERT_TRUE(jobs.Start().ok());
  JobRecord failed = *env.store->GetJob(twice);
  EXPECT_EQ(failed.phase, JobPhase::kFailed);
  EXPECT_THAT(failed.error, HasSubstr("stopped 2 times while running this job"));
  JobRecord done = WaitFor(jobs, once, Final);
  EXPECT_EQ(done.phase, JobPhase::kDone) << done.error;
  EXPECT_EQ(done.resumed, 1);
}

TEST(JobManagerTest, CancelStopsTheSearchAndTheQueueIsBounded) {
  Env env(":memory:");
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr,
                  {.max_concurrent_searches = 1, .queue_size = 1});
  ASSERT_TRUE(jobs.Start().ok());
  absl::StatusOr<JobRecord> a = jobs.Submit(MlpRequest(60, 1 << 30, 1));
  ASSERT_TRUE(a.ok());
  WaitFor(jobs, a->id, [](const JobRecord& r) { return r.candidates > 0; });
  absl::StatusOr<JobRecord> b = jobs.Submit(MlpRequest(60, 5, 2));  // waits in the queue
  ASSERT_TRUE(b.ok());
  absl::StatusOr<JobRecord> c = jobs.Submit(MlpRequest(60, 5, 3));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("queue is full"));

  absl::StatusOr<JobRecord> cancelled = jobs.Cancel(a->id);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->phase, JobPhase::kCancelled);
  // A's search stops, so B (patience 5) runs and finishes: had A kept its
  // runner for its 60 s budget, B would not be done when WaitFor gives up.
  JobRecord bdone = WaitFor(jobs, b->id, Final, 30);
  EXPECT_EQ(bdone.phase, JobPhase::kDone) << bdone.error;
  EXPECT_EQ(env.store->GetJob(a->id)->phase, JobPhase::kCancelled);
  EXPECT_EQ(jobs.GetPlan(a->id).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(JobManagerTest, PlanCacheHitAndRecostAfterGenerationChange) {
  Env env(":memory:");
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  absl::StatusOr<JobRecord> first = jobs.Submit(MlpRequest(5, 3));
  ASSERT_TRUE(first.ok());
  JobRecord done = WaitFor(jobs, first->id, Final);
  ASSERT_EQ(done.phase, JobPhase::kDone) << done.error;
  JobPlan plan1 = *jobs.GetPlan(first->id);
  EXPECT_FALSE(plan1.from_cache);
  EXPECT_EQ(plan1.record.generation, "braid-0.1.0/profiles-0/estimator-none");

  // Same graph, cluster and options: done at once from the cache.
  absl::StatusOr<JobRecord> hit = jobs.Submit(MlpRequest(5, 3));
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->phase, JobPhase::kDone);
  EXPECT_TRUE(hit->from_cache);
  EXPECT_EQ(jobs.GetPlan(hit->id)->record.plan_json, plan1.record.plan_json);

  // Another seed is another key: a miss.
  absl::StatusOr<JobRecord> miss = jobs.Submit(MlpRequest(5, 3, /*seed=*/8));
  EXPECT_EQ(miss->phase, JobPhase::kQueued);
  WaitFor(jobs, miss->id, Final);

  // A measured profile changes the cost generation: the cached plan is
  // re-simulated under the new cost model before it is served.
  graph::Graph train = *graph::BuildTrainingGraph(*graph::BuildZooModel("mlp"), {.ranks = 2});
  graph::OpId mm = 0;
  while (train.op(mm).type != "MatMul" && train.op(mm).type != "Gemm") ++mm;
  ASSERT_TRUE(env.profiles
                  ->Put({costmodel::LocalCpuDeviceKind(), train.op(mm).type,
                         costmodel::OpSignature(train, mm)},
                        {.median_s = 1000.0, .spread_s = 0.1, .repetitions = 3})
                  .ok());
  absl::StatusOr<JobRecord> stale = jobs.Submit(MlpRequest(5, 3));
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale->phase, JobPhase::kQueued);  // not served as is
  JobRecord recosted = WaitFor(jobs, stale->id, Final);
  ASSERT_EQ(recosted.phase, JobPhase::kDone) << recosted.error;
  JobPlan plan2 = *jobs.GetPlan(stale->id);
  EXPECT_TRUE(plan2.from_cache);
  EXPECT_TRUE(plan2.recosted);
  EXPECT_EQ(plan2.record.plan_json, plan1.record.plan_json);
  EXPECT_EQ(plan2.record.generation, "braid-0.1.0/profiles-1/estimator-none");
  // The new cost is the plan simulated under the current model: one MatMul
  // now takes 1000 s, so the iteration takes at least that.
  costmodel::ClusterSpec cluster = *costmodel::WithRanks(*costmodel::ClusterPreset("cpu-local"), 2);
  costmodel::ClusterCostModel cm(cluster, env.profiles.get(), nullptr,
                                 *costmodel::CommModelFromStore(cluster, env.profiles.get()));
  search::Plan p = *search::PlanFromJson(train, nlohmann::json::parse(plan1.record.plan_json));
  EXPECT_DOUBLE_EQ(plan2.record.predicted_s, search::EvaluatePlan(train, p, cm)->iteration_s);
  EXPECT_GE(plan2.record.predicted_s, 1000.0);
  EXPECT_LT(plan1.record.predicted_s, 1000.0);
}

TEST(JobManagerTest, SubscribersSeeEveryPhaseUpToDone) {
  Env env(":memory:");
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  absl::StatusOr<JobRecord> j = jobs.Submit(MlpRequest(5, 3));
  std::mutex mu;
  std::vector<JobPhase> phases;
  int64_t last_version = -1;
  absl::StatusOr<int64_t> sub = jobs.Subscribe(j->id, [&](const JobRecord& r, int64_t v) {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_GT(v, last_version);
    last_version = v;
    if (phases.empty() || phases.back() != r.phase) phases.push_back(r.phase);
  });
  ASSERT_TRUE(sub.ok());
  WaitFor(jobs, j->id, Final);
  jobs.Unsubscribe(*sub);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_FALSE(phases.empty());
  EXPECT_EQ(phases.back(), JobPhase::kDone);
  EXPECT_EQ(jobs.Subscribe("job-nope", [](const JobRecord&, int64_t) {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(JobManagerTest, MeasurementsAndARollbackSurviveARestart) {
  const std::string path = TempDb("feedback.db");
  std::string id, replaced;
  {
    Env env(path);
    JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
    ASSERT_TRUE(jobs.Start().ok());
    absl::StatusOr<JobRecord> j = jobs.Submit(MlpRequest(5, 3));
    ASSERT_TRUE(j.ok()) << j.status();
    id = j->id;
    ASSERT_EQ(WaitFor(jobs, id, Final).phase, JobPhase::kDone);
    const PlanRecord searched = jobs.GetPlan(id)->record;
    ASSERT_NE(searched.origin, "baseline:ddp");
    EXPECT_GE(searched.compute_s, 0);
    EXPECT_FALSE(searched.ddp_buckets_json.empty());
    const auto [plan_s, baseline_s] = LosingPairs();
    const int64_t before = jobs.FeedbackVersion();
    absl::StatusOr<MeasurementOutcome> o = ReportRun(jobs, *j, plan_s, baseline_s);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_TRUE(o->rolled_back);
    EXPECT_THAT(o->rollback_reason, HasSubstr("on 2 ranks: slower by "));
    EXPECT_THAT(o->rollback_reason, HasSubstr("(braid-worker activate)"));
    EXPECT_GT(jobs.FeedbackVersion(), before);
    EXPECT_EQ(*jobs.Calibration(*j), 0);  // a rolled-back plan's error is its own
    replaced = searched.plan_json;
  }
  Env env(path);
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  absl::StatusOr<JobPlan> plan = jobs.GetPlan(id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->record.rolled_back);
  EXPECT_EQ(plan->record.origin, "baseline:ddp");
  EXPECT_NE(plan->record.plan_json, replaced);
  EXPECT_EQ(plan->record.rollback_job, id);
  absl::StatusOr<JobRecord> rec = jobs.Get(id);
  EXPECT_TRUE(rec->rolled_back);
  EXPECT_NEAR(rec->measured_s, 0.0121, 1e-9);
  EXPECT_NEAR(rec->measured_baseline_s, 0.01005, 1e-9);  // median of 4 x 10.0 and 4 x 10.1 ms
  // The replaced plan's rank reports are still there; the shared cache
  // entry is not rolled back by one job.
  EXPECT_EQ(*env.store->CountRankReports(id), 2);
  EXPECT_FALSE((*env.store->GetPlan(env.store->Rollbacks(id, 10)->at(0).shared_key))->rolled_back);
}

TEST(JobManagerTest, OnlyTheJobsOwnRanksReportEachOnce) {
  Env env(":memory:");
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  absl::StatusOr<JobRecord> j = jobs.Submit(MlpRequest(5, 3));
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_EQ(j->report_credential.size(), 64u);
  ASSERT_EQ(WaitFor(jobs, j->id, Final).phase, JobPhase::kDone);
  absl::StatusOr<JobRecord> other = jobs.Submit(MlpRequest(5, 3, 8));
  ASSERT_TRUE(other.ok());
  ASSERT_NE(other->report_credential, j->report_credential);

  RunRequest run{j->id, other->report_credential, 2, "forger", ""};
  EXPECT_EQ(jobs.feedback().StartRun(run).status().code(), absl::StatusCode::kPermissionDenied);
  run.credential = j->report_credential;
  run.world_size = 1;
  EXPECT_EQ(jobs.feedback().StartRun(run).status().code(), absl::StatusCode::kInvalidArgument);
  run.world_size = 2;
  absl::StatusOr<StartedRun> started = jobs.feedback().StartRun(run);
  ASSERT_TRUE(started.ok()) << started.status();

  MeasurementReport r;
  r.job_id = j->id;
  r.world_size = 2;
  r.plan_s = {0.01, 0.01};
  r.credential = other->report_credential;
  r.attempt_id = started->attempt_id;
  EXPECT_EQ(jobs.ReportMeasurement(r).status().code(), absl::StatusCode::kPermissionDenied);
  r.credential = j->report_credential;
  r.attempt_id = "run-0000000000000000";
  EXPECT_EQ(jobs.ReportMeasurement(r).status().code(), absl::StatusCode::kNotFound);
  r.attempt_id = started->attempt_id;
  r.world_size = 1;  // a world of its own cannot decide alone
  EXPECT_EQ(jobs.ReportMeasurement(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.world_size = 2;
  ASSERT_TRUE(jobs.ReportMeasurement(r).ok());
  // The same rank of the same run again: refused, the real row untouched.
  r.plan_s = {9.0, 9.0};
  EXPECT_EQ(jobs.ReportMeasurement(r).status().code(), absl::StatusCode::kAlreadyExists);
  r.rank = 1;
  r.plan_s = {0.011, 0.011};
  absl::StatusOr<MeasurementOutcome> o = jobs.ReportMeasurement(r);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->ranks_reported, 2);
  EXPECT_DOUBLE_EQ(o->measured_s, 0.011);
}

TEST(JobManagerTest, TheSharedEntryRollsBackOnTwoJobsAndAnOperatorRestoresIt) {
  Env env(":memory:");
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  absl::StatusOr<JobRecord> a = jobs.Submit(MlpRequest(5, 3));
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(WaitFor(jobs, a->id, Final).phase, JobPhase::kDone);
  absl::StatusOr<JobRecord> b = jobs.Submit(MlpRequest(5, 3));  // a cache hit: same entry
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->from_cache);
  const auto [plan_s, baseline_s] = LosingPairs();
  ASSERT_TRUE(ReportRun(jobs, *a, plan_s, baseline_s).ok());
  EXPECT_TRUE(jobs.Get(a->id)->rolled_back);
  EXPECT_FALSE(jobs.Get(b->id)->rolled_back);  // one job decides for itself only
  absl::StatusOr<JobRecord> c = jobs.Submit(MlpRequest(5, 3));
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->rolled_back);  // new jobs get the searched plan
  ASSERT_TRUE(ReportRun(jobs, *b, plan_s, baseline_s).ok());
  EXPECT_TRUE(jobs.Get(b->id)->rolled_back);
  EXPECT_TRUE(jobs.Get(c->id)->rolled_back);  // two jobs: the shared entry
  ASSERT_EQ(jobs.feedback().Rollbacks("", 10)->size(), 3u);  // a, b, shared

  absl::StatusOr<std::vector<RollbackRecord>> undone = jobs.feedback().Restore(c->id, "op", "");
  ASSERT_TRUE(undone.ok()) << undone.status();
  ASSERT_EQ(undone->size(), 1u);
  EXPECT_EQ((*undone)[0].scope, "shared");
  EXPECT_FALSE(jobs.Get(c->id)->rolled_back);
  EXPECT_TRUE(jobs.Get(a->id)->rolled_back);  // its own rollback stays until restored
  ASSERT_TRUE(jobs.feedback().Restore(a->id, "op", "").ok());
  EXPECT_FALSE(jobs.Get(a->id)->rolled_back);
  EXPECT_EQ(jobs.feedback().Restore(a->id, "op", "").status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A restored plan is not rolled back again by its job's next losing run.
  ASSERT_TRUE(ReportRun(jobs, *a, plan_s, baseline_s).ok());
  EXPECT_FALSE(jobs.Get(a->id)->rolled_back);
  std::vector<AuditEntry> audit = *jobs.feedback().Audit("", 20);
  ASSERT_GE(audit.size(), 5u);
  EXPECT_EQ(audit[0].action, "restore");
  EXPECT_EQ(audit[0].actor, "op");
}

TEST(JobManagerTest, FarFromItsPredictionAReportCountsForItsJobOnly) {
  Env env(":memory:");
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  absl::StatusOr<JobRecord> a = jobs.Submit(MlpRequest(5, 3));
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(WaitFor(jobs, a->id, Final).phase, JobPhase::kDone);
  const double predicted = jobs.GetPlan(a->id)->record.predicted_s;
  ASSERT_TRUE(ReportRun(jobs, *a, {1.1 * predicted, 1.1 * predicted}, {}).ok());
  const double c = *jobs.Calibration(*a);
  EXPECT_NEAR(c, 1.1, 1e-9);
  absl::StatusOr<JobRecord> b = jobs.Submit(MlpRequest(5, 3, 9));
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(WaitFor(jobs, b->id, Final).phase, JobPhase::kDone);
  ASSERT_TRUE(ReportRun(jobs, *b, {3600, 3600}, {}).ok());
  EXPECT_NEAR(jobs.Get(b->id)->measured_s, 3600, 1e-9);  // kept for its job
  EXPECT_NEAR(*jobs.Calibration(*a), c, 1e-12);          // not the cluster's
}

TEST(JobManagerTest, ASearchEndingAfterARollbackKeepsIt) {
  Env env(":memory:");
  PlanCache cache(env.store.get());
  graph::Graph train = *graph::BuildTrainingGraph(*graph::BuildZooModel("mlp"), {.ranks = 2});
  search::SearchResult r;
  r.origin = "search";
  r.sim.iteration_s = 0.5;
  absl::StatusOr<PlanRecord> first = cache.Insert("k", train, r, "gen-1");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->origin, "search");
  EXPECT_EQ(first->compute_s, 0);
  PlanRecord rolled = *first;
  rolled.origin = "baseline:ddp";
  rolled.rolled_back = true;
  ASSERT_TRUE(env.store->PutPlan(rolled).ok());
  // Another job of the key searched meanwhile: the rollback stays.
  EXPECT_EQ(cache.Insert("k", train, r, "gen-1")->origin, "baseline:ddp");
  // Under a newer cost generation the new search's plan replaces it.
  EXPECT_EQ(cache.Insert("k", train, r, "gen-2")->origin, "search");
}

// ---- Parallel jobs (JobOptions::parallel) ----------------------------------

// A small MLP in the text format (three 2048-wide layers at batch 64), as a
// client submits it.
graph::Graph SmallMlp() {
  graph::GraphBuilder b("small_mlp");
  graph::TensorId x = b.Input("x", {64, 2048});
  for (int i = 0; i < 3; ++i) {
    x = b.Linear(x, 2048, /*bias=*/false);
    if (i < 2) x = b.Relu(x);
  }
  b.MarkOutput(x);
  return *graph::ParseText(graph::ToText(*std::move(b).Build()));
}

SubmitRequest ParallelRequest() {
  SubmitRequest r;
  r.name = "small_mlp";
  r.forward = SmallMlp();
  r.cluster = *costmodel::ClusterPreset("dgx-h100");
  r.options.ranks = 8;
  r.options.budget_s = 3;
  r.options.patience = 30;
  r.options.seed = 1;
  r.options.parallel = true;
  return r;
}

v1::Plan PlanProto(const JobRecord& job, const JobPlan& plan) {
  absl::StatusOr<v1::Plan> p =
      PlanRecordToProto(plan.record, job.graph_fingerprint, job.cluster_fingerprint);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : v1::Plan();
}

// The plan names the per-device training graph: every group's ops and every
// bucket's gradients resolve there (and the whole-model graph has none of
// the per-device collectives).
void ExpectNamesThePerDeviceGraph(Store& store, const JobRecord& job, const JobPlan& plan) {
  absl::StatusOr<StoredJobGraph> jg = LoadJobGraph(store, job);
  ASSERT_TRUE(jg.ok()) << jg.status();
  ASSERT_TRUE(jg->parallel.has_value());
  EXPECT_EQ(*graph::FingerprintHex(jg->training), job.graph_fingerprint);
  nlohmann::json j = nlohmann::json::parse(plan.record.plan_json);
  absl::StatusOr<search::Plan> p = search::PlanFromJson(jg->training, j);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_FALSE(p->buckets.empty());
  for (const search::Bucket& b : p->buckets) {
    for (graph::TensorId t : b.grads) {
      EXPECT_EQ(jg->training.tensor(t).role, graph::TensorRole::kGradient);
    }
  }
  // The per-device parameters are pieces: some gradient is smaller than the
  // whole model's (the model degree is above 1 here, see below), or, for a
  // data-parallel plan, the training graph is the whole model's.
  graph::Graph whole = *graph::BuildTrainingGraph(SmallMlp(), {.ranks = 8});
  if (jg->parallel->model_degree > 1) {
    EXPECT_NE(*graph::FingerprintHex(whole), job.graph_fingerprint);
  }
  // The rebuilt graph prices and simulates with the job's cost model.
  costmodel::ClusterCostModel base(jg->cluster, nullptr, nullptr, costmodel::CommModel(jg->cluster));
  JobCostModel cm(base, jg->cluster, jg->parallel);
  absl::StatusOr<costmodel::SimResult> sim = search::EvaluatePlan(jg->training, *p, cm.get());
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_NEAR(sim->iteration_s, plan.record.predicted_s, 1e-9 + 1e-6 * plan.record.predicted_s);
}

// The plan's per-device program is the chosen row lowered on the submitted
// graph: of the submitted model's fingerprint, on a mesh of the plan's
// degree, a valid program whose JSON matches the fingerprint the plan
// digest covers.
void ExpectCarriesTheRowsProgram(const v1::ParallelPlan& pp, const graph::Graph& forward) {
  ASSERT_TRUE(pp.has_program()) << pp.program_error();
  EXPECT_EQ(pp.program_error(), "");
  const v1::DeviceProgram& dp = pp.program();
  EXPECT_EQ(dp.format(), "braid-program/1");
  EXPECT_EQ(dp.row(), pp.strategy());
  EXPECT_EQ(dp.model_fingerprint(), *graph::FingerprintHex(forward));
  EXPECT_TRUE(CheckDeviceProgram(dp).ok()) << CheckDeviceProgram(dp);
  absl::StatusOr<graph::Program> p = graph::ProgramFromJson(nlohmann::json::parse(dp.json()));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->World(), pp.degree());
  EXPECT_EQ(std::vector<int>(dp.mesh().begin(), dp.mesh().end()), p->mesh);
  EXPECT_EQ(p->program_fingerprint, dp.program_fingerprint());
  EXPECT_EQ(graph::ComputeProgramFingerprint(*p), dp.program_fingerprint());
}

// A parallel job on a cluster whose plans run on the server's own ranks
// (cpu-local) is chosen by its rows' simulated programs; the stored section
// says what chose and every fused row's program time, and the served
// program is the chosen row's. Elsewhere (a GPU preset) the simulator chooses.
TEST(JobManagerTest, AParallelJobOnLocalRanksIsChosenByItsPrograms) {
  Env env(TempDb("parallel_programs.db"));
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  SubmitRequest local = ParallelRequest();
  local.cluster = *costmodel::ClusterPreset("cpu-local");
  local.options.ranks = 2;
  absl::StatusOr<JobRecord> j = jobs.Submit(local);
  ASSERT_TRUE(j.ok()) << j.status();
  JobRecord done = WaitFor(jobs, j->id, Final, 60);
  ASSERT_EQ(done.phase, JobPhase::kDone) << done.error;
  absl::StatusOr<JobPlan> plan = jobs.GetPlan(j->id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const nlohmann::json section = nlohmann::json::parse(plan->record.parallel->json);
  EXPECT_EQ(section["chosen_by"], "program simulation");
  double best = 0;
  std::string fastest;
  for (const nlohmann::json& row : section["strategies"]) {
    if (row["status"] != "ok") continue;
    ASSERT_TRUE(row.contains("program_ms")) << row.dump();
    if (fastest.empty() || row["program_ms"].get<double>() < best) {
      best = row["program_ms"].get<double>();
      fastest = row["strategy"].get<std::string>();
    }
  }
  EXPECT_EQ(done.parallel_strategy, fastest);
  ASSERT_FALSE(plan->record.parallel->program_json.empty()) << plan->record.parallel->program_error;
  absl::StatusOr<graph::Program> p =
      graph::ProgramFromJson(nlohmann::json::parse(plan->record.parallel->program_json));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->row, fastest);

  absl::StatusOr<JobRecord> gpu = jobs.Submit(ParallelRequest());  // dgx-h100
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  JobRecord gdone = WaitFor(jobs, gpu->id, Final, 60);
  ASSERT_EQ(gdone.phase, JobPhase::kDone) << gdone.error;
  absl::StatusOr<JobPlan> gplan = jobs.GetPlan(gpu->id);
  ASSERT_TRUE(gplan.ok()) << gplan.status();
  EXPECT_EQ(nlohmann::json::parse(gplan->record.parallel->json)["chosen_by"], "simulator");
}

// A recommender whose two large tables and dense MLP run best side by side
// (each strand on its own group of devices): the plan keeps the placement
// (the ops' devices, the block, the gradient groups' devices) through the
// store and the proto, and the stored per-device graph rebuilds and prices
// to the plan's prediction.
graph::Graph SmallRecommender() {
  graph::GraphBuilder b("small_recsys");
  std::vector<graph::TensorId> feats = {b.Relu(b.Linear(b.Input("dense", {2048, 64}), 64))};
  for (int t = 0; t < 2; ++t) {
    graph::TensorId idx = b.Input(absl::StrCat("idx", t), {2048, 20}, graph::DType::kI64);
    feats.push_back(b.ReduceSum(b.Embedding(idx, 1 << 20, 64), {1}, /*keepdims=*/false));
  }
  graph::TensorId r = b.Relu(b.Linear(b.Concat(feats, 1), 256));
  b.MarkOutput(b.Linear(r, 1));
  return *graph::ParseText(graph::ToText(*std::move(b).Build()));
}

TEST(JobManagerTest, AParallelJobWithStrandsSideBySideKeepsTheirPlacement) {
  const std::string path = TempDb("strands.db");
  Env env(path);
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  SubmitRequest req = ParallelRequest();
  req.name = "small_recsys";
  req.forward = SmallRecommender();
  absl::StatusOr<JobRecord> j = jobs.Submit(req);
  ASSERT_TRUE(j.ok()) << j.status();
  JobRecord done = WaitFor(jobs, j->id, Final, 60);
  ASSERT_EQ(done.phase, JobPhase::kDone) << done.error;
  absl::StatusOr<JobPlan> plan = jobs.GetPlan(j->id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->record.parallel.has_value());
  v1::Plan proto = PlanProto(done, *plan);
  const v1::ParallelPlan& pp = proto.parallel();
  EXPECT_EQ(pp.strategy(), "braid");
  ASSERT_EQ(pp.strand_blocks_size(), 1);
  EXPECT_EQ(pp.strand_blocks(0).strands(), 3);
  EXPECT_GT(pp.strand_blocks(0).alltoall_s(), 0);
  int placed = 0;
  for (const v1::OpParallelConfig& o : pp.ops()) {
    if (o.num_devices() == 0) continue;
    ++placed;
    EXPECT_EQ(o.num_devices(), pp.strand_blocks(0).devices_per_strand()) << o.op();
    EXPECT_THAT(o.machine_view(), ::testing::StartsWith(absl::StrCat(o.first_device(), ":")));
  }
  EXPECT_GT(placed, 0);
  // The lowering runs no strands side by side (their ops span fewer
  // devices than the others): the plan is kept, with why it has no
  // per-device program.
  EXPECT_FALSE(pp.has_program());
  EXPECT_THAT(pp.program_error(), HasSubstr("lowering: op "));
  EXPECT_THAT(pp.program_error(), HasSubstr("devices"));
  // Rebuilt from the store, the per-device graph prices to the prediction.
  absl::StatusOr<StoredJobGraph> jg = LoadJobGraph(*env.store, done);
  ASSERT_TRUE(jg.ok()) << jg.status();
  nlohmann::json pj = nlohmann::json::parse(plan->record.plan_json);
  absl::StatusOr<search::Plan> p = search::PlanFromJson(jg->training, pj);
  ASSERT_TRUE(p.ok()) << p.status();
  costmodel::ClusterCostModel base(jg->cluster, nullptr, nullptr, costmodel::CommModel(jg->cluster));
  JobCostModel cm(base, jg->cluster, jg->parallel);
  absl::StatusOr<costmodel::SimResult> sim = search::EvaluatePlan(jg->training, *p, cm.get());
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_NEAR(sim->iteration_s, plan->record.predicted_s, 1e-9 + 1e-6 * plan->record.predicted_s);
}

TEST(JobManagerTest, AParallelJobPlansPerDeviceSurvivesARestartAndIsCached) {
  const std::string path = TempDb("parallel.db");
  Env env(path);
  const graph::Graph forward = SmallMlp();
  std::string id;
  v1::Plan first;
  {
    JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
    ASSERT_TRUE(jobs.Start().ok());
    absl::StatusOr<JobRecord> j = jobs.Submit(ParallelRequest());
    ASSERT_TRUE(j.ok()) << j.status();
    id = j->id;
    const std::string whole_fp = j->graph_fingerprint;  // submitted: the whole model's
    JobRecord done = WaitFor(jobs, id, Final, 60);
    ASSERT_EQ(done.phase, JobPhase::kDone) << done.error;
    EXPECT_FALSE(done.from_cache);
    EXPECT_GT(done.candidates, 0);
    absl::StatusOr<JobPlan> plan = jobs.GetPlan(id);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->record.parallel.has_value());
    const ParallelSection& par = *plan->record.parallel;
    EXPECT_EQ(done.graph_fingerprint, par.training_fingerprint);
    EXPECT_NE(done.graph_fingerprint, whole_fp);
    EXPECT_EQ(done.parallel_strategy, par.strategy);
    EXPECT_EQ(par.degree, 8);
    EXPECT_EQ(par.data_degree * par.model_degree, 8);
    // Dense 2048-wide layers at batch 64: splitting the weights beats
    // all-reducing them (search/parallel_plan_test.cc's WideMlp, smaller).
    EXPECT_GT(par.model_degree, 1) << par.strategy;
    first = PlanProto(done, *plan);
    ASSERT_TRUE(first.has_parallel());
    const v1::ParallelPlan& pp = first.parallel();
    EXPECT_EQ(pp.strategy(), par.strategy);
    EXPECT_EQ(pp.degree(), 8);
    EXPECT_EQ(pp.data_degree(), par.data_degree);
    EXPECT_EQ(pp.model_degree(), par.model_degree);
    EXPECT_LE(pp.memory_per_device_bytes(), pp.device_memory_bytes());
    EXPECT_GT(pp.dp_iteration_s(), 0);
    EXPECT_FALSE(pp.device_graph_text().empty());
    // Every parameter's gradient group, within the data degree.
    const graph::Graph device = *graph::ParseText(pp.device_graph_text());
    int params = 0;
    for (const graph::Tensor& t : device.tensors()) {
      if (t.role != graph::TensorRole::kParameter) continue;
      ++params;
      ASSERT_TRUE(pp.grad_group().contains(t.name)) << t.name;
      EXPECT_GE(pp.grad_group().at(t.name), 1);
      EXPECT_LE(pp.grad_group().at(t.name), pp.data_degree());
    }
    EXPECT_EQ(pp.grad_group_size(), params);
    // One config per forward op (braid:substituted plans a rewritten graph).
    if (pp.strategy() != "braid:substituted") {
      ASSERT_EQ(pp.ops_size(), forward.num_ops());
      for (int i = 0; i < forward.num_ops(); ++i) {
        EXPECT_EQ(pp.ops(i).op(), forward.op(i).name);
        EXPECT_FALSE(pp.ops(i).config().empty());
        EXPECT_FALSE(pp.ops(i).machine_view().empty());
      }
    }
    // Every strategy of the table, the chosen one with the plan's time.
    bool chosen_listed = false;
    for (const v1::StrategyTime& t : pp.strategies()) {
      if (t.strategy() == pp.strategy()) {
        chosen_listed = true;
        EXPECT_NEAR(t.iteration_s(), first.predicted_iteration_s(),
                    1e-9 * first.predicted_iteration_s() + 1e-15);
      }
      if (t.status() == "ok") EXPECT_GE(t.iteration_s(), first.predicted_iteration_s() * (1 - 1e-9));
    }
    EXPECT_TRUE(chosen_listed);
    EXPECT_GE(pp.strategies_size(), 2);
    ExpectCarriesTheRowsProgram(pp, forward);
    ExpectNamesThePerDeviceGraph(*env.store, done, *plan);
    // The status JSON names the strategy and D x M.
    const nlohmann::json js = JobJson(done);
    EXPECT_EQ(js["parallel"]["strategy"], par.strategy);
    EXPECT_EQ(js["parallel"]["d_x_m"],
              absl::StrCat(par.data_degree, " x ", par.model_degree));
  }
  // A new process on the same file.
  env.store.reset();
  env.store = *Store::Open(path);
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  absl::StatusOr<JobRecord> after = jobs.Get(id);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->parallel_strategy, first.parallel().strategy());
  absl::StatusOr<JobPlan> plan = jobs.GetPlan(id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::Plan reloaded = PlanProto(*after, *plan);
  EXPECT_EQ(PlanDigest(reloaded), PlanDigest(first));
  EXPECT_EQ(SerializeDeterministic(reloaded), SerializeDeterministic(first));
  ExpectNamesThePerDeviceGraph(*env.store, *after, *plan);
  absl::StatusOr<JobTimeline> timeline = SimulateJobPlan(*env.store, nullptr, *after, 100);
  ASSERT_TRUE(timeline.ok()) << timeline.status();

  // The same submission again: served from the plan cache with the same
  // parallel section, the job recording the per-device fingerprint.
  absl::StatusOr<JobRecord> again = jobs.Submit(ParallelRequest());
  ASSERT_TRUE(again.ok()) << again.status();
  JobRecord hit = WaitFor(jobs, again->id, Final);
  ASSERT_EQ(hit.phase, JobPhase::kDone) << hit.error;
  EXPECT_TRUE(hit.from_cache);
  EXPECT_EQ(hit.graph_fingerprint, after->graph_fingerprint);
  EXPECT_EQ(hit.parallel_strategy, first.parallel().strategy());
  absl::StatusOr<JobPlan> hit_plan = jobs.GetPlan(again->id);
  ASSERT_TRUE(hit_plan.ok()) << hit_plan.status();
  const v1::Plan cached = PlanProto(hit, *hit_plan);
  EXPECT_EQ(SerializeDeterministic(cached.parallel()), SerializeDeterministic(first.parallel()));
  EXPECT_EQ(PlanDigest(cached), PlanDigest(first));
  absl::StatusOr<std::optional<ParallelSection>> job_section = env.store->GetJobParallel(again->id);
  ASSERT_TRUE(job_section.ok() && job_section->has_value());
  EXPECT_EQ(**job_section, *hit_plan->record.parallel);
  ExpectNamesThePerDeviceGraph(*env.store, hit, *hit_plan);

  // An entry stored before programs were kept (neither a program nor why
  // the row has none) serves no parallel job: it is planned again, and the
  // new entry carries the program.
  PlanRecord old = **env.store->GetPlan(hit.plan_key);
  old.parallel->program_json.clear();
  old.parallel->program_error.clear();
  ASSERT_TRUE(env.store->PutPlan(old).ok());
  absl::StatusOr<JobRecord> replanned = jobs.Submit(ParallelRequest());
  ASSERT_TRUE(replanned.ok()) << replanned.status();
  JobRecord fresh = WaitFor(jobs, replanned->id, Final, 60);
  ASSERT_EQ(fresh.phase, JobPhase::kDone) << fresh.error;
  EXPECT_FALSE(fresh.from_cache);
  absl::StatusOr<JobPlan> fresh_plan = jobs.GetPlan(replanned->id);
  ASSERT_TRUE(fresh_plan.ok()) << fresh_plan.status();
  ExpectCarriesTheRowsProgram(PlanProto(fresh, *fresh_plan).parallel(), forward);
}

TEST(JobManagerTest, AParallelCacheEntryUnderAnOlderGenerationIsRecostedOnThePerDeviceGraph) {
  Env env(":memory:");
  std::string key;
  {
    JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
    ASSERT_TRUE(jobs.Start().ok());
    absl::StatusOr<JobRecord> j = jobs.Submit(ParallelRequest());
    ASSERT_TRUE(j.ok()) << j.status();
    JobRecord done = WaitFor(jobs, j->id, Final, 60);
    ASSERT_EQ(done.phase, JobPhase::kDone) << done.error;
    key = done.plan_key;
  }
  // Make the entry stale: the next job re-costs it (RunJobSteps, not the
  // submit-time fresh look-up) on the per-device graph its section names.
  PlanRecord stale = **env.store->GetPlan(key);
  const ParallelSection section = *stale.parallel;
  stale.generation = "an-older-generation";
  ASSERT_TRUE(env.store->PutPlan(stale).ok());
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  absl::StatusOr<JobRecord> j = jobs.Submit(ParallelRequest());
  ASSERT_TRUE(j.ok()) << j.status();
  JobRecord done = WaitFor(jobs, j->id, Final, 60);
  ASSERT_EQ(done.phase, JobPhase::kDone) << done.error;
  EXPECT_TRUE(done.from_cache);
  EXPECT_TRUE(done.recosted);
  EXPECT_EQ(done.graph_fingerprint, section.training_fingerprint);
  absl::StatusOr<JobPlan> plan = jobs.GetPlan(j->id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->record.parallel.has_value());
  EXPECT_EQ(*plan->record.parallel, section);
  EXPECT_NE(plan->record.generation, "an-older-generation");
  ExpectNamesThePerDeviceGraph(*env.store, done, *plan);
}

TEST(JobManagerTest, ANonParallelJobKeepsItsKeyAndPlan) {
  Env env(":memory:");
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  SubmitRequest req = MlpRequest(/*budget_s=*/2, /*patience=*/20);
  const JobOptions options = req.options;
  absl::StatusOr<JobRecord> j = jobs.Submit(std::move(req));
  ASSERT_TRUE(j.ok()) << j.status();
  JobRecord done = WaitFor(jobs, j->id, Final);
  ASSERT_EQ(done.phase, JobPhase::kDone) << done.error;
  // The key has no "parallel" and the graph is the whole model's.
  EXPECT_THAT(done.plan_key, ::testing::Not(HasSubstr("parallel")));
  graph::Graph whole = *graph::BuildTrainingGraph(*graph::BuildZooModel("mlp"), {.ranks = 2});
  EXPECT_EQ(done.graph_fingerprint, *graph::FingerprintHex(whole));
  EXPECT_EQ(done.plan_key, PlanCacheKey(done.graph_fingerprint, done.cluster_fingerprint,
                                        JobOptions{options}));
  EXPECT_TRUE(done.parallel_strategy.empty());
  absl::StatusOr<JobPlan> plan = jobs.GetPlan(j->id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->record.parallel.has_value());
  EXPECT_FALSE(PlanProto(done, *plan).has_parallel());
  EXPECT_FALSE(env.store->GetJobParallel(j->id)->has_value());
  EXPECT_TRUE(JobJson(done)["parallel"].is_null());
  absl::StatusOr<StoredJobGraph> jg = LoadJobGraph(*env.store, done);
  ASSERT_TRUE(jg.ok()) << jg.status();
  EXPECT_FALSE(jg->parallel.has_value());
}

// JobOptions::strategy_row reaches PlanParallel: the job's plan is that
// row's, under a key of its own (the fastest row here splits the weights:
// AParallelJobPlansPerDeviceSurvivesARestartAndIsCached).
TEST(JobManagerTest, AParallelJobPlansItsRequestedRowUnderAKeyOfItsOwn) {
  Env env(":memory:");
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  SubmitRequest req = ParallelRequest();
  req.options.strategy_row = "data_parallel";
  const JobOptions options = req.options;
  absl::StatusOr<JobRecord> j = jobs.Submit(std::move(req));
  ASSERT_TRUE(j.ok()) << j.status();
  JobRecord done = WaitFor(jobs, j->id, Final, 60);
  ASSERT_EQ(done.phase, JobPhase::kDone) << done.error;
  EXPECT_EQ(done.parallel_strategy, "data_parallel");
  EXPECT_EQ(done.parallel_model_degree, 1);
  EXPECT_THAT(done.plan_key, HasSubstr(R"("strategy_row":"data_parallel")"));
  absl::StatusOr<JobPlan> plan = jobs.GetPlan(j->id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->record.parallel.has_value());
  EXPECT_EQ(plan->record.parallel->strategy, "data_parallel");
  EXPECT_EQ(nlohmann::json::parse(plan->record.parallel->json)["chosen_by"], "request");
  // Every options field that changes the plan changes the key.
  JobOptions fastest = options;
  fastest.strategy_row.clear();
  JobOptions braid = options;
  braid.strategy_row = "braid";
  JobOptions no_pipeline = fastest;
  no_pipeline.no_pipeline = true;
  const std::string g = "g", c = "c";
  EXPECT_NE(PlanCacheKey(g, c, options), PlanCacheKey(g, c, fastest));
  EXPECT_NE(PlanCacheKey(g, c, options), PlanCacheKey(g, c, braid));
  EXPECT_NE(PlanCacheKey(g, c, fastest), PlanCacheKey(g, c, no_pipeline));
  // The row the job asked for is stored with it (and comes back after a restart).
  EXPECT_EQ(env.store->GetJob(j->id)->options, options);
}

TEST(JobManagerTest, AParallelJobNothingFitsFailsWithTheReasonAndTheServerGoesOn) {
  Env env(":memory:");
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  SubmitRequest req = ParallelRequest();
  req.cluster.device.memory_bytes = 1 << 20;  // 1 MiB devices: no strategy fits
  absl::StatusOr<JobRecord> j = jobs.Submit(std::move(req));
  ASSERT_TRUE(j.ok()) << j.status();
  JobRecord failed = WaitFor(jobs, j->id, Final, 60);
  EXPECT_EQ(failed.phase, JobPhase::kFailed);
  EXPECT_THAT(failed.error, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(failed.error, HasSubstr("no parallelization of small_mlp fits"));
  absl::StatusOr<JobPlan> plan = jobs.GetPlan(j->id);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plan.status().message(), HasSubstr("fits"));
  EXPECT_FALSE(env.store->GetJobParallel(j->id)->has_value());
  // The manager still plans.
  absl::StatusOr<JobRecord> next = jobs.Submit(MlpRequest(/*budget_s=*/1, /*patience=*/10));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(WaitFor(jobs, next->id, Final).phase, JobPhase::kDone);
}

TEST(JobManagerTest, AParallelSearchStopsOnCancelAndOnShutdownAndResumes) {
  const std::string path = TempDb("parallel_stop.db");
  Env env(path);
  SubmitRequest req = ParallelRequest();
  req.options.budget_s = 600;          // 200 s per strategy unless stopped
  req.options.patience = 1 << 30;
  std::string resumed_id;
  {
    JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {.checkpoint_interval_s = 0});
    ASSERT_TRUE(jobs.Start().ok());
    absl::StatusOr<JobRecord> j = jobs.Submit(req);
    ASSERT_TRUE(j.ok()) << j.status();
    WaitFor(jobs, j->id, [](const JobRecord& r) { return r.candidates > 0; }, 60);
    ASSERT_TRUE(jobs.Cancel(j->id).ok());
    EXPECT_EQ(jobs.Get(j->id)->phase, JobPhase::kCancelled);
    // The runner is free again: the next job (the same, searching) starts,
    // where a runner held for the cancelled job's 600 s budget would not.
    absl::StatusOr<JobRecord> k = jobs.Submit(req);
    ASSERT_TRUE(k.ok()) << k.status();
    resumed_id = k->id;
    const JobRecord started =
        WaitFor(jobs, resumed_id, [](const JobRecord& r) { return r.candidates > 0; }, 60);
    EXPECT_GT(started.candidates, 0);
  }  // shutdown mid-search: the job stays unfinished
  JobRecord stored = *env.store->GetJob(resumed_id);
  EXPECT_EQ(stored.phase, JobPhase::kSearching);
  EXPECT_GT(stored.candidates, 0);
  EXPECT_FALSE(env.store->GetJobParallel(resumed_id)->has_value());
  // Resumed with a short budget (as if the searches had run out): it plans.
  stored.options.budget_s = 3;
  stored.options.patience = 30;
  // Options are stored at submission; a test-only rewrite through SQL.
  {
    absl::StatusOr<base::sql::Database> db = base::sql::Database::Open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->Execute(absl::StrCat("UPDATE jobs SET options = '",
                                         JobOptionsToJson(stored.options), "' WHERE id = '",
                                         resumed_id, "'"))
                    .ok());
  }
  env.store.reset();
  env.store = *Store::Open(path);
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  JobRecord done = WaitFor(jobs, resumed_id, Final, 60);
  ASSERT_EQ(done.phase, JobPhase::kDone) << done.error;
  EXPECT_EQ(done.resumed, 1);
  absl::StatusOr<JobPlan> plan = jobs.GetPlan(resumed_id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->record.parallel.has_value());
  ExpectNamesThePerDeviceGraph(*env.store, done, *plan);
}

TEST(JobManagerTest, AParallelPlanMeasuredSlowerRollsBackOnItsPerDeviceGraph) {
  Env env(":memory:");
  JobManager jobs(env.store.get(), env.profiles.get(), nullptr, {});
  ASSERT_TRUE(jobs.Start().ok());
  absl::StatusOr<JobRecord> j = jobs.Submit(ParallelRequest());
  ASSERT_TRUE(j.ok()) << j.status();
  JobRecord done = WaitFor(jobs, j->id, Final, 60);
  ASSERT_EQ(done.phase, JobPhase::kDone) << done.error;
  const PlanRecord searched = jobs.GetPlan(j->id)->record;
  ASSERT_TRUE(searched.parallel.has_value());
  ASSERT_FALSE(searched.ddp_buckets_json.empty());
  // A plan that already is the DDP baseline would leave nothing to roll back:
  // the request is one braid plans differently.
  ASSERT_NE(searched.origin, "baseline:ddp");
  const auto [plan_s, baseline_s] = LosingPairs();
  absl::StatusOr<MeasurementOutcome> o = ReportRun(jobs, *j, plan_s, baseline_s, "test");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->rolled_back);
  absl::StatusOr<JobPlan> plan = jobs.GetPlan(j->id);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->record.origin, "baseline:ddp");
  // Still the same parallel plan: the DDP buckets of its per-device graph.
  ASSERT_TRUE(plan->record.parallel.has_value());
  EXPECT_EQ(*plan->record.parallel, *searched.parallel);
  JobRecord job = *jobs.Get(j->id);
  EXPECT_TRUE(PlanProto(job, *plan).has_parallel());
  ExpectNamesThePerDeviceGraph(*env.store, job, *plan);
}

}  // namespace
}  // namespace braid::server
