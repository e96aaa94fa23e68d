// CUDA C source for a fused elementwise/reduction program (EwProgram): the
// text NVRTC compiles into braid's CUDA fused kernels (ew_kernel.h). Plain
// string generation: it runs on any machine, GPU or not.
//
//   EwProgram p;  // y = relu(x + bias), and its column sums
//   p.shape = {64, 1024};
//   p.inputs = {{64, 1024}, {1024}};
//   p.instrs = {{EwCode::kAdd, 0, 1}, {EwCode::kRelu, 2}};
//   p.outputs = {{3}, {3, ReduceKind::kSum, {0}}};
//   absl::StatusOr<std::string> src = GenerateEwSource(p);
//
// The generated kernels (all extern "C", so NVRTC keeps their names):
//
//   braid_ew(const float* in0, ..., float* out0, ...)
//     Launched with kEwBlockSize threads per block and any grid: a block-
//     uniform grid-stride loop over the flattened iteration space, so a
//     warp's lanes always take the same number of trips (the shuffles
//     below need converged warps). Each point decomposes its flat index
//     into coordinates of the *merged* iteration space (adjacent dims
//     with the same broadcast/reduce pattern fused into one, size-1 dims
//     dropped), and every input is read at the sum of coordinate x stride
//     with stride 0 on broadcast dims. Every instruction is emitted inline
//     with the ew_code.h formula in float; outputs without a reduction are
//     stored at the flat index.
//   braid_ew_init(float* out0, ...)      (only when some output reduces)
//     Fills each sum/mean output with 0 and each max output with -inf; it
//     must run before braid_ew on the same stream.
//   braid_ew_finalize(float* out0, ...)  (only when some output is a mean)
//     Divides each mean output by its number of reduced points (the same
//     float division the host reference makes), after braid_ew.
//
// Reductions: a point's value goes to its output element by atomics. When all
// active lanes of a warp land on the same element (a reduction over the
// innermost dims, or a full reduction) the warp first combines its 32 values
// with shuffles and lane 0 makes one atomic; otherwise every lane makes its
// own (those then hit different addresses). sum/mean use atomicAdd on float;
// max uses the integer order of float bits: atomicMax on int for values with
// the sign bit clear, atomicMin on unsigned for values with it set (a larger
// negative float has larger unsigned bits), and NaN is first canonicalized
// to 0x7fffffff, the largest int, so a NaN anywhere wins as torch.max
// propagates it. Float atomics make sums run-to-run nondeterministic in
// their last bits; max is exact.
#ifndef BRAID_KERNELS_CUDA_EW_CODEGEN_H_
#define BRAID_KERNELS_CUDA_EW_CODEGEN_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/ew_program.h"

namespace braid::kernels::cuda {

inline constexpr char kEwKernelName[] = "braid_ew";
inline constexpr char kEwInitKernelName[] = "braid_ew_init";
inline constexpr char kEwFinalizeKernelName[] = "braid_ew_finalize";
// Threads per block every kernel of the source is written (and bounded) for.
inline constexpr int kEwBlockSize = 256;

// The source of the kernels above, or InvalidArgument from ValidateProgram.
absl::StatusOr<std::string> GenerateEwSource(const EwProgram& p);

// The CUDA C expression of one instruction in terms of its operands a, b, c
// and parameters p0, p1 (floats), as GenerateEwSource emits it; helper
// functions it names (braid_clamp, ...) are defined in the source.
std::string_view EwCudaFormula(EwCode code);

}  // namespace braid::kernels::cuda

#endif  // BRAID_KERNELS_CUDA_EW_CODEGEN_H_
