// Forward op types (ONNX names) -> ATen calls.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "worker/cpu_kernels.h"

namespace braid::worker::internal {
namespace {

using Result = std::optional<absl::StatusOr<CpuKernel>>;
using K = graph::OpKind;
using Unary = at::Tensor (*)(const at::Tensor&, const graph::Op&);


const std::map<graph::OpKind, std::pair<Unary, const char*>>& UnaryOps() {
  static const auto* ops = new std::map<graph::OpKind, std::pair<Unary, const char*>>{
      {K::kRelu, {[](const at::Tensor& x, const graph::Op&) { return at::relu(x); }, "at::relu"}},
      {K::kGelu,
       {[](const at::Tensor& x, const graph::Op& op) {
          return at::gelu(x, op.GetString("approximate", "none"));
        },
        "at::gelu"}},
      {K::kSigmoid, {[](const at::Tensor& x, const graph::Op&) { return at::sigmoid(x); }, "at::sigmoid"}},
      {K::kTanh, {[](const at::Tensor& x, const graph::Op&) { return at::tanh(x); }, "at::tanh"}},
      {K::kExp, {[](const at::Tensor& x, const graph::Op&) { return at::exp(x); }, "at::exp"}},
      {K::kLog, {[](const at::Tensor& x, const graph::Op&) { return at::log(x); }, "at::log"}},
      {K::kSqrt, {[](const at::Tensor& x, const graph::Op&) { return at::sqrt(x); }, "at::sqrt"}},
      {K::kNeg, {[](const at::Tensor& x, const graph::Op&) { return at::neg(x); }, "at::neg"}},
      {K::kAbs, {[](const at::Tensor& x, const graph::Op&) { return at::abs(x); }, "at::abs"}},
      {K::kErf, {[](const at::Tensor& x, const graph::Op&) { return at::erf(x); }, "at::erf"}},
      {K::kReciprocal,
       {[](const at::Tensor& x, const graph::Op&) { return at::reciprocal(x); }, "at::reciprocal"}},
      {K::kLeakyRelu,
       {[](const at::Tensor& x, const graph::Op& op) {
          return at::leaky_relu(x, op.GetFloat("alpha", 0.01));
        },
        "at::leaky_relu"}},
      {K::kElu,
       {[](const at::Tensor& x, const graph::Op& op) { return at::elu(x, op.GetFloat("alpha", 1.0)); },
        "at::elu"}},
      {K::kSoftplus, {[](const at::Tensor& x, const graph::Op&) { return at::softplus(x); }, "at::softplus"}},
      // ONNX HardSigmoid's alpha/beta default to 0.2/0.5, ATen's to 1/6 and
      // 1/2: the same kernel, so the time is the same.
      {K::kHardSigmoid,
       {[](const at::Tensor& x, const graph::Op&) { return at::hardsigmoid(x); }, "at::hardsigmoid"}},
      {K::kHardSwish,
       {[](const at::Tensor& x, const graph::Op&) { return at::hardswish(x); }, "at::hardswish"}},
      {K::kClip,
       {[](const at::Tensor& x, const graph::Op& op) {
          return at::clamp(x, op.GetFloat("min", -1.0), op.GetFloat("max", 1.0));
        },
        "at::clamp"}},
      {K::kFloor, {[](const at::Tensor& x, const graph::Op&) { return at::floor(x); }, "at::floor"}},
      {K::kCeil, {[](const at::Tensor& x, const graph::Op&) { return at::ceil(x); }, "at::ceil"}},
      {K::kSin, {[](const at::Tensor& x, const graph::Op&) { return at::sin(x); }, "at::sin"}},
      {K::kCos, {[](const at::Tensor& x, const graph::Op&) { return at::cos(x); }, "at::cos"}},
      {K::kIdentity, {[](const at::Tensor& x, const graph::Op&) { return x.clone(); }, "at::clone"}},
  };
  return *ops;
}

using Binary = at::Tensor (*)(const at::Tensor&, const at::Tensor&);
const std::map<graph::OpKind, std::pair<Binary, const char*>>& BinaryOps() {
  static const auto* ops = new std::map<graph::OpKind, std::pair<Binary, const char*>>{
      {K::kAdd, {[](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }, "at::add"}},
      {K::kSum, {[](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }, "at::add"}},
      {K::kSub, {[](const at::Tensor& a, const at::Tensor& b) { return at::sub(a, b); }, "at::sub"}},
      {K::kMul, {[](const at::Tensor& a, const at::Tensor& b) { return at::mul(a, b); }, "at::mul"}},
      {K::kDiv, {[](const at::Tensor& a, const at::Tensor& b) { return at::div(a, b); }, "at::div"}},
      {K::kPow, {[](const at::Tensor& a, const at::Tensor& b) { return at::pow(a, b); }, "at::pow"}},
      {K::kMax, {[](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); }, "at::maximum"}},
      {K::kMin, {[](const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); }, "at::minimum"}},
      {K::kEqual, {[](const at::Tensor& a, const at::Tensor& b) { return at::eq(a, b); }, "at::eq"}},
      {K::kLess, {[](const at::Tensor& a, const at::Tensor& b) { return at::lt(a, b); }, "at::lt"}},
      {K::kGreater, {[](const at::Tensor& a, const at::Tensor& b) { return at::gt(a, b); }, "at::gt"}},
      {K::kAnd,
       {[](const at::Tensor& a, const at::Tensor& b) { return at::logical_and(a, b); },
        "at::logical_and"}},
      {K::kOr,
       {[](const at::Tensor& a, const at::Tensor& b) { return at::logical_or(a, b); },
        "at::logical_or"}},
  };
  return *ops;
}

