#include "search/parallel_config.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>
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
#include "search/parallel_memory.h"

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
  GraphBuilder b("ex");
  TensorId y = b.Expand(b.Input("x", {8, 1}), {8, 8});
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


// --- CNN and recommendation ops -------------------------------------------

std::string Layout(const OpLayouts& l, int input) {
  return ParallelShapeString(input < 0 ? l.output : l.inputs[input]);
}

OpId OnlyOp(const Graph& g, OpKind k) {
  for (OpId o = 0; o < g.num_ops(); ++o)
    if (g.op(o).kind == k) return o;
  ADD_FAILURE() << "no op of that kind";
  return 0;
}

// x[8,16,8,8] -> 3x3 conv to 32 channels (same padding).
Graph ConvGraph(int64_t group) {
  GraphBuilder b("conv");
  TensorId y = b.Conv(b.Input("x", {8, 16, 8, 8}), 32, 3, 1, 1, group, /*bias=*/false);
  b.MarkOutput(y);
  return *std::move(b).Build();
}

TEST(ConvConfigsTest, DataChannelReductionAndSpatialSplits) {
  Graph g = ConvGraph(1);
  const OpId conv = OnlyOp(g, OpKind::kConv);
  std::vector<DroppedConfig> dropped;
  auto cs = CandidateConfigs(g, conv, 4, &dropped);
  ASSERT_TRUE(cs.ok()) << cs.status();
  // N, C_out and the C_in reduction; W stays whole. H splits of a 3x3
  // kernel need halo rows: left out and listed.
  EXPECT_THAT(Strings(*cs),
              ::testing::ElementsAre("out[4,1,1,1]", "out[1,1,1,1] red4", "out[1,2,1,1] red2",
                                     "out[1,4,1,1]", "out[2,1,1,1] red2", "out[2,2,1,1]"));
  std::vector<std::string> gone;
  for (const DroppedConfig& d : dropped) {
    gone.push_back(ParallelConfigString(d.config));
    EXPECT_EQ(d.config_kind, "spatial");
    EXPECT_THAT(d.why, ::testing::HasSubstr("halo"));
  }
  EXPECT_THAT(gone, ::testing::ElementsAre("out[1,1,2,1] red2", "out[1,1,4,1]", "out[1,2,2,1]",
                                           "out[2,1,2,1]"));
  // Output channels: the kernel is split on dim 0, X replicated.
  auto ch = ConfigLayouts(g, conv, Cfg({1, 4, 1, 1}));
  ASSERT_TRUE(ch.ok()) << ch.status();
  EXPECT_EQ(Layout(*ch, 0), "f32[8,16,8,8]x4");
  EXPECT_EQ(Layout(*ch, 1), "f32[32/4,16,3,3]");
  EXPECT_EQ(Layout(*ch, -1), "f32[8,32/4,8,8]");
  EXPECT_FALSE(ch->output_partial_sums);
  EXPECT_EQ(ConfigKindName(g, conv, Cfg({1, 4, 1, 1})), "channel");
  // Input channels: X and W split on C_in, partial sums out.
  auto red = ConfigLayouts(g, conv, Cfg({1, 1, 1, 1}, 4));
  ASSERT_TRUE(red.ok()) << red.status();
  EXPECT_EQ(Layout(*red, 0), "f32[8,16/4,8,8]");
  EXPECT_EQ(Layout(*red, 1), "f32[32,16/4,3,3]");
  EXPECT_EQ(Layout(*red, -1), "f32[8,32,8,8]x4");
  EXPECT_TRUE(red->output_partial_sums);
  EXPECT_EQ(ConfigKindName(g, conv, Cfg({1, 1, 1, 1}, 4)), "reduction");
  // H: X split on H (halo ignored), kernel replicated.
  auto sp = ConfigLayouts(g, conv, Cfg({1, 1, 4, 1}));
  ASSERT_TRUE(sp.ok()) << sp.status();
  EXPECT_EQ(Layout(*sp, 0), "f32[8,16,8/4,8]");
  EXPECT_EQ(Layout(*sp, 1), "f32[32,16,3,3]x4");
  EXPECT_EQ(ConfigKindName(g, conv, Cfg({1, 1, 4, 1})), "spatial");
  EXPECT_FALSE(ConfigLayouts(g, conv, Cfg({1, 1, 1, 4})).ok());  // W is not split
  // Per-device memory holds the kernel's shard: a quarter of 32x16x3x3 f32.
  auto mem = PerDeviceMemory(g, {{conv, Cfg({1, 4, 1, 1})}}, graph::Optimizer::kSgdMomentum);
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_EQ(mem->parameter_bytes, 32 * 16 * 3 * 3 * kF32 / 4);
  // A channel shard costs a quarter of the FLOPs.
  auto whole = ShardGraph(g, conv, Cfg({1, 1, 1, 1}));
  auto shard = ShardGraph(g, conv, Cfg({1, 4, 1, 1}));
  ASSERT_TRUE(whole.ok() && shard.ok());
  EXPECT_GT(shard->op(0).flops, 0);
  EXPECT_DOUBLE_EQ(shard->op(0).flops * 4, whole->op(0).flops);
}

