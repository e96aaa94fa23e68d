// End-to-end tests of the strategy service with real processes on loopback:
// braid-server on a free port with a temporary SQLite file, braid-worker
// processes, clients through the C++ StrategyClient, and the `braid` CLI.
//  - two models submitted at once get the plans the offline search finds;
//  - a worker killed (-9) while holding leases: its tasks complete elsewhere;
//  - the server killed (-9) mid-search and restarted on the same file: the
//    job resumes and completes, finished jobs and plans are kept;
//  - garbage bytes, oversized and unauthenticated requests are rejected and
//    the server keeps serving;
//  - `braid submit/status/jobs/plan get/plan explain` on the embedded service,
//    and `braid plan MODEL` (the offline planner) still works beside them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "proto/strategy_client.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "graph/model_source.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "search/backtracking.h"
#include "server/store.h"
#include "tests/e2e_util.h"

namespace braid {
namespace {

namespace v1 = braid::v1;
using ::testing::HasSubstr;

constexpr char kClientToken[] = "e2e-client";
constexpr char kWorkerToken[] = "e2e-worker";

using e2e::FreePort;
using e2e::Process;
using e2e::WaitFor;

std::string TempDir(const std::string& name) { return e2e::TempDir("service_" + name); }

std::unique_ptr<client::StrategyClient> Client(int port, const std::string& token = kClientToken) {
  client::ClientOptions o;
  o.address = absl::StrCat("127.0.0.1:", port);
  o.token = token;
  o.rpc_timeout_s = 5;
  return *client::StrategyClient::Create(o);
}

std::unique_ptr<Process> StartServer(const std::string& dir, int port,
                                     std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {BRAID_SERVER_BIN, "--listen", absl::StrCat("127.0.0.1:", port),
                                   "--db", dir + "/service.db", "--client-token", kClientToken,
                                   "--worker-token", kWorkerToken,
                                   "--max-concurrent-searches", "2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto p = std::make_unique<Process>(argv, dir + "/server.log");
  std::unique_ptr<client::StrategyClient> c = Client(port);
  CHECK(WaitFor([&] { return c->ListJobs(1).ok(); }, 10)) << "braid-server did not come up";
  return p;
}

std::unique_ptr<Process> StartWorker(const std::string& dir, int port, const std::string& name,
                                     std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {BRAID_WORKER_BIN, "--server", absl::StrCat("127.0.0.1:", port),
                                   "--token", kWorkerToken, "--name", name, "--lease-s", "2",
                                   "--idle-poll-s", "0.05", "--backoff-max-s", "0.5",
                                   "--cache-dir", dir + "/plans"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(argv, dir + "/" + name + ".log");
}

v1::SubmitGraphRequest Request(const std::string& model, const std::string& cluster,
                               uint64_t seed, double budget_s, int patience) {
  v1::SubmitGraphRequest req;
  if (model.rfind("zoo:", 0) == 0) {
    req.set_zoo_model(model.substr(4));
  } else {
    std::ifstream in(model, std::ios::binary);
    req.set_onnx(std::string(std::istreambuf_iterator<char>(in), {}));
  }
  req.set_cluster_preset(cluster);
  req.mutable_options()->set_seed(seed);
  req.mutable_options()->set_budget_s(budget_s);
  req.mutable_options()->set_patience(patience);
  req.set_name(model);
  return req;
}

// The offline search on the server's inputs: an empty profile store (the
// server's is a fresh file and no worker measures this cluster's device).
nlohmann::json OfflinePlan(const std::string& model, const std::string& cluster, uint64_t seed,
                           double budget_s, int patience, double* iteration_s) {
  graph::Graph fwd = *graph::LoadModel(model, {}, nullptr);
  costmodel::ClusterSpec c = *costmodel::LoadCluster(cluster);
  graph::TrainingOptions topts;
  topts.ranks = c.num_ranks;
  graph::Graph train = *graph::BuildTrainingGraph(fwd, topts);
  std::unique_ptr<costmodel::ProfileStore> store = *costmodel::ProfileStore::Open(":memory:");
  costmodel::ClusterCostModel cm(c, store.get(), nullptr,
                                 *costmodel::CommModelFromStore(c, store.get()));
  search::SearchConfig cfg;
  cfg.seed = seed;
  cfg.time_budget_s = budget_s;
  cfg.patience = patience;
  absl::StatusOr<search::SearchResult> r = search::RunFusionSearch(train, cm, cfg);
  CHECK(r.ok()) << r.status();
  EXPECT_NE(r->stats.stop_reason, "time budget") << model << ": raise the budget";
  *iteration_s = r->sim.iteration_s;
  return search::PlanToJson(train, r->plan);
}

absl::StatusOr<v1::GetPlanResponse> WaitForPlan(client::StrategyClient& c, const std::string& id) {
  absl::StatusOr<v1::JobStatus> done = c.Watch(id, [](const v1::JobStatus&) {});
  if (!done.ok()) return done.status();
  if (done->phase() != v1::JOB_PHASE_DONE) {
    return absl::AbortedError(absl::StrCat(id, " ended ", done->phase(), ": ", done->error()));
  }
  return c.GetPlan(id);
}

TEST(ServiceE2eTest, ConcurrentSubmitsGetTheOfflinePlans) {
  const std::string dir = TempDir("concurrent");
  const int port = FreePort();
  auto server = StartServer(dir, port);
  auto w1 = StartWorker(dir, port, "w1");
  auto w2 = StartWorker(dir, port, "w2");
  const std::vector<std::string> models = {"zoo:mlp", "tests/data/mlp_with_initializers.onnx"};
  std::vector<std::future<absl::StatusOr<v1::GetPlanResponse>>> plans;
  for (const std::string& m : models) {
    plans.push_back(std::async(std::launch::async, [&, m] () -> absl::StatusOr<v1::GetPlanResponse> {
      std::unique_ptr<client::StrategyClient> c = Client(port);
      absl::StatusOr<v1::SubmitGraphResponse> sub = c->Submit(Request(m, "disco-a", 7, 30, 40));
      if (!sub.ok()) return sub.status();
      return WaitForPlan(*c, sub->job_id());
    }));
  }
  for (size_t i = 0; i < models.size(); ++i) {
    absl::StatusOr<v1::GetPlanResponse> got = plans[i].get();
    ASSERT_TRUE(got.ok()) << models[i] << ": " << got.status();
    double offline_s = 0;
    nlohmann::json want = OfflinePlan(models[i], "disco-a", 7, 30, 40, &offline_s);
    EXPECT_EQ(nlohmann::json::parse(got->plan_json()), want) << models[i];
    EXPECT_DOUBLE_EQ(got->plan().predicted_iteration_s(), offline_s) << models[i];
    EXPECT_GE(got->baselines_size(), 1);
  }
}

TEST(ServiceE2eTest, KilledWorkersLeasesCompleteElsewhere) {
  const std::string dir = TempDir("worker_kill");
  const int port = FreePort();
  auto server = StartServer(dir, port);
  // Worker A leases every task and spends 30 s sampling the first one.
  auto a = StartWorker(dir, port, "slow", {"--slots", "64", "--repetitions", "1000000",
                                           "--max-seconds-per-op", "30"});
  std::unique_ptr<client::StrategyClient> c = Client(port);
  std::unique_ptr<server::Store> store = *server::Store::Open(dir + "/service.db");
  // A live worker (device kind: this machine's CPU, as the cpu-local preset's)
  // makes the cpu-local job create profiling tasks.
  ASSERT_TRUE(WaitFor([&] { return (*store->LiveDeviceKinds(0)).size() == 1; }, 10));
  absl::StatusOr<v1::SubmitGraphResponse> sub =
      c->Submit(Request("tests/data/mlp_with_initializers.onnx", "cpu-local", 1, 30, 20));
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_TRUE(WaitFor([&] { return *store->CountTasks(server::TaskState::kLeased) > 0; }, 10));
  const int leased = *store->CountTasks(server::TaskState::kLeased);
  const int queued = *store->CountTasks(server::TaskState::kQueued);
  a->Kill(SIGKILL);
  EXPECT_EQ(*store->CountTasks(server::TaskState::kDone), 0);
  auto b = StartWorker(dir, port, "fast", {"--slots", "4", "--repetitions", "3",
                                           "--max-seconds-per-op", "0.05"});
  ASSERT_TRUE(WaitFor([&] {
    return *store->CountTasks(server::TaskState::kLeased) == 0 &&
           *store->CountTasks(server::TaskState::kQueued) == 0;
  }, 20)) << "leased " << *store->CountTasks(server::TaskState::kLeased);
  const int done = *store->CountTasks(server::TaskState::kDone);
  const int failed = *store->CountTasks(server::TaskState::kFailed);
  // Every task seen at the kill ends done or failed; the job may still have
  // been creating tasks when they were counted, so more may have joined.
  EXPECT_GE(done + failed, leased + queued);
  EXPECT_GE(done, leased);  // the MLP's MatMul/Add/Relu family all run on CPU
  EXPECT_EQ(failed, 0);
  EXPECT_TRUE(WaitForPlan(*c, sub->job_id()).ok());
}

TEST(ServiceE2eTest, ServerKilledMidSearchResumesOnRestart) {
  const std::string dir = TempDir("server_kill");
  const int port = FreePort();
  auto server = StartServer(dir, port);
  std::unique_ptr<client::StrategyClient> c = Client(port);
  absl::StatusOr<v1::SubmitGraphResponse> first =
      c->Submit(Request("tests/data/mlp_with_initializers.onnx", "disco-a", 2, 30, 20));
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<v1::GetPlanResponse> first_plan = WaitForPlan(*c, first->job_id());
  ASSERT_TRUE(first_plan.ok()) << first_plan.status();
  // A search that runs its whole 3 s budget (patience never runs out).
  absl::StatusOr<v1::SubmitGraphResponse> sub = c->Submit(Request("zoo:mlp", "disco-a", 5, 3, 1000000));
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<v1::JobStatus> s = c->GetJob(sub->job_id());
    return s.ok() && s->phase() == v1::JOB_PHASE_SEARCHING && s->candidates_evaluated() > 0;
  }, 10));
  server->Kill(SIGKILL);
  server = StartServer(dir, port);
  c = Client(port);
  absl::StatusOr<v1::GetPlanResponse> plan = WaitForPlan(*c, sub->job_id());
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<v1::JobStatus> job = c->GetJob(sub->job_id());
  EXPECT_EQ(job->resumed(), 1);
  EXPECT_GT(plan->plan().predicted_iteration_s(), 0);
  // The job finished before the crash is still there with the same plan.
  absl::StatusOr<v1::GetPlanResponse> again = c->GetPlan(first->job_id());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->plan_json(), first_plan->plan_json());
  EXPECT_EQ((*c->ListJobs(10)).size(), 2u);
}

