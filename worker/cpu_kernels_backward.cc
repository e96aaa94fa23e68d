// Backward and update op types (graph/ops.h names) -> ATen calls. Input
// conventions follow graph/ops.cc: a *Grad op's first input is dY, output 0
// is the gradient it computes; ConvGradData is (dY, W) -> dX, ConvGradFilter
// (X, dY) -> dW; LSTMGrad's first inputs are the forward's (X, W, R, [B]).
#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include <torch/csrc/autograd/autograd.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cpu_kernels.h"

namespace braid::worker::internal {
namespace {

using Result = std::optional<absl::StatusOr<CpuKernel>>;
using K = graph::OpKind;

// Elementwise gradients: (dY, X or Y) -> dX, as autograd computes them.
using GradFn = at::Tensor (*)(const at::Tensor& dy, const at::Tensor& v, const graph::Op& op);
const std::map<graph::OpKind, std::pair<GradFn, const char*>>& ElementwiseGrads() {
  static const auto* m = new std::map<graph::OpKind, std::pair<GradFn, const char*>>{
      {K::kReluGrad,
       {[](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) {
          return at::threshold_backward(dy, y, 0);
        },
        "at::threshold_backward"}},
      {K::kGeluGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op& op) {
          return at::gelu_backward(dy, x, op.GetString("approximate", "none"));
        },
        "at::gelu_backward"}},
      {K::kSigmoidGrad,
       {[](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) {
          return at::sigmoid_backward(dy, y);
        },
        "at::sigmoid_backward"}},
      {K::kTanhGrad,
       {[](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) {
          return at::tanh_backward(dy, y);
        },
        "at::tanh_backward"}},
      {K::kLeakyReluGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op& op) {
          return at::leaky_relu_backward(dy, x, op.GetFloat("alpha", 0.01), false);
        },
        "at::leaky_relu_backward"}},
      {K::kEluGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op& op) {
          return at::elu_backward(dy, op.GetFloat("alpha", 1.0), 1, 1, false, x);
        },
        "at::elu_backward"}},
      {K::kSoftplusGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op&) {
          return at::softplus_backward(dy, x, 1, 20);
        },
        "at::softplus_backward"}},
      {K::kHardSigmoidGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op&) {
          return at::hardsigmoid_backward(dy, x);
        },
        "at::hardsigmoid_backward"}},
      {K::kHardSwishGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op&) {
          return at::hardswish_backward(dy, x);
        },
        "at::hardswish_backward"}},
      {K::kExpGrad,
       {[](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) { return at::mul(dy, y); },
        "at::mul"}},
      {K::kLogGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op&) { return at::div(dy, x); },
        "at::div"}},
      {K::kSqrtGrad,
       {[](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) {
          return at::div(dy, at::mul(y, 2));
        },
        "at::mul + at::div"}},
      {K::kReciprocalGrad,
       {[](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) {
          return at::mul(dy, at::mul(y, y)).neg_();
        },
        "at::mul x2 + neg_"}},
      {K::kNegGrad,
       {[](const at::Tensor& dy, const at::Tensor&, const graph::Op&) { return at::neg(dy); },
        "at::neg"}},
      {K::kAbsGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op&) {
          return at::mul(dy, at::sgn(x));
        },
        "at::sgn + at::mul"}},
      {K::kErfGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op&) {
          return at::mul(at::exp(at::neg(at::mul(x, x))), dy).mul_(M_2_SQRTPI);
        },
        "at::mul + at::neg + at::exp + at::mul + mul_"}},
      {K::kSinGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op&) {
          return at::mul(dy, at::cos(x));
        },
        "at::cos + at::mul"}},
      {K::kCosGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op&) {
          return at::mul(dy, at::sin(x)).neg_();
        },
        "at::sin + at::mul + neg_"}},
      {K::kClipGrad,
       {[](const at::Tensor& dy, const at::Tensor& x, const graph::Op& op) {
          return at::mul(dy, at::logical_and(at::ge(x, op.GetFloat("min", -1.0)),
                                             at::le(x, op.GetFloat("max", 1.0))));
        },
        "at::ge + at::le + at::logical_and + at::mul"}},
  };
  return *m;
}

