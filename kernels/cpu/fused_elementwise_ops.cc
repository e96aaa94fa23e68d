#include "kernels/cpu/fused_elementwise_ops.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>

// no-trapping-math lets GCC if-convert the float compares of ?: selects,
// without which no loop with a select vectorizes ("control flow in loop").
// Neither changes a result, only FP exception flags, which braid never
// reads. After the system includes, so that it applies to this file's (and
// the math header's) functions alone. (GCC 12 ignores a per-function
// no-math-errno, so sqrt has its own loop below.)
#pragma GCC optimize("no-trapping-math")

#include "kernels/cpu/fused_elementwise_math.h"  // after the pragma, see above

namespace braid::kernels::cpu {
namespace {

using ew_math::Erf;
using ew_math::Exp;
using ew_math::Expm1;
using ew_math::IsNan;
using ew_math::kSinCosMaxArg;
using ew_math::Log;
using ew_math::Log1p;
using ew_math::Madd;
using ew_math::RoundEven;
using ew_math::Sigmoid;
using ew_math::SinCos;
using ew_math::Tanh;

// One struct per EwCode: Apply<F>(a, b, c, p0, p1) is the formula of
// ew_code.h (and of the LibTorch call named there), evaluated in float.
#define BRAID_EW_OP(Name, arity, expr)                                                      \
  struct Name {                                                                             \
    static constexpr int kArity = arity;                                                    \
    template <bool F>                                                                       \
    BRAID_EW_INLINE static float Apply([[maybe_unused]] float a, [[maybe_unused]] float b,  \
                                       [[maybe_unused]] float c, [[maybe_unused]] float p0, \
                                       [[maybe_unused]] float p1) {                         \
      return (expr);                                                                        \
    }                                                                                       \
  };

constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;    // 1 / sqrt(2 pi)
constexpr float k2InvSqrtPi = 1.12837916709551257390f;    // 2 / sqrt(pi)
constexpr float kGeluTanhBeta = 0.79788456080286535588f;  // sqrt(2 / pi)
constexpr float kGeluTanhKappa = 0.044715f;
constexpr float kSeluScale = 1.0507009873554805f;
constexpr float kSeluAlpha = 1.6732632423543772f;

BRAID_EW_INLINE float Sign(float a) { return a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : 0.0f); }
// min(max(x, lo), hi), NaN propagating as torch.clamp does.
BRAID_EW_INLINE float Clamp(float x, float lo, float hi) {
  const float m = x < lo ? lo : x;
  return IsNan(x) ? x : (m > hi ? hi : m);
}

// torch.gelu(x, approximate="tanh") and its derivative, as ATen writes them.
template <bool F>
BRAID_EW_INLINE float GeluTanh(float x) {
  const float inner = kGeluTanhBeta * (x + kGeluTanhKappa * (x * x * x));
  return 0.5f * x * (1.0f + Tanh<F>(inner));
}
template <bool F>
BRAID_EW_INLINE float GeluTanhGrad(float dy, float x) {
  const float x_sq = x * x;
  const float inner = kGeluTanhBeta * (x + kGeluTanhKappa * x_sq * x);
  const float t = Tanh<F>(inner);
  const float left_derivative = 0.5f * (1.0f + t);
  const float right_derivative =
      0.5f * x * (1.0f - t * t) * kGeluTanhBeta * (1.0f + 3.0f * kGeluTanhKappa * x_sq);
  return dy * (left_derivative + right_derivative);
}
template <bool F>
BRAID_EW_INLINE float GeluGrad(float dy, float x) {
  const float cdf = 0.5f * (1.0f + Erf<F>(x * kSqrt1_2));
  const float pdf = kInvSqrt2Pi * Exp<F>(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}
BRAID_EW_INLINE float MinNan(float a, float b) { return IsNan(a) ? a : (a < b ? a : b); }
BRAID_EW_INLINE float MaxNan(float a, float b) { return IsNan(a) ? a : (a > b ? a : b); }

// Unformatted: clang-format reads `a * b` in a macro argument as a pointer.
// clang-format off
// ---- unary ----------------------------------------------------------------
BRAID_EW_OP(OpCopy, 1, a)
BRAID_EW_OP(OpNeg, 1, -a)
BRAID_EW_OP(OpAbs, 1, __builtin_fabsf(a))
BRAID_EW_OP(OpRelu, 1, a < 0.0f ? 0.0f : a)
BRAID_EW_OP(OpLeakyRelu, 1, a > 0.0f ? a : p0 * a)
BRAID_EW_OP(OpSqrt, 1, __builtin_sqrtf(a))
BRAID_EW_OP(OpReciprocal, 1, 1.0f / a)
BRAID_EW_OP(OpExp, 1, Exp<F>(a))
BRAID_EW_OP(OpLog, 1, Log<F>(a))
BRAID_EW_OP(OpTanh, 1, Tanh<F>(a))
BRAID_EW_OP(OpSigmoid, 1, Sigmoid<F>(a))
BRAID_EW_OP(OpErf, 1, Erf<F>(a))
BRAID_EW_OP(OpSoftplus, 1, a > 20.0f ? a : Log1p<F>(Exp<F>(a)))
BRAID_EW_OP(OpSin, 1, (SinCos<F, false>(a)))
BRAID_EW_OP(OpCos, 1, (SinCos<F, true>(a)))
BRAID_EW_OP(OpGelu, 1, 0.5f * a * (1.0f + Erf<F>(a * kSqrt1_2)))
BRAID_EW_OP(OpGeluTanh, 1, GeluTanh<F>(a))
BRAID_EW_OP(OpElu, 1, a > 0.0f ? a : p0 * Expm1<F>(a))
BRAID_EW_OP(OpSelu, 1, kSeluScale * (a > 0.0f ? a : kSeluAlpha * Expm1<F>(a)))
BRAID_EW_OP(OpHardSigmoid, 1, Clamp(Madd<F>(p0, a, p1), 0.0f, 1.0f))
BRAID_EW_OP(OpHardSwish, 1, a * Clamp(a + 3.0f, 0.0f, 6.0f) / 6.0f)
BRAID_EW_OP(OpSoftsign, 1, a / (1.0f + __builtin_fabsf(a)))
BRAID_EW_OP(OpFloor, 1, RoundEven(a) > a ? RoundEven(a) - 1.0f : RoundEven(a))
BRAID_EW_OP(OpCeil, 1, RoundEven(a) < a ? RoundEven(a) + 1.0f : RoundEven(a))
BRAID_EW_OP(OpRound, 1, RoundEven(a))
BRAID_EW_OP(OpSign, 1, Sign(a))
BRAID_EW_OP(OpClip, 1, Clamp(a, p0, p1))
BRAID_EW_OP(OpAffine, 1, Madd<F>(p0, a, p1))
// ---- binary ---------------------------------------------------------------
BRAID_EW_OP(OpAdd, 2, a + b)
BRAID_EW_OP(OpSub, 2, a - b)
BRAID_EW_OP(OpMul, 2, a * b)
BRAID_EW_OP(OpDiv, 2, a / b)
BRAID_EW_OP(OpMin, 2, IsNan(b) ? b : MinNan(a, b))
BRAID_EW_OP(OpMax, 2, IsNan(b) ? b : MaxNan(a, b))
BRAID_EW_OP(OpPow, 2, std::pow(a, b))
BRAID_EW_OP(OpPRelu, 2, a > 0.0f ? a : b * a)
// ---- gradients ------------------------------------------------------------
BRAID_EW_OP(OpReluGrad, 2, b > 0.0f ? a : 0.0f)
BRAID_EW_OP(OpLeakyReluGrad, 2, b > 0.0f ? a : p0 * a)
BRAID_EW_OP(OpGeluGrad, 2, GeluGrad<F>(a, b))
BRAID_EW_OP(OpGeluTanhGrad, 2, GeluTanhGrad<F>(a, b))
BRAID_EW_OP(OpSigmoidGrad, 2, a * (1.0f - b) * b)
BRAID_EW_OP(OpTanhGrad, 2, a * (1.0f - b * b))
BRAID_EW_OP(OpEluGrad, 2, b > 0.0f ? a : a * p0 * Exp<F>(b))
BRAID_EW_OP(OpSoftplusGrad, 2, b > 20.0f ? a : a * Sigmoid<F>(b))
BRAID_EW_OP(OpHardSigmoidGrad, 2, (b > -3.0f && b < 3.0f) ? a * (1.0f / 6.0f) : 0.0f)
BRAID_EW_OP(OpHardSwishGrad, 2, b < -3.0f ? 0.0f : (b <= 3.0f ? a * (b / 3.0f + 0.5f) : a))
BRAID_EW_OP(OpSqrtGrad, 2, a / (2.0f * b))
BRAID_EW_OP(OpReciprocalGrad, 2, -a * (b * b))
BRAID_EW_OP(OpAbsGrad, 2, a * Sign(b))
BRAID_EW_OP(OpErfGrad, 2, a * k2InvSqrtPi * Exp<F>(-(b * b)))
BRAID_EW_OP(OpSinGrad, 2, a * (SinCos<F, true>(b)))
BRAID_EW_OP(OpCosGrad, 2, -a * (SinCos<F, false>(b)))
BRAID_EW_OP(OpClipGrad, 2, (b >= p0 && b <= p1) ? a : 0.0f)
// ---- ternary --------------------------------------------------------------
BRAID_EW_OP(OpDivGradB, 3, -(a * b) / c)
BRAID_EW_OP(OpEqualMask, 3, b == c ? a : 0.0f)
BRAID_EW_OP(OpPowGradBase, 3, a * c * std::pow(b, c - 1.0f))
BRAID_EW_OP(OpPowGradExp, 3, a * std::pow(b, c) * std::log(b))
// clang-format on

#undef BRAID_EW_OP

// In EwCode order (checked below).
using AllOps =
    std::tuple<OpCopy, OpNeg, OpAbs, OpRelu, OpLeakyRelu, OpSqrt, OpReciprocal, OpExp, OpLog,
               OpTanh, OpSigmoid, OpErf, OpSoftplus, OpSin, OpCos, OpGelu, OpGeluTanh, OpElu,
               OpSelu, OpHardSigmoid, OpHardSwish, OpSoftsign, OpFloor, OpCeil, OpRound, OpSign,
               OpClip, OpAffine, OpAdd, OpSub, OpMul, OpDiv, OpMin, OpMax, OpPow, OpPRelu,
               OpReluGrad, OpLeakyReluGrad, OpGeluGrad, OpGeluTanhGrad, OpSigmoidGrad, OpTanhGrad,
               OpEluGrad, OpSoftplusGrad, OpHardSigmoidGrad, OpHardSwishGrad, OpSqrtGrad,
               OpReciprocalGrad, OpAbsGrad, OpErfGrad, OpSinGrad, OpCosGrad, OpClipGrad, OpDivGradB,
               OpEqualMask, OpPowGradBase, OpPowGradExp>;
static_assert(std::tuple_size_v<AllOps> == static_cast<size_t>(EwCode::kCount));

// Which operand a sin/cos polynomial reads, for the large-argument fix-up.
template <class Op>
constexpr int SinCosOperand() {
  if constexpr (std::is_same_v<Op, OpSin> || std::is_same_v<Op, OpCos>) return 1;
  if constexpr (std::is_same_v<Op, OpSinGrad> || std::is_same_v<Op, OpCosGrad>) return 2;
  return 0;
}

template <class Op>
float ApplyLibm(float a, float b) {
  if constexpr (std::is_same_v<Op, OpSin>) return std::sin(a);
  if constexpr (std::is_same_v<Op, OpCos>) return std::cos(a);
  if constexpr (std::is_same_v<Op, OpSinGrad>) return a * std::cos(b);
  return -a * std::sin(b);  // OpCosGrad
}

// sqrtf sets errno on negative input, so GCC (with the project's default
// -fmath-errno) keeps a scalar call path that stops vectorization; SSE's
// sqrtps has no such path and rounds exactly as sqrtf.
BRAID_EW_INLINE void SqrtLoop(int64_t n, float* __restrict out, const float* __restrict a) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, _mm_sqrt_ps(_mm_loadu_ps(a + i)));
  for (; i < n; ++i) out[i] = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(a[i])));
}

