// A plain C++ evaluator of EwProgram: the host reference the CUDA fused
// kernels (ew_kernel.h) are checked against. One point at a time, in float,
// with the formulas of ew_code.h transcribed independently of the CUDA
// source (ew_codegen.cc), so a slip in either shows up as a mismatch.
// Reductions accumulate in double and round once (the most accurate answer
// a float atomics kernel can be compared with); a mean divides that float
// sum by the float count, as the CUDA finalize kernel does.
//
//   std::vector<std::vector<float>> in = {x, bias};   // dense row-major
//   absl::StatusOr<std::vector<std::vector<float>>> out = EvaluateEwProgram(p, in);
//   // (*out)[j] has Product(p.OutputShape(j)) values
#ifndef BRAID_KERNELS_CUDA_EW_REFERENCE_H_
#define BRAID_KERNELS_CUDA_EW_REFERENCE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "kernels/ew_code.h"
#include "kernels/ew_program.h"

namespace braid::kernels::cuda {

// One instruction on scalars (unused operands are ignored).
float EwReferenceApply(EwCode code, float a, float b, float c, float p0, float p1);

// All outputs of `p` on `inputs`. InvalidArgument for an invalid program or
// inputs of the wrong count or sizes.
absl::StatusOr<std::vector<std::vector<float>>> EvaluateEwProgram(
    const EwProgram& p, const std::vector<std::vector<float>>& inputs);

}  // namespace braid::kernels::cuda

#endif  // BRAID_KERNELS_CUDA_EW_REFERENCE_H_