TEST(ServiceE2eTest, BadRequestsAreRejectedAndTheServerStaysUp) {
  const std::string dir = TempDir("bad");
  const int port = FreePort();
  auto server = StartServer(dir, port, {"--max-message-bytes", "1048576"});
  // Garbage bytes on the gRPC port.
  for (int i = 0; i < 3; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    std::string junk(4096, '\0');
    for (size_t k = 0; k < junk.size(); ++k) junk[k] = static_cast<char>((k * 131 + i * 7) & 0xff);
    EXPECT_GT(send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), 0);
    close(fd);
  }
  // Unauthenticated: no such token, and the worker token on the Strategy API.
  for (const char* token : {"wrong", kWorkerToken}) {
    absl::StatusOr<std::vector<v1::JobStatus>> r = Client(port, token)->ListJobs(1);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << token;
  }
  std::unique_ptr<client::StrategyClient> c = Client(port);
  // Oversized: 2 MiB of graph text against a 1 MiB limit.
  v1::SubmitGraphRequest big;
  big.set_graph_text(std::string(2 << 20, 'x'));
  big.set_cluster_preset("disco-a");
  EXPECT_EQ(c->Submit(big).status().code(), absl::StatusCode::kResourceExhausted);
  // Malformed but small: InvalidArgument naming the field.
  v1::SubmitGraphRequest bad = Request("zoo:mlp", "disco-a", 0, 1, 1);
  bad.set_cluster_preset("no-such-cluster");
  absl::StatusOr<v1::SubmitGraphResponse> r = c->Submit(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("cluster_preset"));
  // Still serving.
  absl::StatusOr<std::vector<v1::JobStatus>> jobs = c->ListJobs(10);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->empty());
}

