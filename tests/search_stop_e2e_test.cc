// End-to-end tests of stopping searches against a real
// braid-server process on loopback with one search slot:
//  - cancelling a search of the largest model the service accepts frees the
//    slot within 2 s: a queued job starts;
//  - SIGTERM mid-search drains and exits 0 within the stated 10 s, and the
//    job resumes on restart (and drains again);
//  - options outside their documented ranges (server/strategy_api.h) and
//    models over the size limit are INVALID_ARGUMENT.
// The model is the probe's: a Relu chain (as ONNX), whose XLA fusion baseline
// alone used to run for minutes ignoring cancel, budget and SIGTERM.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/strategy_client.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/strategy_api.h"
#include "tests/e2e_util.h"
#include "tests/onnx_model_maker.h"

namespace braid {
namespace {

namespace v1 = braid::v1;
using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

constexpr char kClientToken[] = "stop-client";
constexpr char kWorkerToken[] = "stop-worker";
// server_main.cc: SIGTERM exits within this many seconds.
constexpr double kStatedShutdownS = 10;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string Tail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  return s.size() > 3000 ? s.substr(s.size() - 3000) : s;
}

// A MatMul with a weight, then Relus: `forward_ops` ONNX nodes, each one
// forward op.
std::string ReluChainOnnx(int forward_ops) {
  testing_onnx::ModelMaker m;
  m.Input("x", {8, 32});
  m.FloatInit("w", {32, 32});
  m.Node("MatMul", "mm", {"x", "w"}, {"r0"});
  for (int i = 1; i < forward_ops; ++i) {
    m.Node("Relu", absl::StrCat("relu", i), {absl::StrCat("r", i - 1)}, {absl::StrCat("r", i)});
  }
  m.Output(absl::StrCat("r", forward_ops - 1));
  return m.Bytes();
}

// The largest model the service accepts.
const std::string& LargestChain() {
  static const std::string* onnx = new std::string(ReluChainOnnx(server::kMaxForwardOps));
  return *onnx;
}

std::unique_ptr<client::StrategyClient> Client(int port) {
  client::ClientOptions o;
  o.address = absl::StrCat("127.0.0.1:", port);
  o.token = kClientToken;
  o.rpc_timeout_s = 30;  // submitting the largest model imports 50k nodes
  return *client::StrategyClient::Create(o);
}

// braid-server with a single search slot, so a running search blocks the queue.
std::unique_ptr<e2e::Process> StartServer(const std::string& dir, int port) {
  auto p = std::make_unique<e2e::Process>(
      std::vector<std::string>{BRAID_SERVER_BIN, "--listen", absl::StrCat("127.0.0.1:", port),
                               "--db", dir + "/service.db", "--client-token", kClientToken,
                               "--worker-token", kWorkerToken, "--max-concurrent-searches", "1"},
      dir + "/server.log");
  std::unique_ptr<client::StrategyClient> c = Client(port);
  CHECK(e2e::WaitFor([&] { return c->ListJobs(1).ok(); }, 10))
      << "braid-server did not come up: " << Tail(dir + "/server.log");
  return p;
}

// A search that would run for its whole 600 s budget.
v1::SubmitGraphRequest LongChainRequest() {
  v1::SubmitGraphRequest req;
  req.set_onnx(LargestChain());
  req.set_cluster_preset("disco-a");
  req.mutable_options()->set_budget_s(600);
  req.mutable_options()->set_patience(server::kMaxPatience);
  req.mutable_options()->set_seed(1);
  req.set_name("relu_chain");
  return req;
}

v1::SubmitGraphRequest SmallRequest() {
  v1::SubmitGraphRequest req;
  req.set_zoo_model("mlp");
  req.set_cluster_preset("disco-a");
  req.mutable_options()->set_budget_s(30);
  req.mutable_options()->set_patience(5);
  req.set_name("mlp");
  return req;
}

v1::JobPhase Phase(client::StrategyClient& c, const std::string& id) {
  absl::StatusOr<v1::JobStatus> s = c.GetJob(id);
  return s.ok() ? s->phase() : v1::JOB_PHASE_UNSPECIFIED;
}

// Submits the long search and waits until it has searched for a moment (it
// is then costing plans or in the XLA baseline, which used to ignore cancel).
// Returns the job id, empty on failure.
std::string StartLongSearch(client::StrategyClient& c, const std::string& log) {
  absl::StatusOr<v1::SubmitGraphResponse> sub = c.Submit(LongChainRequest());
  if (!sub.ok()) {
    ADD_FAILURE() << sub.status();
    return "";
  }
  if (!e2e::WaitFor([&] { return Phase(c, sub->job_id()) == v1::JOB_PHASE_SEARCHING; }, 30)) {
    ADD_FAILURE() << "the job never started searching: " << Tail(log);
    return "";
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_EQ(Phase(c, sub->job_id()), v1::JOB_PHASE_SEARCHING);
  return sub->job_id();
}

TEST(SearchStopE2eTest, CancelFreesTheSearchSlotWithinTwoSeconds) {
  const std::string dir = e2e::TempDir("stop_cancel");
  const int port = e2e::FreePort();
  auto server = StartServer(dir, port);
  std::unique_ptr<client::StrategyClient> c = Client(port);
  const std::string big = StartLongSearch(*c, dir + "/server.log");
  ASSERT_FALSE(big.empty());
  absl::StatusOr<v1::SubmitGraphResponse> small = c->Submit(SmallRequest());
  ASSERT_TRUE(small.ok()) << small.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(Phase(*c, small->job_id()), v1::JOB_PHASE_QUEUED) << "the slot should be taken";

  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<v1::JobStatus> cancelled = c->Cancel(big);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->phase(), v1::JOB_PHASE_CANCELLED);
  ASSERT_TRUE(e2e::WaitFor([&] { return Phase(*c, small->job_id()) != v1::JOB_PHASE_QUEUED; }, 10))
      << Tail(dir + "/server.log");
  const double slot_free_s = SecondsSince(t0);
  EXPECT_LT(slot_free_s, 2.0) << Tail(dir + "/server.log");
  LOG(INFO) << "cancel -> queued job started: " << slot_free_s * 1e3 << " ms";
  RecordProperty("slot_free_ms", static_cast<int>(slot_free_s * 1e3));

  absl::StatusOr<v1::JobStatus> done = c->Watch(small->job_id(), nullptr);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->phase(), v1::JOB_PHASE_DONE) << done->error();
  EXPECT_EQ(Phase(*c, big), v1::JOB_PHASE_CANCELLED);
}

