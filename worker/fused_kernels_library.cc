// A library op (MatMul/Gemm, 2-D Conv) and its chain of post-ops as one
// oneDNN primitive (kernels/cpu/onednn_fused.h).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/op_attrs.h"
#include "graph/op_kind.h"
#include "kernels/cpu/onednn_fused.h"
#include "worker/fused_kernels.h"

namespace braid::worker::internal {
namespace {

using graph::OpId;
using graph::TensorId;
using kernels::EwCode;
using kernels::cpu::ConvSpec;
using kernels::cpu::MatMulSpec;
using kernels::cpu::OneDnnConv;
using kernels::cpu::OneDnnMatMul;
using kernels::cpu::PostOp;
using K = graph::OpKind;

// The shape oneDNN is told: a rank-0 scalar as [1] (onednn_fused.h takes a
// rank-0 tensor for a [1] operand).
std::vector<int64_t> SpecShape(const graph::Tensor& t) {
  return t.shape.empty() ? std::vector<int64_t>{1} : t.shape;
}

// oneDNN's error (Unimplemented: no optimized kernel; InvalidArgument: bad
// shapes) with the op it was building for.
absl::Status Prefixed(const absl::Status& s, const graph::Op& op) {
  return absl::Status(s.code(), absl::StrCat("fused CPU kernel: ", OpLabel(op), ": ", s.message()));
}

struct PostOps {
  std::vector<PostOp> ops;
  std::vector<std::vector<int64_t>> extra_shapes;
  std::vector<TensorId> extras;  // the binary operands, from outside the group
};

// The chain after the library op, in order: CanImplement has checked it is a
// single chain whose binary members read one operand from outside.
absl::StatusOr<PostOps> ChainPostOps(const graph::Graph& g, const FusedGroup& grp) {
  PostOps p;
  TensorId cur = g.op(grp.members[0]).outputs[0];
  for (size_t i = 1; i < grp.members.size(); ++i) {
    const graph::Op& op = g.op(grp.members[i]);
    std::optional<EwMapping> m = EwMappingOf(op);
    if (!m) {
      return absl::UnimplementedError(
          absl::StrCat("fused CPU kernel: ", OpLabel(op), " has no EwCode for a post-op"));
    }
    if (!kernels::cpu::OneDnnPostOpSupported(m->code)) {
      return absl::UnimplementedError(absl::StrCat("fused CPU kernel: ", OpLabel(op), " (",
                                                   std::string(kernels::EwName(m->code)),
                                                   ") is no oneDNN 2.6 post-op"));
    }
    PostOp po{m->code, m->p0, m->p1, -1};
    if (m->operands.size() == 2) {
      // dst = dst op src1: the chain value is the left operand (CanImplement
      // refuses Sub/Div with it on the right; the others commute).
      const int other = op.inputs[m->operands[0]] == cur ? m->operands[1] : m->operands[0];
      if (other == m->operands[0] && (m->code == EwCode::kSub || m->code == EwCode::kDiv)) {
        return absl::UnimplementedError(
            absl::StrCat("fused CPU kernel: ", OpLabel(op), " takes the chain value on the right"));
      }
      if (op.inputs[other] == cur) {
        return absl::InvalidArgumentError(
            absl::StrCat("fused CPU kernel: ", OpLabel(op), " reads the chain value twice"));
      }
      po.extra = static_cast<int>(p.extras.size());
      p.extras.push_back(op.inputs[other]);
      p.extra_shapes.push_back(SpecShape(g.tensor(op.inputs[other])));
    } else if (m->operands.size() != 1 || op.inputs[m->operands[0]] != cur) {
      return absl::InvalidArgumentError(
          absl::StrCat("fused CPU kernel: ", OpLabel(op), " is not on the post-op chain"));
    }
    p.ops.push_back(po);
    cur = op.outputs[0];
  }
  return p;
}

// The shape the primitive computes must be the graph tensor's: the chain's
// binary members keep it (CanImplement), unary ones always do.
absl::Status CheckOutput(const graph::Graph& g, const FusedGroup& grp,
                         const std::vector<int64_t>& y) {
  const graph::Op& lib = g.op(grp.members[0]);
  const std::vector<int64_t>& want = g.tensor(lib.outputs[0]).shape;
  if (y != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("fused CPU kernel: ", OpLabel(lib), " computes [", absl::StrJoin(y, ","),
                     "] with oneDNN, the graph says ", graph::ShapeString(want)));
  }
  const TensorId end = g.op(grp.members.back()).outputs[0];
  if (g.tensor(end).shape != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("fused CPU kernel: the post-op chain ends in '", g.tensor(end).name,
                     "' of shape ", graph::ShapeString(g.tensor(end).shape),
                     ", not the library op's ", graph::ShapeString(want)));
  }
  return absl::OkStatus();
}

