// `braid run <model>`: measures real data-parallel training iterations on this
// machine with the timing executor (worker/executor.h) and compares them with
// the simulator's prediction for the same bucket assignment, strategy by
// strategy:
//
//  after_backward  one flat bucket of every gradient (production order),
//                  started only once the whole backward pass has run (the
//                  naive "flatten and allreduce after backward" baseline);
//                  simulated with the comm task depending on every backward
//                  task.
//  ddp             the buckets of the ddp baseline (search/baselines.h), each
//                  started as soon as its gradients are ready.
//  plan            a braid plan (--plan): its buckets, and its fusion groups
//                  run as fused kernels by braid's CPU fused executor
//                  (worker/fused_kernels.h);
//  plan_unfused    the same buckets with every op run separately;
//  fusion gain     (with --plan) two compute-only strategies, the plan's ops
//                  unfused and fused: the measured fusion gain is the paired
//                  per-iteration difference (median and 95% confidence
//                  interval), the predicted one the simulated compute-time
//                  difference.
//
// A parallel plan file that carries its per-device program (`braid plan
// MODEL --parallel -o P`) runs that program on braid-rank ranks, braid's
// runtime (worker/program_ranks.h): its fusion groups fused, its buckets as
// one AllReduce each, ranks bound to cores (--pin-cores), with --vs-plan Q
// another plan's program interleaved round by round and their paired
// per-round difference; each with its median step, 95% confidence interval
// and the plan file's predicted_iteration_s.
//
//   braid plan tests/data/mlp8x1024_opset14.onnx --parallel --cluster cpu-local --ranks 2 \
//       --strategy data_parallel -o dp.json
//   braid run tests/data/mlp8x1024_opset14.onnx --plan plan.json --vs-plan dp.json --ranks 2
//
// With --profile the ranks clock every op and fusion group inside the timed
// steps, and those times go into the profile store (--db) under this
// machine's device kind: a later run's program simulation, and `braid plan`,
// price the same ops from them. A pipeline plan (no program yet) runs
// instead on braid-parallel-rank ranks (worker/parallel_train.h): the plan becomes the
// spec the ranks execute (client/parallel_plan_exec.h, verified op by op;
// a plan the executor cannot run exactly is refused, naming the op), and
// the data-parallel spec of the same model runs beside it as the baseline,
// interleaved round by round on the same ranks. Each prints its measured
// median step with a 95% confidence interval next to the plan file's
// prediction (chosen: predicted_iteration_s; data_parallel: its row of the
// strategy table when the file has one).
//
//   braid-parallel-measure --model mlp --write-model mlp.txt
//   braid plan mlp.txt --parallel --cluster cpu-local --ranks 2 -o plan.json
//   braid run mlp.txt --plan plan.json --ranks 2 --rounds 3 --iters 10
//
// The executor runs the compute ops in the order the simulator started them
// (compute tasks sorted by start time), so both schedule the same sequence.
// Predictions use the profile store (`braid profile <model> --device cpu
// --ranks N` and `braid profile comm --ranks N` on the same --db).
#include <algorithm>
#include <cmath>
#include <limits>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/bounded_json.h"
#include "base/stats.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "client/cli.h"
#include "client/planning.h"
#include "costmodel/comm_model.h"
#include "costmodel/simulator.h"
#include "search/baselines.h"
#include "search/lowering.h"
#include "search/plan.h"
#include "worker/executor.h"
#include "graph/model_source.h"
#include "worker/graph_profiler.h"
#include "client/parallel_plan_exec.h"
#include "worker/program_ranks.h"
#include "worker/rank_processes.h"
#include "worker/runtime/checkpoint.h"
#include "graph/fingerprint.h"
#include "graph/program.h"
#include "search/program_lowering.h"
#include "search/program_sim.h"
#include "client/parallel_spec_graph.h"
#include "worker/parallel_train.h"
#include "worker/timing.h"

namespace braid::client {
namespace {

struct RunArgs {
  std::string model;
  int ranks = 2;
  int batch = 0;
  std::string optimizer = "sgd";
  std::string plan_path;
  std::string vs_plan_path;
  std::vector<std::string> also_plan_paths;  // program plans run interleaved too
  int iterations = 10;
  int warmup = 3;
  int rounds = 3;  // parallel plans: interleaved RunParallelTraining rounds
  bool pin_cores = true;  // parallel plans: ranks bound to cores
  std::string db;
  bool json = false;
  bool diagnose = false;
  bool profile = false;
  std::string estimator = "auto";
  bool check = false;  // --check: numerics against a world-1 run
  int steps = 5;       // --check: training steps
  bool no_dropout = false;  // --check: Dropout is the identity
  bool float64 = false;     // --check: float32 tensors held and computed in float64
};

// The model on this machine's ranks (cpu-local at --ranks), with the run's
// batch, optimizer, profile store and estimator.
PlanningRequest LocalPlanningRequest(const RunArgs& a) {
  PlanningRequest req;
  req.model = a.model;
  req.cluster = "cpu-local";
  req.ranks = a.ranks;
  req.batch = a.batch;
  req.optimizer = a.optimizer;
  req.db = a.db;
  req.estimator = a.estimator;
  return req;
}

struct Candidate {
  std::string name;
  search::Plan plan;  // groups run fused
  bool after_backward = false;
  bool compute_only = false;  // diagnostics: comm tasks take no time
  costmodel::SimResult sim;
  std::vector<graph::OpId> order;
  // With a fused-op estimator in use: the same plan predicted with the
  // corrected roofline for its unmeasured fused kernels instead.
  std::optional<double> roofline_iteration_s;
};

absl::StatusOr<search::Plan> ReadPlan(const std::string& path, const graph::Graph& g) {
  ASSIGN_OR_RETURN(nlohmann::json j, base::ReadBoundedJsonFile(path, base::kPlanJsonLimits));
  if (j.is_object() && j.contains("plan")) {  // `braid plan --json` output too
    nlohmann::json inner = std::move(j["plan"]);
    j = std::move(inner);
  }
  if (j.contains("parallel") && j["parallel"].is_object()) {
    // RunRun sends parallel plans to RunParallelRun before reading plans;
    // here only as --vs-plan, which compares data-parallel plans.
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": a parallel plan (", j["parallel"].value("strategy", std::string("?")),
        "): --vs-plan compares data-parallel plans; run a parallel plan with --plan"));
  }
  auto p = search::PlanFromJson(g, j);
  if (!p.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::string(p.status().message())));
  }
  return p;
}

// Lowers and simulates `c.plan`; for after_backward, every comm task also
// waits for every backward compute task. Fills c.sim and c.order.
absl::Status Predict(const graph::Graph& g, costmodel::CostModel& cm, Candidate& c) {
  ASSIGN_OR_RETURN(auto sg, search::Lower(g, c.plan, cm));
  if (c.after_backward) {
    std::vector<int> backward;
    for (int t = 0; t < static_cast<int>(sg.tasks.size()); ++t) {
      const costmodel::SimTask& task = sg.tasks[t];
      if (task.kind != costmodel::TaskKind::kCompute) continue;
      for (int32_t op : task.op_ids) {
        if (g.op(op).phase == graph::Phase::kBackward) {
          backward.push_back(t);
          break;
        }
      }
    }
    for (costmodel::SimTask& task : sg.tasks) {
      if (task.kind != costmodel::TaskKind::kComm) continue;
      task.deps.insert(task.deps.end(), backward.begin(), backward.end());
    }
  }
  if (c.compute_only) {  // no collectives and no bucket packing (tasks without graph ops)
    for (costmodel::SimTask& task : sg.tasks) {
      if (task.kind == costmodel::TaskKind::kComm || task.op_ids.empty()) task.duration_s = 0;
    }
  }
  c.sim = costmodel::Simulate(sg);
  c.order = ComputeOrder(g, sg, c.sim, &c.plan);
  return absl::OkStatus();
}

std::vector<graph::TensorId> AllGradients(const search::Plan& no_fusion) {
  std::vector<graph::TensorId> all;
  for (const search::Bucket& b : no_fusion.buckets) all.insert(all.end(), b.grads.begin(), b.grads.end());
  return all;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return in ? absl::StrCat(a, " ", b, " ", c) : "unknown";
}

double Ms(double s) { return s * 1e3; }

// The whole plan file when it holds a parallel plan (`braid plan --parallel
// -o` or its --json output, the plan under "plan"); nullopt for any other
// JSON file, which ReadPlan then reads (and reports, when it is no plan).
// A file that is missing, out of bounds (base/bounded_json.h) or not JSON
// is an error here, before the model is loaded.
absl::StatusOr<std::optional<nlohmann::json>> ReadParallelPlanFile(const std::string& path) {
  ASSIGN_OR_RETURN(nlohmann::json j, base::ReadBoundedJsonFile(path, base::kPlanJsonLimits));
  const bool parallel =
      j.is_object() && ((j.contains("parallel") && j["parallel"].is_object()) ||
                        (j.contains("plan") && j["plan"].is_object() &&
                         j["plan"].contains("parallel") && j["plan"]["parallel"].is_object()));
  if (!parallel) return std::optional<nlohmann::json>();
  return std::optional<nlohmann::json>(std::move(j));
}

