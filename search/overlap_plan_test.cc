#include "search/overlap_plan.h"

#include <span>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "graph/ops.h"

namespace braid::search {
namespace {

using costmodel::OverlapMethod;
using costmodel::OverlapPattern;
using graph::DType;
using graph::Graph;
using graph::TensorId;
using graph::TensorRole;

// GEMMs and additions from their annotated flops and bytes plus a launch
// overhead; messages alpha + bytes * beta.
class RooflineishModel : public costmodel::CostModel {
 public:
  using CostModel::ComputeTime;
  costmodel::OpTime ComputeTime(const Graph& g, std::span<const graph::OpId> ops) override {
    double s = 0;
    for (graph::OpId o : ops) {
      const graph::Op& op = g.op(o);
      s += launch_s + op.flops / flops_per_s +
           static_cast<double>(op.bytes_read + op.bytes_written) / bytes_per_s;
    }
    return {s, costmodel::TimeSource::kMeasured};
  }
  double CollectiveTime(costmodel::Collective c, int64_t bytes, int group) override {
    if (c == costmodel::Collective::kSendRecv) return alpha + bytes * beta;
    return (group - 1) * (alpha + static_cast<double>(bytes) / group * beta);
  }
  std::string Generation() const override { return "rooflineish"; }
  double launch_s = 10e-6, flops_per_s = 50e12, bytes_per_s = 2e12;
  double alpha = 20e-6, beta = 1.0 / 100e9;
};

costmodel::ClusterSpec Gpus(int n) {
  costmodel::ClusterSpec c;
  c.name = "test";
  c.num_nodes = 1;
  c.devices_per_node = n;
  c.num_ranks = n;
  return c;
}

// A tensor-parallel (sequence-parallel) MLP block on one of n devices:
// x_r [rows/n, d] -> AllGather -> MatMul w1 [d, f/n] -> Relu -> MatMul w2
// [f/n, d] -> ReduceScatter -> [rows/n, d].
Graph Block(int64_t rows, int64_t d, int64_t f, int n, double ag_s = -1) {
  Graph g("block");
  TensorId x = g.AddTensor("x", {rows / n, d}, DType::kF32, TensorRole::kInput);
  TensorId xg = g.AddTensor("x.gathered", {rows, d}, DType::kF32, TensorRole::kActivation);
  graph::Attrs ag = {{"group_size", int64_t{n}}};
  if (ag_s >= 0) ag["comm_time_s"] = ag_s;
  g.AddOp("x.AllGather.1", "AllGather", {x}, {xg}, ag);
  TensorId w1 = g.AddTensor("w1", {d, f / n}, DType::kF32, TensorRole::kParameter);
  TensorId h = g.AddTensor("h", {rows, f / n}, DType::kF32, TensorRole::kActivation);
  g.AddOp("fc1", "MatMul", {xg, w1}, {h});
  TensorId a = g.AddTensor("a", {rows, f / n}, DType::kF32, TensorRole::kActivation);
  g.AddOp("relu", "Relu", {h}, {a});
  TensorId w2 = g.AddTensor("w2", {f / n, d}, DType::kF32, TensorRole::kParameter);
  TensorId y = g.AddTensor("y.partial", {rows, d}, DType::kF32, TensorRole::kActivation);
  g.AddOp("fc2", "MatMul", {a, w2}, {y});
  TensorId ys = g.AddTensor("y", {rows / n, d}, DType::kF32, TensorRole::kActivation);
  g.AddOp("y.ReduceScatter.2", "ReduceScatter", {y}, {ys}, {{"group_size", int64_t{n}}});
  g.AddOutput(ys);
  graph::AnnotateCosts(g);
  return g;
}

TEST(OverlapPlan, FindsBothPairsWithTheirShapes) {
  RooflineishModel cm;
  Graph g = Block(4096, 1024, 4096, 4);
  absl::StatusOr<std::vector<OverlapChoice>> c = ChooseOverlaps(g, Gpus(4), cm, {});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 2u);
  const OverlapChoice& ag = (*c)[0];
  EXPECT_EQ(ag.shape.pattern, OverlapPattern::kAllGatherMatMul);
  EXPECT_EQ(ag.collective_op, "x.AllGather.1");
  EXPECT_THAT(ag.matmul_ops, ::testing::ElementsAre("fc1"));
  EXPECT_EQ(ag.shape.m, 4096);
  EXPECT_EQ(ag.shape.k, 1024);
  EXPECT_EQ(ag.shape.nout, 4096);
  EXPECT_EQ(ag.shape.ranks, 4);
  const OverlapChoice& rs = (*c)[1];
  EXPECT_EQ(rs.shape.pattern, OverlapPattern::kMatMulReduceScatter);
  EXPECT_THAT(rs.matmul_ops, ::testing::ElementsAre("fc2"));
  EXPECT_EQ(rs.shape.m, 4096);
  EXPECT_EQ(rs.shape.k, 4096);
  EXPECT_EQ(rs.shape.nout, 1024);
  // No fused tiles unless asked: none + three decompositions.
  EXPECT_EQ(ag.candidates.size(), 4u);
}

TEST(OverlapPlan, LargeLayersDecomposeSmallOnesDoNot) {
  RooflineishModel cm;
  // Large: the GEMM hides the collective; the choice gains.
  absl::StatusOr<std::vector<OverlapChoice>> big =
      ChooseOverlaps(Block(16384, 4096, 16384, 4), Gpus(4), cm, {});
  ASSERT_TRUE(big.ok());
  for (const OverlapChoice& c : *big) {
    EXPECT_NE(c.method, OverlapMethod::kNone) << c.collective_op;
    EXPECT_GT(c.gain_s(), 0);
    EXPECT_GT(c.efficiency, 0);
    EXPECT_EQ(c.steps, 4);
  }
  // Small: per-step latency and small GEMMs make every decomposition slower.
  absl::StatusOr<std::vector<OverlapChoice>> small =
      ChooseOverlaps(Block(64, 256, 256, 4), Gpus(4), cm, {});
  ASSERT_TRUE(small.ok());
  for (const OverlapChoice& c : *small) {
    EXPECT_EQ(c.method, OverlapMethod::kNone) << c.collective_op;
    EXPECT_DOUBLE_EQ(c.chosen_s, c.none_s);
    for (const OverlapCandidateTime& t : c.candidates) EXPECT_GE(t.time_s, c.none_s * 0.99);
  }
}

TEST(OverlapPlan, FusedTilesAreCandidatesOnlyWhenTheBackendHasThem) {
  RooflineishModel cm;
  Graph g = Block(8192, 4096, 16384, 2);
  OverlapSearchOptions o;
  o.fused_tiles = true;
  absl::StatusOr<std::vector<OverlapChoice>> c = ChooseOverlaps(g, Gpus(2), cm, o);
  ASSERT_TRUE(c.ok());
  int tiles = 0;
  for (const OverlapCandidateTime& t : (*c)[0].candidates)
    if (t.method == OverlapMethod::kFusedTiles) {
      ++tiles;
      EXPECT_GT(t.tile_rows, 0);
    }
  EXPECT_EQ(tiles, 3);  // 64, 128 and 256 rows
  o.decompositions = false;
  c = ChooseOverlaps(g, Gpus(2), cm, o);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)[0].method == OverlapMethod::kFusedTiles ||
              (*c)[0].method == OverlapMethod::kNone);
}

