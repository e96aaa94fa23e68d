// An elementwise group (with reshape-like members and reduction sinks) as one
// EwProgram run by the tile interpreter (kernels/cpu/fused_elementwise.h).
//
// Every value inside the group has the |S| elements of the iteration space S
// (CpuFusionBackend's rule), and all of them are contiguous row-major, so a
// group is computed in S's flat index space:
//  - an elementwise member's operands broadcast numpy-style against S, which
//    is its output shape; an operand of |S| elements is then S itself up to
//    leading 1s, i.e. the same flat order;
//  - a reshape-like member (Reshape, Flatten, Squeeze, Unsqueeze, Identity)
//    is the identity on flat indices: its output is its input's register (no
//    instruction; the interpreter writes any register, inputs included);
//  - an input from outside with |S| elements is handed to the program
//    reshaped to S (a view, made per run so a rebound slot is seen);
//  - a reduction reads a register of shape S and is an output reduced over
//    its axes (keepdims shape, then reshaped to the graph tensor's).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "costmodel/fusion_backend.h"
#include "graph/op_attrs.h"
#include "graph/op_kind.h"
#include "kernels/cpu/fused_elementwise.h"
#include "kernels/ew_program.h"
#include "worker/fused_kernels.h"

namespace braid::worker::internal {
namespace {

using graph::OpId;
using graph::TensorId;
using kernels::EwInstr;
using kernels::EwOutput;
using kernels::EwProgram;
using kernels::ReduceKind;
using kernels::cpu::FusedElementwiseKernel;
using K = graph::OpKind;

}  // namespace

absl::StatusOr<FusedCpuKernel> MakeElementwiseKernel(const graph::Graph& g, const FusedGroup& grp,
                                                     std::shared_ptr<TensorSlots> owned,
                                                     TensorSlots* slots) {
  ASSIGN_OR_RETURN(ElementwiseProgram ep, BuildElementwiseProgram(g, grp));
  const EwProgram& p = ep.program;
  const std::vector<TensorId>& ext = ep.inputs;
  const std::vector<bool> as_space = ep.as_space;
  absl::StatusOr<std::shared_ptr<const FusedElementwiseKernel>> got =
      FusedElementwiseKernel::Get(p);
  if (!got.ok()) {
    return absl::Status(got.status().code(), absl::StrCat("fused CPU kernel: tile interpreter: ",
                                                          got.status().message()));
  }
  std::shared_ptr<const FusedElementwiseKernel> kernel = *std::move(got);

  std::vector<at::Tensor> inputs;
  for (TensorId t : ext) inputs.push_back(slots->Get(t, g.tensor(t)));
  FusedCpuKernel k;
  k.kind = "tile-interpreter";
  k.detail = p.Signature();
  k.outputs = grp.escaping;
  std::vector<int64_t> space = p.shape;
  SetRun(
      g,
      [kernel, inputs, as_space, space, owned]() -> absl::StatusOr<std::vector<at::Tensor>> {
        std::vector<at::Tensor> in = inputs;
        for (size_t i = 0; i < in.size(); ++i) {
          if (as_space[i]) in[i] = in[i].reshape(space);
        }
        return kernel->Run(in);
      },
      &k);
  return k;
}

}  // namespace braid::worker::internal
