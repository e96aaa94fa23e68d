// `braid profile <model> --device cpu` and `braid profile comm --ranks N`:
// real measurements on this machine into the profile store.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>

#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "client/planning.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/profile_export.h"
#include "costmodel/simulator.h"
#include "search/lowering.h"
#include "search/plan.h"
#include "worker/collective_bench.h"
#include "worker/cpu_profiler.h"
#include "worker/device_profile.h"
#include "worker/graph_profiler.h"

namespace braid::client {
namespace {

struct OpsArgs {
  std::string model;
  std::string device = "cpu";
  int batch = 0;
  int ranks = 2;
  std::string db;
  int repetitions = 11;
  std::string method = "in-graph";
  int iterations = 8;
};

struct CommArgs {
  int ranks = 2;
  std::string device = "cpu";
  std::string cluster = "cpu-local";
  std::string db;
  std::vector<int64_t> sizes = {4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  int repetitions = 10;
  // cpu: time the collectives as braid run's parallel ranks wait for them
  // (bound to a core each, polling) and store the mean over the repetitions
  // (a step sums its collectives): the collectives the executed-plan
  // prediction of `braid plan --parallel` reads.
  bool as_parallel_ranks = false;
};

int RunProfileOps(const OpsArgs& a) {
  auto device = worker::ResolveDevice(a.device);
  if (!device.ok()) return ReportError(device.status());
  PlanningRequest req;
  req.model = a.model;
  req.cluster = "cpu-local";
  req.ranks = a.ranks;
  req.batch = a.batch;
  req.db = a.db.empty() ? DefaultDatabasePath() : a.db;
  if (req.db == "none") return ReportError(absl::InvalidArgumentError("--db none: nowhere to store profiles"));
  auto ctx = Prepare(req);
  if (!ctx.ok()) return ReportError(ctx.status());
  if (device->cuda) {  // each op alone with CUDA events (in-graph runs on CPU ranks)
    std::cerr << "braid: profiling " << (*ctx)->training.num_ops() << " training ops of "
              << (*ctx)->forward.name() << " on " << device->kind << "\n";
    worker::ProfileOptions opts;
    opts.repetitions = a.repetitions;
    auto report = worker::ProfileGraphOnDevice(*device, (*ctx)->training, *(*ctx)->store, opts);
    if (!report.ok()) return ReportError(report.status());
    std::cout << absl::StrFormat(
        "profiled %d distinct ops on %s, %d already in the store, %d without a CUDA mapping, "
        "%d failed, %d collectives (see `braid profile comm --device cuda`)\nstore: %s\n",
        report->profiled, device->kind, report->skipped, report->unsupported, report->failed,
        report->communication, req.db);
    for (const std::string& e : report->errors) std::cout << "  " << e << "\n";
    return 0;
  }
  std::cerr << "braid: profiling " << (*ctx)->training.num_ops() << " training ops of "
            << (*ctx)->forward.name() << " on " << worker::CpuBackendInfo() << "\n";
  if (a.method == "in-graph") {
    worker::GraphProfileOptions g;
    g.ranks = a.ranks;
    g.iterations = a.iterations;
    // The op order `braid run` and training use: the simulated schedule
    // (no fusion, collectives taking no time, as its compute-only row).
    auto sg = search::Lower((*ctx)->training, search::NoFusionPlan((*ctx)->training),
                            *(*ctx)->cost_model);
    if (!sg.ok()) return ReportError(sg.status());
    for (costmodel::SimTask& t : sg->tasks) {
      if (t.kind == costmodel::TaskKind::kComm) t.duration_s = 0;
    }
    g.order = ComputeOrder((*ctx)->training, *sg, costmodel::Simulate(*sg));
    auto r = worker::ProfileGraphInGraph((*ctx)->training, *(*ctx)->store, g);
    if (r.ok()) {
      std::cout << absl::StrFormat(
          "in-graph profile on %d ranks: %d ops timed over %d iterations, %d distinct ops stored "
          "(%d samples), %d collectives (see `braid profile comm`)\n"
          "compute-only iteration %.2f ms (%.2f ms without per-op clocks); sum of op medians %.2f ms, "
          "of op means %.2f ms; packing %.1f MB of gradients %.2f ms\nstore: %s\n",
          a.ranks, r->ops_timed, a.iterations, r->keys_stored, static_cast<int>(r->samples),
          r->communication, 1e3 * r->iteration_s, 1e3 * r->untimed_iteration_s, 1e3 * r->sum_of_medians_s, 1e3 * r->sum_of_means_s, 1e-6 * static_cast<double>(r->pack_bytes),
          1e3 * r->pack_s, req.db);
      return 0;
    }
    // An op without a LibTorch mapping stops the whole graph; time the ops one by one.
    std::cerr << "braid: in-graph profiling failed (" << r.status().message()
              << "); profiling each op alone instead\n";
  }
  worker::ProfileOptions opts;
  opts.repetitions = a.repetitions;
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
  auto device = worker::ResolveDevice(a.device);
  if (!device.ok()) return ReportError(device.status());
  if (device->cuda && a.cluster == "cpu-local") {
    return ReportError(absl::InvalidArgumentError(
        "--cluster: name the GPU cluster (preset or file) whose NCCL samples these are"));
  }
  const std::string db = a.db.empty() ? DefaultDatabasePath() : a.db;
  auto store = costmodel::ProfileStore::Open(db);
  if (!store.ok()) return ReportError(store.status());
  auto spec = costmodel::LoadCluster(device->cuda ? a.cluster : "cpu-local");
  if (!spec.ok()) return ReportError(spec.status());
  auto ranked = costmodel::WithRanks(*spec, a.ranks);
  if (!ranked.ok()) return ReportError(ranked.status());
  worker::CollectiveBenchOptions o;
  o.ranks = a.ranks;
  o.sizes = a.sizes;
  o.repetitions = a.repetitions;
  o.device_kind = costmodel::CommProfileKey(*ranked);
  if (a.as_parallel_ranks) {
    if (device->cuda) {
      return ReportError(absl::InvalidArgumentError("--as-parallel-ranks: for --device cpu"));
    }
    o.pin_cores = true;
    o.poll = true;
    o.store_mean = true;
    o.collectives = {costmodel::Collective::kAllReduce, costmodel::Collective::kAllGather,
                     costmodel::Collective::kBroadcast, costmodel::Collective::kReduceScatter};
  }
  if (device->cuda) {
    o.collectives = {costmodel::Collective::kAllReduce, costmodel::Collective::kAllGather,
                     costmodel::Collective::kReduceScatter, costmodel::Collective::kBroadcast};
  }
  auto m = worker::RunCommBenchOnDevice(*device, o, store->get());
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

struct ExportArgs {
  std::string db;
  std::string device_kind;
  std::string out;
  std::string source;
};

struct ImportArgs {
  std::string file;
  std::string db;
  bool replace = false;
};

// `braid profile export`: one device kind's profiles as a braid-profiles/1 file.
int RunProfileExport(const ExportArgs& a) {
  const std::string db = a.db.empty() ? DefaultDatabasePath() : a.db;
  auto store = costmodel::ProfileStore::Open(db);
  if (!store.ok()) return ReportError(store.status());
  absl::StatusOr<costmodel::ProfileExport> e = costmodel::CollectProfiles(**store, a.device_kind);
  if (!e.ok()) return ReportError(e.status());
  e->source = a.source;
  const std::string text = costmodel::ProfileExportText(*e);
  if (a.out == "-") {
    std::cout << text;
  } else if (absl::Status s = WriteFile(a.out, text); !s.ok()) {
    return ReportError(s);
  }
  std::cerr << absl::StrFormat("exported %d op and %d collective profiles of %s\n",
                               static_cast<int>(e->ops.size()), static_cast<int>(e->comm.size()),
                               a.device_kind);
  return 0;
}

// `braid profile import`: an export file's rows into the profile store.
int RunProfileImport(const ImportArgs& a) {
  absl::StatusOr<costmodel::ProfileExport> e = costmodel::ReadProfileExportFile(a.file);
  if (!e.ok()) return ReportError(e.status());
  const std::string db = a.db.empty() ? DefaultDatabasePath() : a.db;
  if (db == "none") return ReportError(absl::InvalidArgumentError("--db none: nowhere to import to"));
  auto store = costmodel::ProfileStore::Open(db);
  if (!store.ok()) return ReportError(store.status());
  absl::StatusOr<costmodel::ImportReport> r = costmodel::ImportProfiles(*e, **store, a.replace);
  if (!r.ok()) return ReportError(r.status());
  std::cout << absl::StrFormat(
      "%s: %d op profiles written, %d kept; %d collective profiles written, %d kept (%s)\n",
      e->device_kind, r->ops_written, r->ops_kept, r->comm_written, r->comm_kept,
      a.replace ? "replacing stored rows" : "stored rows win; --replace to overwrite");
  return 0;
}

struct FitArgs {
  int ranks = 2;
  int repetitions = 15;
  std::vector<int64_t> fit_sizes = {16 << 10, 128 << 10, 1 << 20, 8 << 20, 64 << 20};
  std::vector<int64_t> held_out = {48 << 10, 384 << 10, 3 << 20, 24 << 20};
};

// Fits T = C*x + D to Gloo AllReduce measurements at some message sizes and
// predicts sizes that were not used for the fit.
int RunCommFit(const FitArgs& a) {
  worker::CollectiveBenchOptions o;
  o.ranks = a.ranks;
  o.collectives = {costmodel::Collective::kAllReduce};
  o.repetitions = a.repetitions;
  o.sizes = a.fit_sizes;
  o.sizes.insert(o.sizes.end(), a.held_out.begin(), a.held_out.end());
  auto m = worker::RunCollectiveBench(o, /*store=*/nullptr);
  if (!m.ok()) return ReportError(m.status());
  std::vector<std::pair<double, double>> pts;
  for (const auto& x : *m) {
    if (std::find(a.fit_sizes.begin(), a.fit_sizes.end(), x.sample.bytes) != a.fit_sizes.end()) {
      pts.emplace_back(static_cast<double>(x.sample.bytes), x.sample.seconds);
    }
  }
  auto fit = costmodel::FitLinear(pts);
  if (!fit.ok()) return ReportError(fit.status());
  std::cout << absl::StrFormat("AllReduce, %d ranks: fit on %d sizes: C = %.4g s/B (%.2f GB/s), D = %.1f us\n",
                               a.ranks, static_cast<int>(pts.size()), fit->seconds_per_byte,
                               1e-9 / fit->seconds_per_byte, fit->overhead_s * 1e6);
  std::cout << absl::StrFormat("%12s %8s %14s %14s %9s\n", "bytes", "use", "measured us", "predicted us",
                               "error");
  double worst_held = 0;
  for (const auto& x : *m) {
    const bool held = std::find(a.held_out.begin(), a.held_out.end(), x.sample.bytes) != a.held_out.end();
    const double pred = fit->At(x.sample.bytes);
    const double err = std::abs(pred - x.sample.seconds) / x.sample.seconds;
    if (held) worst_held = std::max(worst_held, err);
    std::cout << absl::StrFormat("%12d %8s %14.1f %14.1f %8.1f%%\n", x.sample.bytes, held ? "held-out" : "fit",
                                 x.sample.seconds * 1e6, pred * 1e6, 100 * err);
  }
  std::cout << absl::StrFormat("worst held-out error: %.1f%%\n", 100 * worst_held);
  return 0;
}

}  // namespace

void RegisterProfileCommands(CLI::App& app, CommandResult& result) {
  CLI::App* profile = app.add_subcommand("profile", kProfileAbout);
  auto ops = std::make_shared<OpsArgs>();
  profile->add_option("model", ops->model, "model to profile (zoo:NAME, .onnx, text graph)");
  profile->add_option("--device", ops->device, "cpu, cuda, cuda:N or auto (GPU when present)");
  profile->add_option("--batch", ops->batch, "per-rank batch")->check(CLI::PositiveNumber);
  profile->add_option("--ranks", ops->ranks, "data-parallel ranks of the training graph")->check(CLI::PositiveNumber);
  profile->add_option("--db", ops->db, "profile store (SQLite file)");
  profile->add_option("--reps", ops->repetitions, "isolated: timed repetitions per op")->check(CLI::PositiveNumber);
  profile->add_option("--method", ops->method,
                      "in-graph: time each op inside real training iterations on --ranks processes "
                      "(what training sees); isolated: each op alone, repeated")
      ->check(CLI::IsMember({"in-graph", "isolated"}));
  profile->add_option("--iters", ops->iterations, "in-graph: timed iterations")->check(CLI::PositiveNumber);

  auto comm = std::make_shared<CommArgs>();
  CLI::App* c = profile->add_subcommand("comm", "Benchmark collectives across processes (Gloo on loopback, or NCCL between GPUs)");
  c->add_option("--ranks", comm->ranks, "processes")->check(CLI::Range(2, 64));
  c->add_option("--device", comm->device, "cpu (Gloo on loopback) or cuda (NCCL, one GPU per rank)");
  c->add_option("--cluster", comm->cluster, "with --device cuda: the cluster (preset or file) measured");
  c->add_option("--db", comm->db, "profile store (SQLite file)");
  c->add_option("--sizes", comm->sizes, "message sizes in bytes");
  c->add_option("--reps", comm->repetitions, "timed repetitions per size")->check(CLI::PositiveNumber);
  c->add_flag("--as-parallel-ranks", comm->as_parallel_ranks,
              "cpu: ranks bound to cores and polling, as `braid run`'s parallel plans run, the mean "
              "stored; AllReduce, AllGather, Broadcast, ReduceScatter (for `braid plan --parallel`)");
  c->callback([comm, &result] { result.exit_code = RunProfileComm(*comm); });

  auto fit = std::make_shared<FitArgs>();
  CLI::App* f = profile->add_subcommand("comm-fit", "Fit the AllReduce model and check it on held-out sizes");
  f->add_option("--ranks", fit->ranks, "processes")->check(CLI::Range(2, 64));
  f->add_option("--reps", fit->repetitions, "timed repetitions per size")->check(CLI::PositiveNumber);
  f->add_option("--fit-sizes", fit->fit_sizes, "sizes used for the fit (bytes)");
  f->add_option("--held-out", fit->held_out, "sizes only predicted (bytes)");
  f->callback([fit, &result] { result.exit_code = RunCommFit(*fit); });

  auto ex = std::make_shared<ExportArgs>();
  CLI::App* e = profile->add_subcommand(
      "export", "Write one device kind's measured profiles as a braid-profiles/1 JSON file");
  e->add_option("--db", ex->db, "profile store (SQLite file)");
  e->add_option("--device-kind", ex->device_kind, "e.g. \"cuda:NVIDIA H100 80GB HBM3\"")->required();
  e->add_option("--out", ex->out, "file to write (- for stdout)")->required();
  e->add_option("--source", ex->source, "where the measurements come from (machine, date, command)");
  e->callback([ex, &result] { result.exit_code = RunProfileExport(*ex); });

  auto im = std::make_shared<ImportArgs>();
  CLI::App* i = profile->add_subcommand("import", "Add a braid-profiles/1 file's profiles to the profile store");
  i->add_option("file", im->file, "export file")->required();
  i->add_option("--db", im->db, "profile store (SQLite file)");
  i->add_flag("--replace", im->replace, "overwrite profiles the store already holds");
  i->callback([im, &result] { result.exit_code = RunProfileImport(*im); });

  profile->callback([profile, ops, &result] {
    if (!profile->get_subcommands().empty()) return;  // `profile comm/export/import` ran
    if (ops->model.empty()) {
      result.exit_code = ReportError(absl::InvalidArgumentError("braid profile: name a model or 'comm'"));
      return;
    }
    result.exit_code = RunProfileOps(*ops);
  });
}

}  // namespace braid::client