TEST(SearchStopE2eTest, SigtermDrainsAndExitsWithinTheStatedTime) {
  const std::string dir = e2e::TempDir("stop_sigterm");
  const int port = e2e::FreePort();
  auto server = StartServer(dir, port);
  std::unique_ptr<client::StrategyClient> c = Client(port);
  const std::string big = StartLongSearch(*c, dir + "/server.log");
  ASSERT_FALSE(big.empty());

  const Clock::time_point t0 = Clock::now();
  ASSERT_EQ(kill(server->pid(), SIGTERM), 0);
  ASSERT_TRUE(e2e::WaitFor([&] { return !server->Alive(); }, kStatedShutdownS + 5))
      << Tail(dir + "/server.log");
  const double exit_s = SecondsSince(t0);
  EXPECT_LT(exit_s, kStatedShutdownS);
  ASSERT_TRUE(WIFEXITED(server->exit_status())) << Tail(dir + "/server.log");
  EXPECT_EQ(WEXITSTATUS(server->exit_status()), 0) << Tail(dir + "/server.log");
  EXPECT_THAT(Tail(dir + "/server.log"), HasSubstr("shutdown complete"));
  LOG(INFO) << "SIGTERM mid-search -> exit 0: " << exit_s * 1e3 << " ms";
  RecordProperty("sigterm_exit_ms", static_cast<int>(exit_s * 1e3));

  // The interrupted job resumes on restart (re-imported from the stored
  // graph), and SIGTERM drains the resumed search as well.
  server = StartServer(dir, port);
  c = Client(port);
  absl::StatusOr<v1::JobStatus> resumed = c->GetJob(big);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->resumed(), 1);
  ASSERT_TRUE(e2e::WaitFor([&] { return Phase(*c, big) == v1::JOB_PHASE_SEARCHING; }, 30))
      << Tail(dir + "/server.log");
  const Clock::time_point t1 = Clock::now();
  ASSERT_EQ(kill(server->pid(), SIGTERM), 0);
  ASSERT_TRUE(e2e::WaitFor([&] { return !server->Alive(); }, kStatedShutdownS + 5));
  EXPECT_LT(SecondsSince(t1), kStatedShutdownS);
  EXPECT_TRUE(WIFEXITED(server->exit_status()) && WEXITSTATUS(server->exit_status()) == 0)
      << Tail(dir + "/server.log");
}