TEST(ConvConfigsTest, GroupedConvSplitsWholeGroups) {
  Graph g = ConvGraph(4);  // 4 groups of 4 input / 8 output channels
  const OpId conv = OnlyOp(g, OpKind::kConv);
  auto cs = CandidateConfigs(g, conv, 8);
  ASSERT_TRUE(cs.ok()) << cs.status();
  for (const ParallelConfig& c : *cs) {
    EXPECT_EQ(c.reduction_degree, 1) << ParallelConfigString(c);
    EXPECT_EQ(4 % c.output_degrees[1], 0) << ParallelConfigString(c);
  }
  EXPECT_EQ(ConfigLayouts(g, conv, Cfg({1, 8, 1, 1})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ConfigLayouts(g, conv, Cfg({1, 1, 1, 1}, 2)).ok());
  auto l = ConfigLayouts(g, conv, Cfg({2, 4, 1, 1}));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(Layout(*l, 0), "f32[8/2,16/4,8,8]");  // the groups' input channels
  EXPECT_EQ(Layout(*l, 1), "f32[32/4,4,3,3]x2");
  auto shard = ShardGraph(g, conv, Cfg({2, 4, 1, 1}));
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->op(0).GetInt("group", 0), 1);
  EXPECT_EQ(shard->tensor(shard->op(0).inputs[0]).shape, (std::vector<int64_t>{4, 4, 8, 8}));
}

TEST(CnnConfigsTest, BatchNormPoolingFlattenSplitBatchAndChannels) {
  GraphBuilder b("cnn");
  TensorId x = b.BatchNorm(b.Input("x", {8, 16, 4, 4}), 1e-5);
  TensorId p = b.MaxPool(x, 2, 2, 0);
  TensorId y = b.Flatten(b.GlobalAveragePool(p), 1);
  b.MarkOutput(y);
  Graph g = *std::move(b).Build();
  const OpId bn = OnlyOp(g, OpKind::kBatchNormalization);
  auto bs = CandidateConfigs(g, bn, 4);
  ASSERT_TRUE(bs.ok()) << bs.status();
  EXPECT_THAT(Strings(*bs),
              ::testing::ElementsAre("out[4,1,1,1]", "out[1,4,1,1]", "out[2,2,1,1]"));
  auto l = ConfigLayouts(g, bn, Cfg({2, 2, 1, 1}));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(Layout(*l, 0), "f32[8/2,16/2,4,4]");
  EXPECT_EQ(Layout(*l, 1), "f32[16/2]x2");  // scale follows C, replicated over N
  EXPECT_EQ(Layout(*l, 3), "f32[16/2]x2");  // running mean
  EXPECT_EQ(ConfigKindName(g, bn, Cfg({1, 4, 1, 1})), "channel");
  const OpId pool = OnlyOp(g, OpKind::kMaxPool);
  auto pl = ConfigLayouts(g, pool, Cfg({1, 4, 1, 1}));
  ASSERT_TRUE(pl.ok()) << pl.status();
  EXPECT_EQ(Layout(*pl, 0), "f32[8,16/4,4,4]");
  EXPECT_EQ(Layout(*pl, -1), "f32[8,16/4,2,2]");
  EXPECT_FALSE(ConfigLayouts(g, pool, Cfg({1, 1, 2, 1})).ok());
  const OpId gap = OnlyOp(g, OpKind::kGlobalAveragePool);
  auto gl = ConfigLayouts(g, gap, Cfg({2, 2, 1, 1}));
  ASSERT_TRUE(gl.ok()) << gl.status();
  EXPECT_EQ(Layout(*gl, 0), "f32[8/2,16/2,2,2]");
  const OpId flat = OnlyOp(g, OpKind::kFlatten);
  auto fl = ConfigLayouts(g, flat, Cfg({1, 4}));
  ASSERT_TRUE(fl.ok()) << fl.status();
  EXPECT_EQ(Layout(*fl, 0), "f32[8,16/4,1,1]");
}

