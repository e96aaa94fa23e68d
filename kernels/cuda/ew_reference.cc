#include "kernels/cuda/ew_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace braid::kernels::cuda {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752440f;     // 1 / sqrt(2)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2 / pi)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1 / sqrt(2 pi)
constexpr float kTwoOverSqrtPi = 1.12837916709551257390f;

// std::min(std::max(x, lo), hi): a NaN x stays NaN.
float Clamp(float x, float lo, float hi) { return std::min(std::max(x, lo), hi); }
float Sign(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f); }
float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

float GeluTanhGrad(float dy, float x) {  // at::gelu_backward(dy, x, "tanh")
  const float kappa = 0.044715f;
  const float x_sq = x * x;
  const float t = std::tanh(kSqrt2OverPi * (x + kappa * x_sq * x));
  const float left_derivative = 0.5f * (1.0f + t);
  const float right_derivative = 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kappa * x_sq);
  return dy * (left_derivative + right_derivative);
}

int64_t Product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

}  // namespace

float EwReferenceApply(EwCode code, float a, float b, float c, float p0, float p1) {
  switch (code) {
    case EwCode::kCopy:
      return a;
    case EwCode::kNeg:
      return -a;
    case EwCode::kAbs:
      return std::fabs(a);
    case EwCode::kRelu:
      return std::isnan(a) ? a : std::max(a, 0.0f);
    case EwCode::kLeakyRelu:
      return a > 0 ? a : p0 * a;
    case EwCode::kSqrt:
      return std::sqrt(a);
    case EwCode::kReciprocal:
      return 1.0f / a;
    case EwCode::kExp:
      return std::exp(a);
    case EwCode::kLog:
      return std::log(a);
    case EwCode::kTanh:
      return std::tanh(a);
    case EwCode::kSigmoid:
      return Sigmoid(a);
    case EwCode::kErf:
      return std::erf(a);
    case EwCode::kSoftplus:
      return a > 20 ? a : std::log1p(std::exp(a));
    case EwCode::kSin:
      return std::sin(a);
    case EwCode::kCos:
      return std::cos(a);
    case EwCode::kGelu:
      return 0.5f * a * (1.0f + std::erf(a * kSqrtHalf));
    case EwCode::kGeluTanh:
      return 0.5f * a * (1.0f + std::tanh(kSqrt2OverPi * (a + 0.044715f * a * a * a)));
    case EwCode::kElu:
      return a > 0 ? a : p0 * (std::exp(a) - 1.0f);
    case EwCode::kSelu:
      return 1.0507009873554805f * (a > 0 ? a : 1.6732632423543772f * (std::exp(a) - 1.0f));
    case EwCode::kHardSigmoid:
      return Clamp(p0 * a + p1, 0.0f, 1.0f);
    case EwCode::kHardSwish:
      return a * Clamp(a + 3.0f, 0.0f, 6.0f) / 6.0f;
    case EwCode::kSoftsign:
      return a / (1.0f + std::fabs(a));
    case EwCode::kFloor:
      return std::floor(a);
    case EwCode::kCeil:
      return std::ceil(a);
    case EwCode::kRound:
      return std::nearbyint(a);
    case EwCode::kSign:
      return Sign(a);
    case EwCode::kClip:
      return Clamp(a, p0, p1);
    case EwCode::kAffine:
      return p0 * a + p1;
    case EwCode::kAdd:
      return a + b;
    case EwCode::kSub:
      return a - b;
    case EwCode::kMul:
      return a * b;
    case EwCode::kDiv:
      return a / b;
    case EwCode::kMin:
      return std::isnan(a) || std::isnan(b) ? std::numeric_limits<float>::quiet_NaN() : std::min(a, b);
    case EwCode::kMax:
      return std::isnan(a) || std::isnan(b) ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b);
    case EwCode::kPow:
      return std::pow(a, b);
    case EwCode::kPRelu:
      return a > 0 ? a : b * a;
    case EwCode::kReluGrad:
      return b > 0 ? a : 0.0f;
    case EwCode::kLeakyReluGrad:
      return b > 0 ? a : p0 * a;
    case EwCode::kGeluGrad: {
      const float cdf = 0.5f * (1.0f + std::erf(b * kSqrtHalf));
      const float pdf = kInvSqrt2Pi * std::exp(-0.5f * b * b);
      return a * (cdf + b * pdf);
    }
    case EwCode::kGeluTanhGrad:
      return GeluTanhGrad(a, b);
    case EwCode::kSigmoidGrad:
      return a * b * (1.0f - b);
    case EwCode::kTanhGrad:
      return a * (1.0f - b * b);
    case EwCode::kEluGrad:
      return b > 0 ? a : a * p0 * std::exp(b);
    case EwCode::kSoftplusGrad:
      return b > 20 ? a : a * Sigmoid(b);
    case EwCode::kHardSigmoidGrad:
      return -3.0f < b && b < 3.0f ? a / 6.0f : 0.0f;
    case EwCode::kHardSwishGrad:
      return b < -3.0f ? 0.0f : (b <= 3.0f ? a * (b / 3.0f + 0.5f) : a);
    case EwCode::kSqrtGrad:
      return a / (2.0f * b);
    case EwCode::kReciprocalGrad:
      return -a * b * b;
    case EwCode::kAbsGrad:
      return a * Sign(b);
    case EwCode::kErfGrad:
      return a * kTwoOverSqrtPi * std::exp(-b * b);
    case EwCode::kSinGrad:
      return a * std::cos(b);
    case EwCode::kCosGrad:
      return -a * std::sin(b);
    case EwCode::kClipGrad:
      return p0 <= b && b <= p1 ? a : 0.0f;
    case EwCode::kDivGradB:
      return -(a * b) / c;
    case EwCode::kEqualMask:
      return b == c ? a : 0.0f;
    case EwCode::kPowGradBase:
      return a * c * std::pow(b, c - 1.0f);
    case EwCode::kPowGradExp:
      return a * std::pow(b, c) * std::log(b);
    case EwCode::kCount:
      break;
  }
  return std::numeric_limits<float>::quiet_NaN();
}