TEST(SearchStopE2eTest, OutOfRangeOptionsAndOversizedModelsAreRefused) {
  const std::string dir = e2e::TempDir("stop_limits");
  const int port = e2e::FreePort();
  auto server = StartServer(dir, port);
  std::unique_ptr<client::StrategyClient> c = Client(port);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::function<void(v1::SearchOptions&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::SearchOptions& o) { o.set_beta(2147483647); }, "options.beta"},  // the probe's
      {[](v1::SearchOptions& o) { o.set_beta(server::kMaxBeta + 1); }, "options.beta"},
      {[](v1::SearchOptions& o) { o.set_beta(0); }, "options.beta"},
      {[](v1::SearchOptions& o) { o.set_alpha(server::kMaxAlpha + 0.5); }, "options.alpha"},
      {[&](v1::SearchOptions& o) { o.set_alpha(inf); }, "options.alpha"},
      {[&](v1::SearchOptions& o) { o.set_alpha(nan); }, "options.alpha"},
      {[](v1::SearchOptions& o) { o.set_alpha(0.99); }, "options.alpha"},
      {[](v1::SearchOptions& o) { o.set_patience(server::kMaxPatience + 1); }, "options.patience"},
      {[](v1::SearchOptions& o) { o.set_patience(0); }, "options.patience"},
      {[](v1::SearchOptions& o) { o.set_budget_s(server::kMaxBudgetS + 1); }, "options.budget_s"},
      {[](v1::SearchOptions& o) { o.set_budget_s(0); }, "options.budget_s"},
      {[&](v1::SearchOptions& o) { o.set_budget_s(nan); }, "options.budget_s"},
  };
  for (const Case& k : cases) {
    v1::SubmitGraphRequest req = SmallRequest();
    k.edit(*req.mutable_options());
    absl::StatusOr<v1::SubmitGraphResponse> r = c->Submit(req);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << k.field;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(k.field));
  }
  // One op over the limit.
  v1::SubmitGraphRequest big = LongChainRequest();
  big.set_onnx(ReluChainOnnx(server::kMaxForwardOps + 1));
  absl::StatusOr<v1::SubmitGraphResponse> r = c->Submit(big);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr(absl::StrCat("more than the limit of ", server::kMaxForwardOps)));

  // The limits themselves are accepted, and the server keeps serving.
  v1::SubmitGraphRequest edge = SmallRequest();
  edge.mutable_options()->set_alpha(server::kMaxAlpha);
  edge.mutable_options()->set_beta(server::kMaxBeta);
  edge.mutable_options()->set_budget_s(3);
  absl::StatusOr<v1::SubmitGraphResponse> ok = c->Submit(edge);
  ASSERT_TRUE(ok.ok()) << ok.status();
  absl::StatusOr<v1::JobStatus> done = c->Watch(ok->job_id(), nullptr);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->phase(), v1::JOB_PHASE_DONE) << done->error();
  EXPECT_TRUE((*c->ListJobs(10)).size() == 1u);
}

}  // namespace
}  // namespace braid
