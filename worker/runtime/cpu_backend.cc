#include "worker/runtime/cpu_backend.h"
#include "worker/runtime/cpu_tensor.h"

#include <ATen/ATen.h>

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "worker/fused_kernels.h"
#include "worker/runtime/values.h"

namespace braid::runtime {
namespace {

using graph::OpKind;
using K = graph::OpKind;

Value Wrap(at::Tensor t) { return WrapTensor(std::move(t)); }
const at::Tensor& T(const Value& v) { return TensorOf(v); }

// Set for the duration of one CpuBackend call: float32 program tensors are
// held and computed as float64 (CpuBackendOptions::float64).
thread_local bool widen_f32 = false;

// The ATen type a program tensor of dtype `d` is held in.
at::ScalarType Scalar(graph::DType d) {
  return widen_f32 && d == graph::DType::kF32 ? at::kDouble : ScalarTypeOf(d);
}

class WidenScope {
 public:
  explicit WidenScope(bool on) : saved_(widen_f32) { widen_f32 = on; }
  ~WidenScope() { widen_f32 = saved_; }
  WidenScope(const WidenScope&) = delete;
  WidenScope& operator=(const WidenScope&) = delete;

 private:
  bool saved_;
};

std::vector<int64_t> Shape(const graph::Graph& g, graph::TensorId t) { return g.tensor(t).shape; }

absl::Status Bad(const graph::Op& op, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(op.type, ": ", why));
}

// Dropout's keep mask for this rank's piece of the op's output. Each element's
// draw is a hash of (seed, op, step) and its index in the full tensor, so
// every split of the tensor, and the world-1 run, drop the same elements. The
// lowering states the full shape ("global_shape") and the mesh axes splitting
// each dim ("piece_axes": per dim its axes, each dim closed by -1); without
// them the local tensor is the full one.
// `key_op`: the forward Dropout's name (a DropoutGrad without the mask
// draws it again under it).
absl::StatusOr<at::Tensor> KeyedKeepMask(const graph::Op& op, const std::string& key_op,
                                         const std::vector<int64_t>& local, double ratio,
                                         const RankContext& ctx) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> keep, KeepMask(op, key_op, local, ratio, ctx));
  at::Tensor mask = at::empty(local, at::TensorOptions().dtype(at::kBool));
  bool* out = mask.data_ptr<bool>();
  for (size_t e = 0; e < keep.size(); ++e) out[e] = keep[e] != 0;
  return mask;
}

int64_t Axis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

// The start of this rank's piece of a rank-relative Slice/Pad dim.
int64_t ShardIndex(const graph::Op& op, const RankContext& ctx) {
  const std::vector<int64_t> a64 = op.GetInts("shard_axes");
  return graph::PieceIndex(ctx.program->mesh, ctx.coord, std::vector<int>(a64.begin(), a64.end()));
}

