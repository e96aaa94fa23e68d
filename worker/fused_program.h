// The torch-free half of running a fusion group as one kernel: which
// EwCode an op becomes, the group's members in order with the tensors it
// writes out, and the EwProgram (kernels/ew_program.h) of an elementwise
// group. The CPU fused executor (worker/fused_kernels.h) and the CUDA
// profiler (worker/cuda, kernels/cuda's NVRTC kernels) share it, so both run
// the same program for the same group.
//
//   ASSIGN_OR_RETURN(FusedGroup grp, AnalyzeGroup(g, ops));
//   ASSIGN_OR_RETURN(ElementwiseProgram ep, BuildElementwiseProgram(g, grp));
//   // ep.program's inputs are the graph tensors ep.inputs (reshaped to the
//   // iteration space where ep.as_space[i]); its outputs are grp.escaping.
#ifndef BRAID_WORKER_FUSED_PROGRAM_H_
#define BRAID_WORKER_FUSED_PROGRAM_H_

#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "kernels/ew_code.h"
#include "kernels/ew_program.h"

namespace braid::worker {

// The instruction an elementwise op becomes: its code and parameters, and
// which of the op's inputs are the instruction's operands.
struct EwMapping {
  kernels::EwCode code = kernels::EwCode::kCopy;
  float p0 = 0, p1 = 0;
  std::vector<int> operands;  // indices into Op::inputs, EwArity(code) of them
};

// Defined exactly for the ops costmodel::CpuElementwiseKind accepts
// (the test checks the two agree), with the formula of the op's single-op
// kernel; nullopt otherwise.
std::optional<EwMapping> EwMappingOf(const graph::Op& op);
// EwMappingOf(op)->code.
std::optional<kernels::EwCode> EwCodeOf(const graph::Op& op);

// A group's members in topological order (ties by id: deterministic) and
// the tensors it writes: read outside the group, graph outputs, or read by
// nobody.
struct FusedGroup {
  std::vector<graph::OpId> members;
  std::vector<graph::TensorId> escaping;
};
// `ops`: sorted, unique, valid ids. InvalidArgument when they form a cycle.
absl::StatusOr<FusedGroup> AnalyzeGroup(const graph::Graph& g, std::span<const graph::OpId> ops);

// The EwProgram of an elementwise group (elementwise members of one
// iteration space S, reshape-like members, reductions as sinks; the CPU
// backend's rule): registers 0..n-1 are `inputs` (each handed over reshaped
// to S where as_space[i]), the outputs are the group's escaping tensors in
// order. InvalidArgument or Unimplemented naming the op otherwise.
struct ElementwiseProgram {
  kernels::EwProgram program;
  std::vector<graph::TensorId> inputs;
  std::vector<bool> as_space;
};
absl::StatusOr<ElementwiseProgram> BuildElementwiseProgram(const graph::Graph& g,
                                                           const FusedGroup& grp);

}  // namespace braid::worker

#endif  // BRAID_WORKER_FUSED_PROGRAM_H_
