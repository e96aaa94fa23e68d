#include "search/backtracking.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

Evaluation Evaluate(const Graph& g, const GraphFacts& facts, Plan plan, costmodel::CostModel& cm) {
  Evaluation e;
  absl::StatusOr<Contraction> c = Contract(g, plan, facts.topo);
  if (!c.ok()) {
    e.error = std::string(c.status().message());
    return e;
  }
  SortBucketsByProduction(g, &plan, &*c);
  absl::StatusOr<costmodel::SimGraph> sg =
      LowerContraction(g, plan, *c, cm, /*node_task=*/nullptr, facts.lower);
  if (!sg.ok()) {
    e.error = std::string(sg.status().message());
    return e;
  }
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
      : g_(g), cached_(cm), cfg_(cfg), ctx_(g), rng_(cfg.seed) {}

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

  const Graph& g_;
  CachedCostModel cached_;
  GraphFacts facts_;
  const SearchConfig& cfg_;
  SearchContext ctx_;
  std::mt19937_64 rng_;
  std::chrono::steady_clock::time_point start_;
  std::map<QueueKey, std::shared_ptr<const FusionState>> queue_;
  int64_t seq_ = 0;
  std::unordered_map<uint64_t, CacheEntry> cache_;
};

std::vector<Evaluation> Searcher::EvaluateAll(const std::vector<Plan>& plans) {
  std::vector<Evaluation> out(plans.size());
  const int m = static_cast<int>(plans.size());
  const int threads = std::max(1, std::min(cfg_.threads, m));
  auto work = [&](int k) {
    for (int i = k; i < m; i += threads) out[i] = Evaluate(g_, facts_, plans[i], cached_);
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < threads; ++k) pool.emplace_back(work, k);
  work(0);
  for (std::thread& t : pool) t.join();
  return out;
}

absl::StatusOr<SearchResult> Searcher::Run() {
  start_ = std::chrono::steady_clock::now();
  SearchResult result;
  SearchStats& stats = result.stats;
  absl::StatusOr<std::vector<graph::OpId>> topo = g_.TopologicalOrder();
  if (!topo.ok()) return topo.status();
  facts_.topo = *std::move(topo);
  facts_.lower.task_names = false;
  facts_.lower.resident_bytes = ResidentBytes(g_);

  // H_in: the no-fusion plan.
  const Plan nf_plan = NoFusionPlan(g_);
  Evaluation nf = Evaluate(g_, facts_, nf_plan, cached_);
  if (!nf.valid) {
    return absl::InvalidArgumentError(absl::StrCat("no-fusion plan is invalid: ", nf.error));
  }
  absl::StatusOr<FusionState> nf_state = FusionState::FromPlan(ctx_, nf.plan);
  if (!nf_state.ok()) return nf_state.status();
  cache_[SearchFingerprint(nf.plan)] = {true, nf.cost};
  result.plan = nf.plan;
  result.sim = nf.sim;
  result.origin = "no_fusion";
  Enqueue(nf.cost, std::make_shared<const FusionState>(*std::move(nf_state)));

  if (cfg_.seed_with_baselines) {
    absl::StatusOr<BaselineResults> b = RunBaselines(g_, cached_, cfg_.baseline_config);
    if (!b.ok()) return b.status();
    const EvaluatedPlan& best = b->Best();
    absl::StatusOr<FusionState> st = FusionState::FromPlan(ctx_, best.plan);
    if (!st.ok()) return st.status();
    if (best.sim.iteration_s < result.sim.iteration_s) {
      result.plan = best.plan;
      result.sim = best.sim;
      result.origin = absl::StrCat("baseline:", best.name);
    }
    Enqueue(best.sim.iteration_s, std::make_shared<const FusionState>(*std::move(st)));
    result.baselines = *std::move(b);
  }

  for (const Plan& init : cfg_.initial_plans) {
    Evaluation e = Evaluate(g_, facts_, init, cached_);
    if (!e.valid) continue;
    absl::StatusOr<FusionState> st = FusionState::FromPlan(ctx_, e.plan);
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
    if (Elapsed() >= cfg_.time_budget_s) {
      stats.stop_reason = "time budget";
      break;
    }
    if (cfg_.cancel != nullptr && cfg_.cancel->load(std::memory_order_relaxed)) {
      stats.stop_reason = "cancelled";
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
      const int n = std::uniform_int_distribution<int>(0, std::max(cfg_.beta, 0))(rng_);
      auto st = std::make_shared<FusionState>(*h);
      const int applied = st->RandomApply(m, n, rng_);
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
    std::vector<Evaluation> evals = EvaluateAll(to_eval);
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
  if (cfg.alpha < 1) return absl::InvalidArgumentError("SearchConfig.alpha must be >= 1");
  if (cfg.beta < 0) return absl::InvalidArgumentError("SearchConfig.beta must be >= 0");
  if (cfg.threads < 1) return absl::InvalidArgumentError("SearchConfig.threads must be >= 1");
  Searcher s(training_graph, cm, cfg);
  return s.Run();
}

absl::StatusOr<bool> FusionSearchPass::Run(const Graph& training_graph, costmodel::CostModel& cm,
                                           Plan* plan) {
  absl::StatusOr<SearchResult> r = RunFusionSearch(training_graph, cm, cfg_);
  if (!r.ok()) return r.status();
  const bool changed = !(r->plan == *plan);
  *plan = r->plan;
  last_ = *std::move(r);
  return changed;
}

}  // namespace braid::search
