// `braid gnn sample`: the fused-op estimator's training set (DisCo §5.2). Random
// fused groups are drawn from each model's training graph (costmodel/
// fused_sampler.h), kept where the cluster's fusion backend runs them as one
// kernel, recorded in the profile store's gnn_samples table, and enqueued as
// profiling tasks -- the fused kernel and its member ops -- on a braid server
// started in this process; a CPU worker leases them, runs each fused kernel
// with braid's CPU fused executor and times it. Drawing is deterministic for a
// seed and tasks skip what the store already holds, so a stopped run resumes.
// Afterwards a few fused kernels are timed again in separate runs: the noise
// floor every estimator error is reported next to ("noise_floor" meta).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "client/cli.h"
#include "client/progress_line.h"
#include "client/planning.h"
#include "costmodel/fused_sampler.h"
#include "costmodel/gnn_store.h"
#include "graph/text_format.h"
#include "nlohmann/json.hpp"
#include "server/server.h"
#include "server/task_queue.h"
#include "worker/cpu_profiler.h"
#include "worker/timing.h"
#include "worker/worker_agent.h"

namespace braid::client {
namespace {

constexpr char kClientToken[] = "gnn-sample-client";
constexpr char kWorkerToken[] = "gnn-sample-worker";

// DisCo's six training models (§5.2), at the zoo's sample sizes.
const std::vector<std::string>& DefaultModels() {
  static const auto* m = new std::vector<std::string>{
      "zoo:vgg19@sample",       "zoo:resnet50@sample", "zoo:transformer@sample",
      "zoo:rnnlm@sample",       "zoo:bert_large@sample", "zoo:reformer@sample"};
  return *m;
}

struct SampleArgs {
  std::vector<std::string> models;
  int per_model = 400;
  // Each model is drawn from at these per-rank batch sizes (0: its default):
  // the same layers at several shapes, so the estimator learns how time
  // scales with shape.
  std::vector<int> batches = {0};
  // ... and, for zoo models at the sample size, at these widths (percent of
  // the sample's; graph/zoo.h): the same layers with other K and N.
  std::vector<int> widths = {100};
  int max_ops = 10;
  uint64_t seed = 1;
  std::string cluster = "cpu-local";
  std::string db;
  double budget_min = 0;  // 0: until every task ran
  int noise_kernels = 40;
  int noise_runs = 5;
  int repetitions = 11;
};

// FNV-1a: the same in every process, so a rerun draws the same groups
// (absl::Hash is seeded per process).
uint64_t StableHash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string FormatDuration(double s) {
  if (s < 120) return absl::StrFormat("%.0f s", s);
  return absl::StrFormat("%.1f min", s / 60);
}

// Times `kernels` measured samples `runs` more times, each run building the
// fused kernel afresh, round-robin so that the runs of one kernel are spread
// over the whole measurement. Error of a run = |t - stored| / stored, the
// stored time being the training label.
absl::StatusOr<nlohmann::json> MeasureNoiseFloor(const std::vector<costmodel::GnnExample>& examples,
                                                 int kernels, int runs, int repetitions) {
  nlohmann::json out;
  if (examples.empty() || kernels <= 0 || runs <= 0) return out;
  std::vector<size_t> pick;
  const size_t step = std::max<size_t>(1, examples.size() / static_cast<size_t>(kernels));
  for (size_t i = 0; i < examples.size() && static_cast<int>(pick.size()) < kernels; i += step) {
    pick.push_back(i);
  }
  worker::ProfileOptions po;
  po.repetitions = repetitions;
  worker::CpuProfiler profiler(po);
  std::vector<double> errors, spreads;
  ProgressLine progress(stderr);
  for (int r = 0; r < runs; ++r) {
    for (size_t i : pick) {
      const costmodel::GnnExample& e = examples[i];
      std::vector<graph::OpId> all(e.graph.num_ops());
      for (int k = 0; k < e.graph.num_ops(); ++k) all[k] = k;
      absl::StatusOr<worker::OpProfile> p = profiler.ProfileFused(e.graph, all);
      if (!p.ok()) return p.status();
      errors.push_back(std::abs(p->sample.median_s - e.fused.median_s) / e.fused.median_s);
    }
    const std::string line =
        absl::StrFormat("braid: noise floor: run %d/%d of %zu fused kernels", r + 1, runs, pick.size());
    if (r + 1 == runs) {
      progress.Finish(line);
    } else {
      progress.Update(line);
    }
  }
  std::sort(errors.begin(), errors.end());
  auto within = [&](double x) {
    return static_cast<double>(std::upper_bound(errors.begin(), errors.end(), x) - errors.begin()) /
           errors.size();
  };
  out["kernels"] = pick.size();
  out["runs"] = runs;
  out["what"] =
      "|t_run - t_stored| / t_stored over separate re-timings of stored fused kernels "
      "(fresh kernel per run, runs interleaved)";
  out["p50_error"] = worker::Quantile(errors, 0.5);
  out["p90_error"] = worker::Quantile(errors, 0.9);
  out["within_10pct"] = within(0.10);
  out["within_14pct"] = within(0.14);
  return out;
}

int RunSample(const SampleArgs& a) {
  const std::vector<std::string>& models = a.models.empty() ? DefaultModels() : a.models;
  const std::string db = a.db.empty() ? DefaultDatabasePath() : a.db;
  if (db == "none") return ReportError(absl::InvalidArgumentError("--db none: nowhere to store samples"));
  if (a.per_model < 1 || a.per_model > 100000) {
    return ReportError(absl::InvalidArgumentError(
        absl::StrCat("--per-model must be in [1, 100000], got ", a.per_model)));
  }
  if (a.max_ops < 2 || a.max_ops > 64) {
    return ReportError(absl::InvalidArgumentError(
        absl::StrCat("--max-ops must be in [2, 64], got ", a.max_ops)));
  }

  // The server and its worker, in this process.
  server::ServerOptions so;
  so.listen = "";
  so.db_path = db + ".gnn-tasks";
  so.profile_db_path = db;
  so.client_token = kClientToken;
  so.worker_token = kWorkerToken;
  so.shutdown_grace_s = 0.2;
  absl::StatusOr<std::unique_ptr<server::BraidServer>> srv = server::StartServer(so);
  if (!srv.ok()) return ReportError(srv.status());
  worker::WorkerAgentOptions wo;
  wo.token = kWorkerToken;
  wo.name = "gnn sampler (embedded)";
  wo.device = "cpu";
  wo.max_tasks = 16;
  wo.idle_poll_s = 0.05;
  wo.profile.repetitions = a.repetitions;
  wo.profile.max_seconds_per_op = 0.5;
  worker::WorkerAgent agent((*srv)->InProcessChannel(), wo);
  std::thread worker_thread([&agent] { agent.Run().IgnoreError(); });
  struct StopWorker {
    worker::WorkerAgent& agent;
    std::thread& t;
    ~StopWorker() {
      agent.Stop();
      t.join();
    }
  } stop_worker{agent, worker_thread};
  server::TaskQueue& queue = (*srv)->tasks();

  // Every model at every width (zoo sample sizes only) and batch size: draw
  // its groups, record them, and enqueue the fused kernels and their member
  // ops (CreateTasksForMisses: each distinct op of the training graph once,
  // skipping what is stored). The worker starts measuring meanwhile.
  struct Shape {
    std::string model;
    int width;
    int batch;
  };
  std::vector<Shape> shapes;
  for (const std::string& model : models) {
    const bool scalable = absl::StartsWith(model, "zoo:") && absl::StrContains(model, "@sample");
    for (int width : scalable ? a.widths : std::vector<int>{100}) {
      for (int batch : a.batches) shapes.push_back({model, width, batch});
    }
  }
  std::string device_kind;
  std::unique_ptr<costmodel::GnnStore> samples;
  const auto start = std::chrono::steady_clock::now();
  int created = 0;
  for (const Shape& sh : shapes) {
    std::cerr << "braid: drawing fused ops from " << sh.model
              << (sh.batch > 0 ? absl::StrCat(" at batch ", sh.batch) : std::string())
              << (sh.width != 100 ? absl::StrCat(", width ", sh.width, "%") : std::string())
              << "\n";
    PlanningRequest req;
    req.model = sh.width != 100 ? absl::StrCat(sh.model, "@w", sh.width) : sh.model;
    req.cluster = a.cluster;
    req.ranks = 1;
    req.batch = sh.batch;
    req.db = db;
    req.estimator = "none";
    absl::StatusOr<std::unique_ptr<PlanningContext>> ctx = Prepare(req);
    if (!ctx.ok() && sh.width != 100 && absl::IsInvalidArgument(ctx.status())) {
      // Not every model comes at every width (vision: whole channel divisions).
      std::cerr << "braid:   skipped: " << ctx.status().message() << "\n";
      continue;
    }
    if (!ctx.ok()) return ReportError(ctx.status());
    const costmodel::ClusterSpec& cluster = (*ctx)->cluster;
    if (cluster.device.kind.rfind("cpu-", 0) != 0) {
      return ReportError(absl::InvalidArgumentError(absl::StrCat(
          "--cluster ", a.cluster, ": device kind '", cluster.device.kind,
          "' is not this machine's CPU; braid gnn sample measures with the CPU worker in this "
          "process (sample a GPU kind with braid-workers on those GPUs)")));
    }
    if (device_kind.empty()) {
      device_kind = cluster.device.kind;
      absl::StatusOr<std::unique_ptr<costmodel::GnnStore>> st = costmodel::GnnStore::Open(db);
      if (!st.ok()) return ReportError(st.status());
      samples = *std::move(st);
      // Tasks are created only for device kinds with a live worker.
      while (!queue.HasLiveWorker(device_kind)) {
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(30)) {
          return ReportError(absl::InternalError("the sampling worker did not register within 30 s"));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    costmodel::FusedSamplerOptions o;
    o.count = a.per_model;
    o.max_ops = a.max_ops;
    o.seed = a.seed ^ StableHash(absl::StrCat(sh.model, "@", sh.batch, "@w", sh.width));
    const graph::Graph& training = (*ctx)->training;
    const std::vector<std::vector<graph::OpId>> groups =
        costmodel::SampleFusedGroups(training, *(*ctx)->cost_model->fusion_backend(), o);
    int added = 0;
    for (const std::vector<graph::OpId>& group : groups) {
      const graph::Graph sub = server::FusedGroupGraph(training, group);
      absl::StatusOr<bool> isnew = samples->PutSample(
          {device_kind, sh.model, costmodel::FusedSignature(training, group), graph::ToText(sub),
           static_cast<int>(group.size())});
      if (!isnew.ok()) return ReportError(isnew.status());
      added += *isnew ? 1 : 0;
    }
    absl::StatusOr<int> f = queue.CreateFusedTasks(training, groups, device_kind);
    if (!f.ok()) return ReportError(f.status());
    absl::StatusOr<int> m = queue.CreateTasksForMisses(training, device_kind);
    if (!m.ok()) return ReportError(m.status());
    created += *f + *m;
    std::cerr << absl::StrFormat("braid:   %zu fused ops (%d new) from %d training ops\n",
                                 groups.size(), added, training.num_ops());
  }
  if (device_kind.empty()) {
    return ReportError(absl::InvalidArgumentError("no model could be drawn from (see above)"));
  }
  std::cerr << "braid: " << created << " profiling tasks queued for " << device_kind << "\n";

  server::Store& store = (*srv)->store();
  const double budget_s = a.budget_min * 60;
  bool out_of_budget = false;
  ProgressLine progress(stderr);
  std::string line;
  while (true) {
    absl::StatusOr<int> queued = store.CountTasks(server::TaskState::kQueued);
    absl::StatusOr<int> leased = store.CountTasks(server::TaskState::kLeased);
    if (!queued.ok()) return ReportError(queued.status());
    if (!leased.ok()) return ReportError(leased.status());
    const int left = *queued + *leased;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int done = created - left;
    line = absl::StrFormat("braid: measured %d/%d tasks in %s (%.1f/s)", done, created,
                           FormatDuration(elapsed), done / std::max(elapsed, 1e-3));
    progress.Update(line);
    if (left == 0) break;
    if (budget_s > 0 && elapsed > budget_s) {
      out_of_budget = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  progress.Finish(line);
  const worker::WorkerAgentStats stats = agent.stats();
  agent.Stop();

  int missing = 0;
  absl::StatusOr<std::vector<costmodel::GnnExample>> examples =
      costmodel::LoadGnnExamples(*samples, (*srv)->profiles(), device_kind, &missing);
  if (!examples.ok()) return ReportError(examples.status());
  std::cout << absl::StrFormat(
      "%zu fused-op samples measured for %s (%d not measured%s); %lld measurements failed\n",
      examples->size(), device_kind, missing,
      out_of_budget ? ": --budget-min reached, run again to resume" : "",
      static_cast<long long>(stats.reported_error));
  if (!out_of_budget && a.noise_kernels > 0) {
    absl::StatusOr<nlohmann::json> noise =
        MeasureNoiseFloor(*examples, a.noise_kernels, a.noise_runs, a.repetitions);
    if (!noise.ok()) return ReportError(noise.status());
    if (!noise->empty()) {
      absl::Status put = samples->PutMeta(device_kind, "noise_floor", noise->dump());
      if (!put.ok()) return ReportError(put);
      std::cout << absl::StrFormat(
          "noise floor (%d kernels x %d separate runs): p50 %.1f%%, p90 %.1f%%, within 10%% "
          "%.0f%%\n",
          (*noise)["kernels"].get<int>(), a.noise_runs, 100 * (*noise)["p50_error"].get<double>(),
          100 * (*noise)["p90_error"].get<double>(), 100 * (*noise)["within_10pct"].get<double>());
    }
  }
  return 0;
}

}  // namespace

void RegisterGnnSampleCommand(CLI::App& gnn, CommandResult& result) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* s = gnn.add_subcommand(
      "sample", "Draw random fused ops from models and measure them with a CPU worker");
  s->add_option("--models", a->models,
                "models to draw from (default: the six of DisCo at sample size: zoo:vgg19@sample "
                "zoo:resnet50@sample zoo:transformer@sample zoo:rnnlm@sample "
                "zoo:bert_large@sample zoo:reformer@sample)")
      ->delimiter(',');
  s->add_option("--per-model", a->per_model, "distinct fused ops per model and batch size")
      ->capture_default_str();
  s->add_option("--batches", a->batches,
                "per-rank batch sizes to draw each model at (0: the model's default)")
      ->delimiter(',')
      ->capture_default_str();
  s->add_option("--widths", a->widths,
                "widths in percent of the sample size to draw zoo:NAME@sample models at")
      ->delimiter(',')
      ->capture_default_str();
  s->add_option("--max-ops", a->max_ops, "largest fused op drawn")->capture_default_str();
  s->add_option("--seed", a->seed, "drawing seed (the same seed resumes)")->capture_default_str();
  s->add_option("--cluster", a->cluster, "cluster whose device kind and fusion backend apply")
      ->capture_default_str();
  s->add_option("--db", a->db, "profile store (default: the CLI's)");
  s->add_option("--budget-min", a->budget_min,
                "stop measuring after this many minutes (0: until done); rerun to resume")
      ->capture_default_str();
  s->add_option("--noise-kernels", a->noise_kernels,
                "fused kernels re-timed for the noise floor (0: skip)")
      ->capture_default_str();
  s->add_option("--noise-runs", a->noise_runs, "separate re-timings of each")->capture_default_str();
  s->add_option("--repetitions", a->repetitions, "timed samples per measurement")
      ->capture_default_str();
  s->callback([a, &result] { result.exit_code = RunSample(*a); });
}

}  // namespace braid::client