TEST(CnnConfigsTest, ConcatNeverSplitsItsAxis) {
  GraphBuilder b("cat");
  TensorId y = b.Concat({b.Input("a", {8, 4, 6}), b.Input("b", {8, 2, 6})}, 1);
  b.MarkOutput(y);
  Graph g = *std::move(b).Build();
  auto cs = CandidateConfigs(g, 0, 2);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_THAT(Strings(*cs), ::testing::ElementsAre("out[2,1,1]", "out[1,1,2]"));
  auto l = ConfigLayouts(g, 0, Cfg({1, 1, 2}));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(Layout(*l, 0), "f32[8,4,6/2]");
  EXPECT_EQ(Layout(*l, 1), "f32[8,2,6/2]");
  EXPECT_FALSE(ConfigLayouts(g, 0, Cfg({1, 2, 1})).ok());
}

// DLRM's embedding bag: Gather from a [1000, 64] table, sum over the 10
// lookups.
struct Bag {
  Graph g;
  OpId gather = -1, sum = -1;
};
Bag MakeBag() {
  GraphBuilder b("bag");
  TensorId e = b.Embedding(b.Input("idx", {8, 10}, DType::kI64), 1000, 64);
  b.MarkOutput(b.ReduceSum(e, {1}, /*keepdims=*/false));
  Bag m{*std::move(b).Build()};
  m.gather = OnlyOp(m.g, OpKind::kGather);
  m.sum = OnlyOp(m.g, OpKind::kReduceSum);
  return m;
}

TEST(GatherConfigsTest, EmbeddingDataRowAndColumn) {
  Bag m = MakeBag();
  const Graph& g = m.g;
  auto data = ConfigLayouts(g, m.gather, Cfg({4, 1, 1}));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(Layout(*data, 0), "f32[1000,64]x4");
  EXPECT_EQ(Layout(*data, 1), "i64[8/4,10]");
  EXPECT_EQ(Layout(*data, -1), "f32[8/4,10,64]");
  EXPECT_EQ(ConfigKindName(g, m.gather, Cfg({4, 1, 1})), "data");
  auto row = ConfigLayouts(g, m.gather, Cfg({1, 1, 1}, 4));
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(Layout(*row, 0), "f32[1000/4,64]");
  EXPECT_EQ(Layout(*row, 1), "i64[8,10]x4");
  EXPECT_EQ(Layout(*row, -1), "f32[8,10,64]x4");
  EXPECT_TRUE(row->output_partial_sums);
  EXPECT_EQ(ConfigKindName(g, m.gather, Cfg({1, 1, 1}, 4)), "row");
  // Described, but never a candidate: nothing masks the ids a device's
  // rows do not hold.
  std::vector<DroppedConfig> dropped;
  auto gcs = CandidateConfigs(g, m.gather, 4, &dropped);
  ASSERT_TRUE(gcs.ok()) << gcs.status();
  for (const ParallelConfig& c : *gcs) EXPECT_EQ(c.reduction_degree, 1) << ParallelConfigString(c);
  ASSERT_FALSE(dropped.empty());
  for (const DroppedConfig& d : dropped) {
    EXPECT_EQ(d.config_kind, "row");
    EXPECT_GT(d.config.reduction_degree, 1);
  }
  auto col = ConfigLayouts(g, m.gather, Cfg({1, 1, 4}));
  ASSERT_TRUE(col.ok()) << col.status();
  EXPECT_EQ(Layout(*col, 0), "f32[1000,64/4]");
  EXPECT_EQ(Layout(*col, 1), "i64[8,10]x4");
  EXPECT_EQ(Layout(*col, -1), "f32[8,10,64/4]");
  EXPECT_EQ(ConfigKindName(g, m.gather, Cfg({1, 1, 4})), "column");
  // The data-parallel table's gradient is all-reduced, a sharded one's not.
  auto sync = WeightGradSync(g, m.gather, Cfg({4, 1, 1}));
  ASSERT_TRUE(sync.ok()) << sync.status();
  ASSERT_EQ(sync->size(), 1u);
  EXPECT_EQ(ParallelShapeString(sync->at(0).transition.start), "f32[1000,64]x4");
  EXPECT_TRUE(WeightGradSync(g, m.gather, Cfg({1, 1, 4}))->empty());
  EXPECT_TRUE(WeightGradSync(g, m.gather, Cfg({1, 1, 1}, 4))->empty());
  // The bag sum follows the column split; the reduced dim stays whole.
  auto sum = ConfigLayouts(g, m.sum, Cfg({1, 4}));
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(Layout(*sum, 0), "f32[8,10,64/4]");
  auto scs = CandidateConfigs(g, m.sum, 4);
  ASSERT_TRUE(scs.ok()) << scs.status();
  EXPECT_THAT(Strings(*scs), ::testing::ElementsAre("out[4,1]", "out[1,4]", "out[2,2]"));
}

