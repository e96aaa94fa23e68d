// `braid profile <model> --device cpu` and `braid profile comm --ranks N`:
// real measurements on this machine into the profile store.
#include <iostream>
#include <memory>

#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "client/planning.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "worker/collective_bench.h"
#include "worker/cpu_profiler.h"

namespace braid::client {
namespace {

struct OpsArgs {
  std::string model;
  std::string device = "cpu";
  int batch = 0;
  int ranks = 2;
  std::string db;
  int repetitions = 11;
};

struct CommArgs {
  int ranks = 2;
  std::string db;
  std::vector<int64_t> sizes = {4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  int repetitions = 10;
};

int RunProfileOps(const OpsArgs& a) {
  if (a.device != "cpu") {
    return ReportError(absl::InvalidArgumentError(absl::StrFormat(
        "--device %s: this build profiles on 'cpu' only (the CUDA profiler runs on GPU workers)",
        a.device)));
  }
  PlanningRequest req;
  req.model = a.model;
  req.cluster = "cpu-local";
  req.ranks = a.ranks;
  req.batch = a.batch;
  req.db = a.db.empty() ? DefaultDatabasePath() : a.db;
  if (req.db == "none") return ReportError(absl::InvalidArgumentError("--db none: nowhere to store profiles"));
  auto ctx = Prepare(req);
  if (!ctx.ok()) return ReportError(ctx.status());
  worker::ProfileOptions opts;
  opts.repetitions = a.repetitions;
  std::cerr << "braid: profiling " << (*ctx)->training.num_ops() << " training ops of "
            << (*ctx)->forward.name() << " on " << worker::CpuBackendInfo() << "\n";
  auto report = worker::ProfileGraph((*ctx)->training, *(*ctx)->store, opts);
  if (!report.ok()) return ReportError(report.status());
  std::cout << absl::StrFormat(
      "profiled %d distinct ops, %d already in the store, %d without a LibTorch mapping, %d failed, "
      "%d collectives (see `braid profile comm`)\nstore: %s\n",
      report->profiled, report->skipped, report->unsupported, report->failed, report->communication,
      req.db);
  for (const std::string& e : report->errors) std::cout << "  " << e << "\n";
  return 0;
}

int RunProfileComm(const CommArgs& a) {
  const std::string db = a.db.empty() ? DefaultDatabasePath() : a.db;
  auto store = costmodel::ProfileStore::Open(db);
  if (!store.ok()) return ReportError(store.status());
  auto spec = costmodel::LoadCluster("cpu-local");
  if (!spec.ok()) return ReportError(spec.status());
  auto ranked = costmodel::WithRanks(*spec, a.ranks);
  if (!ranked.ok()) return ReportError(ranked.status());
  worker::CollectiveBenchOptions o;
  o.ranks = a.ranks;
  o.sizes = a.sizes;
  o.repetitions = a.repetitions;
  o.device_kind = costmodel::CommProfileKey(*ranked);
  auto m = worker::RunCollectiveBench(o, store->get());
  if (!m.ok()) return ReportError(m.status());
  std::cout << absl::StrFormat("%-12s %6s %12s %12s %12s\n", "collective", "ranks", "bytes", "median us",
                               "IQR us");
  for (const auto& x : *m) {
    std::cout << absl::StrFormat("%-12s %6d %12d %12.1f %12.1f\n", x.sample.collective,
                                 x.sample.group_size, x.sample.bytes, x.sample.seconds * 1e6,
                                 x.spread_s * 1e6);
  }
  auto comm = costmodel::CommModelFromStore(*ranked, store->get());
  if (!comm.ok()) return ReportError(comm.status());
  auto fit = comm->Fitted(costmodel::Collective::kAllReduce, a.ranks);
  if (fit) {
    std::cout << absl::StrFormat("AllReduce fit over %d ranks: T = %.3g s/B * x + %.3g s (%.2f GB/s)\n",
                                 a.ranks, fit->seconds_per_byte, fit->overhead_s,
                                 1e-9 / fit->seconds_per_byte);
  }
  std::cout << "store: " << db << "\n";
  return 0;
}

}  // namespace

void RegisterProfileCommands(CLI::App& app, CommandResult& result) {
  CLI::App* profile = app.add_subcommand("profile", "Measure op and collective times on this machine");
  auto ops = std::make_shared<OpsArgs>();
  profile->add_option("model", ops->model, "model to profile (zoo:NAME, .onnx, text graph)");
  profile->add_option("--device", ops->device, "cpu");
  profile->add_option("--batch", ops->batch, "per-rank batch")->check(CLI::PositiveNumber);
  profile->add_option("--ranks", ops->ranks, "data-parallel ranks of the training graph")->check(CLI::PositiveNumber);
  profile->add_option("--db", ops->db, "profile store (SQLite file)");
  profile->add_option("--reps", ops->repetitions, "timed repetitions per op")->check(CLI::PositiveNumber);

  auto comm = std::make_shared<CommArgs>();
  CLI::App* c = profile->add_subcommand("comm", "Benchmark Gloo collectives across processes on loopback");
  c->add_option("--ranks", comm->ranks, "processes")->check(CLI::Range(2, 64));
  c->add_option("--db", comm->db, "profile store (SQLite file)");
  c->add_option("--sizes", comm->sizes, "message sizes in bytes");
  c->add_option("--reps", comm->repetitions, "timed repetitions per size")->check(CLI::PositiveNumber);
  c->callback([comm, &result] { result.exit_code = RunProfileComm(*comm); });

  profile->callback([profile, ops, &result] {
    if (!profile->get_subcommands().empty()) return;  // `profile comm` ran
    if (ops->model.empty()) {
      result.exit_code = ReportError(absl::InvalidArgumentError("braid profile: name a model or 'comm'"));
      return;
    }
    result.exit_code = RunProfileOps(*ops);
  });
}

}  // namespace braid::client
