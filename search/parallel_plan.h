// `braid plan --parallel`: parallelization and fusion chosen together.
//
// PlanParallel runs the strategy table (search/parallel_strategies.h: data
// parallelism, the expert strategies that apply, braid's machine-mapping DP),
// then gives every strategy with a plan that fits the device the same second
// stage: its per-device graph (search/parallel_graph.h) becomes a training
// graph whose gradients are all-reduced over the data group, and the fusion
// search (DisCo, search/backtracking.h) chooses op fusion and gradient
// buckets on it; the simulator prices the result, overlapping the buckets
// with backward and the tensor-parallel collectives on their own channel.
// Baselines get the same fusion search braid's plan gets (same budget,
// seed and cost model): braid wins by choosing the parallelization, not by
// being allowed more. The plan returned is the fastest simulated one; its
// `strategy` says which row it came from.
//
// Every fused data- and tensor-parallel row is then lowered to the
// per-device program the runtime executes (search/program_lowering.h, with
// the row's own fusion groups and buckets) and that program is simulated
// (search/program_sim.h): the row's program_s. Where the caller's ranks run
// the plans (cpu-local: braid-rank's Gloo ranks, ExecutesOnLocalRanks), the
// choice is the row with the fastest simulated program, priced by the same
// profile store that `braid run --profile` fills with the ranks' in-step
// clocks, and a row without a program is not chosen: a plan whose time no
// execution can confirm is not offered over one that runs. `chosen_by` says
// which figure chose.
//
//   ParallelPlanOptions o;
//   o.table.base.optimizer = graph::Optimizer::kAdam;
//   absl::StatusOr<ParallelPlanResult> r = PlanParallel(fwd, cluster, cm, o);
//   r->rows[i].simulated_s;  r->chosen;  r->fusion.plan;  r->training;
#ifndef BRAID_SEARCH_PARALLEL_PLAN_H_
#define BRAID_SEARCH_PARALLEL_PLAN_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "costmodel/sim_graph.h"
#include "graph/graph.h"
#include "nlohmann/json.hpp"
#include "search/backtracking.h"
#include "search/parallel_graph.h"
#include "search/overlap_plan.h"
#include "search/parallel_strategies.h"
#include "search/pipeline_plan.h"
#include "search/program_lowering.h"
#include "search/substitution_search.h"

