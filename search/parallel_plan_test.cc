#include "search/parallel_plan.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "graph/builder.h"
#include "search/program_sim.h"
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
  // A pipeline (priced by the DP) is chosen only below every fused row's DP
  // estimate and simulated time; otherwise none is below both.
  double fused_floor = std::numeric_limits<double>::infinity();
  for (const ParallelPlanRow& row : r->rows)
    if (!row.pipeline && row.fused_status.ok())
      fused_floor = std::min({fused_floor, row.strategy.result.time_s, row.simulated_s});
  const ParallelPlanRow& chosen = r->rows[r->chosen];
  if (chosen.pipeline) {
    EXPECT_LT(chosen.simulated_s, fused_floor);
  } else {
    for (const ParallelPlanRow& row : r->rows)
      if (row.pipeline && row.fused_status.ok()) EXPECT_GE(row.simulated_s, fused_floor) << row.strategy.name;
  }
}

// ParallelPlanOptions::strategy_row: the plan is the named row's, every
// row still in the table. Unrequested, the fastest here splits the weights
// (EveryStrategyIsFusedAndTheFastestIsChosen), so data_parallel differs.
TEST(PlanParallelTest, ARequestedRowIsThePlan) {
  const Graph fwd = WideMlp();
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  for (const std::string name : {"data_parallel", "expert:megatron", "braid"}) {
    ParallelPlanOptions o = Options();
    o.pipeline = false;
    o.strategy_row = name;
    absl::StatusOr<ParallelPlanResult> r = PlanParallel(fwd, c, cm, o);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    ASSERT_GE(r->chosen, 0);
    const ParallelPlanRow& chosen = r->rows[r->chosen];
    EXPECT_EQ(chosen.strategy.name, name);
    EXPECT_EQ(r->chosen_by, "request");
    ASSERT_TRUE(chosen.fused_status.ok()) << chosen.fused_status;
    // The fused plan is that row's.
    EXPECT_EQ(r->fusion.sim.iteration_s, chosen.simulated_s) << name;
    EXPECT_EQ(r->device.data_degree, chosen.data_degree) << name;
    EXPECT_EQ(r->device.model_degree, chosen.model_degree) << name;
    if (name == "data_parallel") EXPECT_EQ(chosen.model_degree, 1);
    if (name == "expert:megatron") EXPECT_GT(chosen.model_degree, 1);
    EXPECT_GE(r->rows.size(), 3u);  // the whole table
    EXPECT_EQ(ParallelPlanJson(fwd, chosen, c)["strategy"], name);
  }
}

