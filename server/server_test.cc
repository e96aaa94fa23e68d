// In-process gRPC tests of braid-server: a submitted job's plan equals a
// direct RunFusionSearch with the same seed; authentication, field
// validation and the message-size limit; the Workers service.
#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <iostream>
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
#include "search/backtracking.h"
#include "nlohmann/json.hpp"
#include "search/plan.h"

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
    return stub_->SubmitGraph(&ctx, req, resp);
  }

  std::unique_ptr<BraidServer> server_;
  std::unique_ptr<v1::Strategy::Stub> stub_;
  std::unique_ptr<v1::Workers::Stub> workers_;
};

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
  grpc::ClientContext wctx;
  Auth(&wctx);
  v1::WatchJobRequest wreq;
  wreq.set_job_id(sub.job_id());
  auto reader = stub_->WatchJob(&wctx, wreq);
  v1::JobStatus s;
  // (The short profiling phase may be coalesced away by the stream; the
  // task it created is checked below.)
  while (reader->Read(&s)) {
  }
  ASSERT_TRUE(reader->Finish().ok());
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

}  // namespace
}  // namespace braid::server
