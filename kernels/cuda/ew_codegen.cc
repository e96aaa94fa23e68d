#include "kernels/cuda/ew_codegen.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace braid::kernels::cuda {
namespace {

// Helpers the formulas call. braid_clamp is std::min(std::max(x, lo), hi)
// spelled out, so a NaN x stays NaN as in torch.clamp (fminf/fmaxf would
// drop it).
constexpr char kPrelude[] = R"(
__device__ __forceinline__ float braid_clamp(float x, float lo, float hi) {
  x = x < lo ? lo : x;
  return hi < x ? hi : x;
}
__device__ __forceinline__ float braid_sign(float x) {
  return x > 0.f ? 1.f : (x < 0.f ? -1.f : 0.f);
}
// at::gelu_backward(dy, x, "tanh"), term by term.
__device__ __forceinline__ float braid_gelu_tanh_grad(float dy, float x) {
  const float kBeta = 0.79788456080286535588f;  // sqrt(2 / pi)
  const float kKappa = 0.044715f;
  const float x_sq = x * x;
  const float inner = kBeta * (x + kKappa * x_sq * x);
  const float t = tanhf(inner);
  const float left = 0.5f * x;
  const float left_derivative = 0.5f * (1.f + t);
  const float tanh_derivative = 1.f - t * t;
  const float inner_derivative = kBeta * (1.f + 3.f * kKappa * x_sq);
  return dy * (left_derivative + left * tanh_derivative * inner_derivative);
}
__device__ __forceinline__ float braid_max_nan(float a, float b) {
  return a != a ? a : (b != b ? b : fmaxf(a, b));
}
// Sum of `v` into out[o]; every lane of the warp calls it (see ew_codegen.h).
__device__ __forceinline__ void braid_reduce_sum(float* out, braid_idx o, float v, bool active) {
  const unsigned kAll = 0xffffffffu;
  const braid_idx o0 = __shfl_sync(kAll, o, 0);
  if (__all_sync(kAll, !active || o == o0)) {
    for (int s = 16; s > 0; s >>= 1) v += __shfl_down_sync(kAll, v, s);
    // Lane 0 holds the smallest index, so it is active when any lane is.
    if ((threadIdx.x & 31) == 0 && active) atomicAdd(out + o0, v);
  } else if (active) {
    atomicAdd(out + o, v);
  }
}
__device__ __forceinline__ void braid_atomic_max(float* p, float v) {
  if (v != v) {
    atomicMax(reinterpret_cast<int*>(p), 0x7fffffff);
  } else if (__float_as_int(v) >= 0) {
    atomicMax(reinterpret_cast<int*>(p), __float_as_int(v));
  } else {
    atomicMin(reinterpret_cast<unsigned int*>(p), __float_as_uint(v));
  }
}
__device__ __forceinline__ void braid_reduce_max(float* out, braid_idx o, float v, bool active) {
  const unsigned kAll = 0xffffffffu;
  const braid_idx o0 = __shfl_sync(kAll, o, 0);
  if (__all_sync(kAll, !active || o == o0)) {
    for (int s = 16; s > 0; s >>= 1) v = braid_max_nan(v, __shfl_down_sync(kAll, v, s));
    if ((threadIdx.x & 31) == 0 && active) braid_atomic_max(out + o0, v);
  } else if (active) {
    braid_atomic_max(out + o, v);
  }
}
)";

struct Formula {
  EwCode code;
  const char* expr;
};

