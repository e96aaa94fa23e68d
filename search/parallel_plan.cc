#include "search/parallel_plan.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "costmodel/machine_view.h"
#include "graph/training.h"
#include "search/parallel_config.h"
#include "search/program_sim.h"

namespace braid::search {
namespace {

struct Fused {
  PerDeviceGraph device;
  graph::Graph training;
  SearchResult fusion;
  std::vector<OverlapChoice> overlaps;
};

// `build_stop` interrupts building the per-device graphs; `search` is the
// fusion search's config (its stop and budget set by the caller).
absl::StatusOr<Fused> FuseOnDevice(const graph::Graph& forward,
                                   const costmodel::ClusterSpec& cluster,
                                   costmodel::CostModel& cm, const ParallelizeResult& r,
                                   const ParallelPlanOptions& options,
                                   const StopToken& build_stop, const SearchConfig& search) {
  Fused f;
  ASSIGN_OR_RETURN(f.device, BuildPerDeviceForward(forward, cluster, r, build_stop));
  if (build_stop.StopRequested()) return build_stop.ToStatus("per-device graph");
  ASSIGN_OR_RETURN(f.training, BuildPerDeviceTraining(f.device, options.table.base.optimizer));
  if (build_stop.StopRequested()) return build_stop.ToStatus("per-device graph");
  DataGroupCostModel dcm(cm, cluster, f.device.degree);
  // The overlap choices are plan data, like buckets: the training graph
  // (and its fingerprint) stays the per-device graph's; the fusion search
  // runs on a copy whose chosen collectives charge their effective
  // communication time.
  graph::Graph searched = f.training;
  if (options.overlap) {
    OverlapSearchOptions oo = options.overlap_options;
    // Fused tiles only where asked and on GPUs (kernels/cuda/comm_gemm.h).
    oo.fused_tiles = oo.fused_tiles && !cluster.IsCpu();
    // The base model: a tensor-parallel pair's messages stay in its (contiguous,
    // intra-node) model group, which CommModel prices as the first ranks.
    ASSIGN_OR_RETURN(f.overlaps, ChooseOverlaps(f.training, cluster, cm, oo));
    RETURN_IF_ERROR(ApplyOverlaps(f.overlaps, searched));
  }
  ASSIGN_OR_RETURN(f.fusion, options.op_fusion ? RunFusionSearch(searched, dcm, search)
                                               : RunBucketOnlySearch(searched, dcm, search));
  return f;
}

void Record(ParallelPlanRow& row, const Fused& f) {
  row.fused_status = absl::OkStatus();
  row.simulated_s = f.fusion.sim.iteration_s;
  row.compute_s = f.fusion.sim.compute_s;
  row.comm_s = f.fusion.sim.comm_s;
  row.fused_kernels = static_cast<int>(f.fusion.plan.groups.size());
  row.buckets = static_cast<int>(f.fusion.plan.buckets.size());
  row.forward_collectives = f.device.collectives;
  row.data_degree = f.device.data_degree;
  row.model_degree = f.device.model_degree;
  row.mixed_data_degrees = f.device.mixed_data_degrees;
  row.overlaps = f.overlaps;
}

// The program of `row` (a fused data- or tensor-parallel row of `forward`,
// or its rewritten graph): options.lowering with the plan's optimizer, the
// row's name, and the groups and buckets of its fused plan on `training`.
absl::StatusOr<graph::Program> LowerRow(const graph::Graph& forward, const ParallelPlanRow& row,
                                        const graph::Graph& training, const Plan& plan,
                                        const ParallelPlanOptions& options, const StopToken& stop) {
  LoweringOptions lo = options.lowering;
  lo.stop = stop;
  lo.optimizer = options.table.base.optimizer;
  lo.row = row.strategy.name;
  lo.gradient_buckets = BucketNames(training, plan);
  lo.fusion_groups = GroupNames(training, plan);
  return LowerProgram(row.rewritten ? *row.rewritten : forward, row.strategy.result.ops, lo);
}

// Whether the lowering refused the row (a configuration it cannot make
// exact), as opposed to not having been asked or being stopped.
bool LoweringRefused(const absl::Status& s) {
  return absl::IsUnimplemented(s) || absl::IsInvalidArgument(s);
}

// The row's program (its groups and buckets from `f`) and its simulation
// into `row`; a row the lowering refuses, or one `stop` cut short, keeps
// the reason. Errors other than those from the lowering (a broken
// invariant) fail the plan.
absl::Status PriceProgram(const graph::Graph& forward, const Fused& f, costmodel::CostModel& cm,
                          const ParallelPlanOptions& options, const StopToken& stop,
                          ParallelPlanRow& row) {
  if (!options.price_programs) return absl::OkStatus();
  if (stop.StopRequested()) {
    row.program_status = stop.ToStatus("program not lowered");
    return absl::OkStatus();
  }
  absl::StatusOr<graph::Program> p = LowerRow(forward, row, f.training, f.fusion.plan, options, stop);
  if (!p.ok()) {
    if (!LoweringRefused(p.status()) && !StopToken::IsStop(p.status()))
      return absl::Status(p.status().code(), absl::StrCat("lowering row ", row.strategy.name,
                                                          ": ", p.status().message()));
    row.program_status = p.status();
    return absl::OkStatus();
  }
  row.program = std::make_shared<const graph::Program>(*std::move(p));
  absl::StatusOr<ProgramSimulation> sim = SimulateProgram(*row.program, cm);
  if (!sim.ok()) {
    row.program_status = absl::Status(sim.status().code(), absl::StrCat("simulating its program: ",
                                                                        sim.status().message()));
    return absl::OkStatus();
  }
  row.program_status = absl::OkStatus();
  row.program_s = sim->result.iteration_s;
  row.program_sources = sim->sources;
  row.program_groups_note = sim->groups_note;
  return absl::OkStatus();
}

// The substitution search over the built-in algebraic rules, costed by the
// DP with the table's options. Returns the rewritten graph and its steps when
// a rewrite is predicted faster; nullopt when none is (or none applies).
absl::StatusOr<std::optional<SubstitutionSearchResult>> Substitute(
    const graph::Graph& forward, const costmodel::ClusterSpec& cluster, costmodel::CostModel& cm,
    const ParallelPlanOptions& options, int* graphs) {
  ASSIGN_OR_RETURN(std::vector<Rule> rules, BuiltinRules());
  // Nothing applies (the common case): no DP run is spent on the search.
  ASSIGN_OR_RETURN(std::vector<RewriteRule> rewrites, AlgebraicRewriteRules(rules));
  bool any = false;
  for (const RewriteRule& r : rewrites) {
    if (options.table.base.stop.StopRequested())
      return options.table.base.stop.ToStatus("substitution search");
    any = any || !FindMatches(forward, r).empty();
  }
  if (!any) return std::optional<SubstitutionSearchResult>();
  SubstitutionSearchOptions so;
  so.budget = options.substitution_budget;
  so.stop = options.table.base.stop;
  auto cost = [&](const graph::Graph& g) -> absl::StatusOr<double> {
    ASSIGN_OR_RETURN(ParallelizeResult r, ParallelizeForward(g, cluster, cm, options.table.base));
    return r.time_s;
  };
  ASSIGN_OR_RETURN(SubstitutionSearchResult s, SubstitutionSearch(forward, rules, cost, so));
  *graphs = s.evaluated;
  if (s.steps.empty()) return std::optional<SubstitutionSearchResult>();
  return std::optional<SubstitutionSearchResult>(std::move(s));
}

// Makes `requested` the chosen row of `out` (ParallelPlanOptions::strategy_row).
absl::Status ChooseRequestedRow(const graph::Graph& forward, const costmodel::ClusterSpec& cluster,
                                const std::string& requested, ParallelPlanResult& out) {
  std::vector<std::string> names, planned;
  int index = -1;
  for (size_t i = 0; i < out.rows.size(); ++i) {
    const ParallelPlanRow& row = out.rows[i];
    names.push_back(row.strategy.name);
    if (row.fused_status.ok()) planned.push_back(row.strategy.name);
    if (row.strategy.name == requested) index = static_cast<int>(i);
  }
  if (index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "strategy row '", requested, "' is not in the table of ", forward.name(), " on ",
        cluster.name, " (", cluster.num_ranks, " devices); its rows: ", absl::StrJoin(names, ", "),
        planned.size() == names.size() ? std::string(" (each with a plan)")
                                       : absl::StrCat("; with a plan: ", absl::StrJoin(planned, ", "))));
  }
  const ParallelPlanRow& row = out.rows[index];
  if (!row.fused_status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "strategy row '", requested, "' has no plan for ", forward.name(), " on ", cluster.name,
        " (", cluster.num_ranks, " devices): ", row.fused_status.message(),
        "; rows with a plan: ", absl::StrJoin(planned, ", ")));
  }
  out.chosen = index;
  out.chosen_by = "request";
  return absl::OkStatus();
}

}  // namespace

