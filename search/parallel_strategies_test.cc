#include "search/parallel_strategies.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "graph/builder.h"
#include "graph/zoo.h"
#include "search/parallel_graph.h"

namespace braid::search {
namespace {

using graph::DType;
using graph::Graph;
using graph::GraphBuilder;
using graph::TensorId;

costmodel::ClusterSpec Dgx(int ranks) {
  return *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), ranks);
}

std::vector<std::string> Names(const std::vector<StrategyRow>& rows) {
  std::vector<std::string> n;
  for (const StrategyRow& r : rows) n.push_back(r.name);
  return n;
}

const StrategyRow& Row(const std::vector<StrategyRow>& rows, const std::string& name) {
  for (const StrategyRow& r : rows)
    if (r.name == name) return r;
  ADD_FAILURE() << "no row " << name;
  static StrategyRow none;
  return none;
}

// braid's plan fits and is no slower than any other row that fits.
void ExpectBraidBest(const std::vector<StrategyRow>& rows) {
  const StrategyRow& braid = Row(rows, "braid");
  ASSERT_TRUE(braid.has_plan) << braid.status;
  ASSERT_TRUE(braid.status.ok()) << braid.status;
  for (const StrategyRow& r : rows) {
    EXPECT_GE(r.search_s, 0);
    if (r.name == "braid" || !r.has_plan || !r.status.ok()) continue;
    EXPECT_LE(braid.result.time_s, r.result.time_s * (1 + 1e-9)) << r.name;
  }
}

// A plain MLP named like a transformer: no attention, no tables.
Graph Mlp(const std::string& name) {
  GraphBuilder b(name);
  TensorId x = b.Input("x", {256, 1024});
  for (int i = 0; i < 3; ++i) x = b.Relu(b.Linear(x, 1024));
  b.MarkOutput(x);
  return *std::move(b).Build();
}

// One pre-LN transformer layer with attention spelled as exporters do.
Graph Transformer(int64_t batch, int64_t seq, int64_t hidden, int64_t heads) {
  GraphBuilder b("layer", DType::kF16);
  const int64_t dh = hidden / heads;
  TensorId x = b.Input("x", {batch, seq, hidden}, DType::kF16);
  TensorId h = b.LayerNorm(x);
  auto split = [&](TensorId t, std::vector<int64_t> perm) {
    return b.Transpose(b.Reshape(t, {batch, seq, heads, dh}), std::move(perm));
  };
  TensorId q = split(b.Linear(h, hidden), {0, 2, 1, 3});
  TensorId k = split(b.Linear(h, hidden), {0, 2, 3, 1});
  TensorId v = split(b.Linear(h, hidden), {0, 2, 1, 3});
  TensorId p = b.Softmax(b.Scale(b.MatMul(q, k), 1.0 / std::sqrt(static_cast<double>(dh))), -1);
  TensorId o = b.Reshape(b.Transpose(b.MatMul(p, v), {0, 2, 1, 3}), {batch, seq, hidden});
  x = b.Add(x, b.Linear(o, hidden));
  x = b.Add(x, b.Linear(b.Gelu(b.Linear(b.LayerNorm(x), 4 * hidden)), hidden));
  b.MarkOutput(x);
  return *std::move(b).Build();
}

// DLRM in small: two embedding bags from large tables next to a bottom MLP,
// concatenated into a top MLP.
Graph Recommender(int64_t batch, int64_t rows) {
  GraphBuilder b("recsys");
  std::vector<TensorId> feats = {b.Relu(b.Linear(b.Input("dense", {batch, 64}), 64))};
  for (int t = 0; t < 2; ++t) {
    TensorId idx = b.Input(absl::StrCat("idx", t), {batch, 20}, DType::kI64);
    feats.push_back(b.ReduceSum(b.Embedding(idx, rows, 64), {1}, /*keepdims=*/false));
  }
  TensorId r = b.Concat(feats, 1);
  r = b.Relu(b.Linear(r, 256));
  b.MarkOutput(b.Linear(r, 1));
  return *std::move(b).Build();
}