// ew_code.h, transcribed: operands a, b, c and parameters p0, p1 are floats.
constexpr Formula kFormulas[] = {
    {EwCode::kCopy, "a"},
    {EwCode::kNeg, "-a"},
    {EwCode::kAbs, "fabsf(a)"},
    {EwCode::kRelu, "(a != a ? a : (a > 0.f ? a : 0.f))"},
    {EwCode::kLeakyRelu, "(a > 0.f ? a : p0 * a)"},
    {EwCode::kSqrt, "sqrtf(a)"},
    {EwCode::kReciprocal, "(1.f / a)"},
    {EwCode::kExp, "expf(a)"},
    {EwCode::kLog, "logf(a)"},
    {EwCode::kTanh, "tanhf(a)"},
    {EwCode::kSigmoid, "(1.f / (1.f + expf(-a)))"},
    {EwCode::kErf, "erff(a)"},
    {EwCode::kSoftplus, "(a > 20.f ? a : log1pf(expf(a)))"},
    {EwCode::kSin, "sinf(a)"},
    {EwCode::kCos, "cosf(a)"},
    {EwCode::kGelu, "(0.5f * a * (1.f + erff(a * 0.70710678118654752440f)))"},
    {EwCode::kGeluTanh, "(0.5f * a * (1.f + tanhf(0.79788456080286535588f * (a + 0.044715f * a * a * a))))"},
    {EwCode::kElu, "(a > 0.f ? a : p0 * (expf(a) - 1.f))"},
    {EwCode::kSelu, "(1.0507009873554805f * (a > 0.f ? a : 1.6732632423543772f * (expf(a) - 1.f)))"},
    {EwCode::kHardSigmoid, "braid_clamp(p0 * a + p1, 0.f, 1.f)"},
    {EwCode::kHardSwish, "(a * braid_clamp(a + 3.f, 0.f, 6.f) / 6.f)"},
    {EwCode::kSoftsign, "(a / (1.f + fabsf(a)))"},
    {EwCode::kFloor, "floorf(a)"},
    {EwCode::kCeil, "ceilf(a)"},
    {EwCode::kRound, "rintf(a)"},  // current rounding mode: to nearest, halves to even
    {EwCode::kSign, "braid_sign(a)"},
    {EwCode::kClip, "braid_clamp(a, p0, p1)"},
    {EwCode::kAffine, "(p0 * a + p1)"},
    {EwCode::kAdd, "(a + b)"},
    {EwCode::kSub, "(a - b)"},
    {EwCode::kMul, "(a * b)"},
    {EwCode::kDiv, "(a / b)"},
    {EwCode::kMin, "(a != a ? a : (b != b ? b : fminf(a, b)))"},
    {EwCode::kMax, "braid_max_nan(a, b)"},
    {EwCode::kPow, "powf(a, b)"},
    {EwCode::kPRelu, "(a > 0.f ? a : b * a)"},
    {EwCode::kReluGrad, "(b > 0.f ? a : 0.f)"},
    {EwCode::kLeakyReluGrad, "(b > 0.f ? a : p0 * a)"},
    {EwCode::kGeluGrad,
     "(a * (0.5f * (1.f + erff(b * 0.70710678118654752440f)) + "
     "b * (0.39894228040143267794f * expf(-0.5f * b * b))))"},
    {EwCode::kGeluTanhGrad, "braid_gelu_tanh_grad(a, b)"},
    {EwCode::kSigmoidGrad, "(a * b * (1.f - b))"},
    {EwCode::kTanhGrad, "(a * (1.f - b * b))"},
    {EwCode::kEluGrad, "(b > 0.f ? a : a * p0 * expf(b))"},
    {EwCode::kSoftplusGrad, "(b > 20.f ? a : a * (1.f / (1.f + expf(-b))))"},
    {EwCode::kHardSigmoidGrad, "((-3.f < b && b < 3.f) ? a / 6.f : 0.f)"},
    {EwCode::kHardSwishGrad, "(b < -3.f ? 0.f : (b <= 3.f ? a * (b / 3.f + 0.5f) : a))"},
    {EwCode::kSqrtGrad, "(a / (2.f * b))"},
    {EwCode::kReciprocalGrad, "(-a * b * b)"},
    {EwCode::kAbsGrad, "(a * braid_sign(b))"},
    {EwCode::kErfGrad, "(a * 1.12837916709551257390f * expf(-b * b))"},
    {EwCode::kSinGrad, "(a * cosf(b))"},
    {EwCode::kCosGrad, "(-a * sinf(b))"},
    {EwCode::kClipGrad, "((p0 <= b && b <= p1) ? a : 0.f)"},
    {EwCode::kDivGradB, "(-(a * b) / c)"},
    {EwCode::kEqualMask, "(b == c ? a : 0.f)"},
    {EwCode::kPowGradBase, "(a * c * powf(b, c - 1.f))"},
    {EwCode::kPowGradExp, "(a * powf(b, c) * logf(b))"},
};
static_assert(sizeof(kFormulas) / sizeof(kFormulas[0]) == static_cast<size_t>(EwCode::kCount));

