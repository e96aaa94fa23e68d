// braid-fusion-bench: DisCo §6's comparison for the joint op/tensor fusion
// search. For each zoo model and cluster preset it builds the data-parallel
// training graph (one rank per device of the preset), runs the baselines and
// the search with the roofline cost model (no profile store) and prints
//   best baseline ms | braid ms | FO ms | gap closed | search s | candidates/s
// where gap closed = (T_best - T_braid) / (T_best - T_FO) (DisCo reports
// 44-77%).
//
//   braid-fusion-bench                                   # six models x disco-a, disco-b
//   braid-fusion-bench --models resnet50 --clusters disco-a --budget 20
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "search/backtracking.h"

namespace braid::search {
namespace {

int Main(int argc, char** argv) {
  CLI::App app("DisCo-style fusion search benchmark");
  std::string models = "vgg19,resnet50,transformer,rnnlm,bert_large,reformer";
  std::string clusters = "disco-a,disco-b";
  SearchConfig cfg;
  bool verbose = false;
  app.add_option("--models", models, "comma-separated zoo models");
  app.add_option("--clusters", clusters, "comma-separated cluster presets");
  app.add_option("--budget", cfg.time_budget_s, "search time budget per model (s)");
  app.add_option("--patience", cfg.patience, "steps without improvement before stopping");
  app.add_option("--alpha", cfg.alpha, "pruning factor");
  app.add_option("--beta", cfg.beta, "max applications per method");
  app.add_option("--seed", cfg.seed, "random seed");
  app.add_option("--threads", cfg.threads, "evaluation threads");
  app.add_flag("--verbose", verbose, "print every baseline");
  CLI11_PARSE(app, argc, argv);

  std::printf("%-12s %-8s %5s %-20s %9s %9s %9s %7s %8s %8s %6s %s\n", "model", "cluster", "ops",
              "best baseline", "best ms", "braid ms", "FO ms", "closed", "search s", "cand/s",
              "steps", "stop");
  const std::vector<std::string> model_names = absl::StrSplit(models, ',', absl::SkipEmpty());
  const std::vector<std::string> cluster_names = absl::StrSplit(clusters, ',', absl::SkipEmpty());
  for (const std::string& cname : cluster_names) {
    absl::StatusOr<costmodel::ClusterSpec> spec = costmodel::LoadCluster(cname);
    if (!spec.ok()) {
      std::fprintf(stderr, "%s\n", spec.status().ToString().c_str());
      return 1;
    }
    const int ranks = spec->num_nodes * spec->devices_per_node;
    for (const std::string& mname : model_names) {
      absl::StatusOr<graph::Graph> fwd = graph::BuildZooModel(mname);
      if (!fwd.ok()) {
        std::fprintf(stderr, "%s\n", fwd.status().ToString().c_str());
        return 1;
      }
      graph::TrainingOptions opts;
      opts.ranks = ranks;
      absl::StatusOr<graph::Graph> g = graph::BuildTrainingGraph(*fwd, opts);
      if (!g.ok()) {
        std::fprintf(stderr, "%s: %s\n", mname.c_str(), g.status().ToString().c_str());
        return 1;
      }
      costmodel::ClusterCostModel cm(*spec, nullptr, nullptr, costmodel::CommModel(*spec));
      absl::StatusOr<SearchResult> r = RunFusionSearch(*g, cm, cfg);
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", mname.c_str(), r.status().ToString().c_str());
        return 1;
      }
      const EvaluatedPlan& best = r->baselines->Best();
      const double tb = best.sim.iteration_s, ts = r->sim.iteration_s, fo = r->fo_bound_s;
      const double closed = tb > fo ? (tb - ts) / (tb - fo) : 0.0;
      const SearchStats& st = r->stats;
      std::printf("%-12s %-8s %5d %-20s %9.2f %9.2f %9.2f %6.1f%% %8.1f %8.0f %6lld %s\n",
                  mname.c_str(), cname.c_str(), g->num_ops(), best.name.c_str(), tb * 1e3,
                  ts * 1e3, fo * 1e3, closed * 100, st.elapsed_s,
                  st.elapsed_s > 0 ? st.candidates_generated / st.elapsed_s : 0.0,
                  static_cast<long long>(st.steps), st.stop_reason.c_str());
      if (verbose) {
        for (const EvaluatedPlan& b : r->baselines->baselines) {
          std::printf("    %-20s %9.2f ms  compute %9.2f  comm %9.2f  %s\n", b.name.c_str(),
                      b.sim.iteration_s * 1e3, b.sim.compute_s * 1e3, b.sim.comm_s * 1e3,
                      PlanSummary(b.plan).c_str());
        }
        std::printf("    %-20s %9.2f ms  compute %9.2f  comm %9.2f  %s (%s)\n", "braid",
                    ts * 1e3, r->sim.compute_s * 1e3, r->sim.comm_s * 1e3,
                    PlanSummary(r->plan).c_str(), r->origin.c_str());
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace braid::search

int main(int argc, char** argv) { return braid::search::Main(argc, argv); }
