// Runs one fusion group of a training graph as ONE call of braid's CPU fused
// executor (kernels/cpu): the groups costmodel::CpuFusionBackend() accepts,
// and only those, so a plan braid makes for a CPU cluster is a plan the
// worker can execute. Two forms, chosen by the group:
//  - a MatMul/Gemm or 2-D Conv followed by a chain of post-ops: one oneDNN
//    primitive (kernels/cpu/onednn_fused.h), the chain's unary members as
//    eltwise post-ops and its binary members as binary post-ops whose second
//    operand comes from outside the group;
//  - elementwise members (with reshape-like members and reductions as sinks):
//    one EwProgram (kernels/ew_program.h) run by the tile interpreter
//    (kernels/cpu/fused_elementwise.h).
// Each member computes what its single-op kernel (worker/cpu_kernels.h)
// computes; tests/fused_kernels_test.cc checks every elementwise kind and the
// groups braid plans for real models against op-by-op execution.
//
//   TensorSlots slots;                        // shared with the other kernels
//   ASSIGN_OR_RETURN(FusedCpuKernel k, MakeFusedCpuKernel(g, group.ops, &slots));
//   RETURN_IF_ERROR(k.run());
//   for (size_t i = 0; i < k.outputs.size(); ++i) slots.Bind(k.outputs[i], k.output(i));
//
// Header LibTorch-facing, like cpu_kernels.h: include it only inside
// braid_worker.
#ifndef BRAID_WORKER_FUSED_KERNELS_H_
#define BRAID_WORKER_FUSED_KERNELS_H_

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "kernels/ew_code.h"
#include "worker/cpu_kernels.h"
#include "worker/fused_program.h"

namespace braid::worker {

// One fused group of `g` compiled for the CPU fused executor.
struct FusedCpuKernel {
  // One execution. Inputs are read from the slots at each call, so a slot
  // rebound since the kernel was made is seen; afterwards output(i) holds
  // the fresh result for outputs[i]. Not reentrant: one run at a time per
  // kernel (the results live in the kernel).
  std::function<absl::Status()> run;
  // The tensors the group writes: member outputs read outside the group,
  // graph outputs, or read by nobody (an op's result is kept). Outputs of
  // duplicated copies count too when read outside: their values equal the
  // home's. In topological order of their producers.
  std::vector<graph::TensorId> outputs;
  // Result i of the last run: a float32 tensor of outputs[i]'s graph shape,
  // newly allocated by each run (binding it into TensorSlots is safe).
  // Undefined before the first run.
  std::function<const at::Tensor&(size_t)> output;
  // "onednn-matmul+post-ops", "onednn-conv+post-ops" or "tile-interpreter".
  std::string kind;
  // The oneDNN implementation ("brg:avx512_core", ...) or the EwProgram's
  // signature, for reports.
  std::string detail;
};

// Builds the kernel of the group `ops` (members and duplicated copies, in
// any order, duplicates in the list ignored). Floating inputs from outside
// the group come from `slots` (created on first use, shared with the other
// kernels as MakeCpuKernel does); null `slots`: the kernel owns fresh random
// inputs. Unimplemented naming the op and the rule when the CPU backend does
// not accept the group (CpuFusionBackend().CanImplement's message), when a
// single op is no fused kind, or when oneDNN 2.6 has no optimized kernel for
// the spec; InvalidArgument on shape problems.
absl::StatusOr<FusedCpuKernel> MakeFusedCpuKernel(const graph::Graph& g,
                                                  std::span<const graph::OpId> ops,
                                                  TensorSlots* slots);

// EwMapping, EwMappingOf and EwCodeOf: worker/fused_program.h.

namespace internal {

// A group checked by MakeFusedCpuKernel (worker/fused_program.h).
using ::braid::worker::FusedGroup;

// The two lowerings (fused_kernels_library.cc, fused_kernels_elementwise.cc).
// `slots` is never null here.
absl::StatusOr<FusedCpuKernel> MakeLibraryKernel(const graph::Graph& g, const FusedGroup& grp,
                                                 std::shared_ptr<TensorSlots> owned,
                                                 TensorSlots* slots);
absl::StatusOr<FusedCpuKernel> MakeElementwiseKernel(const graph::Graph& g, const FusedGroup& grp,
                                                     std::shared_ptr<TensorSlots> owned,
                                                     TensorSlots* slots);

// Sets k->run and k->output around `compute`, which returns one tensor per
// escaping output; each is reshaped to its graph tensor's shape.
void SetRun(const graph::Graph& g, std::function<absl::StatusOr<std::vector<at::Tensor>>()> compute,
            FusedCpuKernel* k);

// "op 'name' (Type)" for messages.
std::string OpLabel(const graph::Op& op);

}  // namespace internal
}  // namespace braid::worker

#endif  // BRAID_WORKER_FUSED_KERNELS_H_
