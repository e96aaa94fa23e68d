// The host reference the GPU kernels are checked against, checked itself:
// known values, every gradient code against finite differences of its
// forward code, and broadcasting/reductions worked out by hand.
#include "kernels/cuda/ew_reference.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace braid::kernels::cuda {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float Apply(EwCode code, float a, float b = 0, float c = 0, float p0 = 0, float p1 = 0) {
  return EwReferenceApply(code, a, b, c, p0, p1);
}

TEST(EwReferenceTest, KnownValues) {
  EXPECT_EQ(Apply(EwCode::kRelu, -1.5f), 0.0f);
  EXPECT_TRUE(std::isnan(Apply(EwCode::kRelu, kNaN)));
  EXPECT_FLOAT_EQ(Apply(EwCode::kLeakyRelu, -2.0f, 0, 0, 0.01f), -0.02f);
  EXPECT_FLOAT_EQ(Apply(EwCode::kSigmoid, 0.0f), 0.5f);
  EXPECT_FLOAT_EQ(Apply(EwCode::kSoftplus, 0.0f), std::log(2.0f));
  EXPECT_EQ(Apply(EwCode::kSoftplus, 30.0f), 30.0f);
  EXPECT_NEAR(Apply(EwCode::kGelu, 1.0f), 0.8413447f, 1e-6);
  EXPECT_NEAR(Apply(EwCode::kGeluTanh, 1.0f), 0.8411920f, 1e-6);
  EXPECT_NEAR(Apply(EwCode::kSelu, -1.0f), -1.1113307f, 1e-6);
  EXPECT_FLOAT_EQ(Apply(EwCode::kHardSigmoid, 1.0f, 0, 0, 0.2f, 0.5f), 0.7f);
  EXPECT_FLOAT_EQ(Apply(EwCode::kHardSwish, 1.0f), 4.0f / 6.0f);
  EXPECT_EQ(Apply(EwCode::kRound, 2.5f), 2.0f);  // halves to even
  EXPECT_EQ(Apply(EwCode::kRound, 3.5f), 4.0f);
  EXPECT_EQ(Apply(EwCode::kSign, 0.0f), 0.0f);
  EXPECT_EQ(Apply(EwCode::kSign, -3.0f), -1.0f);
  EXPECT_TRUE(std::isnan(Apply(EwCode::kClip, kNaN, 0, 0, -1, 1)));  // as torch.clamp
  EXPECT_EQ(Apply(EwCode::kClip, 5.0f, 0, 0, -1, 1), 1.0f);
  EXPECT_TRUE(std::isnan(Apply(EwCode::kMin, 1.0f, kNaN)));
  EXPECT_TRUE(std::isnan(Apply(EwCode::kMax, kNaN, 1.0f)));
  EXPECT_FLOAT_EQ(Apply(EwCode::kAffine, 2.0f, 0, 0, 3.0f, -1.0f), 5.0f);
  EXPECT_NEAR(Apply(EwCode::kGeluGrad, 1.0f, 1.0f), 0.8413447f + 0.2419707f, 1e-6);
  EXPECT_FLOAT_EQ(Apply(EwCode::kGeluTanhGrad, 1.0f, 0.0f), 0.5f);
  EXPECT_EQ(Apply(EwCode::kEqualMask, 7.0f, 2.0f, 2.0f), 7.0f);
  EXPECT_EQ(Apply(EwCode::kEqualMask, 7.0f, 2.0f, 3.0f), 0.0f);
  EXPECT_FLOAT_EQ(Apply(EwCode::kDivGradB, 2.0f, 3.0f, 4.0f), -1.5f);
}

// A gradient code g(dy = 1, saved) against the central difference of its
// forward code f at x, where `saved` is x or f(x) as ew_code.h says.
struct GradCase {
  EwCode grad, fwd;
  bool saves_output;  // b = f(x) rather than x
  float p0 = 0, p1 = 0;
};