TEST(OverlapPlan, ApplyChargesTheEffectiveCommunicationTime) {
  RooflineishModel cm;
  Graph g = Block(16384, 4096, 16384, 4, /*ag_s=*/2e-3);
  absl::StatusOr<std::vector<OverlapChoice>> c = ChooseOverlaps(g, Gpus(4), cm, {});
  ASSERT_TRUE(c.ok());
  // The per-device graph's own collective time is the baseline's.
  EXPECT_DOUBLE_EQ((*c)[0].none_s, 2e-3 + (*c)[0].gemm_s);
  ASSERT_TRUE(ApplyOverlaps(*c, g).ok());
  for (const OverlapChoice& ch : *c) {
    const graph::Op* op = nullptr;
    for (graph::OpId o = 0; o < static_cast<graph::OpId>(g.num_ops()); ++o)
      if (g.op(o).name == ch.collective_op) op = &g.op(o);
    ASSERT_NE(op, nullptr);
    EXPECT_DOUBLE_EQ(op->GetFloat("comm_time_s", -1), std::max(0.0, ch.chosen_s - ch.gemm_s));
    EXPECT_EQ(op->GetString("overlap_method", ""), costmodel::OverlapMethodName(ch.method));
  }
  // The plan file's form round-trips what ApplyOverlaps needs.
  absl::StatusOr<std::vector<OverlapChoice>> back = OverlapChoicesFromJson(OverlapChoicesJson(*c));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), c->size());
  for (size_t i = 0; i < c->size(); ++i) {
    EXPECT_EQ((*back)[i].collective_op, (*c)[i].collective_op);
    EXPECT_EQ((*back)[i].method, (*c)[i].method);
    EXPECT_EQ((*back)[i].shape.m, (*c)[i].shape.m);
    EXPECT_NEAR((*back)[i].chosen_s, (*c)[i].chosen_s, 1e-15);
  }
  nlohmann::json broken = OverlapChoicesJson(*c);
  broken[1]["method"] = "zigzag";
  EXPECT_THAT(std::string(OverlapChoicesFromJson(broken).status().message()),
              ::testing::HasSubstr("zigzag"));
  broken[1].erase("method");
  EXPECT_THAT(std::string(OverlapChoicesFromJson(broken).status().message()),
              ::testing::HasSubstr("overlap[1]"));
  std::vector<OverlapChoice> bad = *c;
  bad[0].collective_op = "nope";
  EXPECT_EQ(ApplyOverlaps(bad, g).code(), absl::StatusCode::kNotFound);
  nlohmann::json j = OverlapChoicesJson(*c);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["pattern"], "allgather_matmul");
  EXPECT_GT(j[0]["gain_ms"].get<double>(), 0);
  EXPECT_EQ(j[0]["candidates"].size(), 4u);
}

