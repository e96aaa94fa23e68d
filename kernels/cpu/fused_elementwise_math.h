// Branch-free float math for the fused elementwise loops
// (fused_elementwise_ops.cc): exp, expm1, log, log1p, tanh, erf, sin, cos
// and round-half-even written so that GCC vectorizes a loop calling them.
// libm's expf/erff/... are opaque calls that stop vectorization, and ATen's
// Vectorized<float> only reaches SLEEF when the whole file is compiled for
// AVX2 (CPU_CAPABILITY_AVX2) and SLEEF is linked, which braid's shared CMake
// flags do not do. Private to fused_elementwise*.cc.
//
// Accuracy (checked against double-precision libm by
// fused_elementwise_test.cc, FusedElementwiseMathTest): a few float ulps for
// exp/log/tanh/sin/cos (Cephes' single-precision polynomials), erf within
// 2e-7 absolute (own Chebyshev fits, below). Inputs are finite or NaN; NaN
// propagates; exp/log saturate to inf/0/-inf as libm does.
//
// Template parameter F: use fused multiply-add (the AVX2/AVX-512 variants);
// without it every Madd is a separate multiply and add, as the SSE2 baseline
// has no FMA and __builtin_fmaf would become a libm call there.
//
// Float comparisons feed selects (?:); fused_elementwise_ops.cc compiles
// with -fno-trapping-math so that GCC if-converts them (results are the same
// IEEE values; only FP exception flags, which braid never reads, may differ).
#ifndef BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_MATH_H_
#define BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_MATH_H_

#include <bit>
#include <cstdint>

#define BRAID_EW_INLINE inline __attribute__((always_inline))

