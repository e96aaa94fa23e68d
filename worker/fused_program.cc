#include "worker/fused_program.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "costmodel/fusion_backend.h"
#include "graph/op_attrs.h"
#include "graph/op_kind.h"

namespace braid::worker {
namespace {

using graph::OpId;
using graph::TensorId;
using kernels::EwCode;
using kernels::EwInstr;
using kernels::EwOutput;
using kernels::EwProgram;
using kernels::ReduceKind;
using K = graph::OpKind;

std::string OpLabel(const graph::Op& op) {
  return absl::StrCat("op '", op.name, "' (", op.type, ")");
}

// Members in topological order: Kahn's algorithm over the in-group edges,
// ties by id, so the order (and the outputs' order) is deterministic.
absl::StatusOr<std::vector<OpId>> TopoOrder(const graph::Graph& g, const std::vector<OpId>& ops) {
  std::map<OpId, int> indegree;
  for (OpId o : ops) indegree[o] = 0;
  for (OpId o : ops) {
    for (OpId p : g.Predecessors(o)) {
      if (indegree.count(p)) ++indegree[o];
    }
  }
  std::vector<OpId> ready, order;
  for (auto& [o, d] : indegree) {
    if (d == 0) ready.push_back(o);
  }
  while (!ready.empty()) {
    std::sort(ready.begin(), ready.end(), std::greater<>());
    const OpId o = ready.back();
    ready.pop_back();
    order.push_back(o);
    for (OpId s : g.Successors(o)) {
      auto it = indegree.find(s);
      if (it != indegree.end() && --it->second == 0) ready.push_back(s);
    }
  }
  if (order.size() != ops.size()) {
    return absl::InvalidArgumentError("fused CPU kernel: the group's members form a cycle");
  }
  return order;
}

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

std::optional<EwMapping> EwMappingOf(const graph::Op& op) {
  // The backend's predicate decides which ops are elementwise members (and
  // with which arity): this function only says how each one is computed.
  if (!costmodel::CpuElementwiseKind(op)) return std::nullopt;
  auto m = [](EwCode code, std::vector<int> operands, float p0 = 0,
              float p1 = 0) -> std::optional<EwMapping> {
    return EwMapping{code, p0, p1, std::move(operands)};
  };
  // Defaults as the single-op kernels read them (cpu_kernels_forward.cc,
  // cpu_kernels_backward.cc).
  const float leaky_alpha = static_cast<float>(op.GetFloat("alpha", 0.01));
  const float elu_alpha = static_cast<float>(op.GetFloat("alpha", 1.0));
  const bool gelu_tanh = op.GetString("approximate", "none") == "tanh";
  switch (op.kind) {
    case K::kAdd: return m(EwCode::kAdd, {0, 1});
    case K::kSub: return m(EwCode::kSub, {0, 1});
    case K::kMul: return m(EwCode::kMul, {0, 1});
    case K::kDiv: return m(EwCode::kDiv, {0, 1});
    case K::kPow: return m(EwCode::kPow, {0, 1});
    case K::kMin: return m(EwCode::kMin, {0, 1});
    case K::kMax: return m(EwCode::kMax, {0, 1});
    case K::kPRelu: return m(EwCode::kPRelu, {0, 1});
    case K::kNeg: return m(EwCode::kNeg, {0});
    case K::kAbs: return m(EwCode::kAbs, {0});
    case K::kRelu: return m(EwCode::kRelu, {0});
    case K::kLeakyRelu: return m(EwCode::kLeakyRelu, {0}, leaky_alpha);
    case K::kSqrt: return m(EwCode::kSqrt, {0});
    case K::kReciprocal: return m(EwCode::kReciprocal, {0});
    case K::kExp: return m(EwCode::kExp, {0});
    case K::kLog: return m(EwCode::kLog, {0});
    case K::kTanh: return m(EwCode::kTanh, {0});
    case K::kSigmoid: return m(EwCode::kSigmoid, {0});
    case K::kErf: return m(EwCode::kErf, {0});
    case K::kSoftplus: return m(EwCode::kSoftplus, {0});
    case K::kSin: return m(EwCode::kSin, {0});
    case K::kCos: return m(EwCode::kCos, {0});
    case K::kElu: return m(EwCode::kElu, {0}, elu_alpha);
    case K::kSelu: return m(EwCode::kSelu, {0});
    case K::kHardSwish: return m(EwCode::kHardSwish, {0});
    case K::kSoftsign: return m(EwCode::kSoftsign, {0});
    case K::kFloor: return m(EwCode::kFloor, {0});
    case K::kCeil: return m(EwCode::kCeil, {0});
    case K::kRound: return m(EwCode::kRound, {0});
    case K::kSign: return m(EwCode::kSign, {0});
    case K::kGelu: return m(gelu_tanh ? EwCode::kGeluTanh : EwCode::kGelu, {0});
    // Gradients (dY, saved): a = dY, b = the saved tensor, whichever the
    // training builder saved (graph/training_rules.cc UnaryGradRule); the
    // formulas take the same argument the single-op kernels take.
    case K::kReluGrad: return m(EwCode::kReluGrad, {0, 1});
    case K::kLeakyReluGrad: return m(EwCode::kLeakyReluGrad, {0, 1}, leaky_alpha);
    case K::kGeluGrad: return m(gelu_tanh ? EwCode::kGeluTanhGrad : EwCode::kGeluGrad, {0, 1});
    case K::kSigmoidGrad: return m(EwCode::kSigmoidGrad, {0, 1});
    case K::kTanhGrad: return m(EwCode::kTanhGrad, {0, 1});
    case K::kEluGrad: return m(EwCode::kEluGrad, {0, 1}, elu_alpha);
    case K::kSoftplusGrad: return m(EwCode::kSoftplusGrad, {0, 1});
    case K::kHardSwishGrad: return m(EwCode::kHardSwishGrad, {0, 1});
    case K::kExpGrad: return m(EwCode::kMul, {0, 1});  // dY * Y
    case K::kLogGrad: return m(EwCode::kDiv, {0, 1});  // dY / X
    case K::kSqrtGrad: return m(EwCode::kSqrtGrad, {0, 1});
    case K::kReciprocalGrad: return m(EwCode::kReciprocalGrad, {0, 1});
    case K::kAbsGrad: return m(EwCode::kAbsGrad, {0, 1});
    case K::kErfGrad: return m(EwCode::kErfGrad, {0, 1});
    case K::kSinGrad: return m(EwCode::kSinGrad, {0, 1});
    case K::kCosGrad: return m(EwCode::kCosGrad, {0, 1});
    case K::kNegGrad: return m(EwCode::kNeg, {0});             // -dY; a saved input is unused
    case K::kDivGrad: return m(EwCode::kDivGradB, {0, 1, 2});  // (dY, Y, B)
    case K::kMinGrad:                                          // (dY, X_i, Y)
    case K::kMaxGrad: return m(EwCode::kEqualMask, {0, 1, 2});
    case K::kMeanGrad:  // dY / count, as dY * (1 / count): within an ulp
      return m(EwCode::kAffine, {0},
               static_cast<float>(
                   1.0 / static_cast<double>(std::max<int64_t>(op.GetInt("count", 2), 1))));
    default: return std::nullopt;
  }
}

std::optional<kernels::EwCode> EwCodeOf(const graph::Op& op) {
  std::optional<EwMapping> m = EwMappingOf(op);
  if (!m) return std::nullopt;
  return m->code;
}

absl::StatusOr<FusedGroup> AnalyzeGroup(const graph::Graph& g, std::span<const OpId> ops) {
  std::vector<OpId> sorted(ops.begin(), ops.end());
  FusedGroup grp;
  ASSIGN_OR_RETURN(grp.members, TopoOrder(g, sorted));
  for (OpId o : grp.members) {
    for (TensorId t : g.op(o).outputs) {
      if (graph::LeavesGroup(g, t, [&](OpId c) {
            return std::binary_search(sorted.begin(), sorted.end(), c);
          })) {
        grp.escaping.push_back(t);
      }
    }
  }
  return grp;
}

absl::StatusOr<ElementwiseProgram> BuildElementwiseProgram(const graph::Graph& g,
                                                           const FusedGroup& grp) {
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
    } else if (costmodel::CpuReshapeKind(op)) {
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

  ElementwiseProgram out;
  out.program = std::move(p);
  out.inputs = std::move(ext);
  out.as_space = std::move(as_space);
  return out;
}

}  // namespace braid::worker
