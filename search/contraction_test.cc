// Tests of a plan's task structure (contraction.h): one node per kernel,
// dependencies through tensors, production order of buckets.
#include "search/contraction.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "search/plan.h"
#include "search/test_util.h"

namespace braid::search {
namespace {

using ::testing::ElementsAre;

TEST(ContractionTest, NoFusionHasOneNodePerOpAndBucket) {
  TinyTraining t = MakeTinyTraining();
  const Plan plan = NoFusionPlan(t.g);
  absl::StatusOr<Contraction> c = Contract(t.g, plan);
  ASSERT_TRUE(c.ok()) << c.status();
  int ops = 0, buckets = 0;
  for (const TaskNode& n : c->nodes) {
    ops += n.kind == TaskNode::Kind::kOp;
    buckets += n.kind == TaskNode::Kind::kBucket;
  }
  EXPECT_EQ(buckets, static_cast<int>(plan.buckets.size()));
  EXPECT_EQ(ops + static_cast<int>(plan.buckets.size()) * 1,
            static_cast<int>(c->nodes.size()));
  EXPECT_EQ(c->order.size(), c->nodes.size());
  // The order is topological: every dependency comes first.
  std::vector<int> pos(c->nodes.size());
  for (size_t i = 0; i < c->order.size(); ++i) pos[c->order[i]] = static_cast<int>(i);
  for (size_t n = 0; n < c->nodes.size(); ++n) {
    for (int d : c->nodes[n].deps) EXPECT_LT(pos[d], pos[n]) << n << " after " << d;
  }
}

TEST(ContractionTest, AFusedGroupIsOneNodeWithTheUnionOfDependencies) {
  TinyTraining t = MakeTinyTraining();
  Plan plan = NoFusionPlan(t.g);
  plan.groups.push_back({.ops = {t.add, t.relu}, .duplicated = {}});
  absl::StatusOr<Contraction> c = Contract(t.g, plan);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->group_node.size(), 1u);
  const TaskNode& g = c->nodes[c->group_node[0]];
  EXPECT_EQ(g.kind, TaskNode::Kind::kGroup);
  EXPECT_THAT(g.ops, ElementsAre(t.add, t.relu));
  EXPECT_EQ(c->home[t.add], c->group_node[0]);
  EXPECT_EQ(c->home[t.relu], c->group_node[0]);
  // add reads the MatMul's output: the group depends on the MatMul's node.
  EXPECT_THAT(g.deps, ::testing::Contains(c->home[t.mm]));
}

TEST(ContractionTest, BucketsFollowGradientProductionOrder) {
  TinyTraining t = MakeTinyTraining();
  Plan plan = NoFusionPlan(t.g);
  std::reverse(plan.buckets.begin(), plan.buckets.end());
  absl::StatusOr<Plan> sorted = SortBucketsByProduction(t.g, plan);
  ASSERT_TRUE(sorted.ok()) << sorted.status();
  EXPECT_EQ(sorted->buckets, NoFusionPlan(t.g).buckets);
}

TEST(ContractionTest, BucketsThatDoNotPartitionTheGradientsAreRefused) {
  TinyTraining t = MakeTinyTraining();
  Plan plan = NoFusionPlan(t.g);
  plan.buckets.pop_back();
  absl::StatusOr<Contraction> c = Contract(t.g, plan);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::search
