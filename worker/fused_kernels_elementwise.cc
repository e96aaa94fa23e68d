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

int64_t Elements(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::optional<ReduceKind> ReduceKindOf(const graph::Op& op) {
  switch (op.kind) {
    case K::kReduceSum: return ReduceKind::kSum;
    case K::kReduceMean: return ReduceKind::kMean;
    case K::kReduceMax: return ReduceKind::kMax;
    default: return std::nullopt;
  }
}

bool ReshapeLike(const graph::Op& op) {
  return graph::IsOneOf(op.kind,
                        {K::kReshape, K::kFlatten, K::kSqueeze, K::kUnsqueeze, K::kIdentity});
}

absl::Status Error(const graph::Op& op, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("fused CPU kernel: ", OpLabel(op), " ", std::string(what)));
}

// The iteration space: the output of the largest elementwise member (all of
// them share it in an accepted group); for a lone reshape its output, for a
// lone reduction its input.
std::vector<int64_t> Space(const graph::Graph& g, const FusedGroup& grp) {
  std::vector<int64_t> space;
  int64_t points = -1;
  for (OpId o : grp.members) {
    const graph::Op& op = g.op(o);
    const std::vector<int64_t>& out = g.tensor(op.outputs[0]).shape;
    if (costmodel::CpuElementwiseKind(op) && Elements(out) > points) {
      points = Elements(out);
      space = out;
    }
  }
  if (points >= 0) return space;
  const graph::Op& op = g.op(grp.members[0]);
  return ReduceKindOf(op) ? g.tensor(op.inputs[0]).shape : g.tensor(op.outputs[0]).shape;
}

// The inputs of `op` the program reads.
std::vector<int> Operands(const graph::Op& op) {
  if (std::optional<EwMapping> m = EwMappingOf(op)) return m->operands;
  return {0};  // reshape-like, reduction: the data input (shape/axes inputs are static)
}

}  // namespace

absl::StatusOr<FusedCpuKernel> MakeElementwiseKernel(const graph::Graph& g, const FusedGroup& grp,
                                                     std::shared_ptr<TensorSlots> owned,
                                                     TensorSlots* slots) {
  EwProgram p;
  p.shape = Space(g, grp);
  const int64_t points = Elements(p.shape);
  std::map<TensorId, OpId> produced;  // group-internal values
  for (OpId o : grp.members) {
    for (TensorId t : g.op(o).outputs) produced[t] = o;
  }

  // Registers 0..n-1: the inputs from outside, in order of first use.
  std::map<TensorId, int> reg;
  std::vector<TensorId> ext;
  std::vector<bool> as_space;  // handed over reshaped to S
  for (OpId o : grp.members) {
    const graph::Op& op = g.op(o);
    if (op.inputs.empty() || op.outputs.size() != 1) return Error(op, "is no one-output op");
    for (int i : Operands(op)) {
      const TensorId t = op.inputs[i];
      if (produced.count(t) || reg.count(t)) continue;
      reg[t] = static_cast<int>(ext.size());
      ext.push_back(t);
      const std::vector<int64_t>& shape = g.tensor(t).shape;
      const bool flat = g.tensor(t).NumElements() == points;
      as_space.push_back(flat && shape != p.shape);
      p.inputs.push_back(flat ? p.shape : shape);
    }
  }

  // One instruction per elementwise member, in topological order.
  for (OpId o : grp.members) {
    const graph::Op& op = g.op(o);
    const TensorId out = op.outputs[0];
    if (std::optional<EwMapping> m = EwMappingOf(op)) {
      if (g.tensor(out).shape != p.shape) {
        return Error(op, absl::StrCat("computes ", graph::ShapeString(g.tensor(out).shape),
                                      ", not the kernel's ", graph::ShapeString(p.shape)));
      }
      EwInstr in{m->code};
      in.p0 = m->p0;
      in.p1 = m->p1;
      int* slots_of[3] = {&in.a, &in.b, &in.c};
      for (size_t k = 0; k < m->operands.size(); ++k)
        *slots_of[k] = reg.at(op.inputs[m->operands[k]]);
      reg[out] = p.num_registers();
      p.instrs.push_back(in);
    } else if (ReshapeLike(op)) {
      if (g.tensor(out).NumElements() != points || g.tensor(op.inputs[0]).NumElements() != points) {
        return Error(op, "reshapes another size than the kernel's");
      }
      reg[out] = reg.at(op.inputs[0]);
    } else if (!ReduceKindOf(op)) {
      return absl::UnimplementedError(
          absl::StrCat("fused CPU kernel: ", OpLabel(op), " has no tile-interpreter form"));
    }
  }

  // Outputs: escaping values whole, reductions reduced.
  for (TensorId t : grp.escaping) {
    const graph::Op& op = g.op(g.tensor(t).producer);
    const std::vector<int64_t>& shape = g.tensor(t).shape;
    EwOutput eo;
    if (std::optional<ReduceKind> kind = ReduceKindOf(op)) {
      const std::vector<int64_t>& in_shape = g.tensor(op.inputs[0]).shape;
      if (in_shape != p.shape) {
        return Error(op, absl::StrCat("reduces ", graph::ShapeString(in_shape),
                                      ", not the kernel's ", graph::ShapeString(p.shape)));
      }
      std::vector<int64_t> axes = graph::ReduceAxes(op, in_shape, shape);
      std::sort(axes.begin(), axes.end());
      axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
      std::vector<int64_t> kept = in_shape;
      for (int64_t ax : axes) {
        if (ax < 0 || ax >= static_cast<int64_t>(kept.size()))
          return Error(op, "has an axis out of range");
        kept[ax] = 1;
        eo.axes.push_back(static_cast<int>(ax));
      }
      if (Elements(kept) != Elements(shape)) {
        return Error(op, absl::StrCat("reduces to ", graph::ShapeString(kept), ", the graph says ",
                                      graph::ShapeString(shape)));
      }
      eo.reg = reg.at(op.inputs[0]);
      // Reducing over no axis is a copy (the graph's output is its input).
      eo.reduce = eo.axes.empty() ? ReduceKind::kNone : *kind;
    } else {
      if (Elements(shape) != points) return Error(op, "writes another size than the kernel's");
      eo.reg = reg.at(t);
    }
    p.outputs.push_back(std::move(eo));
  }

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
