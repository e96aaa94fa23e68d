// The training-graph builder (graph/training.h): forward copy, loss, backward
// by per-op-type rules in reverse topological order, one gradient and one
// AllReduce per parameter in production order, optimizer updates.
//
// Conventions other layers rely on:
//  - Backward ops are named "<forward op name>.grad<...>" and have phase
//    kBackward. Gradient contributions to one tensor are summed eagerly with
//    Add ops ("<op>.grad.accum"), as autograd engines do.
//  - The gradient of parameter p is the kGradient tensor "p.grad". It is
//    AllReduced ("p.grad.allreduce", phase kCommunication, attr group_size) into
//    "p.grad.reduced" right after the op that completes it. Updates (phase
//    kUpdate, op "p.update") read p, "p.grad.reduced" and the kOptimizerState
//    tensors "p.momentum" (SGD) or "p.adam_m", "p.adam_v" (Adam), and write
//    "p.new", "p.momentum.new" / "p.adam_m.new", "p.adam_v.new".
//  - A parameter the loss does not depend on through a differentiable input
//    (an auxiliary head, an integer table) is not trained: its role becomes
//    kConstant in the training graph, so every kParameter has one gradient.
//  - Ops emitted here carry target shapes as attributes, as graph/builder.h
//    does: Reshape "shape", ReduceSum "axes"/"keepdims", Slice
//    "starts"/"ends"/"axes", Split "axis"/"split". Multi-output gradient ops
//    (BatchNormalizationGrad, LayerNormalizationGrad, LSTMGrad, PReluGrad, ...)
//    list in "grad_inputs" which forward input each output is the gradient of.
#include "graph/training.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "graph/internal/training_builder.h"
#include "graph/ops.h"

