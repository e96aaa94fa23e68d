// Tests of the server's SQLite store: migrations on a fresh file and on
// re-open, job and plan round trips, measurements and rollbacks across a
// re-open, task leasing at the SQL level.
#include "server/store.h"

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::server {
namespace {

namespace sql = base::sql;
using ::testing::HasSubstr;

std::string TempDb(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/braid_store_test";
  std::filesystem::create_directories(dir);
  std::string path = dir + "/" + name;
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
  return path;
}

JobRecord MakeJob(const std::string& id) {
  JobRecord j;
  j.id = id;
  j.name = "mlp on cpu";
  j.forward_fingerprint = "00000000000000aa";
  j.cluster_fingerprint = "cpu-local-00000000000000bb";
  j.options.alpha = 1.25;
  j.options.seed = 18446744073709551615ull;  // survives as an unsigned 64-bit value
  j.options.budget_s = 2.5;
  j.graph_fingerprint = "00000000000000cc";
  return j;
}

TEST(StoreTest, FreshFileIsMigratedToTheNewestVersionInWalMode) {
  const std::string path = TempDb("fresh.db");
  ASSERT_TRUE(Store::Open(path).ok());
  absl::StatusOr<sql::Database> db = sql::Database::Open(path);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(*sql::SchemaVersion(*db), 10);
  EXPECT_EQ(static_cast<int>(Store::Migrations().size()), 10);
  EXPECT_EQ(*db->JournalMode(), "wal");
}

TEST(StoreTest, ReopenKeepsDataAndDoesNotRerunMigrations) {
  const std::string path = TempDb("reopen.db");
  {
    auto store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    JobRecord j = MakeJob("job-1");
    ASSERT_TRUE((*store)->InsertJob(&j, "graph \"g\"\n", "{}").ok());
    EXPECT_EQ(j.seq, 1);
    JobRecord k = MakeJob("job-2");
    ASSERT_TRUE((*store)->InsertJob(&k, "graph \"g\"\n", "{}").ok());
    EXPECT_EQ(k.seq, 2);
  }
  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<JobRecord> j = (*store)->GetJob("job-1");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->name, "mlp on cpu");
  EXPECT_EQ(j->options, MakeJob("x").options);
  EXPECT_EQ(j->phase, JobPhase::kQueued);
  EXPECT_EQ(*(*store)->GetGraphText("00000000000000aa"), "graph \"g\"\n");
  absl::StatusOr<std::vector<JobRecord>> list = (*store)->ListJobs(10);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].id, "job-2");  // newest first
}

