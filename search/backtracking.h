// braid's joint op-fusion / tensor-fusion search: DisCo's backtracking search
// (Algorithm 1, §4.5) over plans (search/plan.h), costed by lowering each
// candidate (search/lowering.h) and simulating it (costmodel/simulator.h).
//
// Algorithm 1 as written: a priority queue Q ordered by cost; each step
// dequeues the cheapest H and, for each of the three methods of §4.5
// (search/fusion_state.h), draws n = Random(0, beta), applies the method n
// times to H (RandomApply), and evaluates the candidate H' once; a valid H'
// replaces the best if cheaper (resetting the unchanged counter, else
// incrementing it) and is enqueued if Cost(H') <= alpha * Cost(best). The
// search stops when Q is empty or the best is unchanged for `patience` steps
// (the paper's 1000), or when the time budget or `max_steps` is exhausted.
//
// Stopping early. The time budget covers the whole search, baselines
// included, and together with the cancel flags forms a StopToken
// (search/stop_token.h) that every long loop polls: the baselines (the XLA
// fusion pass among them), RandomApply's draws, and each evaluation's
// contraction and lowering. A stop takes effect within tens of ms at the
// service's graph-size limit, and the search still returns a valid result:
// the best of the no-fusion plan, the baselines finished and the candidates
// evaluated before the stop. The budget never cuts short the no-fusion plan
// or `initial_plans` (a result needs them); a cancel does, and a search
// cancelled before its no-fusion plan is costed returns Cancelled.
//
// Additions to Algorithm 1, all documented in SearchConfig:
//  - Q is seeded with the no-fusion plan (Alg. 1's H_in) AND, by default, the
//    best baseline plan, costed as the baseline itself, so braid's result is
//    never slower than the best baseline under the same cost model;
//  - buckets of every candidate are issued in gradient production order (as
//    DisCo's simulator does, §4.4);
//  - evaluated plans are cached by fingerprint; Q holds at most
//    `max_queue` entries (the costliest are dropped);
//  - candidates are generated serially from one std::mt19937_64 and evaluated
//    on `threads` threads, results consumed in generation order, so the result
//    depends only on (graph, cost model, config) -- not on the thread count --
//    whenever the time budget does not cut the search short.
//
//   SearchConfig cfg;
//   cfg.seed = 7;
//   absl::StatusOr<SearchResult> r = RunFusionSearch(train_graph, cost_model, cfg);
//   LOG(INFO) << r->sim.iteration_s << " s/iter, " << PlanSummary(r->plan);
#ifndef BRAID_SEARCH_BACKTRACKING_H_
#define BRAID_SEARCH_BACKTRACKING_H_

#include <cstdint>
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "costmodel/cost_model.h"
#include "costmodel/simulator.h"
#include "graph/graph.h"
#include "search/baselines.h"
#include "search/plan.h"
#include "search/stop_token.h"