TEST(EwReferenceTest, GradientsMatchFiniteDifferences) {
  const GradCase cases[] = {
      {EwCode::kReluGrad, EwCode::kRelu, false},
      {EwCode::kLeakyReluGrad, EwCode::kLeakyRelu, false, 0.01f},
      {EwCode::kGeluGrad, EwCode::kGelu, false},
      {EwCode::kGeluTanhGrad, EwCode::kGeluTanh, false},
      {EwCode::kSigmoidGrad, EwCode::kSigmoid, true},
      {EwCode::kTanhGrad, EwCode::kTanh, true},
      {EwCode::kEluGrad, EwCode::kElu, false, 1.0f},
      {EwCode::kSoftplusGrad, EwCode::kSoftplus, false},
      {EwCode::kHardSigmoidGrad, EwCode::kHardSigmoid, false, 1.0f / 6.0f, 0.5f},
      {EwCode::kHardSwishGrad, EwCode::kHardSwish, false},
      {EwCode::kSqrtGrad, EwCode::kSqrt, true},
      {EwCode::kReciprocalGrad, EwCode::kReciprocal, true},
      {EwCode::kAbsGrad, EwCode::kAbs, false},
      {EwCode::kErfGrad, EwCode::kErf, false},
      {EwCode::kSinGrad, EwCode::kSin, false},
      {EwCode::kCosGrad, EwCode::kCos, false},
      {EwCode::kClipGrad, EwCode::kClip, false, -0.75f, 1.25f},
  };
  const float xs[] = {-2.3f, -1.1f, -0.4f, 0.3f, 0.9f, 1.7f, 2.6f};
  for (const GradCase& gc : cases) {
    for (float x : xs) {
      if (gc.fwd == EwCode::kSqrt || gc.fwd == EwCode::kReciprocal) x = std::fabs(x);
      const float h = 1e-2f;
      const float f_plus = Apply(gc.fwd, x + h, 0, 0, gc.p0, gc.p1);
      const float f_minus = Apply(gc.fwd, x - h, 0, 0, gc.p0, gc.p1);
      const float numeric = (f_plus - f_minus) / (2 * h);
      const float saved = gc.saves_output ? Apply(gc.fwd, x, 0, 0, gc.p0, gc.p1) : x;
      const float analytic = Apply(gc.grad, 1.0f, saved, 0, gc.p0, gc.p1);
      EXPECT_NEAR(analytic, numeric, 2e-3f * (1 + std::fabs(numeric))) << EwName(gc.grad) << " at " << x;
    }
  }
}

TEST(EwReferenceTest, TernaryGradientsMatchFiniteDifferences) {
  const float h = 1e-3f;
  for (float base : {0.6f, 1.3f, 2.2f}) {
    for (float e : {-1.5f, 0.5f, 2.0f}) {
      const float d_base = (std::pow(base + h, e) - std::pow(base - h, e)) / (2 * h);
      EXPECT_NEAR(Apply(EwCode::kPowGradBase, 1.0f, base, e), d_base, 2e-3f * (1 + std::fabs(d_base)));
      const float d_exp = (std::pow(base, e + h) - std::pow(base, e - h)) / (2 * h);
      EXPECT_NEAR(Apply(EwCode::kPowGradExp, 1.0f, base, e), d_exp, 2e-3f * (1 + std::fabs(d_exp)));
      // DivGradB(dY, Y = A / B, B) = d(A / B) / dB with A = base, B = e.
      const float d_div = (base / (e + h) - base / (e - h)) / (2 * h);
      EXPECT_NEAR(Apply(EwCode::kDivGradB, 1.0f, base / e, e), d_div, 2e-3f * (1 + std::fabs(d_div)));
    }
  }
}

TEST(EwReferenceTest, BroadcastingAndReductions) {
  EwProgram p;
  p.shape = {2, 3};
  p.inputs = {{2, 3}, {3}, {2, 1}};
  p.instrs = {{EwCode::kAdd, 0, 1}, {EwCode::kMul, 3, 2}};  // r4 = (x + row) * col
  p.outputs = {{4}, {4, ReduceKind::kSum, {0}}, {4, ReduceKind::kMean, {1}}, {4, ReduceKind::kMax, {0, 1}}};
  const std::vector<std::vector<float>> in = {{1, 2, 3, 4, 5, 6}, {10, 20, 30}, {1, -1}};
  absl::StatusOr<std::vector<std::vector<float>>> out = EvaluateEwProgram(p, in);
  ASSERT_TRUE(out.ok()) << out.status();
  // Rows: (11, 22, 33) * 1 and (14, 25, 36) * -1.
  EXPECT_EQ((*out)[0], (std::vector<float>{11, 22, 33, -14, -25, -36}));
  EXPECT_EQ((*out)[1], (std::vector<float>{-3, -3, -3}));
  EXPECT_EQ((*out)[2], (std::vector<float>{22, -25}));
  EXPECT_EQ((*out)[3], (std::vector<float>{33}));
}

TEST(EwReferenceTest, MaxPropagatesNaN) {
  EwProgram p;
  p.shape = {4};
  p.inputs = {{4}};
  p.instrs = {{EwCode::kLog, 0}};
  p.outputs = {{1, ReduceKind::kMax, {0}}};
  absl::StatusOr<std::vector<std::vector<float>>> out = EvaluateEwProgram(p, {{1, 2, -1, 3}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(std::isnan((*out)[0][0]));
}

TEST(EwReferenceTest, RejectsBadInputs) {
  EwProgram p;
  p.shape = {4};
  p.inputs = {{4}};
  p.instrs = {{EwCode::kExp, 0}};
  p.outputs = {{1}};
  EXPECT_EQ(EvaluateEwProgram(p, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EvaluateEwProgram(p, {{1, 2, 3}}).status().code(), absl::StatusCode::kInvalidArgument);
  p.instrs = {{EwCode::kExp, 5}};
  EXPECT_EQ(EvaluateEwProgram(p, {{1, 2, 3, 4}}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::kernels::cuda
