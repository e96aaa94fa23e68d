// `braid bench ...`: benchmarks that print a table (recorded in BENCHMARKS.md).
//   braid bench import [model.onnx ...]   import + training-graph build time
//   braid bench sim [model]               full and incremental simulation speed
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <random>

#include "absl/strings/str_format.h"
#include "client/cli.h"
#include "client/planning.h"
#include "costmodel/simulator.h"
#include "graph/model_source.h"
#include "graph/training.h"
#include "search/lowering.h"
#include "search/plan.h"

namespace braid::client {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct ImportArgs {
  std::vector<std::string> models = {"tests/data/chain1000.onnx", "tests/data/densenet121_opset15.onnx",
                                     "tests/data/resnet50_opset17.onnx"};
  int reps = 20;
  int ranks = 8;
};

int RunBenchImport(const ImportArgs& a) {
  std::cout << absl::StrFormat("%-42s %8s %10s %12s %12s %12s\n", "model", "ops", "train ops",
                               "import ms", "train ms", "total ms");
  for (const std::string& m : a.models) {
    std::vector<double> imp, train;
    int ops = 0, train_ops = 0;
    for (int r = 0; r < a.reps; ++r) {
      std::vector<std::string> warnings;
      auto t0 = Clock::now();
      auto g = graph::LoadModel(m, {}, &warnings);
      auto t1 = Clock::now();
      if (!g.ok()) return ReportError(g.status());
      graph::TrainingOptions opts;
      opts.ranks = a.ranks;
      auto t = graph::BuildTrainingGraph(*g, opts);
      auto t2 = Clock::now();
      if (!t.ok()) return ReportError(t.status());
      imp.push_back(Seconds(t0, t1));
      train.push_back(Seconds(t1, t2));
      ops = g->num_ops();
      train_ops = t->num_ops();
    }
    const double i = Median(imp) * 1e3, t = Median(train) * 1e3;
    std::cout << absl::StrFormat("%-42s %8d %10d %12.2f %12.2f %12.2f\n", m, ops, train_ops, i, t, i + t);
  }
  std::cout << absl::StrFormat("(median of %d runs; ONNX file read, shape inference, folding, IR build, "
                               "training graph for %d ranks)\n", a.reps, a.ranks);
  return 0;
}

struct SimArgs {
  std::vector<std::string> models = {"zoo:bert_large", "zoo:resnet50", "zoo:transformer"};
  std::string cluster = "disco-a";
  int reps = 50;
  int changes = 200;
  uint64_t seed = 1;
};

int RunBenchSim(const SimArgs& a) {
  std::cout << absl::StrFormat("%-16s %8s %12s %14s %16s %12s %10s\n", "model", "tasks", "full ms",
                               "tasks/s", "incremental ms", "replayed", "speed-up");
  for (const std::string& m : a.models) {
    PlanningRequest req;
    req.model = m;
    req.cluster = a.cluster;
    req.db = "none";
    auto ctx = Prepare(req);
    if (!ctx.ok()) return ReportError(ctx.status());
    PlanningContext& c = **ctx;
    auto sg = search::Lower(c.training, search::NoFusionPlan(c.training), *c.cost_model);
    if (!sg.ok()) return ReportError(sg.status());
    const int n = static_cast<int>(sg->tasks.size());
    std::vector<double> full;
    double sink = 0;
    for (int r = 0; r < a.reps; ++r) {
      auto t0 = Clock::now();
      costmodel::SimResult res = costmodel::Simulate(*sg);
      full.push_back(Seconds(t0, Clock::now()));
      sink += res.iteration_s;
    }
    // Single-task changes at uniformly random positions: a task's duration
    // grows by 10%, is re-simulated incrementally, then restored.
    costmodel::IncrementalSimulator inc(*sg);
    std::mt19937_64 rng(a.seed);
    std::uniform_int_distribution<int> pick(0, n - 1);
    std::vector<double> incr;
    double replayed = 0;
    costmodel::SimGraph changed = *sg;
    for (int k = 0; k < a.changes; ++k) {
      const int t = pick(rng);
      const double before = changed.tasks[t].duration_s;
      changed.tasks[t].duration_s = before * 1.1 + 1e-6;
      auto t0 = Clock::now();
      costmodel::SimResult res = inc.Resimulate(changed, {t});
      incr.push_back(Seconds(t0, Clock::now()));
      replayed += static_cast<double>(inc.replayed_steps()) / std::max(1, inc.total_steps());
      sink += res.iteration_s;
      changed.tasks[t].duration_s = before;
      inc.Resimulate(changed, {t});
    }
    const double f = Median(full), i = Median(incr);
    std::cout << absl::StrFormat("%-16s %8d %12.3f %14.0f %16.3f %11.0f%% %9.1fx\n", c.forward.name(), n,
                                 f * 1e3, n / f, i * 1e3, 100 * replayed / a.changes, f / i);
    if (sink < 0) std::cout << "";  // keeps the simulations observable
  }
  std::cout << absl::StrFormat("(%s, no-fusion plan; full: median of %d runs; incremental: median of %d "
                               "single-task changes at random positions, 'replayed' = mean share of "
                               "events re-simulated)\n", a.cluster, a.reps, a.changes);
  return 0;
}

}  // namespace

void RegisterBenchCommands(CLI::App& app, CommandResult& result) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks that print a table");
  bench->require_subcommand(1);

  auto imp = std::make_shared<ImportArgs>();
  CLI::App* i = bench->add_subcommand("import", "ONNX import + training-graph build time");
  i->add_option("models", imp->models, "ONNX files (default: the bundled test models)");
  i->add_option("--reps", imp->reps, "repetitions")->check(CLI::PositiveNumber);
  i->callback([imp, &result] { result.exit_code = RunBenchImport(*imp); });

  auto sim = std::make_shared<SimArgs>();
  CLI::App* s = bench->add_subcommand("sim", "Full and incremental simulation speed");
  s->add_option("models", sim->models, "models (default: zoo:bert_large zoo:resnet50 zoo:transformer)");
  s->add_option("--cluster", sim->cluster, "cluster preset or file");
  s->add_option("--reps", sim->reps, "full simulations")->check(CLI::PositiveNumber);
  s->add_option("--changes", sim->changes, "single-task changes")->check(CLI::PositiveNumber);
  s->callback([sim, &result] { result.exit_code = RunBenchSim(*sim); });
}

}  // namespace braid::client