std::vector<at::Tensor> Slots(const graph::Graph& g, const std::vector<TensorId>& ids,
                              TensorSlots* slots) {
  std::vector<at::Tensor> out;
  for (TensorId t : ids) out.push_back(slots->Get(t, g.tensor(t)));
  return out;
}

absl::StatusOr<FusedCpuKernel> MatMulKernel(const graph::Graph& g, const FusedGroup& grp,
                                            PostOps post, std::shared_ptr<TensorSlots> owned,
                                            TensorSlots* slots) {
  const graph::Op& op = g.op(grp.members[0]);
  const bool gemm = op.kind == K::kGemm;
  if (op.inputs.size() < 2 || op.inputs.size() > (gemm ? 3u : 2u)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fused CPU kernel: ", OpLabel(op), " has ", op.inputs.size(), " inputs"));
  }
  MatMulSpec s;
  s.a = g.tensor(op.inputs[0]).shape;
  s.b = g.tensor(op.inputs[1]).shape;
  if (s.a.size() < 2 || s.b.size() < 2) {
    // The training builder refuses 1-D MatMul operands too (MatMulRule).
    return absl::UnimplementedError(absl::StrCat("fused CPU kernel: ", OpLabel(op),
                                                 " has a 1-D operand; oneDNN's matmul takes 2-D"));
  }
  // As cpu_kernels_forward.cc reads them (the training builder's backward
  // MatMuls carry transA/transB too).
  s.trans_a = op.GetInt("transA", 0) != 0;
  s.trans_b = op.GetInt("transB", 0) != 0;
  if (gemm) {
    s.alpha = static_cast<float>(op.GetFloat("alpha", 1.0));
    s.beta = static_cast<float>(op.GetFloat("beta", 1.0));
    if (op.inputs.size() == 3) s.c = SpecShape(g.tensor(op.inputs[2]));
  }
  s.extras = post.extra_shapes;
  s.post_ops = post.ops;
  absl::StatusOr<std::shared_ptr<const OneDnnMatMul>> got = OneDnnMatMul::Get(s);
  if (!got.ok()) return Prefixed(got.status(), op);
  std::shared_ptr<const OneDnnMatMul> mm = *std::move(got);
  RETURN_IF_ERROR(CheckOutput(g, grp, mm->output_shape()));

  at::Tensor a = slots->Get(op.inputs[0], g.tensor(op.inputs[0]));
  at::Tensor b = slots->Get(op.inputs[1], g.tensor(op.inputs[1]));
  std::optional<at::Tensor> c;
  if (gemm && op.inputs.size() == 3) c = slots->Get(op.inputs[2], g.tensor(op.inputs[2]));
  std::vector<at::Tensor> extras = Slots(g, post.extras, slots);
  FusedCpuKernel k;
  k.kind = "onednn-matmul+post-ops";
  k.detail = mm->impl();
  k.outputs = grp.escaping;
  SetRun(
      g,
      [mm, a, b, c, extras, owned]() -> absl::StatusOr<std::vector<at::Tensor>> {
        ASSIGN_OR_RETURN(at::Tensor y, mm->Run(a, b, c ? &*c : nullptr, extras));
        return std::vector<at::Tensor>{std::move(y)};
      },
      &k);
  return k;
}

