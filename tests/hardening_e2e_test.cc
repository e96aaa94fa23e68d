// End to end: inputs that could crash or poison braid-server, sent to a
// real braid-server process on loopback. After each, the server
// is still up, /healthz answers, and a restart on the same database comes
// up and stays up.
//  1. ONNX Conv/MaxPool/AveragePool with strides [0,0] (a SIGFPE in ONNX
//     shape inference): Submit is INVALID_ARGUMENT naming node and
//     attribute, nothing is stored, `braid graph stats` exits 2.
//  2. Non-finite times: ConstantOfShape [1e9,1e9,1e9], a link of 1e-300 B/s,
//     a device of 1e-308 FLOP/s are refused at import or cluster validation;
//     a job the process died in twice is failed at restart, not resumed.
//  3. A worker reporting inf, or a result under another worker's lease: the
//     report is refused and the profile store is unchanged.
//  4. Invalid UTF-8 in an ONNX node name (or the job name): INVALID_ARGUMENT.
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/strategy_client.h"
#include "costmodel/cluster.h"
#include "costmodel/profile_store.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "braid/v1/workers.grpc.pb.h"
#include "server/store.h"
#include "tests/e2e_util.h"
#include "tests/onnx_model_maker.h"

namespace braid {
namespace {

namespace v1 = braid::v1;
using ::braid::testing_onnx::ModelMaker;
using ::braid::testing_onnx::ZeroStrideModel;
using ::testing::HasSubstr;

constexpr char kClientToken[] = "hardening-client";
constexpr char kWorkerToken[] = "hardening-worker";

std::unique_ptr<client::StrategyClient> Client(int port) {
  client::ClientOptions o;
  o.address = absl::StrCat("127.0.0.1:", port);
  o.token = kClientToken;
  o.rpc_timeout_s = 10;
  return *client::StrategyClient::Create(o);
}

// A braid-server with the HTTP endpoint, on a database in `dir`.
class Server {
 public:
  explicit Server(const std::string& dir) : dir_(dir) { Start(); }

  void Start() {
    port_ = e2e::FreePort();
    http_port_ = e2e::FreePort();
    proc_ = std::make_unique<e2e::Process>(
        std::vector<std::string>{BRAID_SERVER_BIN, "--listen", absl::StrCat("127.0.0.1:", port_),
                                 "--db", dir_ + "/service.db", "--client-token", kClientToken,
                                 "--worker-token", kWorkerToken, "--http-listen",
                                 absl::StrCat("127.0.0.1:", http_port_)},
        absl::StrCat(dir_, "/server", ++starts_, ".log"));
    std::unique_ptr<client::StrategyClient> c = Client(port_);
    ASSERT_TRUE(e2e::WaitFor([&] { return c->ListJobs(1).ok(); }, 15))
        << "braid-server did not come up; see " << dir_;
  }

  // The server answers /healthz, survives a restart on the same database,
  // and the restarted process stays up.
  void ExpectHealthyAcrossRestart() {
    EXPECT_TRUE(proc_->Alive());
    EXPECT_EQ(e2e::HttpGet(http_port_, "/healthz").status, 200);
    proc_->Kill(SIGKILL);
    Start();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    EXPECT_TRUE(proc_->Alive()) << "the restarted server exited; see " << dir_;
    EXPECT_EQ(e2e::HttpGet(http_port_, "/healthz").status, 200);
  }

  int port() const { return port_; }
  e2e::Process& process() { return *proc_; }

