// Backward rules of the training-graph builder, one per forward op family.
// See graph/training.cc for the conventions they follow.
//
// Each rule runs once per active forward op (some output has a gradient, some
// input needs one) and contributes exactly one gradient per input slot i with
// Needs(op, i). `op` is a copy: emitting ops reallocates the op list.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "base/status_macros.h"
#include "graph/internal/training_builder.h"
#include "graph/ops.h"

namespace braid::graph::internal {
namespace {
std::string SlotBase(const Op& op, size_t slot) { return absl::StrCat(op.name, ".grad.in", slot); }

// The op type of the "<Type>Grad" op a rule emits for `op` (graph/op_kind.h).
// Rules are registered only for kinds that have one.
std::string GradType(const Op& op) {
  const OpKind k = GradientKindOf(op.kind);
  CHECK(k != OpKind::kOpaque) << op.type << " has no <Type>Grad kind";
  return std::string(OpKindName(k));
}
}  // namespace

// Add, Sum, Identity: the gradient passes through, summed over broadcast dims.
// The first same-shaped slot takes over ownership of the upstream tensor.
absl::Status TrainingBuilder::PassThroughRule(const Op& op) {
  Grad dy = OutGrad(op, 0);
  bool owned = dy.owned;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (!Needs(op, i)) continue;
    if (g_.tensor(op.inputs[i]).shape == g_.tensor(dy.id).shape) {
      Contribute(op, op.inputs[i], {dy.id, owned});
      owned = false;
    } else {
      RETURN_IF_ERROR(ContributeToShape(op, i, {dy.id, false}, SlotBase(op, i)));
    }
  }
  return absl::OkStatus();
}

// A forward collective of a per-device graph (search/parallel_graph.h): its
// adjoint moves the same bytes the other way. AllGather <-> ReduceScatter
// (the gradient of a gathered tensor is summed back onto its pieces),
// AllReduce of partial sums -> AllReduce (Megatron's g/f pair), AllToAll ->
// AllToAll, Broadcast -> AllReduce. Attributes (group_size, comm_time_s) are
// kept.
absl::Status TrainingBuilder::CollectiveRule(const Op& op) {
  std::string type;
  switch (op.kind) {
    case OpKind::kAllGather: type = "ReduceScatter"; break;
    case OpKind::kReduceScatter: type = "AllGather"; break;
    case OpKind::kAllReduce: type = "AllReduce"; break;
    case OpKind::kAllToAll: type = "AllToAll"; break;
    case OpKind::kBroadcast: type = "AllReduce"; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("collective '", op.name, "' (", op.type, ") has no backward"));
  }
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, type, {OutGrad(op, 0).id}, dx, op.attrs);
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

absl::Status TrainingBuilder::SubRule(const Op& op) {
  Grad dy = OutGrad(op, 0);
  if (Needs(op, 0)) {
    // Slot 1 only reads dY, so slot 0 may take it over.
    RETURN_IF_ERROR(ContributeToShape(op, 0, dy, SlotBase(op, 0)));
  }
  if (Needs(op, 1)) {
    const std::string base = SlotBase(op, 1);
    ASSIGN_OR_RETURN(auto r, ToShape(base, {dy.id, false}, op.inputs[1]));
    TensorId n = Like(base, op.inputs[1]);
    Emit1(base + ".neg", "Neg", {r.id}, n);
    Contribute(op, op.inputs[1], {n, true});
  }
  return absl::OkStatus();
}

// Binary ops below emit a gradient of the forward output's shape, then sum it
// down to the input's shape (numpy broadcasting).
absl::Status TrainingBuilder::MulRule(const Op& op) {
  const TensorId dy = OutGrad(op, 0).id;
  for (size_t i = 0; i < 2; ++i) {
    if (!Needs(op, i)) continue;
    const std::string base = SlotBase(op, i);
    TensorId m = NewTensor(base, g_.tensor(op.outputs[0]).shape, g_.tensor(op.inputs[i]).dtype);
    Emit1(base, "Mul", {dy, op.inputs[1 - i]}, m);
    RETURN_IF_ERROR(ContributeToShape(op, i, {m, true}, base));
  }
  return absl::OkStatus();
}