TEST(StoreTest, NewerSchemaIsRefused) {
  const std::string path = TempDb("newer.db");
  ASSERT_TRUE(Store::Open(path).ok());
  {
    auto db = sql::Database::Open(path);
    ASSERT_TRUE(db->Execute("INSERT INTO schema_version VALUES(11, 0)").ok());
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StoreTest, CheckpointPlanSurvivesReopenAndMigratesOldFiles) {
  const std::string path = TempDb("checkpoint.db");
  {
    // A file at schema version 2 (before checkpoint plans) with a job in it.
    auto db = sql::Database::Open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(sql::Migrate(*db, Store::Migrations().first(2)).ok());
  }
  {
    auto store = Store::Open(path);  // migrates to the newest version
    ASSERT_TRUE(store.ok()) << store.status();
    JobRecord a = MakeJob("a");
    ASSERT_TRUE((*store)->InsertJob(&a, "t", "{}").ok());
    EXPECT_EQ(*(*store)->CheckpointPlan("a"), "");
    ASSERT_TRUE((*store)->SaveCheckpointPlan("a", R"({"groups":[],"buckets":[]})").ok());
    EXPECT_EQ((*store)->SaveCheckpointPlan("nope", "{}").code(), absl::StatusCode::kNotFound);
  }
  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(*(*store)->CheckpointPlan("a"), R"({"groups":[],"buckets":[]})");
  EXPECT_EQ((*store)->CheckpointPlan("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(StoreTest, UpdateJobAndUnfinished) {
  auto store = Store::Open(":memory:");
  ASSERT_TRUE(store.ok());
  JobRecord a = MakeJob("a"), b = MakeJob("b");
  ASSERT_TRUE((*store)->InsertJob(&a, "t", "{}").ok());
  ASSERT_TRUE((*store)->InsertJob(&b, "t", "{}").ok());
  a.phase = JobPhase::kDone;
  a.best_cost_s = 0.125;
  a.plan_key = "k";
  ASSERT_TRUE((*store)->UpdateJob(a).ok());
  b.phase = JobPhase::kSearching;
  b.candidates = 42;
  ASSERT_TRUE((*store)->UpdateJob(b).ok());
  auto unfinished = (*store)->UnfinishedJobs();
  ASSERT_EQ(unfinished->size(), 1u);
  EXPECT_EQ((*unfinished)[0].id, "b");
  EXPECT_EQ((*unfinished)[0].candidates, 42);
  EXPECT_EQ((*store)->GetJob("a")->best_cost_s, 0.125);
  EXPECT_EQ((*store)->GetJob("nope").status().code(), absl::StatusCode::kNotFound);
  JobRecord ghost = MakeJob("ghost");
  EXPECT_EQ((*store)->UpdateJob(ghost).code(), absl::StatusCode::kNotFound);
}

TEST(StoreTest, PlansReplaceByKey) {
  auto store = Store::Open(":memory:");
  PlanRecord p{"key", "gen-1", "{}", 0.5, "search", "[]", 0.25};
  ASSERT_TRUE((*store)->PutPlan(p).ok());
  EXPECT_EQ((*(*store)->GetPlan("key"))->cost_sources_json, "");
  p.generation = "gen-2";
  p.predicted_s = 0.75;
  p.cost_sources_json = R"({"measured":0.25,"prior":0.75})";
  ASSERT_TRUE((*store)->PutPlan(p).ok());
  auto got = (*store)->GetPlan("key");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->generation, "gen-2");
  EXPECT_EQ((*got)->predicted_s, 0.75);
  EXPECT_EQ((*got)->cost_sources_json, p.cost_sources_json);
  EXPECT_FALSE((*store)->GetPlan("other")->has_value());
}

TEST(StoreTest, PlansFromBeforeMigrationFiveHaveNoComputeOrCommFigures) {
  const std::string path = TempDb("plans_v4.db");
  {
    auto db = sql::Database::Open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(sql::Migrate(*db, Store::Migrations().first(4)).ok());
    ASSERT_TRUE(db->Execute("INSERT INTO plans VALUES('old', 'gen-1', '{}', 0.5, 'search', '[]', "
                            "0.25, 0)")
                    .ok());
  }
  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  std::optional<PlanRecord> old = *(*store)->GetPlan("old");
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->predicted_s, 0.5);
  EXPECT_EQ(old->compute_s, -1);  // unknown, printed as "-"
  EXPECT_EQ(old->comm_s, -1);
  EXPECT_EQ(old->ddp_buckets_json, "");
  EXPECT_FALSE(old->rolled_back);
  PlanRecord p{"new", "gen-1", "{}", 0.5, "search", "[]", 0.25};
  p.compute_s = 0.375;
  p.comm_s = 0.125;
  p.ddp_buckets_json = R"([["a.grad"]])";
  ASSERT_TRUE((*store)->PutPlan(p).ok());
  std::optional<PlanRecord> got = *(*store)->GetPlan("new");
  EXPECT_EQ(got->compute_s, 0.375);
  EXPECT_EQ(got->comm_s, 0.125);
  EXPECT_EQ(got->ddp_buckets_json, R"([["a.grad"]])");
}

TEST(StoreTest, RunAggregatesFoldRanksOnceEach) {
  auto store = Store::Open(":memory:");
  ASSERT_TRUE(store.ok()) << store.status();
  JobRecord j = MakeJob("job-1");
  ASSERT_TRUE((*store)->InsertJob(&j, "t", "{}", nullptr, "credsha").ok());
  EXPECT_EQ(*(*store)->JobCredentialSha256("job-1"), "credsha");
  EXPECT_EQ((*store)->JobCredentialSha256("nope").status().code(), absl::StatusCode::kNotFound);
  RunAttempt a{"run-1", "job-1", 2, "test", 1000};
  ASSERT_TRUE((*store)->InsertAttempt(a, 2, 0).ok());
  EXPECT_EQ((*store)->GetAttempt("run-1")->value().world_size, 2);
  EXPECT_FALSE((*store)->GetAttempt("run-x")->has_value());

  RankReport r{"job-1", "d1", "run-1", 0, 2, {0.012, 0.013, 0.02}, {0.010, 0.011, 0.01}, "src", 1};
  absl::StatusOr<RunAggregate> agg = (*store)->AddRankReport(r);
  ASSERT_TRUE(agg.ok()) << agg.status();
  EXPECT_EQ(agg->ranks_reported, 1);
  // The same rank again: refused, nothing folded twice.
  EXPECT_EQ((*store)->AddRankReport(r).status().code(), absl::StatusCode::kAlreadyExists);
  r.rank = 1;
  r.plan_s = {0.014, 0.012};  // shorter: the run keeps the iterations both reported
  r.baseline_s = {0.009, 0.012};
  agg = (*store)->AddRankReport(r);
  ASSERT_TRUE(agg.ok()) << agg.status();
  EXPECT_EQ(agg->ranks_reported, 2);
  EXPECT_EQ(agg->plan_max, (std::vector<double>{0.014, 0.013}));
  EXPECT_EQ(agg->baseline_max, (std::vector<double>{0.010, 0.012}));
  EXPECT_EQ(*(*store)->CountRankReports("job-1"), 2);
  // A rank without the baseline: the run has none.
  r.rank = 1;
  r.attempt_id = "run-2";
  ASSERT_TRUE((*store)->InsertAttempt({"run-2", "job-1", 2, "test", 1001}, 2, 0).ok());
  r.baseline_s.clear();
  agg = (*store)->AddRankReport(r);
  ASSERT_TRUE(agg.ok());
  EXPECT_TRUE(agg->baseline_max.empty());
  // The job's run limit, then retention: runs older than it go.
  EXPECT_EQ((*store)->InsertAttempt({"run-3", "job-1", 2, "test", 1002}, 2, 0).code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE((*store)->InsertAttempt({"run-3", "job-1", 2, "test", 5000}, 2, 1001).ok());
  EXPECT_FALSE((*store)->GetAttempt("run-1")->has_value());
  EXPECT_EQ(*(*store)->CountRankReports("job-1"), 1);  // run-2's
}

TEST(StoreTest, RollbacksPerJobAndSharedSurviveReopenAndRestore) {
  const std::string path = TempDb("rollbacks.db");
  JobRecord j = MakeJob("job-1");
  {
    auto store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    j.phase = JobPhase::kDone;
    j.plan_key = "key";
    ASSERT_TRUE((*store)->InsertJob(&j, "t", "{}", nullptr, "c1").ok());
    ASSERT_TRUE((*store)->PutPlan({"key", "gen-1", "{}", 0.010, "search", "[]", 0.005}).ok());
    MeasuredPlan m{"job-1", "d1", j.cluster_fingerprint, 0.010, 0.013, 0.0105, 2, 2, false,
                   "fused", true};
    ASSERT_TRUE((*store)->SaveFeedback(m).ok());
    PlanRecord baseline{"rollback:job:job-1", "gen-1", R"({"groups":[],"buckets":[]})", 0.011,
                        "baseline:ddp", "[]", 0.005};
    baseline.rolled_back = true;
    baseline.rollback_reason = "measured 13.00 ms vs ddp 10.50 ms on 2 ranks";
    baseline.rollback_job = "job-1";
    baseline.rolled_back_from = "d1";
    RollbackRecord r{.id = "rb-1", .job_id = "job-1", .scope = "job", .shared_key = "key",
                     .job_key = "rollback:job:job-1", .replaced_sha256 = "d1",
                     .credential_sha256 = "c1", .reason = "slower", .actor = "ranks",
                     .created_unix_s = 10};
    ASSERT_TRUE((*store)->SaveRollback(r, baseline, r.job_key, nullptr).ok());
    // UpdateJob (the job manager's checkpoints) leaves the measured figures.
    m.job_id = "nope";
    EXPECT_FALSE((*store)->SaveFeedback(m).ok());
  }
  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<JobRecord> got = (*store)->GetJob("job-1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->plan_key, "rollback:job:job-1");
  EXPECT_EQ(got->measured_s, 0.013);
  EXPECT_TRUE(got->rolled_back);  // from its own plan
  EXPECT_EQ(got->rollback_job, "job-1");
  // The shared entry is untouched.
  EXPECT_FALSE((*(*store)->GetPlan("key"))->rolled_back);
  EXPECT_TRUE((*store)->CalibrationSamples(j.cluster_fingerprint, "fused", 10)->empty());
  EXPECT_EQ(*(*store)->CountJobRollbackCredentials("key", "d1"), 1);
  ASSERT_EQ((*store)->Rollbacks("", 10)->size(), 1u);
  ASSERT_EQ((*store)->Audit("job-1", 10)->size(), 1u);
  EXPECT_EQ((*(*store)->Audit("job-1", 10))[0].action, "rollback:job");

  RollbackRecord r = (*(*store)->Rollbacks("job-1", 10))[0];
  ASSERT_TRUE((*store)->RestoreRollback(r, "operator", {20, "operator", "restore", "job-1", "ok"}).ok());
  EXPECT_EQ((*store)->GetJob("job-1")->plan_key, "key");
  EXPECT_FALSE((*store)->GetJob("job-1")->rolled_back);
  EXPECT_EQ((*(*store)->Rollbacks("job-1", 10))[0].restored_by, "operator");
  EXPECT_EQ(*(*store)->CountJobRollbackCredentials("key", "d1"), 0);
  EXPECT_EQ((*store)->CalibrationSamples(j.cluster_fingerprint, "fused", 10)->size(), 1u);
  // Twice is refused.
  EXPECT_EQ((*store)->RestoreRollback(r, "operator", {21, "operator", "restore", "job-1", ""}).code(),
            absl::StatusCode::kFailedPrecondition);

  // A shared rollback keeps the replaced entry and a restore puts it back.
  PlanRecord shared_baseline{"key", "gen-1", R"({"groups":[],"buckets":[]})", 0.011,
                             "baseline:ddp", "[]", 0.005};
  shared_baseline.rolled_back = true;
  shared_baseline.rolled_back_from = "d1";
  PlanRecord saved = *(*(*store)->GetPlan("key"));
  saved.key = "rollback:saved:rb-2";
  RollbackRecord sr{.id = "rb-2", .job_id = "job-1", .scope = "shared", .shared_key = "key",
                    .saved_key = saved.key, .replaced_sha256 = "d1", .reason = "two jobs",
                    .actor = "ranks", .created_unix_s = 30};
  ASSERT_TRUE((*store)->SaveRollback(sr, shared_baseline, "", &saved).ok());
  EXPECT_EQ((*(*store)->GetPlan("key"))->origin, "baseline:ddp");
  EXPECT_TRUE((*store)->GetJob("job-1")->rolled_back);
  ASSERT_TRUE((*store)->RestoreRollback(sr, "op", {40, "op", "restore", "job-1", ""}).ok());
  EXPECT_EQ((*(*store)->GetPlan("key"))->origin, "search");
  EXPECT_EQ((*store)->RollbacksOfPlan("key", "d1")->size(), 2u);
}

TEST(StoreTest, TasksAreUniquePerKeyAndLeasedOldestFirst) {
  auto store = Store::Open(":memory:");
  TaskRecord t{.id = "t1", .device_kind = "cpu-1t", .op_type = "Relu", .signature = "s1"};
  EXPECT_TRUE(*(*store)->InsertTaskIfAbsent(t));
  t.id = "t1-again";
  EXPECT_FALSE(*(*store)->InsertTaskIfAbsent(t));  // same key
  t.id = "t2";
  t.signature = "s2";
  EXPECT_TRUE(*(*store)->InsertTaskIfAbsent(t));
  t.id = "t3";
  t.device_kind = "cuda:X";
  EXPECT_TRUE(*(*store)->InsertTaskIfAbsent(t));
  auto leased = (*store)->LeaseTasks("cpu-1t", "w", 5, 100.0);
  ASSERT_EQ(leased->size(), 2u);
  EXPECT_EQ((*leased)[0].id, "t1");
  EXPECT_EQ((*leased)[1].id, "t2");
  EXPECT_EQ((*leased)[0].attempts, 1);
  EXPECT_EQ(*(*store)->RequeueExpired(99.0), 0);
  EXPECT_EQ(*(*store)->RequeueExpired(100.5), 2);
  EXPECT_EQ(*(*store)->CountTasks(TaskState::kQueued), 3);
}

TEST(StoreTest, JobOptionsJsonIsCanonical) {
  JobOptions o;
  o.alpha = 1.1;
  EXPECT_EQ(JobOptionsToJson(o),
            R"({"alpha":1.1000000000000001,"batch":0,"beta":10,"budget_s":60,"patience":1000,"ranks":0,"seed":0})");
  EXPECT_EQ(*JobOptionsFromJson(JobOptionsToJson(o)), o);
  EXPECT_THAT(std::string(JobOptionsFromJson("[]").status().message()), HasSubstr("options"));
  // Buckets only: a key of its own; the default keeps the keys from before.
  o.op_fusion = false;
  EXPECT_THAT(JobOptionsToJson(o), HasSubstr(R"("op_fusion":false,)"));
  EXPECT_EQ(*JobOptionsFromJson(JobOptionsToJson(o)), o);
  // Parallel plans: likewise, the key only when on.
  EXPECT_THAT(JobOptionsToJson(o), ::testing::Not(HasSubstr("parallel")));
  o.parallel = true;
  EXPECT_EQ(JobOptionsToJson(o),
            R"({"alpha":1.1000000000000001,"batch":0,"beta":10,"budget_s":60,"op_fusion":false,)"
            R"("parallel":true,"patience":1000,"ranks":0,"seed":0})");
  EXPECT_EQ(*JobOptionsFromJson(JobOptionsToJson(o)), o);
  // A requested strategy row and no pipelines: keys of their own, in order.
  o.strategy_row = "expert:megatron";
  o.no_pipeline = true;
  EXPECT_EQ(JobOptionsToJson(o),
            R"({"alpha":1.1000000000000001,"batch":0,"beta":10,"budget_s":60,"no_pipeline":true,)"
            R"("op_fusion":false,"parallel":true,"patience":1000,"ranks":0,"seed":0,)"
            R"("strategy_row":"expert:megatron"})");
  EXPECT_EQ(*JobOptionsFromJson(JobOptionsToJson(o)), o);
  o.strategy_row = "braid";
  EXPECT_THAT(JobOptionsToJson(o), HasSubstr(R"("strategy_row":"braid"})"));
  EXPECT_EQ(*JobOptionsFromJson(JobOptionsToJson(o)), o);
  // SyncBN programs: a key of their own, last, only when on.
  EXPECT_THAT(JobOptionsToJson(o), ::testing::Not(HasSubstr("sync_batch_norm")));
  o.sync_batch_norm = true;
  EXPECT_THAT(JobOptionsToJson(o),
              HasSubstr(R"("seed":0,"strategy_row":"braid","sync_batch_norm":true})"));
  EXPECT_EQ(*JobOptionsFromJson(JobOptionsToJson(o)), o);
}

ParallelSection Section() {
  ParallelSection p;
  p.strategy = "braid";
  p.degree = 8;
  p.data_degree = 2;
  p.model_degree = 4;
  p.forward_text = "graph \"g.device\"\n";
  p.training_fingerprint = "00000000000000dd";
  p.json = R"({"strategy":"braid","grad_group":{}})";
  p.program_json = R"({"format":"braid-program/1","row":"braid"})";
  return p;
}

TEST(StoreTest, ParallelSectionsOfPlansAndJobsSurviveReopenAndOldRowsHaveNone) {
  const std::string path = TempDb("parallel_v6.db");
  {
    // A file from before migration 7, with a plan.
    auto db = sql::Database::Open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(sql::Migrate(*db, Store::Migrations().first(6)).ok());
    ASSERT_TRUE(db->Execute("INSERT INTO plans(key, generation, plan_json, predicted_s, origin, "
                            "baselines_json, fo_bound_s, updated_at) VALUES('old', 'gen-1', '{}', "
                            "0.5, 'search', '[]', 0.25, 0)")
                    .ok());
  }
  {
    auto store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_FALSE((*(*store)->GetPlan("old"))->parallel.has_value());
    PlanRecord p{"par", "gen-1", "{}", 0.5, "search", "[]", 0.25};
    p.parallel = Section();
    ASSERT_TRUE((*store)->PutPlan(p).ok());
    // A job inserted with its section (a cache hit at submit) and one given
    // it later (a searched job).
    JobRecord j = MakeJob("job-hit");
    j.options.parallel = true;
    const ParallelSection s = Section();
    ASSERT_TRUE((*store)->InsertJob(&j, "graph \"g\"\n", "{}", &s).ok());
    JobRecord k = MakeJob("job-searched");
    ASSERT_TRUE((*store)->InsertJob(&k, "graph \"g\"\n", "{}").ok());
    EXPECT_FALSE((*(*store)->GetJobParallel("job-searched")).has_value());
    EXPECT_TRUE((*store)->GetJob("job-searched")->parallel_strategy.empty());
    ParallelSection other = Section();
    other.strategy = "data_parallel";
    other.data_degree = 8;
    other.model_degree = 1;
    ASSERT_TRUE((*store)->PutJobParallel("job-searched", other).ok());
  }
  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  std::optional<PlanRecord> got = *(*store)->GetPlan("par");
  ASSERT_TRUE(got.has_value() && got->parallel.has_value());
  EXPECT_EQ(*got->parallel, Section());
  EXPECT_EQ(**(*store)->GetJobParallel("job-hit"), Section());
  JobRecord hit = *(*store)->GetJob("job-hit");
  EXPECT_TRUE(hit.options.parallel);
  EXPECT_EQ(hit.parallel_strategy, "braid");
  EXPECT_EQ(hit.parallel_data_degree, 2);
  EXPECT_EQ(hit.parallel_model_degree, 4);
  JobRecord searched = *(*store)->GetJob("job-searched");
  EXPECT_EQ(searched.parallel_strategy, "data_parallel");
  EXPECT_EQ(searched.parallel_data_degree, 8);
  // Listing joins the sections too.
  std::vector<JobRecord> all = *(*store)->ListJobs(10);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].parallel_strategy, "data_parallel");
  EXPECT_EQ(all[1].parallel_strategy, "braid");
}

// Migration 10: the per-device program (or why the row has none) of the
// sections of cached plans and of jobs, kept across a re-open; sections
// stored before it have neither.
TEST(StoreTest, ParallelProgramsSurviveReopenAndSectionsFromBeforeHaveNone) {
  const std::string path = TempDb("program_v9.db");
  {
    // A file at migration 9, with a parallel plan and a parallel job.
    auto db = sql::Database::Open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(sql::Migrate(*db, Store::Migrations().first(9)).ok());
    ASSERT_TRUE(db->Execute("INSERT INTO plans(key, generation, plan_json, predicted_s, origin, "
                            "baselines_json, fo_bound_s, parallel_strategy, parallel_json, "
                            "updated_at) VALUES('old', 'gen-1', '{}', 0.5, 'search', '[]', 0.25, "
                            "'braid', '{}', 0)")
                    .ok());
  }
  {
    auto store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    std::optional<PlanRecord> old = *(*store)->GetPlan("old");
    ASSERT_TRUE(old.has_value() && old->parallel.has_value());
    EXPECT_EQ(old->parallel->program_json, "");
    EXPECT_EQ(old->parallel->program_error, "");
    PlanRecord with{"with", "gen-1", "{}", 0.5, "search", "[]", 0.25};
    with.parallel = Section();
    PlanRecord refused{"refused", "gen-1", "{}", 0.5, "search", "[]", 0.25};
    refused.parallel = Section();
    refused.parallel->program_json.clear();
    refused.parallel->program_error = "lowering: op fc (MatMul) under [d=2]: no mesh";
    ASSERT_TRUE((*store)->PutPlan(with).ok());
    ASSERT_TRUE((*store)->PutPlan(refused).ok());
    JobRecord j = MakeJob("job-program");
    j.options.parallel = true;
    ASSERT_TRUE((*store)->InsertJob(&j, "graph \"g\"\n", "{}").ok());
    ASSERT_TRUE((*store)->PutJobParallel("job-program", *refused.parallel).ok());
  }
  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  std::optional<PlanRecord> with = *(*store)->GetPlan("with");
  ASSERT_TRUE(with.has_value() && with->parallel.has_value());
  EXPECT_EQ(with->parallel->program_json, Section().program_json);
  EXPECT_EQ(with->parallel->program_error, "");
  EXPECT_EQ(*with->parallel, Section());
  std::optional<PlanRecord> refused = *(*store)->GetPlan("refused");
  ASSERT_TRUE(refused.has_value() && refused->parallel.has_value());
  EXPECT_EQ(refused->parallel->program_json, "");
  EXPECT_EQ(refused->parallel->program_error, "lowering: op fc (MatMul) under [d=2]: no mesh");
  std::optional<ParallelSection> job = *(*store)->GetJobParallel("job-program");
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->program_error, refused->parallel->program_error);
  EXPECT_EQ(job->program_json, "");
}

}  // namespace
}  // namespace braid::server