template <class Op, bool F>
BRAID_EW_INLINE void OpLoop(int64_t n, float* __restrict out, const float* __restrict a,
                            const float* __restrict b, const float* __restrict c, float p0,
                            float p1) {
  if constexpr (std::is_same_v<Op, OpSqrt>) {
    SqrtLoop(n, out, a);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (Op::kArity == 1) {
      out[i] = Op::template Apply<F>(a[i], 0.0f, 0.0f, p0, p1);
    } else if constexpr (Op::kArity == 2) {
      out[i] = Op::template Apply<F>(a[i], b[i], 0.0f, p0, p1);
    } else {
      out[i] = Op::template Apply<F>(a[i], b[i], c[i], p0, p1);
    }
  }
  if constexpr (SinCosOperand<Op>() != 0) {
    // Arguments beyond the polynomial's reduction range are rare: a
    // vectorized scan, then libm for those few.
    const float* arg = SinCosOperand<Op>() == 1 ? a : b;
    int big = 0;
    for (int64_t i = 0; i < n; ++i) big |= __builtin_fabsf(arg[i]) > kSinCosMaxArg;
    if (big) {
      for (int64_t i = 0; i < n; ++i) {
        if (__builtin_fabsf(arg[i]) > kSinCosMaxArg) {
          out[i] = ApplyLibm<Op>(a[i], SinCosOperand<Op>() == 2 ? b[i] : 0.0f);
        }
      }
    }
  }
}