bool IsPipelineRowName(const std::string& name) { return absl::StartsWith(name, "pipeline:"); }

absl::Status CheckStrategyRowName(const std::string& name) {
  static const char* const kNames[] = {"data_parallel", "expert:megatron", "expert:dlrm",
                                       "braid", "braid:all-devices", "braid:substituted"};
  for (const char* k : kNames)
    if (name == k) return absl::OkStatus();
  const std::string digits = IsPipelineRowName(name) ? name.substr(9) : std::string();
  int stages = 0;
  if (absl::SimpleAtoi(digits, &stages) && stages >= 2 && digits == absl::StrCat(stages)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown strategy row '", absl::CHexEscape(name.substr(0, 64)), "': rows are ",
      absl::StrJoin(kNames, ", "), " and pipeline:S (S >= 2 stages)"));
}

bool ExecutesOnLocalRanks(const costmodel::ClusterSpec& cluster) {
  return cluster.IsCpu() && cluster.num_nodes == 1;
}

absl::StatusOr<ParallelPlanResult> PlanParallel(const graph::Graph& forward,
                                                const costmodel::ClusterSpec& cluster,
                                                costmodel::CostModel& cm,
                                                const ParallelPlanOptions& options_in) {
  // One token for every phase (see the header): the caller's conditions, the
  // fusion search's cancel and stop, and the whole call's budget.
  StopToken stop = options_in.stop;
  stop.Add(options_in.table.base.stop).Add(options_in.fusion.stop).AddFlag(options_in.fusion.cancel);
  stop.SetBudget(options_in.time_budget_s);
  ParallelPlanOptions options = options_in;
  options.table.base.stop = stop;
  const std::string& requested = options.strategy_row;
  if (!requested.empty()) {
    RETURN_IF_ERROR(CheckStrategyRowName(requested));
    if (!options.pipeline && IsPipelineRowName(requested)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy row '", requested, "' is a pipeline row, and pipeline rows are left out of "
          "this search (no-pipeline)"));
    }
  }
  // Data parallelism is costed and fused first: every result is at least
  // this plan, so it is in hand before the phases the budget may cut. Its
  // fusion search takes at most a quarter of the time left (the rest of the
  // table and the other rows' searches follow).
  ASSIGN_OR_RETURN(StrategyRow dp, DataParallelRow(forward, cluster, cm, options.table.base));
  if (stop.cancelled()) return stop.ToStatus("parallel plan");
  std::optional<absl::StatusOr<Fused>> dp_fused;
  if (dp.has_plan && dp.status.ok()) {
    SearchConfig search = options.fusion;
    search.stop = stop;
    search.time_budget_s = std::min(search.time_budget_s, stop.RemainingSeconds() / 4);
    dp_fused = FuseOnDevice(forward, cluster, cm, dp.result, options, stop.FlagsOnly(), search);
    if (stop.cancelled()) return stop.ToStatus("parallel plan");
  }
  StrategyTableOptions rest = options.table;
  rest.include_data_parallel = false;
  ASSIGN_OR_RETURN(std::vector<StrategyRow> table,
                   ParallelStrategyTable(forward, cluster, cm, rest));
  if (stop.cancelled()) return stop.ToStatus("parallel plan");
  table.insert(table.begin(), std::move(dp));
  ParallelPlanResult out;
  std::vector<ParallelPlanRow> rows;
  for (StrategyRow& s : table) {
    ParallelPlanRow row;
    row.strategy = std::move(s);
    rows.push_back(std::move(row));
  }
  if (options.substitutions && stop.StopRequested()) {
    out.substitution_status = stop.ToStatus("substitution search");
  } else if (options.substitutions) {
    absl::StatusOr<std::optional<SubstitutionSearchResult>> sub =
        Substitute(forward, cluster, cm, options, &out.substitution_graphs);
    out.substitution_status = sub.status();
    if (sub.ok() && sub->has_value() && stop.StopRequested()) {
      out.substitution_status = stop.ToStatus("substitution search");
    } else if (sub.ok() && sub->has_value()) {
      // braid's row again, on the rewritten graph.
      auto g = std::make_shared<const graph::Graph>(std::move((*sub)->best));
      StrategyTableOptions t = options.table;
      t.include_expert = false;
      t.include_data_parallel = false;
      absl::StatusOr<std::vector<StrategyRow>> again = ParallelStrategyTable(*g, cluster, cm, t);
      if (!again.ok()) {
        out.substitution_status = again.status();
      } else {
        for (StrategyRow& s : *again) {
          if (s.name != "braid") continue;
          ParallelPlanRow row;
          row.strategy = std::move(s);
          row.strategy.name = "braid:substituted";
          row.strategy.description = absl::StrCat(
              "braid's DP on the graph rewritten by ", (*sub)->steps.size(),
              " algebraic substitution(s), predicted ", (*sub)->initial_cost * 1e3, " -> ",
              (*sub)->best_cost * 1e3, " ms by the DP");
          row.rewritten = g;
          row.substitutions = (*sub)->steps;
          rows.push_back(std::move(row));
        }
      }
    }
  }
  if (options.pipeline && stop.StopRequested()) {
    out.pipeline_status = stop.ToStatus("pipelines");
  } else if (options.pipeline) {
    PipelinePlanOptions po;
    po.stage = options.table.base;
    po.stages = options.pipeline_stages;
    po.micro_batches = options.micro_batches;
    absl::StatusOr<std::vector<PipelineCandidate>> pipes =
        PipelineCandidates(forward, cluster, cm, po);
    if (pipes.ok()) {
      for (PipelineCandidate& p : *pipes) {
        ParallelPlanRow row;
        row.strategy.name = absl::StrCat("pipeline:", p.stages);
        row.strategy.description = absl::StrCat(
            p.stages, " stages x ", p.micro_batches,
            " micro-batches in the 1F1B order, each stage on ", cluster.num_ranks / p.stages,
            " devices by braid's DP (estimate: DP stage costs through the schedule)");
        row.strategy.status = p.status;
        row.strategy.has_plan = true;
        row.strategy.result.time_s = p.time_s;
        row.strategy.result.memory = p.memory;
        row.pipeline = std::make_shared<const PipelineCandidate>(std::move(p));
        rows.push_back(std::move(row));
      }
    } else {
      out.pipeline_status = pipes.status();
    }
    if (pipes.ok() && stop.StopRequested()) out.pipeline_status = stop.ToStatus("pipelines");
  }
  if (stop.cancelled()) return stop.ToStatus("parallel plan");
  // Every fused row's result: the chosen row's becomes the plan.
  std::vector<std::optional<Fused>> fused;
  int best = -1;  // the fastest simulated fused row
  int left = 0;   // rows still to fuse: they share the time left
  for (size_t i = 1; i < rows.size(); ++i)
    left += !rows[i].pipeline && rows[i].strategy.has_plan && rows[i].strategy.status.ok();
  for (ParallelPlanRow& row : rows) {
    if (row.pipeline) {
      row.fused_status = row.strategy.status;
      row.program_status = absl::UnimplementedError(
          "a pipeline: its stages are not one program (they run on braid-parallel-rank)");
      if (row.fused_status.ok()) {
        row.simulated_s = row.pipeline->time_s;
        row.data_degree = 0;
        for (const ParallelizeResult& sp : row.pipeline->stage_plans)
          for (const OpParallelization& o : sp.ops) row.data_degree = std::max(row.data_degree, o.data_degree);
        row.model_degree = cluster.num_ranks / row.pipeline->stages / std::max(1, row.data_degree);
      }
      out.rows.push_back(std::move(row));
      fused.emplace_back();
      continue;
    }
    const StrategyRow& st = row.strategy;
    const graph::Graph& g = row.rewritten ? *row.rewritten : forward;
    fused.emplace_back();
    if (!st.has_plan) {
      row.fused_status = st.status.ok() ? absl::NotFoundError("no plan") : st.status;
    } else if (!st.status.ok()) {
      row.fused_status = st.status;  // e.g. over the device's memory
    } else if (out.rows.empty() && dp_fused.has_value()) {  // data parallel, fused above
      if (!dp_fused->ok()) {
        row.fused_status = dp_fused->status();
      } else {
        Record(row, **dp_fused);
        RETURN_IF_ERROR(PriceProgram(forward, **dp_fused, cm, options, stop, row));
        best = 0;
        fused.back() = *std::move(*dp_fused);
      }
    } else if (best >= 0 && stop.StopRequested() && st.name != requested) {
      row.fused_status = stop.ToStatus("not fused");  // a plan exists: the rest wait no longer
      --left;
    } else {
      // The first row to fuse (data parallel, unless it does not fit) is the
      // plan at the least, and so is a requested row: only a cancel stops
      // its per-device graph, and its fusion search always costs the
      // no-fusion plan. Each search gets its share of the time left.
      SearchConfig search = options.fusion;
      search.stop = stop;
      search.time_budget_s = std::min(search.time_budget_s, stop.RemainingSeconds() / left);
      --left;
      const bool uncut = best < 0 || st.name == requested;
      absl::StatusOr<Fused> f = FuseOnDevice(g, cluster, cm, st.result, options,
                                             uncut ? stop.FlagsOnly() : stop, search);
      if (!f.ok()) {
        row.fused_status = f.status();
      } else {
        Record(row, *f);
        RETURN_IF_ERROR(PriceProgram(forward, *f, cm, options, stop, row));
        if (best < 0 || f->fusion.sim.iteration_s < fused[best]->fusion.sim.iteration_s)
          best = static_cast<int>(out.rows.size());
        fused.back() = std::move(*f);
      }
    }
    out.rows.push_back(std::move(row));
  }
  if (stop.cancelled()) return stop.ToStatus("parallel plan");
  out.chosen = best;
  if (best < 0) {
    std::string why;
    for (const ParallelPlanRow& r : out.rows)
      absl::StrAppend(&why, why.empty() ? "" : "; ", r.strategy.name, ": ",
                      r.fused_status.message());
    return absl::FailedPreconditionError(
        absl::StrCat("no parallelization of ", forward.name(), " fits ", cluster.name,
                     " and fuses (", why, ")"));
  }
  // A pipeline is the choice when its estimate (the DP's stage costs through
  // the 1F1B schedule) beats every fused plan's estimate by the same DP and
  // every fused plan's simulated time: the simulator has no pipeline model,
  // and its times for the fused per-device training graphs (real backward
  // ops, optimizer, buckets overlapped with the backward) are not on the
  // footing of the DP's (backward = backward_factor x forward, no overlap).
  // Set against the simulated times alone, a pipeline won on cpu-local where
  // it measured 28% slower than tensor parallelism (BENCHMARKS.md), the
  // simulator running above the DP there; against the DP's alone, on NVLink
  // (dgx-h100) a pipeline estimated at 45.1 ms won over Megatron simulated
  // at 40.0 ms.
  double best_fused = std::numeric_limits<double>::infinity();
  for (const ParallelPlanRow& row : out.rows) {
    if (!row.pipeline && row.fused_status.ok())
      best_fused = std::min({best_fused, row.strategy.result.time_s, row.simulated_s});
  }
  double best_pipeline = best_fused;
  for (size_t i = 0; i < out.rows.size(); ++i) {
    const ParallelPlanRow& row = out.rows[i];
    if (row.pipeline && row.fused_status.ok() && row.simulated_s < best_pipeline) {
      out.chosen = static_cast<int>(i);
      best_pipeline = row.simulated_s;
    }
  }
  if (options.price_programs && ExecutesOnLocalRanks(cluster)) {
    // These ranks run the programs: the fastest simulated program is the
    // plan, and a row without one (a pipeline, a configuration the lowering
    // refuses) is not chosen.
    int fastest = -1;
    for (size_t i = 0; i < out.rows.size(); ++i) {
      const ParallelPlanRow& row = out.rows[i];
      if (!row.program_status.ok()) {
        if (row.fused_status.ok() && out.program_status.ok())
          out.program_status = absl::Status(
              row.program_status.code(), absl::StrCat(row.strategy.name, ": ", row.program_status.message()));
        continue;
      }
      if (fastest < 0 || row.program_s < out.rows[fastest].program_s) fastest = static_cast<int>(i);
    }
    if (fastest >= 0) {
      out.chosen = fastest;
      out.chosen_by = "program simulation";
      out.program_status = absl::OkStatus();
    }
  }
  if (!requested.empty()) RETURN_IF_ERROR(ChooseRequestedRow(forward, cluster, requested, out));
  // The plan: the chosen row's fused result; a pipeline's stages are not
  // fused, so with a pipeline chosen it is the fastest simulated fused row's.
  const int plan_row = fused[out.chosen].has_value() ? out.chosen : best;
  out.device = std::move(fused[plan_row]->device);
  out.training = std::move(fused[plan_row]->training);
  out.fusion = std::move(fused[plan_row]->fusion);
  return out;
}

