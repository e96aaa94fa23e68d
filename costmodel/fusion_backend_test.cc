#include "costmodel/fusion_backend.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
namespace {

using graph::Graph;
using graph::OpId;
using ::testing::HasSubstr;

Graph Parse(const std::string& text) {
  absl::StatusOr<Graph> g = graph::ParseText(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

OpId Op(const Graph& g, const std::string& name) {
  for (OpId o = 0; o < g.num_ops(); ++o) {
    if (g.op(o).name == name) return o;
  }
  ADD_FAILURE() << "no op " << name;
  return 0;
}

std::vector<OpId> Ops(const Graph& g, std::initializer_list<const char*> names) {
  std::vector<OpId> out;
  for (const char* n : names) out.push_back(Op(g, n));
  return out;
}

// A linear layer with bias, residual and ReLU; its backward through ReLU
// with the bias gradient; a normalization and a reduction.
constexpr char kLayer[] = R"(
graph "layer"
tensor x f32[64,128] input
tensor w f32[128,256] parameter
tensor bias f32[256] parameter
tensor res f32[64,256] input
tensor y f32[64,256] activation
tensor yb f32[64,256] activation
tensor yr f32[64,256] activation
tensor a f32[64,256] activation
tensor t f32[64,256] activation
tensor dy f32[64,128] input
tensor wt f32[256,128] parameter
tensor g f32[64,256] activation
tensor da f32[64,256] activation
tensor db f32[256] gradient of=bias
tensor s f32[64,1] activation
tensor c f32[64,256] activation
tensor e f32[64,256] activation
op mm MatMul (x, w) -> (y)
op addb Add (y, bias) -> (yb)
op addr Add (yb, res) -> (yr)
op relu Relu (yr) -> (a)
op tanh Tanh (a) -> (t)
op mmg MatMul (dy, wt) -> (g) phase=backward
op rg ReluGrad (g, a) -> (da) phase=backward
op bg ReduceSum (da) -> (db) {axes=[0], keepdims=0} phase=backward
op rs ReduceSum (t) -> (s) {axes=[1], keepdims=1}
op sub Sub (t, s) -> (c)
op exp Exp (c) -> (e)
output e
output da
output db
)";

TEST(FusionBackendTest, SingleOpsAreAlwaysKernels) {
  Graph g = Parse(kLayer);
  for (OpId o = 0; o < g.num_ops(); ++o) {
    std::vector<OpId> one = {o};
    EXPECT_TRUE(GpuFusionBackend().CanImplement(g, one).ok());
    EXPECT_TRUE(CpuFusionBackend().CanImplement(g, one).ok());
  }
}

TEST(FusionBackendTest, GpuGemmEpiloguesFollowCublasLt) {
  Graph g = Parse(kLayer);
  const FusionBackend& b = GpuFusionBackend();
  // BIAS + beta*C residual + RELU.
  EXPECT_TRUE(b.CanImplement(g, Ops(g, {"mm", "addb", "addr", "relu"})).ok());
  // DRELU_BGRAD: the GEMM result as dY, then the bias gradient.
  EXPECT_TRUE(b.CanImplement(g, Ops(g, {"mmg", "rg", "bg"})).ok());
  // Tanh after the ReLU is no cuBLASLt epilogue.
  absl::Status s = b.CanImplement(g, Ops(g, {"mm", "addb", "addr", "relu", "tanh"}));
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a cuBLASLt epilogue"));
  // ReluGrad's saved input as a prologue of the GEMM: no.
  s = b.CanImplement(g, Ops(g, {"relu", "mmg", "rg"}));
  EXPECT_FALSE(s.ok());
  // Two library calls: no.
  s = b.CanImplement(g, Ops(g, {"mm", "addb", "addr", "relu", "rg", "mmg"}));
  EXPECT_THAT(std::string(s.message()), HasSubstr("cannot share a kernel"));
}

TEST(FusionBackendTest, GpuReductionsNeedNoGridBarrier) {
  Graph g = Parse(kLayer);
  const FusionBackend& b = GpuFusionBackend();
  // Input fusion: elementwise producers into a reduction.
  EXPECT_TRUE(b.CanImplement(g, Ops(g, {"relu", "tanh", "rs"})).ok());
  // t - rowsum(t) uses the reduction at the full shape: a barrier.
  absl::Status s = b.CanImplement(g, Ops(g, {"tanh", "rs", "sub"}));
  EXPECT_THAT(std::string(s.message()), HasSubstr("grid-wide barrier"));
  // Loop fusion of elementwise ops.
  EXPECT_TRUE(b.CanImplement(g, Ops(g, {"sub", "exp"})).ok());
}

TEST(FusionBackendTest, GpuRefusesPoolingAndNormalizationAsConvPrologue) {
  Graph g = Parse(R"(
graph "conv"
tensor x f32[8,16,32,32] input
tensor scale f32[16] parameter
tensor bnb f32[16] parameter
tensor mean f32[16] input
tensor var f32[16] input
tensor n f32[8,16,32,32] activation
tensor r f32[8,16,32,32] activation
tensor p f32[8,16,16,16] activation
tensor w f32[16,16,3,3] parameter
tensor cb f32[16,1,1] parameter
tensor c f32[8,16,16,16] activation
tensor cz f32[8,16,16,16] activation
tensor cr f32[8,16,16,16] activation
op bn BatchNormalization (x, scale, bnb, mean, var) -> (n)
op relu Relu (n) -> (r)
op pool MaxPool (r) -> (p) {kernel_shape=[2,2], strides=[2,2]}
op conv Conv (p, w) -> (c) {pads=[1,1,1,1]}
op addb Add (c, cb) -> (cz)
op crelu Relu (cz) -> (cr)
output cr
)");
  const FusionBackend& b = GpuFusionBackend();
  EXPECT_FALSE(b.CanImplement(g, Ops(g, {"bn", "relu", "pool", "conv"})).ok());
  EXPECT_FALSE(b.CanImplement(g, Ops(g, {"pool", "conv"})).ok());
  // cuDNN's fused conv + bias + ReLU.
  EXPECT_TRUE(b.CanImplement(g, Ops(g, {"conv", "addb", "crelu"})).ok());
  // BatchNorm's apply with its ReLU (XLA's expansion, cuDNN BN+activation).
  EXPECT_TRUE(b.CanImplement(g, Ops(g, {"bn", "relu"})).ok());
  // On CPU: oneDNN conv with bias and ReLU post-ops; BatchNorm is not in
  // braid's CPU executor.
  EXPECT_TRUE(CpuFusionBackend().CanImplement(g, Ops(g, {"conv", "addb", "crelu"})).ok());
  EXPECT_FALSE(CpuFusionBackend().CanImplement(g, Ops(g, {"bn", "relu"})).ok());
}

TEST(FusionBackendTest, CpuRulesAreTheFusedExecutors) {
  Graph g = Parse(kLayer);
  const FusionBackend& b = CpuFusionBackend();
  // oneDNN matmul with binary add (per-channel bias, full residual) and relu post-ops.
  EXPECT_TRUE(b.CanImplement(g, Ops(g, {"mm", "addb", "addr", "relu"})).ok());
  // relu's result is read by its gradient outside: oneDNN writes only the
  // chain's end, so tanh cannot follow it in the primitive.
  EXPECT_FALSE(b.CanImplement(g, Ops(g, {"mm", "addb", "addr", "relu", "tanh"})).ok());
  // ReluGrad is no oneDNN post-op.
  EXPECT_THAT(std::string(b.CanImplement(g, Ops(g, {"mmg", "rg"})).message()), HasSubstr("post-op"));
  // Elementwise chain with a reduction sink (the bias-gradient pattern).
  EXPECT_TRUE(b.CanImplement(g, Ops(g, {"rg", "bg"})).ok());
  // A reduction's result used inside the kernel: no.
  EXPECT_THAT(std::string(b.CanImplement(g, Ops(g, {"tanh", "rs", "sub"})).message()),
              HasSubstr("reductions end a fused kernel"));
  EXPECT_TRUE(b.CanImplement(g, Ops(g, {"relu", "tanh"})).ok());
  // An intermediate the epilogue chain would have to write out: y read
  // outside {mm, addb}? no, but {mm, addb, addr} leaves yr's reader outside:
  // fine, the chain end escapes; an inner value read outside is refused.
  Graph h = Parse(R"(
graph "aux"
tensor x f32[4,8] input
tensor w f32[8,8] parameter
tensor y f32[4,8] activation
tensor z f32[4,8] activation
tensor u f32[4,8] activation
op mm MatMul (x, w) -> (y)
op relu Relu (y) -> (z)
op neg Neg (y) -> (u)
output z
output u
)");
  EXPECT_THAT(std::string(b.CanImplement(h, Ops(h, {"mm", "relu"})).message()),
              HasSubstr("writes only its final result"));
  // The GPU backend writes the pre-activation as the _AUX output.
  EXPECT_TRUE(GpuFusionBackend().CanImplement(h, Ops(h, {"mm", "relu"})).ok());
}

TEST(FusionBackendTest, BackendForPicksTheDeviceKind) {
  absl::StatusOr<ClusterSpec> cpu = ClusterPreset("cpu-local");
  absl::StatusOr<ClusterSpec> gpu = ClusterPreset("dgx-h100");
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  EXPECT_EQ(BackendFor(*cpu).name(), "cpu-braid");
  EXPECT_EQ(BackendFor(*gpu).name(), "gpu-xla");
}

TEST(FusionBackendTest, OldGpusCannotHaveFusedOpsMeasured) {
  for (const char* preset : {"disco-a", "summit"}) {
    absl::StatusOr<ClusterSpec> c = ClusterPreset(preset);
    ASSERT_TRUE(c.ok());
    std::optional<std::string> gap = FusedMeasurementGap(*c);
    ASSERT_TRUE(gap.has_value()) << preset;
    EXPECT_THAT(*gap, HasSubstr("compute capability 7.5"));
  }
  for (const char* preset : {"disco-b", "dgx-h100", "cpu-local"}) {
    absl::StatusOr<ClusterSpec> c = ClusterPreset(preset);
    ASSERT_TRUE(c.ok());
    EXPECT_FALSE(FusedMeasurementGap(*c).has_value()) << preset;
  }
}

}  // namespace
}  // namespace braid::costmodel
