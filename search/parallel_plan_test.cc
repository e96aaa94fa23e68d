#include "search/parallel_plan.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "graph/builder.h"
#include "search/test_util.h"

namespace braid::search {
namespace {

using graph::Graph;
using graph::GraphBuilder;
using graph::TensorId;

// Four 4096-wide layers at batch 64: too small a batch for data parallelism
// on 8 GPUs to pay for its 4 x 64 MiB of gradient AllReduce.
Graph WideMlp() {
  GraphBuilder b("wide_mlp");
  TensorId x = b.Input("x", {64, 4096});
  for (int i = 0; i < 4; ++i) {
    x = b.Linear(x, 4096, /*bias=*/false);
    if (i < 3) x = b.Relu(x);
  }
  b.MarkOutput(x);
  return *std::move(b).Build();
}

ParallelPlanOptions Options() {
  ParallelPlanOptions o;
  o.fusion.time_budget_s = 10;
  o.fusion.threads = 1;
  o.fusion.seed = 1;
  return o;
}

TEST(PlanParallelTest, EveryStrategyIsFusedAndTheFastestIsChosen) {
  const Graph fwd = WideMlp();
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ParallelPlanOptions o = Options();
  o.pipeline = false;  // PipelineRowsAreOffered
  absl::StatusOr<ParallelPlanResult> r = PlanParallel(fwd, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GE(r->rows.size(), 2u);
  EXPECT_EQ(r->rows.front().strategy.name, "data_parallel");
  ASSERT_GE(r->chosen, 0);
  const ParallelPlanRow& chosen = r->rows[r->chosen];
  for (const ParallelPlanRow& row : r->rows) {
    // The data-parallel baseline gets the same second stage as braid's plan.
    if (row.strategy.name == "data_parallel") EXPECT_TRUE(row.fused_status.ok()) << row.fused_status;
    if (row.fused_status.ok()) {
      EXPECT_GT(row.simulated_s, 0);
      EXPECT_LE(chosen.simulated_s, row.simulated_s) << row.strategy.name;
      EXPECT_EQ(row.data_degree * row.model_degree, 8) << row.strategy.name;
      EXPECT_FALSE(row.mixed_data_degrees) << row.strategy.name;
    }
  }
  // Model parallelism wins here: the chosen plan splits the weights.
  EXPECT_GT(chosen.model_degree, 1);
  EXPECT_EQ(r->fusion.sim.iteration_s, chosen.simulated_s);
  // The plan's buckets reduce over the chosen data group.
  for (const graph::Op& op : r->training.ops())
    if (op.phase == graph::Phase::kCommunication)
      EXPECT_EQ(op.GetInt("group_size", 0), chosen.data_degree) << op.name;

  const nlohmann::json j = ParallelPlanJson(fwd, chosen, c);
  EXPECT_EQ(j["strategy"], chosen.strategy.name);
  EXPECT_EQ(j["ops"].size(), static_cast<size_t>(fwd.num_ops()));
  EXPECT_EQ(j["data_degree"], chosen.data_degree);
  EXPECT_LE(j["memory_per_device_bytes"].get<int64_t>(), c.device.memory_bytes);
  for (const nlohmann::json& op : j["ops"]) {
    EXPECT_TRUE(op.contains("config"));
    EXPECT_TRUE(op.contains("machine_view"));
  }
}

TEST(PlanParallelTest, PipelineRowsAreOffered) {
  const Graph fwd = WideMlp();
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  absl::StatusOr<ParallelPlanResult> r = PlanParallel(fwd, c, cm, Options());
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> names;
  for (const ParallelPlanRow& row : r->rows) {
    if (!row.pipeline) continue;
    names.push_back(row.strategy.name);
    ASSERT_TRUE(row.fused_status.ok()) << row.fused_status;
    EXPECT_GT(row.simulated_s, 0);
    EXPECT_EQ(static_cast<int>(row.pipeline->stage_plans.size()), row.pipeline->stages);
    const nlohmann::json j = ParallelPlanJson(fwd, row, c);
    EXPECT_EQ(j["stages"], row.pipeline->stages);
    EXPECT_EQ(j["stage_plan"].size(), static_cast<size_t>(row.pipeline->stages));
    EXPECT_EQ(j["schedule"], "1F1B");
  }
  EXPECT_EQ(names, (std::vector<std::string>{"pipeline:2", "pipeline:4"}));
  // The choice is the fastest row, pipelines included.
  for (const ParallelPlanRow& row : r->rows)
    if (row.fused_status.ok()) EXPECT_LE(r->rows[r->chosen].simulated_s, row.simulated_s);
}

TEST(PlanParallelTest, NothingFitsIsAFailedPrecondition) {
  const Graph fwd = WideMlp();
  costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  c.device.memory_bytes = 1 << 20;  // 1 MiB devices
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  absl::StatusOr<ParallelPlanResult> r = PlanParallel(fwd, c, cm, Options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(r.status().message()).find("data_parallel"), std::string::npos)
      << r.status();
}

TEST(PlanParallelTest, AWinningSubstitutionGetsARowOfItsOwn) {
  const Graph fwd = testing::DlrmLike();
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ParallelPlanOptions o = Options();
  // No single data degree suits both Concats: the unrestricted DP costs the
  // rewrites (the memory-checked one finds no plan for this graph).
  o.table.base.check_memory = false;
  absl::StatusOr<ParallelPlanResult> r = PlanParallel(fwd, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->substitution_status.ok()) << r->substitution_status;
  EXPECT_GE(r->substitution_graphs, 2);
  const ParallelPlanRow* sub = nullptr;
  for (const ParallelPlanRow& row : r->rows)
    if (row.strategy.name == "braid:substituted") sub = &row;
  ASSERT_NE(sub, nullptr);
  ASSERT_FALSE(sub->substitutions.empty());
  ASSERT_NE(sub->rewritten, nullptr);
  EXPECT_LT(sub->rewritten->num_ops(), fwd.num_ops() + 1);
  const nlohmann::json j = ParallelPlanJson(fwd, *sub, c);
  ASSERT_TRUE(j.contains("substitutions"));
  EXPECT_EQ(j["ops"].size(), static_cast<size_t>(sub->rewritten->num_ops()));
  // Without substitutions the row is absent and nothing is costed for them.
  o.substitutions = false;
  absl::StatusOr<ParallelPlanResult> plain = PlanParallel(fwd, c, cm, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->substitution_graphs, 0);
  for (const ParallelPlanRow& row : plain->rows) EXPECT_NE(row.strategy.name, "braid:substituted");
}

}  // namespace
}  // namespace braid::search