namespace {

nlohmann::json OpsJson(const graph::Graph& g, const std::vector<OpParallelization>& ops_in) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpParallelization& o : ops_in) {
    ops.push_back({{"op", o.name},
                   {"config", ParallelConfigString(o.config)},
                   {"kind", o.opaque ? std::string("opaque") : ConfigKindName(g, o.op, o.config)},
                   {"data_degree", o.data_degree},
                   {"model_degree", o.model_degree},
                   {"machine_view", costmodel::MachineViewString(o.view)},
                   {"compute_ms", o.compute_s * 1e3},
                   {"grad_sync_ms", o.grad_sync_s * 1e3}});
    if (o.num_devices > 0) {
      ops.back()["devices"] = nlohmann::json::array({o.first_device, o.first_device + o.num_devices});
    }
  }
  return ops;
}

}  // namespace

nlohmann::json ParallelPlanJson(const graph::Graph& forward, const ParallelPlanRow& row,
                                const costmodel::ClusterSpec& cluster) {
  const StrategyRow& s = row.strategy;
  if (row.pipeline) {
    const PipelineCandidate& p = *row.pipeline;
    nlohmann::json stages = nlohmann::json::array();
    absl::StatusOr<std::vector<graph::OpId>> order = forward.TopologicalOrder();
    for (int k = 0; k < p.stages; ++k) {
      nlohmann::json st = {{"first_op", order.ok() && p.stage_begin[k] < static_cast<int>(order->size())
                                            ? forward.op((*order)[p.stage_begin[k]]).name
                                            : std::string()},
                           {"devices", cluster.num_ranks / p.stages},
                           {"ops", nlohmann::json::array()}};
      for (const OpParallelization& o : p.stage_plans[k].ops) {
        st["ops"].push_back({{"op", o.name},
                             {"config", ParallelConfigString(o.config)},
                             {"data_degree", o.data_degree},
                             {"model_degree", o.model_degree}});
      }
      stages.push_back(std::move(st));
    }
    for (int k = 0; k < p.stages && k < static_cast<int>(p.timing.peak_in_flight.size()); ++k)
      stages[k]["peak_in_flight"] = p.timing.peak_in_flight[k];
    return {{"strategy", s.name},
            {"description", s.description},
            {"degree", cluster.num_ranks},
            {"stages", p.stages},
            {"micro_batches", p.micro_batches},
            {"schedule", "1F1B"},
            {"stage_plan", stages},
            {"iteration_ms", p.time_s * 1e3},
            {"bubble_fraction", p.timing.bubble_fraction},
            {"memory_per_device_bytes", p.memory.total_bytes},
            {"device_memory_bytes", cluster.device.memory_bytes},
            {"fusion", "not searched for pipeline stages: groups and buckets are empty"}};
  }
  const graph::Graph& g = row.rewritten ? *row.rewritten : forward;
  nlohmann::json ops = OpsJson(g, s.result.ops);
  nlohmann::json j = {{"strategy", s.name},
                      {"description", s.description},
                      {"degree", cluster.num_ranks},
                      {"data_degree", row.data_degree},
                      {"model_degree", row.model_degree},
                      {"dp_iteration_ms", s.result.time_s * 1e3},
                      {"memory_per_device_bytes", s.result.memory.total_bytes},
                      {"device_memory_bytes", cluster.device.memory_bytes},
                      {"memory", DeviceMemoryString(s.result.memory)},
                      {"forward_collectives", row.forward_collectives},
                      {"ops", ops}};
  if (row.fused_status.ok()) j["simulated_iteration_ms"] = row.simulated_s * 1e3;
  if (!s.result.strand_blocks.empty()) {
    // Unity's parallel split: strands side by side on groups of devices
    // (their ops' "devices"); the per-device graph is the busiest device's.
    nlohmann::json blocks = nlohmann::json::array();
    for (const StrandPlacement& b : s.result.strand_blocks)
      blocks.push_back({{"sink", b.sink},
                        {"strands", b.strands},
                        {"devices_per_strand", b.devices_per_strand},
                        {"groups", b.groups},
                        {"strands_per_group", b.per_group},
                        {"busiest_group_ms", (b.compute_s + b.grad_sync_s) * 1e3},
                        {"alltoall_ms", b.redistribute_s * 1e3}});
    j["strand_blocks"] = blocks;
  }
  if (!row.overlaps.empty()) j["overlap"] = OverlapChoicesJson(row.overlaps);
  if (!row.substitutions.empty()) {
    nlohmann::json subs = nlohmann::json::array();
    for (const SubstitutionStep& st : row.substitutions)
      subs.push_back({{"rule", st.rule}, {"ops", st.matched_ops}});
    j["substitutions"] = subs;
  }
  return j;
}

