// Tests of plan validity: fusions that close cycles, duplicate fusion, named
// errors, at most one library op per kernel.
#include "search/validity.h"

#include <string>

#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"
#include "search/contraction.h"
#include "search/test_util.h"
#include "search/validity.h"

namespace braid::search {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// a -> b, a -> c -> b (all Relu-like), x input.
struct Diamond {
  Graph g{"diamond"};
  OpId a, b, c;
};

Diamond MakeDiamond() {
  Diamond d;
  d.g = *graph::ParseText(R"(graph "diamond"
tensor x f32[16] input
tensor ta f32[16] activation
tensor tc f32[16] activation
tensor tb f32[16] activation
op a Relu (x) -> (ta)
op c Sigmoid (ta) -> (tc)
op b Add (ta, tc) -> (tb)
output tb
)");
  d.a = 0;  // ops keep their listed order
  d.c = 1;
  d.b = 2;
  return d;
}

TEST(ValidityTest, RejectsFusionThatCreatesACycle) {
  Diamond d = MakeDiamond();
  Plan p;
  p.groups.push_back({{d.a, d.b}, {}});
  absl::Status s = ValidatePlan(d.g, p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cyclic"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("group 0 {a, b}"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("op 'c'"));
}

TEST(ValidityTest, AcceptsDuplicateFusionWhoseReplicaFeedsAnotherConsumer) {
  Diamond d = MakeDiamond();
  Plan p;
  p.groups.push_back({{d.a, d.b}, {d.a}});  // a recomputed in the group; replica feeds c
  EXPECT_TRUE(ValidatePlan(d.g, p).ok()) << ValidatePlan(d.g, p);
  absl::StatusOr<Contraction> c = Contract(d.g, p);
  ASSERT_TRUE(c.ok());
  // Nodes: the group, the replica of a, c. c reads the replica, the group reads c.
  const int group = c->group_node[0];
  EXPECT_NE(c->home[d.a], group);
  EXPECT_THAT(c->nodes[c->home[d.c]].deps, ElementsAre(c->home[d.a]));
  EXPECT_THAT(c->nodes[group].deps, ElementsAre(c->home[d.c]));
}

TEST(ValidityTest, NamesTheOffendingOpOrBucket) {
  TinyTraining t = MakeTinyTraining();
  Plan base = NoFusionPlan(t.g);
  Plan p = base;
  p.groups.push_back({{t.w_grad, t.ar_w}, {}});
  absl::Status s = ValidatePlan(t.g, p);
  EXPECT_THAT(std::string(s.message()), HasSubstr("op 'w.grad.allreduce' (type AllReduce"));

  p = base;
  p.groups.push_back({{t.relu, t.b_grad}, {}});  // not adjacent
  s = ValidatePlan(t.g, p);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is not connected"));

  p = base;
  p.groups.push_back({{t.relu_grad, t.b_grad}, {}});
  p.groups.push_back({{t.relu_grad, t.w_grad}, {}});
  s = ValidatePlan(t.g, p);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("op 'relu_grad' is a non-duplicated member of groups 0 and 1"));

  p = base;
  p.buckets.pop_back();
  s = ValidatePlan(t.g, p);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is in no bucket"));

  p = base;
  p.buckets.push_back(p.buckets[0]);
  s = ValidatePlan(t.g, p);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is in buckets 0 and 2"));

  p = base;
  p.groups.push_back({{t.relu_grad, t.b_grad}, {t.b_grad}});
  s = ValidatePlan(t.g, p);
  EXPECT_THAT(std::string(s.message()), HasSubstr("duplicated op 'b_grad' feeds no member"));
}

TEST(ValidityTest, AtMostOneLibraryOpPerGroup) {
  Graph g = testing::MakeMlpTraining(2, 8, 4);
  auto op = [&](const std::string& name) {
    for (OpId o = 0; o < g.num_ops(); ++o) {
      if (g.op(o).name == name) return o;
    }
    ADD_FAILURE() << name;
    return OpId{0};
  };
  Plan p = NoFusionPlan(g);
  // One library op with its epilogue and the next layer's prologue: fine.
  p.groups.push_back({{op("l0.mm"), op("l0.add"), op("l0.relu")}, {}});
  EXPECT_TRUE(ValidatePlan(g, p).ok()) << ValidatePlan(g, p);
  // Two MatMuls in one kernel: not realizable.
  p.groups[0].ops.push_back(op("l1.mm"));
  absl::Status s = ValidatePlan(g, p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("group 0 {l0.mm, l0.add, l0.relu, l1.mm} holds two library ops, "
                        "'l0.mm' (MatMul) and 'l1.mm' (MatMul)"));
  // A duplicated library op counts too: l1.mm's kernel recomputing layer 0.
  p.groups[0] = {{op("l0.mm"), op("l0.add"), op("l0.relu"), op("l1.mm")},
                 {op("l0.mm"), op("l0.add"), op("l0.relu")}};
  s = ValidatePlan(g, p);
  EXPECT_THAT(std::string(s.message()), HasSubstr("holds two library ops"));
}

}  // namespace
}  // namespace braid::search