// The model at the global batch (per-rank batch x ranks), as `braid plan
// --parallel` plans it; a model with a fixed batch (a braid text graph)
// keeps it, the plan having taken it as the global batch.
absl::StatusOr<graph::Graph> GlobalForward(const RunArgs& a) {
  std::vector<std::string> warnings;
  graph::LoadOptions lo;
  lo.batch = a.batch;
  ASSIGN_OR_RETURN(graph::Graph g, graph::LoadModel(a.model, lo, &warnings));
  const int64_t per_rank = graph::ModelBatch(g);
  if (per_rank <= 0) return g;
  lo.batch = static_cast<int>(per_rank * a.ranks);
  return graph::LoadModel(a.model, lo, &warnings);
}

std::string SpecString(const worker::ParallelTrainSpec& s) {
  std::string out = absl::StrFormat("data %d x model %d", s.data_degree, s.model_degree);
  if (!s.transformer.has_value()) {
    std::vector<std::string> k;
    for (const worker::LayerParallel& l : s.layers) k.emplace_back(worker::LayerParallelName(l.kind));
    absl::StrAppend(&out, ", Linears ", absl::StrJoin(k, ","));
  } else if (s.model_degree > 1) {
    absl::StrAppend(&out, ", Megatron");
  }
  if (s.pipeline_stages > 1) {
    absl::StrAppend(&out, ", ", s.pipeline_stages, " stages at ", s.transformer ? "block" : "layer",
                    "s {", absl::StrJoin(s.stage_begin, ","), "}, ", s.micro_batches,
                    " micro-batches ",
                    s.schedule == worker::ParallelTrainSpec::PipelineSchedule::k1F1B ? "1F1B" : "GPipe");
    std::vector<std::string> relu_first;
    for (size_t k = 0; k < s.stage_relu_first.size(); ++k)
      if (s.stage_relu_first[k]) relu_first.push_back(absl::StrCat(k));
    if (!relu_first.empty()) {
      absl::StrAppend(&out, ", stage ", absl::StrJoin(relu_first, ","),
                      " starting at the previous Linear's ReLU");
    }
  }
  if (s.loss_rows_split) absl::StrAppend(&out, ", last output split by rows for the loss");
  return out;
}

bool SameExecution(const worker::ParallelTrainSpec& a, const worker::ParallelTrainSpec& b) {
  if (a.data_degree != b.data_degree || a.model_degree != b.model_degree ||
      a.pipeline_stages != b.pipeline_stages || a.layers.size() != b.layers.size()) {
    return false;
  }
  for (size_t i = 0; i < a.layers.size(); ++i)
    if (a.layers[i].kind != b.layers[i].kind) return false;
  return a.pipeline_stages == 1;
}

// The plan file's predicted iteration of a strategy: the chosen one's
// predicted_iteration_s (or its section's simulated / pipeline time); any
// row from the strategy table when the file has one (--json output): its
// program's simulation where it has one.
std::optional<double> PredictedSeconds(const nlohmann::json& file, const nlohmann::json& par,
                                       const std::string& strategy) {
  const nlohmann::json* table = nullptr;
  if (file.contains("strategies") && file["strategies"].is_array()) table = &file["strategies"];
  if (file.contains("parallel") && file["parallel"].contains("strategies") &&
      file["parallel"]["strategies"].is_array()) {
    table = &file["parallel"]["strategies"];
  }
  if (strategy == par.value("strategy", std::string())) {
    if (file.contains("predicted_iteration_s") && file["predicted_iteration_s"].is_number())
      return file["predicted_iteration_s"].get<double>();
    for (const char* k : {"simulated_iteration_ms", "iteration_ms"})
      if (par.contains(k) && par[k].is_number()) return par[k].get<double>() / 1e3;
  }
  if (table != nullptr) {
    for (const nlohmann::json& row : *table) {
      if (row.value("strategy", std::string()) != strategy) continue;
      // What the ranks run, simulated, where the row has a program.
      for (const char* k : {"program_ms", "iteration_ms", "predicted_iteration_ms"})
        if (row.contains(k) && row[k].is_number()) return row[k].get<double>() / 1e3;
      if (row.contains("predicted_iteration_s") && row["predicted_iteration_s"].is_number())
        return row["predicted_iteration_s"].get<double>();
    }
  }
  return std::nullopt;
}

// A pipeline plan's section (search::ParallelPlanJson) has its stages: a
// "stage_plan" and "stages" >= 2; its strategy row is "pipeline:S".
bool IsPipelinePlan(const nlohmann::json& par) {
  const nlohmann::json* stages = par.contains("stages") ? &par["stages"] : nullptr;
  return par.contains("stage_plan") || (stages != nullptr && stages->is_number() && *stages != 1) ||
         absl::StartsWith(par.value("strategy", std::string()), "pipeline:");
}

// A strategy's row of `braid run --plan` for a parallel plan: its measured
// steps (median, 95% interval, every step) and, where the plan file had one,
// its prediction with the error against the measured median.
nlohmann::json MeasuredRow(const std::string& name, const std::string& spec,
                           const std::vector<double>& steps_s, const std::vector<double>& loss,
                           const std::optional<double>& predicted_s) {
  const MedianInterval ci = MedianConfidenceInterval(steps_s);
  std::vector<double> all_ms;
  for (double t : steps_s) all_ms.push_back(Ms(t));
  nlohmann::json row = {{"strategy", name},
                        {"spec", spec},
                        {"measured_ms", Ms(ci.median)},
                        {"measured_ci95_ms", {Ms(ci.low), Ms(ci.high)}},
                        {"measured_interval", IntervalName(ci)},
                        {"measured_interval_text", FormatInterval(ci, 1e3, 2)},
                        {"measured_all_ms", all_ms},
                        {"loss", loss},
                        {"predicted_ms", nullptr}};
  if (predicted_s.has_value()) {
    row["predicted_ms"] = Ms(*predicted_s);
    row["error"] = (*predicted_s - ci.median) / ci.median;
    row["prediction_in_ci"] = *predicted_s >= ci.low && *predicted_s <= ci.high;
  }
  return row;
}

// The text table's cells of such a row.
struct RowCells {
  std::string predicted, measured, error, loss;
};
RowCells CellsOf(const nlohmann::json& r) {
  const std::vector<double> loss = r["loss"].get<std::vector<double>>();
  return {r["predicted_ms"].is_null() ? std::string("n/a")
                                      : absl::StrFormat("%.2f", r["predicted_ms"].get<double>()),
          absl::StrFormat("%.2f %s", r["measured_ms"].get<double>(),
                          r["measured_interval_text"].get<std::string>()),
          r.contains("error") ? absl::StrFormat("%+.0f%%", 100 * r["error"].get<double>())
                              : std::string("-"),
          loss.empty() ? std::string("-") : absl::StrFormat("%.6g", loss.front())};
}

// FailedPrecondition unless `p` was lowered from `forward` (MODEL at the
// global batch).
absl::Status CheckModelFingerprint(const std::string& path, const std::string& model,
                                   const graph::Graph& forward, const graph::Program& p) {
  ASSIGN_OR_RETURN(std::string fp, graph::FingerprintHex(forward));
  if (fp != p.model_fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": its program is of model fingerprint ", p.model_fingerprint, ", ", model,
        " at the global batch is ", fp, " (another model or batch, or a plan of a rewritten graph)"));
  }
  return absl::OkStatus();
}

int RunProgramPlan(const RunArgs& a, const nlohmann::json& file);