Result ElementwiseGrad(const OpArgs& a) {
  auto it = ElementwiseGrads().find(a.op().kind);
  if (it == ElementwiseGrads().end()) return std::nullopt;
  RETURN_IF_ERROR(a.Arity(1, 3));
  at::Tensor dy = a.In(0);
  at::Tensor v = a.num_inputs() >= 2 ? a.In(1) : a.Random(a.out(0).shape, a.out(0).dtype);
  GradFn f = it->second.first;
  graph::Op op = a.op();
  return Make([=] { return f(dy, v, op); }, it->second.second);
}

// Binary/variadic gradients, one op per input slot (attribute input_index),
// producing a tensor of the forward output's shape (graph/training_rules.cc).
Result BinaryGrad(const OpArgs& a) {
  const graph::OpKind t = a.op().kind;
  const int64_t slot = a.op().GetInt("input_index", 0);
  if (t == K::kDivGrad) {  // (dY, Y, B): dB = -dY * Y / B
    RETURN_IF_ERROR(a.Arity(3, 3));
    at::Tensor dy = a.In(0), y = a.In(1), b = a.In(2);
    return Make([=] { return at::div(at::mul(dy, y), b).neg_(); }, "at::mul + at::div + neg_");
  }
  if (t == K::kPowGrad) {  // (dY, A, B)
    RETURN_IF_ERROR(a.Arity(3, 3));
    at::Tensor dy = a.In(0), x = a.In(1).abs().add_(0.5), e = a.In(2);
    if (slot == 0) {
      return Make([=] { return at::mul(dy, at::mul(e, at::pow(x, at::sub(e, 1)))); },
                  "at::sub + at::pow + at::mul x2");
    }
    return Make([=] { return at::mul(dy, at::mul(at::pow(x, e), at::log(x))); },
                "at::pow + at::log + at::mul x2");
  }
  if (t == K::kMinGrad || t == K::kMaxGrad) {  // (dY, X_i, Y)
    RETURN_IF_ERROR(a.Arity(3, 3));
    at::Tensor dy = a.In(0), x = a.In(1), y = a.In(2);
    return Make([=] { return at::mul(dy, at::eq(x, y)); }, "at::eq + at::mul");
  }
  if (t == K::kWhereGrad) {  // (dY, cond)
    RETURN_IF_ERROR(a.Arity(2, 2));
    at::Tensor dy = a.In(0), c = a.In(1).to(at::kBool);
    at::Tensor zero = at::zeros({}, dy.options());
    if (slot == 1) return Make([=] { return at::where(c, dy, zero); }, "at::where");
    return Make([=] { return at::where(c, zero, dy); }, "at::where");
  }
  if (t == K::kMeanGrad) {  // (dY) / count
    RETURN_IF_ERROR(a.Arity(1, 1));
    at::Tensor dy = a.In(0);
    double count = static_cast<double>(a.op().GetInt("count", 2));
    return Make([=] { return at::div(dy, count); }, "at::div");
  }
  return std::nullopt;
}

Result DropoutGrad(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 3));
  at::Tensor dy = a.In(0);
  double p = a.op().GetFloat("ratio", 0.5);
  at::Tensor mask = at::rand(a.in(0).shape) >= p;
  return Make([=] { return at::native_dropout_backward(dy, mask, 1.0 / (1.0 - p)); },
              "at::native_dropout_backward");
}

struct ConvGeometry {
  std::vector<int64_t> strides, dilations, padding, torch_pad, zeros;
  int64_t groups = 1;
};

// x_shape: the forward input, y_shape: the forward output, w_shape: weight.
ConvGeometry ConvGeom(const graph::Op& op, const std::vector<int64_t>& x_shape,
                      const std::vector<int64_t>& y_shape, const std::vector<int64_t>& w_shape) {
  const size_t n = x_shape.size() - 2;
  ConvGeometry c;
  c.strides = IntsOr(op, "strides", n, 1);
  c.dilations = IntsOr(op, "dilations", n, 1);
  c.groups = op.GetInt("group", 1);
  c.zeros.assign(n, 0);
  std::vector<int64_t> pads =
      ResolvePads(op, {x_shape.begin() + 2, x_shape.end()}, {y_shape.begin() + 2, y_shape.end()},
                  {w_shape.begin() + 2, w_shape.end()}, c.strides, c.dilations);
  std::optional<std::vector<int64_t>> sym = SymmetricPads(pads, &c.torch_pad);
  c.padding = sym ? *sym : c.zeros;
  return c;
}