absl::StatusOr<graph::Program> PlanRowProgram(const graph::Graph& forward, const ParallelPlanResult& r,
                                              int index, const ParallelPlanOptions& options) {
  if (index < 0 || index >= static_cast<int>(r.rows.size()))
    return absl::InvalidArgumentError(absl::StrCat("no row ", index));
  const ParallelPlanRow& row = r.rows[index];
  if (row.program != nullptr) return *row.program;
  if (row.pipeline || LoweringRefused(row.program_status)) return row.program_status;
  // Not lowered: pricing was off, or the budget stopped it.
  return LowerRow(forward, row, r.training, r.fusion.plan, options, StopToken());
}

nlohmann::json ParallelStrategyRowsJson(const ParallelPlanResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ParallelPlanRow& row : r.rows) {
    nlohmann::json e = {{"strategy", row.strategy.name},
                        {"status", row.fused_status.ok() ? std::string("ok")
                                                         : std::string(row.fused_status.message())}};
    if (row.fused_status.ok()) {
      e["iteration_ms"] = row.simulated_s * 1e3;
      e["data_degree"] = row.data_degree;
      e["model_degree"] = row.model_degree;
    }
    if (row.program_status.ok()) {
      e["program_ms"] = row.program_s * 1e3;
      e["program_sources"] = KernelSourcesJson(row.program_sources);
      if (!row.program_groups_note.empty()) e["program_groups_note"] = row.program_groups_note;
    } else if (row.fused_status.ok()) {
      e["no_program"] = std::string(row.program_status.message());
    }
    rows.push_back(std::move(e));
  }
  return rows;
}

}  // namespace braid::search