// `braid run MODEL --plan P` of a parallel plan file (see the top).
int RunParallelRun(const RunArgs& a, const nlohmann::json& file) {
  const nlohmann::json& par = file.contains("parallel") ? file["parallel"] : file["plan"]["parallel"];
  // A plan that carries its per-device program runs it on braid-rank ranks
  // (the runtime).
  const nlohmann::json& holder = file.contains("program") || !file.contains("plan") ? file : file["plan"];
  if (!IsPipelinePlan(par) && holder.contains("program") && holder["program"].is_object()) {
    return RunProgramPlan(a, file);
  }
  // Pipelines (stages over micro-batches) do not run in braid's runtime yet.
  if (IsPipelinePlan(par)) {
    std::string name = "pipeline";
    if (par.contains("strategy") && par["strategy"].is_string())
      name = base::EscapeForDisplay(par["strategy"].get<std::string>().substr(0, 64));
    return ReportError(absl::FailedPreconditionError(absl::StrCat(
        a.plan_path, ": plan row '", name,
        "' is a pipeline plan; braid run executes data- and tensor-parallel plans only (choose "
        "another row with braid plan --parallel --strategy ROW or --no-pipeline)")));
  }
  if (!a.vs_plan_path.empty() || !a.also_plan_paths.empty() || a.diagnose) {
    return ReportError(absl::InvalidArgumentError(
        "--vs-plan, --also-plan and --diagnose are not for pipeline plans: a pipeline plan runs "
        "against the data-parallel spec of its model"));
  }
  // A pipeline row is priced by the DP's stage costs through its schedule,
  // not by a program's simulation: there is nothing to clock for it yet.
  if (a.profile) {
    return ReportError(absl::InvalidArgumentError(
        "--profile clocks the ops of a plan's per-device program (data- and tensor-parallel "
        "rows); a pipeline plan runs on braid-parallel-rank and has no program to price"));
  }
  absl::StatusOr<graph::Graph> g = GlobalForward(a);
  if (!g.ok()) return ReportError(g.status());
  absl::StatusOr<PlannedSpec> planned = ParallelSpecFromPlan(*g, par, a.ranks);
  if (!planned.ok()) {
    return ReportError(absl::Status(
        planned.status().code(), absl::StrCat(a.plan_path, ": ", planned.status().message())));
  }
  struct Strategy {
    std::string name;
    worker::ParallelTrainSpec spec;
    std::optional<double> predicted_s;
    std::vector<double> steps_s;  // timed steps of every round
    std::vector<double> round_median_s;
    std::vector<double> loss;     // round 0's per step
  };
  std::vector<Strategy> runs;
  const std::string chosen = planned->strategy.empty() ? "plan" : planned->strategy;
  runs.push_back({absl::StrCat("plan (", chosen, ")"), planned->spec,
                  PredictedSeconds(file, par, planned->strategy)});
  std::string baseline_note;
  absl::StatusOr<worker::ParallelTrainSpec> base = ExecutableModel(*g);
  if (!base.ok()) return ReportError(base.status());
  base->ranks = a.ranks;
  base->data_degree = a.ranks;
  if (absl::Status v = worker::ValidateParallelTrainSpec(*base); !v.ok()) {
    baseline_note = absl::StrCat("no data-parallel baseline: ", v.message());
  } else if (SameExecution(*base, planned->spec)) {
    baseline_note = "the plan is the data-parallel spec: no separate baseline";
  } else {
    runs.push_back({"data_parallel", *base, PredictedSeconds(file, par, "data_parallel")});
  }
  for (Strategy& s : runs) s.spec.steps = a.warmup + a.iterations;

  const std::string load_before = LoadAverage();
  for (int r = 0; r < a.rounds; ++r) {
    // The order rotates per round: neither strategy always runs first.
    for (size_t k = 0; k < runs.size(); ++k) {
      Strategy& s = runs[(k + static_cast<size_t>(r)) % runs.size()];
      worker::ParallelTrainOptions po;
      po.pin_cores = a.pin_cores;
      absl::StatusOr<worker::ParallelTrainResult> res = worker::RunParallelTraining(s.spec, po);
      if (!res.ok()) {
        return ReportError(absl::Status(res.status().code(),
                                        absl::StrCat(s.name, ": ", res.status().message())));
      }
      if (static_cast<int>(res->step_s.size()) != s.spec.steps) {
        return ReportError(absl::InternalError(absl::StrCat(
            s.name, ": ", res->step_s.size(), " step times for ", s.spec.steps, " steps")));
      }
      std::vector<double> t(res->step_s.begin() + a.warmup, res->step_s.end());
      s.steps_s.insert(s.steps_s.end(), t.begin(), t.end());
      s.round_median_s.push_back(Summarize(t).median_s);
      if (r == 0) s.loss = res->loss;
    }
  }
  const std::string load_after = LoadAverage();

  nlohmann::json rows = nlohmann::json::array();
  for (const Strategy& s : runs)
    rows.push_back(MeasuredRow(s.name, SpecString(s.spec), s.steps_s, s.loss, s.predicted_s));
  if (a.json) {
    nlohmann::json j = {{"model", g->name()},
                        {"global_batch", graph::ModelBatch(*g)},
                        {"ranks", a.ranks},
                        {"rounds", a.rounds},
                        {"iterations", a.iterations},
                        {"warmup", a.warmup},
                        {"plan_strategy", planned->strategy},
                        {"verified_ops", planned->verified_ops},
                        {"replicated_ops", planned->replicated},
                        {"not_executed", planned->not_executed},
                        {"load_before", load_before},
                        {"load_after", load_after},
                        {"strategies", rows}};
    if (!baseline_note.empty()) j["baseline_note"] = baseline_note;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat(
      "model %s, global batch %d, %d braid-parallel-rank ranks (Gloo on loopback)\n"
      "plan %s: %d ops run exactly as planned, %d replicated in the model group\n"
      "%d rounds x %d timed steps after %d warm-up, strategies interleaved per round; load "
      "average %s before, %s after\n\n",
      g->name(), graph::ModelBatch(*g), a.ranks, chosen, planned->verified_ops,
      static_cast<int>(planned->replicated.size()), a.rounds, a.iterations, a.warmup, load_before,
      load_after);
  std::cout << absl::StrFormat("%-24s %13s %28s %8s %12s  %s\n", "strategy", "predicted ms",
                               "measured ms [95% CI or range]", "error", "loss step 1", "spec");
  for (const nlohmann::json& r : rows) {
    const RowCells c = CellsOf(r);
    std::cout << absl::StrFormat("%-24s %13s %28s %8s %12s  %s\n", r["strategy"].get<std::string>(),
                                 c.predicted, c.measured, c.error, c.loss, r["spec"].get<std::string>());
  }
  if (!baseline_note.empty()) std::cout << "\n" << baseline_note << "\n";
  for (const Strategy& s : runs) {
    if (!s.predicted_s.has_value()) {
      std::cout << "\n" << s.name
                << ": no prediction in the plan file (the -o file records the chosen plan's; "
                   "`braid plan --parallel --json` output holds every row's)\n";
    }
  }
  for (const std::string& r : planned->replicated) std::cout << "replicated: " << r << "\n";
  for (const std::string& r : planned->not_executed) std::cout << "not executed: " << r << "\n";
  return 0;
}

// The plan file's per-device program ("program", at the top or under "plan")
// and its per-device memory prediction (-1 when the file has none).
struct PlanFileProgram {
  graph::Program program;
  int64_t predicted_memory_bytes = -1;
};
absl::StatusOr<PlanFileProgram> PlanProgram(const std::string& path) {
  ASSIGN_OR_RETURN(nlohmann::json j, base::ReadBoundedJsonFile(path, base::kPlanJsonLimits));
  const nlohmann::json* holder = &j;
  if (!j.contains("program") && j.contains("plan") && j["plan"].is_object()) holder = &j["plan"];
  if (!holder->contains("program") || !(*holder)["program"].is_object()) {
    std::string why = "no per-device program";
    if (holder->contains("program_error") && (*holder)["program_error"].is_string()) {
      why = absl::StrCat("no per-device program: ", (*holder)["program_error"].get<std::string>());
    } else if (holder->contains("parallel") && (*holder)["parallel"].is_object() &&
               (*holder)["parallel"].contains("pipeline")) {
      why = "a pipeline plan; braid run executes data- and tensor-parallel plans only";
    }
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", why, " (plans from `braid plan MODEL --parallel -o P` carry one)"));
  }
  absl::StatusOr<graph::Program> p = graph::ProgramFromJson((*holder)["program"]);
  if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", p.status().message()));
  PlanFileProgram out{*std::move(p)};
  if (holder->contains("parallel") && (*holder)["parallel"].is_object()) {
    const nlohmann::json& par = (*holder)["parallel"];
    if (par.contains("memory_per_device_bytes") && par["memory_per_device_bytes"].is_number_integer()) {
      out.predicted_memory_bytes = par["memory_per_device_bytes"].get<int64_t>();
    }
  }
  return out;
}

// The plan file's program checked against the ranks asked for and MODEL at
// the global batch (`forward`).
absl::Status CheckProgramFor(const RunArgs& a, const std::string& path, const graph::Graph& forward,
                             const graph::Program& p) {
  if (p.World() != a.ranks) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": parallel plan: planned for ", p.World(),
                                                   " devices, asked to run on ", a.ranks, " ranks"));
  }
  return CheckModelFingerprint(path, a.model, forward, p);
}

// The mean of per-round times (0 for none).
double MeanOf(const std::vector<double>& t) {
  return t.empty() ? 0.0 : std::accumulate(t.begin(), t.end(), 0.0) / static_cast<double>(t.size());
}

// The sum over a program's ops of their mean clocked time: what the clocks
// cover of a step.
double ClockedSeconds(const std::vector<std::vector<double>>& op_clock_s) {
  double sum = 0;
  for (const std::vector<double>& t : op_clock_s) sum += MeanOf(t);
  return sum;
}

// What StoreInStepClocks wrote.
struct InStepStored {
  int ops = 0;          // op and fused-group keys
  int collectives = 0;  // collective samples
  // Per program: the step time no clock holds, per compute node.
  std::vector<double> node_overhead_s;
};