Result Elementwise(const OpArgs& a) {
  const graph::OpKind t = a.op().kind;
  if (auto it = UnaryOps().find(t); it != UnaryOps().end()) {
    RETURN_IF_ERROR(a.Arity(1, 3));
    at::Tensor x = a.In(0);
    Unary f = it->second.first;
    graph::Op op = a.op();  // a copy: the kernel may outlive the graph
    return Make([x, f, op] { return f(x, op); }, it->second.second);
  }
  if (auto it = BinaryOps().find(t); it != BinaryOps().end()) {
    RETURN_IF_ERROR(a.Arity(2, 16));
    if (t != K::kSum && t != K::kMax && t != K::kMin && a.num_inputs() != 2) return a.Error("expects 2 inputs");
    std::vector<at::Tensor> xs;
    for (int i = 0; i < a.num_inputs(); ++i) xs.push_back(a.In(i));
    Binary f = it->second.first;
    return Make(
        [xs, f] {
          at::Tensor acc = f(xs[0], xs[1]);
          for (size_t i = 2; i < xs.size(); ++i) acc = f(acc, xs[i]);
          return acc;
        },
        it->second.second);
  }
  if (t == K::kWhere) {
    RETURN_IF_ERROR(a.Arity(3, 3));
    at::Tensor c = a.In(0).to(at::kBool), x = a.In(1), y = a.In(2);
    return Make([c, x, y] { return at::where(c, x, y); }, "at::where");
  }
  if (t == K::kCast) {
    RETURN_IF_ERROR(a.Arity(1, 1));
    at::Tensor x = a.In(0);
    at::ScalarType to = ToScalarType(a.out(0).dtype);
    return Make([x, to] { return x.to(to); }, "at::Tensor::to");
  }
  return std::nullopt;
}

Result Conv(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 3));
  const auto& xs = a.in(0).shape;
  const auto& ws = a.in(1).shape;
  if (xs.size() < 3 || ws.size() != xs.size()) return a.Error("needs X [N,C,...] and W of equal rank");
  const size_t n = xs.size() - 2;
  std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
  std::vector<int64_t> strides = IntsOr(a.op(), "strides", n, 1);
  std::vector<int64_t> dilations = IntsOr(a.op(), "dilations", n, 1);
  std::vector<int64_t> in_sp(xs.begin() + 2, xs.end());
  const auto& ys = a.out(0).shape;
  std::vector<int64_t> out_sp(ys.size() == xs.size() ? ys.begin() + 2 : ys.end(), ys.end());
  std::vector<int64_t> pads = ResolvePads(a.op(), in_sp, out_sp, kernel, strides, dilations);
  std::vector<int64_t> torch_pad;
  std::optional<std::vector<int64_t>> padding = SymmetricPads(pads, &torch_pad);
  int64_t groups = a.op().GetInt("group", 1);
  at::Tensor x = a.In(0), w = a.In(1);
  c10::optional<at::Tensor> b;
  if (a.num_inputs() == 3) b = a.In(2);
  std::vector<int64_t> zeros(n, 0);
  if (padding) {
    return Make(
        [=] {
          return at::convolution(x, w, b, strides, *padding, dilations, false, zeros, groups);
        },
        "at::convolution");
  }
  // ONNX allows begin != end padding; ATen does not: pad explicitly first, as
  // ONNX Runtime does.
  return Make(
      [=] {
        at::Tensor xp = at::constant_pad_nd(x, torch_pad, 0);
        return at::convolution(xp, w, b, strides, zeros, dilations, false, zeros, groups);
      },
      "at::constant_pad_nd + at::convolution");
}

