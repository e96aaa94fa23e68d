// Tests of the job manager: persistence across a restart, cancellation, the
// bounded queue, the plan cache (hit, generation change -> re-cost), and
// measured feedback with a rollback across a restart.
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
#include "search/baselines.h"
#include "search/plan.h"

namespace braid::server {
namespace {

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

// Polls until `pred` holds for the job (10 s at most).
JobRecord WaitFor(JobManager& jobs, const std::string& id,
                  const std::function<bool(const JobRecord&)>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    absl::StatusOr<JobRecord> r = jobs.Get(id);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || pred(*r) || std::chrono::steady_clock::now() > deadline) return *r;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool Final(const JobRecord& r) { return IsFinal(r.phase); }

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

  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<JobRecord> cancelled = jobs.Cancel(a->id);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->phase, JobPhase::kCancelled);
  // A's search stops, so B (patience 5) runs and finishes well within A's 60 s.
  JobRecord bdone = WaitFor(jobs, b->id, Final);
  EXPECT_EQ(bdone.phase, JobPhase::kDone) << bdone.error;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10);
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
    MeasurementReport r;
    r.job_id = id;
    r.world_size = 1;
    r.source = "braid-worker activate";
    for (int i = 0; i < 8; ++i) {
      r.plan_s.push_back(0.012 + 1e-4 * (i % 3));
      r.baseline_s.push_back(0.010 + 1e-4 * (i % 2));
    }
    const int64_t before = jobs.FeedbackVersion();
    absl::StatusOr<MeasurementOutcome> o = jobs.ReportMeasurement(r);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_TRUE(o->rolled_back);
    EXPECT_THAT(o->rollback_reason, HasSubstr("on 1 rank: slower by "));
    EXPECT_THAT(o->rollback_reason, HasSubstr("(braid-worker activate)"));
    EXPECT_GT(jobs.FeedbackVersion(), before);
    EXPECT_EQ(*jobs.Calibration(j->cluster_fingerprint), 0);  // a rolled-back plan's error is its own
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
  // The replaced plan's rows are still there.
  EXPECT_EQ(env.store->Measurements(id, plan->record.rolled_back_from)->size(), 1u);
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

}  // namespace
}  // namespace braid::server