// A program run's in-step clocks (per op, per round: the slowest rank's
// median) into `store` for the simulator: every compute op's and fusion
// group's mean time under this machine's device kind (ops by signature,
// groups by fused signature), and the time of every collective that
// nothing overlapped (the next node of the schedule reads it; a bucket
// counts at its starting member, its bytes all of its members') as samples
// of the communication model's fit for these ranks (CommProfileKey): per
// collective, group and size the mean over such ops of the least any rank
// waited in them (the rank that came last waits for the transfer alone).
absl::Status StoreInStepClocks(const graph::Program& program,
                               const std::vector<std::vector<double>>& op_clock_s, double step_s,
                               costmodel::ProfileStore& store, const costmodel::ClusterSpec& cluster,
                               InStepStored& stored) {
  if (op_clock_s.empty()) return absl::OkStatus();
  const graph::Graph& g = program.graph;
  ASSIGN_OR_RETURN(std::vector<std::vector<graph::OpId>> nodes, graph::ScheduleNodes(program));
  std::vector<int> node_of(g.num_ops(), -1);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (graph::OpId id : nodes[i]) node_of[id] = static_cast<int>(i);
  std::map<std::string, graph::OpId, std::less<>> by_name;
  for (graph::OpId id = 0; id < g.num_ops(); ++id) by_name[g.op(id).name] = id;
  // Buckets: their starting member (last in the schedule), members and bytes.
  std::map<graph::OpId, std::vector<graph::OpId>> bucket_at;
  std::set<graph::OpId> in_bucket;
  for (const std::vector<std::string>& names : program.buckets) {
    std::vector<graph::OpId> members;
    for (const std::string& n : names)
      if (auto it = by_name.find(n); it != by_name.end()) members.push_back(it->second);
    if (members.empty()) continue;
    const graph::OpId start = *std::max_element(members.begin(), members.end(), [&](graph::OpId x, graph::OpId y) {
      return node_of[x] < node_of[y];
    });
    bucket_at[start] = members;
    in_bucket.insert(members.begin(), members.end());
  }
  std::map<std::pair<std::string, std::string>, std::vector<double>> by_key;
  // Collectives of one kind, group and size: one sample, their mean (the
  // store keeps one per size).
  std::map<std::tuple<std::string, int, int64_t>, std::vector<double>> comm;
  int compute_nodes = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::vector<graph::OpId>& node = nodes[i];
    const graph::OpId clocked = node.back();  // a group's time is on its last member
    const graph::Op& op = g.op(clocked);
    if (!graph::IsCollectiveKind(op.kind)) {
      ++compute_nodes;
      const auto key = node.size() > 1
                           ? std::make_pair(std::string(costmodel::kFusedOp), costmodel::FusedSignature(g, node))
                           : std::make_pair(op.type, costmodel::OpSignature(g, clocked));
      by_key[key].push_back(MeanOf(op_clock_s[clocked]));
      continue;
    }
    if (in_bucket.contains(clocked) && !bucket_at.contains(clocked)) continue;  // counted at its start
    const std::vector<graph::OpId> members =
        bucket_at.contains(clocked) ? bucket_at[clocked] : std::vector<graph::OpId>{clocked};
    // Overlapped with nothing: the first reader of any of its results is
    // the next node.
    int first_reader = std::numeric_limits<int>::max();
    for (graph::OpId m : members)
      for (graph::OpId c : g.tensor(g.op(m).outputs[0]).consumers) first_reader = std::min(first_reader, node_of[c]);
    if (first_reader != static_cast<int>(i) + 1) continue;
    const int64_t group = op.GetInt("group_size", 1);
    if (group < 2) continue;
    ASSIGN_OR_RETURN(costmodel::Collective kind, search::CollectiveOf(op));
    int64_t bytes = 0;
    for (graph::OpId m : members)
      bytes += kind == costmodel::Collective::kAllGather ? g.tensor(g.op(m).outputs[0]).Bytes()
                                                         : g.tensor(g.op(m).inputs[0]).Bytes();
    comm[{std::string(costmodel::CollectiveName(kind)), static_cast<int>(group), bytes}].push_back(
        MeanOf(op_clock_s[clocked]));
  }
  for (const auto& [key, v] : comm) {
    const costmodel::CommSample sample{.collective = std::get<0>(key),
                                       .group_size = std::get<1>(key),
                                       .bytes = std::get<2>(key),
                                       .seconds = MeanOf(v)};
    if (!costmodel::ValidCommSample(sample) || sample.seconds <= 0) continue;
    RETURN_IF_ERROR(store.PutComm(costmodel::CommProfileKey(cluster), sample));
    ++stored.collectives;
  }
  if (compute_nodes > 0)
    stored.node_overhead_s.push_back(std::max(0.0, step_s - ClockedSeconds(op_clock_s)) / compute_nodes);
  for (const auto& [key, v] : by_key) {
    RETURN_IF_ERROR(store.Put({cluster.device.kind, key.first, key.second},
                              {.median_s = MeanOf(v), .spread_s = 0, .repetitions = static_cast<int>(v.size())}));
    ++stored.ops;
  }
  return absl::OkStatus();
}

