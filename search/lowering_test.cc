// Tests of lowering a plan to the simulator's task graph: timings by hand,
// bucket packing, duplicated replicas.
#include "search/lowering.h"

#include <string>

#include "costmodel/simulator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "search/contraction.h"
#include "search/test_util.h"

namespace braid::search {
namespace {

using ::testing::ElementsAre;

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
