// EwPrograms the kernels/cuda tests share: one that applies every EwCode,
// with broadcast operands, and the parameters each code is tested with.
//
//   EwProgram p = AllCodesProgram({37, 129});   // every code, one output each
#ifndef BRAID_KERNELS_CUDA_INTERNAL_TEST_PROGRAMS_H_
#define BRAID_KERNELS_CUDA_INTERNAL_TEST_PROGRAMS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/ew_code.h"
#include "kernels/ew_program.h"

namespace braid::kernels::cuda::internal {

// (p0, p1) as the ops that read them are used: LeakyRelu's slope, Elu's
// alpha, HardSigmoid's ONNX alpha/beta, Clip's bounds, an affine scaling.
inline std::pair<float, float> TestParams(EwCode code) {
  switch (code) {
    case EwCode::kLeakyRelu:
    case EwCode::kLeakyReluGrad:
      return {0.01f, 0.0f};
    case EwCode::kElu:
    case EwCode::kEluGrad:
      return {1.0f, 0.0f};
    case EwCode::kHardSigmoid:
      return {0.2f, 0.5f};
    case EwCode::kClip:
    case EwCode::kClipGrad:
      return {-0.75f, 1.25f};
    case EwCode::kAffine:
      return {2.5f, -0.5f};
    default:
      return {0.0f, 0.0f};
  }
}

// Iteration space `shape` (rank >= 2); inputs: r0 of the full shape, r1
// broadcast along the leading dims (the last dim only), r2 broadcast along
// the last dim ([..., 1]). Instruction per code: unary on r0, binary on
// (r0, r1), ternary on (r0, r1, r2); one output per instruction, written
// whole.
inline EwProgram AllCodesProgram(std::vector<int64_t> shape) {
  EwProgram p;
  p.shape = shape;
  p.inputs.push_back(shape);
  p.inputs.push_back({shape.back()});
  std::vector<int64_t> col = shape;
  col.back() = 1;
  p.inputs.push_back(col);
  for (int c = 0; c < static_cast<int>(EwCode::kCount); ++c) {
    const EwCode code = static_cast<EwCode>(c);
    EwInstr in;
    in.code = code;
    const int arity = EwArity(code);
    in.a = 0;
    if (arity >= 2) in.b = 1;
    if (arity >= 3) in.c = 2;
    std::tie(in.p0, in.p1) = TestParams(code);
    p.instrs.push_back(in);
    p.outputs.push_back({static_cast<int>(p.inputs.size()) + c});
  }
  return p;
}

}  // namespace braid::kernels::cuda::internal

#endif  // BRAID_KERNELS_CUDA_INTERNAL_TEST_PROGRAMS_H_