// `braid run MODEL --plan P` of a plan carrying its per-device program: the
// program trained on braid-rank ranks (the runtime: its fusion groups run
// fused, its buckets as one AllReduce each), and with --vs-plan Q the other
// plan's program interleaved with it round by round on the same ranks.
int RunProgramPlan(const RunArgs& a, const nlohmann::json& file) {
  struct Strategy {
    std::string name, path;
    graph::Program program;
    std::optional<double> predicted_s;
    std::optional<search::ProgramSimulation> simulated;  // the program itself, simulated
    std::vector<double> steps_s, round_median_s, loss;
    int collectives = 0, groups_fused = 0, groups_unfused = 0;
    std::map<std::string, std::string> unfused_why;
    // --profile: per op (program order), per round, the slowest rank's
    // median clock (a collective's: the least waited).
    std::vector<std::vector<double>> op_clock_s;
  };
  if (a.diagnose) {
    return ReportError(absl::InvalidArgumentError("--diagnose is for data-parallel plans of the timing executor"));
  }
  // The file's prediction for the program's row (PredictedSeconds: the
  // chosen row's predicted_iteration_s, or the row of the strategy table).
  auto predicted = [](const nlohmann::json& f, const std::string& row) -> std::optional<double> {
    const nlohmann::json* par = nullptr;
    if (f.contains("parallel") && f["parallel"].is_object()) par = &f["parallel"];
    if (par == nullptr && f.contains("plan") && f["plan"].is_object() && f["plan"].contains("parallel"))
      par = &f["plan"]["parallel"];
    if (par == nullptr) return std::nullopt;
    if (std::optional<double> p = PredictedSeconds(f, *par, row)) return p;
    if (f.contains("plan") && f["plan"].is_object()) return PredictedSeconds(f["plan"], *par, row);
    return std::nullopt;
  };
  absl::StatusOr<graph::Graph> g = GlobalForward(a);
  if (!g.ok()) return ReportError(g.status());
  std::vector<Strategy> runs;
  std::vector<std::string> paths = {a.plan_path, a.vs_plan_path};
  paths.insert(paths.end(), a.also_plan_paths.begin(), a.also_plan_paths.end());
  for (const std::string& path : paths) {
    if (path.empty()) continue;
    absl::StatusOr<PlanFileProgram> pf = PlanProgram(path);
    if (!pf.ok()) return ReportError(pf.status());
    if (absl::Status s = CheckProgramFor(a, path, *g, pf->program); !s.ok()) return ReportError(s);
    Strategy s;
    s.path = path;
    s.program = std::move(pf->program);
    s.name = absl::StrCat(runs.empty() ? "plan (" : runs.size() == 1 && !a.vs_plan_path.empty() ? "vs-plan (" : "also-plan (",
                          s.program.row, ")");
    if (runs.empty()) {
      s.predicted_s = predicted(file, s.program.row);
    } else {
      absl::StatusOr<nlohmann::json> vf = base::ReadBoundedJsonFile(path, base::kPlanJsonLimits);
      if (vf.ok()) s.predicted_s = predicted(*vf, s.program.row);
    }
    runs.push_back(std::move(s));
  }
  // Each program simulated as it runs (search/program_sim.h), on this
  // machine's cost model: the profile store's measured op times (--db) where
  // it has them, else the estimator and priors.
  absl::StatusOr<std::unique_ptr<PlanningContext>> pc = Prepare(LocalPlanningRequest(a));
  if (!pc.ok()) return ReportError(pc.status());
  if (a.profile && (*pc)->store == nullptr) {
    return ReportError(absl::InvalidArgumentError("--profile: needs a profile store (--db)"));
  }
  for (Strategy& s : runs) {
    absl::StatusOr<search::ProgramSimulation> sim = search::SimulateProgram(s.program, *(*pc)->cost_model);
    if (!sim.ok()) {
      return ReportError(absl::Status(sim.status().code(),
                                      absl::StrCat(s.path, ": simulating its program: ", sim.status().message())));
    }
    s.simulated = *std::move(sim);
  }
  const std::string load_before = LoadAverage();
  for (int r = 0; r < a.rounds; ++r) {
    for (size_t k = 0; k < runs.size(); ++k) {
      Strategy& s = runs[(k + static_cast<size_t>(r)) % runs.size()];
      if (!a.json) {
        std::cerr << "braid: round " << r + 1 << "/" << a.rounds << ": " << s.name << ", "
                  << a.warmup + a.iterations << " steps on " << a.ranks << " braid-rank ranks\n";
      }
      absl::StatusOr<worker::ProgramRun> run = worker::TrainProgramOnRanks(
          s.program, {.steps = a.warmup + a.iterations, .dropout = true, .clock_ops = a.profile,
                      .warmup = a.warmup, .pin_cores = a.pin_cores,
                      .what = absl::StrCat("braid run: ", s.name)});
      if (!run.ok()) return ReportError(run.status());
      if (a.profile) {
        s.op_clock_s.resize(s.program.graph.num_ops());
        for (int op = 0; op < s.program.graph.num_ops(); ++op) {
          // A compute op's time: the slowest rank's, which is what the ranks
          // wait for at the next collective. A collective's: the least any
          // rank waited in it, the rank that came last, whose wait is the
          // transfer itself; the others' waits are that rank's lateness, which
          // the slowest ranks' compute times already carry.
          const bool collective = graph::IsCollectiveKind(s.program.graph.op(op).kind);
          double t = collective ? std::numeric_limits<double>::infinity() : 0.0;
          for (const std::vector<worker::ProgramOpClock>& rank : run->op_clocks) {
            if (op >= static_cast<int>(rank.size())) continue;
            t = collective ? std::min(t, rank[op].median_s) : std::max(t, rank[op].median_s);
          }
          s.op_clock_s[op].push_back(std::isfinite(t) ? t : 0.0);
        }
      }
      std::vector<double> t(run->step_s.begin() + a.warmup, run->step_s.end());
      s.steps_s.insert(s.steps_s.end(), t.begin(), t.end());
      s.round_median_s.push_back(Summarize(t).median_s);
      if (r == 0) {
        s.loss = run->losses;
        s.collectives = run->collectives.empty() ? 0 : run->collectives.back();
        s.groups_fused = run->groups_fused.empty() ? 0 : run->groups_fused.back();
        s.groups_unfused = run->groups_unfused.empty() ? 0 : run->groups_unfused.back();
        s.unfused_why = run->unfused_why;
      }
    }
  }
  const std::string load_after = LoadAverage();
  // --profile: every compute op's (and fusion group's) time clocked inside
  // the steps, stored under this machine's device kind for the simulator:
  // the next `braid run` or `braid plan` on this store prices these programs
  // (and every op of the same shape) from them.
  std::string profiled;
  if (a.profile) {
    InStepStored stored;
    for (const Strategy& s : runs) {
      absl::Status st = StoreInStepClocks(s.program, s.op_clock_s, Summarize(s.steps_s).median_s,
                                          *(*pc)->store, (*pc)->cluster, stored);
      if (!st.ok()) return ReportError(st);
    }
    const double per_node = MeanOf(stored.node_overhead_s);
    if (!stored.node_overhead_s.empty()) {
      absl::Status st = (*pc)->store->Put(
          {(*pc)->cluster.device.kind, costmodel::kRuntimeNodeOp, costmodel::kPerNodeSignature},
          {.median_s = per_node, .spread_s = 0, .repetitions = static_cast<int>(stored.node_overhead_s.size())});
      if (!st.ok()) return ReportError(st);
    }
    profiled = absl::StrFormat(
        "stored %d op and fused-group times, %d collective times and the runtime's %.1f us per "
        "compute node, clocked inside the steps (%s, device kind %s): the program sim of a later "
        "run or plan on this store prices these programs from them",
        stored.ops, stored.collectives, per_node * 1e6, a.db.empty() ? DefaultDatabasePath() : a.db,
        (*pc)->cluster.device.kind);
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const Strategy& s : runs) {
    const std::string spec = absl::StrFormat(
        "program of %d ranks, mesh [%s]: %d collectives/step, %d buckets, fusion groups %d fused / %d op by op",
        s.program.World(), absl::StrJoin(s.program.mesh, ","), s.collectives,
        static_cast<int>(s.program.buckets.size()), s.groups_fused, s.groups_unfused);
    nlohmann::json row = MeasuredRow(s.name, spec, s.steps_s, s.loss, s.predicted_s);
    row["plan_file"] = s.path;
    row["program_fingerprint"] = s.program.program_fingerprint;
    row["collectives_per_step"] = s.collectives;
    row["fusion_groups"] = {{"fused", s.groups_fused}, {"op_by_op", s.groups_unfused}};
    row["unfused_why"] = s.unfused_why;
    const costmodel::SimResult& sim = s.simulated->result;
    const double measured_s = row["measured_ms"].get<double>() / 1e3;
    row["program_simulated_ms"] = Ms(sim.iteration_s);
    row["program_simulated_compute_ms"] = Ms(sim.compute_s);
    row["program_simulated_comm_ms"] = Ms(sim.comm_s);
    row["program_simulated_error"] = (sim.iteration_s - measured_s) / measured_s;
    if (!s.op_clock_s.empty()) {
      // --profile: what the clocks cover of the step (the stored times'
      // sum; the rest is the runtime's own work between ops: loads of the
      // step's data, frees, the loss read back).
      row["clocked_ms"] = Ms(ClockedSeconds(s.op_clock_s));
    }
    if (!s.simulated->groups_note.empty()) row["program_simulated_unfused"] = s.simulated->groups_note;
    rows.push_back(std::move(row));
  }
  // Per round: the plan's median step minus each other plan's.
  auto paired_with = [&](size_t other) -> nlohmann::json {
    std::vector<double> d;
    for (size_t r = 0; r < runs[0].round_median_s.size(); ++r)
      d.push_back(runs[0].round_median_s[r] - runs[other].round_median_s[r]);
    const MedianInterval ci = MedianConfidenceInterval(d);
    return {{"median_ms", Ms(ci.median)},
            {"ci95_ms", {Ms(ci.low), Ms(ci.high)}},
            {"interval", IntervalName(ci)},
            {"interval_text", FormatInterval(ci, 1e3, 2)},
            {"rounds", d.size()}};
  };
  for (size_t i = 1; i < runs.size(); ++i) rows[i]["plan_minus_this"] = paired_with(i);
  const nlohmann::json paired = runs.size() >= 2 ? rows[1]["plan_minus_this"] : nlohmann::json();
  if (a.json) {
    nlohmann::json j = {{"model", g->name()},
                        {"global_batch", graph::ModelBatch(*g)},
                        {"ranks", a.ranks},
                        {"rounds", a.rounds},
                        {"iterations", a.iterations},
                        {"warmup", a.warmup},
                        {"runtime", "braid-rank"},
                        {"pinned", a.pin_cores},
                        {"plan_strategy", runs[0].program.row},
                        {"load_before", load_before},
                        {"load_after", load_after},
                        {"strategies", rows}};
    if (!paired.is_null()) j["plan_minus_vs_plan"] = paired;
    if (!profiled.empty()) j["profiled"] = profiled;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat(
      "model %s, global batch %d, %d braid-rank ranks (Gloo on loopback%s)\n"
      "%d rounds x %d timed steps after %d warm-up%s; load average %s before, %s after\n\n",
      g->name(), graph::ModelBatch(*g), a.ranks, a.pin_cores ? ", bound to cores" : "", a.rounds,
      a.iterations, a.warmup, runs.size() > 1 ? ", the plans interleaved per round" : "",
      load_before, load_after);
  std::cout << absl::StrFormat("%-28s %13s %14s %28s %8s %12s  %s\n", "strategy", "predicted ms",
                               "program sim ms", "measured ms [95% CI or range]", "error",
                               "loss step 1", "program");
  for (const nlohmann::json& r : rows) {
    const RowCells c = CellsOf(r);
    std::cout << absl::StrFormat(
        "%-28s %13s %14s %28s %8s %12s  %s\n", r["strategy"].get<std::string>(), c.predicted,
        absl::StrFormat("%.2f (%+.0f%%)", r["program_simulated_ms"].get<double>(),
                        100 * r["program_simulated_error"].get<double>()),
        c.measured, c.error, c.loss, r["spec"].get<std::string>());
    if (r.contains("program_simulated_unfused")) {
      std::cout << "  (its groups simulated unfused: " << r["program_simulated_unfused"].get<std::string>()
                << ")\n";
    }
  }
  std::cout << "\npredicted: the plan file's (the planner's per-device graph); program sim: the "
               "program that ran, simulated on this machine's cost model (--db); error: "
               "predicted against measured\n";
  if (!paired.is_null()) {
    std::cout << "\n";
    for (size_t i = 1; i < rows.size(); ++i) {
      const nlohmann::json& d = rows[i]["plan_minus_this"];
      std::cout << absl::StrFormat("plan - %s, paired per round: %+.2f ms %s\n",
                                   rows[i]["strategy"].get<std::string>(), d["median_ms"].get<double>(),
                                   d["interval_text"].get<std::string>());
    }
  } else {
    std::cout << "\nno baseline: pass --vs-plan with another plan of this model, e.g. `braid plan "
                 "MODEL --parallel --strategy data_parallel -o dp.json`\n";
  }
  if (!profiled.empty()) std::cout << "\n" << profiled << "\n";
  return 0;
}

// `braid run MODEL --plan P --ranks N --check`: the plan's program trained
// on N ranks against the world-1 program of the same model (same seed and
// batches), step by step and parameter by parameter.
int RunCheck(const RunArgs& a) {
  constexpr double kTolerance = 1e-4;
  absl::StatusOr<PlanFileProgram> plan = PlanProgram(a.plan_path);
  if (!plan.ok()) return ReportError(plan.status());
  const graph::Program* prog = &plan->program;
  const int64_t predicted = plan->predicted_memory_bytes;
  if (prog->World() != a.ranks) {
    return ReportError(absl::InvalidArgumentError(absl::StrCat(
        a.plan_path, ": its program runs on ", prog->World(), " ranks; pass --ranks ",
        prog->World())));
  }
  absl::StatusOr<graph::Graph> forward = GlobalForward(a);
  if (!forward.ok()) return ReportError(forward.status());
  if (absl::Status s = CheckModelFingerprint(a.plan_path, a.model, *forward, *prog); !s.ok())
    return ReportError(s);
  search::LoweringOptions lo;
  lo.seed = prog->seed;
  for (const graph::Op& op : prog->graph.ops())
    if (op.kind == graph::OpKind::kAdamUpdate) lo.optimizer = graph::Optimizer::kAdam;
  absl::StatusOr<graph::Program> ref = search::LowerWorldOne(*forward, lo);
  if (!ref.ok()) return ReportError(ref.status());
  const std::string dropout = a.no_dropout ? "off" : "on, keyed by element";
  const std::string precision = a.float64 ? "float64" : "float32";
  if (!a.json) {
    std::cerr << "braid: training row " << prog->row << " on " << a.ranks << " braid-rank ranks, "
              << a.steps << " steps (dropout " << dropout << ", " << precision << ")...\n";
  }
  absl::StatusOr<worker::ProgramRun> got = worker::TrainProgramOnRanks(
      *prog, {.steps = a.steps, .dropout = !a.no_dropout, .float64 = a.float64,
              .what = "braid run --check"});
  if (!got.ok()) return ReportError(got.status());
  if (!a.json) std::cerr << "braid: training the world-1 reference, " << a.steps << " steps...\n";
  absl::StatusOr<worker::ProgramRun> want = worker::TrainProgramOnRanks(
      *ref, {.steps = a.steps, .dropout = !a.no_dropout, .float64 = a.float64,
             .what = "braid run --check (world 1)"});
  if (!want.ok()) return ReportError(want.status());
  double loss_err = 0;
  for (size_t s = 0; s < want->losses.size() && s < got->losses.size(); ++s) {
    const double e = std::abs(got->losses[s] - want->losses[s]) /
                     std::max(std::abs(want->losses[s]), 1e-30);
    loss_err = std::max(loss_err, std::isnan(e) ? std::numeric_limits<double>::infinity() : e);
  }
  const std::set<std::string> params = runtime::ParameterNames(*ref);
  const runtime::CheckpointDiff d =
      runtime::CompareCheckpoints(got->checkpoint, want->checkpoint, &params);
  const double max_err = std::max(loss_err, d.max_rel_error);
  const bool ok = max_err <= kTolerance && d.mismatched.empty() &&
                  got->losses.size() == want->losses.size();
  const int64_t peak = *std::max_element(got->peak_bytes.begin(), got->peak_bytes.end());
  if (a.json) {
    nlohmann::json j = {
        {"model", forward->name()},
        {"row", prog->row},
        {"ranks", a.ranks},
        {"mesh", prog->mesh},
        {"program_fingerprint", prog->program_fingerprint},
        {"losses", got->losses},
        {"reference_losses", want->losses},
        {"peak_bytes", got->peak_bytes},
        {"predicted_memory_bytes", predicted},
        {"gradient_buckets", prog->buckets.size()},
        {"fusion_groups",
         {{"in_program", prog->groups.size()},
          {"fused", got->groups_fused.empty() ? 0 : got->groups_fused.back()},
          {"op_by_op", got->groups_unfused.empty() ? 0 : got->groups_unfused.back()},
          {"why_op_by_op", got->unfused_why}}},
        {"collectives_per_step", got->collectives.empty() ? 0 : got->collectives.back()},
        {"numerics",
         {{"reference", "world-1"},
          {"steps", a.steps},
          {"max_rel_error", max_err},
          {"loss_rel_error", loss_err},
          {"param_rel_error", d.max_rel_error},
          {"worst_tensor", d.worst},
          {"dropout", dropout},
          {"precision", precision},
          {"tolerance", kTolerance},
          {"ok", ok}}}};
    if (!d.mismatched.empty()) j["numerics"]["mismatched_tensors"] = d.mismatched;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << absl::StrFormat(
        "model %s, row %s on %d ranks (mesh %s), %d steps against a world-1 run of the same "
        "model (same seed and batches, dropout %s, %s)\n",
        forward->name(), prog->row, a.ranks, absl::StrJoin(prog->mesh, "x"), a.steps, dropout,
        precision);
    std::cout << absl::StrFormat("%-6s %14s %14s %10s\n", "step", "loss", "world-1 loss", "rel err");
    for (size_t s = 0; s < got->losses.size() && s < want->losses.size(); ++s) {
      std::cout << absl::StrFormat("%-6d %14.8g %14.8g %10.2e\n", static_cast<int>(s),
                                   got->losses[s], want->losses[s],
                                   std::abs(got->losses[s] - want->losses[s]) /
                                       std::max(std::abs(want->losses[s]), 1e-30));
    }
    std::cout << absl::StrFormat(
        "collectives per step on rank 0: %d (%d gradient buckets, each one AllReduce)\n",
        got->collectives.empty() ? 0 : got->collectives.back(), static_cast<int>(prog->buckets.size()));
    std::cout << absl::StrFormat(
        "fusion groups: %d in the program; %d ran as one fused kernel, %d op by op\n",
        static_cast<int>(prog->groups.size()), got->groups_fused.empty() ? 0 : got->groups_fused.back(),
        got->groups_unfused.empty() ? 0 : got->groups_unfused.back());
    int shown = 0;
    for (const auto& [first, why] : got->unfused_why) {
      if (shown++ == 3) break;
      std::cout << "  op by op: group of " << first << ": " << why << "\n";
    }
    std::cout << absl::StrFormat(
        "parameters after %d steps: largest relative error %.2e (%s)\n"
        "peak program tensor bytes per rank: %.2f MiB (largest rank); the plan predicted %s\n"
        "numerics: max relative error %.2e, tolerance %.0e: %s\n",
        a.steps, d.max_rel_error, d.worst.empty() ? "-" : d.worst,
        static_cast<double>(peak) / (1 << 20),
        predicted < 0 ? std::string("nothing")
                      : absl::StrFormat("%.2f MiB per device", static_cast<double>(predicted) / (1 << 20)),
        max_err, kTolerance, ok ? "ok" : "FAILED");
    for (const std::string& t : d.mismatched) std::cout << "  missing or reshaped: " << t << "\n";
    if (!ok) {
      std::cout << "largest parameter errors:\n";
      for (size_t i = 0; i < d.errors.size() && i < 8; ++i)
        std::cout << absl::StrFormat("  %-48s %10.2e\n", d.errors[i].first, d.errors[i].second);
    }
  }
  return ok ? 0 : 1;
}

int RunRun(const RunArgs& a) {
  if (a.check) {
    if (a.plan_path.empty()) {
      return ReportError(absl::InvalidArgumentError("--check needs --plan (a parallel plan file)"));
    }
    return RunCheck(a);
  }
  if (!a.plan_path.empty()) {
    absl::StatusOr<std::optional<nlohmann::json>> par = ReadParallelPlanFile(a.plan_path);
    if (!par.ok()) return ReportError(par.status());
    if (par->has_value()) {
      try {
        return RunParallelRun(a, **par);
      } catch (const nlohmann::json::exception& e) {  // a field of the wrong JSON type
        return ReportError(
            absl::InvalidArgumentError(absl::StrCat(a.plan_path, ": malformed plan: ", e.what())));
      }
    }
  }
  auto ctx = Prepare(LocalPlanningRequest(a));
  if (!ctx.ok()) return ReportError(ctx.status());
  PlanningContext& c = **ctx;
  for (const std::string& w : c.warnings) std::cerr << "braid: warning: " << w << "\n";
  const graph::Graph& g = c.training;

  std::vector<Candidate> cands;
  const search::Plan no_fusion = search::NoFusionPlan(g);
  cands.push_back({.name = "after_backward", .after_backward = true});
  cands.back().plan.buckets.push_back({.grads = AllGradients(no_fusion)});
  auto base = search::RunBaselines(g, *c.cost_model);
  if (!base.ok()) return ReportError(base.status());
  const search::EvaluatedPlan* ddp = base->Find("ddp");
  if (ddp == nullptr) return ReportError(absl::InternalError("no ddp baseline"));
  cands.push_back({.name = "ddp", .plan = ddp->plan});
  cands.back().plan.groups.clear();
  if (!a.plan_path.empty()) {
    auto p = ReadPlan(a.plan_path, g);
    if (!p.ok()) return ReportError(p.status());
    search::Plan unfused = *p;
    unfused.groups.clear();
    cands.push_back({.name = "plan", .plan = *p});
    cands.push_back({.name = "plan_unfused", .plan = unfused});
    cands.push_back({.name = "compute_fused", .plan = *std::move(p), .compute_only = true});
    cands.push_back({.name = "compute_unfused", .plan = unfused, .compute_only = true});
  }
  if (!a.vs_plan_path.empty()) {
    if (a.plan_path.empty()) {
      return ReportError(absl::InvalidArgumentError("--vs-plan needs --plan: the plan it is compared with"));
    }
    auto p = ReadPlan(a.vs_plan_path, g);
    if (!p.ok()) return ReportError(p.status());
    cands.push_back({.name = "vs_plan", .plan = *std::move(p)});
  }
  if (a.diagnose) {
    cands.push_back({.name = "compute_only", .plan = no_fusion, .compute_only = true});
  }
  // The same strategies costed without the estimator, for comparison.
  std::unique_ptr<costmodel::ClusterCostModel> roofline;
  if (c.cost_model->estimator() != nullptr) {
    roofline = std::make_unique<costmodel::ClusterCostModel>(c.cluster, c.store.get(), nullptr,
                                                             c.cost_model->comm());
  }
  std::vector<worker::ExecStrategy> strategies;
  for (Candidate& cand : cands) {
    if (roofline != nullptr) {
      Candidate copy = cand;
      if (auto s = Predict(g, *roofline, copy); !s.ok()) return ReportError(s);
      cand.roofline_iteration_s = copy.sim.iteration_s;
    }
    if (auto s = Predict(g, *c.cost_model, cand); !s.ok()) return ReportError(s);
    worker::ExecStrategy s{.name = cand.name, .after_backward = cand.after_backward,
                           .order = cand.order, .compute_only = cand.compute_only};
    for (const search::Bucket& b : cand.plan.buckets) s.buckets.push_back(b.grads);
    for (const search::FusionGroup& grp : cand.plan.groups) {
      s.groups.push_back({.ops = grp.ops, .duplicated = grp.duplicated});
    }
    strategies.push_back(std::move(s));
  }

  const costmodel::ProfileCoverage cov = c.cost_model->CountProfiled(g);
  const bool comm_fitted =
      c.cost_model->comm().Fitted(costmodel::Collective::kAllReduce, a.ranks).has_value();
  if (cov.estimated > 0) {
    std::cerr << "braid: warning: " << cov.estimated << " of " << cov.measured + cov.estimated
              << " ops have no measured profile (run `braid profile " << a.model
              << " --device cpu --ranks " << a.ranks << "` on the same --db)\n";
  }
  if (!comm_fitted) {
    std::cerr << "braid: warning: no AllReduce samples for " << a.ranks
              << " ranks: the prediction uses the prior (run `braid profile comm --ranks "
              << a.ranks << "`)\n";
  }
  const std::string load_before = LoadAverage();
  worker::TrainBenchOptions o;
  o.ranks = a.ranks;
  o.iterations = a.iterations;
  o.warmup = a.warmup;
  bool fused_profile = false;
  if (a.profile) {
    if (!c.store) {
      return ReportError(absl::InvalidArgumentError("--profile: needs a profile store (--db)"));
    }
    strategies.push_back(worker::GraphProfileStrategy(cands.front().order));
    // With a plan: its fused kernels timed where they run (in the fused
    // compute-only order), stored as fused-op profiles.
    for (const Candidate& cand : cands) {
      if (cand.name != "compute_fused" || cand.plan.groups.empty()) continue;
      strategies.push_back(worker::GraphProfileStrategy(cand.order, strategies[&cand - &cands[0]].groups));
    }
    fused_profile = strategies.back().name == "in-graph fused profile";
    // And the collectives in the same minutes: every bucket size the
    // strategies reduce, plus two anchors for the fit.
    std::set<int64_t> sizes = {int64_t{1} << 20, int64_t{16} << 20};
    for (const Candidate& cand : cands) {
      if (cand.compute_only) continue;
      for (const search::Bucket& b : cand.plan.buckets) {
        int64_t bytes = 0;
        for (graph::TensorId t : b.grads) bytes += g.tensor(t).Bytes();
        sizes.insert((bytes + 3) / 4 * 4);
      }
    }
    worker::ExecStrategy probe{.name = "collective probe", .compute_only = false};
    probe.probe_allreduce_bytes.assign(sizes.begin(), sizes.end());
    strategies.push_back(std::move(probe));
  }
  auto measured = worker::RunTrainingBench(g, strategies, o);
  if (!measured.ok()) return ReportError(measured.status());
  const std::string load_after = LoadAverage();
  // --profile: op times measured among these very iterations replace the
  // stored ones, and every strategy is predicted again from them.
  std::vector<double> predicted_before;
  nlohmann::json profile_json;
  std::unique_ptr<costmodel::ClusterCostModel> in_run;
  if (a.profile) {
    // The probe: per size, the median over iterations of the slowest rank.
    std::vector<costmodel::CommSample> comm_samples;
    for (const auto& [bytes, ts] : measured->back().probe_s) {
      if (ts.size() != static_cast<size_t>(a.ranks) * a.iterations) continue;
      std::vector<double> slowest(a.iterations, 0.0);
      for (int r = 0; r < a.ranks; ++r) {
        for (int i = 0; i < a.iterations; ++i) {
          slowest[i] = std::max(slowest[i], ts[static_cast<size_t>(r) * a.iterations + i]);
        }
      }
      std::sort(slowest.begin(), slowest.end());
      comm_samples.push_back({"AllReduce", a.ranks, bytes, slowest[slowest.size() / 2]});
    }
    measured->pop_back();
    costmodel::CommModel comm(c.cluster);
    if (auto s = comm.Fit(comm_samples); !s.ok()) return ReportError(s);
    if (fused_profile) {
      const worker::ExecStrategy& fs = strategies[strategies.size() - 2];
      auto fr = worker::StoreGraphProfile(g, measured->back(), a.ranks, a.iterations, *c.store, &fs);
      if (!fr.ok()) return ReportError(fr.status());
      measured->pop_back();
      profile_json["fused_compute_only_ms"] = Ms(fr->iteration_s);
    }
    auto r = worker::StoreGraphProfile(g, measured->back(), a.ranks, a.iterations, *c.store);
    if (!r.ok()) return ReportError(r.status());
    measured->pop_back();
    profile_json["compute_only_ms"] = Ms(r->iteration_s);
    profile_json["sum_of_op_means_ms"] = Ms(r->sum_of_means_s);
    profile_json["pack_ms"] = Ms(r->pack_s);
    profile_json["pack_bytes"] = r->pack_bytes;
    nlohmann::json probes = nlohmann::json::array();
    for (const costmodel::CommSample& s : comm_samples) probes.push_back({s.bytes, Ms(s.seconds)});
    profile_json["allreduce_ms"] = probes;
    if (auto fit = comm.Fitted(costmodel::Collective::kAllReduce, a.ranks)) {
      profile_json["allreduce_fit"] = {{"seconds_per_byte", fit->seconds_per_byte},
                                       {"overhead_s", fit->overhead_s}};
    }
    // Op profiles and the collective fit of this run (the fit is not stored:
    // `braid profile comm` owns the store's communication samples).
    in_run = std::make_unique<costmodel::ClusterCostModel>(
        c.cluster, c.store.get(), c.cost_model->estimator(), std::move(comm));
    for (Candidate& cand : cands) {
      predicted_before.push_back(cand.sim.iteration_s);
      if (auto s = Predict(g, *in_run, cand); !s.ok()) return ReportError(s);
    }
  }

  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < cands.size(); ++i) {
    const worker::StrategyMeasurement& m = (*measured)[i];
    const worker::ExecBookkeeping& b = m.bookkeeping;
    if (b.verify_failures > 0 || b.gradients_not_once > 0 || b.updates_before_wait > 0) {
      std::cerr << "braid: warning: strategy " << m.name << ": " << b.verify_failures
                << " allreduce results wrong, " << b.gradients_not_once
                << " gradients not reduced exactly once, " << b.updates_before_wait
                << " updates before their wait\n";
    }
    const double pred = cands[i].sim.iteration_s;
    std::vector<double> all_ms;
    for (double t : m.iteration_s) all_ms.push_back(Ms(t));
    rows.push_back({{"strategy", m.name},
                    {"buckets", cands[i].plan.buckets.size()},
                    {"predicted_ms", Ms(pred)},
                    {"predicted_compute_ms", Ms(cands[i].sim.compute_s)},
                    {"predicted_comm_ms", Ms(cands[i].sim.comm_s)},
                    {"measured_ms", Ms(m.median_s)},
                    {"measured_iqr_ms", Ms(m.iqr_s)},
                    {"measured_cpu_ms", Ms(m.median_cpu_s)},
                    // Per iteration and rank: packing buckets, blocked in wait().
                    {"measured_pack_ms", Ms(b.pack_s / (a.iterations * a.ranks))},
                    {"measured_wait_ms", Ms(b.wait_s / (a.iterations * a.ranks))},
                    {"measured_all_ms", all_ms},
                    {"error", std::abs(pred - m.median_s) / m.median_s}});
    if (cands[i].roofline_iteration_s.has_value()) {
      const double rl = *cands[i].roofline_iteration_s;
      rows.back()["predicted_roofline_ms"] = Ms(rl);
      rows.back()["error_roofline"] = std::abs(rl - m.median_s) / m.median_s;
    }
    if (a.profile) {
      rows.back()["predicted_before_profile_ms"] = Ms(predicted_before[i]);
      rows.back()["error_before_profile"] = std::abs(predicted_before[i] - m.median_s) / m.median_s;
    }
  }
  // The fusion gain: compute-only unfused minus fused, paired by iteration
  // (the strategies are interleaved iteration by iteration).
  nlohmann::json gain_json;
  std::string gain_line;
  auto find = [&](const std::string& name) -> int {
    for (size_t i = 0; i < cands.size(); ++i) {
      if (cands[i].name == name) return static_cast<int>(i);
    }
    return -1;
  };
  if (const int f = find("compute_fused"), u = find("compute_unfused"); f >= 0 && u >= 0) {
    const std::vector<double>& tf = (*measured)[f].iteration_s;
    const std::vector<double>& tu = (*measured)[u].iteration_s;
    std::vector<double> d;
    for (size_t i = 0; i < std::min(tf.size(), tu.size()); ++i) d.push_back(tu[i] - tf[i]);
    std::sort(d.begin(), d.end());
    const worker::MedianInterval ci = worker::MedianConfidenceInterval(d, 0.95);
    const double predicted = cands[u].sim.compute_s - cands[f].sim.compute_s;
    const bool inside = predicted >= ci.low && predicted <= ci.high;
    const double rel = ci.median != 0 ? std::abs(predicted - ci.median) / std::abs(ci.median) : 0;
    gain_json = {{"predicted_ms", Ms(predicted)},
                 {"measured_median_ms", Ms(ci.median)},
                 {"measured_ci95_ms", {Ms(ci.low), Ms(ci.high)}},
                 {"measured_interval", worker::IntervalName(ci)},
                 {"prediction_in_ci", inside},
                 {"relative_error", rel},
                 {"fused_groups", cands[f].plan.groups.size()}};
    gain_line = absl::StrFormat(
        "fusion gain (compute, %d fused kernels): predicted %.3f ms, measured %.3f ms "
        "%s %s: prediction %s the interval, %.0f%% from the median\n",
        static_cast<int>(cands[f].plan.groups.size()), Ms(predicted), Ms(ci.median),
        worker::IntervalName(ci), worker::FormatInterval(ci, 1e3, 3), inside ? "inside" : "outside",
        100 * rel);
  }
  // --vs-plan: the plan minus the other plan, paired by iteration.
  nlohmann::json vs_json;
  std::string vs_line;
  if (const int p = find("plan"), v = find("vs_plan"); p >= 0 && v >= 0) {
    const std::vector<double>& tp = (*measured)[p].iteration_s;
    const std::vector<double>& tv = (*measured)[v].iteration_s;
    std::vector<double> d;
    for (size_t i = 0; i < std::min(tp.size(), tv.size()); ++i) d.push_back(tp[i] - tv[i]);
    std::sort(d.begin(), d.end());
    const worker::MedianInterval ci = worker::MedianConfidenceInterval(d, 0.95);
    vs_json = {{"plan_minus_vs_plan_median_ms", Ms(ci.median)},
               {"ci95_ms", {Ms(ci.low), Ms(ci.high)}},
               {"interval", worker::IntervalName(ci)},
               {"plan_slower", ci.low > 0},
               {"plan_faster", ci.high < 0}};
    vs_line = absl::StrFormat(
        "plan - vs_plan per iteration: median %.3f ms, %s %s: %s\n", Ms(ci.median),
        worker::IntervalName(ci), worker::FormatInterval(ci, 1e3, 3),
        ci.low > 0 ? "plan is slower" : ci.high < 0 ? "plan is faster" : "no difference resolved");
  }
  if (a.json) {
    nlohmann::json j = {{"model", c.forward.name()},
                        {"ranks", a.ranks},
                        {"iterations", a.iterations},
                        {"warmup", a.warmup},
                        {"measured_ops", cov.measured},
                        {"estimated_ops", cov.estimated},
                        {"comm_fitted", comm_fitted},
                        {"compute_slowdown_during_comm", c.cost_model->ComputeSlowdownDuringComm()},
                        {"comm_slowdown_during_compute", c.cost_model->CommSlowdownDuringCompute()},
                        {"load_before", load_before},
                        {"load_after", load_after},
                        {"strategies", rows}};
    if (a.profile) j["in_run_profile"] = profile_json;
    if (!gain_json.is_null()) j["fusion_gain"] = gain_json;
    if (!vs_json.is_null()) j["plan_vs_plan"] = vs_json;
    j["estimator"] = c.cost_model->estimator() != nullptr ? c.cost_model->estimator()->Version()
                                                          : "none";
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat(
      "model %s, %d ranks on this machine (cpu-local), %d training ops (%d profiled, %d "
      "estimated), comm model %s\n%d timed iterations per strategy after %d warm-up, "
      "interleaved; load average %s before, %s after\n\n",
      c.forward.name(), a.ranks, g.num_ops(), cov.measured, cov.estimated,
      comm_fitted ? "fitted" : "PRIOR (not measured)", a.iterations, a.warmup, load_before,
      load_after);
  std::cout << absl::StrFormat("%-16s %8s %13s %13s %10s %8s %13s", "strategy", "buckets",
                               "predicted ms", "measured ms", "IQR ms", "error", "thread CPU ms");
  if (roofline != nullptr) std::cout << absl::StrFormat(" %13s %8s", "roofline ms", "error");
  std::cout << "\n";
  for (const auto& r : rows) {
    std::cout << absl::StrFormat("%-16s %8d %13.2f %13.2f %10.2f %7.1f%% %13.2f",
                                 r["strategy"].get<std::string>(), r["buckets"].get<int>(),
                                 r["predicted_ms"].get<double>(), r["measured_ms"].get<double>(),
                                 r["measured_iqr_ms"].get<double>(),
                                 100 * r["error"].get<double>(), r["measured_cpu_ms"].get<double>());
    if (r.contains("predicted_roofline_ms")) {
      std::cout << absl::StrFormat(" %13.2f %7.1f%%", r["predicted_roofline_ms"].get<double>(),
                                   100 * r["error_roofline"].get<double>());
    }
    std::cout << "\n";
  }
  if (c.cost_model->estimator() != nullptr) {
    std::cout << "\npredicted ms: unmeasured fused kernels from the GNN estimator ("
              << c.cost_model->estimator()->Version()
              << "); roofline ms: from the corrected roofline\n";
  }
  if (!gain_line.empty()) std::cout << "\n" << gain_line;
  if (!vs_line.empty()) std::cout << vs_line;
  return 0;
}

}  // namespace

