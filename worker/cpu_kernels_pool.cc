// Pooling op types and their gradients -> ATen calls.
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cpu_kernels.h"

namespace braid::worker::internal {
namespace {

using Result = std::optional<absl::StatusOr<CpuKernel>>;
using K = graph::OpKind;

// Window geometry of a MaxPool/AveragePool op on input `x_shape` producing
// `y_shape`, in ATen's terms.
struct Window {
  std::vector<int64_t> kernel, strides, dilations, padding, torch_pad;
  bool symmetric = true;
  bool ceil_mode = false;
};

absl::StatusOr<Window> PoolWindow(const OpArgs& a, const std::vector<int64_t>& x_shape,
                                  const std::vector<int64_t>& y_shape) {
  if (x_shape.size() != 4 && x_shape.size() != 5) {
    return absl::UnimplementedError(absl::StrCat("cpu profiler: ", a.op().type, " op '",
                                                 a.op().name, "' is mapped for 2-D and 3-D pooling only, input ",
                                                 graph::ShapeString(x_shape)));
  }
  const size_t n = x_shape.size() - 2;
  Window w;
  w.kernel = a.op().GetInts("kernel_shape");
  if (w.kernel.size() != n) return a.Error("kernel_shape must have one entry per spatial dim");
  w.strides = IntsOr(a.op(), "strides", n, 1);
  w.dilations = IntsOr(a.op(), "dilations", n, 1);
  w.ceil_mode = a.op().GetInt("ceil_mode", 0) != 0;
  std::vector<int64_t> in_sp(x_shape.begin() + 2, x_shape.end());
  std::vector<int64_t> out_sp;
  if (y_shape.size() == x_shape.size()) out_sp.assign(y_shape.begin() + 2, y_shape.end());
  std::vector<int64_t> pads = ResolvePads(a.op(), in_sp, out_sp, w.kernel, w.strides, w.dilations);
  std::optional<std::vector<int64_t>> sym = SymmetricPads(pads, &w.torch_pad);
  w.symmetric = sym.has_value();
  w.padding = sym ? *sym : std::vector<int64_t>(n, 0);
  return w;
}

bool Is3d(const at::Tensor& x) { return x.dim() == 5; }

std::tuple<at::Tensor, at::Tensor> MaxPoolForward(const at::Tensor& x, const Window& w) {
  at::Tensor xp = w.symmetric ? x
                              : at::constant_pad_nd(x, w.torch_pad,
                                                    -std::numeric_limits<double>::infinity());
  return Is3d(x) ? at::max_pool3d_with_indices(xp, w.kernel, w.strides, w.padding, w.dilations,
                                               w.ceil_mode)
                 : at::max_pool2d_with_indices(xp, w.kernel, w.strides, w.padding, w.dilations,
                                               w.ceil_mode);
}

Result MaxPool(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 1));
  ASSIGN_OR_RETURN(Window w, PoolWindow(a, a.in(0).shape, a.out(0).shape));
  at::Tensor x = a.In(0);
  return Make([x, w] { return std::get<0>(MaxPoolForward(x, w)); },
              Is3d(x) ? "at::max_pool3d_with_indices" : "at::max_pool2d_with_indices");
}

absl::StatusOr<Window> AvgWindow(const OpArgs& a, const std::vector<int64_t>& x_shape,
                                 const std::vector<int64_t>& y_shape) {
  ASSIGN_OR_RETURN(Window w, PoolWindow(a, x_shape, y_shape));
  for (int64_t d : w.dilations) {
    if (d != 1) return absl::UnimplementedError("cpu profiler: AveragePool with dilations has no ATen kernel");
  }
  if (!w.symmetric) {
    return absl::UnimplementedError(absl::StrCat(
        "cpu profiler: AveragePool op '", a.op().name,
        "' has begin != end pads, which ATen's avg_pool cannot express"));
  }
  return w;
}

Result AveragePool(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 1));
  ASSIGN_OR_RETURN(Window w, AvgWindow(a, a.in(0).shape, a.out(0).shape));
  // ONNX's count_include_pad defaults to 0, ATen's to true.
  bool include_pad = a.op().GetInt("count_include_pad", 0) != 0;
  at::Tensor x = a.In(0);
  if (Is3d(x)) {
    return Make([x, w, include_pad] {
      return at::avg_pool3d(x, w.kernel, w.strides, w.padding, w.ceil_mode, include_pad);
    }, "at::avg_pool3d");
  }
  return Make([x, w, include_pad] {
    return at::avg_pool2d(x, w.kernel, w.strides, w.padding, w.ceil_mode, include_pad);
  }, "at::avg_pool2d");
}

std::vector<int64_t> SpatialDims(int64_t rank) {
  std::vector<int64_t> dims;
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}

