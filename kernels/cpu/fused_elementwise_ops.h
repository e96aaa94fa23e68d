// The vectorized inner loops of the fused elementwise tile interpreter
// (fused_elementwise.h): one loop per EwCode over tile buffers, and the
// gather/fill and reduction loops around them. EwIsa is part of the
// interpreter's public options; the loops are for fused_elementwise*.cc
// (and its benchmark) only.
//
// Every loop exists in three instruction-set variants (SSE2 baseline,
// AVX2+FMA, AVX-512), compiled from one source with GCC's per-function
// `target` attribute; a kernel picks its variant once, when compiled, so the
// hot path pays no dispatch beyond one indirect call per instruction and tile.
//
//   const EwLoops& loops = GetEwLoops(EwIsa::kAuto);
//   loops.op[static_cast<int>(EwCode::kGelu)]({n, out, a, nullptr, nullptr, 0, 0});
#ifndef BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_OPS_H_
#define BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_OPS_H_

#include <cstdint>
#include <string_view>

#include "kernels/ew_code.h"

namespace braid::kernels::cpu {

// Instruction-set variant of the loops. kAuto: the widest the CPU supports.
enum class EwIsa : uint8_t { kAuto, kSse2, kAvx2, kAvx512 };

// kAuto resolved against the running CPU (AVX-512 where present; see
// ResolveEwIsa for the measurement); an explicit variant the CPU lacks falls
// back to the widest it has (so tests may ask for any).
EwIsa ResolveEwIsa(EwIsa isa);
std::string_view EwIsaName(EwIsa isa);

// One instruction over n points: out[i] = f(a[i], b[i], c[i]; p0, p1).
// Operands the code does not use may be null. out never aliases an operand.
struct EwOpArgs {
  int64_t n;
  float* out;
  const float* a;
  const float* b;
  const float* c;
  float p0, p1;
};
using EwOpFn = void (*)(const EwOpArgs&);

// Row-structured helpers. A tile is `rows` rows of `len` contiguous floats
// (src + r * len); off[r] is row r's element offset in the other operand.
struct EwLoops {
  EwOpFn op[static_cast<int>(EwCode::kCount)];
  // dst[r*len + j] = base[off[r] + j] (inner_stride 1) or base[off[r]] (0).
  void (*gather_rows)(float* dst, const float* base, const int64_t* off, int64_t rows, int64_t len,
                      int inner_stride);
  // acc[off[r] + j] += src[r*len + j], in double (a reduction's kept inner dim).
  void (*add_rows)(double* acc, const int64_t* off, const float* src, int64_t rows, int64_t len);
  // acc[off[r]] += sum_j src[r*len + j], summed in double (reduced inner dim).
  void (*sum_rows)(double* acc, const int64_t* off, const float* src, int64_t rows, int64_t len);
  // acc[off[r] + j] = max(acc[off[r] + j], src[r*len + j]), NaN propagating.
  void (*max_rows)(float* acc, const int64_t* off, const float* src, int64_t rows, int64_t len);
  // acc[off[r]] = max(acc[off[r]], max_j src[r*len + j]), NaN propagating.
  void (*max_rows_inner)(float* acc, const int64_t* off, const float* src, int64_t rows,
                         int64_t len);
};

// The loops of `isa` (resolved with ResolveEwIsa); static storage.
const EwLoops& GetEwLoops(EwIsa isa);

}  // namespace braid::kernels::cpu

#endif  // BRAID_KERNELS_CPU_FUSED_ELEMENTWISE_OPS_H_
