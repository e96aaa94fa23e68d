// A fused elementwise/reduction program: the one description of a fused
// pointwise kernel that both executors run, the CPU tile interpreter
// (kernels/cpu/fused_elementwise.h) and the NVRTC-generated CUDA kernel
// (kernels/cuda/). worker/ builds it from a fusion group of the graph.
//
// Registers 0..inputs.size()-1 hold the inputs; instruction k writes register
// inputs.size() + k (single assignment). Every register is a value per point
// of the iteration space `shape`; an input of another shape is broadcast to
// it numpy-style (right-aligned, size-1 or missing dims repeat). An output is
// a register written back either whole (`shape`) or reduced over `axes` of
// the iteration space (the output then has `shape` with those axes set to 1;
// callers reshape as they need).
//
//   EwProgram p;
//   p.shape = {64, 1024};
//   p.inputs = {{64, 1024}, {1024}};                        // r0, r1
//   p.instrs = {{EwCode::kAdd, 0, 1}, {EwCode::kRelu, 2}};  // r2 = r0 + r1, r3 = relu(r2)
//   p.outputs = {{3}, {3, ReduceKind::kSum, {0}}};          // y, and sum_rows(y)
#ifndef BRAID_KERNELS_EW_PROGRAM_H_
#define BRAID_KERNELS_EW_PROGRAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/ew_code.h"

namespace braid::kernels {

struct EwInstr {
  EwCode code = EwCode::kCopy;
  int a = -1, b = -1, c = -1;  // operand registers (EwArity(code) of them)
  float p0 = 0, p1 = 0;        // parameters (ew_code.h says which use them)
};

enum class ReduceKind : uint8_t { kNone, kSum, kMean, kMax };

struct EwOutput {
  int reg = 0;
  ReduceKind reduce = ReduceKind::kNone;
  std::vector<int> axes;  // reduced axes of `shape`, ascending (reduce != kNone)
};

struct EwProgram {
  std::vector<int64_t> shape;                // iteration space
  std::vector<std::vector<int64_t>> inputs;  // input shapes, broadcastable to `shape`
  std::vector<EwInstr> instrs;
  std::vector<EwOutput> outputs;

  int num_registers() const { return static_cast<int>(inputs.size() + instrs.size()); }
  // The shape output `i` has: `shape`, or `shape` with the reduced axes at 1.
  std::vector<int64_t> OutputShape(int i) const;
  // Canonical text of the program (shapes, codes, operands, parameters as
  // exact float bits, outputs): the key fused kernels are compiled and
  // cached under, equal for equal programs.
  std::string Signature() const;
};

// OK, or InvalidArgument naming the first problem: an operand that is not an
// earlier register, a wrong operand count, an input not broadcastable to
// `shape`, an output register or axis out of range, more than 2^40 points.
absl::Status ValidateProgram(const EwProgram& p);

}  // namespace braid::kernels

#endif  // BRAID_KERNELS_EW_PROGRAM_H_