at::Tensor MaybeTranspose(const at::Tensor& t, bool trans) {
  return trans && t.dim() >= 2 ? t.transpose(-2, -1) : t;
}

Result MatMul(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 2));
  at::Tensor x = a.In(0), y = a.In(1);
  bool ta = a.op().GetInt("transA", 0) != 0, tb = a.op().GetInt("transB", 0) != 0;
  // The transposed operand stays a strided view: matmul hands BLAS a
  // transpose flag instead of copying, as a backward MatMul kernel would.
  return Make([=] { return at::matmul(MaybeTranspose(x, ta), MaybeTranspose(y, tb)); },
              "at::matmul");
}

Result Gemm(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 3));
  at::Tensor x = a.In(0), y = a.In(1);
  bool ta = a.op().GetInt("transA", 0) != 0, tb = a.op().GetInt("transB", 0) != 0;
  double alpha = a.op().GetFloat("alpha", 1.0), beta = a.op().GetFloat("beta", 1.0);
  if (a.num_inputs() == 3) {
    at::Tensor c = a.In(2);
    return Make([=] { return at::addmm(c, MaybeTranspose(x, ta), MaybeTranspose(y, tb), beta, alpha); },
                "at::addmm");
  }
  if (alpha == 1.0) {
    return Make([=] { return at::mm(MaybeTranspose(x, ta), MaybeTranspose(y, tb)); }, "at::mm");
  }
  return Make([=] { return at::mm(MaybeTranspose(x, ta), MaybeTranspose(y, tb)).mul_(alpha); },
              "at::mm + mul_");
}

Result BatchNorm(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(5, 5));
  at::Tensor x = a.In(0), scale = a.In(1), bias = a.In(2), mean = a.In(3);
  at::Tensor var = at::rand(a.in(4).shape, x.options()) + 0.5;
  double momentum = 1.0 - a.op().GetFloat("momentum", 0.9), eps = a.op().GetFloat("epsilon", 1e-5);
  // A training iteration normalizes with batch statistics (ONNX exports of
  // models usually say training_mode=0; braid profiles the training step).
  return Make(
      [=] {
        return std::get<0>(at::native_batch_norm(x, scale, bias, mean, var, true, momentum, eps));
      },
      "at::native_batch_norm(training=true)");
}

Result LayerNorm(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 3));
  at::Tensor x = a.In(0);
  int64_t axis = a.op().GetInt("axis", -1);
  if (axis < 0) axis += x.dim();
  if (axis < 0 || axis >= x.dim()) return a.Error("axis out of range");
  std::vector<int64_t> normalized(a.in(0).shape.begin() + axis, a.in(0).shape.end());
  c10::optional<at::Tensor> w, b;
  if (a.num_inputs() > 1) w = a.In(1);
  if (a.num_inputs() > 2) b = a.In(2);
  double eps = a.op().GetFloat("epsilon", 1e-5);
  return Make([=] { return std::get<0>(at::native_layer_norm(x, normalized, w, b, eps)); },
              "at::native_layer_norm");
}

Result Softmax(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 1));
  at::Tensor x = a.In(0);
  int64_t axis = a.op().GetInt("axis", -1);
  if (a.op().kind == K::kLogSoftmax) {
    return Make([=] { return at::_log_softmax(x, axis, false); }, "at::_log_softmax");
  }
  return Make([=] { return at::_softmax(x, axis, false); }, "at::_softmax");
}


Result Gather(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 2));
  if (!a.InputIsInteger(1)) return a.Error("indices (input 1) must be an integer tensor");
  at::Tensor data = a.In(0);
  int64_t axis = a.op().GetInt("axis", 0);
  if (axis < 0) axis += data.dim();
  if (axis < 0 || axis >= data.dim()) return a.Error("axis out of range");
  at::Tensor idx = a.Indices(a.in(1).shape, graph::DType::kI64, data.size(axis));
  if (axis == 0 && data.dim() == 2) {
    return Make([=] { return at::embedding(data, idx); }, "at::embedding");
  }
  std::vector<int64_t> out_shape(a.in(0).shape.begin(), a.in(0).shape.begin() + axis);
  out_shape.insert(out_shape.end(), a.in(1).shape.begin(), a.in(1).shape.end());
  out_shape.insert(out_shape.end(), a.in(0).shape.begin() + axis + 1, a.in(0).shape.end());
  return Make([=] { return at::index_select(data, axis, idx.reshape({-1})).view(out_shape); },
              "at::index_select");
}