absl::Status TrainingBuilder::DivRule(const Op& op) {
  const TensorId dy = OutGrad(op, 0).id;
  for (size_t i = 0; i < 2; ++i) {
    if (!Needs(op, i)) continue;
    const std::string base = SlotBase(op, i);
    TensorId m = NewTensor(base, g_.tensor(op.outputs[0]).shape, g_.tensor(op.inputs[i]).dtype);
    if (i == 0) {
      Emit1(base, "Div", {dy, op.inputs[1]}, m);  // dA = dY / B
    } else {
      Emit1(base, "DivGrad", {dy, op.outputs[0], op.inputs[1]}, m);  // dB = -dY * Y / B
    }
    RETURN_IF_ERROR(ContributeToShape(op, i, {m, true}, base));
  }
  return absl::OkStatus();
}

// Pow, Min, Max, Mean, Where: a <Type>Grad op per input slot ("input_index").
absl::Status TrainingBuilder::BinaryGradOpRule(const Op& op) {
  const TensorId dy = OutGrad(op, 0).id;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (!Needs(op, i)) continue;
    const std::string base = SlotBase(op, i);
    std::vector<TensorId> in = {dy};
    Attrs attrs = {{"input_index", static_cast<int64_t>(i)}};
    if (op.kind == OpKind::kPow) in.insert(in.end(), {op.inputs[0], op.inputs[1]});
    if (op.kind == OpKind::kMin || op.kind == OpKind::kMax) {
      in.insert(in.end(), {op.inputs[i], op.outputs[0]});
    }
    if (op.kind == OpKind::kWhere) in.push_back(op.inputs[0]);
    if (op.kind == OpKind::kMean) attrs["count"] = static_cast<int64_t>(op.inputs.size());
    TensorId m = NewTensor(base, g_.tensor(op.outputs[0]).shape, g_.tensor(op.inputs[i]).dtype);
    Emit1(base, GradType(op), std::move(in), m, std::move(attrs));
    RETURN_IF_ERROR(ContributeToShape(op, i, {m, true}, base));
  }
  return absl::OkStatus();
}

// Pointwise activations and softmax: <Type>Grad(dY, saved) where saved is the
// forward output when the derivative is a function of it, else the input.
absl::Status TrainingBuilder::UnaryGradRule(const Op& op) {
  static const auto* from_output = new std::set<OpKind>{
      OpKind::kRelu, OpKind::kSigmoid,    OpKind::kTanh,    OpKind::kExp,
      OpKind::kSqrt, OpKind::kReciprocal, OpKind::kSoftmax, OpKind::kLogSoftmax};
  const TensorId saved = from_output->count(op.kind) != 0 ? op.outputs[0] : op.inputs[0];
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, GradType(op), {OutGrad(op, 0).id, saved}, dx, op.attrs);
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

absl::Status TrainingBuilder::NegRule(const Op& op) {
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, "Neg", {OutGrad(op, 0).id}, dx);
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

absl::Status TrainingBuilder::CastRule(const Op& op) {
  Grad dy = OutGrad(op, 0);
  const DType to = g_.tensor(op.inputs[0]).dtype;
  if (g_.tensor(dy.id).dtype == to) {
    Contribute(op, op.inputs[0], dy);
    return absl::OkStatus();
  }
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, "Cast", {dy.id}, dx, {{"to", OnnxDTypeCode(to)}});
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

