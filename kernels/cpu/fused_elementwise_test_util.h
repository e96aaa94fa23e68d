// Helpers shared by the fused elementwise tests: a tolerance comparison,
// compile/run wrappers, and a LibTorch reference for every EwCode and for
// whole programs (the op-by-op result the fused kernel must reproduce).
//
//   EXPECT_TRUE(AllClose(MustRun(*MustCompile(p), in)[0], ReferenceRun(p, in)[0], 1e-5, 1e-5));
#ifndef BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_TEST_UTIL_H_
#define BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_TEST_UTIL_H_

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_join.h"
#include "kernels/cpu/fused_elementwise.h"
#include "kernels/ew_code.h"
#include "kernels/ew_program.h"

namespace braid::kernels::cpu::testing {

struct OpCase {
  EwCode code;
  float p0 = 0, p1 = 0;
  double tol = 1e-5;
};

// Largest violation of |got - want| <= atol + rtol |want| (NaN matches NaN,
// inf matches the same inf), with the first offending element for the message.
inline ::testing::AssertionResult AllClose(const at::Tensor& got, const at::Tensor& want,
                                           double rtol, double atol) {
  if (got.sizes() != want.sizes()) {
    return ::testing::AssertionFailure() << "shape [" << absl::StrJoin(got.sizes(), ",") << "] != ["
                                         << absl::StrJoin(want.sizes(), ",") << "]";
  }
  const at::Tensor g = got.contiguous().to(at::kDouble);
  const at::Tensor w = want.contiguous().to(at::kDouble);
  const double* gp = g.data_ptr<double>();
  const double* wp = w.data_ptr<double>();
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (gp[i] == wp[i] || (std::isnan(gp[i]) && std::isnan(wp[i]))) continue;
    if (std::fabs(gp[i] - wp[i]) <= atol + rtol * std::fabs(wp[i])) continue;
    return ::testing::AssertionFailure()
           << "element " << i << " of " << g.numel() << ": got " << gp[i] << ", want " << wp[i];
  }
  return ::testing::AssertionSuccess();
}

inline std::shared_ptr<const FusedElementwiseKernel> MustCompile(const EwProgram& p,
                                                                 EwIsa isa = EwIsa::kAuto,
                                                                 int64_t tile = 0) {
  auto k = FusedElementwiseKernel::Compile(p, {tile, isa});
  EXPECT_TRUE(k.ok()) << k.status();
  return k.ok() ? *k : nullptr;
}

inline std::vector<at::Tensor> MustRun(const FusedElementwiseKernel& k,
                                       const std::vector<at::Tensor>& in) {
  auto out = k.Run(in);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<at::Tensor>{};
}