absl::StatusOr<std::vector<std::vector<float>>> EvaluateEwProgram(
    const EwProgram& p, const std::vector<std::vector<float>>& inputs) {
  RETURN_IF_ERROR(ValidateProgram(p));
  if (inputs.size() != p.inputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("program takes ", p.inputs.size(), " inputs, got ", inputs.size()));
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (static_cast<int64_t>(inputs[k].size()) != Product(p.inputs[k])) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", k, " has ", inputs[k].size(), " values, its shape ", Product(p.inputs[k])));
    }
  }
  const size_t rank = p.shape.size();
  // in_strides[k][d]: the step of input k along dim d of the iteration
  // space (0 where it is broadcast), from its own right-aligned shape.
  std::vector<std::vector<int64_t>> in_strides(inputs.size(), std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::vector<int64_t>& s = p.inputs[k];
    int64_t step = 1;
    for (size_t j = s.size(); j-- > 0;) {
      const size_t d = rank - s.size() + j;
      in_strides[k][d] = s[j] == 1 ? 0 : step;
      step *= s[j];
    }
  }
  std::vector<std::vector<int64_t>> out_strides(p.outputs.size(), std::vector<int64_t>(rank, 0));
  std::vector<std::vector<double>> sums(p.outputs.size());
  std::vector<std::vector<float>> out(p.outputs.size());
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const std::vector<int64_t> os = p.OutputShape(static_cast<int>(j));
    int64_t step = 1;
    for (size_t d = rank; d-- > 0;) {
      out_strides[j][d] = os[d] == 1 ? 0 : step;
      step *= os[d];
    }
    const ReduceKind r = p.outputs[j].reduce;
    out[j].assign(static_cast<size_t>(step),
                  r == ReduceKind::kMax ? -std::numeric_limits<float>::infinity() : 0.0f);
    if (r == ReduceKind::kSum || r == ReduceKind::kMean) sums[j].assign(static_cast<size_t>(step), 0.0);
  }

  const int64_t points = Product(p.shape);
  const size_t n_in = inputs.size();
  std::vector<float> reg(static_cast<size_t>(p.num_registers()));
  std::vector<int64_t> coord(rank, 0);
  for (int64_t i = 0; i < points; ++i) {
    int64_t rem = i;
    for (size_t d = rank; d-- > 0;) {
      coord[d] = rem % p.shape[d];
      rem /= p.shape[d];
    }
    auto offset = [&](const std::vector<int64_t>& strides) {
      int64_t o = 0;
      for (size_t d = 0; d < rank; ++d) o += coord[d] * strides[d];
      return static_cast<size_t>(o);
    };
    for (size_t k = 0; k < n_in; ++k) reg[k] = inputs[k][offset(in_strides[k])];
    for (size_t t = 0; t < p.instrs.size(); ++t) {
      const EwInstr& in = p.instrs[t];
      const int arity = EwArity(in.code);
      reg[n_in + t] = EwReferenceApply(in.code, reg[static_cast<size_t>(in.a)],
                                       arity >= 2 ? reg[static_cast<size_t>(in.b)] : 0.0f,
                                       arity >= 3 ? reg[static_cast<size_t>(in.c)] : 0.0f, in.p0, in.p1);
    }
    for (size_t j = 0; j < p.outputs.size(); ++j) {
      const float v = reg[static_cast<size_t>(p.outputs[j].reg)];
      switch (p.outputs[j].reduce) {
        case ReduceKind::kNone:
          out[j][static_cast<size_t>(i)] = v;
          break;
        case ReduceKind::kSum:
        case ReduceKind::kMean:
          sums[j][offset(out_strides[j])] += v;
          break;
        case ReduceKind::kMax: {
          float& m = out[j][offset(out_strides[j])];
          if (std::isnan(v) || v > m) m = std::isnan(m) ? m : v;
          break;
        }
      }
    }
  }
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const ReduceKind r = p.outputs[j].reduce;
    if (r != ReduceKind::kSum && r != ReduceKind::kMean) continue;
    const float count = static_cast<float>(points / static_cast<int64_t>(out[j].size()));
    for (size_t e = 0; e < out[j].size(); ++e) {
      const float s = static_cast<float>(sums[j][e]);
      out[j][e] = r == ReduceKind::kMean ? s / count : s;
    }
  }
  return out;
}

}  // namespace braid::kernels::cuda