// DropoutGrad multiplies by the mask (output 1) when the graph has it; without
// one the mask is regenerated from the seed and the forward op's name
// (attribute "mask_of"), as fused dropout kernels do.
absl::Status TrainingBuilder::DropoutRule(const Op& op) {
  const std::string base = absl::StrCat(op.name, ".grad");
  std::vector<TensorId> in = {OutGrad(op, 0).id};
  if (op.outputs.size() >= 2) in.push_back(op.outputs[1]);
  TensorId dx = Like(base, op.inputs[0]);
  Attrs attrs = op.attrs;
  if (op.outputs.size() < 2) attrs["mask_of"] = op.name;
  Emit1(base, "DropoutGrad", std::move(in), dx, std::move(attrs));
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

// Normalizations and PRelu: one <Type>Grad(dY, X, scale) op whose outputs are
// the gradients of the forward inputs listed in "grad_inputs".
absl::Status TrainingBuilder::MultiGradRule(const Op& op) {
  std::vector<TensorId> in = {OutGrad(op, 0).id};
  for (size_t i = 0; i < op.inputs.size() && i < 2; ++i) in.push_back(op.inputs[i]);
  std::vector<int64_t> slots;
  std::vector<TensorId> outs;
  const std::string base = absl::StrCat(op.name, ".grad");
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (!Needs(op, i)) continue;
    slots.push_back(static_cast<int64_t>(i));
    outs.push_back(Like(SlotBase(op, i), op.inputs[i]));
  }
  Attrs attrs = op.attrs;
  attrs["grad_inputs"] = slots;
  g_.AddOp(UniqueName(op_names_, base), GradType(op), std::move(in), outs,
           std::move(attrs), Phase::kBackward);
  for (size_t k = 0; k < slots.size(); ++k) Contribute(op, op.inputs[slots[k]], {outs[k], true});
  return absl::OkStatus();
}

absl::Status TrainingBuilder::PoolRule(const Op& op) {
  std::vector<TensorId> in = {OutGrad(op, 0).id};
  if (op.kind == OpKind::kMaxPool || op.kind == OpKind::kGlobalMaxPool) {
    in.push_back(op.inputs[0]);
  }
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, GradType(op), std::move(in), dx, op.attrs);
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

absl::Status TrainingBuilder::ReduceRule(const Op& op) {
  std::vector<TensorId> in = {OutGrad(op, 0).id};
  if (op.kind == OpKind::kReduceMax || op.kind == OpKind::kReduceMin) {
    in.insert(in.end(), {op.inputs[0], op.outputs[0]});
  }
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, GradType(op), std::move(in), dx, op.attrs);
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

// Reshape, Flatten, Squeeze, Unsqueeze: reshape the gradient back.
absl::Status TrainingBuilder::ReshapeRule(const Op& op) {
  Grad dy = OutGrad(op, 0);
  const std::vector<int64_t> xs = g_.tensor(op.inputs[0]).shape;
  if (g_.tensor(dy.id).shape == xs) {
    Contribute(op, op.inputs[0], dy);
    return absl::OkStatus();
  }
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, "Reshape", {dy.id}, dx, {{"shape", xs}});
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

absl::Status TrainingBuilder::TransposeRule(const Op& op) {
  const int64_t rank = static_cast<int64_t>(g_.tensor(op.inputs[0]).shape.size());
  std::vector<int64_t> perm = op.GetInts("perm");
  if (perm.empty()) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  std::vector<int64_t> inv(perm.size(), 0);
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= rank) {
      return absl::InvalidArgumentError(absl::StrCat("Transpose '", op.name, "' has a bad perm"));
    }
    inv[perm[i]] = static_cast<int64_t>(i);
  }
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, "Transpose", {OutGrad(op, 0).id}, dx, {{"perm", inv}});
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

absl::Status TrainingBuilder::ExpandRule(const Op& op) {
  return ContributeToShape(op, 0, OutGrad(op, 0), absl::StrCat(op.name, ".grad"));
}

absl::Status TrainingBuilder::TileRule(const Op& op) {
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, "TileGrad", {OutGrad(op, 0).id}, dx);
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