Result Lstm(const OpArgs& a) {
  if (a.num_inputs() == 8) {
    return absl::UnimplementedError("cpu profiler: LSTM with peepholes (input P) has no ATen kernel");
  }
  ASSIGN_OR_RETURN(LstmArgs l, MakeLstmArgs(a, /*requires_grad=*/false));
  // ATen's Y is [seq, batch, dirs*H], ONNX's [seq, dirs, batch, H]: same
  // elements, other layout.
  return Make(
      [l] {
        return std::get<0>(at::lstm(l.x, {l.h0, l.c0}, l.params, l.has_bias, 1, 0.0, true,
                                    l.bidirectional, l.batch_first));
      },
      "at::lstm", CpuKernel::Check::kElements);
}

Result DataMovement(const OpArgs& a) {
  const graph::OpKind t = a.op().kind;
  if (t == K::kReshape || t == K::kFlatten || t == K::kSqueeze || t == K::kUnsqueeze) {
    RETURN_IF_ERROR(a.Arity(1, 2));
    at::Tensor x = a.In(0);
    std::vector<int64_t> shape = a.out(0).shape;
    // A view of a contiguous tensor: the time is ATen's dispatch overhead.
    return Make([=] { return at::reshape(x, shape); }, "at::reshape");
  }
  if (t == K::kTranspose) {
    RETURN_IF_ERROR(a.Arity(1, 1));
    at::Tensor x = a.In(0);
    std::vector<int64_t> perm = a.op().GetInts("perm");
    if (perm.empty()) {
      for (int64_t i = x.dim() - 1; i >= 0; --i) perm.push_back(i);
    }
    if (static_cast<int64_t>(perm.size()) != x.dim()) return a.Error("perm has the wrong length");
    return Make([=] { return x.permute(perm).contiguous(); }, "at::permute + contiguous");
  }
  if (t == K::kConcat) {
    RETURN_IF_ERROR(a.Arity(1, 1 << 16));
    std::vector<at::Tensor> xs;
    for (int i = 0; i < a.num_inputs(); ++i) xs.push_back(a.In(i));
    int64_t axis = a.op().GetInt("axis", 0);
    return Make([=] { return at::cat(xs, axis); }, "at::cat");
  }
  return std::nullopt;
}

