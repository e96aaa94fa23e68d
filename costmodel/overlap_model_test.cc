#include "costmodel/overlap_model.h"

#include <cmath>
#include <span>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
namespace {

using ::testing::HasSubstr;

// GEMMs cost a launch overhead plus flops at a fixed rate; additions are
// memory-bound; messages cost alpha + bytes * beta. Enough to show the shape
// Flux's Figures 4 and 14 report for decompositions.
class LinearCostModel : public CostModel {
 public:
  using CostModel::ComputeTime;
  OpTime ComputeTime(const graph::Graph& g, std::span<const graph::OpId> ops) override {
    const graph::Op& op = g.op(ops[0]);
    const graph::Tensor& out = g.tensor(op.outputs[0]);
    if (op.kind == graph::OpKind::kMatMul) {
      const graph::Tensor& a = g.tensor(op.inputs[0]);
      const double flops = 2.0 * a.shape[0] * a.shape[1] * out.shape[1];
      return {launch_s + flops / flops_per_s, TimeSource::kMeasured};
    }
    return {launch_s + 3.0 * out.Bytes() / bytes_per_s, TimeSource::kPrior};
  }
  double CollectiveTime(Collective c, int64_t bytes, int group_size) override {
    if (c == Collective::kSendRecv) return alpha + bytes * beta;
    return (group_size - 1) * (alpha + bytes / group_size * beta);
  }
  double ComputeSlowdownDuringComm() const override { return slowdown; }
  std::string Generation() const override { return "linear"; }