namespace braid::search {

struct ParallelPlanRow;

struct ParallelPlanOptions {
  StrategyTableOptions table;
  // The fusion search each strategy's per-device training graph gets; its
  // time budget is per strategy.
  SearchConfig fusion;
  // false: buckets only (RunBucketOnlySearch), for runtimes without op fusion.
  bool op_fusion = true;
  // The substitution search (search/substitution_search.h, Unity §5.1) over
  // the algebraic rules of the built-in rule file, costed by braid's DP:
  // where a rewrite is predicted faster, a "braid:substituted" row plans the
  // rewritten graph. At most `substitution_budget` DP runs.
  bool substitutions = true;
  int substitution_budget = 16;
  // Pipeline rows ("pipeline:S", search/pipeline_plan.h): S stages over
  // micro-batches in the 1F1B order, each stage planned by the DP. Their
  // time is the DP's stage costs through the 1F1B schedule (the stages'
  // per-device graphs are not fused yet), so a pipeline is chosen only when
  // that estimate beats every fused plan's estimate by the same DP (its
  // strategy.result.time_s) and its simulated time. Stage counts that do not
  // divide the devices are skipped; the micro-batch counts (below) that do
  // not divide the batch too.
  // false (`braid plan --no-pipeline`, and always in the service): no
  // pipeline rows are searched, so none is chosen.
  bool pipeline = true;
  std::vector<int> pipeline_stages = {2, 4, 8, 16};
  // The overlap choice per tensor-parallel pair (search/overlap_plan.h),
  // made on every fused row's per-device training graph before its fusion
  // search (every strategy gets it: baselines are not denied what braid
  // uses). Decompositions always; Flux's fused tiles only when
  // overlap_options.fused_tiles is set and the devices are GPUs: braid's
  // fused kernels (kernels/cuda/comm_gemm.h) are SIMT fp32 GEMMs without
  // tensor cores, unmeasured on a GPU so far, while the overlap model costs
  // a tile at the cost model's GEMM rate, so offering them by default would
  // promise what the kernels do not deliver.
  bool overlap = true;
  OverlapSearchOptions overlap_options;
  std::vector<int> micro_batches = {1, 2, 4, 8, 16, 32, 64};
  // The lowering of each row's program (seed, SyncBN; the optimizer is
  // table.base.optimizer); the row's name, groups and buckets are its own. false: no row is lowered (and
  // none is chosen by its program).
  bool price_programs = true;
  LoweringOptions lowering;
  // Wall time for the whole of PlanParallel: strategy table, substitutions,
  // pipelines and every row's fusion search (each of which also keeps
  // fusion.time_budget_s). Beyond SearchConfig::kNoDeadlineS: none.
  double time_budget_s = SearchConfig::kNoDeadlineS;
  // Set (`braid plan --strategy ROW`, SearchOptions.strategy_row): the plan
  // is this row's instead of the fastest row's; every row is still searched
  // and reported, and chosen_by is "request". The row's fusion search is
  // never cut short by time_budget_s (like the first fused row's). A name of
  // no row form (CheckStrategyRowName), or a pipeline row with `pipeline`
  // off, is InvalidArgument before any search; a row the table does not
  // have, or one without a plan that fits and fuses, is InvalidArgument
  // after it, listing the rows (and for the latter why it has no plan).
  std::string strategy_row;
  // Further stop conditions (a job's cancel, a server's shutdown);
  // fusion.cancel and fusion.stop stop the whole of PlanParallel too.
  StopToken stop;
};

// One strategy after both stages.
struct ParallelPlanRow {
  StrategyRow strategy;  // the table's row (DP time, ops, memory, status)
  // OK when the second stage ran; else why not (no plan, over memory,
  // mixed data degrees, the fusion search's error).
  absl::Status fused_status;
  double simulated_s = 0;  // the fused per-device iteration (when fused_status is OK)
  double compute_s = 0;
  double comm_s = 0;
  int fused_kernels = 0;
  int buckets = 0;
  int forward_collectives = 0;
  int data_degree = 0;   // the largest data degree of its ops
  int model_degree = 0;  // degree / data_degree
  bool mixed_data_degrees = false;
  // The forward graph this row planned: null for the submitted graph; the
  // rewritten graph for braid:substituted, with the rewrites applied.
  std::shared_ptr<const graph::Graph> rewritten;
  std::vector<SubstitutionStep> substitutions;
  // The overlap choices on its per-device training graph (fused rows).
  std::vector<OverlapChoice> overlaps;
  // A pipeline row: its stages (simulated_s is then the DP + 1F1B estimate).
  std::shared_ptr<const PipelineCandidate> pipeline;
  // Fused data- and tensor-parallel rows: the per-device program the
  // runtime executes (its groups and buckets this row's), and its
  // simulation (program_status OK); or why it has no simulated program
  // (Unimplemented: a configuration the lowering refuses, a pipeline row;
  // the time budget; a failed simulation, the program then kept).
  absl::Status program_status = absl::FailedPreconditionError("not lowered");
  std::shared_ptr<const graph::Program> program;
  double program_s = 0;
  costmodel::KernelSources program_sources;
  std::string program_groups_note;  // search::ProgramSimulation::groups_note
};

struct ParallelPlanResult {
  std::vector<ParallelPlanRow> rows;
  // The substitution search: graphs it costed, and why it did not run (OK
  // when it ran, or found no rule that applies).
  int substitution_graphs = 0;
  absl::Status substitution_status;
  absl::Status pipeline_status;  // PipelineCandidates' error, if any
  int chosen = -1;       // index into rows: the fastest simulated (or executed, see chosen_by)
  // "simulator" (fused rows' simulated times, pipelines by the DP's
  // estimate), "program simulation" (on ranks that run the plans: the
  // rows' simulated programs) or "request" (ParallelPlanOptions::strategy_row).
  std::string chosen_by = "simulator";
  // On ranks that run the plans, when no row has a program: the first
  // row's reason (the choice is then the simulator's).
  absl::Status program_status;
  // The fused plan: the chosen row's, or when a pipeline row is chosen, the
  // fastest simulated fused row's.
  PerDeviceGraph device;
  graph::Graph training;  // its per-device training graph
  SearchResult fusion;    // the fusion search on it
};

// The names a strategy row can have: data_parallel, expert:megatron,
// expert:dlrm, braid, braid:all-devices, braid:substituted and pipeline:S
// (S >= 2 stages). InvalidArgument listing them for any other name; which
// rows a graph's table holds is known only after the search.
absl::Status CheckStrategyRowName(const std::string& name);
// Whether `name` is a pipeline row's ("pipeline:S").
bool IsPipelineRowName(const std::string& name);

// Whether braid runs `cluster`'s plans on this host's Gloo ranks
// (braid-rank on loopback): a CPU cluster of one node, cpu-local. There the
// rows are chosen by their programs' simulation.
bool ExecutesOnLocalRanks(const costmodel::ClusterSpec& cluster);

// Stopping. One StopToken (options.stop, the fusion search's cancel and
// stop, and the time budget) reaches every phase: the strategy table's DP
// runs, the substitution search, the pipeline candidates, the per-device
// graphs and the fusion searches, each polling it in its long loops. Past
// the budget the plan is the best found so far: the data-parallel row's DP
// and the first fused row (data parallel, unless it does not fit) are never
// cut short by it, the rows not reached say "time budget exhausted", and
// each fusion search gets at most its share of the time left. A cancel
// (a flag) ends the call within tens of ms with Cancelled.
//
// FailedPrecondition when no strategy has a plan that fits and fuses (the
// rows say why); errors of ParallelStrategyTable otherwise.
absl::StatusOr<ParallelPlanResult> PlanParallel(const graph::Graph& forward,
                                                const costmodel::ClusterSpec& cluster,
                                                costmodel::CostModel& cm,
                                                const ParallelPlanOptions& options);

// The "parallel" object of plan files and `--json` output: strategy, degrees,
// per-op configs (config, kind, data/model degree, machine view, compute and
// gradient-sync seconds), memory per device against the device's, the DP's
// estimate and the simulated iteration.
// `forward` is the submitted graph; a substituted row's own graph is used
// for its ops, and its rewrites are listed ("substitutions").
nlohmann::json ParallelPlanJson(const graph::Graph& forward, const ParallelPlanRow& row,
                                const costmodel::ClusterSpec& cluster);

// The per-device program of the plan's row (graph/program.h): the row
// whose fused plan `r` holds (r.training, r.fusion: the chosen row, or the
// fastest fused row when a pipeline was chosen), lowered with the options
// PlanParallel was given (options.lowering: seed, sync_batch_norm; the
// optimizer of options.table). The program PlanParallel priced, or, where the
// time budget stopped its pricing, that row lowered now: the plan needs its
// program to run. What `braid plan --parallel -o` writes under "program"
// and the service keeps with a parallel plan (ParallelPlan.program).
// Unimplemented for a pipeline row and for the configurations the lowering
// refuses (LowerProgram).
absl::StatusOr<graph::Program> PlanRowProgram(const graph::Graph& forward, const ParallelPlanResult& r,
                                              int row, const ParallelPlanOptions& options);

// The strategy table as plan files and the stored parallel section keep it:
// per row its name, "ok" or why it has no plan, and when fused its simulated
// iteration_ms and data / model degree; its program's simulated program_ms
// with the sources of its kernel times, or no_program and why.
nlohmann::json ParallelStrategyRowsJson(const ParallelPlanResult& r);

}  // namespace braid::search

#endif  // BRAID_SEARCH_PARALLEL_PLAN_H_