// A Gather from an activation (DLRM's lower-triangle pick) has no row split.
TEST(GatherConfigsTest, ActivationGatherHasNoReduction) {
  GraphBuilder b("pick");
  TensorId y = b.Gather(b.Input("z", {8, 81}), b.Constant("i", {36}, DType::kI64), 1);
  b.MarkOutput(y);
  Graph g = *std::move(b).Build();
  const OpId op = OnlyOp(g, OpKind::kGather);
  auto cs = CandidateConfigs(g, op, 4);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_THAT(Strings(*cs), ::testing::ElementsAre("out[4,1]", "out[1,4]", "out[2,2]"));
  auto l = ConfigLayouts(g, op, Cfg({2, 2}));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(Layout(*l, 0), "f32[8/2,81]x2");
  EXPECT_EQ(Layout(*l, 1), "i64[36/2]x2");
}


// Per-device memory sees the table's shard: a row or column split over 4
// holds a quarter of the table (and its gradient and momentum), the data
// split all of it.
TEST(GatherConfigsTest, MemoryCountsTheTableShard) {
  Bag m = MakeBag();
  const int64_t table = 1000 * 64 * kF32;
  for (const auto& [cfg, pieces] : std::vector<std::pair<ParallelConfig, int64_t>>{
           {Cfg({4, 1, 1}), 1}, {Cfg({1, 1, 1}, 4), 4}, {Cfg({1, 1, 4}), 4}}) {
    std::map<OpId, ParallelConfig> cfgs = {{m.gather, cfg}};
    auto mem = PerDeviceMemory(m.g, cfgs, graph::Optimizer::kSgdMomentum);
    ASSERT_TRUE(mem.ok()) << mem.status();
    EXPECT_EQ(mem->parameter_bytes, table / pieces) << ParallelConfigString(cfg);
    EXPECT_EQ(mem->gradient_bytes, table / pieces);
    EXPECT_EQ(mem->optimizer_bytes, table / pieces);
  }
}

// A 1x1 unstrided conv reads exactly the input rows of its output rows:
// its H split stays a candidate.
TEST(ConvConfigsTest, PointwiseConvKeepsItsSpatialSplit) {
  GraphBuilder b("conv1x1");
  TensorId y = b.Conv(b.Input("x", {8, 16, 8, 8}), 32, 1, 1, 0, 1, /*bias=*/false);
  b.MarkOutput(y);
  Graph g = *std::move(b).Build();
  const OpId conv = OnlyOp(g, OpKind::kConv);
  std::vector<DroppedConfig> dropped;
  auto cs = CandidateConfigs(g, conv, 4, &dropped);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_THAT(Strings(*cs), ::testing::Contains("out[1,1,4,1]"));
  EXPECT_TRUE(dropped.empty());
  EXPECT_FALSE(InexactConfig(g, conv, Cfg({1, 1, 4, 1})).has_value());
}