// Concat: one Split when every input needs a gradient, else a Slice per input.
absl::Status TrainingBuilder::ConcatRule(const Op& op) {
  Grad dy = OutGrad(op, 0);
  if (op.inputs.size() == 1) {
    Contribute(op, op.inputs[0], dy);
    return absl::OkStatus();
  }
  const int64_t rank = static_cast<int64_t>(g_.tensor(op.outputs[0]).shape.size());
  int64_t axis = op.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  std::vector<int64_t> sizes;
  bool all = true;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    sizes.push_back(g_.tensor(op.inputs[i]).shape[axis]);
    all = all && Needs(op, i);
  }
  const std::string base = absl::StrCat(op.name, ".grad");
  if (all) {
    std::vector<TensorId> outs;
    for (size_t i = 0; i < op.inputs.size(); ++i)
      outs.push_back(Like(SlotBase(op, i), op.inputs[i]));
    g_.AddOp(UniqueName(op_names_, base), "Split", {dy.id}, outs,
             {{"axis", axis}, {"split", sizes}}, Phase::kBackward);
    for (size_t i = 0; i < op.inputs.size(); ++i) Contribute(op, op.inputs[i], {outs[i], true});
    return absl::OkStatus();
  }
  int64_t offset = 0;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (Needs(op, i)) {
      TensorId dx = Like(SlotBase(op, i), op.inputs[i]);
      Emit1(SlotBase(op, i), "Slice", {dy.id}, dx,
            {{"starts", std::vector<int64_t>{offset}},
             {"ends", std::vector<int64_t>{offset + sizes[i]}},
             {"axes", std::vector<int64_t>{axis}}});
      Contribute(op, op.inputs[i], {dx, true});
    }
    offset += sizes[i];
  }
  return absl::OkStatus();
}

// Split: concatenate the output gradients, zeros for outputs without one.
absl::Status TrainingBuilder::SplitRule(const Op& op) {
  const int64_t rank = static_cast<int64_t>(g_.tensor(op.inputs[0]).shape.size());
  int64_t axis = op.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  const std::string base = absl::StrCat(op.name, ".grad");
  std::vector<TensorId> parts;
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    Grad g = OutGrad(op, i);
    if (g.id == kNoId) {
      g.id = Like(absl::StrCat(base, ".zeros"), op.outputs[i]);
      Emit1(absl::StrCat(base, ".zeros"), "ConstantOfShape", {}, g.id,
            {{"value", 0.0}, {"shape", g_.tensor(op.outputs[i]).shape}});
    }
    parts.push_back(g.id);
  }
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, "Concat", parts, dx, {{"axis", axis}});
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