  double launch_s = 20e-6, flops_per_s = 100e9, bytes_per_s = 10e9;
  double alpha = 100e-6, beta = 1e-9;  // 100 us per message, 1 GB/s
  double slowdown = 1.0;
};

ClusterSpec Gpus(int ranks) {
  ClusterSpec c;
  c.name = "test-gpus";
  c.num_nodes = 1;
  c.devices_per_node = ranks;
  c.num_ranks = ranks;
  return c;
}

ClusterSpec Cpus(int ranks, int cores) {
  ClusterSpec c = Gpus(ranks);
  c.name = "test-cpus";
  c.cpu.cores_per_node = cores;
  c.cpu.threads_per_rank = 1;
  c.cpu.comm_threads_per_rank = 1;
  return c;
}

OverlapShape Shape(OverlapPattern p, int64_t m) {
  return {.pattern = p, .m = m, .k = 1024, .nout = 1024, .ranks = 2};
}

TEST(OverlapModel, StepChargesTheTransfersCpuOnlyWithoutSpareCores) {
  OverlapParts p;
  p.transfer_cpu_fraction = 0.5;
  p.spare_cores_per_rank = 0;
  EXPECT_DOUBLE_EQ(OverlapStep(10, 8, p), 14);  // the GEMM loses 0.5 * 8
  EXPECT_DOUBLE_EQ(OverlapStep(1, 8, p), 8);    // the transfer is the longer
  p.spare_cores_per_rank = 1;                   // an idle core takes the copies
  EXPECT_DOUBLE_EQ(OverlapStep(10, 8, p), 10);
  p.spare_cores_per_rank = 0.25;                // half of them
  EXPECT_DOUBLE_EQ(OverlapStep(10, 8, p), 12);
  p.transfer_cpu_fraction = 0;
  p.spare_cores_per_rank = 0;
  EXPECT_DOUBLE_EQ(OverlapStep(10, 8, p), 10);
}

TEST(OverlapModel, FormulasOfEachMethod) {
  OverlapParts p;
  p.ranks = 4;
  p.gemm_s = 40;
  p.chunk_gemm_s = 11;
  p.half_gemm_s = 6;
  p.collective_s = 30;
  p.chunk_transfer_s = 9;
  p.half_transfer_s = 8;
  p.chunk_add_s = 1;
  p.half_add_s = 0.5;
  p.chunk_copy_s = 0.75;
  p.half_copy_s = 0.25;
  const auto ag = OverlapPattern::kAllGatherMatMul;
  const auto rs = OverlapPattern::kMatMulReduceScatter;
  EXPECT_DOUBLE_EQ(PredictOverlapTime(ag, OverlapMethod::kNone, p), 70);
  EXPECT_DOUBLE_EQ(PredictOverlapTime(ag, OverlapMethod::kLooped, p), 3 * 11 + 11);
  // Half = max(2 G_h, G_h + P_h) = 14 (no CPU taken: rho = 0).
  EXPECT_DOUBLE_EQ(PredictOverlapTime(ag, OverlapMethod::kUnrolled, p), 3 * 14 + 12);
  EXPECT_DOUBLE_EQ(PredictOverlapTime(ag, OverlapMethod::kBidirectional, p), 3 * 14 + 12);
  EXPECT_DOUBLE_EQ(PredictOverlapTime(rs, OverlapMethod::kNone, p), 70);
  EXPECT_DOUBLE_EQ(PredictOverlapTime(rs, OverlapMethod::kLooped, p), 11 + 3 * (11 + 1) + 0.75);
  EXPECT_DOUBLE_EQ(PredictOverlapTime(rs, OverlapMethod::kUnrolled, p), 12 + 3 * (14 + 1) + 0.5);
  // The transfers' CPU work taken from the GEMM: 0.5 * 2 * 8 = 8 more per half step.
  p.transfer_cpu_fraction = 0.5;
  EXPECT_DOUBLE_EQ(PredictOverlapTime(ag, OverlapMethod::kUnrolled, p), 3 * 20 + 12);
  EXPECT_DOUBLE_EQ(PredictOverlapTime(ag, OverlapMethod::kLooped, p), 3 * (11 + 4.5) + 11);
  p.transfer_cpu_fraction = 0;
  p.tiles = 8;
  p.tile_gemm_s = 5.5;
  p.tiles_transfer_s = 60;
  EXPECT_DOUBLE_EQ(PredictOverlapTime(ag, OverlapMethod::kFusedTiles, p), 65.5);
  p.tiles_transfer_s = 20;
  EXPECT_DOUBLE_EQ(PredictOverlapTime(rs, OverlapMethod::kFusedTiles, p), 44);
  // Flux eq. 1-2.
  EXPECT_DOUBLE_EQ(OverlapEfficiencyOf(55, 70, 40), 0.5);
  EXPECT_DOUBLE_EQ(OverlapEfficiencyOf(80, 70, 40), 1 - 40.0 / 30);
  EXPECT_TRUE(std::isnan(OverlapEfficiencyOf(50, 40, 40)));
}

// Small m: half-size GEMMs and a message latency per step lose against the
// undecomposed pair; large m: the decomposition hides most of the
// collective (Flux Figs. 4 and 14, ASPLOS'23 §6).
TEST(OverlapModel, SmallChunksLoseLargeOnesWin) {
  LinearCostModel cm;
  const ClusterSpec c = Gpus(2);
  for (OverlapPattern pat : {OverlapPattern::kAllGatherMatMul, OverlapPattern::kMatMulReduceScatter}) {
    SCOPED_TRACE(std::string(OverlapPatternName(pat)));
    auto eff = [&](int64_t m, OverlapMethod method) {
      absl::StatusOr<OverlapParts> p = OverlapPartsFromCostModel(cm, c, Shape(pat, m));
      EXPECT_TRUE(p.ok()) << p.status();
      return OverlapEfficiencyOf(PredictOverlapTime(pat, method, *p),
                                 PredictOverlapTime(pat, OverlapMethod::kNone, *p), p->gemm_s);
    };
    EXPECT_LT(eff(8, OverlapMethod::kUnrolled), 0);
    EXPECT_GT(eff(8192, OverlapMethod::kLooped), 0.3);
    EXPECT_GT(eff(8192, OverlapMethod::kUnrolled), 0.3);
  }
}

TEST(OverlapModel, CpuTransfersCostTheCoresTheGemmsUse) {
  LinearCostModel cm;
  const OverlapShape s = Shape(OverlapPattern::kAllGatherMatMul, 4096);
  // cpu-local: 2 ranks of one thread on 2 cores. Processor sharing's prior
  // (a busy Gloo thread per rank: slowdown 2) says the copies take the whole
  // transfer from the GEMM: no gain left.
  cm.slowdown = 2.0;
  absl::StatusOr<OverlapParts> prior = OverlapPartsFromCostModel(cm, Cpus(2, 2), s);
  ASSERT_TRUE(prior.ok()) << prior.status();
  EXPECT_DOUBLE_EQ(prior->transfer_cpu_fraction, 1.0);
  EXPECT_DOUBLE_EQ(prior->spare_cores_per_rank, 0.0);
  const double none = PredictOverlapTime(s.pattern, OverlapMethod::kNone, *prior);
  EXPECT_GE(PredictOverlapTime(s.pattern, OverlapMethod::kLooped, *prior), none * 0.95);
  // A measured fraction replaces the prior; spare cores absorb it.
  absl::StatusOr<OverlapParts> measured =
      OverlapPartsFromCostModel(cm, Cpus(2, 2), s, {.transfer_cpu_fraction = 0.3});
  ASSERT_TRUE(measured.ok());
  EXPECT_DOUBLE_EQ(measured->transfer_cpu_fraction, 0.3);
  EXPECT_LT(PredictOverlapTime(s.pattern, OverlapMethod::kLooped, *measured), none * 0.95);
  absl::StatusOr<OverlapParts> roomy = OverlapPartsFromCostModel(cm, Cpus(2, 8), s);
  ASSERT_TRUE(roomy.ok());
  EXPECT_DOUBLE_EQ(roomy->spare_cores_per_rank, 3.0);
  // GPUs: the SMs keep computing while the link moves the bytes.
  absl::StatusOr<OverlapParts> gpu = OverlapPartsFromCostModel(cm, Gpus(2), s);
  ASSERT_TRUE(gpu.ok());
  EXPECT_DOUBLE_EQ(gpu->transfer_cpu_fraction, 0.0);
}

TEST(OverlapModel, PartsComeFromTheCostModelAtChunkShapes) {
  LinearCostModel cm;
  const OverlapShape s = Shape(OverlapPattern::kMatMulReduceScatter, 1024);
  absl::StatusOr<OverlapParts> p = OverlapPartsFromCostModel(cm, Gpus(2), s, {.tile_rows = 128});
  ASSERT_TRUE(p.ok()) << p.status();
  // Per rank [m, k/2] @ [k/2, nout]; a chunk has m/2 rows.
  EXPECT_DOUBLE_EQ(p->gemm_s, cm.launch_s + 2.0 * 1024 * 512 * 1024 / cm.flops_per_s);
  EXPECT_DOUBLE_EQ(p->chunk_gemm_s, cm.launch_s + 2.0 * 512 * 512 * 1024 / cm.flops_per_s);
  EXPECT_DOUBLE_EQ(p->chunk_transfer_s, cm.alpha + 512 * 1024 * 4 * cm.beta);
  EXPECT_DOUBLE_EQ(p->half_transfer_s, cm.alpha + 256 * 1024 * 4 * cm.beta);
  EXPECT_GT(p->chunk_add_s, 0);
  EXPECT_EQ(p->tiles, 8);
  EXPECT_DOUBLE_EQ(p->tiles_transfer_s, 4 * (cm.alpha + 128 * 1024 * 4 * cm.beta));
  EXPECT_EQ(p->gemm_source, TimeSource::kMeasured);
  EXPECT_EQ(p->comm_source, TimeSource::kPrior);
}

TEST(OverlapModel, RejectsShapesItCannotSplit) {
  OverlapShape s = Shape(OverlapPattern::kAllGatherMatMul, 6);
  s.ranks = 4;
  EXPECT_THAT(std::string(CanOverlap(s, OverlapMethod::kLooped).message()),
              HasSubstr("m=6 is not a multiple of ranks=4"));
  s.m = 4;
  EXPECT_THAT(std::string(CanOverlap(s, OverlapMethod::kUnrolled).message()),
              HasSubstr("two halves"));
  s.m = 1024;
  EXPECT_THAT(std::string(CanOverlap(s, OverlapMethod::kFusedTiles, 100).message()),
              HasSubstr("tile_rows=100"));
  s.pattern = OverlapPattern::kMatMulReduceScatter;
  s.k = 1022;
  EXPECT_THAT(std::string(CanOverlap(s, OverlapMethod::kLooped).message()), HasSubstr("k=1022"));
  EXPECT_TRUE(ParseOverlapMethod("fused_tiles").ok());
  EXPECT_FALSE(ParseOverlapMethod("zigzag").ok());
  EXPECT_EQ(*ParseOverlapPattern("matmul_reducescatter"), OverlapPattern::kMatMulReduceScatter);
}

}  // namespace
}  // namespace braid::costmodel