// The LibTorch formula of one instruction (the calls ew_code.h names).
inline at::Tensor Reference(const OpCase& c, const std::vector<at::Tensor>& in) {
  const at::Tensor& a = in[0];
  const at::Tensor b = in.size() > 1 ? in[1] : at::Tensor();
  const at::Tensor cc = in.size() > 2 ? in[2] : at::Tensor();
  const double p0 = c.p0, p1 = c.p1;
  const double k2InvSqrtPi = 2.0 / std::sqrt(M_PI);
  switch (c.code) {
    case EwCode::kCopy: return a.clone();
    case EwCode::kNeg: return at::neg(a);
    case EwCode::kAbs: return at::abs(a);
    case EwCode::kRelu: return at::relu(a);
    case EwCode::kLeakyRelu: return at::leaky_relu(a, p0);
    case EwCode::kSqrt: return at::sqrt(a);
    case EwCode::kReciprocal: return at::reciprocal(a);
    case EwCode::kExp: return at::exp(a);
    case EwCode::kLog: return at::log(a);
    case EwCode::kTanh: return at::tanh(a);
    case EwCode::kSigmoid: return at::sigmoid(a);
    case EwCode::kErf: return at::erf(a);
    case EwCode::kSoftplus: return at::softplus(a, 1, 20);
    case EwCode::kSin: return at::sin(a);
    case EwCode::kCos: return at::cos(a);
    case EwCode::kGelu: return at::gelu(a, "none");
    case EwCode::kGeluTanh: return at::gelu(a, "tanh");
    case EwCode::kElu: return at::elu(a, p0);
    case EwCode::kSelu: return at::selu(a);
    case EwCode::kHardSigmoid: return at::hardsigmoid(a);  // p0 = 1/6, p1 = 1/2
    case EwCode::kHardSwish: return at::hardswish(a);
    case EwCode::kSoftsign: return a / (at::abs(a) + 1);
    case EwCode::kFloor: return at::floor(a);
    case EwCode::kCeil: return at::ceil(a);
    case EwCode::kRound: return at::round(a);
    case EwCode::kSign: return at::sign(a);
    case EwCode::kClip: return at::clamp(a, p0, p1);
    case EwCode::kAffine: return a * p0 + p1;
    case EwCode::kAdd: return at::add(a, b);
    case EwCode::kSub: return at::sub(a, b);
    case EwCode::kMul: return at::mul(a, b);
    case EwCode::kDiv: return at::div(a, b);
    case EwCode::kMin: return at::minimum(a, b);
    case EwCode::kMax: return at::maximum(a, b);
    case EwCode::kPow: return at::pow(a, b);
    case EwCode::kPRelu: return at::where(a > 0, a, b * a);
    case EwCode::kReluGrad: return at::threshold_backward(a, b, 0);
    case EwCode::kLeakyReluGrad: return at::leaky_relu_backward(a, b, p0, false);
    case EwCode::kGeluGrad: return at::gelu_backward(a, b, "none");
    case EwCode::kGeluTanhGrad: return at::gelu_backward(a, b, "tanh");
    case EwCode::kSigmoidGrad: return at::sigmoid_backward(a, b);
    case EwCode::kTanhGrad: return at::tanh_backward(a, b);
    case EwCode::kEluGrad: return at::elu_backward(a, p0, 1, 1, false, b);
    case EwCode::kSoftplusGrad: return at::softplus_backward(a, b, 1, 20);
    case EwCode::kHardSigmoidGrad: return at::hardsigmoid_backward(a, b);
    case EwCode::kHardSwishGrad: return at::hardswish_backward(a, b);
    case EwCode::kSqrtGrad: return a / (2 * b);
    case EwCode::kReciprocalGrad: return -a * b * b;
    case EwCode::kAbsGrad: return a * at::sign(b);
    case EwCode::kErfGrad: return a * k2InvSqrtPi * at::exp(-b * b);
    case EwCode::kSinGrad: return a * at::cos(b);
    case EwCode::kCosGrad: return -a * at::sin(b);
    case EwCode::kClipGrad: return at::where((b >= p0).logical_and(b <= p1), a, at::zeros_like(a));
    case EwCode::kDivGradB: return -(a * b) / cc;
    case EwCode::kEqualMask: return at::where(b == cc, a, at::zeros_like(a));
    case EwCode::kPowGradBase: return a * cc * at::pow(b, cc - 1);
    case EwCode::kPowGradExp: return a * at::pow(b, cc) * at::log(b);
    case EwCode::kCount: break;
  }
  return at::Tensor();
}

// A whole program op by op in LibTorch: operands expanded to the iteration
// space, outputs reduced with at::sum / at::mean / at::amax (keepdim).
inline std::vector<at::Tensor> ReferenceRun(const EwProgram& p,
                                            const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> reg;
  for (const at::Tensor& t : inputs) reg.push_back(t.expand(p.shape).contiguous());
  for (const EwInstr& in : p.instrs) {
    std::vector<at::Tensor> ops;
    for (int r : {in.a, in.b, in.c}) {
      if (r >= 0) ops.push_back(reg[static_cast<size_t>(r)]);
    }
    reg.push_back(Reference(OpCase{in.code, in.p0, in.p1}, ops));
  }
  std::vector<at::Tensor> out;
  for (const EwOutput& o : p.outputs) {
    const at::Tensor& v = reg[static_cast<size_t>(o.reg)];
    std::vector<int64_t> axes(o.axes.begin(), o.axes.end());
    switch (o.reduce) {
      case ReduceKind::kNone: out.push_back(v); break;
      case ReduceKind::kSum: out.push_back(at::sum(v, axes, /*keepdim=*/true)); break;
      case ReduceKind::kMean: out.push_back(at::mean(v, axes, /*keepdim=*/true)); break;
      case ReduceKind::kMax: out.push_back(at::amax(v, axes, /*keepdim=*/true)); break;
    }
  }
  return out;
}

}  // namespace braid::kernels::cpu::testing

#endif  // BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_TEST_UTIL_H_