 private:
  std::string dir_;
  int port_ = 0;
  int http_port_ = 0;
  int starts_ = 0;
  std::unique_ptr<e2e::Process> proc_;
};

v1::SubmitGraphRequest OnnxRequest(const std::string& bytes) {
  v1::SubmitGraphRequest req;
  req.set_onnx(bytes);
  req.set_cluster_preset("disco-a");
  req.mutable_options()->set_budget_s(5);
  req.set_name("hardening");
  return req;
}

int RunCli(const std::vector<std::string>& args) {
  std::string cmd = BRAID_BIN;
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(HardeningE2eTest, ZeroStridesAreRefusedAndTheServerStaysUp) {
  const std::string dir = e2e::TempDir("hardening_strides");
  Server server(dir);
  std::unique_ptr<client::StrategyClient> c = Client(server.port());
  for (const std::string type : {"Conv", "MaxPool", "AveragePool"}) {
    absl::StatusOr<v1::SubmitGraphResponse> r = c->Submit(OnnxRequest(ZeroStrideModel(type)));
    ASSERT_FALSE(r.ok()) << type;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("node 'win'"));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("attribute 'strides'"));
    const std::string file = absl::StrCat(dir, "/", type, ".onnx");
    std::ofstream(file, std::ios::binary) << ZeroStrideModel(type);
    EXPECT_EQ(RunCli({"graph", "stats", file}), 2) << type;
  }
  EXPECT_TRUE(c->ListJobs(10)->empty());  // nothing stored
  server.ExpectHealthyAcrossRestart();
}

TEST(HardeningE2eTest, NonFiniteTimesAreRefusedOrFailTheJob) {
  const std::string dir = e2e::TempDir("hardening_nonfinite");
  Server server(dir);
  std::unique_ptr<client::StrategyClient> c = Client(server.port());
  {  // ConstantOfShape [1e9, 1e9, 1e9]
    absl::StatusOr<v1::SubmitGraphResponse> r =
        c->Submit(OnnxRequest(testing_onnx::HugeConstantOfShapeModel()));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("fill"));
  }
  // Cluster specs slower than any real machine.
  const v1::ClusterSpec base = [] {
    v1::ClusterSpec s;
    s.set_name("tiny");
    s.set_nodes(1);
    s.set_devices_per_node(2);
    s.mutable_device()->set_kind("cuda:test");
    s.mutable_device()->set_peak_flops_fp32(1e13);
    s.mutable_device()->set_peak_flops_fp16(1e14);
    s.mutable_device()->set_memory_bandwidth_bytes_per_s(1e12);
    s.mutable_device()->set_memory_bytes(int64_t{16} << 30);
    s.mutable_device()->set_kernel_launch_s(5e-6);
    s.mutable_intra_node()->set_kind(v1::LinkSpec::PCIE);
    s.mutable_intra_node()->set_bandwidth_bytes_per_s(1e10);
    s.mutable_intra_node()->set_latency_s(1e-6);
    s.mutable_inter_node()->set_nic_bandwidth_bytes_per_s(1e10);
    s.mutable_inter_node()->set_nics_per_node(1);
    s.mutable_inter_node()->set_latency_s(1e-6);
    return s;
  }();
  auto submit_cluster = [&](const v1::ClusterSpec& spec) {
    v1::SubmitGraphRequest req;
    req.set_zoo_model("mlp");
    *req.mutable_cluster_spec() = spec;
    req.mutable_options()->set_budget_s(5);
    return c->Submit(req);
  };
  {
    absl::StatusOr<v1::SubmitGraphResponse> ok = submit_cluster(base);
    ASSERT_TRUE(ok.ok()) << ok.status();  // the base spec itself is fine
    ASSERT_TRUE(c->Cancel(ok->job_id()).ok());
  }
  v1::ClusterSpec slow_link = base;
  slow_link.mutable_intra_node()->set_bandwidth_bytes_per_s(1e-300);
  absl::StatusOr<v1::SubmitGraphResponse> r = submit_cluster(slow_link);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("bandwidth"));
  v1::ClusterSpec slow_device = base;
  slow_device.mutable_device()->set_peak_flops_fp32(1e-308);
  r = submit_cluster(slow_device);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("peak_flops"));
  v1::ClusterSpec overflow = base;
  overflow.set_nodes(65537);
  overflow.set_devices_per_node(65537);
  r = submit_cluster(overflow);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(c->ListJobs(10)->size(), 1u);  // only the cancelled base job

  // A job the process died in twice (interrupted_runs 2, still searching)
  // is failed at the next start instead of resumed into the same crash.
  absl::StatusOr<v1::SubmitGraphResponse> victim = submit_cluster(base);
  ASSERT_TRUE(victim.ok()) << victim.status();
  server.process().Kill(SIGKILL);
  {
    std::unique_ptr<server::Store> store = *server::Store::Open(dir + "/service.db");
    server::JobRecord rec = *store->GetJob(victim->job_id());
    rec.phase = server::JobPhase::kSearching;
    rec.interrupted_runs = 2;
    ASSERT_TRUE(store->UpdateJob(rec).ok());
  }
  server.Start();
  c = Client(server.port());
  absl::StatusOr<v1::JobStatus> after = c->GetJob(victim->job_id());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->phase(), v1::JOB_PHASE_FAILED);
  EXPECT_THAT(after->error(), HasSubstr("stopped 2 times while running this job"));
  server.ExpectHealthyAcrossRestart();
}