void RegisterRunCommand(CLI::App& app, CommandResult& result) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* c = app.add_subcommand("run", kRunAbout);
  c->add_option("model", a->model, "model.onnx, a braid text graph, or zoo:NAME")->required();
  c->add_option("--ranks", a->ranks, "rank processes (Gloo on loopback)")->check(CLI::Range(2, 64));
  c->add_option("--batch", a->batch, "per-rank batch (default: the model's)")->check(CLI::PositiveNumber);
  c->add_option("--optimizer", a->optimizer, "sgd or adam")->check(CLI::IsMember({"sgd", "adam"}));
  c->add_option("--plan", a->plan_path, "braid plan JSON: also run it (buckets and fused groups) and measure its fusion gain; "
                "a parallel plan (braid plan --parallel -o P) runs its per-device program on "
                "braid-rank ranks (the runtime); a pipeline plan on braid-parallel-rank ranks "
                "beside the data-parallel spec of its model");
  c->add_option("--also-plan", a->also_plan_paths,
                "program plans: further plans of the model run interleaved round by round with "
                "--plan and --vs-plan (repeatable), each with its program simulation and its "
                "paired difference from --plan")
      ->check(CLI::ExistingFile);
  c->add_option("--vs-plan", a->vs_plan_path,
                "a second plan JSON run interleaved with --plan (vs_plan): their paired "
                "per-iteration difference with a 95% confidence interval (the range below 6 iterations); "
                "with a parallel plan's program, another program plan of the model (its data_parallel "
                "row, say), interleaved round by round");
  c->add_option("--estimator", a->estimator,
                "fused ops without a measured profile: auto (the GNN when trained for this CPU) "
                "or none (corrected roofline)")
      ->check(CLI::IsMember({"auto", "none"}));
  c->add_option("--iters", a->iterations, "timed iterations per strategy")->check(CLI::PositiveNumber);
  c->add_option("--warmup", a->warmup, "untimed iterations per strategy")->check(CLI::NonNegativeNumber);
  c->add_option("--rounds", a->rounds,
                "parallel plans: training runs per strategy, interleaved (each --warmup + --iters steps)")
      ->check(CLI::PositiveNumber);
  c->add_option("--pin-cores", a->pin_cores,
                "parallel plans: bind rank r to core r mod cores, as a launcher binding ranks does "
                "(default true)");
  c->add_option("--db", a->db, "profile store (SQLite); 'none' for priors only");
  c->add_flag("--profile", a->profile,
              "also time every op in compute-only iterations and every bucket's allreduce in "
              "probe iterations, interleaved with the strategies; store the op profiles and "
              "predict every strategy again from both. Parallel plans with a program: the braid-rank "
              "ranks clock every op and fusion group inside the timed steps and those times are "
              "stored, for the program simulation of later runs and `braid plan --parallel`");
  c->add_flag("--check", a->check,
              "numerics: train the --plan's per-device program on --ranks braid-rank ranks and "
              "a world-1 run of the same model for --steps steps; compare losses and parameters "
              "(relative error at most 1e-4)");
  c->add_option("--steps", a->steps, "--check: training steps")->check(CLI::Range(1, 1000));
  c->add_flag("--no-dropout", a->no_dropout,
              "--check: Dropout is the identity (by default each element's mask is keyed by its "
              "index in the full tensor, so every sharding drops what the world-1 run drops)");
  c->add_flag("--float64", a->float64,
              "--check: both runs hold and compute float32 tensors in float64, to tell float32 "
              "rounding amplified by training from a difference in what the programs compute");
  c->add_flag("--json", a->json, "print JSON");
  c->add_flag("--diagnose", a->diagnose,
              "also run compute_only: the compute ops alone vs the sum of their profiles");
  c->callback([a, &result] { result.exit_code = RunRun(*a); });
}

}  // namespace braid::client
