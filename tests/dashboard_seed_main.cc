// dashboard_seed: puts one finished zoo:mlp job (cpu-local, 2 ranks, small
// budget) into a braid-server database, for the dashboard end-to-end test
// (tests/dashboard_e2e_test.sh), which then serves that database with a real
// braid-server process. Prints the job id. Run N times, it leaves N finished
// jobs (the later ones served from the plan cache): the database of the HTTP
// throughput figures in BENCHMARKS.md.
//
//   dashboard_seed /tmp/x/braid.db   ->   job-0123456789abcdef
#include <chrono>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "base/command_line.h"
#include "braid/v1/strategy.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "server/server.h"

int main(int argc, char** argv) {
  braid::server::ServerOptions o;
  CLI::App app{"dashboard_seed: one finished zoo:mlp job in a braid-server database"};
  app.add_option("db", o.db_path, "the braid-server database (created when missing)")->required();
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  o.listen = "";  // in-process only
  o.client_token = "seed-client";
  o.worker_token = "seed-worker";
  auto server = braid::server::StartServer(o);
  if (!server.ok()) {
    std::cerr << "dashboard_seed: " << server.status() << "\n";
    return 1;
  }
  auto stub = braid::v1::Strategy::NewStub((*server)->InProcessChannel());
  braid::v1::SubmitGraphRequest req;
  req.set_zoo_model("mlp");
  req.set_cluster_preset("cpu-local");
  req.set_name("dashboard e2e mlp");
  req.mutable_options()->set_ranks(2);
  req.mutable_options()->set_seed(11);
  req.mutable_options()->set_budget_s(20);
  req.mutable_options()->set_patience(4);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer seed-client");
  braid::v1::SubmitGraphResponse resp;
  grpc::Status st = stub->SubmitGraph(&ctx, req, &resp);
  if (!st.ok()) {
    std::cerr << "dashboard_seed: SubmitGraph: " << st.error_message() << "\n";
    return 1;
  }
  for (int i = 0; i < 6000; ++i) {
    absl::StatusOr<braid::server::JobRecord> r = (*server)->jobs().Get(resp.job_id());
    if (r.ok() && braid::server::IsFinal(r->phase)) {
      if (r->phase != braid::server::JobPhase::kDone) {
        std::cerr << "dashboard_seed: job ended " << braid::server::JobPhaseName(r->phase) << ": "
                  << r->error << "\n";
        return 1;
      }
      std::cout << resp.job_id() << "\n";
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::cerr << "dashboard_seed: job " << resp.job_id() << " not done after 60 s\n";
  return 1;
}
