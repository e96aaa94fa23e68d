#include "search/parallel_config.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "glog/logging.h"

#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "graph/builder.h"
#include "graph/parallel_ops.h"
#include "graph/parallel_shape.h"

namespace braid::search {
namespace {

using costmodel::Collective;
using costmodel::CollectiveStep;
using graph::DType;
using graph::Graph;
using graph::GraphBuilder;
using graph::OpId;
using graph::OpKind;
using graph::ParallelOp;
using graph::ParallelShapeString;
using graph::ParallelTensorShape;
using graph::TensorId;

constexpr int64_t kRows = 2048;  // batch * seq
constexpr int64_t kH = 4096;
constexpr int64_t kF32 = 4;

ParallelTensorShape Shape(std::string_view text) {
  absl::StatusOr<ParallelTensorShape> s = graph::ParseParallelShape(text);
  CHECK(s.ok()) << s.status();
  return *s;
}

// x[2048,4096] -> MatMul w1[4096,16384] -> Gelu -> MatMul w2[16384,4096].
struct Mlp {
  Graph g;
  OpId mm1 = -1, gelu = -1, mm2 = -1;
};

Mlp MakeMlp() {
  GraphBuilder b("megatron_mlp");
  TensorId x = b.Input("x", {kRows, kH});
  TensorId w1 = b.Param("w1", {kH, 4 * kH});
  TensorId w2 = b.Param("w2", {4 * kH, kH});
  TensorId y = b.MatMul(b.Gelu(b.MatMul(x, w1)), w2);
  b.MarkOutput(y);
  absl::StatusOr<Graph> g = std::move(b).Build();
  CHECK(g.ok()) << g.status();
  Mlp m{*std::move(g)};
  for (OpId o = 0; o < m.g.num_ops(); ++o) {
    if (m.g.op(o).kind == OpKind::kMatMul) (m.mm1 < 0 ? m.mm1 : m.mm2) = o;
    if (m.g.op(o).kind == OpKind::kGelu) m.gelu = o;
  }
  CHECK(m.mm1 >= 0 && m.gelu >= 0 && m.mm2 >= 0);
  return m;
}

ParallelConfig Cfg(std::vector<int> out, int red = 1, int rep = 1) {
  return ParallelConfig{std::move(out), red, rep};
}

std::vector<std::string> Strings(const std::vector<ParallelConfig>& cs) {
  std::vector<std::string> s;
  for (const ParallelConfig& c : cs) s.push_back(ParallelConfigString(c));
  return s;
}

std::vector<std::string> OpStrings(const std::vector<ParallelOp>& ops) {
  std::vector<std::string> s;
  for (const ParallelOp& o : ops) s.push_back(graph::ParallelOpString(o));
  return s;
}

TEST(CandidateConfigsTest, MatMulAtDegree8ListsEverySplitDataFirst) {
  Mlp m = MakeMlp();
  absl::StatusOr<std::vector<ParallelConfig>> cs = CandidateConfigs(m.g, m.mm1, 8);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_THAT(Strings(*cs),
              ::testing::ElementsAre("out[8,1]", "out[1,1] red8", "out[1,2] red4", "out[1,4] red2",
                                     "out[1,8]", "out[2,1] red4", "out[2,2] red2", "out[2,4]",
                                     "out[4,1] red2", "out[4,2]"));
  EXPECT_EQ(ConfigKindName(m.g, m.mm1, (*cs)[0]), "data");
  EXPECT_EQ(ConfigKindName(m.g, m.mm1, (*cs)[1]), "row");
  EXPECT_EQ(ConfigKindName(m.g, m.mm1, (*cs)[4]), "column");
  EXPECT_EQ(ConfigKindName(m.g, m.mm1, (*cs)[7]), "mixed");
}

TEST(CandidateConfigsTest, NoDataParallelConfigWhenTheBatchDoesNotDivide) {
  GraphBuilder b("small");
  TensorId y = b.MatMul(b.Input("x", {6, 8}), b.Param("w", {8, 16}));
  b.MarkOutput(y);
  Graph g = *std::move(b).Build();
  absl::StatusOr<std::vector<ParallelConfig>> cs = CandidateConfigs(g, 0, 4);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_THAT(Strings(*cs), ::testing::ElementsAre("out[1,1] red4", "out[1,2] red2", "out[1,4]",
                                                   "out[2,1] red2", "out[2,2]"));
}

TEST(CandidateConfigsTest, ElementwiseSplitsOutputDimsOnly) {
  Mlp m = MakeMlp();
  absl::StatusOr<std::vector<ParallelConfig>> cs = CandidateConfigs(m.g, m.gelu, 8);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_THAT(Strings(*cs), ::testing::ElementsAre("out[8,1]", "out[1,8]", "out[2,4]", "out[4,2]"));
  EXPECT_FALSE(CandidateConfigs(m.g, m.gelu, 0).ok());
}

TEST(CandidateConfigsTest, UnsupportedKindIsUnimplemented) {
  GraphBuilder b("rs");
  TensorId y = b.ReduceSum(b.Input("x", {8, 8}), {1}, /*keepdims=*/false);
  b.MarkOutput(y);
  Graph g = *std::move(b).Build();
  EXPECT_EQ(CandidateConfigs(g, 0, 2).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(CandidateConfigsTest, SoftmaxKeepsItsLastDimWhole) {
  GraphBuilder b("sm");
  TensorId y = b.Softmax(b.Input("x", {8, 8}));
  b.MarkOutput(y);
  Graph g = *std::move(b).Build();
  auto cs = CandidateConfigs(g, 0, 2);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_THAT(Strings(*cs), ::testing::ElementsAre("out[2,1]"));
}

TEST(ConfigLayoutsTest, ReshapeAndTransposeCarryHeadSplits) {
  GraphBuilder b("heads");
  TensorId x = b.Input("x", {2, 16, 64});
  TensorId r = b.Reshape(x, {2, 16, 8, 8});
  TensorId t = b.Transpose(r, {0, 2, 1, 3});
  b.MarkOutput(t);
  Graph g = *std::move(b).Build();
  auto lr = ConfigLayouts(g, 0, ParallelConfig{.output_degrees = {1, 1, 4, 1}});
  ASSERT_TRUE(lr.ok()) << lr.status();
  EXPECT_EQ(graph::ParallelShapeString(lr->inputs[0]), "f32[2,16,64/4]");
  EXPECT_FALSE(ConfigLayouts(g, 0, ParallelConfig{.output_degrees = {1, 1, 1, 4}}).ok());
  auto lt = ConfigLayouts(g, 1, ParallelConfig{.output_degrees = {2, 4, 1, 1}});
  ASSERT_TRUE(lt.ok()) << lt.status();
  EXPECT_EQ(graph::ParallelShapeString(lt->inputs[0]), "f32[2/2,16,8/4,8]");
}

TEST(ConfigLayoutsTest, DataColumnAndRowMatMulLayouts) {
  Mlp m = MakeMlp();
  OpLayouts data = *ConfigLayouts(m.g, m.mm1, Cfg({8, 1}));
  EXPECT_EQ(ParallelShapeString(data.inputs[0]), "f32[2048/8,4096]");
  EXPECT_EQ(ParallelShapeString(data.inputs[1]), "f32[4096,16384]x8");
  EXPECT_EQ(ParallelShapeString(data.output), "f32[2048/8,16384]");
  EXPECT_FALSE(data.output_partial_sums);

  OpLayouts col = *ConfigLayouts(m.g, m.mm1, Cfg({1, 8}));
  EXPECT_EQ(ParallelShapeString(col.inputs[0]), "f32[2048,4096]x8");
  EXPECT_EQ(ParallelShapeString(col.inputs[1]), "f32[4096,16384/8]");
  EXPECT_EQ(ParallelShapeString(col.output), "f32[2048,16384/8]");
  EXPECT_FALSE(col.output_partial_sums);

  OpLayouts row = *ConfigLayouts(m.g, m.mm2, Cfg({1, 1}, 8));
  EXPECT_EQ(ParallelShapeString(row.inputs[0]), "f32[2048,16384/8]");
  EXPECT_EQ(ParallelShapeString(row.inputs[1]), "f32[16384/8,4096]");
  EXPECT_EQ(ParallelShapeString(row.output), "f32[2048,4096]x8");
  EXPECT_TRUE(row.output_partial_sums);

  EXPECT_EQ(ConfigLayouts(m.g, m.mm1, Cfg({3, 1})).status().code(),
            absl::StatusCode::kInvalidArgument);  // 3 does not divide 2048
  EXPECT_EQ(ConfigLayouts(m.g, m.gelu, Cfg({1, 1}, 2)).status().code(),
            absl::StatusCode::kInvalidArgument);  // no contraction in Gelu
}

TEST(ConfigLayoutsTest, AttentionBatchMatMulSplitsHeads) {
  GraphBuilder b("attn");
  TensorId q = b.Input("q", {2, 16, 128, 64});
  TensorId k = b.Input("kt", {2, 16, 64, 128});
  TensorId s = b.MatMul(q, k);
  b.MarkOutput(s);
  Graph g = *std::move(b).Build();
  ParallelConfig heads = Cfg({1, 8, 1, 1});
  EXPECT_EQ(ConfigKindName(g, 0, heads), "head");
  OpLayouts l = *ConfigLayouts(g, 0, heads);
  EXPECT_EQ(ParallelShapeString(l.inputs[0]), "f32[2,16/8,128,64]");
  EXPECT_EQ(ParallelShapeString(l.inputs[1]), "f32[2,16/8,64,128]");
  EXPECT_EQ(ParallelShapeString(l.output), "f32[2,16/8,128,128]");
  std::vector<ParallelConfig> cs = *CandidateConfigs(g, 0, 8);
  EXPECT_THAT(Strings(cs), ::testing::Contains("out[1,8,1,1]"));
  EXPECT_THAT(Strings(cs), ::testing::Not(::testing::Contains("out[8,1,1,1]")));  // batch 2
}

TEST(OpTimeTest, ShardIsCostedAtItsOwnShape) {
  Mlp m = MakeMlp();
  costmodel::ClusterSpec spec = *costmodel::LoadCluster("dgx-h100");
  costmodel::ClusterCostModel cm(spec, nullptr, nullptr, costmodel::CommModel(spec));
  Graph shard = *ShardGraph(m.g, m.mm1, Cfg({1, 8}));
  ASSERT_EQ(shard.num_ops(), 1);
  EXPECT_DOUBLE_EQ(shard.op(0).flops, m.g.op(m.mm1).flops / 8);
  EXPECT_DOUBLE_EQ(shard.op(0).flops, 2.0 * kRows * kH * (4 * kH / 8));
  double full = OpTimeUnderConfig(cm, m.g, m.mm1, Cfg({1, 1}))->seconds;
  double col = OpTimeUnderConfig(cm, m.g, m.mm1, Cfg({1, 8}))->seconds;
  double row = OpTimeUnderConfig(cm, m.g, m.mm1, Cfg({1, 1}, 8))->seconds;
  EXPECT_NEAR(full / col, 8.0, 0.4);  // compute bound: one eighth, plus a launch
  EXPECT_NEAR(row / col, 1.0, 0.05);
  EXPECT_DOUBLE_EQ(full, cm.ComputeTime(m.g, m.mm1).seconds);
}

TEST(LayoutTransitionTest, ExactOpSequencesAndCollectives) {
  const int64_t piece = kRows * kH * kF32;  // 32 MiB
  using RK = ReplicaKind;
  struct Case {
    const char* from;
    const char* to;
    RK kind;
    const char* start;
    std::vector<std::string> ops;
    std::vector<CollectiveStep> comm;
  };
  const std::vector<Case> cases = {
      {"f32[2048/8,4096]", "f32[2048,4096]x8", RK::kCopies, "f32[2048/8,4096]",
       {"Combine(0,8)", "Replicate(8)"}, {{Collective::kAllGather, piece, 8, 1, 0, 2}}},
      {"f32[2048,4096]x8", "f32[2048,4096]x8", RK::kPartialSums, "f32[2048,4096]x8",
       {"Reduce(8)", "Replicate(8)"}, {{Collective::kAllReduce, piece, 8, 1, 0, 2}}},
      {"f32[2048,4096]x8", "f32[2048/8,4096]", RK::kPartialSums, "f32[2048,4096]x8",
       {"Reduce(8)", "Partition(0,8)"}, {{Collective::kReduceScatter, piece, 8, 1, 0, 2}}},
      {"f32[2048,4096]x8", "f32[2048/8,4096]", RK::kCopies, "f32[2048,4096]",
       {"Partition(0,8)"}, {}},
      {"f32[2048,4096]x8", "f32[2048,4096/8]", RK::kCopies, "f32[2048,4096]",
       {"Partition(1,8)"}, {}},
      {"f32[2048,4096]x8", "f32[2048,4096]x8", RK::kCopies, "f32[2048,4096]x8", {}, {}},
      {"f32[2048,16384/8]", "f32[2048/8,16384]", RK::kCopies, "f32[2048,16384/8]",
       {"Combine(1,8)", "Partition(0,8)"},
       {{Collective::kAllToAll, kRows * 2048 * kF32, 8, 1, 0, 2}}},
      {"f32[2048/2,4096/4]", "f32[2048/4,4096/2]", RK::kCopies, "f32[2048/2,4096/4]",
       {"Combine(1,2)", "Partition(0,2)"},
       {{Collective::kAllToAll, 1024 * 1024 * kF32, 2, 4, 0, 2}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.from) + " -> " + c.to);
    absl::StatusOr<Transition> t = LayoutTransition(Shape(c.from), Shape(c.to), c.kind);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(ParallelShapeString(t->start), c.start);
    EXPECT_EQ(OpStrings(t->ops), c.ops);
    absl::StatusOr<std::vector<CollectiveStep>> comm = TransitionComm(*t);
    ASSERT_TRUE(comm.ok()) << comm.status();
    EXPECT_EQ(*comm, c.comm);
  }
  EXPECT_EQ(LayoutTransition(Shape("f32[8,4]"), Shape("f32[4,8]")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayoutTransition(Shape("f32[8,4]"), Shape("f16[8,4]")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WeightGradSyncTest, DataParallelAllReducesTheGradientModelParallelDoesNot) {
  Mlp m = MakeMlp();
  std::vector<GradSync> data = *WeightGradSync(m.g, m.mm1, Cfg({8, 1}));
  ASSERT_EQ(data.size(), 1u);
  EXPECT_EQ(m.g.tensor(data[0].weight).name, "w1");
  EXPECT_EQ(OpStrings(data[0].transition.ops),
            (std::vector<std::string>{"Reduce(8)", "Replicate(8)"}));
  EXPECT_EQ(*TransitionComm(data[0].transition),
            (std::vector<CollectiveStep>{
                {Collective::kAllReduce, kH * 4 * kH * kF32, 8, 1, 0, 2}}));
  EXPECT_TRUE(WeightGradSync(m.g, m.mm1, Cfg({1, 8}))->empty());
  EXPECT_TRUE(WeightGradSync(m.g, m.mm2, Cfg({1, 1}, 8))->empty());
  // data 2 x column 4: the quarter of w1 each pair holds is summed over 2 ranks.
  std::vector<GradSync> mixed = *WeightGradSync(m.g, m.mm1, Cfg({2, 4}));
  ASSERT_EQ(mixed.size(), 1u);
  EXPECT_EQ(ParallelShapeString(mixed[0].transition.start), "f32[4096,16384/4]x2");
  std::vector<CollectiveStep> steps = *TransitionComm(mixed[0].transition);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].collective, Collective::kAllReduce);
  EXPECT_EQ(steps[0].bytes, kH * kH * kF32);
  EXPECT_EQ(steps[0].group_size, 2);
}

// One strategy for the MLP block and everything it costs.
struct MlpPlan {
  ParallelConfig c1, gelu, c2;
  OpLayouts l1, lg, l2;
  Transition in, mid1, mid2, out;
  double total = std::numeric_limits<double>::infinity();
};

// Brute force over both MatMuls' configs (Gelu follows the first one's
// output): op times + transitions in, between and out + weight-gradient sync.
MlpPlan Cheapest(const Mlp& m, costmodel::ClusterCostModel& cm, const ParallelTensorShape& in,
                 const ParallelTensorShape& final_layout, int degree, int* plans,
                 std::vector<MlpPlan>* all = nullptr) {
  const costmodel::CommModel& comm = cm.comm();
  MlpPlan best;
  *plans = 0;
  auto kind = [](bool partial) {
    return partial ? ReplicaKind::kPartialSums : ReplicaKind::kCopies;
  };
  const std::vector<ParallelConfig> cs1 = *CandidateConfigs(m.g, m.mm1, degree);
  const std::vector<ParallelConfig> cs2 = *CandidateConfigs(m.g, m.mm2, degree);
  for (const ParallelConfig& c1 : cs1) {
    for (const ParallelConfig& c2 : cs2) {
      MlpPlan p;
      p.c1 = c1;
      p.c2 = c2;
      p.l1 = *ConfigLayouts(m.g, m.mm1, c1);
      // Gelu is not linear: it reads reduced values, copied where the MatMul
      // left partial sums.
      std::vector<int> degs;
      for (const auto& d : p.l1.output.dims) degs.push_back(d.degree);
      p.gelu = Cfg(degs, 1, p.l1.output.replica_degree);
      p.lg = *ConfigLayouts(m.g, m.gelu, p.gelu);
      p.l2 = *ConfigLayouts(m.g, m.mm2, c2);
      p.in = *LayoutTransition(in, p.l1.inputs[0]);
      p.mid1 = *LayoutTransition(p.l1.output, p.lg.inputs[0], kind(p.l1.output_partial_sums));
      p.mid2 = *LayoutTransition(p.lg.output, p.l2.inputs[0]);
      p.out = *LayoutTransition(p.l2.output, final_layout, kind(p.l2.output_partial_sums));
      p.total = OpTimeUnderConfig(cm, m.g, m.mm1, c1)->seconds +
                OpTimeUnderConfig(cm, m.g, m.gelu, p.gelu)->seconds +
                OpTimeUnderConfig(cm, m.g, m.mm2, c2)->seconds;
      for (const Transition* t : {&p.in, &p.mid1, &p.mid2, &p.out}) {
        p.total += *TransitionTime(comm, *t);
      }
      p.total += *WeightGradSyncTime(comm, m.g, m.mm1, c1) +
                 *WeightGradSyncTime(comm, m.g, m.mm2, c2);
      ++*plans;
      if (all != nullptr) all->push_back(p);
      if (p.total < best.total) best = p;
    }
  }
  return best;
}

// Real cost model (ClusterCostModel on the dgx-h100 preset, no profile store:
// roofline op times and the CommModel's alpha-beta prior for collectives).
TEST(MegatronMlpTest, ColumnThenRowWithOneAllReduceWinsOnOneDgxNode) {
  Mlp m = MakeMlp();
  costmodel::ClusterSpec spec = *costmodel::LoadCluster("dgx-h100");
  costmodel::ClusterCostModel cm(spec, nullptr, nullptr, costmodel::CommModel(spec));
  const ParallelTensorShape replicated = Shape("f32[2048,4096]x8");
  int plans = 0;
  std::vector<MlpPlan> all;
  MlpPlan best = Cheapest(m, cm, replicated, replicated, 8, &plans, &all);
  EXPECT_EQ(plans, 100);
  std::sort(all.begin(), all.end(),
            [](const MlpPlan& a, const MlpPlan& b) { return a.total < b.total; });
  // Prior costs at these sizes: Megatron 1.64 ms, the runner-up (column, then
  // row 4 x column 2) 1.71 ms, pure data parallelism 3.68 ms (two 256 MiB
  // gradient AllReduces).
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all[0].total, best.total);
  EXPECT_GT(all[1].total, 1.02 * best.total);
  for (const MlpPlan& p : all) {
    if (p.c1 == Cfg({8, 1}) && p.c2 == Cfg({8, 1})) EXPECT_GT(p.total, 2 * best.total);
  }

  EXPECT_EQ(ConfigKindName(m.g, m.mm1, best.c1), "column") << ParallelConfigString(best.c1);
  EXPECT_EQ(ConfigKindName(m.g, m.mm2, best.c2), "row") << ParallelConfigString(best.c2);
  EXPECT_EQ(best.c1, Cfg({1, 8}));
  EXPECT_EQ(best.c2, Cfg({1, 1}, 8));
  // The pieces.
  EXPECT_EQ(ParallelShapeString(best.l1.inputs[0]), "f32[2048,4096]x8");
  EXPECT_EQ(ParallelShapeString(best.l1.inputs[1]), "f32[4096,16384/8]");
  EXPECT_EQ(ParallelShapeString(best.l1.output), "f32[2048,16384/8]");
  EXPECT_EQ(ParallelShapeString(best.lg.inputs[0]), "f32[2048,16384/8]");
  EXPECT_EQ(ParallelShapeString(best.lg.output), "f32[2048,16384/8]");
  EXPECT_EQ(ParallelShapeString(best.l2.inputs[0]), "f32[2048,16384/8]");
  EXPECT_EQ(ParallelShapeString(best.l2.inputs[1]), "f32[16384/8,4096]");
  EXPECT_EQ(ParallelShapeString(best.l2.output), "f32[2048,4096]x8");
  EXPECT_TRUE(best.l2.output_partial_sums);
  // No communication but the final AllReduce; no gradient sync.
  EXPECT_TRUE(best.in.ops.empty());
  EXPECT_TRUE(best.mid1.ops.empty());
  EXPECT_TRUE(best.mid2.ops.empty());
  EXPECT_EQ(OpStrings(best.out.ops), (std::vector<std::string>{"Reduce(8)", "Replicate(8)"}));
  EXPECT_EQ(*TransitionComm(best.out),
            (std::vector<CollectiveStep>{{Collective::kAllReduce, kRows * kH * kF32, 8, 1, 0, 2}}));
  EXPECT_EQ(*WeightGradSyncTime(cm.comm(), m.g, m.mm1, best.c1), 0.0);
  EXPECT_EQ(*WeightGradSyncTime(cm.comm(), m.g, m.mm2, best.c2), 0.0);
  // The total is the three shards plus that one AllReduce.
  const double expected = OpTimeUnderConfig(cm, m.g, m.mm1, best.c1)->seconds +
                          OpTimeUnderConfig(cm, m.g, m.gelu, best.gelu)->seconds +
                          OpTimeUnderConfig(cm, m.g, m.mm2, best.c2)->seconds +
                          cm.comm().Time(Collective::kAllReduce, kRows * kH * kF32, 8);
  EXPECT_NEAR(best.total, expected, 1e-12);
}

// With a data-partitioned block input and output, Megatron's sequence-parallel
// form wins: AllGather in, ReduceScatter out, still no gradient sync.
TEST(MegatronMlpTest, DataPartitionedBoundariesGiveAllGatherAndReduceScatter) {
  Mlp m = MakeMlp();
  costmodel::ClusterSpec spec = *costmodel::LoadCluster("dgx-h100");
  costmodel::ClusterCostModel cm(spec, nullptr, nullptr, costmodel::CommModel(spec));
  const ParallelTensorShape sharded = Shape("f32[2048/8,4096]");
  int plans = 0;
  MlpPlan best = Cheapest(m, cm, sharded, sharded, 8, &plans);
  EXPECT_EQ(best.c1, Cfg({1, 8})) << ParallelConfigString(best.c1);
  EXPECT_EQ(best.c2, Cfg({1, 1}, 8)) << ParallelConfigString(best.c2);
  EXPECT_EQ(*TransitionComm(best.in),
            (std::vector<CollectiveStep>{{Collective::kAllGather, kRows * kH * kF32, 8, 1, 0, 2}}));
  EXPECT_TRUE(best.mid1.ops.empty());
  EXPECT_TRUE(best.mid2.ops.empty());
  EXPECT_EQ(*TransitionComm(best.out),
            (std::vector<CollectiveStep>{
                {Collective::kReduceScatter, kRows * kH * kF32, 8, 1, 0, 2}}));
}

}  // namespace
}  // namespace braid::search