namespace braid::graph {
namespace internal {

bool IsFloat(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64;
}

int64_t OnnxDTypeCode(DType d) {  // TensorProto.DataType, for Cast's "to"
  switch (d) {
    case DType::kF16:
      return 10;
    case DType::kBF16:
      return 16;
    case DType::kF64:
      return 11;
    default:
      return 1;
  }
}

absl::StatusOr<std::vector<int64_t>> Broadcast(const std::vector<int64_t>& a,
                                               const std::vector<int64_t>& b,
                                               std::string_view what) {
  std::vector<int64_t> out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t x = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const int64_t y = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (x != y && x != 1 && y != 1) {
      return absl::InvalidArgumentError(absl::StrCat("op '", std::string(what), "': shapes ",
                                                     ShapeString(a), " and ", ShapeString(b),
                                                     " do not broadcast"));
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// Shape of op(A) @ op(B) where op transposes the last two dims when asked.
absl::StatusOr<std::vector<int64_t>> TransMatMulShape(std::vector<int64_t> a,
                                                      std::vector<int64_t> b, bool ta, bool tb,
                                                      std::string_view what) {
  if (a.size() < 2 || b.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op '", std::string(what), "' has a 1-D MatMul operand; braid cannot build its backward"));
  }
  if (ta) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (tb) std::swap(b[b.size() - 1], b[b.size() - 2]);
  ASSIGN_OR_RETURN(auto batch, Broadcast(std::vector<int64_t>(a.begin(), a.end() - 2),
                                         std::vector<int64_t>(b.begin(), b.end() - 2), what));
  batch.push_back(a[a.size() - 2]);
  batch.push_back(b.back());
  return batch;
}

int64_t Product(const std::vector<int64_t>& v, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < v.size(); ++i) p *= v[i];
  return p;
}

namespace {

// Ops whose outputs carry no gradient (piecewise constant or integer-valued).
bool HasZeroGradient(OpKind k) {
  return IsOneOf(k, {OpKind::kFloor, OpKind::kCeil, OpKind::kRound, OpKind::kSign,
                        OpKind::kEqual, OpKind::kLess, OpKind::kGreater, OpKind::kLessOrEqual,
                        OpKind::kGreaterOrEqual, OpKind::kNot, OpKind::kAnd, OpKind::kOr,
                        OpKind::kXor, OpKind::kArgMax, OpKind::kArgMin, OpKind::kShape,
                        OpKind::kSize, OpKind::kNonZero, OpKind::kRange,
                        OpKind::kConstantOfShape, OpKind::kConstant, OpKind::kIsNaN,
                        OpKind::kIsInf, OpKind::kOneHot, OpKind::kEyeLike,
                        OpKind::kRandomNormalLike, OpKind::kRandomUniformLike});
}

// Ops differentiated through their first input only.
bool FirstInputOnly(OpKind k) {
  return IsOneOf(k, {OpKind::kClip, OpKind::kDropout, OpKind::kGather, OpKind::kGatherElements,
                        OpKind::kGatherND, OpKind::kReshape, OpKind::kExpand, OpKind::kTile,
                        OpKind::kSlice, OpKind::kPad, OpKind::kSplit, OpKind::kSqueeze,
                        OpKind::kUnsqueeze, OpKind::kTrilu, OpKind::kSoftmaxCrossEntropyLoss,
                        OpKind::kNegativeLogLikelihoodLoss, OpKind::kReduceSum,
                        OpKind::kReduceMean, OpKind::kReduceMax, OpKind::kReduceMin,
                        OpKind::kFlatten, OpKind::kTranspose, OpKind::kCast, OpKind::kIdentity});
}

}  // namespace

bool IsDifferentiableSlot(const Op& op, size_t slot) {
  if (HasZeroGradient(op.kind)) return false;
  if (FirstInputOnly(op.kind)) return slot == 0;
  if (op.kind == OpKind::kBatchNormalization) return slot <= 2;  // not the running statistics
  if (op.kind == OpKind::kWhere) return slot == 1 || slot == 2;
  return true;
}

// The result of a gradient computation: a tensor and whether the caller owns it

// ---------------------------------------------------------------- naming

std::string TrainingBuilder::UniqueName(std::set<std::string, std::less<>>& used,
                                        std::string base) {
  if (used.insert(base).second) return base;
  for (int i = 1;; ++i) {
    std::string n = absl::StrCat(base, ".", i);
    if (used.insert(n).second) return n;
  }
}

TensorId TrainingBuilder::NewTensor(const std::string& base, std::vector<int64_t> shape,
                                    DType dtype, TensorRole role) {
  TensorId t = g_.AddTensor(UniqueName(tensor_names_, base), std::move(shape), dtype, role);
  needs_.push_back(false);
  has_grad_.push_back(false);
  grad_.push_back({});
  return t;
}

TensorId TrainingBuilder::Like(const std::string& base, TensorId like) {
  const Tensor& t = g_.tensor(like);
  return NewTensor(base, std::vector<int64_t>(t.shape), t.dtype);
}

TensorId TrainingBuilder::Emit1(const std::string& op_base, std::string type,
                                std::vector<TensorId> inputs, TensorId output, Attrs attrs) {
  g_.AddOp(UniqueName(op_names_, op_base), std::move(type), std::move(inputs), {output},
           std::move(attrs), Phase::kBackward);
  return output;
}

// ---------------------------------------------------------------- bookkeeping

bool TrainingBuilder::Needs(const Op& op, size_t slot) const {
  if (slot >= op.inputs.size()) return false;
  const TensorId t = op.inputs[slot];
  return needs_[t] && IsDifferentiableSlot(op, slot) && IsFloat(g_.tensor(t).dtype);
}

Grad TrainingBuilder::OutGrad(const Op& op, size_t i) const {
  if (i >= op.outputs.size()) return {};
  return grad_[op.outputs[i]];
}

void TrainingBuilder::Contribute(const Op& op, TensorId t, Grad g) {
  CHECK_NE(g.id, kNoId) << "rule for " << op.name << " contributed no tensor";
  // grad_ grows with every new tensor (NewTensor), so no reference into it
  // may live across Like().
  if (grad_[t].id == kNoId) {
    grad_[t] = g;
  } else {
    const TensorId prev = grad_[t].id;
    TensorId sum = Like(absl::StrCat(g_.tensor(t).name, ".grad.sum"), t);
    Emit1(absl::StrCat(op.name, ".grad.accum"), "Add", {prev, g.id}, sum);
    grad_[t] = {sum, true};
  }
  if (g_.tensor(t).role == TensorRole::kParameter && ++received_[t] == expected_[t]) {
    Finalize(op, t);
  }
}

void TrainingBuilder::Finalize(const Op& op, TensorId p) {
  Grad g = grad_[p];
  const Tensor param = g_.tensor(p);
  if (!g.owned || g_.tensor(g.id).dtype != param.dtype) {
    const bool cast = g_.tensor(g.id).dtype != param.dtype;
    TensorId copy = NewTensor(absl::StrCat(param.name, ".grad.copy"),
                              std::vector<int64_t>(param.shape), param.dtype);
    Attrs attrs;
    if (cast) attrs["to"] = OnnxDTypeCode(param.dtype);
    Emit1(absl::StrCat(op.name, cast ? ".grad.cast" : ".grad.copy"), cast ? "Cast" : "Identity",
          {g.id}, copy, std::move(attrs));
    g = {copy, true};
  }
  Tensor& gt = g_.mutable_tensor(g.id);
  gt.name = absl::StrCat(param.name, ".grad");  // reserved by ReserveNames()
  gt.role = TensorRole::kGradient;
  gt.grad_of = p;
  grad_[p] = g;
  const TensorId reduced =
      g_.AddTensor(absl::StrCat(param.name, ".grad.reduced"), std::vector<int64_t>(param.shape),
                   param.dtype, TensorRole::kActivation);
  needs_.push_back(false);
  has_grad_.push_back(false);
  grad_.push_back({});
  g_.AddOp(UniqueName(op_names_, absl::StrCat(param.name, ".grad.allreduce")), "AllReduce", {g.id},
           {reduced}, {{"group_size", static_cast<int64_t>(opts_.ranks)}}, Phase::kCommunication);
  grad_order_.push_back(p);
  reduced_[p] = reduced;
}

// Sums `g` over the dims that were broadcast to reach it from `target`'s shape.
absl::StatusOr<Grad> TrainingBuilder::ToShape(const std::string& base, Grad g, TensorId target) {
  const std::vector<int64_t> gs = g_.tensor(g.id).shape;
  const std::vector<int64_t> ts = g_.tensor(target).shape;
  if (gs == ts) return g;
  if (ts.size() > gs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("op '", base, "': gradient shape ",
                                                   ShapeString(gs), " cannot be reduced to ",
                                                   ShapeString(ts)));
  }
  const size_t lead = gs.size() - ts.size();
  std::vector<int64_t> axes;
  std::vector<int64_t> rshape;
  for (size_t i = 0; i < gs.size(); ++i) {
    const bool reduce = i < lead || (ts[i - lead] == 1 && gs[i] != 1);
    if (!reduce && ts[i - lead] != gs[i]) {
      return absl::InvalidArgumentError(absl::StrCat("op '", base, "': gradient shape ",
                                                     ShapeString(gs), " does not broadcast from ",
                                                     ShapeString(ts)));
    }
    if (reduce) axes.push_back(static_cast<int64_t>(i));
    if (!reduce)
      rshape.push_back(gs[i]);
    else if (lead == 0)
      rshape.push_back(1);
  }
  const int64_t keepdims = lead == 0 ? 1 : 0;
  TensorId r = NewTensor(absl::StrCat(base, ".reduced"), rshape, g_.tensor(target).dtype);
  Emit1(absl::StrCat(base, ".reduce"), "ReduceSum", {g.id}, r,
        {{"axes", axes}, {"keepdims", keepdims}});
  if (rshape != ts) {
    TensorId s = Like(absl::StrCat(base, ".reshaped"), target);
    Emit1(absl::StrCat(base, ".reshape"), "Reshape", {r}, s, {{"shape", ts}});
    r = s;
  }
  return Grad{r, true};
}

absl::Status TrainingBuilder::ContributeToShape(const Op& op, size_t slot, Grad g,
                                                const std::string& base) {
  ASSIGN_OR_RETURN(auto r, ToShape(base, g, op.inputs[slot]));
  Contribute(op, op.inputs[slot], r);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- driver

void TrainingBuilder::CopyForward() {
  for (const Tensor& t : fwd_.tensors()) {
    TensorId id = g_.AddTensor(t.name, t.shape, t.dtype, t.role);
    g_.mutable_tensor(id).grad_of = t.grad_of;
    g_.mutable_tensor(id).value = t.value;
    tensor_names_.insert(t.name);
  }
  for (const Op& op : fwd_.ops()) {
    OpId id = g_.AddOp(op.name, op.type, op.inputs, op.outputs, op.attrs, Phase::kForward);
    g_.mutable_op(id).opaque = op.opaque;
    op_names_.insert(op.name);
  }
}

absl::StatusOr<TensorId> TrainingBuilder::AttachLoss() {
  std::vector<TensorId> outs = fwd_.outputs();
  if (outs.empty()) {
    TensorId out = kNoId;
    // No declared output: the last produced activation nobody consumes.
    for (TensorId t = fwd_.num_tensors() - 1; t >= 0 && out == kNoId; --t) {
      const Tensor& ten = fwd_.tensor(t);
      if (ten.producer != kNoId && ten.consumers.empty()) out = t;
    }
    if (out == kNoId) {
      return absl::InvalidArgumentError(
          absl::StrCat("forward graph '", fwd_.name(), "' has no output to attach a loss to"));
    }
    outs.push_back(out);
  }
  // One loss per output (BERT's MLM and NSP heads, Inception's aux head), summed,
  // so every head's parameters are trained.
  std::vector<TensorId> losses;
  for (size_t i = 0; i < outs.size(); ++i) {
    ASSIGN_OR_RETURN(auto l, AttachLossTo(outs[i], outs.size() == 1 ? std::string("loss")
                                                                    : absl::StrCat("loss.", i)));
    losses.push_back(l);
  }
  TensorId loss = losses[0];
  for (size_t i = 1; i < losses.size(); ++i) {
    const bool last = i + 1 == losses.size();
    TensorId sum = g_.AddTensor(UniqueName(tensor_names_, last ? "loss" : absl::StrCat("loss.sum", i)),
                                {}, DType::kF32, TensorRole::kActivation);
    g_.AddOp(UniqueName(op_names_, absl::StrCat("loss.sum", i)), "Add", {loss, losses[i]}, {sum}, {},
             Phase::kForward);
    loss = sum;
  }
  if (fwd_.outputs().empty() || loss != outs[0]) g_.AddOutput(loss);
  return loss;
}

absl::StatusOr<TensorId> TrainingBuilder::AttachLossTo(TensorId out, const std::string& base) {
  const Tensor y = g_.tensor(out);
  if (!IsFloat(y.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("forward output '", y.name, "' has dtype ",
                                                   std::string(DTypeName(y.dtype)),
                                                   "; a loss needs a floating-point output"));
  }
  if (y.NumElements() == 1) return out;  // already a scalar loss
  TensorId loss = kNoId;
  auto add_op = [&](const std::string& base, std::string type, std::vector<TensorId> in,
                    std::vector<TensorId> outs, Attrs attrs) {
    g_.AddOp(UniqueName(op_names_, base), std::move(type), std::move(in), std::move(outs),
             std::move(attrs), Phase::kForward);
  };
  auto new_tensor = [&](const std::string& base, std::vector<int64_t> shape, DType d,
                        TensorRole role) {
    return g_.AddTensor(UniqueName(tensor_names_, base), std::move(shape), d, role);
  };
  if (y.shape.size() == 2 || y.shape.size() == 3) {
    std::vector<int64_t> label_shape(y.shape.begin(), y.shape.end() - 1);
    TensorId labels = new_tensor(base == "loss" ? "labels" : base + ".labels", label_shape, DType::kI64, TensorRole::kInput);
    TensorId scores = out;
    if (y.shape.size() == 3) {
      const int64_t rows = y.shape[0] * y.shape[1];
      scores = new_tensor(base + ".logits", {rows, y.shape[2]}, y.dtype, TensorRole::kActivation);
      add_op(base + ".reshape_logits", "Reshape", {out}, {scores},
             {{"shape", std::vector<int64_t>{rows, y.shape[2]}}});
      TensorId flat = new_tensor(base + ".labels_flat", {rows}, DType::kI64, TensorRole::kActivation);
      add_op(base + ".reshape_labels", "Reshape", {labels}, {flat},
             {{"shape", std::vector<int64_t>{rows}}});
      labels = flat;
    }
    loss = new_tensor(base, {}, DType::kF32, TensorRole::kActivation);
    add_op(base, "SoftmaxCrossEntropyLoss", {scores, labels}, {loss},
           {{"reduction", std::string("mean")}});
  } else {
    TensorId target = new_tensor(base == "loss" ? "target" : base + ".target", y.shape, y.dtype, TensorRole::kInput);
    TensorId diff = new_tensor(base + ".diff", y.shape, y.dtype, TensorRole::kActivation);
    add_op(base + ".sub", "Sub", {out, target}, {diff}, {});
    TensorId sq = new_tensor(base + ".square", y.shape, y.dtype, TensorRole::kActivation);
    add_op(base + ".square", "Mul", {diff, diff}, {sq}, {});
    loss = new_tensor(base, {}, DType::kF32, TensorRole::kActivation);
    add_op(base + ".mean", "ReduceMean", {sq}, {loss}, {{"keepdims", int64_t{0}}});
  }
  return loss;
}

void TrainingBuilder::Analyze(const std::vector<OpId>& order, TensorId loss) {
  for (TensorId t = 0; t < g_.num_tensors(); ++t) {
    const Tensor& ten = g_.tensor(t);
    needs_[t] = ten.role == TensorRole::kParameter && IsFloat(ten.dtype);
  }
  for (OpId id : order) {
    const Op& op = g_.op(id);
    bool any = false;
    for (size_t i = 0; i < op.inputs.size(); ++i) any = any || Needs(op, i);
    for (TensorId t : op.outputs) needs_[t] = any && IsFloat(g_.tensor(t).dtype);
  }
  has_grad_[loss] = needs_[loss];
  expected_.assign(g_.num_tensors(), 0);
  received_.assign(g_.num_tensors(), 0);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Op& op = g_.op(*it);
    bool active = false;
    for (TensorId t : op.outputs) active = active || has_grad_[t];
    if (!active) continue;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      if (!Needs(op, i)) continue;
      has_grad_[op.inputs[i]] = true;
      if (g_.tensor(op.inputs[i]).role == TensorRole::kParameter) ++expected_[op.inputs[i]];
    }
  }
}

absl::Status TrainingBuilder::ReserveNames() {
  for (TensorId p = 0; p < g_.num_tensors(); ++p) {
    Tensor& t = g_.mutable_tensor(p);
    if (t.role != TensorRole::kParameter) continue;
    if (expected_[p] == 0) {
      t.role = TensorRole::kConstant;  // not trained: the loss does not depend on it
      continue;
    }
    std::vector<std::string> names = {".grad", ".grad.reduced", ".new"};
    if (opts_.optimizer == Optimizer::kSgdMomentum) {
      names.insert(names.end(), {".momentum", ".momentum.new"});
    } else {
      names.insert(names.end(), {".adam_m", ".adam_v", ".adam_m.new", ".adam_v.new"});
    }
    for (const std::string& suffix : names) {
      const std::string n = absl::StrCat(t.name, suffix);
      if (!tensor_names_.insert(n).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("forward graph already has a tensor named '", n,
                         "', which the training graph of parameter '", t.name, "' needs"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TrainingBuilder::BackwardOp(OpId id) {
  const Op op = g_.op(id);  // a copy: emitting ops reallocates the op list
  bool active = false;
  for (TensorId t : op.outputs) active = active || grad_[t].id != kNoId;
  bool needed = false;
  for (size_t i = 0; i < op.inputs.size(); ++i) needed = needed || Needs(op, i);
  if (!active || !needed) return absl::OkStatus();
  const OpCategory cat = CategoryOf(op.kind);
  if (op.opaque || cat == OpCategory::kOpaque || cat == OpCategory::kControlFlow) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op '", op.name, "' (type ", op.type, ") depends on a parameter, but braid cannot ",
        "differentiate ", cat == OpCategory::kControlFlow ? "control flow" : "opaque ops"));
  }
  auto it = Rules().find(op.kind);
  if (it == Rules().end()) {
    return absl::InvalidArgumentError(absl::StrCat("op '", op.name, "' (type ", op.type,
                                                   ") depends on a parameter, but braid has no ",
                                                   "backward rule for ", op.type));
  }
  const bool multi_output_rule = op.kind == OpKind::kSplit || op.kind == OpKind::kLSTM ||
                                 op.kind == OpKind::kGRU || op.kind == OpKind::kRNN;
  if (!multi_output_rule) {
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      if ((i == 0) != (grad_[op.outputs[i]].id != kNoId)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "op '", op.name, "' (type ", op.type, "): braid differentiates it only through its ",
            "first output, and the loss depends on its outputs otherwise"));
      }
    }
  }
  return (this->*(it->second))(op);
}