namespace braid::search {

// Upper bounds RunFusionSearch enforces (InvalidArgument beyond them). alpha
// beyond 10 prunes nothing that max_queue would not drop anyway; beta bounds
// the work of one step (3 methods x beta applications x 16 draws), which is
// only checked between draws, so one step stays short enough to report
// progress on. The service (server/strategy_api.h) and `braid plan` apply the
// same bounds to user options.
inline constexpr double kMaxAlpha = 10;
inline constexpr int kMaxBeta = 1000;

struct SearchProgress {
  double best_cost_s = 0;
  int64_t candidates_evaluated = 0;  // candidates costed (cache hits included)
  double elapsed_s = 0;
  // The best plan so far (valid during the callback only) and whether it
  // changed since the last call: the service checkpoints it.
  const Plan* best_plan = nullptr;
  bool improved = false;
};

struct SearchConfig {
  double alpha = 1.05;  // DisCo §6.1 default: prune above alpha * best
  int beta = 10;        // DisCo §6.1 default: up to beta applications per method
  uint64_t seed = 0;
  int patience = 1000;  // Alg. 1: stop after this many steps without a new best
  // Wall time for the whole search, baselines included. Budgets beyond
  // kNoDeadlineS mean no deadline.
  double time_budget_s = 60;
  static constexpr double kNoDeadlineS = 1e9;
  int64_t max_steps = 0;  // dequeues; 0 = unlimited
  int threads = 1;
  // Seed Q with the best baseline plan besides the no-fusion plan (an
  // addition to Alg. 1). Baselines are run with `baseline_config`.
  bool seed_with_baselines = true;
  BaselineConfig baseline_config;
  // Q keeps at most this many states (the costliest are dropped): a state
  // holds O(ops) memory.
  size_t max_queue = 1024;
  // Called after each dequeue step.
  std::function<void(const SearchProgress&)> progress;
  // Extra starting points (e.g. a checkpointed best plan of an interrupted
  // job): each valid one is evaluated and enqueued like H_in; invalid ones
  // are skipped.
  std::vector<Plan> initial_plans;
  // Tensor fusion only (the ablation of `braid plan` and `braid bench
  // fusion`): the op fusion is fixed to these groups (xla_op_fusion's), the
  // search starts from them with one AllReduce per gradient and applies only
  // AllReduce fusion; no baseline seeding.
  std::optional<std::vector<FusionGroup>> fixed_groups;
  // When set and true, the search stops within tens of ms, even inside the
  // baselines or a step, and returns the best plan so far with stop_reason
  // "cancelled" (Cancelled before the no-fusion plan is costed).
  const std::atomic<bool>* cancel = nullptr;
  // RunBucketOnlySearch: the searched plan replaces the best baseline only
  // when it is predicted at least this fraction faster. A buckets-only plan
  // replaces the runtime's own default (DDP's buckets) in the user's job, and
  // the simulator's error on unfused plans measured on real ranks is 0-8%
  // (BENCHMARKS.md): a smaller predicted gain is one no execution confirms.
  double min_gain = 0.05;
  // Further stop conditions with the same effect, e.g. a server's shutdown
  // flag or an outer deadline (stop_reason "time budget" once it passes).
  // The search adds `cancel` and its time budget to a copy of it.
  StopToken stop;
};

struct SearchStats {
  int64_t steps = 0;                  // dequeues
  int64_t candidates_generated = 0;
  int64_t candidates_simulated = 0;   // cache misses
  int64_t cache_hits = 0;
  int64_t invalid = 0;
  int64_t enqueued = 0;
  int64_t improvements = 0;
  double elapsed_s = 0;
  // "queue empty", "patience", "time budget", "max steps", "cancelled"
  std::string stop_reason;
};

struct SearchResult {
  Plan plan;
  costmodel::SimResult sim;
  std::string origin;  // "no_fusion", "baseline:<name>" or "search"
  SearchStats stats;
  // Present when seed_with_baselines and at least one baseline finished
  // before a stop (then baselines->complete tells whether all did): the
  // baselines and the FO bound over them and the search's plan.
  std::optional<BaselineResults> baselines;
  double fo_bound_s = 0;
};

absl::StatusOr<SearchResult> RunFusionSearch(const graph::Graph& training_graph,
                                             costmodel::CostModel& cm, const SearchConfig& cfg);

// The ablation "braid with tensor fusion only": op fusion fixed to
// xla_op_fusion's groups from `baselines` (the same backend's fusions the
// XLA baseline gets), buckets searched by braid (AllReduce fusion only),
// starting from one AllReduce per gradient and from jax_default's buckets.
// The gap between this and RunFusionSearch is what choosing op fusion
// jointly with tensor fusion adds.
// Plans for a runtime that runs every op as its own kernel (braid.torch in
// PyTorch eager mode): no op fusion, buckets searched by braid. The baselines
// are held to the same: those whose plans fuse ops (xla_op_fusion,
// jax_default) are left out, and the others' plans seed the search; the
// best of them is kept unless the search's plan is predicted at least
// cfg.min_gain faster. The result carries those baselines and the FO bound
// over them.
absl::StatusOr<SearchResult> RunBucketOnlySearch(const graph::Graph& g, costmodel::CostModel& cm,
                                                 SearchConfig cfg);

absl::StatusOr<SearchResult> RunTensorFusionOnly(const graph::Graph& g, costmodel::CostModel& cm,
                                                 SearchConfig cfg,
                                                 const BaselineResults& baselines);

}  // namespace braid::search

#endif  // BRAID_SEARCH_BACKTRACKING_H_