// Slice: pad the gradient back with zeros. The pads are known when the slice
// bounds are attributes (unit steps); otherwise only the output shape is.
absl::Status TrainingBuilder::SliceRule(const Op& op) {
  const std::vector<int64_t> xs = g_.tensor(op.inputs[0]).shape;
  const std::vector<int64_t> starts = op.GetInts("starts");
  const std::vector<int64_t> ends = op.GetInts("ends");
  std::vector<int64_t> axes = op.GetInts("axes");
  const std::vector<int64_t> steps = op.GetInts("steps");
  Attrs attrs = {{"mode", std::string("constant")}};
  const bool unit_steps = std::all_of(steps.begin(), steps.end(), [](int64_t s) { return s == 1; });
  if (!starts.empty() && starts.size() == ends.size() && unit_steps) {
    if (axes.empty()) {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    const int64_t r = static_cast<int64_t>(xs.size());
    std::vector<int64_t> pads(2 * xs.size(), 0);
    for (size_t k = 0; k < axes.size() && k < starts.size(); ++k) {
      const int64_t a = axes[k] < 0 ? axes[k] + r : axes[k];
      if (a < 0 || a >= r) continue;
      auto clamp = [&](int64_t v) {
        if (v < 0) v += xs[a];
        return std::clamp<int64_t>(v, 0, xs[a]);
      };
      pads[a] = clamp(starts[k]);
      pads[a + r] = xs[a] - clamp(ends[k]);
    }
    attrs["pads"] = pads;
  }
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, "Pad", {OutGrad(op, 0).id}, dx, std::move(attrs));
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

absl::Status TrainingBuilder::PadRule(const Op& op) {
  const std::vector<int64_t> xs = g_.tensor(op.inputs[0]).shape;
  const std::vector<int64_t> pads = op.GetInts("pads");
  Attrs attrs;
  if (pads.size() == 2 * xs.size()) {
    std::vector<int64_t> starts, ends, axes;
    for (size_t i = 0; i < xs.size(); ++i) {
      starts.push_back(pads[i]);
      ends.push_back(pads[i] + xs[i]);
      axes.push_back(static_cast<int64_t>(i));
    }
    attrs = {{"starts", starts}, {"ends", ends}, {"axes", axes}};
  }
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, "Slice", {OutGrad(op, 0).id}, dx, std::move(attrs));
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

// Gather family: scatter-add dY into a data-shaped gradient (GatherGrad).
absl::Status TrainingBuilder::GatherRule(const Op& op) {
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, GradType(op), {OutGrad(op, 0).id, op.inputs[1]}, dx, op.attrs);
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

absl::Status TrainingBuilder::TriluRule(const Op& op) {
  std::vector<TensorId> in = {OutGrad(op, 0).id};
  if (op.inputs.size() >= 2) in.push_back(op.inputs[1]);  // k
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, "Trilu", std::move(in), dx, op.attrs);
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

absl::StatusOr<TensorId> TrainingBuilder::EmitMatMul(const Op& op, const std::string& base,
                                                     TensorId l, TensorId r, bool tl, bool tr,
                                                     DType dtype) {
  ASSIGN_OR_RETURN(auto shape,
                   TransMatMulShape(g_.tensor(l).shape, g_.tensor(r).shape, tl, tr, op.name));
  TensorId out = NewTensor(base, shape, dtype);
  Emit1(base, "MatMul", {l, r}, out,
        {{"transA", static_cast<int64_t>(tl)}, {"transB", static_cast<int64_t>(tr)}});
  return out;
}

// Y = op(A) @ op(B) (+ C for Gemm). The weight gradient comes first, so its
// AllReduce can start before dA is computed. A batched A times a 2-D B (a
// linear layer over [batch, seq, in]) folds the batch into the rows so dB is
// one MatMul of the forward's FLOPs.
absl::Status TrainingBuilder::MatMulRule(const Op& op) {
  const TensorId dy = OutGrad(op, 0).id;
  const TensorId a = op.inputs[0];
  const TensorId b = op.inputs[1];
  const bool ta = op.GetInt("transA", 0) != 0;
  const bool tb = op.GetInt("transB", 0) != 0;
  const std::vector<int64_t> as = g_.tensor(a).shape;
  const std::vector<int64_t> bs = g_.tensor(b).shape;
  const std::vector<int64_t> ys = g_.tensor(dy).shape;
  if (as.size() < 2 || bs.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        op.type, " '", op.name, "' has a 1-D operand; braid cannot build its backward"));
  }
  if (Needs(op, 1)) {
    const std::string base = SlotBase(op, 1);
    const DType dt = g_.tensor(b).dtype;
    TensorId m = kNoId;
    if (bs.size() == 2 && ys.size() > 2 && as.size() == ys.size() && !ta &&
        std::equal(as.begin(), as.end() - 2, ys.begin())) {
      const int64_t rows = Product(as, 0, as.size() - 1);
      TensorId a2 = NewTensor(base + ".lhs", {rows, as.back()}, g_.tensor(a).dtype);
      Emit1(base + ".lhs", "Reshape", {a}, a2, {{"shape", g_.tensor(a2).shape}});
      TensorId d2 = NewTensor(base + ".dy", {rows, ys.back()}, g_.tensor(dy).dtype);
      Emit1(base + ".dy", "Reshape", {dy}, d2, {{"shape", g_.tensor(d2).shape}});
      ASSIGN_OR_RETURN(auto mm, tb ? EmitMatMul(op, base, d2, a2, true, false, dt)
                                   : EmitMatMul(op, base, a2, d2, true, false, dt));
      m = mm;
    } else {
      ASSIGN_OR_RETURN(auto mm, tb ? EmitMatMul(op, base, dy, a, true, ta, dt)
                                   : EmitMatMul(op, base, a, dy, !ta, false, dt));
      m = mm;
    }
    RETURN_IF_ERROR(ContributeToShape(op, 1, {m, true}, base));
  }
  if (op.kind == OpKind::kGemm && Needs(op, 2)) {
    RETURN_IF_ERROR(ContributeToShape(op, 2, {dy, false}, SlotBase(op, 2)));
  }
  if (Needs(op, 0)) {
    const std::string base = SlotBase(op, 0);
    const DType dt = g_.tensor(a).dtype;
    ASSIGN_OR_RETURN(auto m, ta ? EmitMatMul(op, base, b, dy, tb, true, dt)
                                : EmitMatMul(op, base, dy, b, false, !tb, dt));
    RETURN_IF_ERROR(ContributeToShape(op, 0, {m, true}, base));
  }
  return absl::OkStatus();
}

