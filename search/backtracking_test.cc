// Tests of the three optimization methods (fusion_state.h) and of the
// backtracking search (backtracking.h).
#include "search/backtracking.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "glog/logging.h"
#include "search/contraction.h"
#include "search/fusion_state.h"
#include "search/test_util.h"
#include "search/validity.h"

namespace braid::search {
namespace {

using graph::DType;
using graph::Graph;
using graph::OpId;
using graph::TensorId;
using graph::TensorRole;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using testing::FakeCostModel;

// x -> a -> {b, d}; b -> c. All elementwise; c and d are graph outputs.
struct Fork {
  Graph g{"fork"};
  OpId a, b, c, d;
};

Fork MakeFork() {
  Fork f;
  Graph& g = f.g;
  TensorId x = g.AddTensor("x", {16}, DType::kF32, TensorRole::kInput);
  TensorId ta = g.AddTensor("ta", {16}, DType::kF32, TensorRole::kActivation);
  TensorId tb = g.AddTensor("tb", {16}, DType::kF32, TensorRole::kActivation);
  TensorId tc = g.AddTensor("tc", {16}, DType::kF32, TensorRole::kActivation);
  TensorId td = g.AddTensor("td", {16}, DType::kF32, TensorRole::kActivation);
  f.a = g.AddOp("a", "Relu", {x}, {ta});
  f.b = g.AddOp("b", "Sigmoid", {ta}, {tb});
  f.c = g.AddOp("c", "Relu", {tb}, {tc});
  f.d = g.AddOp("d", "Tanh", {ta}, {td});
  g.AddOutput(tc);
  g.AddOutput(td);
  return f;
}

FusionState StateOf(const SearchContext& ctx) {
  absl::StatusOr<FusionState> s = FusionState::FromPlan(ctx, NoFusionPlan(ctx.graph()));
  CHECK(s.ok()) << s.status();
  return *std::move(s);
}

TEST(FusionStateTest, NonDuplicateFusionRedirectsOtherSuccessors) {
  Fork f = MakeFork();
  SearchContext ctx(f.g);
  FusionState s = StateOf(ctx);
  ASSERT_TRUE(s.FuseNonDuplicate(f.b, f.a).ok());
  Plan p = s.ToPlan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_THAT(p.groups[0].ops, ElementsAre(f.a, f.b));
  EXPECT_TRUE(p.groups[0].duplicated.empty());
  // d now reads the fused node; fusing further down the chain grows the group.
  ASSERT_TRUE(s.FuseNonDuplicate(f.c, f.b).ok());
  p = s.ToPlan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_THAT(p.groups[0].ops, ElementsAre(f.a, f.b, f.c));
  EXPECT_TRUE(ValidatePlan(f.g, p).ok());
}

TEST(FusionStateTest, DuplicateFusionKeepsAReplicaForOtherSuccessors) {
  Fork f = MakeFork();
  SearchContext ctx(f.g);
  FusionState s = StateOf(ctx);
  ASSERT_TRUE(s.FuseDuplicate(f.b, f.a).ok());
  Plan p = s.ToPlan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_THAT(p.groups[0].ops, ElementsAre(f.a, f.b));
  EXPECT_THAT(p.groups[0].duplicated, ElementsAre(f.a));
  EXPECT_TRUE(ValidatePlan(f.g, p).ok());
  // b's node feeds only c: duplicate fusion of it is plain fusion.
  ASSERT_TRUE(s.FuseDuplicate(f.c, f.b).ok());
  p = s.ToPlan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_THAT(p.groups[0].ops, ElementsAre(f.a, f.b, f.c));
  EXPECT_THAT(p.groups[0].duplicated, ElementsAre(f.a));
  // The replica of a can itself absorb... nothing: x is an input. d takes a
  // non-duplicated: a's home moves into d's node, the copy in {a,b,c} stays.
  ASSERT_TRUE(s.FuseNonDuplicate(f.d, f.a).ok());
  p = s.ToPlan();
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_THAT(p.groups[0].ops, ElementsAre(f.a, f.b, f.c));
  EXPECT_THAT(p.groups[0].duplicated, ElementsAre(f.a));
  EXPECT_THAT(p.groups[1].ops, ElementsAre(f.a, f.d));
  EXPECT_TRUE(p.groups[1].duplicated.empty());
  EXPECT_TRUE(ValidatePlan(f.g, p).ok()) << ValidatePlan(f.g, p);
}

TEST(FusionStateTest, NonDuplicateFusionThatClosesACycleIsRefused) {
  // a -> b, a -> c -> b
  Graph g("diamond");
  TensorId x = g.AddTensor("x", {16}, DType::kF32, TensorRole::kInput);
  TensorId ta = g.AddTensor("ta", {16}, DType::kF32, TensorRole::kActivation);
  TensorId tc = g.AddTensor("tc", {16}, DType::kF32, TensorRole::kActivation);
  TensorId tb = g.AddTensor("tb", {16}, DType::kF32, TensorRole::kActivation);
  OpId a = g.AddOp("a", "Relu", {x}, {ta});
  OpId c = g.AddOp("c", "Sigmoid", {ta}, {tc});
  OpId b = g.AddOp("b", "Add", {ta, tc}, {tb});
  g.AddOutput(tb);
  SearchContext ctx(g);
  FusionState s = StateOf(ctx);
  absl::Status st = s.FuseNonDuplicate(b, a);
  EXPECT_THAT(std::string(st.message()), HasSubstr("would create a cycle"));
  ASSERT_TRUE(s.FuseDuplicate(b, a).ok());
  Plan p = s.ToPlan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_THAT(p.groups[0].ops, ElementsAre(a, b));
  EXPECT_THAT(p.groups[0].duplicated, ElementsAre(a));
  EXPECT_TRUE(ValidatePlan(g, p).ok());
  (void)c;
}

OpId OpNamed(const Graph& g, const std::string& name) {
  for (OpId o = 0; o < g.num_ops(); ++o) {
    if (g.op(o).name == name) return o;
  }
  ADD_FAILURE() << name;
  return 0;
}

TEST(FusionStateTest, FusionsNeverPutTwoLibraryOpsInOneKernel) {
  Graph g = testing::MakeMlpTraining(2, 8, 4);
  SearchContext ctx(g);
  FusionState s = StateOf(ctx);
  const OpId mm0 = OpNamed(g, "l0.mm"), add0 = OpNamed(g, "l0.add");
  const OpId relu0 = OpNamed(g, "l0.relu"), mm1 = OpNamed(g, "l1.mm");
  ASSERT_TRUE(s.FuseNonDuplicate(add0, mm0).ok());
  ASSERT_TRUE(s.FuseNonDuplicate(relu0, add0).ok());
  // relu0's node holds l0.mm: neither fusion into l1.mm is allowed.
  absl::Status st = s.FuseNonDuplicate(mm1, relu0);
  EXPECT_THAT(std::string(st.message()), HasSubstr("library ops 'l1.mm' and 'l0.mm'"));
  st = s.FuseDuplicate(mm1, relu0);
  EXPECT_THAT(std::string(st.message()), HasSubstr("library ops 'l1.mm' and 'l0.mm'"));
  // The state is unchanged and valid.
  Plan p = s.ToPlan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_THAT(p.groups[0].ops, ElementsAre(mm0, add0, relu0));
  // Random fusion of every kind keeps every plan valid.
  std::mt19937_64 rng(3);
  for (int k = 0; k < 50; ++k) {
    s.RandomApply(k % 2 ? Method::kDuplicate : Method::kNonDuplicate, 3, rng);
    Plan q = s.ToPlan();
    ASSERT_TRUE(ValidatePlan(g, q).ok()) << ValidatePlan(g, q);
  }
}

TEST(FusionStateTest, AllReduceFusionMergesNeighbourBuckets) {
  Graph g = testing::MakeMlpTraining(2, 8, 4);
  SearchContext ctx(g);
  absl::StatusOr<Plan> nf = SortBucketsByProduction(g, NoFusionPlan(g));
  ASSERT_TRUE(nf.ok());
  absl::StatusOr<FusionState> s = FusionState::FromPlan(ctx, *nf);
  ASSERT_TRUE(s.ok());
  auto name = [&](const Plan& p, int b, int k) { return g.tensor(p.buckets[b].grads[k]).name; };
  ASSERT_EQ(s->num_buckets(), 4);
  EXPECT_EQ(name(*nf, 0, 0), "l1.b.grad");
  EXPECT_EQ(name(*nf, 3, 0), "l0.w.grad");
  EXPECT_THAT(s->NeighbourBuckets(0), ElementsAre(1));
  EXPECT_THAT(s->NeighbourBuckets(2), ElementsAre(1, 3));
  ASSERT_TRUE(s->MergeBuckets(2, 1).ok());
  Plan p = s->ToPlan();
  ASSERT_EQ(p.buckets.size(), 3u);
  EXPECT_EQ(name(p, 0, 0), "l1.b.grad");
  ASSERT_EQ(p.buckets[1].grads.size(), 2u);
  EXPECT_EQ(name(p, 1, 0), "l1.w.grad");
  EXPECT_EQ(name(p, 1, 1), "l0.b.grad");
  EXPECT_EQ(name(p, 2, 0), "l0.w.grad");
  EXPECT_TRUE(ValidatePlan(g, p).ok());

  // A fused node producing two gradients makes their buckets neighbours.
  absl::StatusOr<FusionState> s2 = FusionState::FromPlan(ctx, *nf);
  ASSERT_TRUE(s2.ok());
  // l1.b_grad reads l1.relu_grad; fuse so that one node produces l1.b.grad,
  // and its successor... check the structural rule on the relu_grad node:
  // l1.w_grad's predecessor node is {l1.relu_grad, l1.b_grad}, which produces
  // l1.b.grad (bucket 0): neighbour of bucket 1 structurally and by order.
  OpId relu_grad = -1, b_grad = -1;
  for (OpId o = 0; o < g.num_ops(); ++o) {
    if (g.op(o).name == "l1.relu_grad") relu_grad = o;
    if (g.op(o).name == "l1.b_grad") b_grad = o;
  }
  ASSERT_TRUE(s2->FuseNonDuplicate(b_grad, relu_grad).ok());
  EXPECT_THAT(s2->NeighbourBuckets(1), ElementsAre(0, 2));
}

TEST(FusionStateTest, RandomApplyOnlyMoveAvailable) {
  Graph g("chain");
  TensorId x = g.AddTensor("x", {16}, DType::kF32, TensorRole::kInput);
  TensorId ta = g.AddTensor("ta", {16}, DType::kF32, TensorRole::kActivation);
  TensorId tb = g.AddTensor("tb", {16}, DType::kF32, TensorRole::kActivation);
  OpId a = g.AddOp("a", "Relu", {x}, {ta});
  OpId b = g.AddOp("b", "Relu", {ta}, {tb});
  g.AddOutput(tb);
  SearchContext ctx(g);
  FusionState s = StateOf(ctx);
  std::mt19937_64 rng(3);
  EXPECT_EQ(s.RandomApply(Method::kNonDuplicate, 1, rng), 1);
  Plan p = s.ToPlan();
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_THAT(p.groups[0].ops, ElementsAre(a, b));
  // Nothing is left to fuse.
  EXPECT_EQ(s.RandomApply(Method::kNonDuplicate, 2, rng), 0);
}

TEST(FusionStateTest, RandomAllReduceFusionMergesEverything) {
  Graph g = testing::MakeMlpTraining(1, 8, 4);
  SearchContext ctx(g);
  FusionState s = StateOf(ctx);
  ASSERT_EQ(s.num_buckets(), 2);
  std::mt19937_64 rng(11);
  EXPECT_EQ(s.RandomApply(Method::kAllReduce, 3, rng), 1);  // then no pair is left
  Plan p = s.ToPlan();
  ASSERT_EQ(p.buckets.size(), 1u);
  std::vector<std::string> names;
  for (TensorId t2 : p.buckets[0].grads) names.push_back(g.tensor(t2).name);
  EXPECT_THAT(names, UnorderedElementsAre("l0.b.grad", "l0.w.grad"));
}

// A cost model under which fusing elementwise ops pays off and AllReduce has
// a large fixed cost, so both kinds of fusion matter.
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

namespace braid::search {
namespace {

TEST(FusionSearchPassTest, ReplacesThePlan) {
  graph::Graph g = testing::MakeMlpTraining(2, 64, 8);
  testing::FakeCostModel cm;
  SearchConfig cfg;
  cfg.max_steps = 20;
  FusionSearchPass pass(cfg);
  Plan plan = NoFusionPlan(g);
  absl::StatusOr<bool> changed = pass.Run(g, cm, &plan);
  ASSERT_TRUE(changed.ok()) << changed.status();
  ASSERT_TRUE(pass.last_result().has_value());
  EXPECT_EQ(plan, pass.last_result()->plan);
  EXPECT_EQ(*changed, !(plan == NoFusionPlan(g)));
}

}  // namespace
}  // namespace braid::search