struct Conv2d {
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};
absl::StatusOr<Conv2d> ConvParams(const graph::Op& op, size_t spatial) {
  Conv2d c;
  c.stride = op.GetInts("strides");
  c.dilation = op.GetInts("dilations");
  std::vector<int64_t> pads = op.GetInts("pads");
  if (c.stride.empty()) c.stride.assign(spatial, 1);
  if (c.dilation.empty()) c.dilation.assign(spatial, 1);
  if (pads.empty()) pads.assign(2 * spatial, 0);
  const std::string auto_pad = op.GetString("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "") return Bad(op, "auto_pad is not supported");
  if (pads.size() != 2 * spatial) return Bad(op, "pads do not match the spatial rank");
  for (size_t i = 0; i < spatial; ++i) {
    if (pads[i] != pads[i + spatial]) return Bad(op, "asymmetric pads are not supported");
    c.padding.push_back(pads[i]);
  }
  c.groups = op.GetInt("group", 1);
  return c;
}

using Ins = std::vector<at::Tensor>;
using Outs = std::vector<at::Tensor>;
using Kernel = std::function<absl::StatusOr<Outs>(const graph::Graph&, const graph::Op&,
                                                  const Ins&, const RankContext&,
                                                  const CpuBackendOptions&)>;

at::Tensor ToOut(const graph::Graph& g, const graph::Op& op, at::Tensor t, int k = 0) {
  return t.to(Scalar(g.tensor(op.outputs[k]).dtype)).reshape(Shape(g, op.outputs[k]));
}

at::Tensor ReduceLike(const at::Tensor& t, const std::vector<int64_t>& shape) {
  // Sums a broadcast result back to `shape` (numpy broadcasting).
  at::Tensor r = t;
  while (r.dim() > static_cast<int64_t>(shape.size())) r = r.sum(0);
  for (int64_t d = 0; d < r.dim(); ++d)
    if (shape[d] == 1 && r.size(d) != 1) r = r.sum(d, true);
  return r;
}

std::vector<int64_t> ReduceAxes(const graph::Op& op, int64_t rank) {
  std::vector<int64_t> axes = op.GetInts("axes");
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  for (int64_t& a : axes) a = Axis(a, rank);
  return axes;
}

const std::map<OpKind, Kernel>& Kernels() {
  static const auto* m = [] {
    auto* k = new std::map<OpKind, Kernel>;
    auto unary = [&](OpKind kind, std::function<at::Tensor(const at::Tensor&, const graph::Op&)> f) {
      (*k)[kind] = [f](const graph::Graph& g, const graph::Op& op, const Ins& in,
                       const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
        return Outs{ToOut(g, op, f(in[0], op))};
      };
    };
    auto binary = [&](OpKind kind, std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> f) {
      (*k)[kind] = [f](const graph::Graph& g, const graph::Op& op, const Ins& in,
                       const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
        if (in.size() != 2) return Bad(op, "expects 2 inputs");
        return Outs{ToOut(g, op, f(in[0], in[1]))};
      };
    };
    binary(K::kAdd, [](const at::Tensor& a, const at::Tensor& b) { return a + b; });
    binary(K::kSub, [](const at::Tensor& a, const at::Tensor& b) { return a - b; });
    binary(K::kMul, [](const at::Tensor& a, const at::Tensor& b) { return a * b; });
    binary(K::kDiv, [](const at::Tensor& a, const at::Tensor& b) {
      return a.is_floating_point() ? a / b : at::div(a, b, "trunc");
    });
    binary(K::kPow, [](const at::Tensor& a, const at::Tensor& b) { return at::pow(a, b); });
    binary(K::kEqual, [](const at::Tensor& a, const at::Tensor& b) { return at::eq(a, b); });
    binary(K::kLess, [](const at::Tensor& a, const at::Tensor& b) { return at::lt(a, b); });
    binary(K::kGreater, [](const at::Tensor& a, const at::Tensor& b) { return at::gt(a, b); });
    binary(K::kLessOrEqual, [](const at::Tensor& a, const at::Tensor& b) { return at::le(a, b); });
    binary(K::kGreaterOrEqual, [](const at::Tensor& a, const at::Tensor& b) { return at::ge(a, b); });
    binary(K::kAnd, [](const at::Tensor& a, const at::Tensor& b) { return at::logical_and(a, b); });
    binary(K::kOr, [](const at::Tensor& a, const at::Tensor& b) { return at::logical_or(a, b); });
    binary(K::kMin, [](const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); });
    binary(K::kMax, [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); });
    unary(K::kNeg, [](const at::Tensor& x, const graph::Op&) { return -x; });
    unary(K::kAbs, [](const at::Tensor& x, const graph::Op&) { return x.abs(); });
    unary(K::kSqrt, [](const at::Tensor& x, const graph::Op&) { return x.sqrt(); });
    unary(K::kExp, [](const at::Tensor& x, const graph::Op&) { return x.exp(); });
    unary(K::kLog, [](const at::Tensor& x, const graph::Op&) { return x.log(); });
    unary(K::kReciprocal, [](const at::Tensor& x, const graph::Op&) { return x.reciprocal(); });
    unary(K::kRelu, [](const at::Tensor& x, const graph::Op&) { return at::relu(x); });
    unary(K::kTanh, [](const at::Tensor& x, const graph::Op&) { return x.tanh(); });
    unary(K::kSigmoid, [](const at::Tensor& x, const graph::Op&) { return x.sigmoid(); });
    unary(K::kErf, [](const at::Tensor& x, const graph::Op&) { return x.erf(); });
    unary(K::kNot, [](const at::Tensor& x, const graph::Op&) { return at::logical_not(x); });
    unary(K::kGelu, [](const at::Tensor& x, const graph::Op& op) {
      return at::gelu(x, op.GetString("approximate", "none"));
    });
    unary(K::kIdentity, [](const at::Tensor& x, const graph::Op&) { return x; });
    unary(K::kCast, [](const at::Tensor& x, const graph::Op&) { return x; });  // ToOut casts
    unary(K::kReshape, [](const at::Tensor& x, const graph::Op&) { return x; });  // ToOut reshapes
    unary(K::kFlatten, [](const at::Tensor& x, const graph::Op&) { return x; });
    unary(K::kSqueeze, [](const at::Tensor& x, const graph::Op&) { return x; });
    unary(K::kUnsqueeze, [](const at::Tensor& x, const graph::Op&) { return x; });
    unary(K::kSoftmax, [](const at::Tensor& x, const graph::Op& op) {
      return at::softmax(x, Axis(op.GetInt("axis", -1), x.dim()));
    });
    unary(K::kLogSoftmax, [](const at::Tensor& x, const graph::Op& op) {
      return at::log_softmax(x, Axis(op.GetInt("axis", -1), x.dim()));
    });
    unary(K::kTranspose, [](const at::Tensor& x, const graph::Op& op) {
      std::vector<int64_t> perm = op.GetInts("perm");
      if (perm.empty()) {
        for (int64_t i = x.dim() - 1; i >= 0; --i) perm.push_back(i);
      }
      return x.permute(perm).contiguous();
    });
    unary(K::kGlobalAveragePool, [](const at::Tensor& x, const graph::Op&) {
      std::vector<int64_t> dims;
      for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
      return x.mean(dims, true);
    });
    (*k)[K::kExpand] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                          const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      return Outs{in[0].expand(Shape(g, op.outputs[0])).contiguous()};
    };
    (*k)[K::kConstantOfShape] = [](const graph::Graph& g, const graph::Op& op, const Ins&,
                                   const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const graph::Tensor& y = g.tensor(op.outputs[0]);
      return Outs{at::full(y.shape, op.GetFloat("value", 0.0), at::TensorOptions().dtype(Scalar(y.dtype)))};
    };
    (*k)[K::kWhere] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                         const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      if (in.size() != 3) return Bad(op, "expects 3 inputs");
      return Outs{ToOut(g, op, at::where(in[0].to(at::kBool), in[1], in[2]))};
    };
    (*k)[K::kTrilu] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                         const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const int64_t kk = in.size() >= 2 ? in[1].item<int64_t>() : 0;
      return Outs{op.GetInt("upper", 1) != 0 ? at::triu(in[0], kk) : at::tril(in[0], kk)};
    };
    (*k)[K::kSum] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                       const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      at::Tensor s = in[0];
      for (size_t i = 1; i < in.size(); ++i) s = s + in[i];
      return Outs{ToOut(g, op, s)};
    };
    (*k)[K::kMatMul] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                          const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      at::Tensor a = in[0], b = in[1];
      if (op.GetInt("transA", 0) != 0) a = a.transpose(-2, -1);
      if (op.GetInt("transB", 0) != 0) b = b.transpose(-2, -1);
      return Outs{ToOut(g, op, at::matmul(a, b))};
    };
    (*k)[K::kGemm] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                        const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      at::Tensor a = in[0], b = in[1];
      if (op.GetInt("transA", 0) != 0) a = a.t();
      if (op.GetInt("transB", 0) != 0) b = b.t();
      at::Tensor y = at::mm(a, b) * op.GetFloat("alpha", 1.0);
      if (in.size() == 3) y = y + in[2] * op.GetFloat("beta", 1.0);
      return Outs{ToOut(g, op, y)};
    };
    auto reduce = [&](OpKind kind, std::function<at::Tensor(const at::Tensor&, at::IntArrayRef, bool)> f) {
      (*k)[kind] = [f](const graph::Graph& g, const graph::Op& op, const Ins& in,
                       const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
        const std::vector<int64_t> axes = ReduceAxes(op, in[0].dim());
        return Outs{ToOut(g, op, f(in[0], axes, op.GetInt("keepdims", 1) != 0))};
      };
    };
    reduce(K::kReduceSum, [](const at::Tensor& x, at::IntArrayRef a, bool kd) { return x.sum(a, kd); });
    reduce(K::kReduceMean, [](const at::Tensor& x, at::IntArrayRef a, bool kd) { return x.mean(a, kd); });
    reduce(K::kReduceSumSquare,
           [](const at::Tensor& x, at::IntArrayRef a, bool kd) { return (x * x).sum(a, kd); });
    reduce(K::kReduceMax, [](const at::Tensor& x, at::IntArrayRef a, bool kd) { return at::amax(x, a, kd); });
    reduce(K::kReduceMin, [](const at::Tensor& x, at::IntArrayRef a, bool kd) { return at::amin(x, a, kd); });
    (*k)[K::kReduceSumGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                 const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const std::vector<int64_t> xs = Shape(g, op.outputs[0]);
      at::Tensor dy = in[0];
      if (op.GetInt("keepdims", 1) == 0) {
        std::vector<int64_t> axes = ReduceAxes(op, static_cast<int64_t>(xs.size()));
        std::sort(axes.begin(), axes.end());
        for (int64_t a : axes) dy = dy.unsqueeze(a);
      }
      at::Tensor dx = dy.expand(xs).contiguous();
      if (op.kind == K::kReduceMeanGrad) dx = dx * (static_cast<double>(dy.numel()) / dx.numel());
      return Outs{dx};
    };
    (*k)[K::kReduceMeanGrad] = (*k)[K::kReduceSumGrad];
    (*k)[K::kSlice] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                         const RankContext& ctx, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      at::Tensor x = in[0];
      std::vector<int64_t> starts = op.GetInts("starts"), ends = op.GetInts("ends");
      std::vector<int64_t> axes = op.GetInts("axes"), steps = op.GetInts("steps");
      if (axes.empty()) {
        for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
      }
      if (starts.size() != ends.size() || axes.size() != starts.size()) {
        return Bad(op, "starts, ends and axes differ in length");
      }
      if (op.attrs.contains("shard_axes")) {
        if (axes.size() != 1) return Bad(op, "a rank-relative slice has one axis");
        const int64_t n = ends[0] - starts[0];
        starts[0] += ShardIndex(op, ctx) * n;
        ends[0] = starts[0] + n;
      }
      for (size_t i = 0; i < axes.size(); ++i) {
        const int64_t a = Axis(axes[i], x.dim());
        const int64_t size = x.size(a);
        const int64_t step = i < steps.size() ? steps[i] : 1;
        if (step != 1) return Bad(op, "steps other than 1 are not supported");
        int64_t s = starts[i] < 0 ? starts[i] + size : starts[i];
        int64_t e = ends[i] < 0 ? ends[i] + size : ends[i];
        s = std::clamp<int64_t>(s, 0, size);
        e = std::clamp<int64_t>(e, s, size);
        x = x.slice(a, s, e);
      }
      return Outs{ToOut(g, op, x.contiguous())};
    };
    (*k)[K::kPad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                       const RankContext& ctx, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const at::Tensor& x = in[0];
      std::vector<int64_t> pads = op.GetInts("pads");
      const int64_t r = x.dim();
      if (static_cast<int64_t>(pads.size()) != 2 * r) return Bad(op, "pads do not match the rank");
      if (op.GetString("mode", "constant") != "constant") return Bad(op, "only constant padding");
      if (op.attrs.contains("shard_axes")) {
        int dim = -1;
        for (int64_t d = 0; d < r; ++d)
          if (pads[d] + pads[d + r] != 0) dim = static_cast<int>(d);
        if (dim >= 0) {
          const int64_t total = pads[dim] + pads[dim + r];
          pads[dim] = ShardIndex(op, ctx) * x.size(dim);
          pads[dim + r] = total - pads[dim];
        }
      }
      std::vector<int64_t> tp;  // last dim first
      for (int64_t d = r - 1; d >= 0; --d) {
        tp.push_back(pads[d]);
        tp.push_back(pads[d + r]);
      }
      return Outs{at::constant_pad_nd(x, tp, op.GetFloat("value", 0.0))};
    };
    (*k)[K::kConcat] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                          const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      return Outs{at::cat(in, Axis(op.GetInt("axis", 0), in[0].dim()))};
    };
    (*k)[K::kSplit] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                         const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const int64_t axis = Axis(op.GetInt("axis", 0), in[0].dim());
      std::vector<int64_t> sizes;
      for (graph::TensorId t : op.outputs) sizes.push_back(g.tensor(t).shape[axis]);
      Outs outs;
      for (const at::Tensor& t : at::split_with_sizes(in[0], sizes, axis)) outs.push_back(t.contiguous());
      return outs;
    };
    (*k)[K::kGather] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                          const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const int64_t axis = Axis(op.GetInt("axis", 0), in[0].dim());
      at::Tensor idx = in[1].to(at::kLong);
      idx = at::where(idx < 0, idx + in[0].size(axis), idx);
      at::Tensor y = at::index_select(in[0], axis, idx.flatten());
      return Outs{y.reshape(Shape(g, op.outputs[0]))};
    };
    (*k)[K::kGatherGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                              const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const std::vector<int64_t> ds = Shape(g, op.outputs[0]);
      const int64_t axis = Axis(op.GetInt("axis", 0), static_cast<int64_t>(ds.size()));
      at::Tensor idx = in[1].to(at::kLong).flatten();
      idx = at::where(idx < 0, idx + ds[axis], idx);
      // dY: data[:axis] + indices + data[axis+1:] -> data[:axis] + [n] + data[axis+1:].
      std::vector<int64_t> s(ds.begin(), ds.begin() + axis);
      s.push_back(idx.numel());
      s.insert(s.end(), ds.begin() + axis + 1, ds.end());
      at::Tensor dx = at::zeros(ds, in[0].options());
      return Outs{dx.index_add_(axis, idx, in[0].reshape(s))};
    };
    (*k)[K::kDropout] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                           const RankContext& ctx, const CpuBackendOptions& o) -> absl::StatusOr<Outs> {
      const double ratio = op.GetFloat("ratio", 0.5);
      const bool train = op.GetInt("training_mode", 0) != 0 || op.outputs.size() > 1;
      at::Tensor mask;
      at::Tensor y;
      if (!o.dropout || !train || ratio <= 0) {
        mask = at::ones(in[0].sizes(), in[0].options().dtype(at::kBool));
        y = in[0];
      } else {
        ASSIGN_OR_RETURN(mask, KeyedKeepMask(op, op.name, in[0].sizes().vec(), ratio, ctx));
        y = in[0] * mask / (1.0 - ratio);
      }
      Outs outs{y};
      if (op.outputs.size() > 1) outs.push_back(mask.to(Scalar(g.tensor(op.outputs[1]).dtype)));
      return outs;
    };
    (*k)[K::kDropoutGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                               const RankContext& ctx, const CpuBackendOptions& o) -> absl::StatusOr<Outs> {
      const double ratio = op.GetFloat("ratio", 0.5);
      if (!o.dropout || ratio <= 0) return Outs{in[0]};
      if (in.size() >= 2) return Outs{in[0] * in[1].to(in[0].scalar_type()) / (1.0 - ratio)};
      // No mask input: a training-mode Dropout's mask is drawn again under
      // the forward op's key; an inference-mode one was the identity.
      const std::string forward = op.GetString("mask_of", "");
      if (op.GetInt("training_mode", 0) == 0 || forward.empty()) return Outs{in[0]};
      ASSIGN_OR_RETURN(at::Tensor mask, KeyedKeepMask(op, forward, in[0].sizes().vec(), ratio, ctx));
      return Outs{in[0] * mask / (1.0 - ratio)};
    };
    // Elementwise gradients: (dY, saved).
    auto grad = [&](OpKind kind, std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const graph::Op&)> f) {
      (*k)[kind] = [f](const graph::Graph& g, const graph::Op& op, const Ins& in,
                       const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
        return Outs{ToOut(g, op, f(in[0], in[1], op))};
      };
    };
    grad(K::kReluGrad, [](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) {
      return at::threshold_backward(dy, y, 0);
    });
    grad(K::kSigmoidGrad, [](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) {
      return at::sigmoid_backward(dy, y);
    });
    grad(K::kTanhGrad, [](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) {
      return at::tanh_backward(dy, y);
    });
    grad(K::kExpGrad, [](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) { return dy * y; });
    grad(K::kLogGrad, [](const at::Tensor& dy, const at::Tensor& x, const graph::Op&) { return dy / x; });
    grad(K::kSqrtGrad, [](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) {
      return dy / (2 * y);
    });
    grad(K::kReciprocalGrad, [](const at::Tensor& dy, const at::Tensor& y, const graph::Op&) {
      return -dy * y * y;
    });
    grad(K::kAbsGrad, [](const at::Tensor& dy, const at::Tensor& x, const graph::Op&) { return dy * x.sign(); });
    grad(K::kErfGrad, [](const at::Tensor& dy, const at::Tensor& x, const graph::Op&) {
      return dy * (2.0 / std::sqrt(M_PI)) * at::exp(-x * x);
    });
    grad(K::kGeluGrad, [](const at::Tensor& dy, const at::Tensor& x, const graph::Op& op) {
      return at::gelu_backward(dy, x, op.GetString("approximate", "none"));
    });
    grad(K::kSoftmaxGrad, [](const at::Tensor& dy, const at::Tensor& y, const graph::Op& op) {
      return at::_softmax_backward_data(dy, y, Axis(op.GetInt("axis", -1), y.dim()), y.scalar_type());
    });
    grad(K::kLogSoftmaxGrad, [](const at::Tensor& dy, const at::Tensor& y, const graph::Op& op) {
      return at::_log_softmax_backward_data(dy, y, Axis(op.GetInt("axis", -1), y.dim()),
                                            y.scalar_type());
    });
    (*k)[K::kDivGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                           const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      return Outs{ToOut(g, op, (-in[0] * in[1] / in[2]).expand(Shape(g, op.outputs[0])))};
    };
    (*k)[K::kPowGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                           const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const at::Tensor &dy = in[0], &b = in[1], &e = in[2];
      at::Tensor r = op.GetInt("input_index", 0) == 0 ? dy * e * at::pow(b, e - 1)
                                                      : dy * at::pow(b, e) * at::log(b);
      return Outs{ToOut(g, op, r.expand(Shape(g, op.outputs[0])))};
    };
    (*k)[K::kWhereGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                             const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      at::Tensor c = in[1].to(at::kBool);
      at::Tensor z = at::zeros({}, in[0].options());
      at::Tensor r = op.GetInt("input_index", 1) == 1 ? at::where(c, in[0], z) : at::where(c, z, in[0]);
      return Outs{ToOut(g, op, r.expand(Shape(g, op.outputs[0])))};
    };
    (*k)[K::kMinGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                           const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      // (dY, X_i, Y): dY where X_i produced Y.
      return Outs{ToOut(g, op, (in[0] * at::eq(in[1], in[2])).expand(Shape(g, op.outputs[0])))};
    };
    (*k)[K::kMaxGrad] = (*k)[K::kMinGrad];
    (*k)[K::kSoftmaxCrossEntropyLoss] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                           const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      if (op.GetString("reduction", "mean") != "mean") return Bad(op, "only reduction 'mean'");
      at::Tensor lp = at::log_softmax(in[0], 1);
      return Outs{at::nll_loss_nd(lp, in[1].to(at::kLong)).reshape(Shape(g, op.outputs[0]))};
    };
    (*k)[K::kSoftmaxCrossEntropyLossGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                               const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      // (dLoss, scores, labels) -> dScores = dLoss * (softmax - onehot) / rows.
      const at::Tensor& s = in[1];
      at::Tensor p = at::softmax(s, 1);
      at::Tensor onehot = at::zeros_like(p).scatter_(1, in[2].to(at::kLong).unsqueeze(1), 1.0);
      const double rows = static_cast<double>(s.numel() / s.size(1));
      return Outs{(p - onehot) * (in[0] / rows)};
    };
    (*k)[K::kLayerNormalization] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                      const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const int64_t axis = Axis(op.GetInt("axis", -1), in[0].dim());
      std::vector<int64_t> norm(in[0].sizes().begin() + axis, in[0].sizes().end());
      at::Tensor b = in.size() > 2 ? in[2] : at::Tensor();
      auto [y, mean, rstd] = at::native_layer_norm(in[0], norm, in[1], b, op.GetFloat("epsilon", 1e-5));
      Outs outs{y};
      if (op.outputs.size() > 1) outs.push_back(mean.reshape(Shape(g, op.outputs[1])));
      if (op.outputs.size() > 2) outs.push_back(rstd.reshape(Shape(g, op.outputs[2])));
      return outs;
    };
    (*k)[K::kLayerNormalizationGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                          const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const at::Tensor &dy = in[0], &x = in[1];
      const int64_t axis = Axis(op.GetInt("axis", -1), x.dim());
      std::vector<int64_t> norm(x.sizes().begin() + axis, x.sizes().end());
      at::Tensor w = in.size() > 2 ? in[2] : at::ones(norm, x.options());
      auto [y, mean, rstd] =
          at::native_layer_norm(x, norm, w, at::Tensor(), op.GetFloat("epsilon", 1e-5));
      auto [dx, dw, db] = at::native_layer_norm_backward(dy, x, norm, mean, rstd, w,
                                                         at::zeros(norm, x.options()), {true, true, true});
      std::map<int64_t, at::Tensor> by_slot = {{0, dx}, {1, dw}, {2, db}};
      Outs outs;
      for (int64_t s : op.GetInts("grad_inputs")) outs.push_back(by_slot.at(s));
      return outs;
    };
    (*k)[K::kBatchNormalization] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                      const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      if (in.size() != 5) return Bad(op, "expects 5 inputs");
      const bool train = op.GetInt("training_mode", 0) != 0 || op.outputs.size() > 1;
      const double eps = op.GetFloat("epsilon", 1e-5), mom = op.GetFloat("momentum", 0.9);
      at::Tensor rm = in[3].clone(), rv = in[4].clone();
      // ATen's momentum weighs the batch statistic; ONNX's the running one.
      auto [y, mean, invstd] = at::native_batch_norm(in[0], in[1], in[2], rm, rv, train, 1.0 - mom, eps);
      Outs outs{y};
      if (op.outputs.size() > 1) outs.push_back(rm);
      if (op.outputs.size() > 2) outs.push_back(rv);
      // Opset <= 13 training mode: the batch's own mean and variance too.
      if (op.outputs.size() > 3) outs.push_back(mean);
      if (op.outputs.size() > 4) outs.push_back(invstd.pow(-2) - eps);
      return outs;
    };
    (*k)[K::kBatchNormalizationGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                          const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const at::Tensor &dy = in[0], &x = in[1];
      const double eps = op.GetFloat("epsilon", 1e-5);
      at::Tensor w = in.size() > 2 ? in[2] : at::ones({x.size(1)}, x.options());
      at::Tensor rm = at::zeros({x.size(1)}, x.options()), rv = at::ones({x.size(1)}, x.options());
      auto [y, mean, invstd] = at::native_batch_norm(x, w, at::Tensor(), rm, rv, true, 0.0, eps);
      auto [dx, dw, db] = at::native_batch_norm_backward(dy, x, w, rm, rv, mean, invstd, true, eps,
                                                         {true, true, true});
      std::map<int64_t, at::Tensor> by_slot = {{0, dx}, {1, dw}, {2, db}};
      Outs outs;
      for (int64_t s : op.GetInts("grad_inputs")) {
        if (!by_slot.contains(s)) return Bad(op, "running statistics have no gradient");
        outs.push_back(by_slot.at(s));
      }
      return outs;
    };
    (*k)[K::kConv] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                        const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      ASSIGN_OR_RETURN(Conv2d c, ConvParams(op, in[0].dim() - 2));
      at::Tensor b = in.size() > 2 ? in[2] : at::Tensor();
      std::vector<int64_t> zeros(c.stride.size(), 0);
      return Outs{at::convolution(in[0], in[1], b, c.stride, c.padding, c.dilation, false, zeros,
                                  c.groups)};
    };
    (*k)[K::kConvGradData] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      // (dY, W) -> dX
      const std::vector<int64_t> xs = Shape(g, op.outputs[0]);
      ASSIGN_OR_RETURN(Conv2d c, ConvParams(op, xs.size() - 2));
      std::vector<int64_t> zeros(c.stride.size(), 0);
      at::Tensor x = at::empty(xs, in[0].options());
      auto r = at::convolution_backward(in[0], x, in[1], c10::nullopt, c.stride, c.padding,
                                        c.dilation, false, zeros, c.groups, {true, false, false});
      return Outs{std::get<0>(r)};
    };
    (*k)[K::kConvGradFilter] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                  const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      // (X, dY) -> dW
      const std::vector<int64_t> ws = Shape(g, op.outputs[0]);
      ASSIGN_OR_RETURN(Conv2d c, ConvParams(op, in[0].dim() - 2));
      std::vector<int64_t> zeros(c.stride.size(), 0);
      at::Tensor w = at::empty(ws, in[0].options());
      auto r = at::convolution_backward(in[1], in[0], w, c10::nullopt, c.stride, c.padding,
                                        c.dilation, false, zeros, c.groups, {false, true, false});
      return Outs{std::get<1>(r)};
    };
    (*k)[K::kMaxPool] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                           const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      ASSIGN_OR_RETURN(Conv2d c, ConvParams(op, in[0].dim() - 2));
      const std::vector<int64_t> ks = op.GetInts("kernel_shape");
      if (in[0].dim() != 4) return Bad(op, "only 2-D pooling");
      return Outs{at::max_pool2d(in[0], ks, c.stride, c.padding, c.dilation,
                                 op.GetInt("ceil_mode", 0) != 0)};
    };
    (*k)[K::kMaxPoolGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                               const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      // (dY, X)
      ASSIGN_OR_RETURN(Conv2d c, ConvParams(op, in[1].dim() - 2));
      const std::vector<int64_t> ks = op.GetInts("kernel_shape");
      const bool ceil = op.GetInt("ceil_mode", 0) != 0;
      auto [y, idx] = at::max_pool2d_with_indices(in[1], ks, c.stride, c.padding, c.dilation, ceil);
      return Outs{at::max_pool2d_with_indices_backward(in[0], in[1], ks, c.stride, c.padding,
                                                       c.dilation, ceil, idx)};
    };
    (*k)[K::kAveragePool] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                               const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      ASSIGN_OR_RETURN(Conv2d c, ConvParams(op, in[0].dim() - 2));
      if (in[0].dim() != 4) return Bad(op, "only 2-D pooling");
      return Outs{at::avg_pool2d(in[0], op.GetInts("kernel_shape"), c.stride, c.padding,
                                 op.GetInt("ceil_mode", 0) != 0, op.GetInt("count_include_pad", 0) != 0)};
    };
    (*k)[K::kAveragePoolGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                   const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const std::vector<int64_t> xs = Shape(g, op.outputs[0]);
      ASSIGN_OR_RETURN(Conv2d c, ConvParams(op, xs.size() - 2));
      at::Tensor x = at::empty(xs, in[0].options());
      return Outs{at::avg_pool2d_backward(in[0], x, op.GetInts("kernel_shape"), c.stride, c.padding,
                                          op.GetInt("ceil_mode", 0) != 0,
                                          op.GetInt("count_include_pad", 0) != 0, c10::nullopt)};
    };
    (*k)[K::kGlobalAveragePoolGrad] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                         const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const std::vector<int64_t> xs = Shape(g, op.outputs[0]);
      int64_t area = 1;
      for (size_t d = 2; d < xs.size(); ++d) area *= xs[d];
      return Outs{(in[0] / static_cast<double>(area)).expand(xs).contiguous()};
    };
    (*k)[K::kSgdMomentumUpdate] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                                     const RankContext&, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      const double lr = op.GetFloat("lr", 0.01), mu = op.GetFloat("momentum", 0.9);
      const double wd = op.GetFloat("weight_decay", 0.0);
      at::Tensor d = wd != 0 ? at::add(in[1], in[0], wd) : in[1];
      // torch.optim.SGD: buf = mu * buf + d (buf = d on the first step, when
      // it is 0); one pass over the tensors each (add with alpha).
      at::Tensor buf = in.size() > 2 ? at::add(d, in[2], mu) : d;
      Outs outs{at::add(in[0], buf, -lr)};
      if (op.outputs.size() > 1) outs.push_back(buf);
      return outs;
    };
    (*k)[K::kAdamUpdate] = [](const graph::Graph& g, const graph::Op& op, const Ins& in,
                              const RankContext& ctx, const CpuBackendOptions&) -> absl::StatusOr<Outs> {
      if (in.size() != 4) return Bad(op, "expects (p, g, m, v)");
      const double lr = op.GetFloat("lr", 1e-3), b1 = op.GetFloat("beta1", 0.9);
      const double b2 = op.GetFloat("beta2", 0.999), eps = op.GetFloat("epsilon", 1e-8);
      const double wd = op.GetFloat("weight_decay", 0.0);
      const double t = ctx.step + 1;
      at::Tensor d = wd != 0 ? in[1] + in[0] * wd : in[1];
      at::Tensor m = in[2] * b1 + d * (1 - b1);
      at::Tensor v = in[3] * b2 + d * d * (1 - b2);
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      at::Tensor p = in[0] - (m / bc1) / ((v / bc2).sqrt() + eps) * lr;
      return Outs{p, m, v};
    };
    return k;
  }();
  return *m;
}

}  // namespace

