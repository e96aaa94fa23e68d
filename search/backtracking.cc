#include "search/backtracking.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "search/contraction.h"
#include "search/cost_cache.h"
#include "search/fusion_state.h"
#include "search/lowering.h"

namespace braid::search {

using graph::Graph;
using graph::TensorId;

namespace {

struct Evaluation {
  bool valid = false;
  bool stopped = false;  // cut short by a StopToken: neither valid nor invalid
  std::string error;
  double cost = 0;
  Plan plan;  // buckets in production order
  costmodel::SimResult sim;
};

// Per-graph facts every evaluation needs, computed once.
struct GraphFacts {
  std::vector<graph::OpId> topo;
  LowerOptions lower;
};

// Contracts, lowers and simulates `plan`, polling `stop` on the way (a
// stopped evaluation takes one contraction phase or kStopPollTasks costed
// tasks to notice, not a whole evaluation: at the service's graph-size limit
// a cold one costs over a second).
Evaluation Evaluate(const Graph& g, const GraphFacts& facts, Plan plan, costmodel::CostModel& cm,
                    const StopToken& stop) {
  Evaluation e;
  auto failed = [&](const absl::Status& s) {
    e.stopped = StopToken::IsStop(s) && stop.StopRequested();
    e.error = std::string(s.message());
    return std::move(e);
  };
  absl::StatusOr<Contraction> c = Contract(g, plan, facts.topo, stop, cm.fusion_backend());
  if (!c.ok()) return failed(c.status());
  SortBucketsByProduction(g, &plan, &*c);
  LowerOptions lower = facts.lower;
  lower.stop = &stop;
  absl::StatusOr<costmodel::SimGraph> sg =
      LowerContraction(g, plan, *c, cm, /*node_task=*/nullptr, lower);
  if (!sg.ok()) return failed(sg.status());
  e.sim = costmodel::Simulate(*sg);
  e.cost = e.sim.iteration_s;
  e.plan = std::move(plan);
  e.valid = true;
  return e;
}

// Fingerprint independent of bucket order (the search always issues buckets
// in production order, a function of the rest of the plan) and of gradient
// order inside a bucket (irrelevant to cost).
uint64_t SearchFingerprint(Plan p) {
  for (Bucket& b : p.buckets) std::sort(b.grads.begin(), b.grads.end());
  std::sort(p.buckets.begin(), p.buckets.end(),
            [](const Bucket& a, const Bucket& b) { return a.grads < b.grads; });
  return PlanFingerprint(p);
}

struct CacheEntry {
  bool valid = false;
  double cost = 0;
};

class Searcher {
 public:
  Searcher(const Graph& g, costmodel::CostModel& cm, const SearchConfig& cfg)
      : g_(g), cached_(cm), cfg_(cfg), ctx_(g, cm.fusion_backend()), rng_(cfg.seed), stop_(cfg.stop) {}

  absl::StatusOr<SearchResult> Run();

 private:
  using QueueKey = std::pair<double, int64_t>;  // (cost, insertion sequence)

  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void Enqueue(double cost, std::shared_ptr<const FusionState> s) {
    queue_.emplace(QueueKey{cost, seq_++}, std::move(s));
    while (queue_.size() > std::max<size_t>(cfg_.max_queue, 1)) queue_.erase(std::prev(queue_.end()));
  }
  std::vector<Evaluation> EvaluateAll(const std::vector<Plan>& plans);
  // Why stop_ fired, as SearchStats::stop_reason.
  std::string StopReason() const { return stop_.expired() ? "time budget" : "cancelled"; }
  // Seeds Q with the best baseline that finished before a stop.
  absl::Status SeedWithBaselines(SearchResult& result);

