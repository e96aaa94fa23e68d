// In-process gRPC tests of braid-server: a submitted job's plan equals a
// direct RunFusionSearch with the same seed; authentication, field
// validation and the message-size limit; the Workers service; measured
// feedback (ReportMeasurement): validation, rollback of a plan measured
// slower than the DDP baseline, calibration across jobs of a cluster;
// parallel plans (SearchOptions.parallel) over gRPC.
#include "server/server.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "braid/v1/strategy.grpc.pb.h"
#include "braid/v1/workers.grpc.pb.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "gmock/gmock.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/plan_digest.h"
#include "search/backtracking.h"
#include "search/baselines.h"
#include "graph/builder.h"
#include "graph/fingerprint.h"
#include "graph/text_format.h"
#include "search/plan.h"
#include "server/cluster_convert.h"
#include "server/strategy_api.h"

namespace braid::server {
namespace {

namespace v1 = braid::v1;
using ::testing::HasSubstr;

constexpr char kClientToken[] = "client-secret";
constexpr char kWorkerToken[] = "worker-secret";

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.listen = "";  // in-process only
    o.db_path = ":memory:";
    o.client_token = kClientToken;
    o.worker_token = kWorkerToken;
    o.max_receive_message_bytes = 1 << 20;
    o.shutdown_grace_s = 0.2;
    absl::StatusOr<std::unique_ptr<BraidServer>> s = StartServer(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    stub_ = v1::Strategy::NewStub(server_->InProcessChannel());
    workers_ = v1::Workers::NewStub(server_->InProcessChannel());
  }

  static void Auth(grpc::ClientContext* ctx, const std::string& token = kClientToken) {
    ctx->AddMetadata("authorization", "Bearer " + token);
  }

  static v1::SubmitGraphRequest MlpRequest() {
    v1::SubmitGraphRequest req;
    req.set_zoo_model("mlp");
    req.set_cluster_preset("cpu-local");
    req.mutable_options()->set_ranks(2);
    req.mutable_options()->set_seed(11);
    req.mutable_options()->set_budget_s(20);
    req.mutable_options()->set_patience(4);
    return req;
  }

  grpc::Status Submit(const v1::SubmitGraphRequest& req, v1::SubmitGraphResponse* resp,
                      const std::string& token = kClientToken) {
    grpc::ClientContext ctx;
    if (!token.empty()) Auth(&ctx, token);
    grpc::Status st = stub_->SubmitGraph(&ctx, req, resp);
    if (st.ok()) credentials_[resp->job_id()] = resp->report_credential();
    return st;
  }