template <bool F>
BRAID_EW_INLINE void GatherRowsImpl(float* __restrict dst, const float* __restrict base,
                                    const int64_t* off, int64_t rows, int64_t len,
                                    int inner_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict d = dst + r * len;
    const float* __restrict s = base + off[r];
    if (inner_stride == 0) {
      const float v = *s;
      for (int64_t j = 0; j < len; ++j) d[j] = v;
    } else {
      for (int64_t j = 0; j < len; ++j) d[j] = s[j];
    }
  }
}

template <bool F>
BRAID_EW_INLINE void AddRowsImpl(double* __restrict acc, const int64_t* off,
                                 const float* __restrict src, int64_t rows, int64_t len) {
  for (int64_t r = 0; r < rows; ++r) {
    double* __restrict d = acc + off[r];
    const float* __restrict s = src + r * len;
    for (int64_t j = 0; j < len; ++j) d[j] += static_cast<double>(s[j]);
  }
}

// Eight independent double partial sums: a fixed-width block GCC vectorizes
// (a plain `s += x[j]` would not be, as FP addition is not reassociated).
template <bool F>
BRAID_EW_INLINE void SumRowsImpl(double* __restrict acc, const int64_t* off,
                                 const float* __restrict src, int64_t rows, int64_t len) {
  constexpr int kLanes = 8;
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict s = src + r * len;
    double part[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= len; j += kLanes) {
      for (int k = 0; k < kLanes; ++k) part[k] += static_cast<double>(s[j + k]);
    }
    double total = 0;
    for (; j < len; ++j) total += static_cast<double>(s[j]);
    for (int k = 0; k < kLanes; ++k) total += part[k];
    acc[off[r]] += total;
  }
}