// GPT-2's fused QKV: x[4,16,96] -> Split(axis 2) into q, k, v [4,16,32].
struct Qkv {
  Graph g;
  OpId split = -1;
};
Qkv MakeQkv(std::vector<int64_t> sizes) {
  GraphBuilder b("qkv");
  TensorId x = b.Input("x", {4, 16, 96});
  std::vector<std::vector<int64_t>> shapes;
  for (int64_t s : sizes) shapes.push_back({4, 16, s});
  std::vector<TensorId> outs =
      b.Custom("split", "Split", {x}, shapes, {{"axis", int64_t{2}}, {"split", sizes}});
  for (TensorId t : outs) b.MarkOutput(b.Relu(t));
  Qkv q{*std::move(b).Build()};
  q.split = OnlyOp(q.g, OpKind::kSplit);
  return q;
}

std::string OutLayout(const OpLayouts& l, size_t k) { return ParallelShapeString(l.outputs[k]); }

TEST(SplitConfigsTest, EveryOutputFollowsTheInputOffTheAxis) {
  Qkv q = MakeQkv({32, 32, 32});
  auto l = ConfigLayouts(q.g, q.split, Cfg({4, 1, 1}));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(Layout(*l, 0), "f32[4/4,16,96]");
  ASSERT_EQ(l->outputs.size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(OutLayout(*l, k), "f32[4/4,16,32]");
  EXPECT_EQ(ParallelShapeString(l->output), "f32[4/4,16,32]");
  EXPECT_EQ(ConfigKindName(q.g, q.split, Cfg({4, 1, 1})), "elementwise");
  auto seq = ConfigLayouts(q.g, q.split, Cfg({1, 4, 1}));
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(Layout(*seq, 0), "f32[4,16/4,96]");
  EXPECT_EQ(OutLayout(*seq, 2), "f32[4,16/4,32]");
}

// A segmented split: the input split on the axis by d holds the d-th share
// of each of q, k and v; every output is split on the axis by d.
TEST(SplitConfigsTest, SegmentedSplitOnTheAxis) {
  Qkv q = MakeQkv({32, 32, 32});
  auto cs = CandidateConfigs(q.g, q.split, 4);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_THAT(Strings(*cs), ::testing::Contains("out[1,1,4]"));
  EXPECT_EQ(Strings(*cs).front(), "out[4,1,1]");
  auto l = ConfigLayouts(q.g, q.split, Cfg({1, 1, 4}));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(Layout(*l, 0), "f32[4,16,96/4]");
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(OutLayout(*l, k), "f32[4,16,32/4]");
  EXPECT_EQ(ConfigKindName(q.g, q.split, Cfg({1, 1, 4})), "segmented");
  // One device splits its 24 columns into three segments of 8.
  auto shard = ShardGraph(q.g, q.split, Cfg({1, 1, 4}));
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_THAT(shard->op(0).GetInts("split"), ::testing::ElementsAre(8, 8, 8));
  ASSERT_EQ(shard->op(0).outputs.size(), 3u);
  EXPECT_THAT(shard->tensor(shard->op(0).outputs[1]).shape, ::testing::ElementsAre(4, 16, 8));
  // Off the axis the sizes stay.
  auto data = ShardGraph(q.g, q.split, Cfg({4, 1, 1}));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->op(0).GetInts("split"), ::testing::ElementsAre(32, 32, 32));
}

// The degree must divide every segment: 96 = 48 + 32 + 16 splits on the
// axis by 2, 4, 8 and 16 (gcd 16) but not by 3 (96 would allow it).
TEST(SplitConfigsTest, SegmentedDegreeDividesEveryOutput) {
  Qkv q = MakeQkv({48, 32, 16});
  EXPECT_TRUE(ConfigLayouts(q.g, q.split, Cfg({1, 1, 16})).ok());
  EXPECT_FALSE(ConfigLayouts(q.g, q.split, Cfg({1, 1, 3})).ok());
  auto three = CandidateConfigs(q.g, q.split, 3);  // nothing of [4, 16, 16 | 96] divides
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_TRUE(three->empty());
  auto cs = CandidateConfigs(q.g, q.split, 16);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_THAT(Strings(*cs), ::testing::Contains("out[1,1,16]"));
  auto wide = CandidateConfigs(q.g, q.split, 32);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_FALSE(wide->empty());
  for (const ParallelConfig& c : *wide) EXPECT_LE(c.output_degrees[2], 16) << ParallelConfigString(c);
}

