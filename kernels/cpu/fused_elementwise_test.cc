#include "kernels/cpu/fused_elementwise.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/fused_elementwise_ops.h"
#include "kernels/cpu/fused_elementwise_test_util.h"
#include "kernels/ew_code.h"
#include "kernels/ew_program.h"

// Each instruction and the vector math alone; programs (broadcasting,
// chains, reductions, errors, the cache) are in
// fused_elementwise_program_test.cc.
namespace braid::kernels::cpu {
namespace {

using testing::AllClose;
using testing::MustCompile;
using testing::MustRun;
using testing::OpCase;
using testing::Reference;

// Every variant is tested on any machine: one the CPU lacks falls back to
// the widest it has, so the SSE2 baseline is always covered.
constexpr EwIsa kIsas[] = {EwIsa::kSse2, EwIsa::kAvx2, EwIsa::kAvx512};

// ---- every instruction against its LibTorch formula -----------------------

// Inputs in each op's domain: positive where log/sqrt/pow/division need it,
// the saved forward output's range for sigmoid/tanh gradients, equal pairs
// for EqualMask, halves for rounding; some extreme values for saturation.
std::vector<at::Tensor> OpInputs(EwCode code, const std::vector<int64_t>& shape) {
  const int arity = EwArity(code);
  auto randn = [&](double scale) { return at::randn(shape) * scale; };
  auto pos = [&](double lo, double hi) { return at::rand(shape) * (hi - lo) + lo; };
  std::vector<at::Tensor> in;
  switch (code) {
    case EwCode::kSqrt:
    case EwCode::kLog:
    case EwCode::kReciprocal:
      in = {pos(1e-3, 50)};
      break;
    case EwCode::kFloor:
    case EwCode::kCeil:
    case EwCode::kRound:
      in = {at::round(randn(10) * 2) / 2 + at::where(at::rand(shape) < 0.5, 0.0, 0.3)};
      break;
    case EwCode::kDiv:
      in = {randn(3), pos(0.1, 4) * at::where(at::rand(shape) < 0.5, -1.0, 1.0)};
      break;
    case EwCode::kPow:
      in = {pos(0.05, 4), randn(1.5)};
      break;
    case EwCode::kSigmoidGrad:
      in = {randn(2), at::sigmoid(randn(3))};
      break;
    case EwCode::kTanhGrad:
      in = {randn(2), at::tanh(randn(2))};
      break;
    case EwCode::kSqrtGrad:
    case EwCode::kReciprocalGrad:
      in = {randn(2), pos(0.1, 5)};
      break;
    case EwCode::kDivGradB:
      in = {randn(2), randn(2), pos(0.2, 3)};
      break;
    case EwCode::kEqualMask: {
      at::Tensor b = at::round(randn(2));
      in = {randn(2), b, at::where(at::rand(shape) < 0.5, b, at::round(randn(2)))};
      break;
    }
    case EwCode::kPowGradBase:
    case EwCode::kPowGradExp:
      in = {randn(2), pos(0.05, 4), randn(1.5)};
      break;
    case EwCode::kHardSigmoidGrad:
    case EwCode::kHardSwishGrad:
    case EwCode::kClipGrad:
      in = {randn(2), randn(4)};
      break;
    default:
      for (int i = 0; i < arity; ++i) in.push_back(randn(i == 0 ? 3 : 2));
      break;
  }
  // Saturation and sign edge cases in the first elements of unbounded-domain ops.
  static const float kEdges[] = {0.0f,  -0.0f,  1e-6f, -1e-6f, 25.0f, -25.0f, 60.0f, -60.0f,
                                 95.0f, -95.0f, 0.5f,  -0.5f,  3.0f,  -3.0f,  20.0f, 20.5f};
  const bool unbounded_first = in[0].min().item<float>() < 0;
  if (unbounded_first && code != EwCode::kFloor && code != EwCode::kCeil &&
      code != EwCode::kRound && in[0].numel() >= 16) {
    at::Tensor flat = in[0].view({-1});
    for (int i = 0; i < 16; ++i) flat[i] = kEdges[i];
    if (arity >= 2 && in[1].min().item<float>() < 0 && code != EwCode::kEqualMask) {
      at::Tensor fb = in[1].view({-1});
      for (int i = 0; i < 16; ++i) fb[i] = kEdges[15 - i];
    }
  }
  return in;
}

std::vector<OpCase> AllOpCases() {
  std::vector<OpCase> cases;
  for (int i = 0; i < static_cast<int>(EwCode::kCount); ++i) {
    OpCase c{static_cast<EwCode>(i)};
    switch (c.code) {
      case EwCode::kLeakyRelu:
      case EwCode::kLeakyReluGrad:
        c.p0 = 0.01f;
        break;
      case EwCode::kElu:
      case EwCode::kEluGrad:
        c.p0 = 1.3f;
        break;
      case EwCode::kHardSigmoid:
        c.p0 = 1.0f / 6.0f;
        c.p1 = 0.5f;
        break;
      case EwCode::kClip:
      case EwCode::kClipGrad:
        c.p0 = -1.5f;
        c.p1 = 2.0f;
        break;
      case EwCode::kAffine:
        c.p0 = 0.75f;
        c.p1 = -2.5f;
        break;
      default:
        break;
    }
    cases.push_back(c);
  }
  return cases;
}

TEST(FusedElementwiseTest, EveryInstructionMatchesLibTorch) {
  at::manual_seed(1);
  const std::vector<int64_t> shape = {37, 129};  // odd sizes: vector tails everywhere
  for (const OpCase& c : AllOpCases()) {
    SCOPED_TRACE(std::string(EwName(c.code)));
    const std::vector<at::Tensor> in = OpInputs(c.code, shape);
    EwProgram p;
    p.shape = shape;
    EwInstr instr{c.code};
    instr.p0 = c.p0;
    instr.p1 = c.p1;
    const int arity = EwArity(c.code);
    instr.a = 0;
    if (arity >= 2) instr.b = 1;
    if (arity >= 3) instr.c = 2;
    for (int i = 0; i < arity; ++i) p.inputs.push_back(shape);
    p.instrs = {instr};
    p.outputs = {{arity}};
    const at::Tensor want = Reference(c, in);
    for (EwIsa isa : kIsas) {
      for (int64_t tile : {int64_t{0}, int64_t{100}}) {  // 100: one-row chunks and tails
        SCOPED_TRACE(absl::StrCat(std::string(EwIsaName(isa)), " tile ", tile));
        auto k = MustCompile(p, isa, tile);
        ASSERT_NE(k, nullptr);
        std::vector<at::Tensor> out = MustRun(*k, in);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_TRUE(AllClose(out[0], want, c.tol, c.tol));
      }
    }
  }
}

// ---- the polynomial math against double-precision libm ---------------------

struct MathCase {
  EwCode code;
  double (*ref)(double);
  double lo, hi;
  bool log_spaced;  // sample |x| log-uniformly (both signs unless lo > 0)
  double rtol, atol;
};

TEST(FusedElementwiseTest, VectorMathIsAccurate) {
  const MathCase cases[] = {
      {EwCode::kExp, [](double x) { return std::exp(x); }, -87, 88, false, 4e-7, 0},
      {EwCode::kExp, [](double x) { return std::exp(x); }, -103, -87, false, 4e-7, 1e-44},
      {EwCode::kLog, [](double x) { return std::log(x); }, 1e-40, 1e38, true, 4e-7, 1e-12},
      {EwCode::kLog, [](double x) { return std::log(x); }, 0.5, 2, false, 4e-7, 1e-12},
      {EwCode::kTanh, [](double x) { return std::tanh(x); }, -12, 12, false, 4e-7, 1e-12},
      {EwCode::kTanh, [](double x) { return std::tanh(x); }, 1e-8, 1, true, 4e-7, 0},
      {EwCode::kSigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, -80, 80, false, 6e-7, 0},
      {EwCode::kErf, [](double x) { return std::erf(x); }, -6, 6, false, 3e-7, 1e-7},
      {EwCode::kErf, [](double x) { return std::erf(x); }, 1e-8, 1, true, 3e-7, 0},
      {EwCode::kSin, [](double x) { return std::sin(x); }, -8000, 8000, false, 0, 3e-7},
      {EwCode::kCos, [](double x) { return std::cos(x); }, -8000, 8000, false, 0, 3e-7},
      {EwCode::kSin, [](double x) { return std::sin(x); }, 1e4, 1e7, true, 0, 3e-7},  // libm path
      {EwCode::kCos, [](double x) { return std::cos(x); }, -1, 1, false, 0, 1.5e-7},
      {EwCode::kSoftplus, [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, -60, 30,
       false, 4e-7, 0},
  };
  std::mt19937 rng(7);
  for (const MathCase& c : cases) {
    SCOPED_TRACE(absl::StrCat(std::string(EwName(c.code)), " [", c.lo, ", ", c.hi, "]"));
    const int64_t n = 20000;
    at::Tensor x = at::empty({n});
    float* xp = x.data_ptr<float>();
    std::uniform_real_distribution<double> u(0, 1);
    for (int64_t i = 0; i < n; ++i) {
      double v =
          c.log_spaced ? c.lo * std::pow(c.hi / c.lo, u(rng)) : c.lo + (c.hi - c.lo) * u(rng);
      if (c.log_spaced && c.code != EwCode::kLog && (i & 1)) v = -v;
      xp[i] = static_cast<float>(v);
    }
    EwProgram p{{n}, {{n}}, {{c.code, 0}}, {{1}}};
    for (EwIsa isa : kIsas) {
      SCOPED_TRACE(EwIsaName(isa));
      auto k = MustCompile(p, isa);
      ASSERT_NE(k, nullptr);
      const at::Tensor y = MustRun(*k, {x})[0];
      const float* yp = y.data_ptr<float>();
      double worst = 0;
      int64_t worst_i = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double want = c.ref(xp[i]);
        const double excess = std::fabs(yp[i] - want) - (c.atol + c.rtol * std::fabs(want));
        if (excess > worst) {
          worst = excess;
          worst_i = i;
        }
      }
      EXPECT_EQ(worst, 0) << "x = " << xp[worst_i] << ": got " << yp[worst_i] << ", want "
                          << c.ref(xp[worst_i]);
    }
  }
  // Specials: NaN propagates, exp/log saturate as libm.
  const float nan = std::nanf("");
  const float inf = INFINITY;
  at::Tensor x = at::tensor({nan, inf, -inf, 0.0f, -1.0f, 89.0f, -104.0f, 1e-42f});
  struct Special {
    EwCode code;
    std::vector<float> want;
  };
  const Special specials[] = {
      {EwCode::kExp, {nan, inf, 0, 1, std::exp(-1.0f), inf, 0, 1}},
      {EwCode::kLog, {nan, inf, nan, -inf, nan, std::log(89.0f), nan, std::log(1e-42f)}},
      {EwCode::kTanh, {nan, 1, -1, 0, std::tanh(-1.0f), 1, -1, 1e-42f}},
      {EwCode::kErf, {nan, 1, -1, 0, std::erf(-1.0f), 1, -1, 0}},
      {EwCode::kSigmoid, {nan, 1, 0, 0.5f, 1 / (1 + std::exp(1.0f)), 1, 0, 0.5f}},
      {EwCode::kRelu, {nan, inf, 0, 0, 0, 89, 0, 1e-42f}},
  };
  for (const Special& s : specials) {
    SCOPED_TRACE(std::string(EwName(s.code)));
    EwProgram p{{8}, {{8}}, {{s.code, 0}}, {{1}}};
    for (EwIsa isa : kIsas) {
      auto k = MustCompile(p, isa);
      ASSERT_NE(k, nullptr);
      EXPECT_TRUE(AllClose(MustRun(*k, {x})[0], at::tensor(s.want), 3e-7, 1e-40)) << EwIsaName(isa);
    }
  }
}

}  // namespace
}  // namespace braid::kernels::cpu