template <bool F>
BRAID_EW_INLINE void MaxRowsImpl(float* __restrict acc, const int64_t* off,
                                 const float* __restrict src, int64_t rows, int64_t len) {
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict d = acc + off[r];
    const float* __restrict s = src + r * len;
    for (int64_t j = 0; j < len; ++j) d[j] = (s[j] > d[j] || IsNan(s[j])) ? s[j] : d[j];
  }
}

template <bool F>
BRAID_EW_INLINE void MaxRowsInnerImpl(float* __restrict acc, const int64_t* off,
                                      const float* __restrict src, int64_t rows, int64_t len) {
  constexpr int kLanes = 16;
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict s = src + r * len;
    float part[kLanes];
    for (int k = 0; k < kLanes; ++k) part[k] = -__builtin_inff();
    int64_t j = 0;
    for (; j + kLanes <= len; j += kLanes) {
      for (int k = 0; k < kLanes; ++k) {
        const float v = s[j + k];
        part[k] = (v > part[k] || IsNan(v)) ? v : part[k];
      }
    }
    float m = acc[off[r]];
    for (; j < len; ++j) m = (s[j] > m || IsNan(s[j])) ? s[j] : m;
    for (int k = 0; k < kLanes; ++k) m = (part[k] > m || IsNan(part[k])) ? part[k] : m;
    acc[off[r]] = m;
  }
}