// Slice, Pad, Split, Expand, ConstantOfShape: materialized (a standalone
// kernel writes its output), with bounds from attributes or output shapes.
Result Reshaping(const OpArgs& a) {
  const graph::OpKind t = a.op().kind;
  if (t == K::kConstantOfShape) {
    std::vector<int64_t> shape = a.out(0).shape;
    auto options = at::TensorOptions().dtype(ToScalarType(a.out(0).dtype));
    double v = a.op().GetFloat("value", 0.0);
    return Make([=] { return at::full(shape, v, options); }, "at::full");
  }
  RETURN_IF_ERROR(a.Arity(1, 5));
  at::Tensor x = a.In(0);
  const auto& in = a.in(0).shape;
  const auto& out = a.out(0).shape;
  if (t == K::kExpand) {
    return Make([=] { return x.expand(out).contiguous(); }, "at::expand + contiguous");
  }
  if (t == K::kSplit) {
    int64_t axis = a.op().GetInt("axis", 0);
    if (axis < 0) axis += x.dim();
    if (axis < 0 || axis >= x.dim()) return a.Error("axis out of range");
    std::vector<int64_t> sizes;
    for (int i = 0; i < a.num_outputs(); ++i) sizes.push_back(a.out(i).shape[axis]);
    return Make(
        [=] {
          std::vector<at::Tensor> parts = at::split_with_sizes(x, sizes, axis);
          for (at::Tensor& p : parts) p = p.contiguous();
          return parts[0];
        },
        "at::split_with_sizes + contiguous");
  }
  if (in.size() != out.size()) return a.Error("input and output ranks differ");
  if (t == K::kSlice) {
    std::vector<int64_t> starts = a.op().GetInts("starts"), axes = a.op().GetInts("axes");
    std::vector<int64_t> steps = a.op().GetInts("steps");
    const int64_t rank = static_cast<int64_t>(in.size());
    std::vector<int64_t> start(rank, 0), step(rank, 1);
    for (size_t k = 0; k < starts.size(); ++k) {
      int64_t ax = k < axes.size() ? axes[k] : static_cast<int64_t>(k);
      if (ax < 0) ax += rank;
      if (ax < 0 || ax >= rank) continue;
      int64_t st = starts[k] < 0 ? starts[k] + in[ax] : starts[k];
      start[ax] = std::clamp<int64_t>(st, 0, in[ax]);
      if (k < steps.size() && steps[k] > 0) step[ax] = steps[k];
    }
    return Make(
        [=] {
          at::Tensor y = x;
          for (int64_t d = 0; d < rank; ++d) {
            if (out[d] == in[d]) continue;
            int64_t st = std::min(start[d], in[d] - (out[d] - 1) * step[d] - 1);
            y = y.slice(d, std::max<int64_t>(st, 0), std::max<int64_t>(st, 0) + out[d] * step[d],
                        step[d]);
          }
          return y.contiguous();
        },
        "at::slice + contiguous");
  }
  // Pad
  if (a.op().GetString("mode", "constant") != "constant") {
    return absl::UnimplementedError(absl::StrCat("cpu profiler: Pad mode '",
                                                 a.op().GetString("mode", ""), "' is not mapped"));
  }
  std::vector<int64_t> pads = a.op().GetInts("pads");
  const size_t rank = in.size();
  if (pads.size() != 2 * rank) {  // bounds are an input: pad at the end
    pads.assign(2 * rank, 0);
    for (size_t d = 0; d < rank; ++d) pads[d + rank] = out[d] - in[d];
  }
  std::vector<int64_t> torch_pad;
  for (size_t d = rank; d-- > 0;) {
    torch_pad.push_back(pads[d]);
    torch_pad.push_back(pads[d + rank]);
  }
  double v = a.op().GetFloat("value", 0.0);
  return Make([=] { return at::constant_pad_nd(x, torch_pad, v); }, "at::constant_pad_nd");
}

Result Einsum(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 8));
  std::vector<at::Tensor> xs;
  for (int i = 0; i < a.num_inputs(); ++i) xs.push_back(a.In(i));
  std::string eq = a.op().GetString("equation", "");
  if (eq.empty()) return a.Error("needs an equation");
  return Make([=] { return at::einsum(eq, xs); }, "at::einsum");
}

// Axes from the attribute, else from comparing input and output shapes.
std::vector<int64_t> ReduceAxes(const OpArgs& a) {
  return graph::ReduceAxes(a.op(), a.in(0).shape, a.out(0).shape);
}

Result Reduce(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 2));
  at::Tensor x = a.In(0);
  std::vector<int64_t> axes = ReduceAxes(a);
  bool keep = a.op().GetInt("keepdims", 1) != 0;
  const graph::OpKind t = a.op().kind;
  if (t == K::kReduceSum) return Make([=] { return at::sum(x, axes, keep); }, "at::sum");
  if (t == K::kReduceMean) return Make([=] { return at::mean(x, axes, keep); }, "at::mean");
  if (t == K::kReduceMax) return Make([=] { return at::amax(x, axes, keep); }, "at::amax");
  return Make([=] { return at::amin(x, axes, keep); }, "at::amin");
}

Result Dropout(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 3));
  at::Tensor x = a.In(0);
  double p = a.op().GetFloat("ratio", 0.5);
  return Make([=] { return std::get<0>(at::native_dropout(x, p, true)); },
              "at::native_dropout(train=true)");
}

int64_t ReductionCode(const graph::Op& op) {
  std::string r = op.GetString("reduction", "mean");
  if (r == "none") return at::Reduction::None;
  if (r == "sum") return at::Reduction::Sum;
  return at::Reduction::Mean;
}

Result CrossEntropy(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(2, 3));
  if (a.in(0).shape.size() != 2 || a.in(1).shape.size() != 1 || !a.InputIsInteger(1)) {
    return absl::UnimplementedError(absl::StrCat(
        "cpu profiler: SoftmaxCrossEntropyLoss is mapped for scores [N,C] and labels [N] only; op '",
        a.op().name, "' has scores ", graph::ShapeString(a.in(0).shape)));
  }
  at::Tensor x = a.In(0);
  at::Tensor labels = a.Indices(a.in(1).shape, graph::DType::kI64, a.in(0).shape[1]);
  c10::optional<at::Tensor> weight;
  if (a.num_inputs() == 3) weight = a.In(2);
  int64_t reduction = ReductionCode(a.op());
  int64_t ignore = a.op().GetInt("ignore_index", -100);
  return Make([=] { return at::cross_entropy_loss(x, labels, weight, reduction, ignore); },
              "at::cross_entropy_loss", CpuKernel::Check::kElements);
}

}  // namespace