TEST(OverlapPlan, GathersAlsoReadByWeightGradientsArePairs) {
  RooflineishModel cm;
  Graph g = Block(4096, 1024, 4096, 2);
  // The weight gradient reads the gathered rows transposed (backward).
  const TensorId xg = 1;
  ASSERT_EQ(g.tensor(xg).name, "x.gathered");
  TensorId dh = g.AddTensor("h.grad", {4096, 2048}, DType::kF32, TensorRole::kGradient);
  TensorId dw = g.AddTensor("w1.grad", {1024, 2048}, DType::kF32, TensorRole::kGradient);
  g.AddOp("w1.grad.matmul", "MatMul", {xg, dh}, {dw}, {{"transA", int64_t{1}}},
          graph::Phase::kBackward);
  graph::AnnotateCosts(g);
  absl::StatusOr<std::vector<OverlapChoice>> c = ChooseOverlaps(g, Gpus(2), cm, {});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 2u);
  EXPECT_EQ((*c)[0].collective_op, "x.AllGather.1");
  EXPECT_THAT((*c)[0].matmul_ops, ::testing::ElementsAre("fc1"));
}

TEST(OverlapPlan, SkipsGathersWhoseConsumersAreNotRowMatMuls) {
  RooflineishModel cm;
  Graph g("feature_gather");
  TensorId x = g.AddTensor("x", {64, 128}, DType::kF32, TensorRole::kInput);
  TensorId xg = g.AddTensor("xg", {64, 256}, DType::kF32, TensorRole::kActivation);
  // Along the last (feature) dim: no row decomposition.
  g.AddOp("ag", "AllGather", {x}, {xg}, {{"group_size", int64_t{2}}});
  TensorId w = g.AddTensor("w", {256, 32}, DType::kF32, TensorRole::kParameter);
  TensorId y = g.AddTensor("y", {64, 32}, DType::kF32, TensorRole::kActivation);
  g.AddOp("mm", "MatMul", {xg, w}, {y});
  g.AddOutput(y);
  graph::AnnotateCosts(g);
  absl::StatusOr<std::vector<OverlapChoice>> c = ChooseOverlaps(g, Gpus(2), cm, {});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->empty());
}

}  // namespace
}  // namespace braid::search
