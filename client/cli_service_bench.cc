// `braid bench service`: the strategy service over loopback TCP in this
// process -- a BraidServer on 127.0.0.1 with a temporary SQLite file, two
// profiling workers (worker/worker_agent.h) and a StrategyClient -- timing
//  - submit-to-plan of a model (search included: --budget-s bounds it),
//  - submit-to-plan of the same model again (a plan-cache hit),
//  - GetPlan of a finished job's plan, --calls times (p50/p99).
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "client/cli.h"
#include "proto/strategy_client.h"
#include "grpcpp/create_channel.h"
#include "server/server.h"
#include "worker/worker_agent.h"

namespace braid::client {
namespace {

namespace v1 = braid::v1;
using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string model = "resnet50";  // zoo name
  std::string cluster = "disco-a";
  double budget_s = 10;
  int calls = 2000;
  int workers = 2;
  uint64_t seed = 0;
};

double Pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

absl::StatusOr<double> SubmitToPlan(StrategyClient& c, const v1::SubmitGraphRequest& req,
                                    v1::GetPlanResponse* plan, v1::JobStatus* last) {
  const Clock::time_point t0 = Clock::now();
  ASSIGN_OR_RETURN(v1::SubmitGraphResponse sub, c.Submit(req));
  ASSIGN_OR_RETURN(v1::JobStatus done, c.Watch(sub.job_id(), [](const v1::JobStatus&) {}));
  if (done.phase() != v1::JOB_PHASE_DONE) {
    return absl::AbortedError(absl::StrCat("job ", sub.job_id(), " ended: ", done.error()));
  }
  ASSIGN_OR_RETURN(v1::GetPlanResponse p, c.GetPlan(sub.job_id()));
  *plan = std::move(p);
  *last = done;
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int RunServiceBench(const BenchArgs& a) {
  char tmpl[] = "/tmp/braid-bench-service-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return ReportError(absl::InternalError("mkdtemp failed"));
  const std::string dir = tmpl;
  server::ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.db_path = dir + "/service.db";
  o.client_token = "bench-client";
  o.worker_token = "bench-worker";
  absl::StatusOr<std::unique_ptr<server::BraidServer>> srv = server::StartServer(o);
  if (!srv.ok()) return ReportError(srv.status());
  const std::string addr = absl::StrCat("127.0.0.1:", (*srv)->port());
  std::vector<std::unique_ptr<worker::WorkerAgent>> agents;
  std::vector<std::thread> threads;
  for (int i = 0; i < a.workers; ++i) {
    worker::WorkerAgentOptions wo;
    wo.token = o.worker_token;
    wo.name = absl::StrCat("bench-worker-", i);
    wo.idle_poll_s = 0.1;
    agents.push_back(std::make_unique<worker::WorkerAgent>(
        grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()), wo));
    threads.emplace_back([w = agents.back().get()] { w->Run().IgnoreError(); });
  }
  auto stop = [&] {
    for (auto& w : agents) w->Stop();
    for (std::thread& t : threads) t.join();
    srv->reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  };
  ClientOptions co;
  co.address = addr;
  co.token = o.client_token;
  std::unique_ptr<StrategyClient> c = *StrategyClient::Create(co);
  v1::SubmitGraphRequest req;
  req.set_zoo_model(a.model);
  req.set_cluster_preset(a.cluster);
  req.mutable_options()->set_budget_s(a.budget_s);
  req.mutable_options()->set_seed(a.seed);
  v1::GetPlanResponse plan;
  v1::JobStatus first, second;
  absl::StatusOr<double> cold = SubmitToPlan(*c, req, &plan, &first);
  if (!cold.ok()) {
    stop();
    return ReportError(cold.status());
  }
  absl::StatusOr<double> warm = SubmitToPlan(*c, req, &plan, &second);
  if (!warm.ok()) {
    stop();
    return ReportError(warm.status());
  }
  std::vector<double> lat;
  lat.reserve(a.calls);
  for (int i = 0; i < a.calls; ++i) {
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<v1::GetPlanResponse> p = c->GetPlan(first.job_id());
    lat.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (!p.ok()) {
      stop();
      return ReportError(p.status());
    }
  }
  stop();
  double sum = 0;
  for (double x : lat) sum += x;
  std::cout << absl::StrFormat(
      "braid-server on %s (loopback TCP), %d profiling workers, model zoo:%s on %s, seed %d\n\n",
      addr, a.workers, a.model, a.cluster, static_cast<long long>(a.seed));
  std::cout << absl::StrFormat("%-40s %12s\n", "measurement", "value");
  std::cout << absl::StrFormat("%-40s %10.3f s   (search %.1f s, %d candidates, budget %.0f s)\n",
                               "submit-to-plan, search", *cold, first.elapsed_s(),
                               static_cast<long long>(first.candidates_evaluated()), a.budget_s);
  std::cout << absl::StrFormat("%-40s %10.3f ms  (from_cache=%s)\n",
                               "submit-to-plan, plan-cache hit", *warm * 1e3,
                               second.from_cache() ? "true" : "false");
  std::cout << absl::StrFormat("%-40s %10.1f us\n", absl::StrCat("GetPlan p50 (", a.calls, " calls)"),
                               Pct(lat, 0.5) * 1e6);
  std::cout << absl::StrFormat("%-40s %10.1f us\n", "GetPlan p99", Pct(lat, 0.99) * 1e6);
  std::cout << absl::StrFormat("%-40s %10.1f us\n", "GetPlan mean", sum / lat.size() * 1e6);
  std::cout << absl::StrFormat("%-40s %10d bytes\n", "GetPlan response", plan.ByteSizeLong());
  return 0;
}

}  // namespace

void RegisterServiceBench(CLI::App& bench, CommandResult& result) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c = bench.add_subcommand("service", kBenchServiceAbout);
  c->add_option("--model", a->model, "zoo model name")->capture_default_str();
  c->add_option("--cluster", a->cluster, "cluster preset")->capture_default_str();
  c->add_option("--budget-s", a->budget_s, "search budget")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--calls", a->calls, "GetPlan calls timed")->check(CLI::Range(1, 1000000))->capture_default_str();
  c->add_option("--workers", a->workers, "profiling workers")->check(CLI::Range(0, 64))->capture_default_str();
  c->add_option("--seed", a->seed, "search seed")->capture_default_str();
  c->callback([a, &result] { result.exit_code = RunServiceBench(*a); });
}

}  // namespace braid::client