Result ConvGrad(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 3));
  const bool data = a.op().kind == K::kConvGradData;
  // ConvGradData: (dY, W) -> dX; ConvGradFilter: (X, dY) -> dW.
  const graph::Tensor& dy_t = data ? a.in(0) : a.in(1);
  const std::vector<int64_t>& x_shape = data ? a.out(0).shape : a.in(0).shape;
  const std::vector<int64_t>& w_shape = data ? a.in(1).shape : a.out(0).shape;
  if (x_shape.size() < 3 || w_shape.size() != x_shape.size() || dy_t.shape.size() != x_shape.size()) {
    return a.Error("needs dY, X and W of equal rank >= 3");
  }
  ConvGeometry c = ConvGeom(a.op(), x_shape, dy_t.shape, w_shape);
  at::Tensor dy = a.Random(dy_t.shape, dy_t.dtype);
  at::Tensor x = a.Random(x_shape, dy_t.dtype);
  if (!c.torch_pad.empty()) x = at::constant_pad_nd(x, c.torch_pad, 0);
  at::Tensor w = a.Random(w_shape, dy_t.dtype);
  if (data) {
    return Make(
        [=] {
          return CropPadded(std::get<0>(at::convolution_backward(
                                dy, x, w, c10::nullopt, c.strides, c.padding, c.dilations, false,
                                c.zeros, c.groups, {true, false, false})),
                            c.torch_pad);
        },
        "at::convolution_backward(mask=input)");
  }
  const bool bias = a.num_outputs() >= 2;  // (dW, dB) when the builder fuses the bias grad
  std::vector<int64_t> bias_sizes = {w_shape[0]};
  return Make(
      [=] {
        return std::get<1>(at::convolution_backward(
            dy, x, w, bias ? at::OptionalIntArrayRef(bias_sizes) : c10::nullopt, c.strides,
            c.padding, c.dilations, false, c.zeros, c.groups, {false, true, bias}));
      },
      "at::convolution_backward(mask=weight)");
}

// The builder's <Norm>Grad(dY, X, scale) has one output per forward input
// slot in "grad_inputs" (0 = X, 1 = scale, 2 = B); output 0 may be dScale when
// X needs no gradient. Returns ATen's output mask and which tuple element is
// graph output 0.
std::pair<std::array<bool, 3>, int> NormMask(const OpArgs& a) {
  std::vector<int64_t> slots = a.op().GetInts("grad_inputs");
  if (slots.empty()) {
    for (int i = 0; i < std::min(a.num_outputs(), 3); ++i) slots.push_back(i);
  }
  std::array<bool, 3> mask = {false, false, false};
  for (int64_t s : slots) {
    if (s >= 0 && s < 3) mask[s] = true;
  }
  const int first = slots[0] >= 0 && slots[0] < 3 ? static_cast<int>(slots[0]) : 0;
  return {mask, first};
}

at::Tensor Pick(const std::tuple<at::Tensor, at::Tensor, at::Tensor>& t, int i) {
  return i == 0 ? std::get<0>(t) : i == 1 ? std::get<1>(t) : std::get<2>(t);
}

Result BatchNormGrad(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 6));
  const graph::Tensor& xt = a.in(1);  // (dY, X, scale)
  if (xt.shape.size() < 2) return a.Error("X must be [N,C,...]");
  at::Tensor dy = a.Random(xt.shape, xt.dtype), x = a.Random(xt.shape, xt.dtype);
  at::Tensor w = at::randn({xt.shape[1]}, x.options()), b = at::zeros_like(w);
  at::Tensor rm = at::zeros_like(w), rv = at::ones_like(w);
  double eps = a.op().GetFloat("epsilon", 1e-5);
  auto [y, save_mean, save_invstd] = at::native_batch_norm(x, w, b, rm, rv, true, 0.1, eps);
  auto [mask, first] = NormMask(a);
  return Make(
      [=, save_mean = save_mean, save_invstd = save_invstd, mask = mask, first = first] {
        return Pick(at::native_batch_norm_backward(dy, x, w, rm, rv, save_mean, save_invstd, true,
                                                   eps, mask),
                    first);
      },
      "at::native_batch_norm_backward");
}