void TrainingBuilder::EmitUpdates() {
  for (TensorId p : grad_order_) {
    const Tensor param = g_.tensor(p);
    auto state = [&](const std::string& suffix, TensorRole role) {
      TensorId t = g_.AddTensor(absl::StrCat(param.name, suffix), param.shape, param.dtype, role);
      return t;
    };
    const std::string op_name = UniqueName(op_names_, absl::StrCat(param.name, ".update"));
    if (opts_.optimizer == Optimizer::kSgdMomentum) {
      TensorId m = state(".momentum", TensorRole::kOptimizerState);
      TensorId pn = state(".new", TensorRole::kActivation);
      TensorId mn = state(".momentum.new", TensorRole::kActivation);
      g_.AddOp(op_name, "SgdMomentumUpdate", {p, reduced_[p], m}, {pn, mn}, {}, Phase::kUpdate);
    } else {
      TensorId m = state(".adam_m", TensorRole::kOptimizerState);
      TensorId v = state(".adam_v", TensorRole::kOptimizerState);
      TensorId pn = state(".new", TensorRole::kActivation);
      TensorId mn = state(".adam_m.new", TensorRole::kActivation);
      TensorId vn = state(".adam_v.new", TensorRole::kActivation);
      g_.AddOp(op_name, "AdamUpdate", {p, reduced_[p], m, v}, {pn, mn, vn}, {}, Phase::kUpdate);
    }
  }
}

