// The pointwise operations braid's fused CPU kernels compute: the
// instruction set of the elementwise tile interpreter
// (kernels/cpu/fused_elementwise.h, kernels/cuda) and the post-op vocabulary of the oneDNN
// primitives (kernels/cpu/onednn_fused.h). kernels/ is a leaf library: it
// knows nothing of graph::OpKind; worker/ maps graph ops to these codes, and
// tests there check every mapping against LibTorch's op-by-op result.
//
// Operands: a, b, c are the instruction's inputs (registers), p0 and p1 its
// float parameters. Formulas are those of the LibTorch calls braid's CPU
// profiler makes for the same ops (worker/cpu_kernels_*.cc), in float.
#ifndef BRAID_KERNELS_EW_CODE_H_
#define BRAID_KERNELS_EW_CODE_H_

#include <cstdint>
#include <string_view>

namespace braid::kernels {

enum class EwCode : uint8_t {
  // ---- unary: f(a) -------------------------------------------------------
  kCopy,          // a
  kNeg,           // -a
  kAbs,           // |a|
  kRelu,          // max(a, 0)                    (NaN stays NaN)
  kLeakyRelu,     // a > 0 ? a : p0 * a
  kSqrt,          // sqrt(a)
  kReciprocal,    // 1 / a
  kExp,           // exp(a)
  kLog,           // log(a)
  kTanh,          // tanh(a)
  kSigmoid,       // 1 / (1 + exp(-a))
  kErf,           // erf(a)
  kSoftplus,      // a > 20 ? a : log1p(exp(a))   (torch: beta 1, threshold 20)
  kSin,           // sin(a)
  kCos,           // cos(a)
  kGelu,          // 0.5 a (1 + erf(a / sqrt 2))
  kGeluTanh,      // 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)))
  kElu,           // a > 0 ? a : p0 (exp(a) - 1)
  kSelu,          // 1.0507009873554805 * (a > 0 ? a : 1.6732632423543772 (exp(a) - 1))
  kHardSigmoid,   // clamp(p0 a + p1, 0, 1)        (ONNX alpha, beta)
  kHardSwish,     // a * clamp(a + 3, 0, 6) / 6
  kSoftsign,      // a / (1 + |a|)
  kFloor,         // floor(a)
  kCeil,          // ceil(a)
  kRound,         // nearbyint(a): halves to even, as torch.round
  kSign,          // a > 0 ? 1 : (a < 0 ? -1 : 0)
  kClip,          // min(max(a, p0), p1)
  kAffine,        // p0 * a + p1                   (scalings: MeanGrad, ReduceMeanGrad)
  // ---- binary: f(a, b), b broadcast like a -------------------------------
  kAdd,           // a + b
  kSub,           // a - b
  kMul,           // a * b
  kDiv,           // a / b
  kMin,           // min(a, b)    (NaN propagates, as torch.minimum)
  kMax,           // max(a, b)    (NaN propagates, as torch.maximum)
  kPow,           // pow(a, b)
  kPRelu,         // a > 0 ? a : b * a
  // ---- gradients: a = dY, b = the saved forward tensor -------------------
  kReluGrad,      // b > 0 ? a : 0                 (at::threshold_backward(dy, y, 0))
  kLeakyReluGrad, // b > 0 ? a : p0 a
  kGeluGrad,      // a (Phi(b) + b phi(b)), Phi/phi the normal cdf/pdf
  kGeluTanhGrad,  // at::gelu_backward(dy, x, "tanh")
  kSigmoidGrad,   // a b (1 - b)                    (b = forward output)
  kTanhGrad,      // a (1 - b^2)                    (b = forward output)
  kEluGrad,       // b > 0 ? a : a p0 exp(b)        (b = forward input)
  kSoftplusGrad,  // b > 20 ? a : a * sigmoid(b)
  kHardSigmoidGrad,  // -3 < b < 3 ? a / 6 : 0     (torch's hardsigmoid_backward)
  kHardSwishGrad,    // b < -3 ? 0 : (b <= 3 ? a (b / 3 + 0.5) : a)
  kSqrtGrad,      // a / (2 b)                      (b = forward output)
  kReciprocalGrad,// -a b^2                         (b = forward output)
  kAbsGrad,       // a * sign(b)
  kErfGrad,       // a * 2/sqrt(pi) * exp(-b^2)
  kSinGrad,       // a cos(b)
  kCosGrad,       // -a sin(b)
  kClipGrad,      // p0 <= b <= p1 ? a : 0
  // ---- ternary: f(a, b, c) ------------------------------------------------
  kDivGradB,      // -(a * b) / c                   (DivGrad slot 1: dY, Y, B)
  kEqualMask,     // b == c ? a : 0                 (Min/MaxGrad: dY, X_i, Y)
  kPowGradBase,   // a * c * pow(b, c - 1)          (PowGrad slot 0: dY, A, B)
  kPowGradExp,    // a * pow(b, c) * log(b)         (PowGrad slot 1: dY, A, B)
  kCount,         // not an operation
};

// Number of register operands (1, 2 or 3).
int EwArity(EwCode code);
// "Relu", "ReluGrad", ... (for errors and kernel names).
std::string_view EwName(EwCode code);

}  // namespace braid::kernels

#endif  // BRAID_KERNELS_EW_CODE_H_
