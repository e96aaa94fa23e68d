// Tests of plan.h (JSON, canonical form), validity.h and lowering.h.
#include "search/plan.h"

#include <string>

#include "costmodel/simulator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "search/contraction.h"
#include "search/lowering.h"
#include "search/test_util.h"
#include "search/validity.h"

namespace braid::search {
namespace {

using graph::DType;
using graph::Graph;
using graph::OpId;
using graph::Phase;
using graph::TensorId;
using graph::TensorRole;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::FakeCostModel;
using testing::MakeTinyTraining;
using testing::TinyTraining;

// a -> b, a -> c -> b (all Relu-like), x input.
struct Diamond {
  Graph g{"diamond"};
  OpId a, b, c;
};

Diamond MakeDiamond() {
  Diamond d;
  Graph& g = d.g;
  TensorId x = g.AddTensor("x", {16}, DType::kF32, TensorRole::kInput);
  TensorId ta = g.AddTensor("ta", {16}, DType::kF32, TensorRole::kActivation);
  TensorId tc = g.AddTensor("tc", {16}, DType::kF32, TensorRole::kActivation);
  TensorId tb = g.AddTensor("tb", {16}, DType::kF32, TensorRole::kActivation);
  d.a = g.AddOp("a", "Relu", {x}, {ta});
  d.c = g.AddOp("c", "Sigmoid", {ta}, {tc});
  d.b = g.AddOp("b", "Add", {ta, tc}, {tb});
  g.AddOutput(tb);
  return d;
}

TEST(PlanJsonTest, RoundTripsByName) {
  TinyTraining t = MakeTinyTraining();
  Plan p;
  p.groups.push_back({{t.relu_grad, t.b_grad}, {t.relu_grad}});
  p.buckets.push_back({{t.b_grad_t, t.w_grad_t}});
  nlohmann::json j = PlanToJson(t.g, p);
  EXPECT_EQ(j["groups"][0]["ops"], nlohmann::json({"relu_grad", "b_grad"}));
  EXPECT_EQ(j["groups"][0]["duplicated"], nlohmann::json({"relu_grad"}));
  EXPECT_EQ(j["buckets"][0], nlohmann::json({"b.grad", "w.grad"}));
  absl::StatusOr<Plan> back = PlanFromJson(t.g, nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);
}

TEST(PlanJsonTest, UnknownNamesAreNamedInTheError) {
  TinyTraining t = MakeTinyTraining();
  absl::StatusOr<Plan> p = PlanFromJson(
      t.g, nlohmann::json::parse(R"({"groups":[{"ops":["relu","nope"]}],"buckets":[]})"));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("groups[0].ops[1]: no op named 'nope'"));
  p = PlanFromJson(t.g, nlohmann::json::parse(R"({"buckets":[["w.grad","zz.grad"]]})"));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("no tensor named 'zz.grad'"));
}

TEST(PlanTest, CanonicalizeAndFingerprint) {
  Plan a;
  a.groups.push_back({{5, 3}, {}});
  a.groups.push_back({{2, 1}, {2}});
  a.groups.push_back({{7}, {}});  // a single unfused op: dropped
  a.buckets.push_back({{4, 9}});
  Plan c = Canonicalize(a);
  ASSERT_EQ(c.groups.size(), 2u);
  EXPECT_THAT(c.groups[0].ops, ElementsAre(1, 2));
  EXPECT_THAT(c.groups[1].ops, ElementsAre(3, 5));
  Plan b = c;
  EXPECT_EQ(PlanFingerprint(a), PlanFingerprint(b));
  b.buckets[0].grads = {9, 4};
  EXPECT_NE(PlanFingerprint(a), PlanFingerprint(b));
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

FakeCostModel TinyCosts() {
  FakeCostModel cm;
  cm.type_s = {{"MatMul", 4e-3},    {"Add", 1e-3},       {"Relu", 1e-3},
               {"ReluGrad", 1e-3},  {"ReduceSum", 1e-3}, {"SgdMomentumUpdate", 0.5e-3}};
  cm.comm_latency_s = 1e-3;
  cm.comm_s_per_byte = 1e-5;
  return cm;
}

TEST(LoweringTest, NoFusionTimingByHand) {
  TinyTraining t = MakeTinyTraining();
  FakeCostModel cm = TinyCosts();
  absl::StatusOr<Plan> plan = SortBucketsByProduction(t.g, NoFusionPlan(t.g));
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->buckets.size(), 2u);
  EXPECT_THAT(plan->buckets[0].grads, ElementsAre(t.b_grad_t));
  absl::StatusOr<costmodel::SimGraph> sg = Lower(t.g, *plan, cm);
  ASSERT_TRUE(sg.ok()) << sg.status();
  // 6 compute ops + 2 updates, 2 buckets.
  EXPECT_EQ(sg->tasks.size(), 10u);
  EXPECT_EQ(sg->comm_order.size(), 2u);
  // mm 0-4, add 4-5, relu 5-6, relu_grad 6-7, b_grad 7-8, w_grad 8-12 (ms);
  // b.grad (32 B): 1 + 0.32 ms on the channel 8-9.32; w.grad (256 B): 12-15.56;
  // b.update waits for the device: 12-12.5; w.update 15.56-16.06.
  costmodel::SimResult r = costmodel::Simulate(*sg);
  EXPECT_NEAR(r.iteration_s, 16.06e-3, 1e-9);
  EXPECT_NEAR(r.compute_s, 13e-3, 1e-9);
  EXPECT_NEAR(r.comm_s, 4.88e-3, 1e-9);
}

