// Tests of the search state and its three fusion methods (DisCo §4.5):
// non-duplicate, duplicate and AllReduce fusion.
#include "search/fusion_state.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "glog/logging.h"
#include "search/fusion_state.h"
#include "search/contraction.h"
#include "search/test_util.h"
#include "search/validity.h"

namespace braid::search {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

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
}  // namespace
}  // namespace braid::search
