// `braid bench ...`: benchmarks that print a table (recorded in BENCHMARKS.md).
//   braid bench import [model.onnx ...]   import + training-graph build time
//   braid bench sim [model]               full and incremental simulation speed
//   braid bench fusion                    DisCo Tables 1, 3, 4 for the six DisCo models
#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <iostream>
#include <memory>
#include <random>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "client/cli.h"
#include "client/planning.h"
#include "costmodel/simulator.h"
#include "graph/model_source.h"
#include "graph/training.h"
#include "search/backtracking.h"
#include "search/baselines.h"
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

struct FusionArgs {
  std::vector<std::string> models = {"vgg19", "resnet50", "transformer", "rnnlm", "bert_large", "reformer"};
  std::vector<std::string> clusters = {"disco-a", "disco-b"};
  double budget_s = 60;
  int threads = 2;
  bool sweeps = true;
  std::string write;  // markdown file to update between markers
};

struct FusionRun {
  search::SearchResult r;
  std::optional<search::SearchResult> tensor_only;  // the ablation, when asked
  int ops = 0;
  costmodel::KernelSources sources;  // of braid's plan
};

absl::StatusOr<FusionRun> RunOne(const std::string& model, const std::string& cluster,
                                 const search::SearchConfig& cfg, bool ablation = false) {
  PlanningRequest req;
  req.model = "zoo:" + model;
  req.cluster = cluster;
  req.db = "none";  // GPU presets: no measured profiles on this machine
  ASSIGN_OR_RETURN(auto ctx, Prepare(req));
  ASSIGN_OR_RETURN(auto r, search::RunFusionSearch(ctx->training, *ctx->cost_model, cfg));
  FusionRun run{std::move(r), std::nullopt, ctx->training.num_ops(), {}};
  ASSIGN_OR_RETURN(auto sg, search::Lower(ctx->training, run.r.plan, *ctx->cost_model));
  run.sources = costmodel::CountKernelSources(sg);
  if (ablation && run.r.baselines.has_value() && run.r.baselines->complete) {
    ASSIGN_OR_RETURN(auto t, search::RunTensorFusionOnly(ctx->training, *ctx->cost_model, cfg,
                                                         *run.r.baselines));
    run.tensor_only = std::move(t);
  }
  return run;
}