Result LayerNormGrad(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 6));
  const graph::Tensor& xt = a.in(1);  // (dY, X, scale)
  int64_t axis = a.op().GetInt("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(xt.shape.size());
  if (axis < 0 || axis >= static_cast<int64_t>(xt.shape.size())) return a.Error("axis out of range");
  std::vector<int64_t> normalized(xt.shape.begin() + axis, xt.shape.end());
  at::Tensor dy = a.Random(xt.shape, xt.dtype), x = a.Random(xt.shape, xt.dtype);
  at::Tensor w = at::randn(normalized, x.options()), b = at::zeros_like(w);
  double eps = a.op().GetFloat("epsilon", 1e-5);
  auto [y, mean, rstd] = at::native_layer_norm(x, normalized, w, b, eps);
  auto [mask, first] = NormMask(a);
  return Make(
      [=, mean = mean, rstd = rstd, mask = mask, first = first] {
        return Pick(at::native_layer_norm_backward(dy, x, normalized, mean, rstd, w, b, mask),
                    first);
      },
      "at::native_layer_norm_backward");
}

Result SoftmaxGrad(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 2));
  at::Tensor dy = a.In(0);
  int64_t axis = a.op().GetInt("axis", -1);
  at::ScalarType dtype = dy.scalar_type();
  if (a.op().kind == K::kLogSoftmaxGrad) {
    at::Tensor y = at::_log_softmax(at::randn_like(dy), axis, false);
    return Make([=] { return at::_log_softmax_backward_data(dy, y, axis, dtype); },
                "at::_log_softmax_backward_data");
  }
  at::Tensor y = at::_softmax(at::randn_like(dy), axis, false);
  return Make([=] { return at::_softmax_backward_data(dy, y, axis, dtype); },
              "at::_softmax_backward_data");
}

Result GatherGrad(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 3));
  int idx_input = -1;
  for (int i = 1; i < a.num_inputs(); ++i) {
    if (a.InputIsInteger(i)) idx_input = i;
  }
  if (idx_input < 0) return a.Error("needs an integer indices input");
  const graph::Tensor& dw = a.out(0);
  int64_t axis = a.op().GetInt("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(dw.shape.size());
  if (axis < 0 || axis >= static_cast<int64_t>(dw.shape.size())) return a.Error("axis out of range");
  at::Tensor dy = a.In(0);
  at::Tensor idx = a.Indices(a.in(idx_input).shape, graph::DType::kI64, dw.shape[axis]);
  if (axis == 0 && dw.shape.size() == 2) {
    const int64_t rows = dw.shape[0];
    return Make([=] { return at::embedding_dense_backward(dy, idx, rows, -1, false); },
                "at::embedding_dense_backward");
  }
  std::vector<int64_t> flat(dw.shape.begin(), dw.shape.begin() + axis);
  flat.push_back(idx.numel());
  flat.insert(flat.end(), dw.shape.begin() + axis + 1, dw.shape.end());
  std::vector<int64_t> shape = dw.shape;
  return Make(
      [=] {
        return at::zeros(shape, dy.options()).index_add_(axis, idx.reshape({-1}), dy.reshape(flat));
      },
      "at::zeros + index_add_");
}

