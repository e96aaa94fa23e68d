// Tests of the backtracking search (backtracking.h): never worse than the
// best baseline, reproducible, cancellable, resumable.
#include "search/backtracking.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "search/test_util.h"
#include "search/validity.h"

namespace braid::search {
namespace {


FakeCostModel SearchCosts() {
  FakeCostModel cm;
  cm.type_s = {{"MatMul", 1e-3}, {"SgdMomentumUpdate", 0.05e-3}};
  cm.default_s = 0.2e-3;
  cm.fused_scale = 0.6;
  cm.comm_latency_s = 0.4e-3;
  cm.comm_s_per_byte = 1e-9;
  return cm;
}

TEST(BacktrackingSearchTest, NeverWorseThanBestBaselineAndReproducible) {
  for (int layers : {2, 3, 5}) {
    Graph g = testing::MakeMlpTraining(layers, 128, 16);
    FakeCostModel cm = SearchCosts();
    SearchConfig cfg;
    cfg.seed = 5;
    cfg.max_steps = 150;
    cfg.time_budget_s = 30;
    int progress_calls = 0;
    cfg.progress = [&](const SearchProgress& p) {
      ++progress_calls;
      EXPECT_GT(p.best_cost_s, 0);
    };
    absl::StatusOr<SearchResult> r = RunFusionSearch(g, cm, cfg);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->baselines.has_value());
    const double best_baseline = r->baselines->Best().sim.iteration_s;
    EXPECT_LE(r->sim.iteration_s, best_baseline) << layers << " layers";
    EXPECT_GE(r->sim.iteration_s, r->fo_bound_s);
    EXPECT_TRUE(ValidatePlan(g, r->plan).ok()) << ValidatePlan(g, r->plan);
    EXPECT_GT(r->stats.candidates_generated, 0);
    EXPECT_EQ(progress_calls, r->stats.steps);
    // Re-costing the returned plan gives the reported time.
    absl::StatusOr<costmodel::SimResult> again = EvaluatePlan(g, r->plan, cm);
    ASSERT_TRUE(again.ok());
    EXPECT_NEAR(again->iteration_s, r->sim.iteration_s, 1e-12);

    // Same seed: identical plan, with any thread count.
    cfg.progress = nullptr;
    cfg.threads = 2;
    FakeCostModel cm2 = SearchCosts();
    absl::StatusOr<SearchResult> r2 = RunFusionSearch(g, cm2, cfg);
    ASSERT_TRUE(r2.ok());
    EXPECT_EQ(r2->plan, r->plan);
    EXPECT_EQ(r2->sim.iteration_s, r->sim.iteration_s);
    EXPECT_EQ(r2->stats.candidates_generated, r->stats.candidates_generated);
  }
}

// Buckets only: no fused group, only baselines without op fusion, and the
// best of them kept unless the search beats it by min_gain.
TEST(BacktrackingSearchTest, BucketOnlySearchKeepsTheBaselineBelowMinGain) {
  Graph g = testing::MakeMlpTraining(5, 128, 16);
  FakeCostModel cm = SearchCosts();
  SearchConfig cfg;
  cfg.max_steps = 150;
  cfg.min_gain = 0;
  absl::StatusOr<SearchResult> r = RunBucketOnlySearch(g, cm, cfg);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->plan.groups.empty());
  ASSERT_TRUE(r->baselines.has_value());
  for (const EvaluatedPlan& b : r->baselines->baselines) {
    EXPECT_TRUE(b.plan.groups.empty()) << b.name;
    EXPECT_NE(b.name, "xla_op_fusion");
  }
  ASSERT_NE(r->baselines->Find("ddp"), nullptr);
  const EvaluatedPlan& best = r->baselines->Best();
  EXPECT_LE(r->sim.iteration_s, best.sim.iteration_s);
  // A gain no plan reaches: the best baseline's plan comes back as is.
  cfg.min_gain = 0.99;
  absl::StatusOr<SearchResult> kept = RunBucketOnlySearch(g, cm, cfg);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->plan, best.plan);
  EXPECT_EQ(kept->origin, "baseline:" + best.name);
  EXPECT_DOUBLE_EQ(kept->sim.iteration_s, best.sim.iteration_s);
}

TEST(BacktrackingSearchTest, FromNoFusionAloneImprovesOnIt) {
  Graph g = testing::MakeMlpTraining(3, 128, 16);
  FakeCostModel cm = SearchCosts();
  SearchConfig cfg;
  cfg.seed = 1;
  cfg.max_steps = 300;
  cfg.seed_with_baselines = false;
  absl::StatusOr<SearchResult> r = RunFusionSearch(g, cm, cfg);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<costmodel::SimResult> nf = EvaluatePlan(g, NoFusionPlan(g), cm);
  ASSERT_TRUE(nf.ok());
  EXPECT_LT(r->sim.iteration_s, nf->iteration_s);
  EXPECT_EQ(r->origin, "search");
  EXPECT_FALSE(r->plan.groups.empty());
  EXPECT_LT(r->plan.buckets.size(), 6u);
}

TEST(BacktrackingSearchTest, CancelStopsAndInitialPlansResume) {
  Graph g = testing::MakeMlpTraining(3, 128, 16);
  SearchConfig cfg;
  cfg.seed = 1;
  cfg.max_steps = 300;
  cfg.seed_with_baselines = false;
  FakeCostModel cm = SearchCosts();
  absl::StatusOr<SearchResult> first = RunFusionSearch(g, cm, cfg);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->origin, "search");

  // A search out of time before its first step, resumed from the first
  // search's best plan, returns that plan ("initial") at once: the budget
  // never cuts short the no-fusion plan or the starting points.
  SearchConfig resumed = cfg;
  resumed.time_budget_s = 0;
  resumed.initial_plans = {first->plan};
  FakeCostModel cm2 = SearchCosts();
  absl::StatusOr<SearchResult> r = RunFusionSearch(g, cm2, resumed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stats.stop_reason, "time budget");
  EXPECT_EQ(r->stats.steps, 0);
  EXPECT_EQ(r->origin, "initial");
  EXPECT_EQ(r->plan, first->plan);
  EXPECT_EQ(r->sim.iteration_s, first->sim.iteration_s);
  // A cancel does, and a search cancelled before it has costed even the
  // no-fusion plan has no result.
  std::atomic<bool> cancel{true};
  SearchConfig cancelled = resumed;
  cancelled.time_budget_s = 60;
  cancelled.cancel = &cancel;
  FakeCostModel cm4 = SearchCosts();
  EXPECT_EQ(RunFusionSearch(g, cm4, cancelled).status().code(), absl::StatusCode::kCancelled);

  // Progress reports carry the best plan and flag improvements.
  int improved = 0;
  SearchConfig watched = cfg;
  watched.progress = [&](const SearchProgress& p) {
    ASSERT_NE(p.best_plan, nullptr);
    improved += p.improved;
  };
  FakeCostModel cm3 = SearchCosts();
  absl::StatusOr<SearchResult> w = RunFusionSearch(g, cm3, watched);
  ASSERT_TRUE(w.ok());
  EXPECT_GT(improved, 0);
  EXPECT_LE(improved, w->stats.improvements);
}

TEST(BacktrackingSearchTest, RejectsBadConfig) {
  Graph g = testing::MakeMlpTraining(1, 8, 4);
  FakeCostModel cm;
  SearchConfig cfg;
  cfg.alpha = 0.5;
  EXPECT_EQ(RunFusionSearch(g, cm, cfg).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::search