// Conv / ConvTranspose: filter gradient, bias gradient (a ReduceSum over all
// but the channel axis), then the data gradient; forward attributes are kept.
absl::Status TrainingBuilder::ConvRule(const Op& op) {
  const TensorId dy = OutGrad(op, 0).id;
  const bool transpose = op.kind == OpKind::kConvTranspose;
  const std::string grad_filter(
      OpKindName(transpose ? OpKind::kConvTransposeGradFilter : OpKind::kConvGradFilter));
  const std::string grad_data(
      OpKindName(transpose ? OpKind::kConvTransposeGradData : OpKind::kConvGradData));
  if (Needs(op, 1)) {
    TensorId dw = Like(SlotBase(op, 1), op.inputs[1]);
    Emit1(absl::StrCat(op.name, ".grad.filter"), grad_filter, {op.inputs[0], dy}, dw,
          op.attrs);
    Contribute(op, op.inputs[1], {dw, true});
  }
  if (Needs(op, 2)) {
    std::vector<int64_t> axes;
    for (size_t i = 0; i < g_.tensor(dy).shape.size(); ++i) {
      if (i != 1) axes.push_back(static_cast<int64_t>(i));
    }
    TensorId db = Like(SlotBase(op, 2), op.inputs[2]);
    Emit1(absl::StrCat(op.name, ".grad.bias"), "ReduceSum", {dy}, db,
          {{"axes", axes}, {"keepdims", int64_t{0}}});
    Contribute(op, op.inputs[2], {db, true});
  }
  if (Needs(op, 0)) {
    TensorId dx = Like(SlotBase(op, 0), op.inputs[0]);
    Emit1(absl::StrCat(op.name, ".grad.data"), grad_data, {dy, op.inputs[1]}, dx,
          op.attrs);
    Contribute(op, op.inputs[0], {dx, true});
  }
  return absl::OkStatus();
}