TEST(PlanParallelTest, ARequestedPipelineRowIsChosenWithTheFastestFusedPlan) {
  const Graph fwd = WideMlp();
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ParallelPlanOptions o = Options();
  o.strategy_row = "pipeline:2";
  absl::StatusOr<ParallelPlanResult> r = PlanParallel(fwd, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  const ParallelPlanRow& chosen = r->rows[r->chosen];
  EXPECT_EQ(chosen.strategy.name, "pipeline:2");
  ASSERT_NE(chosen.pipeline, nullptr);
  EXPECT_EQ(chosen.pipeline->stages, 2);
  // A pipeline's stages are not fused: the fused plan is the fastest fused row's.
  double fastest = std::numeric_limits<double>::infinity();
  for (const ParallelPlanRow& row : r->rows)
    if (!row.pipeline && row.fused_status.ok()) fastest = std::min(fastest, row.simulated_s);
  EXPECT_EQ(r->fusion.sim.iteration_s, fastest);
}

TEST(PlanParallelTest, ARowNotInTheTableOrWithoutAPlanIsInvalidArgument) {
  const Graph fwd = WideMlp();
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ParallelPlanOptions o = Options();
  o.pipeline = false;
  // A name of no row: refused before any search.
  o.strategy_row = "tensor";
  absl::Status s = PlanParallel(fwd, c, cm, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("unknown strategy row 'tensor'"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("expert:megatron"), std::string::npos) << s;
  // A pipeline row with pipelines off.
  o.strategy_row = "pipeline:2";
  s = PlanParallel(fwd, c, cm, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("pipeline row"), std::string::npos) << s;
  // A row form this graph's table lacks (no embedding tables): the rows.
  o.strategy_row = "expert:dlrm";
  s = PlanParallel(fwd, c, cm, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  const std::string m(s.message());
  EXPECT_NE(m.find("'expert:dlrm' is not in the table of wide_mlp"), std::string::npos) << s;
  EXPECT_NE(m.find("data_parallel, expert:megatron, braid"), std::string::npos) << s;
  // A row over the device's memory: why, and the rows with a plan. The
  // weights (4 x 64 MiB), their gradients and momentum whole on every
  // device do not fit in 512 MiB; split 8 ways they do.
  costmodel::ClusterSpec small = c;
  small.device.memory_bytes = int64_t{512} << 20;
  costmodel::ClusterCostModel scm(small, nullptr, nullptr, costmodel::CommModel(small));
  o.strategy_row = "data_parallel";
  s = PlanParallel(fwd, small, scm, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  const std::string over(s.message());
  EXPECT_NE(over.find("'data_parallel' has no plan for wide_mlp"), std::string::npos) << s;
  EXPECT_NE(over.find("bytes per device"), std::string::npos) << s;
  EXPECT_NE(over.find("rows with a plan: "), std::string::npos) << s;
  EXPECT_NE(over.find("braid"), std::string::npos) << s;
}

TEST(PlanParallelTest, WithoutPipelinesNoPipelineRowIsSearchedOrChosen) {
  const Graph fwd = WideMlp();
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ParallelPlanOptions o = Options();
  o.pipeline = false;
  absl::StatusOr<ParallelPlanResult> r = PlanParallel(fwd, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const ParallelPlanRow& row : r->rows) {
    EXPECT_EQ(row.pipeline, nullptr) << row.strategy.name;
    EXPECT_FALSE(IsPipelineRowName(row.strategy.name)) << row.strategy.name;
  }
  EXPECT_EQ(r->rows[r->chosen].pipeline, nullptr);
  EXPECT_TRUE(r->pipeline_status.ok());
}

TEST(PlanParallelTest, StrategyRowNames) {
  for (const char* ok : {"data_parallel", "expert:megatron", "expert:dlrm", "braid",
                         "braid:all-devices", "braid:substituted", "pipeline:2", "pipeline:16"}) {
    EXPECT_TRUE(CheckStrategyRowName(ok).ok()) << ok;
  }
  for (const char* bad : {"", "Braid", "pipeline:", "pipeline:1", "pipeline:02", "pipeline:x",
                          "pipeline:2 ", "data_parallel\n"}) {
    const absl::Status s = CheckStrategyRowName(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(s.message()).find("pipeline:S"), std::string::npos) << s;
  }
  EXPECT_TRUE(IsPipelineRowName("pipeline:4"));
  EXPECT_FALSE(IsPipelineRowName("braid"));
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

// Every fused row is lowered to its program (its own groups and buckets)
// and the program simulated; on ranks that run the programs (cpu-local) the
// fastest simulated program is the plan, elsewhere the simulator's choice
// stands and the programs are shown.
TEST(PlanParallelTest, RowsArePricedByTheirProgramsAndCpuLocalChoosesByThem) {
  const Graph fwd = WideMlp();
  for (const char* name : {"cpu-local", "dgx-h100"}) {
    SCOPED_TRACE(name);
    const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster(name), 2);
    costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
    ParallelPlanOptions o = Options();
    absl::StatusOr<ParallelPlanResult> r = PlanParallel(fwd, c, cm, o);
    ASSERT_TRUE(r.ok()) << r.status();
    int fastest = -1, programs = 0;
    for (size_t i = 0; i < r->rows.size(); ++i) {
      const ParallelPlanRow& row = r->rows[i];
      if (row.pipeline) {
        EXPECT_TRUE(absl::IsUnimplemented(row.program_status)) << row.program_status;
        EXPECT_EQ(row.program, nullptr);
        continue;
      }
      if (!row.fused_status.ok()) continue;
      ASSERT_TRUE(row.program_status.ok()) << row.strategy.name << ": " << row.program_status;
      ASSERT_NE(row.program, nullptr);
      ++programs;
      EXPECT_EQ(row.program->row, row.strategy.name);
      EXPECT_GT(row.program_s, 0);
      EXPECT_GT(row.program_sources.total(), 0);
      // The program is the one simulated.
      absl::StatusOr<ProgramSimulation> again = SimulateProgram(*row.program, cm);
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_DOUBLE_EQ(again->result.iteration_s, row.program_s);
      EXPECT_LE(static_cast<int>(row.program->buckets.size()), row.buckets);
      if (fastest < 0 || row.program_s < r->rows[fastest].program_s) fastest = static_cast<int>(i);
    }
    EXPECT_GE(programs, 2);
    const nlohmann::json rows = ParallelStrategyRowsJson(*r);
    for (const nlohmann::json& e : rows)
      if (e["status"] == "ok" && !absl::StartsWith(e["strategy"].get<std::string>(), "pipeline:"))
        EXPECT_GT(e["program_ms"].get<double>(), 0) << e.dump();
    if (std::string(name) == "cpu-local") {
      EXPECT_EQ(r->chosen_by, "program simulation");
      EXPECT_EQ(r->chosen, fastest);
      EXPECT_EQ(r->fusion.sim.iteration_s, r->rows[r->chosen].simulated_s);  // its own fused plan
    } else {
      EXPECT_EQ(r->chosen_by, "simulator");
    }
    // Without program pricing no row has one and the simulator chooses.
    o.price_programs = false;
    absl::StatusOr<ParallelPlanResult> plain = PlanParallel(fwd, c, cm, o);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ(plain->chosen_by, "simulator");
    for (const ParallelPlanRow& row : plain->rows) EXPECT_EQ(row.program, nullptr);
  }
}

TEST(PlanParallelStopTest, PastTheBudgetTheDataParallelPlanIsReturned) {
  const Graph fwd = WideMlp();
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ParallelPlanOptions o = Options();
  o.time_budget_s = 0;
  absl::StatusOr<ParallelPlanResult> r = PlanParallel(fwd, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GE(r->chosen, 0);
  const ParallelPlanRow& chosen = r->rows[r->chosen];
  EXPECT_EQ(chosen.strategy.name, "data_parallel");
  EXPECT_TRUE(chosen.fused_status.ok()) << chosen.fused_status;
  EXPECT_GT(chosen.simulated_s, 0);
  EXPECT_EQ(r->fusion.sim.iteration_s, chosen.simulated_s);
  EXPECT_EQ(r->fusion.stats.stop_reason, "time budget");
  // Every other row says the budget stopped it; nothing else was searched.
  for (const ParallelPlanRow& row : r->rows) {
    if (&row == &chosen) continue;
    EXPECT_EQ(row.fused_status.code(), absl::StatusCode::kDeadlineExceeded)
        << row.strategy.name << ": " << row.fused_status;
  }
  EXPECT_EQ(r->substitution_status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r->pipeline_status.code(), absl::StatusCode::kDeadlineExceeded);
  // The data-parallel plan is the one an unbounded search costs for that row.
  ParallelPlanOptions free = Options();
  free.pipeline = false;
  const ParallelPlanResult all = *PlanParallel(fwd, c, cm, free);
  EXPECT_EQ(all.rows.front().strategy.name, "data_parallel");
  EXPECT_DOUBLE_EQ(all.rows.front().strategy.result.time_s, chosen.strategy.result.time_s);
}

TEST(PlanParallelStopTest, CancelEndsTheSearchWithCancelled) {
  const Graph fwd = WideMlp();
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  std::atomic<bool> cancel{true};
  ParallelPlanOptions o = Options();
  o.fusion.cancel = &cancel;  // the fusion search's cancel stops every phase
  EXPECT_EQ(PlanParallel(fwd, c, cm, o).status().code(), absl::StatusCode::kCancelled);
  ParallelPlanOptions k = Options();
  k.stop.AddFlag(&cancel);
  EXPECT_EQ(PlanParallel(fwd, c, cm, k).status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace braid::search