  const Graph& g_;
  CachedCostModel cached_;
  GraphFacts facts_;
  const SearchConfig& cfg_;
  SearchContext ctx_;
  std::mt19937_64 rng_;
  StopToken stop_;  // cfg_.stop + cfg_.cancel + the time budget
  std::chrono::steady_clock::time_point start_;
  std::map<QueueKey, std::shared_ptr<const FusionState>> queue_;
  int64_t seq_ = 0;
  std::unordered_map<uint64_t, CacheEntry> cache_;
};

std::vector<Evaluation> Searcher::EvaluateAll(const std::vector<Plan>& plans) {
  std::vector<Evaluation> out(plans.size());
  // The step's fused groups in one batch: a cost model with a fused-op
  // estimator predicts the new ones in one inference.
  if (cached_.PrefetchesFused()) {
    std::vector<std::vector<graph::OpId>> groups;
    for (const Plan& p : plans) {
      for (const FusionGroup& grp : p.groups) groups.push_back(grp.ops);
    }
    cached_.PrefetchFused(g_, groups);
  }
  const int m = static_cast<int>(plans.size());
  const int threads = std::max(1, std::min(cfg_.threads, m));
  // Once stop_ fires the remaining evaluations are skipped (left invalid):
  // the caller discards the whole batch.
  auto work = [&](int k) {
    for (int i = k; i < m && !stop_.StopRequested(); i += threads) {
      out[i] = Evaluate(g_, facts_, plans[i], cached_, stop_);
    }
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < threads; ++k) pool.emplace_back(work, k);
  work(0);
  for (std::thread& t : pool) t.join();
  return out;
}

absl::Status Searcher::SeedWithBaselines(SearchResult& result) {
  absl::StatusOr<BaselineResults> b = RunBaselines(g_, cached_, cfg_.baseline_config, stop_);
  if (!b.ok()) {
    // Stopped before any baseline finished: the result stays no-fusion.
    return StopToken::IsStop(b.status()) && stop_.StopRequested() ? absl::OkStatus() : b.status();
  }
  const EvaluatedPlan& best = b->Best();
  if (best.sim.iteration_s < result.sim.iteration_s) {
    result.plan = best.plan;
    result.sim = best.sim;
    result.origin = absl::StrCat("baseline:", best.name);
  }
  // After a stop no step will dequeue it: the result above is what counts.
  absl::StatusOr<FusionState> st = FusionState::FromPlan(ctx_, best.plan, stop_);
  if (st.ok()) {
    Enqueue(best.sim.iteration_s, std::make_shared<const FusionState>(*std::move(st)));
  } else if (!StopToken::IsStop(st.status()) || !stop_.StopRequested()) {
    return st.status();
  }
  result.baselines = *std::move(b);
  return absl::OkStatus();
}

absl::StatusOr<SearchResult> Searcher::Run() {
  start_ = std::chrono::steady_clock::now();
  stop_.AddFlag(cfg_.cancel);
  if (cfg_.time_budget_s < SearchConfig::kNoDeadlineS) {
    const std::chrono::duration<double> budget(std::max(cfg_.time_budget_s, 0.0));
    stop_.SetDeadline(start_ +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(budget));
  }
  SearchResult result;
  SearchStats& stats = result.stats;
  ASSIGN_OR_RETURN(std::vector<graph::OpId> topo, g_.TopologicalOrder());
  facts_.topo = std::move(topo);
  facts_.lower.task_names = false;
  facts_.lower.resident_bytes = ResidentBytes(g_);

  // H_in: the no-fusion plan. Every result needs it, so the time budget does
  // not cut it short; a cancel does, and then there is no result to return.
  const StopToken cancel_only = stop_.FlagsOnly();
  Plan nf_plan = NoFusionPlan(g_);
  if (cfg_.fixed_groups.has_value()) nf_plan.groups = *cfg_.fixed_groups;
  auto no_result = [&] {
    return cancel_only.ToStatus("search stopped before its no-fusion plan was ready");
  };
  Evaluation nf = Evaluate(g_, facts_, nf_plan, cached_, cancel_only);
  if (nf.stopped) return no_result();
  if (!nf.valid) {
    return absl::InvalidArgumentError(absl::StrCat("no-fusion plan is invalid: ", nf.error));
  }
  absl::StatusOr<FusionState> nf_state = FusionState::FromPlan(ctx_, nf.plan, cancel_only);
  if (!nf_state.ok()) {
    const bool stopped = StopToken::IsStop(nf_state.status()) && cancel_only.StopRequested();
    return stopped ? no_result() : nf_state.status();
  }
  cache_[SearchFingerprint(nf.plan)] = {true, nf.cost};
  result.plan = nf.plan;
  result.sim = nf.sim;
  result.origin = "no_fusion";
  Enqueue(nf.cost, std::make_shared<const FusionState>(*std::move(nf_state)));

  if (cfg_.seed_with_baselines && !cfg_.fixed_groups.has_value() && !stop_.StopRequested()) {
    RETURN_IF_ERROR(SeedWithBaselines(result));
  }

  // Like H_in, starting points are evaluated even when the time budget has
  // run out (one evaluation each): a resumed job never ends worse than its
  // checkpoint.
  for (const Plan& init : cfg_.initial_plans) {
    Evaluation e = Evaluate(g_, facts_, init, cached_, cancel_only);
    if (!e.valid) continue;
    absl::StatusOr<FusionState> st = FusionState::FromPlan(ctx_, e.plan, cancel_only);
    if (!st.ok()) continue;
    cache_[SearchFingerprint(e.plan)] = {true, e.cost};
    if (e.cost < result.sim.iteration_s) {
      result.plan = e.plan;
      result.sim = e.sim;
      result.origin = "initial";
    }
    Enqueue(e.cost, std::make_shared<const FusionState>(*std::move(st)));
  }

  constexpr Method kMethods[] = {Method::kNonDuplicate, Method::kDuplicate, Method::kAllReduce};
  int unchanged = 0;
  int64_t reported_improvements = 0;
  while (true) {
    if (queue_.empty()) {
      stats.stop_reason = "queue empty";
      break;
    }
    if (unchanged >= cfg_.patience) {
      stats.stop_reason = "patience";
      break;
    }
    if (cfg_.max_steps > 0 && stats.steps >= cfg_.max_steps) {
      stats.stop_reason = "max steps";
      break;
    }
    if (stop_.StopRequested()) {
      stats.stop_reason = StopReason();
      break;
    }
    const std::shared_ptr<const FusionState> h = queue_.begin()->second;
    queue_.erase(queue_.begin());
    ++stats.steps;

    // Generate serially (all randomness here), evaluate misses in parallel.
    std::vector<std::shared_ptr<FusionState>> cands;
    std::vector<Plan> plans;
    std::vector<uint64_t> fps;
    std::vector<bool> unchanged_from_h;
    std::vector<Plan> to_eval;
    std::vector<int> eval_index;
    std::unordered_map<uint64_t, int> batch;
    for (Method m : kMethods) {
      if (cfg_.fixed_groups.has_value() && m != Method::kAllReduce) continue;
      const int n = std::uniform_int_distribution<int>(0, std::max(cfg_.beta, 0))(rng_);
      auto st = std::make_shared<FusionState>(*h);
      const int applied = st->RandomApply(m, n, rng_, stop_);
      Plan p = st->ToPlan();
      const uint64_t fp = SearchFingerprint(p);
      int idx = -1;
      if (!cache_.count(fp)) {
        auto [it, inserted] = batch.emplace(fp, static_cast<int>(to_eval.size()));
        if (inserted) to_eval.push_back(p);
        idx = it->second;
      }
      cands.push_back(std::move(st));
      plans.push_back(std::move(p));
      fps.push_back(fp);
      unchanged_from_h.push_back(applied == 0);
      eval_index.push_back(idx);
    }
    // A step cut short by a stop (a half-applied candidate, skipped
    // evaluations) is dropped whole; the result keeps the best so far.
    if (stop_.StopRequested()) {
      stats.stop_reason = StopReason();
      break;
    }
    std::vector<Evaluation> evals = EvaluateAll(to_eval);
    if (stop_.StopRequested()) {
      stats.stop_reason = StopReason();
      break;
    }
    stats.candidates_simulated += static_cast<int64_t>(to_eval.size());

    for (size_t i = 0; i < cands.size(); ++i) {
      ++stats.candidates_generated;
      const Evaluation* e = nullptr;
      CacheEntry entry;
      auto hit = cache_.find(fps[i]);
      if (hit != cache_.end()) {
        ++stats.cache_hits;
        entry = hit->second;
      } else {
        e = &evals[eval_index[i]];
        entry = {e->valid, e->cost};
        cache_[fps[i]] = entry;
      }
      if (!entry.valid) {
        ++stats.invalid;
        continue;
      }
      if (entry.cost < result.sim.iteration_s && e != nullptr) {
        result.plan = e->plan;
        result.sim = e->sim;
        result.origin = "search";
        ++stats.improvements;
        unchanged = 0;
      } else {
        ++unchanged;
      }
      if (entry.cost <= cfg_.alpha * result.sim.iteration_s) {
        if (e != nullptr) {
          cands[i]->SetBuckets(e->plan.buckets);
        } else if (!unchanged_from_h[i]) {
          // A cached plan reached by another path: put its buckets in
          // production order as its first evaluation did.
          absl::StatusOr<Plan> sorted = SortBucketsByProduction(g_, plans[i]);
          if (sorted.ok()) cands[i]->SetBuckets(sorted->buckets);
        }
        Enqueue(entry.cost, std::move(cands[i]));
        ++stats.enqueued;
      }
    }
    if (cfg_.progress) {
      cfg_.progress(SearchProgress{result.sim.iteration_s, stats.candidates_generated, Elapsed(),
                                   &result.plan, stats.improvements != reported_improvements});
      reported_improvements = stats.improvements;
    }
  }
  stats.elapsed_s = Elapsed();
  if (result.baselines.has_value()) {
    std::vector<costmodel::SimResult> sims;
    for (const EvaluatedPlan& b : result.baselines->baselines) sims.push_back(b.sim);
    sims.push_back(result.sim);
    result.fo_bound_s = FullyOverlappedBound(sims);
  } else {
    result.fo_bound_s = FullyOverlappedBound(std::span<const costmodel::SimResult>(&result.sim, 1));
  }
  return result;
}

}  // namespace

absl::StatusOr<SearchResult> RunFusionSearch(const Graph& training_graph, costmodel::CostModel& cm,
                                             const SearchConfig& cfg) {
  if (!(cfg.alpha >= 1 && cfg.alpha <= kMaxAlpha)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SearchConfig.alpha must be in [1, ", kMaxAlpha, "], got ", cfg.alpha));
  }
  if (cfg.beta < 0 || cfg.beta > kMaxBeta) {
    return absl::InvalidArgumentError(
        absl::StrCat("SearchConfig.beta must be in [0, ", kMaxBeta, "], got ", cfg.beta));
  }
  if (std::isnan(cfg.time_budget_s)) {
    return absl::InvalidArgumentError("SearchConfig.time_budget_s is NaN");
  }
  if (cfg.threads < 1) return absl::InvalidArgumentError("SearchConfig.threads must be >= 1");
  Searcher s(training_graph, cm, cfg);
  return s.Run();
}

absl::StatusOr<SearchResult> RunTensorFusionOnly(const Graph& g, costmodel::CostModel& cm,
                                                 SearchConfig cfg,
                                                 const BaselineResults& baselines) {
  const EvaluatedPlan* xla = baselines.Find("xla_op_fusion");
  if (xla == nullptr) {
    return absl::FailedPreconditionError("the xla_op_fusion baseline did not run");
  }
  cfg.fixed_groups = xla->plan.groups;
  cfg.seed_with_baselines = false;
  cfg.initial_plans.clear();
  if (const EvaluatedPlan* jax = baselines.Find("jax_default")) cfg.initial_plans.push_back(jax->plan);
  return RunFusionSearch(g, cm, cfg);
}

absl::StatusOr<SearchResult> RunBucketOnlySearch(const Graph& g, costmodel::CostModel& cm,
                                                 SearchConfig cfg) {
  const auto start = std::chrono::steady_clock::now();
  // The baselines count towards the budget and stop on a cancel. Past the
  // budget before any finished, the search below still returns its
  // starting plan (one AllReduce per gradient); a cancel has no result.
  StopToken stop = cfg.stop;
  stop.AddFlag(cfg.cancel);
  stop.SetBudget(cfg.time_budget_s);
  absl::StatusOr<BaselineResults> baselines = RunBaselines(g, cm, cfg.baseline_config, stop);
  BaselineResults all;
  if (baselines.ok()) {
    all = *std::move(baselines);
  } else if (StopToken::IsStop(baselines.status()) && stop.StopRequested() && !stop.cancelled()) {
    all.complete = false;
  } else {
    return baselines.status();
  }
  BaselineResults kept;
  kept.complete = all.complete;
  std::vector<costmodel::SimResult> sims;
  for (EvaluatedPlan& b : all.baselines) {
    if (!b.plan.groups.empty()) continue;
    cfg.initial_plans.push_back(b.plan);
    sims.push_back(b.sim);
    kept.baselines.push_back(std::move(b));
  }
  cfg.fixed_groups = std::vector<FusionGroup>{};
  cfg.seed_with_baselines = false;
  cfg.time_budget_s = std::max(
      0.0, cfg.time_budget_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  ASSIGN_OR_RETURN(SearchResult r, RunFusionSearch(g, cm, cfg));
  if (!kept.baselines.empty()) {
    const EvaluatedPlan& best = kept.Best();
    if (r.sim.iteration_s > best.sim.iteration_s * (1 - cfg.min_gain)) {
      r.plan = best.plan;
      r.sim = best.sim;
      r.origin = absl::StrCat("baseline:", best.name);
    }
  }
  sims.push_back(r.sim);
  kept.fo_bound_s = FullyOverlappedBound(sims);
  r.fo_bound_s = kept.fo_bound_s;
  // As RunFusionSearch: present when some baseline finished.
  if (!kept.baselines.empty()) r.baselines = std::move(kept);
  return r;
}

}  // namespace braid::search