TEST(LoweringTest, FusedGroupAndBucketTimingByHand) {
  TinyTraining t = MakeTinyTraining();
  FakeCostModel cm = TinyCosts();
  Plan plan;
  plan.groups.push_back({{t.relu_grad, t.b_grad}, {}});
  plan.buckets.push_back({{t.b_grad_t, t.w_grad_t}});
  absl::StatusOr<costmodel::SimGraph> sg = Lower(t.g, plan, cm);
  ASSERT_TRUE(sg.ok()) << sg.status();
  // mm 0-4, add 4-5, relu 5-6, fused(relu_grad, b_grad) 0.5*2 ms: 6-7,
  // w_grad 7-11, bucket of 288 B: 1 + 2.88 ms: 11-14.88, updates 14.88-15.88.
  costmodel::SimResult r = costmodel::Simulate(*sg);
  EXPECT_NEAR(r.iteration_s, 15.88e-3, 1e-9);
}

TEST(LoweringTest, BucketPackingCopyRunsOnTheComputeStream) {
  TinyTraining t = MakeTinyTraining();
  FakeCostModel cm = TinyCosts();
  cm.pack_s_per_byte = 1e-5;
  Plan plan;
  plan.groups.push_back({{t.relu_grad, t.b_grad}, {}});
  plan.buckets.push_back({{t.b_grad_t, t.w_grad_t}});
  absl::StatusOr<costmodel::SimGraph> sg = Lower(t.g, plan, cm);
  ASSERT_TRUE(sg.ok()) << sg.status();
  // As FusedGroupAndBucketTimingByHand, plus the copy of the bucket's 288 B
  // (2.88 ms) on the compute stream after w_grad: 11-13.88; the collective
  // 13.88-17.76; updates 17.76-18.76.
  costmodel::SimResult r = costmodel::Simulate(*sg);
  EXPECT_NEAR(r.iteration_s, 18.76e-3, 1e-9);
  EXPECT_NEAR(r.compute_s, 14.88e-3, 1e-9);
  int packs = 0;
  for (const costmodel::SimTask& task : sg->tasks) {
    if (task.kind != costmodel::TaskKind::kComm) continue;
    ASSERT_EQ(task.deps.size(), 1u);
    const costmodel::SimTask& pack = sg->tasks[task.deps[0]];
    EXPECT_EQ(pack.kind, costmodel::TaskKind::kCompute);
    EXPECT_NEAR(pack.duration_s, 2.88e-3, 1e-12);
    EXPECT_TRUE(pack.op_ids.empty());
    ++packs;
  }
  EXPECT_EQ(packs, 1);
}

TEST(LoweringTest, DuplicatedReplicaFeedsOutsideReaders) {
  TinyTraining t = MakeTinyTraining();
  FakeCostModel cm = TinyCosts();
  Plan plan = NoFusionPlan(t.g);
  plan.groups.push_back({{t.relu_grad, t.b_grad}, {t.relu_grad}});
  std::vector<int> node_task;
  absl::StatusOr<Contraction> c = Contract(t.g, plan);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<costmodel::SimGraph> sg = LowerContraction(t.g, plan, *c, cm, &node_task);
  ASSERT_TRUE(sg.ok());
  const costmodel::SimTask& group = sg->tasks[node_task[c->group_node[0]]];
  const costmodel::SimTask& replica = sg->tasks[node_task[c->home[t.relu_grad]]];
  const costmodel::SimTask& w_grad = sg->tasks[node_task[c->home[t.w_grad]]];
  EXPECT_NEAR(group.duration_s, 1e-3, 1e-12);    // 0.5 * (1 + 1) ms
  EXPECT_NEAR(replica.duration_s, 1e-3, 1e-12);  // ReluGrad alone
  EXPECT_THAT(w_grad.deps, ElementsAre(node_task[c->home[t.relu_grad]]));
  EXPECT_THAT(replica.op_ids, ElementsAre(t.relu_grad));
  // The replica materializes dh (4x8 f32) for w_grad; the group keeps it on chip.
  EXPECT_EQ(replica.alloc_bytes, 128);
  EXPECT_EQ(group.alloc_bytes, 32);  // b.grad
}

}  // namespace
}  // namespace braid::search