absl::StatusOr<FusedCpuKernel> ConvKernel(const graph::Graph& g, const FusedGroup& grp,
                                          PostOps post, std::shared_ptr<TensorSlots> owned,
                                          TensorSlots* slots) {
  const graph::Op& op = g.op(grp.members[0]);
  if (op.inputs.size() < 2 || op.inputs.size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("fused CPU kernel: ", OpLabel(op), " has ", op.inputs.size(), " inputs"));
  }
  ConvSpec s;
  s.x = g.tensor(op.inputs[0]).shape;
  s.w = g.tensor(op.inputs[1]).shape;
  const std::vector<int64_t>& y = g.tensor(op.outputs[0]).shape;
  if (s.x.size() != 4 || s.w.size() != 4 || y.size() != 4) {
    return absl::UnimplementedError(absl::StrCat("fused CPU kernel: ", OpLabel(op),
                                                 " is not a 2-D convolution (X, W, Y of rank 4)"));
  }
  s.has_bias = op.inputs.size() == 3;
  // Attributes resolved as the single-op kernel resolves them
  // (cpu_kernels_forward.cc Conv): pads from `pads` or auto_pad.
  s.strides = graph::IntsOr(op, "strides", 2, 1);
  s.dilations = graph::IntsOr(op, "dilations", 2, 1);
  const std::vector<int64_t> pads = graph::ResolvePads(op, {s.x[2], s.x[3]}, {y[2], y[3]},
                                                       {s.w[2], s.w[3]}, s.strides, s.dilations);
  s.pads_begin = {pads[0], pads[1]};
  s.pads_end = {pads[2], pads[3]};
  s.groups = op.GetInt("group", 1);
  s.extras = post.extra_shapes;
  s.post_ops = post.ops;
  absl::StatusOr<std::shared_ptr<const OneDnnConv>> got = OneDnnConv::Get(s);
  if (!got.ok()) return Prefixed(got.status(), op);
  std::shared_ptr<const OneDnnConv> conv = *std::move(got);
  RETURN_IF_ERROR(CheckOutput(g, grp, conv->output_shape()));

  at::Tensor x = slots->Get(op.inputs[0], g.tensor(op.inputs[0]));
  at::Tensor w = slots->Get(op.inputs[1], g.tensor(op.inputs[1]));
  std::optional<at::Tensor> bias;
  if (s.has_bias) bias = slots->Get(op.inputs[2], g.tensor(op.inputs[2]));
  std::vector<at::Tensor> extras = Slots(g, post.extras, slots);
  FusedCpuKernel k;
  k.kind = "onednn-conv+post-ops";
  k.detail = absl::StrCat(conv->impl(), " ", conv->layout());
  k.outputs = grp.escaping;
  SetRun(
      g,
      [conv, x, w, bias, extras, owned]() -> absl::StatusOr<std::vector<at::Tensor>> {
        ASSIGN_OR_RETURN(at::Tensor y, conv->Run(x, w, bias ? &*bias : nullptr, extras));
        return std::vector<at::Tensor>{std::move(y)};
      },
      &k);
  return k;
}

}  // namespace

absl::StatusOr<FusedCpuKernel> MakeLibraryKernel(const graph::Graph& g, const FusedGroup& grp,
                                                 std::shared_ptr<TensorSlots> owned,
                                                 TensorSlots* slots) {
  const graph::Op& lib = g.op(grp.members[0]);
  if (!graph::IsLibraryKind(lib.kind)) {
    return absl::InternalError(
        absl::StrCat("fused CPU kernel: ", OpLabel(lib), " heads the group but is no library op"));
  }
  // Only the chain end leaves the primitive (CanImplement: intermediate
  // results must not escape).
  if (grp.escaping != std::vector<TensorId>{g.op(grp.members.back()).outputs[0]}) {
    return absl::InternalError("fused CPU kernel: a post-op chain writes only its last value");
  }
  ASSIGN_OR_RETURN(PostOps post, ChainPostOps(g, grp));
  if (lib.kind == K::kConv) return ConvKernel(g, grp, std::move(post), std::move(owned), slots);
  if (lib.kind == K::kMatMul || lib.kind == K::kGemm) {
    return MatMulKernel(g, grp, std::move(post), std::move(owned), slots);
  }
  return absl::UnimplementedError(
      absl::StrCat("fused CPU kernel: ", OpLabel(lib), " has no oneDNN primitive with post-ops"));
}

}  // namespace braid::worker::internal