namespace braid::kernels::cpu::ew_math {

template <bool F>
BRAID_EW_INLINE float Madd(float a, float b, float c) {
  if constexpr (F) {
    return __builtin_fmaf(a, b, c);
  } else {
    return a * b + c;
  }
}

BRAID_EW_INLINE float Neg(bool neg, float x) { return neg ? -x : x; }
BRAID_EW_INLINE bool IsNan(float x) { return x != x; }

// exp: Cephes expf. x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6
// polynomial; 2^n applied as two factors so that n in [-150, 128] gives
// gradual underflow and overflow to inf without integer overflow.
template <bool F>
BRAID_EW_INLINE float Exp(float x) {
  float xc = x < -104.0f ? -104.0f : x;  // NaN stays NaN and makes p NaN
  xc = xc > 89.0f ? 89.0f : xc;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = Madd<F>(xc, 1.44269504088896341f, kRound);
  const float n = t - kRound;
  const int32_t ni = __builtin_bit_cast(int32_t, t) - __builtin_bit_cast(int32_t, kRound);
  float r = Madd<F>(n, -0.693359375f, xc);  // ln2 split in two (Cody-Waite)
  r = Madd<F>(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = Madd<F>(p, r, 1.3981999507e-3f);
  p = Madd<F>(p, r, 8.3334519073e-3f);
  p = Madd<F>(p, r, 4.1665795894e-2f);
  p = Madd<F>(p, r, 1.6666665459e-1f);
  p = Madd<F>(p, r, 5.0000001201e-1f);
  p = Madd<F>(p, r * r, r + 1.0f);
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const float s1 = __builtin_bit_cast(float, (n1 + 127) << 23);
  const float s2 = __builtin_bit_cast(float, (n2 + 127) << 23);
  return p * s1 * s2;
}

// expm1: Taylor series to x^8/8! where exp(x) - 1 would cancel (|x| < 1/4,
// truncation below 4e-10 relative), exp(x) - 1 elsewhere. Torch's elu/selu
// use expm1.
template <bool F>
BRAID_EW_INLINE float Expm1(float x) {
  float s = Madd<F>(x, 1.0f / 8, 1.0f);
  s = Madd<F>(x * (1.0f / 7), s, 1.0f);
  s = Madd<F>(x * (1.0f / 6), s, 1.0f);
  s = Madd<F>(x * (1.0f / 5), s, 1.0f);
  s = Madd<F>(x * (1.0f / 4), s, 1.0f);
  s = Madd<F>(x * (1.0f / 3), s, 1.0f);
  s = Madd<F>(x * 0.5f, s, 1.0f);
  const float small = x * s;
  const float big = Exp<F>(x) - 1.0f;
  return (x > -0.25f && x < 0.25f) ? small : big;
}

// log: Cephes logf. x = 2^e m with m in [sqrt(1/2), sqrt(2)); log(m) by a
// degree-9 polynomial in m - 1. Subnormals are scaled by 2^25 first.
template <bool F>
BRAID_EW_INLINE float Log(float x) {
  const bool sub = x < 1.17549435e-38f;  // FLT_MIN
  const float xs = sub ? x * 33554432.0f : x;
  const int32_t bits = __builtin_bit_cast(int32_t, xs);
  int32_t e = ((bits >> 23) & 0xff) - 126 - (sub ? 25 : 0);
  float m = __builtin_bit_cast(float, (bits & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  const bool lo = m < 0.707106781186547524f;
  e = lo ? e - 1 : e;
  m = lo ? m + m - 1.0f : m - 1.0f;
  const float ef = static_cast<float>(e);
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = Madd<F>(y, m, -1.1514610310e-1f);
  y = Madd<F>(y, m, 1.1676998740e-1f);
  y = Madd<F>(y, m, -1.2420140846e-1f);
  y = Madd<F>(y, m, 1.4249322787e-1f);
  y = Madd<F>(y, m, -1.6668057665e-1f);
  y = Madd<F>(y, m, 2.0000714765e-1f);
  y = Madd<F>(y, m, -2.4999993993e-1f);
  y = Madd<F>(y, m, 3.3333331174e-1f);
  y = y * m * z;
  y = Madd<F>(ef, -2.12194440e-4f, y);
  y = Madd<F>(z, -0.5f, y);
  float r = m + y;
  r = Madd<F>(ef, 0.693359375f, r);
  r = x == __builtin_inff() ? x : r;
  r = x == 0.0f ? -__builtin_inff() : r;
  return (x < 0.0f || IsNan(x)) ? __builtin_nanf("") : r;
}

// log1p for y > -1: log(1 + y) corrected by y / ((1 + y) - 1), which cancels
// the rounding of 1 + y (Goldberg's trick), so tiny y keep full precision.
template <bool F>
BRAID_EW_INLINE float Log1p(float y) {
  const float u = 1.0f + y;
  const float d = u - 1.0f;
  const float corrected = Log<F>(u) * (y / (d == 0.0f ? 1.0f : d));
  return (d == 0.0f || u == __builtin_inff()) ? (d == 0.0f ? y : u) : corrected;
}

// tanh: Cephes tanhf, odd polynomial below 0.625, 1 - 2 / (e^{2|x|} + 1)
// above (exp saturates to inf, giving exactly +-1).
template <bool F>
BRAID_EW_INLINE float Tanh(float x) {
  const float z = __builtin_fabsf(x);
  const float s = x * x;
  float p = -5.70498872745e-3f;
  p = Madd<F>(p, s, 2.06390887954e-2f);
  p = Madd<F>(p, s, -5.37397155531e-2f);
  p = Madd<F>(p, s, 1.33314422036e-1f);
  p = Madd<F>(p, s, -3.33332819422e-1f);
  const float small = Madd<F>(p * s, x, x);
  const float big = Neg(x < 0.0f, 1.0f - 2.0f / (Exp<F>(z + z) + 1.0f));
  return z < 0.625f ? small : big;  // NaN takes `big`, which is NaN
}

template <bool F>
BRAID_EW_INLINE float Sigmoid(float x) {
  return 1.0f / (1.0f + Exp<F>(-x));
}

// exp for x in [-104, 0] or NaN (no overflow): the Exp above without its
// clamps and split scaling, for erf's tail where the argument is bounded.
template <bool F>
BRAID_EW_INLINE float ExpNonPositive(float x) {
  constexpr float kRound = 12582912.0f;
  const float t = Madd<F>(x, 1.44269504088896341f, kRound);
  const float n = t - kRound;
  const int32_t ni = __builtin_bit_cast(int32_t, t) - __builtin_bit_cast(int32_t, kRound);
  float r = Madd<F>(n, -0.693359375f, x);
  r = Madd<F>(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = Madd<F>(p, r, 1.3981999507e-3f);
  p = Madd<F>(p, r, 8.3334519073e-3f);
  p = Madd<F>(p, r, 4.1665795894e-2f);
  p = Madd<F>(p, r, 1.6666665459e-1f);
  p = Madd<F>(p, r, 5.0000001201e-1f);
  p = Madd<F>(p, r * r, r + 1.0f);
  return p * __builtin_bit_cast(float, (ni + 127) << 23);  // n >= -150: 2^n normal or 0
}

// erf: |x| < 1: x P(x^2), P of degree 6 (relative error 1.3e-9);
// 1 <= |x|: 1 - exp(G(|x| - 2.5)), G of degree 8 fitting log(erfc) on [1, 4]
// (absolute error 1.7e-8 in log erfc). Both are Chebyshev fits made with
// mpmath.chebyfit at 40 digits; beyond 4, erf rounds to 1 in float. G is
// below -1.8 on [1, 4], so its exp needs no overflow handling; NaN flows
// through the second branch (the clamps keep it).
template <bool F>
BRAID_EW_INLINE float Erf(float x) {
  const float t = __builtin_fabsf(x);
  const float s = x * x;
  float pa = 7.87587506269e-5f;
  pa = Madd<F>(pa, s, -0.000801686428717f);
  pa = Madd<F>(pa, s, 0.00518908742343f);
  pa = Madd<F>(pa, s, -0.0268542120106f);
  pa = Madd<F>(pa, s, 0.112835947152f);
  pa = Madd<F>(pa, s, -0.376126266667f);
  pa = Madd<F>(pa, s, 1.12837916585f);
  const float small = x * pa;
  float tb = t < 1.0f ? 1.0f : t;  // NaN stays NaN
  tb = tb > 4.0f ? 4.0f : tb;
  const float u = tb - 2.5f;
  float g = 1.63715141459e-6f;
  g = Madd<F>(g, u, -1.33150143973e-5f);
  g = Madd<F>(g, u, 7.72913761538e-5f);
  g = Madd<F>(g, u, -0.000420122523541f);
  g = Madd<F>(g, u, 0.00216530354916f);
  g = Madd<F>(g, u, -0.0108585416429f);
  g = Madd<F>(g, u, -0.943893703611f);
  g = Madd<F>(g, u, -5.35268067422f);
  g = Madd<F>(g, u, -7.80681527273f);
  const float big = __builtin_copysignf(1.0f - ExpNonPositive<F>(g), x);
  return t < 1.0f ? small : big;
}

// Largest |x| SinCos reduces accurately (Cephes: the 3-part pi/4 split keeps
// the reduced argument exact while j * pi/4 has few enough bits). Callers
// recompute larger |x| with libm.
inline constexpr float kSinCosMaxArg = 8192.0f;

// sin (kCos false) or cos (true): Cephes sinf/cosf.
template <bool F, bool kCos>
BRAID_EW_INLINE float SinCos(float x) {
  const float ax = __builtin_fabsf(x);
  const float axc = ax <= kSinCosMaxArg ? ax : 0.0f;          // NaN -> 0 (fixed below)
  int32_t j = static_cast<int32_t>(axc * 1.27323954473516f);  // 4 / pi
  j = (j + 1) & ~1;
  const float y = static_cast<float>(j);
  const float xr =
      ((axc - y * 0.78515625f) - y * 2.4187564849853515625e-4f) - y * 3.77489497744594108e-8f;
  const float z = xr * xr;
  float ps = -1.9515295891e-4f;
  ps = Madd<F>(ps, z, 8.3321608736e-3f);
  ps = Madd<F>(ps, z, -1.6666654611e-1f);
  ps = Madd<F>(ps * z, xr, xr);
  float pc = 2.443315711809948e-5f;
  pc = Madd<F>(pc, z, -1.388731625493765e-3f);
  pc = Madd<F>(pc, z, 4.166664568298827e-2f);
  pc = Madd<F>(pc * z, z, Madd<F>(z, -0.5f, 1.0f));
  const int32_t q = j & 7;  // 0, 2, 4 or 6: the octant pair
  const bool swap = q == 2 || q == 6;
  // The sign as a bit flipped into the result: mixing an integer and a float
  // comparison in one boolean stops GCC's vectorizer, an integer xor does not.
  int32_t sign;
  float r;
  if constexpr (kCos) {
    sign = (q == 2 || q == 4) ? INT32_MIN : 0;
    r = swap ? ps : pc;
  } else {
    sign = ((q >= 4) ? INT32_MIN : 0) ^ (__builtin_bit_cast(int32_t, x) & INT32_MIN);
    r = swap ? pc : ps;
  }
  r = __builtin_bit_cast(float, __builtin_bit_cast(int32_t, r) ^ sign);
  return IsNan(x) ? x : r;
}

// Round half to even (nearbyint in the default rounding mode): adding and
// subtracting 2^23 leaves the nearest integer; |x| >= 2^23 is integral.
BRAID_EW_INLINE float RoundEven(float x) {
  const float ax = __builtin_fabsf(x);
  const float r = ax < 8388608.0f ? (ax + 8388608.0f) - 8388608.0f : ax;
  return __builtin_copysignf(r, x);
}

}  // namespace braid::kernels::cpu::ew_math

#endif  // BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_MATH_H_