// Training-mode Dropout: y and mask both follow the input.
TEST(MultiOutputConfigsTest, DropoutMaskFollowsTheInput) {
  GraphBuilder b("drop");
  TensorId x = b.Input("x", {8, 64});
  std::vector<TensorId> outs = b.Custom("dropout", "Dropout", {x}, {{8, 64}, {8, 64}},
                                        {{"ratio", 0.1}, {"training_mode", int64_t{1}}});
  b.MarkOutput(b.Relu(outs[0]));
  Graph g = *std::move(b).Build();
  const OpId op = OnlyOp(g, OpKind::kDropout);
  auto cs = CandidateConfigs(g, op, 4);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_THAT(Strings(*cs), ::testing::ElementsAre("out[4,1]", "out[1,4]", "out[2,2]"));
  auto l = ConfigLayouts(g, op, Cfg({1, 4}));
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->outputs.size(), 2u);
  EXPECT_EQ(Layout(*l, 0), "f32[8,64/4]");
  EXPECT_EQ(OutLayout(*l, 0), "f32[8,64/4]");
  EXPECT_EQ(OutLayout(*l, 1), "f32[8,64/4]");
}

// Training-mode BatchNormalization: Y plus running mean and variance [C].
// N split: statistics copied; C split: statistics split with C.
TEST(MultiOutputConfigsTest, TrainingBatchNormStatisticsFollowC) {
  GraphBuilder b("bn");
  TensorId x = b.Input("x", {8, 16, 4, 4});
  std::vector<TensorId> stats;
  for (const char* n : {"scale", "bias"}) stats.push_back(b.Param(n, {16}));
  for (const char* n : {"mean", "var"}) stats.push_back(b.Constant(n, {16}));
  std::vector<TensorId> in = {x};
  in.insert(in.end(), stats.begin(), stats.end());
  std::vector<TensorId> outs = b.Custom("bn", "BatchNormalization", in,
                                        {{8, 16, 4, 4}, {16}, {16}},
                                        {{"training_mode", int64_t{1}}});
  b.MarkOutput(b.Relu(outs[0]));
  Graph g = *std::move(b).Build();
  const OpId op = OnlyOp(g, OpKind::kBatchNormalization);
  auto cs = CandidateConfigs(g, op, 4);
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_THAT(Strings(*cs), ::testing::ElementsAre("out[4,1,1,1]", "out[1,4,1,1]", "out[2,2,1,1]"));
  auto n = ConfigLayouts(g, op, Cfg({4, 1, 1, 1}));
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(n->outputs.size(), 3u);
  EXPECT_EQ(OutLayout(*n, 0), "f32[8/4,16,4,4]");
  EXPECT_EQ(OutLayout(*n, 1), "f32[16]x4");
  EXPECT_EQ(OutLayout(*n, 2), "f32[16]x4");
  EXPECT_EQ(ConfigKindName(g, op, Cfg({4, 1, 1, 1})), "data");
  auto c = ConfigLayouts(g, op, Cfg({2, 2, 1, 1}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(OutLayout(*c, 0), "f32[8/2,16/2,4,4]");
  EXPECT_EQ(OutLayout(*c, 1), "f32[16/2]x2");
  EXPECT_EQ(Layout(*c, 1), "f32[16/2]x2");  // scale
  auto shard = ShardGraph(g, op, Cfg({1, 4, 1, 1}));
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_THAT(shard->tensor(shard->op(0).outputs[2]).shape, ::testing::ElementsAre(4));
}

// Multi-output kinds without configs (LSTM) stay unimplemented here: the
// planner runs them replicated (parallelize_test.cc).
TEST(MultiOutputConfigsTest, LstmHasNoConfigs) {
  GraphBuilder b("lstm");
  TensorId x = b.Input("x", {10, 4, 8});
  std::vector<TensorId> outs =
      b.Custom("lstm", "LSTM", {x, b.Param("w", {1, 64, 8}), b.Param("r", {1, 64, 16})},
               {{10, 1, 4, 16}, {1, 4, 16}, {1, 4, 16}}, {{"hidden_size", int64_t{16}}});
  b.MarkOutput(outs[0]);
  Graph g = *std::move(b).Build();
  auto cs = CandidateConfigs(g, OnlyOp(g, OpKind::kLSTM), 2);
  EXPECT_EQ(cs.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace braid::search