// Einsum with one or two operands: the gradient of operand i is the Einsum of
// dY with the other operand into operand i's indices. Indices summed within a
// single operand (traces, "ij->i") would need a broadcast and are refused.
absl::Status TrainingBuilder::EinsumRule(const Op& op) {
  std::string eq;
  for (char c : op.GetString("equation", "")) {
    if (c != ' ') eq.push_back(c);
  }
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  if (arrow != std::string::npos) {
    std::string lhs = eq.substr(0, arrow);
    size_t start = 0;
    for (size_t comma; (comma = lhs.find(',', start)) != std::string::npos; start = comma + 1) {
      terms.push_back(lhs.substr(start, comma - start));
    }
    terms.push_back(lhs.substr(start));
  }
  auto refuse = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("Einsum '", op.name, "' with equation '", eq,
                                                   "': ", std::string(why),
                                                   "; braid cannot build its backward"));
  };
  if (arrow == std::string::npos) return refuse("implicit output");
  if (terms.size() != op.inputs.size() || terms.size() > 2) return refuse("not 1 or 2 operands");
  const std::string out = eq.substr(arrow + 2);
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (!Needs(op, i)) continue;
    const std::string& ti = terms[i];
    const std::string other = terms.size() == 2 ? terms[1 - i] : "";
    std::set<char> seen;
    for (char c : ti) {
      if (c == '.') continue;
      if (!seen.insert(c).second) return refuse("a repeated index");
      if (out.find(c) == std::string::npos && other.find(c) == std::string::npos) {
        return refuse("an index summed within one operand");
      }
    }
    const std::string geq =
        terms.size() == 2 ? absl::StrCat(out, ",", other, "->", ti) : absl::StrCat(out, "->", ti);
    std::vector<TensorId> ins = {OutGrad(op, 0).id};
    if (terms.size() == 2) ins.push_back(op.inputs[1 - i]);
    std::vector<std::vector<int64_t>> shapes;
    for (TensorId t : ins) shapes.push_back(g_.tensor(t).shape);
    ASSIGN_OR_RETURN(auto shape, EinsumOutputShape(geq, shapes));
    const std::string base = SlotBase(op, i);
    TensorId m = NewTensor(base, shape, g_.tensor(op.inputs[i]).dtype);
    Emit1(base, "Einsum", std::move(ins), m, {{"equation", geq}});
    RETURN_IF_ERROR(ContributeToShape(op, i, {m, true}, base));
  }
  return absl::OkStatus();
}

// LSTM / GRU / RNN: one <Type>Grad op reading the forward inputs, the forward
// outputs (the saved hidden states) and the output gradients that exist.
absl::Status TrainingBuilder::RecurrentRule(const Op& op) {
  std::vector<TensorId> in = op.inputs;
  in.insert(in.end(), op.outputs.begin(), op.outputs.end());
  std::vector<int64_t> grad_outputs;
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    if (OutGrad(op, i).id == kNoId) continue;
    in.push_back(OutGrad(op, i).id);
    grad_outputs.push_back(static_cast<int64_t>(i));
  }
  std::vector<int64_t> slots;
  std::vector<TensorId> outs;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (!Needs(op, i)) continue;
    slots.push_back(static_cast<int64_t>(i));
    outs.push_back(Like(SlotBase(op, i), op.inputs[i]));
  }
  Attrs attrs = op.attrs;
  attrs["grad_inputs"] = slots;
  attrs["grad_outputs"] = grad_outputs;
  attrs["num_forward_inputs"] = static_cast<int64_t>(op.inputs.size());
  attrs["num_forward_outputs"] = static_cast<int64_t>(op.outputs.size());
  g_.AddOp(UniqueName(op_names_, absl::StrCat(op.name, ".grad")), GradType(op),
           std::move(in), outs, std::move(attrs), Phase::kBackward);
  for (size_t k = 0; k < slots.size(); ++k) Contribute(op, op.inputs[slots[k]], {outs[k], true});
  return absl::OkStatus();
}

// SoftmaxCrossEntropyLoss reads the saved log-probabilities when the graph has
// them (output 1), else the scores; NegativeLogLikelihoodLoss the targets.
absl::Status TrainingBuilder::LossRule(const Op& op) {
  std::vector<TensorId> in = {OutGrad(op, 0).id};
  if (op.kind == OpKind::kSoftmaxCrossEntropyLoss) {
    in.push_back(op.outputs.size() >= 2 ? op.outputs[1] : op.inputs[0]);
  }
  for (size_t i = 1; i < op.inputs.size(); ++i) in.push_back(op.inputs[i]);
  const std::string base = absl::StrCat(op.name, ".grad");
  TensorId dx = Like(base, op.inputs[0]);
  Emit1(base, GradType(op), std::move(in), dx, op.attrs);
  Contribute(op, op.inputs[0], {dx, true});
  return absl::OkStatus();
}