// The instruction-set variants: the same templates under three `target`s.
// F (FMA) goes with AVX2 and AVX-512; AVX-512 asks for 512-bit vectors, which
// GCC's generic tuning would otherwise avoid.
#define BRAID_EW_VARIANT(Suffix, kFma, ...)                                                        \
  template <class Op>                                                                              \
  __VA_ARGS__ void Op##Suffix(const EwOpArgs& g) {                                                 \
    OpLoop<Op, kFma>(g.n, g.out, g.a, g.b, g.c, g.p0, g.p1);                                       \
  }                                                                                                \
  __VA_ARGS__ void GatherRows##Suffix(float* dst, const float* base, const int64_t* off,           \
                                      int64_t rows, int64_t len, int inner_stride) {               \
    GatherRowsImpl<kFma>(dst, base, off, rows, len, inner_stride);                                 \
  }                                                                                                \
  __VA_ARGS__ void AddRows##Suffix(double* acc, const int64_t* off, const float* src,              \
                                   int64_t rows, int64_t len) {                                    \
    AddRowsImpl<kFma>(acc, off, src, rows, len);                                                   \
  }                                                                                                \
  __VA_ARGS__ void SumRows##Suffix(double* acc, const int64_t* off, const float* src,              \
                                   int64_t rows, int64_t len) {                                    \
    SumRowsImpl<kFma>(acc, off, src, rows, len);                                                   \
  }                                                                                                \
  __VA_ARGS__ void MaxRows##Suffix(float* acc, const int64_t* off, const float* src, int64_t rows, \
                                   int64_t len) {                                                  \
    MaxRowsImpl<kFma>(acc, off, src, rows, len);                                                   \
  }                                                                                                \
  __VA_ARGS__ void MaxRowsInner##Suffix(float* acc, const int64_t* off, const float* src,          \
                                        int64_t rows, int64_t len) {                               \
    MaxRowsInnerImpl<kFma>(acc, off, src, rows, len);                                              \
  }                                                                                                \
  template <class... Ops>                                                                          \
  EwLoops MakeLoops##Suffix(std::tuple<Ops...>*) {                                                 \
    return EwLoops{{&Op##Suffix<Ops>...}, &GatherRows##Suffix, &AddRows##Suffix,                   \
                   &SumRows##Suffix,      &MaxRows##Suffix,    &MaxRowsInner##Suffix};             \
  }

BRAID_EW_VARIANT(Sse2, false, )
BRAID_EW_VARIANT(Avx2, true, __attribute__((target("avx2,fma"))))
BRAID_EW_VARIANT(Avx512, true,
                 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,"
                                       "prefer-vector-width=512"))))

#undef BRAID_EW_VARIANT

bool CpuHas(EwIsa isa) {
  switch (isa) {
    case EwIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
    case EwIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default:
      return true;  // x86-64 implies SSE2
  }
}

}  // namespace

EwIsa ResolveEwIsa(EwIsa isa) {
  // AVX-512 by default: `braid-fused-elementwise-bench --op-sweep` on the
  // Zen 4 build VM gives it 1.4-1.7x over AVX2 on the transcendental
  // instructions (gelu 0.75 vs 1.12 ns/point, erf 0.66 vs 0.98, exp 0.36
  // vs 0.50) and parity (within 10%) on the one-load-one-store ones; the
  // SSE2 baseline is 2-5x slower than either.
  if (isa == EwIsa::kAuto) isa = EwIsa::kAvx512;
  if (isa == EwIsa::kAvx512 && CpuHas(EwIsa::kAvx512)) return EwIsa::kAvx512;
  if ((isa == EwIsa::kAvx512 || isa == EwIsa::kAvx2) && CpuHas(EwIsa::kAvx2)) return EwIsa::kAvx2;
  return EwIsa::kSse2;
}

std::string_view EwIsaName(EwIsa isa) {
  switch (isa) {
    case EwIsa::kAuto:
      return "auto";
    case EwIsa::kSse2:
      return "sse2";
    case EwIsa::kAvx2:
      return "avx2";
    case EwIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

const EwLoops& GetEwLoops(EwIsa isa) {
  static const EwLoops kSse2 = MakeLoopsSse2(static_cast<AllOps*>(nullptr));
  static const EwLoops kAvx2 = MakeLoopsAvx2(static_cast<AllOps*>(nullptr));
  static const EwLoops kAvx512 = MakeLoopsAvx512(static_cast<AllOps*>(nullptr));
  switch (ResolveEwIsa(isa)) {
    case EwIsa::kAvx512:
      return kAvx512;
    case EwIsa::kAvx2:
      return kAvx2;
    default:
      return kSse2;
  }
}

}  // namespace braid::kernels::cpu