constexpr bool FormulasInOrder() {
  for (size_t i = 0; i < sizeof(kFormulas) / sizeof(kFormulas[0]); ++i) {
    if (kFormulas[i].code != static_cast<EwCode>(i)) return false;
  }
  return true;
}
static_assert(FormulasInOrder(), "kFormulas must list EwCode in enum order");

// A float as an exact bit pattern (NaN, inf and -0 included).
std::string FloatLit(float v) {
  return absl::StrFormat("__uint_as_float(0x%08xu)", std::bit_cast<uint32_t>(v));
}

// The iteration space after dropping size-1 dims and merging adjacent dims
// that every input broadcasts (or not) alike and every reduction reduces
// (or not) alike: a merged dim then has one stride per operand.
struct Layout {
  std::vector<int64_t> dims;                      // merged sizes, outermost first
  std::vector<std::vector<int64_t>> in_strides;   // [input][dim], 0 = broadcast
  std::vector<std::vector<int64_t>> out_strides;  // [output][dim], 0 = reduced (reducing outputs)
};

Layout MergeDims(const EwProgram& p) {
  const int rank = static_cast<int>(p.shape.size());
  const size_t n_in = p.inputs.size(), n_out = p.outputs.size();
  // Pattern of dim d: for each input, does it vary along d; for each
  // output, is d kept. Only dims of size > 1 matter.
  auto pattern = [&](int d) {
    std::vector<bool> bits;
    for (const std::vector<int64_t>& in : p.inputs) {
      const int lead = rank - static_cast<int>(in.size());
      bits.push_back(d >= lead && in[static_cast<size_t>(d - lead)] != 1);
    }
    for (const EwOutput& o : p.outputs) {
      bool kept = true;
      for (int ax : o.axes) kept = kept && ax != d;
      bits.push_back(kept);
    }
    return bits;
  };
  std::vector<int64_t> dims;
  std::vector<std::vector<bool>> pats;
  for (int d = 0; d < rank; ++d) {
    if (p.shape[static_cast<size_t>(d)] == 1) continue;
    std::vector<bool> pat = pattern(d);
    if (!pats.empty() && pats.back() == pat) {
      dims.back() *= p.shape[static_cast<size_t>(d)];
    } else {
      dims.push_back(p.shape[static_cast<size_t>(d)]);
      pats.push_back(std::move(pat));
    }
  }
  Layout l;
  l.dims = dims;
  l.in_strides.assign(n_in, std::vector<int64_t>(dims.size(), 0));
  l.out_strides.assign(n_out, std::vector<int64_t>(dims.size(), 0));
  for (size_t k = 0; k < n_in + n_out; ++k) {
    int64_t running = 1;  // dense row-major: innermost varying dim has stride 1
    for (size_t d = dims.size(); d-- > 0;) {
      if (!pats[d][k]) continue;
      (k < n_in ? l.in_strides[k] : l.out_strides[k - n_in])[d] = running;
      running *= dims[d];
    }
  }
  return l;
}

// Whether `strides` are those of the whole merged space: the operand is
// read (or written) at the flat index.
bool IsDense(const Layout& l, const std::vector<int64_t>& strides) {
  int64_t running = 1;
  for (size_t d = l.dims.size(); d-- > 0;) {
    if (strides[d] != running) return false;
    running *= l.dims[d];
  }
  return true;
}

// "c0 * 1024 + c1", the flat index "i" for dense strides, or "0".
std::string OffsetExpr(const Layout& l, const std::vector<int64_t>& strides) {
  if (IsDense(l, strides)) return "i";
  std::vector<std::string> terms;
  for (size_t d = 0; d < l.dims.size(); ++d) {
    if (strides[d] == 0) continue;
    terms.push_back(strides[d] == 1 ? absl::StrCat("c", d) : absl::StrCat("c", d, " * ", strides[d]));
  }
  return terms.empty() ? "0" : absl::StrJoin(terms, " + ");
}