absl::StatusOr<Graph> TrainingBuilder::Build() {
  if (opts_.ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainingOptions.ranks must be >= 1, got ", opts_.ranks));
  }
  if (absl::Status s = fwd_.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("forward graph '", fwd_.name(), "' is invalid: ", std::string(s.message())));
  }
  CopyForward();
  ASSIGN_OR_RETURN(auto loss, AttachLoss());
  // The loss (when appended) leads the outputs, then the forward outputs.
  for (TensorId t : fwd_.outputs()) g_.AddOutput(t);
  needs_.assign(g_.num_tensors(), false);
  has_grad_.assign(g_.num_tensors(), false);
  grad_.assign(g_.num_tensors(), {});
  ASSIGN_OR_RETURN(auto order, g_.TopologicalOrder());
  Analyze(order, loss);
  RETURN_IF_ERROR(ReserveNames());
  if (needs_[loss]) {
    const Tensor l = g_.tensor(loss);
    TensorId seed =
        NewTensor(absl::StrCat(l.name, ".grad_seed"), l.shape, l.dtype, TensorRole::kConstant);
    grad_[loss] = {seed, false};
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    RETURN_IF_ERROR(BackwardOp(*it));
  }
  for (TensorId p = 0; p < static_cast<TensorId>(expected_.size()); ++p) {
    if (expected_[p] > 0 && received_[p] != expected_[p]) {
      return absl::InternalError(absl::StrCat("parameter '", g_.tensor(p).name, "' received ",
                                              received_[p], " of ", expected_[p],
                                              " gradient contributions"));
    }
  }
  EmitUpdates();
  AnnotateCosts(g_);
  if (absl::Status s = g_.Validate(); !s.ok()) {
    return absl::InternalError(absl::StrCat("training graph of '", fwd_.name(),
                                            "' is invalid: ", std::string(s.message())));
  }
  return std::move(g_);
}

}  // namespace internal

absl::StatusOr<Graph> BuildTrainingGraph(const Graph& forward, const TrainingOptions& options) {
  internal::TrainingBuilder builder(forward, options);
  return builder.Build();
}

}  // namespace braid::graph