  // Begins a new run of `job`'s plan on its 2 ranks: Measured() reports
  // under it from here on.
  std::string NewRun(const std::string& job) {
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::StartRunRequest req;
    req.set_job_id(job);
    req.set_report_credential(credentials_[job]);
    req.set_world_size(2);
    v1::StartRunResponse resp;
    grpc::Status st = stub_->StartRun(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    runs_[job] = resp.attempt_id();
    return resp.attempt_id();
  }

  // Follows job `id` to its final phase; returns its last status.
  v1::JobStatus WatchToEnd(const std::string& id) {
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::WatchJobRequest wreq;
    wreq.set_job_id(id);
    auto reader = stub_->WatchJob(&ctx, wreq);
    v1::JobStatus s;
    while (reader->Read(&s)) {
    }
    EXPECT_TRUE(reader->Finish().ok());
    return s;
  }

  // Submits `req` and follows the job to its final phase; returns its id.
  std::string SubmitAndWait(const v1::SubmitGraphRequest& req) {
    v1::SubmitGraphResponse sub;
    grpc::Status st = Submit(req, &sub);
    EXPECT_TRUE(st.ok()) << st.error_message();
    const v1::JobStatus s = WatchToEnd(sub.job_id());
    EXPECT_EQ(s.phase(), v1::JOB_PHASE_DONE) << s.error();
    return sub.job_id();
  }

  v1::GetPlanResponse GetPlan(const std::string& id, bool digest_only = false) {
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::GetPlanRequest req;
    req.set_job_id(id);
    req.set_digest_only(digest_only);
    v1::GetPlanResponse resp;
    grpc::Status st = stub_->GetPlan(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  v1::JobStatus GetJob(const std::string& id) {
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::JobStatus resp;
    grpc::Status st = stub_->GetJob(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  grpc::Status Report(const v1::ReportMeasurementRequest& req,
                      v1::ReportMeasurementResponse* resp,
                      const std::string& token = kClientToken) {
    grpc::ClientContext ctx;
    Auth(&ctx, token);
    return stub_->ReportMeasurement(&ctx, req, resp);
  }

  // A rank's report in the job's current run (NewRun, begun at the first
  // report): plan times (ms) and, when given, baseline times (ms).
  v1::ReportMeasurementRequest Measured(const std::string& job, int rank, int world,
                                        const std::vector<double>& plan_ms,
                                        const std::vector<double>& baseline_ms = {},
                                        const std::string& digest = "") {
    v1::ReportMeasurementRequest r;
    if (!runs_.contains(job) && credentials_.contains(job)) NewRun(job);
    r.set_report_credential(credentials_[job]);
    r.set_attempt_id(runs_[job]);
    r.set_job_id(job);
    r.set_rank(rank);
    r.set_world_size(world);
    r.set_plan_sha256(digest);
    for (double t : plan_ms) r.add_plan_iteration_s(t * 1e-3);
    for (double t : baseline_ms) r.add_baseline_iteration_s(t * 1e-3);
    r.set_source("braid.torch");
    return r;
  }

  std::map<std::string, std::string> credentials_;  // job -> report credential
  std::map<std::string, std::string> runs_;         // job -> current run
  std::unique_ptr<BraidServer> server_;
  std::unique_ptr<v1::Strategy::Stub> stub_;
  std::unique_ptr<v1::Workers::Stub> workers_;
};

// `n` iterations around `ms` with a deterministic spread of +-`noise` ms
// (offset by `phase` so two ranks differ).
std::vector<double> Around(double ms, double noise, int n, int phase = 0) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(ms + noise * (((i + phase) * 3) % 5 - 2) / 2.0);
  return out;
}

TEST_F(ServerTest, SubmitWatchGetPlanMatchesADirectSearch) {
  v1::SubmitGraphResponse sub;
  grpc::Status st = Submit(MlpRequest(), &sub);
  ASSERT_TRUE(st.ok()) << st.error_message();

  grpc::ClientContext wctx;
  Auth(&wctx);
  v1::WatchJobRequest wreq;
  wreq.set_job_id(sub.job_id());
  std::unique_ptr<grpc::ClientReader<v1::JobStatus>> reader = stub_->WatchJob(&wctx, wreq);
  v1::JobStatus status;
  std::vector<v1::JobPhase> phases;
  while (reader->Read(&status)) phases.push_back(status.phase());
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_FALSE(phases.empty());
  EXPECT_EQ(phases.back(), v1::JOB_PHASE_DONE) << status.error();
  EXPECT_EQ(status.eta_s(), 0);

  grpc::ClientContext pctx;
  Auth(&pctx);
  v1::GetPlanRequest preq;
  preq.set_job_id(sub.job_id());
  v1::GetPlanResponse plan;
  ASSERT_TRUE(stub_->GetPlan(&pctx, preq, &plan).ok());
  // Where the predicted compute time comes from: shares that add up to 1.
  ASSERT_TRUE(plan.has_cost_sources());
  const v1::CostSources& src = plan.cost_sources();
  EXPECT_NEAR(src.measured() + src.gnn() + src.corrected_roofline() + src.prior(), 1.0, 1e-9);

  // The same search, run directly with the same seed and cost model.
  graph::Graph train = *graph::BuildTrainingGraph(*graph::BuildZooModel("mlp"), {.ranks = 2});
  costmodel::ClusterSpec cluster = *costmodel::WithRanks(*costmodel::ClusterPreset("cpu-local"), 2);
  costmodel::ClusterCostModel cm(cluster, &server_->profiles(), nullptr,
                                 *costmodel::CommModelFromStore(cluster, &server_->profiles()));
  search::SearchConfig cfg;
  cfg.seed = 11;
  cfg.patience = 4;
  cfg.time_budget_s = 20;
  absl::StatusOr<search::SearchResult> direct = search::RunFusionSearch(train, cm, cfg);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(plan.plan_json(), search::PlanToJson(train, direct->plan).dump());
  EXPECT_DOUBLE_EQ(plan.plan().predicted_iteration_s(), direct->sim.iteration_s);
  EXPECT_EQ(plan.origin(), direct->origin);
  ASSERT_EQ(plan.baselines_size(), 6);
  EXPECT_EQ(plan.baselines(0).name(), "no_fusion");
  EXPECT_DOUBLE_EQ(plan.baselines(0).iteration_s(), direct->baselines->baselines[0].sim.iteration_s);
  EXPECT_DOUBLE_EQ(plan.fo_bound_s(), direct->fo_bound_s);
  EXPECT_EQ(plan.plan().cost_generation(), cm.Generation());
  // The braid row of `braid submit`: compute and comm carried with the plan.
  ASSERT_TRUE(plan.plan().has_predicted_compute_s());
  ASSERT_TRUE(plan.plan().has_predicted_comm_s());
  EXPECT_DOUBLE_EQ(plan.plan().predicted_compute_s(), direct->sim.compute_s);
  EXPECT_DOUBLE_EQ(plan.plan().predicted_comm_s(), direct->sim.comm_s);
  EXPECT_GT(plan.plan().predicted_compute_s(), 0);
  // The DDP-bucket baseline's buckets travel with the plan (the activator's
  // comparison), and the digest covers the plan as served.
  const nlohmann::json ddp_buckets =
      search::PlanToJson(train, direct->baselines->Find("ddp")->plan)["buckets"];
  ASSERT_EQ(plan.plan().ddp_buckets_size(), static_cast<int>(ddp_buckets.size()));
  for (int b = 0; b < plan.plan().ddp_buckets_size(); ++b) {
    EXPECT_EQ(plan.plan().ddp_buckets(b).gradients_size(), static_cast<int>(ddp_buckets[b].size()));
    EXPECT_EQ(plan.plan().ddp_buckets(b).gradients(0), ddp_buckets[b][0].get<std::string>());
  }
  EXPECT_EQ(plan.plan_sha256(), PlanDigest(plan.plan()));
  EXPECT_EQ(plan.plan_sha256().size(), 64u);
  EXPECT_FALSE(plan.rolled_back());
  EXPECT_EQ(plan.calibration(), 0);  // nothing measured yet
  EXPECT_EQ(plan.calibrated_iteration_s(), 0);
  // digest_only: what a rank verifies a broadcast plan with, nothing else.
  const v1::GetPlanResponse digest = GetPlan(sub.job_id(), /*digest_only=*/true);
  EXPECT_EQ(digest.job_id(), sub.job_id());
  EXPECT_EQ(digest.plan_sha256(), plan.plan_sha256());
  EXPECT_FALSE(digest.has_plan());
  EXPECT_TRUE(digest.plan_json().empty());
  EXPECT_EQ(digest.baselines_size(), 0);
  EXPECT_TRUE(digest.origin().empty());
  int groups = 0;
  const nlohmann::json parsed = nlohmann::json::parse(plan.plan_json());
  for (const nlohmann::json& g : parsed.at("groups")) groups += g.is_object() ? 1 : 0;
  EXPECT_EQ(plan.plan().fusion_groups_size(), groups);

  // ListJobs and GetJob see it; a resubmission is served from the cache.
  grpc::ClientContext lctx;
  Auth(&lctx);
  v1::ListJobsResponse list;
  ASSERT_TRUE(stub_->ListJobs(&lctx, v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).job_id(), sub.job_id());
  v1::SubmitGraphResponse again;
  ASSERT_TRUE(Submit(MlpRequest(), &again).ok());
  EXPECT_EQ(again.status().phase(), v1::JOB_PHASE_DONE);
  EXPECT_TRUE(again.status().from_cache());
}

// The target is p99 < 5 ms for a cached plan; the assertion is looser so a
// loaded 2-core CI machine does not flake, and the measured p99 is printed.
TEST_F(ServerTest, GetPlanOfACachedPlanIsFast) {
  v1::SubmitGraphResponse first, cached;
  ASSERT_TRUE(Submit(MlpRequest(), &first).ok());
  grpc::ClientContext wctx;
  Auth(&wctx);
  v1::WatchJobRequest wreq;
  wreq.set_job_id(first.job_id());
  auto reader = stub_->WatchJob(&wctx, wreq);
  v1::JobStatus s;
  while (reader->Read(&s)) {
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_TRUE(Submit(MlpRequest(), &cached).ok());
  ASSERT_EQ(cached.status().phase(), v1::JOB_PHASE_DONE);
  std::vector<double> ms;
  for (int i = 0; i < 200; ++i) {
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::GetPlanRequest req;
    req.set_job_id(cached.job_id());
    v1::GetPlanResponse resp;
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(stub_->GetPlan(&ctx, req, &resp).ok());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_TRUE(resp.from_cache());
  }
  std::sort(ms.begin(), ms.end());
  const double p99 = ms[197];
  std::cout << "GetPlan (cached, in-process) p50 " << ms[100] << " ms, p99 " << p99 << " ms\n";
  EXPECT_LT(p99, 50);
}

TEST_F(ServerTest, CallsWithoutTheRightTokenAreUnauthenticated) {
  v1::SubmitGraphResponse resp;
  EXPECT_EQ(Submit(MlpRequest(), &resp, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Submit(MlpRequest(), &resp, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // The worker token does not open the Strategy service, nor vice versa.
  EXPECT_EQ(Submit(MlpRequest(), &resp, kWorkerToken).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext ctx;
  Auth(&ctx, kClientToken);
  v1::RegisterRequest reg;
  reg.set_device_kind("cpu-1t");
  reg.set_slots(1);
  v1::RegisterResponse rr;
  EXPECT_EQ(workers_->Register(&ctx, reg, &rr).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext wctx;  // streams too
  v1::WatchJobRequest wreq;
  wreq.set_job_id("job-x");
  auto reader = stub_->WatchJob(&wctx, wreq);
  v1::JobStatus s;
  EXPECT_FALSE(reader->Read(&s));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ServerTest, BadFieldsAreInvalidArgumentNamingTheField) {
  struct Case {
    std::function<void(v1::SubmitGraphRequest&)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](auto& r) { r.clear_zoo_model(); }, "model"},
      {[](auto& r) { r.set_onnx(""); }, "onnx: empty"},
      {[](auto& r) { r.set_onnx("garbage"); }, "onnx"},
      {[](auto& r) { r.set_zoo_model("no-such-model"); }, "zoo_model"},
      {[](auto& r) { r.set_graph_text("graph \"g\"\nop x Relu (nope) -> (y)\n"); }, "graph_text"},
      {[](auto& r) { r.mutable_options()->set_alpha(0.5); }, "options.alpha"},
      {[](auto& r) { r.mutable_options()->set_beta(0); }, "options.beta"},
      {[](auto& r) { r.mutable_options()->set_ranks(0); }, "options.ranks"},
      {[](auto& r) { r.mutable_options()->set_budget_s(-1); }, "options.budget_s"},
      {[](auto& r) { r.mutable_options()->set_patience(0); }, "options.patience"},
      {[](auto& r) { r.set_cluster_preset("no-such-cluster"); }, "cluster_preset"},
      {[](auto& r) { r.clear_cluster_preset(); }, "cluster"},
      {[](auto& r) {
         v1::ClusterSpec* c = r.mutable_cluster_spec();
         c->set_name("x");
         c->set_nodes(1);
         c->set_devices_per_node(0);
       },
       "cluster_spec.devices_per_node"},
      {[](auto& r) {
         r.set_cluster_preset("dgx-h100");
         r.mutable_options()->set_ranks(100000);
       },
       "options.ranks"},
      // A strategy row: a row's name (at most 64 bytes of UTF-8), not a
      // pipeline's (the service plans none), and only with parallel.
      {[](auto& r) {
         r.mutable_options()->set_parallel(true);
         r.mutable_options()->set_strategy_row(std::string(65, 'b'));
       },
       "options.strategy_row: longer than 64 bytes"},
      {[](auto& r) {
         r.mutable_options()->set_parallel(true);
         r.mutable_options()->set_strategy_row("braid\xff");
       },
       "options.strategy_row: not valid UTF-8"},
      {[](auto& r) {
         r.mutable_options()->set_parallel(true);
         r.mutable_options()->set_strategy_row("tensor");
       },
       "options.strategy_row: unknown strategy row 'tensor'"},
      {[](auto& r) {
         r.mutable_options()->set_parallel(true);
         r.mutable_options()->set_strategy_row("pipeline:2");
       },
       "options.strategy_row: 'pipeline:2' is a pipeline row"},
      {[](auto& r) { r.mutable_options()->set_strategy_row("braid"); },
       "options.strategy_row chooses among the strategy rows of a parallel plan"},
      {[](auto& r) { r.mutable_options()->set_no_pipeline(true); },
       "options.no_pipeline chooses among the strategy rows of a parallel plan"},
      {[](auto& r) { r.mutable_options()->set_sync_batch_norm(true); },
       "options.sync_batch_norm shapes the per-device program of a parallel plan"},
  };
  for (const Case& c : cases) {
    v1::SubmitGraphRequest req = MlpRequest();
    c.mutate(req);
    v1::SubmitGraphResponse resp;
    grpc::Status st = Submit(req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field << ": "
                                                                   << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(c.field));
  }
  grpc::ClientContext ctx;
  Auth(&ctx);
  v1::JobStatus js;
  grpc::Status st = stub_->GetJob(&ctx, v1::GetJobRequest(), &js);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("job_id"));
  grpc::ClientContext nctx;
  Auth(&nctx);
  v1::GetJobRequest unknown;
  unknown.set_job_id("job-unknown");
  EXPECT_EQ(stub_->GetJob(&nctx, unknown, &js).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerTest, OversizedRequestIsResourceExhausted) {
  v1::SubmitGraphRequest req = MlpRequest();
  req.set_onnx(std::string(2 << 20, 'x'));  // 2 MiB > the 1 MiB limit
  v1::SubmitGraphResponse resp;
  EXPECT_EQ(Submit(req, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(ServerTest, ReportMeasurementValidatesWithCodesAndMessages) {
  const std::string id = SubmitAndWait(MlpRequest());
  // A job cancelled before it had a plan.
  v1::SubmitGraphRequest slow = MlpRequest();
  slow.mutable_options()->set_seed(99);
  slow.mutable_options()->set_patience(10000000);
  slow.mutable_options()->set_budget_s(600);
  v1::SubmitGraphResponse sub;
  ASSERT_TRUE(Submit(slow, &sub).ok());
  {
    grpc::ClientContext ctx;
    Auth(&ctx);
    v1::CancelJobRequest c;
    c.set_job_id(sub.job_id());
    v1::JobStatus s;
    ASSERT_TRUE(stub_->CancelJob(&ctx, c, &s).ok());
    ASSERT_EQ(s.phase(), v1::JOB_PHASE_CANCELLED);
  }
  struct Case {
    std::function<void(v1::ReportMeasurementRequest&)> mutate;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](auto& r) { r.clear_job_id(); }, grpc::StatusCode::INVALID_ARGUMENT, "job_id"},
      {[](auto& r) { r.set_job_id("job-0000000000000000"); }, grpc::StatusCode::NOT_FOUND,
       "job_id: no job 'job-0000000000000000'"},
      {[&](auto& r) {
         r.set_job_id(sub.job_id());
         r.set_report_credential(sub.report_credential());
       },
       grpc::StatusCode::FAILED_PRECONDITION, "cancelled: no plan"},
      {[](auto& r) { r.clear_report_credential(); }, grpc::StatusCode::UNAUTHENTICATED,
       "report_credential must be set"},
      {[&](auto& r) { r.set_report_credential(sub.report_credential()); },
       grpc::StatusCode::PERMISSION_DENIED, "report_credential: not job " + id + "'s"},
      {[](auto& r) { r.set_report_credential("xyz"); }, grpc::StatusCode::INVALID_ARGUMENT,
       "report_credential: expected 64 lowercase hex digits"},
      {[](auto& r) { r.set_attempt_id("run-0000000000000000"); }, grpc::StatusCode::NOT_FOUND,
       "attempt_id: no run 'run-0000000000000000' of job"},
      {[](auto& r) { r.set_attempt_id("run \x1b"); }, grpc::StatusCode::INVALID_ARGUMENT,
       "attempt_id: 'run \\x1b' is not an id this server issued"},
      {[](auto& r) {
         r.set_world_size(1);
         r.set_rank(0);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "world_size: run "},
      {[](auto& r) { r.set_world_size(0); }, grpc::StatusCode::INVALID_ARGUMENT,
       "world_size must be in [1, 65536], got 0"},
      {[](auto& r) { r.set_world_size(65537); }, grpc::StatusCode::INVALID_ARGUMENT,
       "world_size must be in [1, 65536]"},
      {[](auto& r) { r.set_rank(2); }, grpc::StatusCode::INVALID_ARGUMENT,
       "rank must be in [0, world_size = 2), got 2"},
      {[](auto& r) { r.set_rank(-1); }, grpc::StatusCode::INVALID_ARGUMENT, "rank"},
      {[](auto& r) { r.clear_plan_iteration_s(); }, grpc::StatusCode::INVALID_ARGUMENT,
       "plan_iteration_s: between 1 and 10000 times, got 0"},
      {[](auto& r) {
         r.clear_baseline_iteration_s();
         for (int i = 0; i < 10001; ++i) r.add_plan_iteration_s(0.01);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "plan_iteration_s: between 1 and 10000 times"},
      {[](auto& r) { r.set_plan_iteration_s(1, std::nan("")); }, grpc::StatusCode::INVALID_ARGUMENT,
       "plan_iteration_s[1]: must be finite and in [1e-06, 3600] seconds"},
      {[](auto& r) { r.set_plan_iteration_s(1, 5e-324); }, grpc::StatusCode::INVALID_ARGUMENT,
       "plan_iteration_s[1]: must be finite and in [1e-06, 3600] seconds, got 4.94066e-324"},
      {[](auto& r) { r.set_plan_iteration_s(0, 0); }, grpc::StatusCode::INVALID_ARGUMENT,
       "plan_iteration_s[0]"},
      {[](auto& r) { r.set_baseline_iteration_s(2, 3601); }, grpc::StatusCode::INVALID_ARGUMENT,
       "baseline_iteration_s[2]: must be finite and in [1e-06, 3600]"},
      {[](auto& r) { r.add_baseline_iteration_s(0.01); }, grpc::StatusCode::INVALID_ARGUMENT,
       "baseline_iteration_s: 4 times, expected none or one per plan iteration (3)"},
      {[](auto& r) { r.set_source(std::string(129, 's')); }, grpc::StatusCode::INVALID_ARGUMENT,
       "source: longer than 128 bytes"},
      {[](auto& r) { r.set_plan_sha256("abc"); }, grpc::StatusCode::INVALID_ARGUMENT,
       "plan_sha256: expected 64 hex digits"},
      {[](auto& r) { r.set_plan_sha256(std::string(64, '0')); },
       grpc::StatusCode::FAILED_PRECONDITION, "plan_sha256: measured a different plan"},
  };
  for (const Case& c : cases) {
    v1::ReportMeasurementRequest req = Measured(id, 1, 2, {10, 11, 12}, {9, 9, 9});
    c.mutate(req);
    v1::ReportMeasurementResponse resp;
    grpc::Status st = Report(req, &resp);
    EXPECT_EQ(st.error_code(), c.code) << c.message << ": " << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(c.message));
  }
  // Text fields travel as bytes: invalid UTF-8 reaches the API, which names
  // the field.
  v1::ReportMeasurementRequest bad_source = Measured(id, 0, 2, {10});
  bad_source.set_source("bad \xff");
  v1::ReportMeasurementResponse bad_resp;
  grpc::Status bad = Report(bad_source, &bad_resp);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("source: not valid UTF-8 ('bad \\xff')"));
  // The worker token does not open it; nothing above was stored.
  v1::ReportMeasurementResponse resp;
  EXPECT_EQ(Report(Measured(id, 0, 2, {10}), &resp, kWorkerToken).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GetJob(id).measured_iteration_s(), 0);
  // The digest in any case, or none: the plan the job is served.
  const std::string digest = GetPlan(id).plan_sha256();
  std::string upper = digest;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  ASSERT_TRUE(Report(Measured(id, 0, 2, {10, 11, 12}, {}, upper), &resp).ok());
  EXPECT_EQ(resp.ranks_reported(), 1);
  // Rank 0 of this run reported: a second report of it is refused.
  EXPECT_EQ(Report(Measured(id, 0, 2, {99}), &resp).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_DOUBLE_EQ(resp.measured_iteration_s(), 11e-3);
  EXPECT_EQ(resp.baseline_iteration_s(), 0);
}

TEST_F(ServerTest, APlanMeasuredSlowerThanDdpIsRolledBackToIt) {
  const std::string id = SubmitAndWait(MlpRequest());
  const v1::GetPlanResponse searched = GetPlan(id);
  ASSERT_NE(searched.origin(), "baseline:ddp");
  const std::string digest = searched.plan_sha256();
  // Two ranks, 8 interleaved iterations each: the plan ~12 ms, DDP ~10 ms.
  v1::ReportMeasurementResponse r0, r1;
  ASSERT_TRUE(Report(Measured(id, 0, 2, Around(12, 0.4, 8), Around(10, 0.4, 8), digest), &r0).ok());
  EXPECT_EQ(r0.ranks_reported(), 1);
  EXPECT_FALSE(r0.rolled_back());  // rank 1 (maybe the slowest) has not reported
  ASSERT_TRUE(
      Report(Measured(id, 1, 2, Around(12, 0.4, 8, 1), Around(10, 0.4, 8, 2), digest), &r1).ok());
  EXPECT_EQ(r1.ranks_reported(), 2);
  EXPECT_TRUE(r1.rolled_back());
  EXPECT_NEAR(r1.measured_iteration_s(), 12.4e-3, 0.3e-3);
  EXPECT_NEAR(r1.baseline_iteration_s(), 10.4e-3, 0.3e-3);
  EXPECT_DOUBLE_EQ(r1.predicted_iteration_s(), searched.plan().predicted_iteration_s());
  EXPECT_THAT(r1.rollback_reason(), HasSubstr(" ms vs ddp 10."));
  EXPECT_THAT(r1.rollback_reason(), HasSubstr("on 2 ranks: slower by "));
  EXPECT_THAT(r1.rollback_reason(), HasSubstr("(95% CI ["));
  EXPECT_THAT(r1.rollback_reason(), HasSubstr("(braid.torch)"));

  // GetPlan serves the DDP-bucket baseline now, with its own digest.
  const v1::GetPlanResponse rolled = GetPlan(id);
  EXPECT_EQ(rolled.origin(), "baseline:ddp");
  EXPECT_TRUE(rolled.rolled_back());
  EXPECT_EQ(rolled.rollback_reason(), r1.rollback_reason());
  EXPECT_NE(rolled.plan_sha256(), digest);
  EXPECT_EQ(rolled.plan_sha256(), PlanDigest(rolled.plan()));
  graph::Graph train = *graph::BuildTrainingGraph(*graph::BuildZooModel("mlp"), {.ranks = 2});
  costmodel::ClusterSpec cluster = *costmodel::WithRanks(*costmodel::ClusterPreset("cpu-local"), 2);
  costmodel::ClusterCostModel cm(cluster, &server_->profiles(), nullptr,
                                 *costmodel::CommModelFromStore(cluster, &server_->profiles()));
  absl::StatusOr<search::BaselineResults> b = search::RunBaselines(train, cm);
  ASSERT_TRUE(b.ok());
  const search::EvaluatedPlan& ddp = *b->Find("ddp");
  EXPECT_EQ(rolled.plan_json(), search::PlanToJson(train, ddp.plan).dump());
  EXPECT_EQ(rolled.plan().fusion_groups_size(), 0);
  EXPECT_DOUBLE_EQ(rolled.plan().predicted_iteration_s(), ddp.sim.iteration_s);
  EXPECT_DOUBLE_EQ(rolled.plan().predicted_compute_s(), ddp.sim.compute_s);
  const v1::GetPlanResponse rolled_digest = GetPlan(id, /*digest_only=*/true);
  EXPECT_EQ(rolled_digest.plan_sha256(), rolled.plan_sha256());
  EXPECT_TRUE(rolled_digest.rolled_back());
  EXPECT_EQ(rolled_digest.rollback_reason(), r1.rollback_reason());
  const v1::JobStatus status = GetJob(id);
  EXPECT_TRUE(status.rolled_back());
  EXPECT_EQ(status.rollback_reason(), r1.rollback_reason());
  EXPECT_DOUBLE_EQ(status.measured_iteration_s(), r1.measured_iteration_s());
  EXPECT_DOUBLE_EQ(status.measured_baseline_s(), r1.baseline_iteration_s());
  EXPECT_DOUBLE_EQ(status.predicted_iteration_s(), searched.plan().predicted_iteration_s());

  // One job's run decides for that job: a new job of the key still gets
  // the searched plan. When its own ranks measure the same loss, two jobs
  // have: the plan cache no longer hands the losing plan to new jobs.
  v1::SubmitGraphResponse again;
  ASSERT_TRUE(Submit(MlpRequest(), &again).ok());
  EXPECT_EQ(again.status().phase(), v1::JOB_PHASE_DONE);
  EXPECT_TRUE(again.status().from_cache());
  EXPECT_FALSE(again.status().rolled_back());
  EXPECT_EQ(GetPlan(again.job_id()).plan_sha256(), digest);
  for (int rank : {0, 1}) {
    ASSERT_TRUE(Report(Measured(again.job_id(), rank, 2, Around(12, 0.4, 8), Around(10, 0.4, 8)),
                       &r1)
                    .ok());
  }
  EXPECT_TRUE(r1.rolled_back());
  v1::SubmitGraphResponse third;
  ASSERT_TRUE(Submit(MlpRequest(), &third).ok());
  EXPECT_TRUE(third.status().from_cache());
  EXPECT_TRUE(third.status().rolled_back());
  const v1::GetPlanResponse cached = GetPlan(third.job_id());
  EXPECT_EQ(cached.origin(), "baseline:ddp");
  EXPECT_EQ(cached.plan_sha256(), rolled.plan_sha256());
  EXPECT_TRUE(cached.rolled_back());
  EXPECT_THAT(cached.rollback_reason(), HasSubstr("job " + again.job_id() + ": measured "));
  EXPECT_THAT(cached.rollback_reason(), HasSubstr("2 jobs measured this plan slower than DDP"));

  // Reports of the baseline are stored but never roll back further; a late
  // rank's report of the replaced plan (a run begun before the rollback) is
  // kept.
  v1::ReportMeasurementResponse late, base;
  NewRun(id);
  ASSERT_TRUE(Report(Measured(id, 1, 2, Around(12, 0.4, 8), Around(10, 0.4, 8), digest), &late).ok());
  EXPECT_EQ(late.ranks_reported(), 1);
  NewRun(id);
  for (int rank : {0, 1}) {
    ASSERT_TRUE(Report(Measured(id, rank, 2, Around(13, 0.2, 8), Around(10, 0.2, 8),
                                rolled.plan_sha256()),
                       &base)
                    .ok());
  }
  EXPECT_EQ(base.ranks_reported(), 2);
  EXPECT_DOUBLE_EQ(base.predicted_iteration_s(), ddp.sim.iteration_s);
  EXPECT_TRUE(base.rolled_back());
  EXPECT_EQ(GetPlan(id).plan_sha256(), rolled.plan_sha256());
  EXPECT_EQ(GetPlan(id).origin(), "baseline:ddp");
}

// Buckets only (a PyTorch-eager runtime): no fused group in the plan, no
// baseline that fuses ops in its table, DDP's buckets in ddp_buckets, and a
// plan-cache key of its own.
TEST_F(ServerTest, OpFusionOffPlansBucketsOnly) {
  v1::SubmitGraphRequest req = MlpRequest();
  req.mutable_options()->set_op_fusion(false);
  const std::string id = SubmitAndWait(req);
  const v1::GetPlanResponse p = GetPlan(id);
  EXPECT_EQ(p.plan().fusion_groups_size(), 0);
  EXPECT_GT(p.plan().buckets_size(), 0);
  EXPECT_GT(p.plan().ddp_buckets_size(), 0);
  std::vector<std::string> names;
  for (const v1::BaselineEntry& b : p.baselines()) names.push_back(b.name());
  EXPECT_THAT(names, ::testing::Contains("ddp"));
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("xla_op_fusion")));
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("jax_default")));
  const std::string fused = SubmitAndWait(MlpRequest());
  EXPECT_FALSE(GetPlan(fused).from_cache());  // not the buckets-only plan
}

TEST_F(ServerTest, NoRollbackWhenTheIntervalHoldsZeroOrWithFewerThanSixPairs) {
  const std::string id = SubmitAndWait(MlpRequest());
  const v1::GetPlanResponse searched = GetPlan(id);
  // Slower and faster by turns: 0 lies inside the median's interval.
  v1::ReportMeasurementResponse r;
  for (int rank : {0, 1}) {
    ASSERT_TRUE(Report(Measured(id, rank, 2, {12, 10, 12, 10, 12, 10, 12, 10},
                                {10, 12, 10, 12, 10, 12, 10, 12}),
                       &r)
                    .ok());
  }
  EXPECT_FALSE(r.rolled_back());
  // Slower every time, but on 5 pairs only (a new run).
  NewRun(id);
  for (int rank : {0, 1}) {
    ASSERT_TRUE(Report(Measured(id, rank, 2, Around(12, 0.2, 5), Around(10, 0.2, 5)), &r).ok());
  }
  EXPECT_EQ(r.ranks_reported(), 2);
  EXPECT_FALSE(r.rolled_back());
  EXPECT_TRUE(r.rollback_reason().empty());
  const v1::GetPlanResponse after = GetPlan(id);
  EXPECT_EQ(after.origin(), searched.origin());
  EXPECT_EQ(after.plan_sha256(), searched.plan_sha256());
  EXPECT_FALSE(after.rolled_back());
  EXPECT_FALSE(GetJob(id).rolled_back());
  EXPECT_NEAR(GetJob(id).measured_iteration_s(), 12e-3, 0.2e-3);
}

TEST_F(ServerTest, CalibrationBringsASecondJobsPredictionCloser) {
  const std::string a = SubmitAndWait(MlpRequest());
  const v1::GetPlanResponse pa = GetPlan(a);  // memoized from here on
  const double predicted_a = pa.plan().predicted_iteration_s();
  ASSERT_GT(predicted_a, 0);
  std::vector<double> times_ms(8, 1.3 * predicted_a * 1e3);
  v1::ReportMeasurementResponse r;
  for (int rank : {0, 1}) ASSERT_TRUE(Report(Measured(a, rank, 2, times_ms), &r).ok());
  EXPECT_NEAR(r.calibration(), 1.3, 1e-9);
  EXPECT_DOUBLE_EQ(r.predicted_iteration_s(), predicted_a);
  const v1::GetPlanResponse pa2 = GetPlan(a);  // the report invalidated the memo
  EXPECT_NEAR(pa2.calibration(), 1.3, 1e-9);
  EXPECT_NEAR(pa2.calibrated_iteration_s(), 1.3 * predicted_a, 1e-12);
  const v1::JobStatus sa = GetJob(a);
  EXPECT_DOUBLE_EQ(sa.predicted_iteration_s(), predicted_a);
  EXPECT_NEAR(sa.measured_iteration_s(), 1.3 * predicted_a, 1e-12);
  EXPECT_EQ(sa.measured_baseline_s(), 0);

  // Another model on the same cluster: its calibrated prediction is closer
  // to what its ranks then measure than its raw prediction.
  v1::SubmitGraphRequest other = MlpRequest();
  other.set_zoo_model("mlp@sample");
  const std::string b = SubmitAndWait(other);
  const v1::GetPlanResponse pb = GetPlan(b);
  const double predicted_b = pb.plan().predicted_iteration_s();
  ASSERT_NE(predicted_b, predicted_a);
  EXPECT_NEAR(pb.calibration(), 1.3, 1e-9);
  const double measured_b = 1.25 * predicted_b;
  EXPECT_LT(std::abs(pb.calibrated_iteration_s() - measured_b),
            std::abs(predicted_b - measured_b));
  for (int rank : {0, 1}) {
    ASSERT_TRUE(Report(Measured(b, rank, 2, std::vector<double>(8, measured_b * 1e3)), &r).ok());
  }
  // The median of two ratios in log space: their geometric mean.
  EXPECT_NEAR(r.calibration(), std::sqrt(1.3 * 1.25), 1e-9);
  EXPECT_NEAR(GetPlan(a).calibration(), std::sqrt(1.3 * 1.25), 1e-9);
}

TEST_F(ServerTest, WorkerRegistersLeasesAndReports) {
  // A live worker of the cpu-local preset's device kind (this machine's CPU)
  // makes the next cpu-local job create tasks.
  grpc::ClientContext rctx;
  Auth(&rctx, kWorkerToken);
  v1::RegisterRequest reg;
  reg.set_name("host-a");
  reg.set_device_kind(costmodel::LocalCpuDeviceKind());
  reg.set_slots(1);
  v1::RegisterResponse worker;
  ASSERT_TRUE(workers_->Register(&rctx, reg, &worker).ok());
  EXPECT_EQ(worker.heartbeat_interval_s(), 10);

  v1::SubmitGraphResponse sub;
  ASSERT_TRUE(Submit(MlpRequest(), &sub).ok());
  // (The short profiling phase may be coalesced away by the stream; the
  // task it created is checked below.)
  const v1::JobStatus s = WatchToEnd(sub.job_id());
  EXPECT_EQ(s.phase(), v1::JOB_PHASE_DONE);

  grpc::ClientContext lctx;
  Auth(&lctx, kWorkerToken);
  v1::LeaseTasksRequest lreq;
  lreq.set_worker_id(worker.worker_id());
  lreq.set_max_tasks(1);
  v1::LeaseTasksResponse leased;
  ASSERT_TRUE(workers_->LeaseTasks(&lctx, lreq, &leased).ok());
  ASSERT_EQ(leased.tasks_size(), 1);
  const v1::ProfilingTask& t = leased.tasks(0);
  EXPECT_EQ(t.device_kind(), costmodel::LocalCpuDeviceKind());
  EXPECT_FALSE(t.op_graph_text().empty());
  EXPECT_GE(t.inputs_size(), 1);

  v1::ReportResultRequest rep;
  rep.set_worker_id(worker.worker_id());
  rep.set_task_id(t.task_id());
  rep.set_lease_id(t.lease_id());
  rep.mutable_result()->set_median_s(1e-3);
  rep.mutable_result()->set_spread_s(1e-5);
  rep.mutable_result()->set_repetitions(5);
  for (bool want_duplicate : {false, true}) {
    grpc::ClientContext ctx;
    Auth(&ctx, kWorkerToken);
    v1::ReportResultResponse rr;
    ASSERT_TRUE(workers_->ReportResult(&ctx, rep, &rr).ok());
    EXPECT_EQ(rr.duplicate(), want_duplicate);
  }
  const costmodel::ProfileKey stored{costmodel::LocalCpuDeviceKind(), t.op_type(), t.signature()};
  EXPECT_EQ(server_->profiles().Get(stored)->median_s, 1e-3);
  EXPECT_EQ(server_->profiles().Generation(), 1);
}

// ---- Parallel plans (SearchOptions.parallel) ----------------------------------

// A small MLP as braid text: three 2048-wide layers at batch 64.
std::string SmallMlpText() {
  graph::GraphBuilder b("small_mlp");
  graph::TensorId x = b.Input("x", {64, 2048});
  for (int i = 0; i < 3; ++i) {
    x = b.Linear(x, 2048, /*bias=*/false);
    if (i < 2) x = b.Relu(x);
  }
  b.MarkOutput(x);
  return graph::ToText(*std::move(b).Build());
}

v1::SubmitGraphRequest ParallelRequest() {
  v1::SubmitGraphRequest req;
  req.set_graph_text(SmallMlpText());
  req.set_cluster_preset("dgx-h100");
  req.mutable_options()->set_ranks(8);
  req.mutable_options()->set_seed(3);
  req.mutable_options()->set_budget_s(3);
  req.mutable_options()->set_patience(30);
  req.mutable_options()->set_parallel(true);
  return req;
}

TEST_F(ServerTest, AParallelJobServesItsParallelPlanAndASecondOneHitsTheCache) {
  const std::string id = SubmitAndWait(ParallelRequest());
  const v1::GetPlanResponse p = GetPlan(id);
  ASSERT_TRUE(p.plan().has_parallel());
  const v1::ParallelPlan& par = p.plan().parallel();
  EXPECT_FALSE(par.strategy().empty());
  EXPECT_EQ(par.degree(), 8);
  EXPECT_EQ(par.data_degree() * par.model_degree(), 8);
  const graph::Graph forward = *graph::ParseText(SmallMlpText());
  if (par.strategy() != "braid:substituted") EXPECT_EQ(par.ops_size(), forward.num_ops());
  EXPECT_EQ(p.plan_sha256(), PlanDigest(p.plan()));
  // The per-device graph the plan names: its training graph has the job's
  // (and the plan's) fingerprint, and the buckets' gradients.
  const v1::JobStatus job = GetJob(id);
  EXPECT_EQ(job.graph_fingerprint(), p.plan().graph_fingerprint());
  // The whole model's training graph is another one.
  graph::Graph whole = *graph::BuildTrainingGraph(forward, {.ranks = 8});
  if (par.model_degree() > 1) {
    EXPECT_NE(*graph::FingerprintHex(whole), p.plan().graph_fingerprint());
  }
  // Cost figures are outside the digest; the configs are in it.
  v1::Plan costs = p.plan();
  costs.mutable_parallel()->set_dp_iteration_s(1);
  costs.mutable_parallel()->clear_strategies();
  EXPECT_EQ(PlanDigest(costs), p.plan_sha256());
  v1::Plan other = p.plan();
  other.mutable_parallel()->mutable_ops(0)->set_config("something else");
  EXPECT_NE(PlanDigest(other), p.plan_sha256());

  const std::string again = SubmitAndWait(ParallelRequest());
  const v1::GetPlanResponse q = GetPlan(again);
  EXPECT_TRUE(q.from_cache());
  EXPECT_EQ(q.plan_sha256(), p.plan_sha256());
  EXPECT_EQ(SerializeDeterministic(q.plan().parallel()), SerializeDeterministic(par));

  // Without the option: a key (and a plan) of its own, no parallel section.
  v1::SubmitGraphRequest plain = ParallelRequest();
  plain.mutable_options()->clear_parallel();
  const v1::GetPlanResponse d = GetPlan(SubmitAndWait(plain));
  EXPECT_FALSE(d.from_cache());
  EXPECT_FALSE(d.plan().has_parallel());
  EXPECT_EQ(d.plan().graph_fingerprint(), *graph::FingerprintHex(whole));
}

// options.strategy_row over gRPC: the plan is that row's, under a cache
// key of its own; a row the model's table lacks fails the job naming the rows.
TEST_F(ServerTest, AParallelJobServesTheRequestedStrategyRow) {
  v1::SubmitGraphRequest req = ParallelRequest();
  req.mutable_options()->set_strategy_row("data_parallel");
  req.mutable_options()->set_no_pipeline(true);
  const std::string id = SubmitAndWait(req);
  const v1::GetPlanResponse p = GetPlan(id);
  ASSERT_TRUE(p.plan().has_parallel());
  EXPECT_EQ(p.plan().parallel().strategy(), "data_parallel");
  EXPECT_EQ(p.plan().parallel().model_degree(), 1);
  EXPECT_EQ(p.plan().parallel().chosen_by(), "request");
  EXPECT_FALSE(p.from_cache());
  // The same request again: its own entry; another row is another key.
  EXPECT_TRUE(GetPlan(SubmitAndWait(req)).from_cache());
  v1::SubmitGraphRequest megatron = req;
  megatron.mutable_options()->set_strategy_row("expert:megatron");
  const v1::GetPlanResponse m = GetPlan(SubmitAndWait(megatron));
  EXPECT_FALSE(m.from_cache());
  EXPECT_EQ(m.plan().parallel().strategy(), "expert:megatron");
  EXPECT_GT(m.plan().parallel().model_degree(), 1);

  v1::SubmitGraphRequest dlrm = req;
  dlrm.mutable_options()->set_strategy_row("expert:dlrm");  // no embedding tables here
  v1::SubmitGraphResponse sub;
  ASSERT_TRUE(Submit(dlrm, &sub).ok());
  const v1::JobStatus job = WatchToEnd(sub.job_id());
  EXPECT_EQ(job.phase(), v1::JOB_PHASE_FAILED);
  EXPECT_THAT(job.error(), HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(job.error(), HasSubstr("'expert:dlrm' is not in the table"));
  EXPECT_THAT(job.error(), HasSubstr("data_parallel"));
}

TEST_F(ServerTest, AParallelJobOnAClusterNothingFitsFailsWithTheReason) {
  v1::SubmitGraphRequest req = ParallelRequest();
  costmodel::ClusterSpec tiny = *costmodel::ClusterPreset("dgx-h100");
  tiny.device.memory_bytes = 1 << 20;
  *req.mutable_cluster_spec() = ClusterToProto(tiny);
  v1::SubmitGraphResponse sub;
  ASSERT_TRUE(Submit(req, &sub).ok());
  const v1::JobStatus s = WatchToEnd(sub.job_id());
  EXPECT_EQ(s.phase(), v1::JOB_PHASE_FAILED);
  EXPECT_THAT(s.error(), HasSubstr("no parallelization of small_mlp fits"));
  grpc::ClientContext pctx;
  Auth(&pctx);
  v1::GetPlanRequest preq;
  preq.set_job_id(sub.job_id());
  v1::GetPlanResponse presp;
  grpc::Status st = stub_->GetPlan(&pctx, preq, &presp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("fits"));
  // The server goes on.
  EXPECT_EQ(GetJob(SubmitAndWait(MlpRequest())).phase(), v1::JOB_PHASE_DONE);
}

}  // namespace
}  // namespace braid::server