Result LstmGrad(const OpArgs& a) {
  if (a.op().GetInt("num_forward_inputs", 0) >= 8) {
    return absl::UnimplementedError("cpu profiler: LSTM with peepholes (input P) has no ATen kernel");
  }
  ASSIGN_OR_RETURN(LstmArgs l, MakeLstmArgs(a, /*requires_grad=*/true));
  std::vector<int64_t> slots = a.op().GetInts("grad_inputs");
  const bool wants_dx = slots.empty() || std::find(slots.begin(), slots.end(), 0) != slots.end();
  // CPU LSTM backward has no single ATen kernel: autograd runs the cell
  // ops' backward, exactly what a LibTorch training step does.
  auto [y, hy, cy] = at::lstm(l.x, {l.h0, l.c0}, l.params, l.has_bias, 1, 0.0, true,
                              l.bidirectional, l.batch_first);
  at::Tensor dy = at::randn_like(y);
  // The builder's LSTMGrad reads (forward inputs, forward outputs, dY...);
  // it computes dX only when X needs it, the weight gradients always.
  std::vector<at::Tensor> wrt;
  if (wants_dx) wrt.push_back(l.x);
  wrt.insert(wrt.end(), l.params.begin(), l.params.end());
  return Make(
      [y = y, dy, wrt] {
        return torch::autograd::grad({y}, wrt, {dy}, /*retain_graph=*/true)[0];
      },
      "at::lstm + torch::autograd::grad", CpuKernel::Check::kNone);
}

int64_t ReductionCode(const graph::Op& op) {
  std::string r = op.GetString("reduction", "mean");
  if (r == "none") return at::Reduction::None;
  if (r == "sum") return at::Reduction::Sum;
  return at::Reduction::Mean;
}

Result CrossEntropyGrad(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 4));
  const graph::Tensor& dx = a.out(0);
  int labels_input = -1;
  for (int i = 0; i < a.num_inputs(); ++i) {
    if (a.InputIsInteger(i)) labels_input = i;
  }
  if (labels_input < 0) return a.Error("needs an integer labels input");
  if (dx.shape.size() != 2) {
    return absl::UnimplementedError(absl::StrCat(
        "cpu profiler: SoftmaxCrossEntropyLossGrad is mapped for scores [N,C] only; op '",
        a.op().name, "' has ", graph::ShapeString(dx.shape)));
  }
  at::Tensor logp = at::_log_softmax(a.Random(dx.shape, dx.dtype), 1, false);
  at::Tensor labels = a.Indices({dx.shape[0]}, graph::DType::kI64, dx.shape[1]);
  const int64_t reduction = ReductionCode(a.op());
  const int64_t ignore = a.op().GetInt("ignore_index", -100);
  at::Tensor total_weight =
      std::get<1>(at::nll_loss_forward(logp, labels, c10::nullopt, reduction, ignore));
  at::Tensor dloss = reduction == at::Reduction::None ? at::ones({dx.shape[0]}, logp.options())
                                                      : at::ones({}, logp.options());
  at::ScalarType dtype = logp.scalar_type();
  // What autograd runs for cross_entropy: nll_loss backward, then
  // log_softmax backward.
  return Make(
      [=] {
        at::Tensor g = at::nll_loss_backward(dloss, logp, labels, c10::nullopt, reduction, ignore,
                                             total_weight);
        return at::_log_softmax_backward_data(g, logp, 1, dtype);
      },
      "at::nll_loss_backward + at::_log_softmax_backward_data");
}

Result ReduceGrad(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 2));
  const graph::Tensor& dx = a.out(0);
  const auto& dys = a.in(0).shape;
  // dY broadcast back over the reduced axes: keepdims shape first.
  std::vector<int64_t> keep(dx.shape.size(), 1);
  std::vector<int64_t> axes = a.op().GetInts("axes");
  if (dys.size() == dx.shape.size()) {
    keep = dys;
  } else if (!axes.empty()) {
    const int64_t rank = static_cast<int64_t>(dx.shape.size());
    std::vector<bool> reduced(rank, false);
    for (int64_t ax : axes) reduced[(ax + rank) % rank] = true;
    for (int64_t i = 0; i < rank; ++i) keep[i] = reduced[i] ? 1 : dx.shape[i];
  } else if (a.in(0).NumElements() != 1) {
    return a.Error("cannot tell the reduced axes: give `axes` or a keepdims dY");
  }
  at::Tensor dy = a.Random(keep, a.in(0).dtype);
  std::vector<int64_t> shape = dx.shape;
  double count = static_cast<double>(dx.NumElements()) / static_cast<double>(dy.numel());
  if (a.op().kind == K::kReduceMeanGrad) {
    return Make([=] { return at::div(dy.expand(shape), count); }, "at::expand + at::div");
  }
  return Make([=] { return dy.expand(shape).contiguous(); }, "at::expand + contiguous");
}