absl::StatusOr<LstmArgs> MakeLstmArgs(const OpArgs& a, bool requires_grad) {
  // X, W, R first; LSTMGrad appends more (Y, dY, ...), none used here.
  RETURN_IF_ERROR(a.Arity(3, 16));
  const auto& ws = a.in(1).shape;
  const auto& rs = a.in(2).shape;
  if (a.in(0).shape.size() != 3 || ws.size() != 3 || rs.size() != 3 || ws[0] < 1 || ws[0] > 2) {
    return a.Error("needs X [seq,batch,in], W [dirs,4H,in], R [dirs,4H,H]");
  }
  const int64_t dirs = ws[0], hidden = rs[2];
  LstmArgs l;
  l.batch_first = a.op().GetInt("layout", 0) == 1;
  l.bidirectional = dirs == 2;
  l.has_bias = a.num_inputs() >= 4 && a.in(3).shape == std::vector<int64_t>{dirs, 8 * hidden};
  // detach(): a new tensor over the input's storage, so requires_grad_ does
  // not mark the executor's shared slot (worker::TensorSlots).
  l.x = a.In(0).detach().requires_grad_(requires_grad);
  at::Tensor w = a.In(1), r = a.In(2), b = l.has_bias ? a.In(3) : at::Tensor();
  for (int64_t d = 0; d < dirs; ++d) {
    l.params.push_back(w[d].clone().requires_grad_(requires_grad));
    l.params.push_back(r[d].clone().requires_grad_(requires_grad));
    // ONNX packs Wb and Rb in one [8H] row; ATen takes them separately.
    if (l.has_bias) {
      l.params.push_back(b[d].narrow(0, 0, 4 * hidden).clone().requires_grad_(requires_grad));
      l.params.push_back(
          b[d].narrow(0, 4 * hidden, 4 * hidden).clone().requires_grad_(requires_grad));
    }
  }
  const int64_t batch = a.in(0).shape[l.batch_first ? 0 : 1];
  l.h0 = at::zeros({dirs, batch, hidden}, l.x.options().requires_grad(false));
  l.c0 = at::zeros({dirs, batch, hidden}, l.x.options().requires_grad(false));
  return l;
}

namespace {

using Builder = Result (*)(const OpArgs&);
const std::map<graph::OpKind, Builder>& Builders() {
  static const auto* b = new std::map<graph::OpKind, Builder>{
      {K::kConv, Conv},
      {K::kMatMul, MatMul},
      {K::kGemm, Gemm},
      {K::kBatchNormalization, BatchNorm},
      {K::kLayerNormalization, LayerNorm},
      {K::kSoftmax, Softmax},
      {K::kLogSoftmax, Softmax},
      {K::kGather, Gather},
      {K::kLSTM, Lstm},
      {K::kReshape, DataMovement},
      {K::kFlatten, DataMovement},
      {K::kSqueeze, DataMovement},
      {K::kUnsqueeze, DataMovement},
      {K::kTranspose, DataMovement},
      {K::kConcat, DataMovement},
      {K::kReduceSum, Reduce},
      {K::kReduceMean, Reduce},
      {K::kReduceMax, Reduce},
      {K::kReduceMin, Reduce},
      {K::kDropout, Dropout},
      {K::kSlice, Reshaping},
      {K::kPad, Reshaping},
      {K::kSplit, Reshaping},
      {K::kExpand, Reshaping},
      {K::kConstantOfShape, Reshaping},
      {K::kEinsum, Einsum},
      {K::kSoftmaxCrossEntropyLoss, CrossEntropy},
  };
  return *b;
}

}  // namespace

bool ForwardSupports(graph::OpKind kind) {
  return Builders().count(kind) > 0 || UnaryOps().count(kind) > 0 || BinaryOps().count(kind) > 0 ||
         kind == K::kWhere || kind == K::kCast;
}

Result MakeForwardKernel(const OpArgs& a) {
  if (auto it = Builders().find(a.op().kind); it != Builders().end()) return it->second(a);
  return Elementwise(a);
}

}  // namespace braid::worker::internal