bool CpuBackendRuns(graph::OpKind k) { return Kernels().contains(k); }

absl::StatusOr<Value> CpuBackend::Load(const graph::Tensor& t, const graph::LoadSpec& spec,
                                       const RankContext& ctx) {
  WidenScope widen(options_.float64);
  const auto opts = at::TensorOptions().dtype(Scalar(t.dtype));
  const uint64_t seed = SeedOf(ctx.program->seed, spec.source, spec.per_step ? ctx.step : -1);
  const std::vector<int64_t>& full = spec.full_shape;
  at::Tensor x;
  switch (spec.init) {
    case graph::InitKind::kNormal:
    case graph::InitKind::kUniform:
    case graph::InitKind::kIntegers: {
      // Drawn on the host by the runtime's own generator (values.h), so
      // every backend loads the same numbers.
      ASSIGN_OR_RETURN(HostTensor h, FullValue(spec, seed));
      x = at::from_blob(h.data.data(), full, at::TensorOptions().dtype(at::kFloat)).clone();
      x = spec.init == graph::InitKind::kIntegers ? x.to(at::kLong).to(opts.dtype())
                                                  : x.to(opts.dtype());
      break;
    }
    case graph::InitKind::kOnes: x = at::ones(full, opts); break;
    case graph::InitKind::kZeros: x = at::zeros(full, opts); break;
    case graph::InitKind::kFill: x = at::full(full, spec.value, opts); break;
    case graph::InitKind::kValue: {
      at::Tensor v = at::tensor(at::ArrayRef<double>(spec.values), at::TensorOptions().dtype(at::kDouble));
      x = v.reshape(full).to(opts.dtype());
      break;
    }
  }
  const graph::PieceBox box =
      graph::PieceBoxOf(full, ctx.program->mesh, ctx.coord, spec.dim_axes, spec.segments);
  x = x.reshape(box.full);
  for (size_t d = 0; d < box.full.size(); ++d) {
    if (box.piece[d] != box.full[d]) x = x.narrow(static_cast<int64_t>(d), box.start[d], box.piece[d]);
  }
  if (x.numel() != t.NumElements()) {
    return absl::InternalError(absl::StrCat("loaded ", t.name, " as ", graph::ShapeString(x.sizes().vec()),
                                            ", the program says ", graph::ShapeString(t.shape)));
  }
  return Wrap(x.contiguous().clone().reshape(t.shape));
}