Result SgdMomentumUpdate(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 3));
  at::Tensor p = a.In(0), g = a.In(1);
  at::Tensor buf = a.num_inputs() == 3 ? a.In(2) : at::zeros_like(p);
  double lr = a.op().GetFloat("lr", 0.01), mu = a.op().GetFloat("momentum", 0.9);
  double wd = a.op().GetFloat("weight_decay", 0.0);
  // torch.optim.SGD's single-tensor step.
  return Make(
      [=]() mutable {
        at::Tensor d = wd != 0 ? g.add(p, wd) : g;
        buf.mul_(mu).add_(d);
        return p.add_(buf, -lr);
      },
      "mul_ + add_ + add_ (torch.optim.SGD step)");
}

Result AdamUpdate(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 4));
  at::Tensor p = a.In(0), g = a.In(1);
  at::Tensor m = a.num_inputs() >= 3 ? a.In(2) : at::zeros_like(p);
  at::Tensor v = a.num_inputs() >= 4 ? a.In(3).abs() : at::zeros_like(p);
  double lr = a.op().GetFloat("lr", 1e-3), b1 = a.op().GetFloat("beta1", 0.9);
  double b2 = a.op().GetFloat("beta2", 0.999), eps = a.op().GetFloat("epsilon", 1e-8);
  double wd = a.op().GetFloat("weight_decay", 0.0);
  const double step = 10;  // bias corrections of a typical step; time does not depend on it
  const double bc1 = 1 - std::pow(b1, step), bc2_sqrt = std::sqrt(1 - std::pow(b2, step));
  // torch.optim.Adam's single-tensor step (1.13).
  return Make(
      [=]() mutable {
        at::Tensor d = wd != 0 ? g.add(p, wd) : g;
        m.lerp_(d, 1 - b1);
        v.mul_(b2).addcmul_(d, d, 1 - b2);
        at::Tensor denom = (v.sqrt() / bc2_sqrt).add_(eps);
        return p.addcdiv_(m, denom, -lr / bc1);
      },
      "lerp_ + mul_ + addcmul_ + sqrt + div + add_ + addcdiv_ (torch.optim.Adam step)");
}

using Builder = Result (*)(const OpArgs&);
const std::map<graph::OpKind, Builder>& Builders() {
  static const auto* b = new std::map<graph::OpKind, Builder>{
      {K::kConvGradData, ConvGrad},
      {K::kConvGradFilter, ConvGrad},
      {K::kBatchNormalizationGrad, BatchNormGrad},
      {K::kLayerNormalizationGrad, LayerNormGrad},
      {K::kSoftmaxGrad, SoftmaxGrad},
      {K::kLogSoftmaxGrad, SoftmaxGrad},
      {K::kGatherGrad, GatherGrad},
      {K::kLSTMGrad, LstmGrad},
      {K::kDropoutGrad, DropoutGrad},
      {K::kSoftmaxCrossEntropyLossGrad, CrossEntropyGrad},
      {K::kReduceSumGrad, ReduceGrad},
      {K::kReduceMeanGrad, ReduceGrad},
      {K::kDivGrad, BinaryGrad},
      {K::kPowGrad, BinaryGrad},
      {K::kMinGrad, BinaryGrad},
      {K::kMaxGrad, BinaryGrad},
      {K::kWhereGrad, BinaryGrad},
      {K::kMeanGrad, BinaryGrad},
      {K::kSgdMomentumUpdate, SgdMomentumUpdate},
      {K::kAdamUpdate, AdamUpdate},
  };
  return *b;
}

}  // namespace

bool BackwardSupports(graph::OpKind kind) {
  return Builders().count(kind) > 0 || ElementwiseGrads().count(kind) > 0;
}

Result MakeBackwardKernel(const OpArgs& a) {
  if (auto it = Builders().find(a.op().kind); it != Builders().end()) return it->second(a);
  return ElementwiseGrad(a);
}

}  // namespace braid::worker::internal