TEST(ParallelStrategiesTest, StructureDecidesTheExpertRowsNotTheName) {
  EXPECT_FALSE(HasAttention(Mlp("bert_large")));
  EXPECT_FALSE(HasEmbeddingTables(Mlp("dlrm")));
  EXPECT_TRUE(HasAttention(Transformer(4, 64, 256, 4)));
  EXPECT_FALSE(HasEmbeddingTables(Transformer(4, 64, 256, 4)));
  EXPECT_TRUE(HasEmbeddingTables(Recommender(64, 1000)));
  EXPECT_FALSE(HasAttention(Recommender(64, 1000)));
  EXPECT_TRUE(HasLinearStack(Mlp("bert_large")));
  EXPECT_FALSE(HasLinearStack(Transformer(4, 64, 256, 4)));
  EXPECT_FALSE(HasLinearStack(Recommender(64, 1000)));

  const costmodel::ClusterSpec c = Dgx(8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  auto rows = ParallelStrategyTable(Mlp("bert_large"), c, cm, {});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_THAT(Names(*rows), ::testing::ElementsAre("data_parallel", "expert:megatron", "braid"));
  // Megatron's MLP blocks: the Linears column, row, column over the model group.
  const StrategyRow& mt = Row(*rows, "expert:megatron");
  ASSERT_TRUE(mt.has_plan) << mt.status;
  EXPECT_THAT(mt.description, ::testing::HasSubstr("column then row"));
  std::vector<std::string> kinds;
  for (const OpParallelization& o : mt.result.ops) {
    const graph::Op& op = Mlp("bert_large").op(o.op);
    if (op.kind != graph::OpKind::kMatMul && op.kind != graph::OpKind::kGemm) continue;
    const int m = o.model_degree;
    ASSERT_GT(m, 1) << o.name;
    if (o.config.reduction_degree == m) kinds.push_back("row");
    else if (o.config.output_degrees.back() == m) kinds.push_back("column");
    else kinds.push_back(ParallelConfigString(o.config));
  }
  EXPECT_THAT(kinds, ::testing::ElementsAre("column", "row", "column"));
  const StrategyRow& dp = Row(*rows, "data_parallel");
  ASSERT_TRUE(dp.has_plan);
  EXPECT_TRUE(dp.status.ok()) << dp.status;
  for (const OpParallelization& o : dp.result.ops) {
    EXPECT_EQ(o.data_degree, 8) << o.name;
    EXPECT_EQ(o.model_degree, 1) << o.name;
  }
  EXPECT_GT(dp.result.memory.total_bytes, 0);
  ExpectBraidBest(*rows);
}

TEST(ParallelStrategiesTest, TransformerGetsMegatronAndBraidIsNoSlower) {
  const costmodel::ClusterSpec c = Dgx(8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  const Graph g = Transformer(8, 256, 1024, 16);
  auto rows = ParallelStrategyTable(g, c, cm, {});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_THAT(Names(*rows), ::testing::ElementsAre("data_parallel", "expert:megatron", "braid"));
  const StrategyRow& mt = Row(*rows, "expert:megatron");
  ASSERT_TRUE(mt.has_plan) << mt.status;
  EXPECT_TRUE(mt.status.ok()) << mt.status;
  EXPECT_THAT(mt.description, ::testing::HasSubstr("best of M in {2,4,8}"));
  // Every weight MatMul is column or row parallel over the model group in
  // Megatron's pairs (in graph order: Q, K, V column, the output projection
  // row, the MLP's first Linear column, its second row), the attention
  // MatMuls head parallel, all at one data degree.
  const int d = mt.result.ops.front().data_degree;
  const int m = 8 / d;
  EXPECT_GT(m, 1);
  int weights = 0, heads = 0;
  std::vector<std::string> pairs;
  for (const OpParallelization& o : mt.result.ops) {
    EXPECT_EQ(o.data_degree, d) << o.name;
    const std::string kind = ConfigKindName(g, o.op, o.config);
    if (g.op(o.op).kind != graph::OpKind::kMatMul && g.op(o.op).kind != graph::OpKind::kGemm)
      continue;
    if (g.tensor(g.op(o.op).outputs[0]).shape.size() == 4) {
      EXPECT_EQ(o.config.output_degrees[1], m) << o.name;
      ++heads;
    } else {
      EXPECT_TRUE(kind == "column" || kind == "row" || (d > 1 && kind == "mixed")) << o.name;
      EXPECT_TRUE(o.config.output_degrees.back() == m || o.config.reduction_degree == m) << o.name;
      pairs.push_back(o.config.reduction_degree == m ? "row" : "column");
      ++weights;
    }
  }
  EXPECT_EQ(heads, 2);
  EXPECT_EQ(weights, 6);
  EXPECT_THAT(pairs, ::testing::ElementsAre("column", "column", "column", "row", "column", "row"));
  ExpectBraidBest(*rows);
  // Megatron's space is inside braid's: braid is at least as fast.
  EXPECT_LE(Row(*rows, "braid").result.time_s, mt.result.time_s * (1 + 1e-9));
  EXPECT_LE(Row(*rows, "braid").result.time_s,
            Row(*rows, "data_parallel").result.time_s * (1 + 1e-9));
}

TEST(ParallelStrategiesTest, RecommenderGetsTheDlrmRowWithShardedTables) {
  const costmodel::ClusterSpec c = Dgx(8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  const Graph g = Recommender(2048, 1 << 20);
  auto rows = ParallelStrategyTable(g, c, cm, {});
  ASSERT_TRUE(rows.ok()) << rows.status();
  // braid runs the two embedding bags side by side, so the best plan with
  // every op on every device is a row too.
  EXPECT_THAT(Names(*rows), ::testing::ElementsAre("data_parallel", "expert:dlrm", "braid",
                                                   "braid:all-devices"));
  const StrategyRow& dlrm = Row(*rows, "expert:dlrm");
  ASSERT_TRUE(dlrm.has_plan) << dlrm.status;
  EXPECT_TRUE(dlrm.status.ok()) << dlrm.status;
  const int64_t table = (int64_t{1} << 20) * 64 * 4;
  for (const OpParallelization& o : dlrm.result.ops) {
    const graph::OpKind k = g.op(o.op).kind;
    if (k == graph::OpKind::kGather || k == graph::OpKind::kReduceSum) {
      EXPECT_EQ(o.data_degree, 1) << o.name;
    } else {
      EXPECT_EQ(o.data_degree, 8) << o.name;
    }
  }
  // Two tables split 8 ways vs replicated: the data-parallel plan holds 8x
  // the table bytes (plus the same small MLP weights).
  const StrategyRow& dp = Row(*rows, "data_parallel");
  ASSERT_TRUE(dp.has_plan);
  EXPECT_GE(dp.result.memory.parameter_bytes, 2 * table);
  EXPECT_LT(dlrm.result.memory.parameter_bytes, 2 * table / 8 + (4 << 20));
  // Replicated tables all-reduce 2 x 256 MiB of gradients: the sharded
  // tables win, and braid is no slower than either.
  EXPECT_LT(dlrm.result.time_s, dp.result.time_s);
  ExpectBraidBest(*rows);

  // braid's plan: the dense MLP and the two bags (three strands meeting at
  // the Concat) side by side on two groups of 4 devices; each strand's ops
  // share one group and split over its 4 devices only.
  const StrategyRow& braid = Row(*rows, "braid");
  ASSERT_EQ(braid.result.strand_blocks.size(), 1u);
  const StrandPlacement& b = braid.result.strand_blocks[0];
  EXPECT_EQ(b.strands, 3);
  EXPECT_EQ(b.devices_per_strand, 4);
  EXPECT_EQ(b.groups, 2);
  EXPECT_EQ(b.per_group, 2);
  EXPECT_GT(b.redistribute_s, 0);
  std::map<std::string, int> group_of_op;
  int side_by_side = 0;
  for (const OpParallelization& o : braid.result.ops) {
    if (o.num_devices == 0) {
      EXPECT_EQ(o.config.TotalDegree(), 8) << o.name;
      continue;
    }
    ++side_by_side;
    EXPECT_EQ(o.num_devices, 4) << o.name;
    EXPECT_TRUE(o.first_device == 0 || o.first_device == 4) << o.name;
    EXPECT_EQ(o.view.start, o.first_device) << o.name;
    EXPECT_EQ(o.config.TotalDegree(), 4) << o.name;
    group_of_op[o.name] = o.first_device;
  }
  EXPECT_EQ(side_by_side, 2 * 2 + 2);  // Gather + ReduceSum per bag; the MLP's Gemm + Relu
  // A Gather and the ReduceSum pooling it run on the same group.
  for (const OpParallelization& o : braid.result.ops) {
    if (g.op(o.op).kind != graph::OpKind::kReduceSum) continue;
    const graph::OpId gather = g.tensor(g.op(o.op).inputs[0]).producer;
    EXPECT_EQ(group_of_op.at(g.op(gather).name), o.first_device) << o.name;
  }
  // braid's space holds the all-devices plans; the rows say so.
  const StrategyRow& all = Row(*rows, "braid:all-devices");
  ASSERT_TRUE(all.has_plan);
  EXPECT_TRUE(all.result.strand_blocks.empty());
  for (const OpParallelization& o : all.result.ops) EXPECT_EQ(o.num_devices, 0) << o.name;
  EXPECT_LE(braid.result.time_s, all.result.time_s);
  // The side-by-side plan's per-device graph is the busiest device's
  // program: the dense MLP strand shares a group with one bag (the busier
  // group), the other bag is absent, and each of the three outputs reaches
  // the Concat through the block's AllToAll, whose time the three ops carry.
  absl::StatusOr<PerDeviceGraph> pd = BuildPerDeviceForward(g, c, braid.result);
  ASSERT_TRUE(pd.ok()) << pd.status();
  int gathers = 0, alltoalls = 0;
  double alltoall_s = 0;
  for (graph::OpId id = 0; id < pd->forward.num_ops(); ++id) {
    const graph::Op& op = pd->forward.op(id);
    gathers += op.kind == graph::OpKind::kGather;
    if (op.kind == graph::OpKind::kAllToAll && op.name.find(".strands.") != std::string::npos) {
      ++alltoalls;
      alltoall_s += op.GetFloat("comm_time_s", -1);
    }
  }
  EXPECT_EQ(gathers, 1);
  EXPECT_EQ(alltoalls, 3);
  EXPECT_NEAR(alltoall_s, b.redistribute_forward_s, 1e-15);
  EXPECT_NEAR(b.redistribute_s, 2 * b.redistribute_forward_s, 1e-15);
  EXPECT_EQ(pd->degree, 8);
  absl::StatusOr<Graph> training = BuildPerDeviceTraining(*pd, graph::Optimizer::kSgdMomentum);
  ASSERT_TRUE(training.ok()) << training.status();
  EXPECT_TRUE(BuildPerDeviceForward(g, c, all.result).ok());

  StrategyTableOptions no_expert;
  no_expert.include_expert = false;
  auto plain = ParallelStrategyTable(g, c, cm, no_expert);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_THAT(Names(*plain), ::testing::ElementsAre("data_parallel", "braid", "braid:all-devices"));
  StrategyTableOptions spmd;
  spmd.base.parallel_strands = false;
  auto one_program = ParallelStrategyTable(g, c, cm, spmd);
  ASSERT_TRUE(one_program.ok()) << one_program.status();
  EXPECT_THAT(Names(*one_program),
              ::testing::ElementsAre("data_parallel", "expert:dlrm", "braid"));
  EXPECT_NEAR(Row(*one_program, "braid").result.time_s, all.result.time_s, 1e-12);
}

// DLRM as published (8 tables of 1M x 64) on 24 Summit V100s: Neo's
// table-wise placement (each table whole on one device, the bags moved to
// the data-parallel interaction by one AllToAll) beats the tables sharded
// over every device, whose gradients need an AllReduce over the 3 data
// replicas 24 devices leave them; the expert row takes it, a device holds
// one table, and braid is no slower.
TEST(ParallelStrategiesTest, DlrmExpertPlacesWholeTablesSideBySide) {
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("summit"), 24);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  absl::StatusOr<Graph> g = graph::BuildZooModel("dlrm", 24 * 1024);
  ASSERT_TRUE(g.ok()) << g.status();
  auto rows = ParallelStrategyTable(*g, c, cm, {});
  ASSERT_TRUE(rows.ok()) << rows.status();
  const StrategyRow& neo = Row(*rows, "expert:dlrm");
  ASSERT_TRUE(neo.has_plan) << neo.status;
  EXPECT_TRUE(neo.status.ok()) << neo.status;
  EXPECT_THAT(neo.description, ::testing::HasSubstr("table-wise"));
  ASSERT_EQ(neo.result.strand_blocks.size(), 1u);
  EXPECT_EQ(neo.result.strand_blocks[0].strands, 8);
  EXPECT_EQ(neo.result.strand_blocks[0].devices_per_strand, 1);
  std::set<int> table_devices;
  for (const OpParallelization& o : neo.result.ops) {
    if (g->op(o.op).kind != graph::OpKind::kGather || o.num_devices == 0) continue;
    EXPECT_EQ(o.num_devices, 1) << o.name;
    table_devices.insert(o.first_device);
  }
  EXPECT_EQ(table_devices.size(), 8u);
  // A device holds one 1M x 64 fp32 table (plus the MLPs), not eight.
  const int64_t table = int64_t{1000000} * 64 * 4;
  EXPECT_GE(neo.result.memory.parameter_bytes, table);
  EXPECT_LT(neo.result.memory.parameter_bytes, 2 * table);
  // Faster than the sharded tables (braid:all-devices holds that plan).
  EXPECT_LT(neo.result.time_s, Row(*rows, "braid:all-devices").result.time_s);
  EXPECT_LE(Row(*rows, "braid").result.time_s, neo.result.time_s);
}

// A device too small for replicated tables: data_parallel keeps its plan but
// is ResourceExhausted with the bytes; braid finds one that fits.
TEST(ParallelStrategiesTest, DataParallelOverMemoryIsResourceExhausted) {
  costmodel::ClusterSpec c = Dgx(8);
  const Graph g = Recommender(2048, 1 << 20);
  c.device.memory_bytes = int64_t{1} << 30;  // replicated tables + grads + momentum: 1.5 GiB
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  auto rows = ParallelStrategyTable(g, c, cm, {});
  ASSERT_TRUE(rows.ok()) << rows.status();
  const StrategyRow& dp = Row(*rows, "data_parallel");
  EXPECT_TRUE(dp.has_plan);
  EXPECT_EQ(dp.status.code(), absl::StatusCode::kResourceExhausted) << dp.status;
  EXPECT_THAT(std::string(dp.status.message()), ::testing::HasSubstr("1073741824 bytes"));
  EXPECT_GT(dp.result.memory.total_bytes, int64_t{1} << 30);
  const StrategyRow& braid = Row(*rows, "braid");
  ASSERT_TRUE(braid.has_plan);
  EXPECT_TRUE(braid.status.ok()) << braid.status;
  EXPECT_LE(braid.result.memory.total_bytes, int64_t{1} << 30);
  ExpectBraidBest(*rows);
}

TEST(ParallelStrategiesTest, DegreeOutOfRangeIsInvalid) {
  const costmodel::ClusterSpec c = Dgx(8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  StrategyTableOptions o;
  o.base.degree = 16;
  EXPECT_EQ(ParallelStrategyTable(Mlp("m"), c, cm, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::search
