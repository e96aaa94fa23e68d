// `braid simulate` and `braid plan`: the offline planner on one machine.
#include <algorithm>
#include <fstream>
#include <limits>
#include <iostream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/bounded_json.h"
#include "absl/strings/str_join.h"
#include "base/digest.h"
#include "base/status_macros.h"
#include "client/cli.h"
#include "client/planning.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/gnn_store.h"
#include "costmodel/simulator.h"
#include "graph/fingerprint.h"
#include "graph/model_source.h"
#include "graph/zoo.h"
#include "search/backtracking.h"
#include "search/baselines.h"
#include "search/lowering.h"
#include "search/parallel_plan.h"
#include "search/program_lowering.h"
#include "graph/program.h"
#include "search/plan.h"
#include "search/stop_token.h"
#include "server/strategy_api.h"

namespace braid::client {
namespace {

struct CommonArgs {
  std::string model;
  std::string cluster = "cpu-local";
  int ranks = 0;
  int batch = 0;
  std::string optimizer = "sgd";
  std::string db;
  bool json = false;
  std::string estimator = "auto";
};

void AddCommon(CLI::App* c, CommonArgs& a) {
  c->add_option("model", a.model, "model.onnx, a braid text graph, or zoo:NAME")->required();
  c->add_option("--cluster", a.cluster, "preset (disco-a, disco-b, summit, dgx-h100, cpu-local) or JSON file");
  c->add_option("--ranks", a.ranks, "data-parallel ranks (default: the whole cluster)")->check(CLI::PositiveNumber);
  c->add_option("--batch", a.batch, "per-rank batch (default: the model's)")->check(CLI::PositiveNumber);
  c->add_option("--optimizer", a.optimizer, "sgd or adam")->check(CLI::IsMember({"sgd", "adam"}));
  c->add_option("--db", a.db, "profile store (SQLite); 'none' for priors only");
  c->add_flag("--json", a.json, "print JSON");
  c->add_option("--estimator", a.estimator,
                "fused ops without a measured profile: auto (the GNN estimator when one is "
                "trained for the cluster's device kind) or none (corrected roofline)")
      ->check(CLI::IsMember({"auto", "none"}));
}

absl::StatusOr<std::unique_ptr<PlanningContext>> PrepareFrom(const CommonArgs& a) {
  PlanningRequest req;
  req.model = a.model;
  req.cluster = a.cluster;
  req.ranks = a.ranks;
  req.batch = a.batch;
  req.optimizer = a.optimizer;
  req.db = a.db;
  req.estimator = a.estimator;
  auto ctx = Prepare(req);
  if (ctx.ok()) {
    for (const std::string& w : (*ctx)->warnings) std::cerr << "braid: warning: " << w << "\n";
  }
  return ctx;
}

double Ms(double s) { return s * 1e3; }

// ---- simulate ----------------------------------------------------------------

struct SimulateArgs {
  CommonArgs common;
  std::string plan_path;
  std::string trace_path;
};

int RunSimulate(const SimulateArgs& a) {
  auto ctx = PrepareFrom(a.common);
  if (!ctx.ok()) return ReportError(ctx.status());
  PlanningContext& c = **ctx;
  search::Plan plan = search::NoFusionPlan(c.training);
  if (!a.plan_path.empty()) {
    absl::StatusOr<nlohmann::json> file =
        base::ReadBoundedJsonFile(a.plan_path, base::kPlanJsonLimits);
    if (!file.ok()) return ReportError(file.status());
    nlohmann::json j = *std::move(file);
    if (j.is_object() && j.contains("plan")) {  // accept `braid plan --json` output too
      nlohmann::json inner = std::move(j["plan"]);
      j = std::move(inner);
    }
    auto p = search::PlanFromJson(c.training, j);
    if (!p.ok()) {
      return ReportError(absl::InvalidArgumentError(
          absl::StrCat(a.plan_path, ": ", std::string(p.status().message()))));
    }
    plan = std::move(*p);
  }
  auto sg = search::Lower(c.training, plan, *c.cost_model);
  if (!sg.ok()) return ReportError(sg.status());
  costmodel::SimResult r = costmodel::Simulate(*sg);
  const double fo = search::FullyOverlappedBound(std::span<const costmodel::SimResult>(&r, 1));
  // The sources of the kernels of the plan simulated (fused groups included).
  const costmodel::KernelSources src = costmodel::CountKernelSources(*sg);
  int64_t peak = 0;
  for (int64_t b : r.peak_memory_bytes) peak = std::max(peak, b);
  if (!a.trace_path.empty()) {
    if (absl::Status s = WriteFile(a.trace_path, costmodel::ChromeTrace(*sg, r)); !s.ok()) {
      return ReportError(s);
    }
  }
  if (a.common.json) {
    nlohmann::json j = {{"model", c.forward.name()},
                        {"cluster", c.cluster.name},
                        {"ranks", c.cluster.num_ranks},
                        {"iteration_ms", Ms(r.iteration_s)},
                        {"compute_ms", Ms(r.compute_s)},
                        {"comm_ms", Ms(r.comm_s)},
                        {"overlap_ratio", r.overlap_ratio},
                        {"fully_overlapped_ms", Ms(fo)},
                        {"peak_memory_bytes", peak},
                        {"cost_sources", costmodel::KernelSourcesJson(src)}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat(
      "model %s on %s (%d ranks), %d training ops\n"
      "iteration        %10.3f ms\n"
      "compute          %10.3f ms\n"
      "communication    %10.3f ms\n"
      "overlap ratio    %10.3f  ((compute + comm) / iteration)\n"
      "fully overlapped %10.3f ms\n"
      "peak memory      %10.1f MiB per device\n"
      "kernels          %10d\n"
      "cost sources     %s (of predicted compute time)\n",
      c.forward.name(), c.cluster.name, c.cluster.num_ranks, c.training.num_ops(),
      Ms(r.iteration_s), Ms(r.compute_s), Ms(r.comm_s), r.overlap_ratio, Ms(fo),
      static_cast<double>(peak) / (1 << 20), src.total(), costmodel::KernelSourcesLine(src));
  if (!a.trace_path.empty()) std::cout << "trace written to " << a.trace_path << "\n";
  return 0;
}

// ---- plan ---------------------------------------------------------------------

struct SignArgs {
  std::string path;
  std::string secret_file;
};

// `braid plan sign FILE`: the tag of a plan file written without a secret,
// or edited on purpose (and reviewed) since.
int RunSign(const SignArgs& a) {
  absl::StatusOr<std::string> read = base::ReadBoundedFile(a.path, base::kPlanJsonLimits.max_bytes);
  if (!read.ok()) return ReportError(read.status());
  const std::string& text = *read;
  absl::StatusOr<nlohmann::json> j = base::ParseBoundedJson(text, base::kPlanJsonLimits);
  if (!j.ok() || !j->is_object()) {
    return ReportError(absl::InvalidArgumentError(absl::StrCat(
        a.path, ": not a JSON plan", j.ok() ? "" : absl::StrCat(" (", j.status().message(), ")"))));
  }
  absl::StatusOr<std::string> secret = LoadPlanSecret(a.secret_file);
  if (!secret.ok()) return ReportError(secret.status());
  const std::string tag = HmacSha256Hex(*secret, text);
  if (absl::Status s = WriteFile(a.path + ".hmac", tag + "\n"); !s.ok()) return ReportError(s);
  std::cout << tag << "  " << a.path << ".hmac\n";
  return 0;
}

struct PlanArgs {
  CommonArgs common;
  double alpha = 1.05;
  int beta = 10;
  double budget_s = 60;
  uint64_t seed = 0;
  int patience = 1000;
  int threads = 2;
  std::string out_path;
  std::string op_fusion = "on";
  bool parallel = false;
  std::string strategy_row;  // --strategy: this row's plan instead of the fastest
  bool no_pipeline = false;  // --no-pipeline: pipeline rows are not searched
  bool sync_batch_norm = false;  // --sync-batchnorm: the program's BatchNorm uses whole-batch statistics
};

int CountFusedOps(const search::Plan& p) {
  int n = 0;
  for (const auto& g : p.groups) n += static_cast<int>(g.ops.size());
  return n;
}

// The fusion search's settings from the flags.
search::SearchConfig SearchConfigFrom(const PlanArgs& a) {
  search::SearchConfig cfg;
  cfg.alpha = a.alpha;
  cfg.beta = a.beta;
  cfg.seed = a.seed;
  cfg.patience = a.patience;
  cfg.time_budget_s = a.budget_s;
  cfg.threads = a.threads;
  cfg.seed_with_baselines = true;
  return cfg;
}

int RunPlan(const PlanArgs& a) {
  auto ctx = PrepareFrom(a.common);
  if (!ctx.ok()) return ReportError(ctx.status());
  PlanningContext& c = **ctx;
  const search::SearchConfig cfg = SearchConfigFrom(a);
  // --budget-s covers the search; the tensor-fusion-only ablation runs in
  // what it leaves, and the cost sources of the baselines' plans (a lowering
  // each, over a second apiece at the op limit) are reported while a quarter
  // of the budget more allows. Neither is the plan, and a large graph's
  // search uses its whole budget.
  search::StopToken within_budget, extras;
  within_budget.SetBudget(a.budget_s);
  extras.SetBudget(1.25 * a.budget_s);
  const bool op_fusion = a.op_fusion == "on";
  auto res = op_fusion ? search::RunFusionSearch(c.training, *c.cost_model, cfg)
                       : search::RunBucketOnlySearch(c.training, *c.cost_model, cfg);
  if (!res.ok()) return ReportError(res.status());
  // The budget covers the baselines too: on a large graph it can run out
  // before they finish, and before any has the result is the no-fusion plan.
  if (!res->baselines.has_value()) {
    search::BaselineResults nf;
    nf.baselines.push_back({"no_fusion", res->plan, res->sim});
    nf.complete = false;
    nf.fo_bound_s = res->fo_bound_s;
    res->baselines = std::move(nf);
  }
  const search::BaselineResults& base = *res->baselines;
  if (!base.complete) {
    std::cerr << "braid: warning: the search stopped (" << res->stats.stop_reason << ") after "
              << base.baselines.size() << " of 6 baselines; raise --budget-s to run them all\n";
  }
  // The ablation row: the same search with op fusion fixed to XLA's.
  std::optional<search::SearchResult> tensor_only;
  if (base.complete && op_fusion && within_budget.expired()) {
    std::cerr << "braid: note: the search used the whole budget; the tensor-fusion-only "
                 "ablation is left out (raise --budget-s to see it)\n";
  } else if (base.complete && op_fusion) {
    search::SearchConfig tcfg = cfg;
    tcfg.time_budget_s = within_budget.RemainingSeconds();
    auto t = search::RunTensorFusionOnly(c.training, *c.cost_model, tcfg, base);
    if (!t.ok()) return ReportError(t.status());
    tensor_only = std::move(*t);
  }
  const search::EvaluatedPlan& best = base.Best();
  const double t_best = best.sim.iteration_s;
  const double t_braid = res->sim.iteration_s;
  const double t_fo = res->fo_bound_s;
  const double speedup = search::Speedup(t_best, t_braid);
  const std::optional<double> gap_closed = search::FoGapClosed(t_best, t_braid, t_fo);
  // Where the predicted times of braid's plan come from.
  absl::StatusOr<costmodel::SimGraph> braid_sg = search::Lower(c.training, res->plan, *c.cost_model);
  if (!braid_sg.ok()) return ReportError(braid_sg.status());
  const costmodel::KernelSources src = costmodel::CountKernelSources(*braid_sg);
  // Each baseline's plan is costed by the same model: its sources too.
  nlohmann::json cost_sources = {{"braid", costmodel::KernelSourcesJson(src)}};
  for (const auto& b : base.baselines) {
    if (extras.expired()) {
      std::cerr << "braid: note: cost sources of the baselines from " << b.name
                << " on are left out: the budget is spent\n";
      break;
    }
    absl::StatusOr<costmodel::SimGraph> bsg = search::Lower(c.training, b.plan, *c.cost_model);
    if (!bsg.ok()) return ReportError(bsg.status());
    cost_sources[b.name] = costmodel::KernelSourcesJson(costmodel::CountKernelSources(*bsg));
  }
  nlohmann::json plan_json = search::PlanToJson(c.training, res->plan);
  if (!a.out_path.empty()) {
    // What the activator (braid-worker activate) and braid.torch need beside
    // the plan: the graph it is for, its prediction, and the DDP-bucket
    // baseline to measure it against on the same ranks.
    nlohmann::json file = plan_json;
    absl::StatusOr<std::string> fp = graph::FingerprintHex(c.training);
    if (!fp.ok()) return ReportError(fp.status());
    file["graph_fingerprint"] = *fp;
    file["cluster"] = c.cluster.name;
    file["ranks"] = c.cluster.num_ranks;
    file["predicted_iteration_s"] = t_braid;
    if (const search::EvaluatedPlan* ddp = base.Find("ddp")) {
      file["ddp_buckets"] = search::PlanToJson(c.training, ddp->plan)["buckets"];
    }
    if (absl::Status s = WritePlanFile(a.out_path, file.dump(1) + "\n"); !s.ok()) return ReportError(s);
  }
  if (a.common.json) {
    nlohmann::json times = nlohmann::json::object();
    for (const auto& b : base.baselines) times[b.name] = Ms(b.sim.iteration_s);
    times["braid"] = Ms(t_braid);
    if (tensor_only) times["braid_tensor_only"] = Ms(tensor_only->sim.iteration_s);
    times["fully_overlapped"] = Ms(t_fo);
    nlohmann::json j = {{"model", c.forward.name()},
                        {"cluster", c.cluster.name},
                        {"ranks", c.cluster.num_ranks},
                        {"iteration_ms", times},
                        {"best_baseline", best.name},
                        {"baselines_complete", base.complete},
                        {"speedup_vs_best", speedup},
                        {"fo_gap_closed", gap_closed ? nlohmann::json(*gap_closed) : nlohmann::json()},
                        {"fusion_backend", c.cost_model->fusion_backend()->name()},
                        {"fused_cost_note", costmodel::FusedMeasurementGap(c.cluster).value_or("")},
                        {"fused_estimator", c.cost_model->estimator() != nullptr
                                                ? c.cost_model->estimator()->Version()
                                                : "none"},
                        {"cost_sources", cost_sources},
                        {"search_seconds", res->stats.elapsed_s},
                        {"candidates_evaluated", res->stats.candidates_generated},
                        {"stop_reason", res->stats.stop_reason},
                        {"plan", plan_json}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  int grads = 0;
  for (const graph::Tensor& t : c.training.tensors()) grads += t.role == graph::TensorRole::kGradient;
  std::cout << absl::StrFormat("model %s on %s (%d ranks): %d training ops, %d gradients\n\n",
                               c.forward.name(), c.cluster.name, c.cluster.num_ranks,
                               c.training.num_ops(), grads);
  std::cout << absl::StrFormat("%-20s %14s %12s %12s %9s\n", "strategy", "iteration ms", "compute ms",
                               "comm ms", "overlap");
  auto row = [](const std::string& name, const costmodel::SimResult& r) {
    std::cout << absl::StrFormat("%-20s %14.3f %12.3f %12.3f %9.3f\n", name, Ms(r.iteration_s),
                                 Ms(r.compute_s), Ms(r.comm_s), r.overlap_ratio);
  };
  for (const auto& b : base.baselines) row(b.name, b.sim);
  if (tensor_only) row("braid_tensor_only", tensor_only->sim);
  row("braid", res->sim);
  std::cout << absl::StrFormat("%-20s %14.3f\n\n", "fully_overlapped", Ms(t_fo));
  std::cout << absl::StrFormat(
      "best baseline        %s\n"
      "speed-up vs best     %.1f%%  ((T_best - T_braid) / T_braid)%s\n"
      "FO gap closed        %s  ((T_best - T_braid) / (T_best - T_FO))\n"
      "search               %.1f s, %lld candidates, stopped by %s\n"
      "plan                 %d fused kernels covering %d ops, %d AllReduce buckets\n"
      "fusion backend       %s\n"
      "cost sources         %s (of braid's predicted compute time)\n",
      best.name, 100 * speedup,
      // Mostly datasheet priors behind the prediction: the speed-up says so.
      src.Share(costmodel::TimeSource::kPrior) >= 0.5 ? "; simulated, from priors" : "",
      gap_closed ? absl::StrFormat("%.1f%%", 100 * *gap_closed) : "n/a (best baseline at FO)",
      res->stats.elapsed_s,
      static_cast<long long>(res->stats.candidates_generated), res->stats.stop_reason,
      static_cast<int>(res->plan.groups.size()), CountFusedOps(res->plan),
      static_cast<int>(res->plan.buckets.size()),
      std::string(c.cost_model->fusion_backend()->name()), costmodel::KernelSourcesLine(src));
  std::cout << "fused-op estimator   "
            << (c.cost_model->estimator() != nullptr ? c.cost_model->estimator()->Version()
                                                     : "none (corrected roofline)")
            << "\n";
  if (std::optional<std::string> gap = costmodel::FusedMeasurementGap(c.cluster)) {
    std::cout << "note                 " << *gap << "\n";
  }
  return 0;
}

// The model at the global batch, per-rank batch x ranks: what a parallel
// plan splits (a data-parallel plan's graph is one rank's). A model whose
// batch is fixed (an ONNX file without a symbolic batch dim) is planned at
// its own batch, taken as the global one, with a warning.
absl::StatusOr<graph::Graph> GlobalBatchForward(const CommonArgs& a, const PlanningContext& c) {
  const int64_t per_rank = graph::ModelBatch(c.forward);
  const int64_t global = per_rank * c.cluster.num_ranks;
  if (per_rank <= 0 || global > std::numeric_limits<int>::max()) return c.forward;
  absl::StatusOr<graph::Graph> g;
  std::vector<std::string> warnings;
  if (graph::IsZooSource(a.model)) {
    ASSIGN_OR_RETURN(graph::ZooSource zoo, graph::ParseZooSource(a.model));
    g = graph::BuildZooModel(zoo.name, static_cast<int>(global), zoo.size, zoo.width_pct);
  } else {
    graph::LoadOptions lo;
    lo.batch = static_cast<int>(global);
    g = graph::LoadModel(a.model, lo, &warnings);
  }
  if (!g.ok()) return g.status();
  if (graph::ModelBatch(*g) != global) {
    std::cerr << "braid: warning: " << a.model << " has a fixed batch of " << graph::ModelBatch(*g)
              << "; --parallel plans it as the global batch\n";
  }
  return g;
}

// `braid plan MODEL --parallel`: the strategy table (data parallel, the
// expert strategies that apply, braid's parallelization), each fitting plan
// given the same fusion search on its per-device graph; the fastest is the
// plan (search/parallel_plan.h). On a one-node CPU cluster (braid-torch,
// search::ExecutesOnLocalRanks) "fastest" is as the Gloo ranks execute each strategy.
int RunParallelPlan(const PlanArgs& a, const CliContext& cli) {
  auto ctx = PrepareFrom(a.common);
  if (!ctx.ok()) return ReportError(ctx.status());
  PlanningContext& c = **ctx;
  search::ParallelPlanOptions o;
  o.table.base.optimizer =
      a.common.optimizer == "adam" ? graph::Optimizer::kAdam : graph::Optimizer::kSgdMomentum;
  o.fusion = SearchConfigFrom(a);
  o.op_fusion = a.op_fusion == "on";
  o.strategy_row = a.strategy_row;
  o.pipeline = !a.no_pipeline;
  // --budget-s bounds the whole search (search/parallel_plan.h: past it the
  // plan is the best so far, data parallel at the least); each strategy's
  // fusion search gets at most a quarter of it.
  o.time_budget_s = a.budget_s;
  o.fusion.time_budget_s = a.budget_s / 4;
  absl::StatusOr<graph::Graph> global = GlobalBatchForward(a.common, c);
  if (!global.ok()) return ReportError(global.status());
  // Every row's program is lowered and simulated (its groups and buckets
  // its own); on cpu-local, whose ranks run them, that chooses the plan.
  o.lowering.sync_batch_norm = a.sync_batch_norm;
  if (search::ExecutesOnLocalRanks(c.cluster) && !a.common.json && c.store != nullptr &&
      c.store->GetComm(costmodel::CommProfileKey(c.cluster)).empty()) {
    std::cerr << "braid: note: no collectives measured for " << c.cluster.num_ranks
              << " ranks in this store: their times are priors; `braid profile comm --ranks "
              << c.cluster.num_ranks << " --as-parallel-ranks` measures them as the ranks wait\n";
  }
  absl::StatusOr<search::ParallelPlanResult> r =
      search::PlanParallel(*global, c.cluster, *c.cost_model, o);
  if (!r.ok()) return ReportError(r.status());
  std::vector<std::string> cut;  // what the budget left out
  for (const search::ParallelPlanRow& row : r->rows)
    if (search::StopToken::IsStop(row.fused_status)) cut.push_back(row.strategy.name);
  if (search::StopToken::IsStop(r->substitution_status)) cut.push_back("substitutions");
  if (search::StopToken::IsStop(r->pipeline_status)) cut.push_back("pipelines");
  if (!cut.empty() && !a.common.json) {
    std::cerr << "braid: warning: the " << a.budget_s << " s budget ran out before "
              << absl::StrJoin(cut, ", ") << "; the plan is the best found by then "
              << "(raise --budget-s to search them)\n";
  }
  const search::ParallelPlanRow& chosen = r->rows[r->chosen];
  // Config kinds no row was offered (no per-device program runs them
  // exactly): every row's pass drops the same kinds, each row lists them.
  std::vector<search::DroppedConfigKind> dropped;
  for (const search::ParallelPlanRow& row : r->rows)
    for (const search::DroppedConfigKind& d : row.strategy.result.dropped)
      if (std::none_of(dropped.begin(), dropped.end(), [&](const search::DroppedConfigKind& x) {
            return x.op_kind == d.op_kind && x.config_kind == d.config_kind;
          }))
        dropped.push_back(d);
  nlohmann::json parallel = search::ParallelPlanJson(*global, chosen, c.cluster);
  nlohmann::json dropped_json = nlohmann::json::array();
  for (const search::DroppedConfigKind& d : dropped)
    dropped_json.push_back(
        {{"op_kind", d.op_kind}, {"config_kind", d.config_kind}, {"ops", d.ops}, {"why", d.why}});
  // A pipeline plan's stages are not fused yet: no groups or buckets.
  nlohmann::json plan_json = chosen.pipeline
                                 ? search::PlanToJson(r->training, search::Plan{})
                                 : search::PlanToJson(r->training, r->fusion.plan);
  // Every row's simulated time: what `braid run --plan` measures each
  // strategy against.
  parallel["strategies"] = search::ParallelStrategyRowsJson(*r);
  plan_json["parallel"] = parallel;
  // The per-device program every rank of the plan runs (graph/program.h),
  // or why the lowering cannot make one: in plan files.
  if (!chosen.pipeline && !a.out_path.empty()) {
    absl::StatusOr<graph::Program> prog = search::PlanRowProgram(*global, *r, r->chosen, o);
    if (prog.ok()) {
      plan_json["program"] = graph::ProgramToJson(*prog);
    } else {
      plan_json["program_error"] = std::string(prog.status().message());
      if (!a.common.json) std::cerr << "braid: no per-device program: " << prog.status().message() << "\n";
    }
  }
  // The data-parallel row: what the speed-ups are against.
  const search::ParallelPlanRow* dp = nullptr;
  for (const search::ParallelPlanRow& row : r->rows)
    if (row.strategy.name == "data_parallel" && row.fused_status.ok()) dp = &row;
  auto gib = [](int64_t b) { return static_cast<double>(b) / (int64_t{1} << 30); };
  if (!a.out_path.empty()) {
    nlohmann::json file = plan_json;
    absl::StatusOr<std::string> fp = graph::FingerprintHex(r->training);
    if (!fp.ok()) return ReportError(fp.status());
    // The groups and buckets name the per-device training graph's ops and
    // gradients; its fingerprint is the one recorded.
    file["graph_fingerprint"] = *fp;
    file["cluster"] = c.cluster.name;
    file["ranks"] = c.cluster.num_ranks;
    // The prediction of what the ranks run: the program's simulation where
    // the row has a program, else the per-device graph's.
    file["predicted_iteration_s"] = chosen.program_status.ok() ? chosen.program_s : chosen.simulated_s;
    file["predicted_by"] = chosen.program_status.ok() ? "program simulation" : "simulator";
    if (chosen.pipeline) file.erase("graph_fingerprint");
    if (absl::Status s = WritePlanFile(a.out_path, file.dump(1) + "\n"); !s.ok()) return ReportError(s);
  }
  if (a.common.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const search::ParallelPlanRow& row : r->rows) {
      nlohmann::json j = {{"strategy", row.strategy.name},
                          {"description", row.strategy.description},
                          {"has_plan", row.strategy.has_plan},
                          {"status", row.strategy.status.ok()
                                         ? std::string("ok")
                                         : std::string(row.strategy.status.message())},
                          {"dp_iteration_ms", Ms(row.strategy.result.time_s)},
                          {"memory_per_device_bytes", row.strategy.result.memory.total_bytes},
                          {"search_seconds", row.strategy.search_s}};
      if (row.program_status.ok()) {
        j["program_ms"] = Ms(row.program_s);
        j["program_sources"] = costmodel::KernelSourcesJson(row.program_sources);
      } else if (row.fused_status.ok()) {
        j["no_program"] = std::string(row.program_status.message());
      }
      if (row.fused_status.ok()) {
        j["iteration_ms"] = Ms(row.simulated_s);
        j["compute_ms"] = Ms(row.compute_s);
        j["comm_ms"] = Ms(row.comm_s);
        j["data_degree"] = row.data_degree;
        j["model_degree"] = row.model_degree;
        j["mixed_data_degrees"] = row.mixed_data_degrees;
        if (dp != nullptr) j["speedup_vs_data_parallel"] = dp->simulated_s / row.simulated_s;
      } else {
        j["not_fused"] = std::string(row.fused_status.message());
      }
      rows.push_back(std::move(j));
    }
    nlohmann::json j = {{"model", c.forward.name()},
                        {"cluster", c.cluster.name},
                        {"ranks", c.cluster.num_ranks},
                        {"strategies", rows},
                        {"chosen", chosen.strategy.name},
                        {"chosen_by", r->chosen_by},
                        {"global_batch", graph::ModelBatch(*global)},
                        {"substitution_graphs", r->substitution_graphs},
                        {"search_seconds", r->fusion.stats.elapsed_s},
                        {"plan", plan_json}};
    j["dropped_configs"] = dropped_json;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat(
      "model %s on %s (%d devices of %.0f GiB), global batch %d, parallel plans\n\n",
      c.forward.name(), c.cluster.name, c.cluster.num_ranks, gib(c.cluster.device.memory_bytes),
      graph::ModelBatch(*global));
  // Each row's program (what the ranks run) simulated, beside the per-device
  // graph's iteration the fusion search optimised.
  const bool by_program = r->chosen_by == "program simulation";
  std::cout << absl::StrFormat("%-18s %9s %12s %12s %12s %10s %10s %8s  %s\n", "strategy", "D x M",
                               "program ms", "iteration ms", "(DP est. ms)", "comm ms", "GiB/dev",
                               "vs data", "");
  for (const search::ParallelPlanRow& row : r->rows) {
    const search::StrategyRow& s = row.strategy;
    const std::string mem = s.has_plan ? absl::StrFormat("%.2f", gib(s.result.memory.total_bytes)) : "-";
    const std::string dpest = s.has_plan ? absl::StrFormat("%.3f", Ms(s.result.time_s)) : "-";
    const std::string program =
        row.program_status.ok() ? absl::StrFormat("%.3f", Ms(row.program_s)) : "-";
    if (row.fused_status.ok()) {
      // Speed-ups by the figure that chose: programs on these ranks.
      auto time_of = [&](const search::ParallelPlanRow& x) {
        return by_program && x.program_status.ok() ? x.program_s : x.simulated_s;
      };
      const std::string vs =
          dp != nullptr && (!by_program || (dp->program_status.ok() && row.program_status.ok()))
              ? absl::StrFormat("%.2fx", time_of(*dp) / time_of(row))
              : "-";
      std::string note = &row != &chosen              ? ""
                         : r->chosen_by == "request" ? "chosen (--strategy)"
                                                     : "chosen";
      if (!row.program_status.ok() && !row.pipeline)
        note = absl::StrCat(note, note.empty() ? "" : "; ", "no program: ", row.program_status.message());
      std::cout << absl::StrFormat("%-18s %9s %12s %12.3f %12s %10.3f %10s %8s  %s\n", s.name,
                                   absl::StrCat(row.mixed_data_degrees ? "<=" : "",
                                                row.data_degree, " x ", row.model_degree),
                                   program, Ms(row.simulated_s), dpest, Ms(row.comm_s), mem, vs,
                                   note);
    } else {
      std::cout << absl::StrFormat("%-18s %9s %12s %12s %12s %10s %10s %8s  %s\n", s.name, "-", "-",
                                   "-", dpest, "-", mem, "-", std::string(row.fused_status.message()));
    }
  }
  std::cout << absl::StrFormat(
      "\nchosen               %s: %s\n"
      "per device           %s (device %.0f GiB)\n"
      "%s\n"
      "fusion search        %.1f s, stopped by %s\n"
      "substitutions        %d graphs costed%s\n",
      absl::StrCat(chosen.strategy.name, r->chosen_by == "request" ? " (--strategy)" : ""),
      chosen.strategy.description, search::DeviceMemoryString(chosen.strategy.result.memory),
      gib(c.cluster.device.memory_bytes),
      chosen.pipeline
          ? absl::StrFormat("pipeline             %d stages x %d micro-batches (1F1B), bubble "
                            "%.1f%%; stages not fused (the plan file has no groups or buckets)",
                            chosen.pipeline->stages, chosen.pipeline->micro_batches,
                            100 * chosen.pipeline->timing.bubble_fraction)
          : absl::StrFormat("plan                 %d forward collectives, %d fused kernels, %d "
                            "gradient buckets over %d ranks",
                            chosen.forward_collectives, chosen.fused_kernels, chosen.buckets,
                            chosen.data_degree),
      r->fusion.stats.elapsed_s,
      r->fusion.stats.stop_reason, r->substitution_graphs,
      r->substitution_status.ok()
          ? (r->substitution_graphs == 0 ? " (no algebraic rule applies)" : "")
          : absl::StrCat(" (", r->substitution_status.message(), ")"));
  for (const search::DroppedConfigKind& d : dropped)
    std::cout << absl::StrFormat("not offered          %s %s splits (%d ops): %s\n", d.op_kind,
                                 d.config_kind, d.ops, d.why);
  if (!chosen.overlaps.empty()) {
    int decomposed = 0;
    double gain = 0;
    for (const search::OverlapChoice& o : chosen.overlaps) {
      if (o.method != costmodel::OverlapMethod::kNone) ++decomposed;
      gain += o.gain_s();
    }
    std::cout << absl::StrFormat(
        "overlap              %d tensor-parallel pairs, %d overlapped, %.3f ms predicted gain "
        "per device (plan file: parallel.overlap; `plan explain` lists each)\n",
        static_cast<int>(chosen.overlaps.size()), decomposed, Ms(gain));
  }
  if (chosen.program_status.ok()) {
    std::cout << absl::StrFormat("program costs        %s\n",
                                 costmodel::KernelSourcesLine(chosen.program_sources));
  }
  if (search::ExecutesOnLocalRanks(c.cluster)) {
    std::cout << absl::StrFormat(
        "chosen by            %s%s\n", r->chosen_by,
        by_program ? " (these ranks run the programs: `braid run --plan` trains one, and "
                     "`braid run --plan --profile` clocks its ops into the store)"
        : r->program_status.ok() ? ""
                                 : absl::StrCat(" (no row has a program: ", r->program_status.message(), ")"));
  }
  std::cout << "D x M: data x model degree (<=D: ops mix data degrees, D the largest); "
               "pipeline:S rows: the DP's stage costs through the 1F1B schedule; program ms: "
               "the simulator's, per device, on the program the ranks run (its groups fused, "
               "its buckets overlapped with backward); iteration ms: on the fused per-device "
               "graph the fusion search optimised; DP est.: the machine-mapping DP's sum\n";
  return 0;
}

}  // namespace

absl::Status WritePlanFile(const std::string& path, const std::string& text) {
  RETURN_IF_ERROR(WriteFile(path, text));
  absl::StatusOr<std::string> secret = LoadPlanSecret("");
  if (absl::IsNotFound(secret.status())) return absl::OkStatus();
  if (!secret.ok()) return secret.status();
  return WriteFile(path + ".hmac", HmacSha256Hex(*secret, text) + "\n");
}

void RegisterSimulateCommand(CLI::App& app, CommandResult& result) {
  auto a = std::make_shared<SimulateArgs>();
  CLI::App* c = app.add_subcommand("simulate", "Simulate one training iteration of a model on a cluster");
  AddCommon(c, a->common);
  c->add_option("--plan", a->plan_path, "plan JSON (from braid plan -o); default: no fusion");
  c->add_option("--trace", a->trace_path, "write a Chrome trace-event JSON of the iteration");
  c->callback([a, &result] { result.exit_code = RunSimulate(*a); });
}

void RegisterPlanCommands(CLI::App& app, CommandResult& result, const CliContext& ctx) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* c = app.add_subcommand("plan", "Search joint op and tensor fusion; compare with the baselines");
  AddCommon(c, a->common);
  // The service's limits (server/strategy_api.h explains them).
  c->add_option("--alpha", a->alpha, "prune candidates above alpha x best")
      ->check(CLI::Range(1.0, server::kMaxAlpha));
  c->add_option("--beta", a->beta, "at most beta applications per method and step")
      ->check(CLI::Range(1, server::kMaxBeta));
  c->add_option("--budget-s", a->budget_s, "time budget in seconds, baselines included")
      ->check(CLI::PositiveNumber & CLI::Range(0.0, server::kMaxBudgetS));
  c->add_option("--seed", a->seed, "random seed (same seed, same plan)");
  c->add_option("--patience", a->patience, "stop after this many steps without a better plan")
      ->check(CLI::Range(1, server::kMaxPatience));
  c->add_option("--threads", a->threads, "candidate-evaluation threads")->check(CLI::Range(1, 256));
  c->add_option("-o,--output", a->out_path, "write the plan JSON here");
  c->add_option("--op-fusion", a->op_fusion,
                "off: buckets only, for a runtime that runs every op as its own kernel "
                "(braid.torch in PyTorch eager mode); baselines that fuse ops are left out")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  c->add_flag("--parallel", a->parallel,
              "choose the parallelization too (data, tensor, pipeline, expert strategies; "
              "Unity's DP), then op fusion and buckets on each strategy's per-device graph; "
              "the model is planned at the global batch, --batch x ranks");
  c->add_option("--strategy", a->strategy_row,
                "with --parallel: write the plan of this strategy row (data_parallel, "
                "expert:megatron, expert:dlrm, braid, braid:all-devices, braid:substituted, "
                "pipeline:S) instead of the fastest; every row is still searched and printed. "
                "A row the table lacks or that has no plan (over memory...) is an error "
                "naming the rows");
  c->add_flag("--sync-batchnorm", a->sync_batch_norm,
              "--parallel: the plan file's program normalizes training-mode BatchNorm with the "
              "statistics of the whole batch (SyncBN: sums all-reduced over the data group) "
              "instead of each shard's own, as DDP without SyncBN does");
  c->add_flag("--no-pipeline", a->no_pipeline,
              "with --parallel: search no pipeline rows, so none is chosen (braid run executes "
              "data- and tensor-parallel plans only)");
  auto sign = std::make_shared<SignArgs>();
  CLI::App* sc = c->add_subcommand(
      "sign", "write FILE.hmac: the plan file's HMAC-SHA256 under the ranks' shared plan secret, "
              "which braid-worker activate checks on every rank");
  sc->add_option("file", sign->path, "plan JSON")->required();
  sc->add_option("--secret-file", sign->secret_file,
                 "the secret (default: $BRAID_PLAN_SECRET_FILE, then $BRAID_PLAN_SECRET)");
  sc->callback([sign, &result] { result.exit_code = RunSign(*sign); });
  c->callback([c, a, &result, &ctx] {
    if (!c->get_subcommands().empty()) return;  // `braid plan get|explain|sign` ran instead
    if (!a->parallel && (!a->strategy_row.empty() || a->no_pipeline)) {
      result.exit_code = ReportError(absl::InvalidArgumentError(
          absl::StrCat(a->no_pipeline ? "--no-pipeline" : "--strategy",
                       " chooses among the strategy rows of --parallel; add --parallel")));
      return;
    }
    if (!a->strategy_row.empty()) {
      absl::Status s = search::CheckStrategyRowName(a->strategy_row);
      if (s.ok() && a->no_pipeline && search::IsPipelineRowName(a->strategy_row)) {
        s = absl::InvalidArgumentError(absl::StrCat(
            a->strategy_row, " is a pipeline row; --no-pipeline leaves those out"));
      }
      if (!s.ok()) {
        result.exit_code = ReportError(
            absl::Status(s.code(), absl::StrCat("--strategy: ", s.message())));
        return;
      }
    }
    // The GNN estimator links LibTorch: where one is trained for the
    // cluster's device kind, `braid` hands the search to braid-torch.
    if (ctx.embedded_worker == nullptr && a->common.estimator == "auto" &&
        a->common.db != "none") {
      absl::StatusOr<costmodel::ClusterSpec> cluster = costmodel::LoadCluster(a->common.cluster);
      if (cluster.ok() && costmodel::GnnCheckpointPathFor(cluster->device.kind).has_value()) {
        result.exit_code = RunInTorchBinary(ctx);
        return;
      }
    }
    result.exit_code = a->parallel ? RunParallelPlan(*a, ctx) : RunPlan(*a);
  });
}

}  // namespace braid::client