const std::map<OpKind, TrainingBuilder::Rule>& TrainingBuilder::Rules() {
  static const auto* rules = [] {
    using K = OpKind;
    auto* m = new std::map<OpKind, Rule>;
    auto set = [m](std::initializer_list<OpKind> kinds, Rule r) {
      for (OpKind k : kinds) (*m)[k] = r;
    };
    set({K::kAdd, K::kSum, K::kIdentity}, &TrainingBuilder::PassThroughRule);
    set({K::kSub}, &TrainingBuilder::SubRule);
    set({K::kAllGather, K::kReduceScatter, K::kAllReduce, K::kAllToAll, K::kBroadcast},
        &TrainingBuilder::CollectiveRule);
    set({K::kMul}, &TrainingBuilder::MulRule);
    set({K::kDiv}, &TrainingBuilder::DivRule);
    set({K::kPow, K::kMin, K::kMax, K::kMean, K::kWhere}, &TrainingBuilder::BinaryGradOpRule);
    set({K::kRelu, K::kSigmoid, K::kTanh, K::kExp, K::kSqrt, K::kReciprocal, K::kGelu, K::kErf,
         K::kLog, K::kAbs, K::kLeakyRelu, K::kClip, K::kHardSigmoid, K::kHardSwish, K::kSoftplus,
         K::kElu, K::kSelu, K::kCelu, K::kSin, K::kCos, K::kTan, K::kAsin, K::kAcos, K::kAtan,
         K::kSinh, K::kCosh, K::kSoftsign, K::kMish, K::kThresholdedRelu, K::kSoftmax,
         K::kLogSoftmax},
        &TrainingBuilder::UnaryGradRule);
    set({K::kNeg}, &TrainingBuilder::NegRule);
    set({K::kCast}, &TrainingBuilder::CastRule);
    set({K::kDropout}, &TrainingBuilder::DropoutRule);
    set({K::kBatchNormalization, K::kLayerNormalization, K::kInstanceNormalization,
         K::kGroupNormalization, K::kPRelu},
        &TrainingBuilder::MultiGradRule);
    set({K::kMaxPool, K::kAveragePool, K::kLpPool, K::kGlobalAveragePool, K::kGlobalMaxPool},
        &TrainingBuilder::PoolRule);
    set({K::kReduceSum, K::kReduceMean, K::kReduceMax, K::kReduceMin},
        &TrainingBuilder::ReduceRule);
    set({K::kReshape, K::kFlatten, K::kSqueeze, K::kUnsqueeze}, &TrainingBuilder::ReshapeRule);
    set({K::kTranspose}, &TrainingBuilder::TransposeRule);
    set({K::kExpand}, &TrainingBuilder::ExpandRule);
    set({K::kTile}, &TrainingBuilder::TileRule);
    set({K::kConcat}, &TrainingBuilder::ConcatRule);
    set({K::kSplit}, &TrainingBuilder::SplitRule);
    set({K::kSlice}, &TrainingBuilder::SliceRule);
    set({K::kPad}, &TrainingBuilder::PadRule);
    set({K::kGather, K::kGatherElements, K::kGatherND}, &TrainingBuilder::GatherRule);
    set({K::kTrilu}, &TrainingBuilder::TriluRule);
    set({K::kMatMul, K::kGemm}, &TrainingBuilder::MatMulRule);
    set({K::kConv, K::kConvTranspose}, &TrainingBuilder::ConvRule);
    set({K::kEinsum}, &TrainingBuilder::EinsumRule);
    set({K::kLSTM, K::kGRU, K::kRNN}, &TrainingBuilder::RecurrentRule);
    set({K::kSoftmaxCrossEntropyLoss, K::kNegativeLogLikelihoodLoss}, &TrainingBuilder::LossRule);
    return m;
  }();
  return *rules;
}

}  // namespace braid::graph::internal