int RunBenchFusion(const FusionArgs& a) {
  std::ostringstream md;
  search::SearchConfig base;
  base.time_budget_s = a.budget_s;
  base.threads = a.threads;
  const char* kNames[] = {"no_fusion", "xla_op_fusion", "allreduce_combiner", "jax_default", "horovod", "ddp"};
  md << "### Table 1 shape: per-iteration time (ms) and speed-ups\n\n"
        "Speed-up = (T_best_baseline - T) / T as DisCo Table 1 defines it; FO gap closed = "
        "(T_best - T_braid) / (T_best - T_FO), n/a where the best baseline is at FO. alpha 1.05, beta 10, patience 1000, seed 0, "
        "budget " << a.budget_s << " s, " << a.threads << " threads.\n\n"
        "braid (tensor fusion only) keeps xla_op_fusion's op fusion and searches buckets only (the "
        "ablation). Every fused group is one the preset's fusion backend runs (XLA GPU + cuBLASLt "
        "+ cuDNN); cost sources: share of braid's predicted compute time that is a pure prior "
        "(no profiles on these GPU presets here).\n\n"
        "| cluster | model | ops | no fusion | XLA op fusion | AR combiner | JAX default | Horovod | DDP "
        "| braid (tensor fusion only) | braid | FO | best baseline | braid speed-up | FO speed-up | FO gap closed | prior share | search s |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n";
  std::cout << md.str();
  std::cout.flush();
  for (const std::string& cl : a.clusters) {
    for (const std::string& m : a.models) {
      auto run = RunOne(m, cl, base, /*ablation=*/true);
      if (!run.ok()) return ReportError(run.status());
      const search::SearchResult& r = run->r;
      const search::BaselineResults& b = *r.baselines;
      const double tb = b.Best().sim.iteration_s, ts = r.sim.iteration_s, fo = r.fo_bound_s;
      std::ostringstream row;
      row << absl::StrFormat("| %s | %s | %d |", cl, m, run->ops);
      for (const char* n : kNames) {
        const search::EvaluatedPlan* e = b.Find(n);
        row << absl::StrFormat(" %.1f |", e ? e->sim.iteration_s * 1e3 : 0.0);
      }
      const std::optional<double> closed = search::FoGapClosed(tb, ts, fo);
      row << (run->tensor_only ? absl::StrFormat(" %.1f |", run->tensor_only->sim.iteration_s * 1e3)
                               : std::string(" n/a |"));
      row << absl::StrFormat(" %.1f | %.1f | %s | %.1f%% | %.1f%% | %s | %.0f%% | %.1f |\n", ts * 1e3,
                             fo * 1e3, b.Best().name, 100 * search::Speedup(tb, ts),
                             100 * search::Speedup(tb, fo),
                             closed ? absl::StrFormat("%.0f%%", 100 * *closed) : "n/a",
                             100 * run->sources.Share(costmodel::TimeSource::kPrior),
                             r.stats.elapsed_s);
      md << row.str();
      std::cout << row.str();
      std::cout.flush();
    }
  }
  if (a.sweeps) {
    const std::string cl = a.clusters.front();
    auto sweep = [&](const std::string& title, const std::string& param, std::vector<double> values) -> int {
      std::ostringstream t;
      t << "\n### " << title << " (" << cl << "): braid ms / search s\n\n| model |";
      for (double v : values) t << " " << param << " = " << v << " |";
      t << "\n| --- |";
      for (size_t i = 0; i < values.size(); ++i) t << " ---: |";
      t << "\n";
      md << t.str();
      std::cout << t.str();
      for (const std::string& m : a.models) {
        std::ostringstream row;
        row << "| " << m << " |";
        for (double v : values) {
          search::SearchConfig cfg = base;
          if (param == "alpha") cfg.alpha = v; else cfg.beta = static_cast<int>(v);
          auto run = RunOne(m, cl, cfg);
          if (!run.ok()) return ReportError(run.status());
          row << absl::StrFormat(" %.1f / %.1f |", run->r.sim.iteration_s * 1e3, run->r.stats.elapsed_s);
        }
        row << "\n";
        md << row.str();
        std::cout << row.str();
        std::cout.flush();
      }
      return 0;
    };
    if (int rc = sweep("Table 3 shape: alpha sweep, beta = 10", "alpha", {1.0, 1.05, 1.1}); rc != 0) return rc;
    if (int rc = sweep("Table 4 shape: beta sweep, alpha = 1.05", "beta", {1, 5, 10, 30}); rc != 0) return rc;
  }
  if (!a.write.empty()) {
    constexpr char kBegin[] = "<!-- braid bench fusion: begin -->";
    constexpr char kEnd[] = "<!-- braid bench fusion: end -->";
    std::ifstream in(a.write);
    std::stringstream buf;
    buf << in.rdbuf();
    std::string doc = buf.str();
    const std::string block = std::string(kBegin) + "\n" + md.str() + kEnd;
    const size_t b = doc.find(kBegin), e = doc.find(kEnd);
    if (b != std::string::npos && e != std::string::npos && e > b) {
      doc.replace(b, e + std::string(kEnd).size() - b, block);
    } else {
      doc += "\n" + block + "\n";
    }
    std::ofstream out(a.write, std::ios::trunc);
    out << doc;
    if (!out) return ReportError(absl::InternalError(a.write + ": write failed"));
    std::cout << "tables written into " << a.write << "\n";
  }
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

  auto fus = std::make_shared<FusionArgs>();
  CLI::App* f = bench->add_subcommand("fusion", "DisCo Tables 1, 3, 4: baselines vs braid on GPU presets");
  f->add_option("--models", fus->models, "zoo models");
  f->add_option("--clusters", fus->clusters, "cluster presets (sweeps use the first)");
  f->add_option("--budget-s", fus->budget_s, "search budget per run")->check(CLI::PositiveNumber);
  f->add_option("--threads", fus->threads, "evaluation threads")->check(CLI::Range(1, 64));
  f->add_flag("!--no-sweeps", fus->sweeps, "skip the alpha and beta sweeps");
  f->add_option("--write", fus->write, "markdown file to update (between braid bench fusion markers)");
  f->callback([fus, &result] { result.exit_code = RunBenchFusion(*fus); });

  auto sim = std::make_shared<SimArgs>();
  CLI::App* s = bench->add_subcommand("sim", "Full and incremental simulation speed");
  s->add_option("models", sim->models, "models (default: zoo:bert_large zoo:resnet50 zoo:transformer)");
  s->add_option("--cluster", sim->cluster, "cluster preset or file");
  s->add_option("--reps", sim->reps, "full simulations")->check(CLI::PositiveNumber);
  s->add_option("--changes", sim->changes, "single-task changes")->check(CLI::PositiveNumber);
  s->callback([sim, &result] { result.exit_code = RunBenchSim(*sim); });
}

}  // namespace braid::client