// ---- the CLI on the embedded service ---------------------------------------------

struct CliRun {
  int exit_code;
  std::string out;
};

CliRun Braid(const std::string& env, const std::string& args) {
  e2e::CommandResult c = e2e::RunCommand(env + " " + BRAID_BIN + " " + args + " 2>&1");
  return CliRun{c.exit_code, std::move(c.out)};
}

TEST(ServiceE2eTest, CliSubmitsAndExplainsOnTheEmbeddedService) {
  const std::string dir = TempDir("cli");
  const std::string env = absl::StrCat("BRAID_SERVER= BRAID_DB=", dir, "/profiles.db BRAID_SERVICE_DB=",
                                       dir, "/service.db");
  CliRun sub = Braid(env, "submit tests/data/mlp_with_initializers.onnx --cluster disco-a --seed 3 "
                       "--patience 20 --budget-s 30");
  ASSERT_EQ(sub.exit_code, 0) << sub.out;
  EXPECT_THAT(sub.out, HasSubstr("speed-up vs best"));
  EXPECT_THAT(sub.out, HasSubstr("no_fusion"));
  // disco-a's GTX 1080 Ti was never measured: the prediction is priors, and
  // the plan summary says so, as `braid plan` does.
  EXPECT_THAT(sub.out, HasSubstr("; simulated, from priors"));
  EXPECT_THAT(sub.out, HasSubstr("cost sources         measured 0.0%"));
  CliRun jobs = Braid(env, "jobs --json");
  ASSERT_EQ(jobs.exit_code, 0) << jobs.out;
  nlohmann::json j = nlohmann::json::parse(jobs.out);
  ASSERT_EQ(j["jobs"].size(), 1u);
  const std::string id = j["jobs"][0]["job_id"];
  EXPECT_EQ(j["jobs"][0]["phase"], "JOB_PHASE_DONE");

  CliRun status = Braid(env, "status " + id);
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_THAT(status.out, HasSubstr("phase       done"));

  const std::string trace = dir + "/trace.json";
  CliRun get = Braid(env, "plan get " + id + " --trace " + trace);
  ASSERT_EQ(get.exit_code, 0) << get.out;
  EXPECT_THAT(get.out, HasSubstr("\"plan_json\""));
  std::ifstream tin(trace);
  nlohmann::json t = nlohmann::json::parse(tin, nullptr, false);
  ASSERT_FALSE(t.is_discarded());
  EXPECT_TRUE(t.contains("traceEvents"));

  CliRun explain = Braid(env, "plan explain " + id + " --json");
  ASSERT_EQ(explain.exit_code, 0) << explain.out;
  nlohmann::json e = nlohmann::json::parse(explain.out);
  double prev = 1e300;
  for (const nlohmann::json& d : e["decisions"]) {  // largest gain first
    EXPECT_LE(d["gain_ms"].get<double>(), prev);
    prev = d["gain_ms"].get<double>();
  }

  // Resubmitting is a plan-cache hit.
  CliRun again = Braid(env, "submit tests/data/mlp_with_initializers.onnx --cluster disco-a --seed 3 "
                         "--patience 20 --budget-s 30");
  EXPECT_THAT(again.out, HasSubstr("plan from the plan cache"));

  // The offline planner keeps its form; without a model it is still an error.
  CliRun offline = Braid(env, "plan tests/data/mlp_with_initializers.onnx --cluster disco-a "
                           "--patience 20 --json");
  ASSERT_EQ(offline.exit_code, 0) << offline.out;
  EXPECT_TRUE(nlohmann::json::parse(offline.out).contains("plan"));
  CliRun none = Braid(env, "plan");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.out, HasSubstr("model"));
  CliRun missing = Braid(env, "plan get job-0000000000000000");
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
}

}  // namespace
}  // namespace braid