Result GlobalPool(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 1));
  at::Tensor x = a.In(0);
  std::vector<int64_t> dims = SpatialDims(x.dim());
  if (a.op().kind == K::kGlobalMaxPool) {
    return Make([=] { return at::amax(x, dims, true); }, "at::amax");
  }
  return Make([=] { return at::mean(x, dims, true); }, "at::mean");
}

// Gradient ops: output 0 is dX (the pooled input's shape); dY has the
// forward output's shape, which ATen recomputes from the window.
Result MaxPoolGrad(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 3));
  const graph::Tensor& dx = a.out(0);
  ASSIGN_OR_RETURN(Window w, PoolWindow(a, dx.shape, a.in(0).shape));
  at::Tensor x = a.Random(dx.shape, dx.dtype);
  auto [y, indices] = MaxPoolForward(x, w);  // untimed: gives dY's shape and the argmax
  at::Tensor dy = at::randn_like(y);
  at::Tensor xp = w.symmetric ? x : at::constant_pad_nd(x, w.torch_pad, 0);
  // (dY, X) as the builder emits them; with begin != end pads the gradient
  // of the explicitly padded input is cropped back to X.
  if (Is3d(x)) {
    return Make([=] {
      return CropPadded(at::max_pool3d_with_indices_backward(dy, xp, w.kernel, w.strides,
                                                             w.padding, w.dilations, w.ceil_mode,
                                                             indices),
                        w.torch_pad);
    }, "at::max_pool3d_with_indices_backward");
  }
  return Make([=] {
    return CropPadded(at::max_pool2d_with_indices_backward(dy, xp, w.kernel, w.strides, w.padding,
                                                           w.dilations, w.ceil_mode, indices),
                      w.torch_pad);
  }, "at::max_pool2d_with_indices_backward");
}

Result AveragePoolGrad(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 2));
  const graph::Tensor& dx = a.out(0);
  ASSIGN_OR_RETURN(Window w, AvgWindow(a, dx.shape, a.in(0).shape));
  bool include_pad = a.op().GetInt("count_include_pad", 0) != 0;
  at::Tensor x = a.Random(dx.shape, dx.dtype);
  if (Is3d(x)) {
    at::Tensor dy = at::randn_like(
        at::avg_pool3d(x, w.kernel, w.strides, w.padding, w.ceil_mode, include_pad));
    return Make([=] {
      return at::avg_pool3d_backward(dy, x, w.kernel, w.strides, w.padding, w.ceil_mode,
                                     include_pad, c10::nullopt);
    }, "at::avg_pool3d_backward");
  }
  at::Tensor dy = at::randn_like(
      at::avg_pool2d(x, w.kernel, w.strides, w.padding, w.ceil_mode, include_pad));
  return Make([=] {
    return at::avg_pool2d_backward(dy, x, w.kernel, w.strides, w.padding, w.ceil_mode,
                                   include_pad, c10::nullopt);
  }, "at::avg_pool2d_backward");
}

Result GlobalAveragePoolGrad(const OpArgs& a) {
  RETURN_IF_ERROR(a.Arity(1, 2));
  const graph::Tensor& dx = a.out(0);
  if (dx.shape.size() < 3) return a.Error("output dX must be [N,C,spatial...]");
  std::vector<int64_t> dy_shape = {dx.shape[0], dx.shape[1]};
  int64_t count = 1;
  for (size_t i = 2; i < dx.shape.size(); ++i) {
    dy_shape.push_back(1);
    count *= dx.shape[i];
  }
  at::Tensor dy = a.Random(dy_shape, dx.dtype);
  std::vector<int64_t> shape = dx.shape;
  // What autograd runs for mean(): broadcast dY and divide, materialized.
  return Make([=] { return at::div(dy.expand(shape), static_cast<double>(count)); },
              "at::expand + at::div");
}

}  // namespace

bool PoolSupports(graph::OpKind t) {
  return t == K::kMaxPool || t == K::kAveragePool || t == K::kGlobalAveragePool ||
         t == K::kGlobalMaxPool || t == K::kMaxPoolGrad || t == K::kAveragePoolGrad ||
         t == K::kGlobalAveragePoolGrad;
}

Result MakePoolKernel(const OpArgs& a) {
  const graph::OpKind t = a.op().kind;
  if (t == K::kMaxPool) return MaxPool(a);
  if (t == K::kAveragePool) return AveragePool(a);
  if (t == K::kGlobalAveragePool || t == K::kGlobalMaxPool) return GlobalPool(a);
  if (t == K::kMaxPoolGrad) return MaxPoolGrad(a);
  if (t == K::kAveragePoolGrad) return AveragePoolGrad(a);
  if (t == K::kGlobalAveragePoolGrad) return GlobalAveragePoolGrad(a);
  return std::nullopt;
}

}  // namespace braid::worker::internal