int64_t Product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

std::string OutParams(size_t n_out) {
  std::vector<std::string> params;
  for (size_t j = 0; j < n_out; ++j) params.push_back(absl::StrCat("float* out", j));
  return absl::StrJoin(params, ", ");
}

}  // namespace

std::string_view EwCudaFormula(EwCode code) {
  return code < EwCode::kCount ? kFormulas[static_cast<size_t>(code)].expr : "";
}

absl::StatusOr<std::string> GenerateEwSource(const EwProgram& p) {
  RETURN_IF_ERROR(ValidateProgram(p));
  const Layout l = MergeDims(p);
  const int64_t points = Product(p.shape);
  const size_t n_in = p.inputs.size(), n_out = p.outputs.size();
  // 32-bit indices while base + stride stays below 2^31 (the grid never
  // exceeds the points rounded up to a block): faster div/mod.
  const bool wide = points > (int64_t{1} << 30);

  std::string s = absl::StrCat("// braid fused elementwise kernel: ", p.Signature(), "\n");
  absl::StrAppend(&s, "typedef ", wide ? "long long" : "int", " braid_idx;\n", kPrelude, "\n");

  // ---- braid_ew ------------------------------------------------------------
  std::vector<std::string> params;
  for (size_t k = 0; k < n_in; ++k) params.push_back(absl::StrCat("const float* __restrict__ in", k));
  for (size_t j = 0; j < n_out; ++j) params.push_back(absl::StrCat("float* out", j));
  absl::StrAppend(&s, "extern \"C\" __global__ void __launch_bounds__(", kEwBlockSize, ") ", kEwKernelName,
                  "(", absl::StrJoin(params, ", "), ") {\n");
  absl::StrAppend(&s, "  const braid_idx n = ", points, ";\n");
  absl::StrAppend(&s, "  for (braid_idx base = (braid_idx)blockIdx.x * ", kEwBlockSize,
                  "; base < n; base += (braid_idx)gridDim.x * ", kEwBlockSize, ") {\n");
  s += "    const braid_idx i = base + (braid_idx)threadIdx.x;\n";
  s += "    const bool active = i < n;\n";
  for (size_t j = 0; j < n_out; ++j) {
    const ReduceKind r = p.outputs[j].reduce;
    if (r == ReduceKind::kNone) continue;
    absl::StrAppend(&s, "    float v", j, " = ",
                    r == ReduceKind::kMax ? FloatLit(-std::numeric_limits<float>::infinity()) : "0.f",
                    ";\n    braid_idx o", j, " = 0;\n");
  }
  s += "    if (active) {\n";
  // Coordinates, innermost first, down to the outermost one an operand
  // reads (dense operands use i itself).
  std::vector<bool> used(l.dims.size(), false);
  auto mark = [&](const std::vector<int64_t>& strides) {
    if (IsDense(l, strides)) return;
    for (size_t d = 0; d < strides.size(); ++d) used[d] = used[d] || strides[d] != 0;
  };
  for (size_t k = 0; k < n_in; ++k) mark(l.in_strides[k]);
  for (size_t j = 0; j < n_out; ++j) {
    if (p.outputs[j].reduce != ReduceKind::kNone) mark(l.out_strides[j]);
  }
  const size_t lo = std::find(used.begin(), used.end(), true) - used.begin();
  if (lo < used.size()) s += "      braid_idx rem = i;\n";
  for (size_t d = l.dims.size(); d-- > lo;) {
    if (d == 0) {
      s += "      const braid_idx c0 = rem;\n";
      continue;
    }
    s += "     ";
    if (used[d]) absl::StrAppend(&s, " const braid_idx c", d, " = rem % ", l.dims[d], ";");
    if (d > lo) absl::StrAppend(&s, " rem /= ", l.dims[d], ";");
    s += "\n";
  }
  for (size_t k = 0; k < n_in; ++k) {
    absl::StrAppend(&s, "      const float r", k, " = in", k, "[", OffsetExpr(l, l.in_strides[k]), "];\n");
  }
  for (size_t t = 0; t < p.instrs.size(); ++t) {
    const EwInstr& in = p.instrs[t];
    const std::string_view expr = EwCudaFormula(in.code);
    const int arity = EwArity(in.code);
    absl::StrAppend(&s, "      float r", n_in + t, ";  // ", std::string(EwName(in.code)),
                    "\n      { const float a = r", in.a);
    if (arity >= 2) absl::StrAppend(&s, ", b = r", in.b);
    if (arity >= 3) absl::StrAppend(&s, ", c = r", in.c);
    s += ";";
    if (expr.find("p0") != std::string_view::npos)
      absl::StrAppend(&s, " const float p0 = ", FloatLit(in.p0), ";");
    if (expr.find("p1") != std::string_view::npos)
      absl::StrAppend(&s, " const float p1 = ", FloatLit(in.p1), ";");
    absl::StrAppend(&s, " r", n_in + t, " = ", std::string(expr), "; }\n");
  }
  for (size_t j = 0; j < n_out; ++j) {
    const EwOutput& o = p.outputs[j];
    if (o.reduce == ReduceKind::kNone) {
      absl::StrAppend(&s, "      out", j, "[i] = r", o.reg, ";\n");
    } else {
      absl::StrAppend(&s, "      v", j, " = r", o.reg, "; o", j, " = ", OffsetExpr(l, l.out_strides[j]),
                      ";\n");
    }
  }
  s += "    }\n";
  for (size_t j = 0; j < n_out; ++j) {
    const ReduceKind r = p.outputs[j].reduce;
    if (r == ReduceKind::kNone) continue;
    absl::StrAppend(&s, "    braid_reduce_", r == ReduceKind::kMax ? "max" : "sum", "(out", j, ", o", j,
                    ", v", j, ", active);\n");
  }
  s += "  }\n}\n";

  // ---- braid_ew_init / braid_ew_finalize: over the reduced outputs ---------
  bool any_reduce = false, any_mean = false;
  int64_t max_size = 0;
  for (size_t j = 0; j < n_out; ++j) {
    if (p.outputs[j].reduce == ReduceKind::kNone) continue;
    any_reduce = true;
    any_mean = any_mean || p.outputs[j].reduce == ReduceKind::kMean;
    max_size = std::max(max_size, Product(p.OutputShape(static_cast<int>(j))));
  }
  auto loop_head = [&](const char* name) {
    return absl::StrCat("extern \"C\" __global__ void __launch_bounds__(", kEwBlockSize, ") ", name, "(",
                        OutParams(n_out), ") {\n  for (long long j = (long long)blockIdx.x * ", kEwBlockSize,
                        " + threadIdx.x; j < ", max_size, "LL; j += (long long)gridDim.x * ", kEwBlockSize,
                        ") {\n");
  };
  if (any_reduce) {
    s += loop_head(kEwInitKernelName);
    for (size_t j = 0; j < n_out; ++j) {
      const ReduceKind r = p.outputs[j].reduce;
      if (r == ReduceKind::kNone) continue;
      absl::StrAppend(
          &s, "    if (j < ", Product(p.OutputShape(static_cast<int>(j))), "LL) out", j,
          "[j] = ", r == ReduceKind::kMax ? FloatLit(-std::numeric_limits<float>::infinity()) : "0.f", ";\n");
    }
    s += "  }\n}\n";
  }
  if (any_mean) {
    s += loop_head(kEwFinalizeKernelName);
    for (size_t j = 0; j < n_out; ++j) {
      if (p.outputs[j].reduce != ReduceKind::kMean) continue;
      const int64_t size = Product(p.OutputShape(static_cast<int>(j)));
      absl::StrAppend(&s, "    if (j < ", size, "LL) out", j, "[j] = out", j, "[j] / ",
                      FloatLit(static_cast<float>(points / size)), ";\n");
    }
    s += "  }\n}\n";
  }
  return s;
}

}  // namespace braid::kernels::cuda