// A worker of the Workers service, speaking the wire protocol directly.
class FakeWorker {
 public:
  FakeWorker(int port, const std::string& name, const std::string& kind) {
    stub_ = v1::Workers::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                                     grpc::InsecureChannelCredentials()));
    v1::RegisterRequest req;
    req.set_name(name);
    req.set_device_kind(kind);
    req.set_slots(8);
    v1::RegisterResponse resp;
    grpc::ClientContext ctx;
    Auth(ctx);
    grpc::Status s = stub_->Register(&ctx, req, &resp);
    CHECK(s.ok()) << s.error_message();
    id_ = resp.worker_id();
  }
  std::vector<v1::ProfilingTask> Lease(int n) {
    v1::LeaseTasksRequest req;
    req.set_worker_id(id_);
    req.set_max_tasks(n);
    req.set_lease_s(60);
    v1::LeaseTasksResponse resp;
    grpc::ClientContext ctx;
    Auth(ctx);
    CHECK(stub_->LeaseTasks(&ctx, req, &resp).ok());
    return {resp.tasks().begin(), resp.tasks().end()};
  }
  grpc::Status Report(const std::string& task_id, const std::string& lease_id, double median_s) {
    v1::ReportResultRequest req;
    req.set_worker_id(id_);
    req.set_task_id(task_id);
    req.set_lease_id(lease_id);
    req.mutable_result()->set_median_s(median_s);
    req.mutable_result()->set_spread_s(0);
    req.mutable_result()->set_repetitions(5);
    v1::ReportResultResponse resp;
    grpc::ClientContext ctx;
    Auth(ctx);
    return stub_->ReportResult(&ctx, req, &resp);
  }

 private:
  static void Auth(grpc::ClientContext& ctx) {
    ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kWorkerToken));
  }
  std::unique_ptr<v1::Workers::Stub> stub_;
  std::string id_;
};

TEST(HardeningE2eTest, PoisonedOrForeignResultsAreRefused) {
  const std::string dir = e2e::TempDir("hardening_results");
  Server server(dir);
  std::unique_ptr<client::StrategyClient> c = Client(server.port());
  // Workers of the cpu-local preset's device kind (this machine's CPU; the
  // server process computes the same).
  const std::string& kind = costmodel::LocalCpuDeviceKind();
  FakeWorker a(server.port(), "a", kind);
  FakeWorker b(server.port(), "b", kind);
  v1::SubmitGraphRequest req;
  req.set_zoo_model("mlp");
  req.set_cluster_preset("cpu-local");
  req.mutable_options()->set_budget_s(2);
  ASSERT_TRUE(c->Submit(req).ok());
  std::vector<v1::ProfilingTask> tasks;
  ASSERT_TRUE(e2e::WaitFor([&] {
    tasks = a.Lease(1);
    return !tasks.empty();
  }, 15));
  const v1::ProfilingTask& t = tasks[0];
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan(""), -1.0, 1e12}) {
    grpc::Status s = a.Report(t.task_id(), t.lease_id(), bad);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad << ": " << s.error_message();
  }
  grpc::Status foreign = b.Report(t.task_id(), t.lease_id(), 1e-5);
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << foreign.error_message();
  {
    std::unique_ptr<costmodel::ProfileStore> profiles =
        *costmodel::ProfileStore::Open(dir + "/service.db.profiles");
    EXPECT_FALSE(profiles->Get({kind, t.op_type(), t.signature()}).has_value());
  }
  // The lease holder's finite result is accepted.
  grpc::Status good = a.Report(t.task_id(), t.lease_id(), 2e-5);
  EXPECT_TRUE(good.ok()) << good.error_message();
  {
    std::unique_ptr<costmodel::ProfileStore> profiles =
        *costmodel::ProfileStore::Open(dir + "/service.db.profiles");
    std::optional<costmodel::ProfileSample> got = profiles->Get({kind, t.op_type(), t.signature()});
    ASSERT_TRUE(got.has_value());
    EXPECT_DOUBLE_EQ(got->median_s, 2e-5);
  }
  server.ExpectHealthyAcrossRestart();
}

TEST(HardeningE2eTest, InvalidUtf8IsInvalidArgument) {
  const std::string dir = e2e::TempDir("hardening_utf8");
  Server server(dir);
  std::unique_ptr<client::StrategyClient> c = Client(server.port());
  ModelMaker m;
  m.Input("x", {2, 4});
  m.Node("Relu", std::string("relu\xff\xfe"), {"x"}, {"y"});
  m.Output("y");
  absl::StatusOr<v1::SubmitGraphResponse> r = c->Submit(OnnxRequest(m.Bytes()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("not valid UTF-8"));
  const std::string file = dir + "/utf8.onnx";
  std::ofstream(file, std::ios::binary) << m.Bytes();
  EXPECT_EQ(RunCli({"graph", "stats", file}), 2);
  // The job name too: INVALID_ARGUMENT naming the field (not UNIMPLEMENTED).
  v1::SubmitGraphRequest named;
  named.set_zoo_model("mlp");
  named.set_cluster_preset("disco-a");
  named.set_name("job\xff");
  r = c->Submit(named);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("name"));
  EXPECT_TRUE(c->ListJobs(10)->empty());
  server.ExpectHealthyAcrossRestart();
}

}  // namespace
}  // namespace braid