absl::StatusOr<std::vector<Value>> CpuBackend::Run(const graph::Graph& g, const graph::Op& op,
                                                   const std::vector<Value>& inputs,
                                                   const RankContext& ctx) {
  WidenScope widen(options_.float64);
  auto it = Kernels().find(op.kind);
  if (it == Kernels().end()) {
    return absl::UnimplementedError(absl::StrCat("the CPU runtime has no kernel for ", op.type));
  }
  Ins in;
  in.reserve(inputs.size());
  for (const Value& v : inputs) in.push_back(T(v));
  absl::StatusOr<Outs> outs;
  try {
    outs = it->second(g, op, in, ctx, options_);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (!outs.ok()) return outs.status();
  std::vector<Value> out;
  for (size_t k = 0; k < outs->size(); ++k) {
    at::Tensor t = (*outs)[k];
    const graph::Tensor& y = g.tensor(op.outputs[k]);
    if (t.sizes().vec() != y.shape) {
      if (t.numel() != y.NumElements()) {
        return absl::InternalError(absl::StrCat("output ", k, " is ", graph::ShapeString(t.sizes().vec()),
                                                ", the program says ", graph::ShapeString(y.shape)));
      }
      t = t.reshape(y.shape);
    }
    if (t.scalar_type() != Scalar(y.dtype)) t = t.to(Scalar(y.dtype));
    out.push_back(Wrap(t.contiguous()));
  }
  return out;
}

absl::StatusOr<HostTensor> CpuBackend::ToHost(const Value& v) {
  at::Tensor t = T(v).to(at::kFloat).contiguous();
  HostTensor h;
  h.shape = t.sizes().vec();
  h.data.assign(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  return h;
}

absl::StatusOr<Value> CpuBackend::FromHost(const HostTensor& h, graph::DType dtype) {
  WidenScope widen(options_.float64);
  at::Tensor t = at::from_blob(const_cast<float*>(h.data.data()), h.shape,
                               at::TensorOptions().dtype(at::kFloat))
                     .clone()
                     .to(Scalar(dtype));
  return Wrap(std::move(t));
}

absl::StatusOr<Value> CpuBackend::Flatten(const std::vector<Value>& values) {
  std::vector<at::Tensor> flat;
  flat.reserve(values.size());
  for (const Value& v : values) {
    if (!v) return absl::InternalError("a bucket member holds no value");
    flat.push_back(TensorOf(v).reshape({-1}));
  }
  if (flat.empty()) return absl::InvalidArgumentError("an empty bucket");
  for (const at::Tensor& t : flat) {
    if (t.scalar_type() != flat[0].scalar_type()) {
      return absl::InvalidArgumentError("a bucket mixes dtypes");
    }
  }
  return Wrap(at::cat(flat));
}

absl::StatusOr<std::vector<Value>> CpuBackend::Unflatten(
    const Value& flat, const std::vector<std::vector<int64_t>>& shapes) {
  const at::Tensor& t = TensorOf(flat);
  int64_t off = 0;
  std::vector<Value> out;
  for (const std::vector<int64_t>& s : shapes) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    if (off + n > t.numel()) return absl::InternalError("a bucket's buffer is shorter than its members");
    out.push_back(Wrap(t.narrow(0, off, n).reshape(s)));
    off += n;
  }
  if (off != t.numel()) return absl::InternalError("a bucket's buffer is longer than its members");
  return out;
}

struct CpuBackend::GroupKernel {
  std::string first;  // the first member's name
  std::unique_ptr<worker::TensorSlots> slots;
  std::optional<worker::FusedCpuKernel> kernel;
  std::string why;  // why it runs op by op (no kernel)
};

CpuBackend::CpuBackend(CpuBackendOptions options) : options_(options) {}
CpuBackend::~CpuBackend() = default;

absl::StatusOr<std::map<graph::TensorId, Value>> CpuBackend::RunGroup(
    const graph::Graph& g, const std::vector<graph::OpId>& members,
    const std::map<graph::TensorId, Value>& inputs, const RankContext& ctx, bool* fused) {
  std::unique_ptr<GroupKernel>& gk = kernels_[{&g, members.front()}];
  if (!gk) {
    gk = std::make_unique<GroupKernel>();
    gk->first = g.op(members.front()).name;
    if (options_.float64) {
      gk->why = "float64 mode (the fused kernels compute in float32)";
    } else {
      gk->slots = std::make_unique<worker::TensorSlots>();
      absl::StatusOr<worker::FusedCpuKernel> k =
          worker::MakeFusedCpuKernel(g, std::span<const graph::OpId>(members), gk->slots.get());
      if (!k.ok()) {
        gk->why = std::string(k.status().message());
      } else {
        // Every input must reach the kernel through its slot: a floating
        // input it holds no slot for, or any integer input, it would make up.
        for (const auto& [t, v] : inputs) {
          const graph::Tensor& x = g.tensor(t);
          const bool floating = x.dtype == graph::DType::kF32 || x.dtype == graph::DType::kF16 ||
                                x.dtype == graph::DType::kBF16 || x.dtype == graph::DType::kF64;
          if (!floating || !gk->slots->Has(t)) {
            gk->why = absl::StrCat("the fused kernel does not read ", x.name, " from the program's values");
            break;
          }
        }
        if (gk->why.empty()) gk->kernel = *std::move(k);
      }
    }
  }
  if (!gk->kernel) return Backend::RunGroup(g, members, inputs, ctx, fused);
  for (const auto& [t, v] : inputs) {
    const at::Tensor& x = TensorOf(v);
    if (!gk->slots->Bind(t, x.is_contiguous() ? x : x.contiguous())) {
      return absl::InternalError(absl::StrCat("fused group of ", gk->first, ": input ",
                                              g.tensor(t).name, " does not fit its slot"));
    }
  }
  RETURN_IF_ERROR(gk->kernel->run());
  std::map<graph::TensorId, Value> out;
  for (size_t i = 0; i < gk->kernel->outputs.size(); ++i) {
    out[gk->kernel->outputs[i]] = Wrap(gk->kernel->output(i));
  }
  *fused = true;
  return out;
}

std::map<std::string, std::string> CpuBackend::UnfusedWhy() const {
  std::map<std::string, std::string> out;
  for (const auto& [key, gk] : kernels_)
    if (!gk->kernel) out[gk->first] = gk->why;
  return out;
}

}  // namespace braid::runtime
