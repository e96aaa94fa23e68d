// MaxPool / AveragePool and their gradients -> cuDNN pooling (2-D and 3-D).
// cuDNN pads symmetrically, has no dilation and rounds output sizes down:
// begin != end pads, dilations and a ceil_mode that changes the output size
// are Unimplemented (the cost model then uses its roofline estimate).
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/cuda/internal/op_geometry.h"

namespace braid::worker::cuda_internal {
namespace {

using K = graph::OpKind;

struct PoolGeom {
  PoolDesc pool;
  TensorDesc x, y;
};

// x_shape: the pooled input, y_graph: the pooled output as the graph has it.
absl::StatusOr<PoolGeom> Geometry(const OpView& v, const std::vector<int64_t>& x,
                                  const std::vector<int64_t>& y_graph, graph::DType dt) {
  const graph::OpKind t = v.op().kind;
  if (x.size() != 4 && x.size() != 5) {
    return v.Unsupported(
        absl::StrCat("mapped for 2-D and 3-D pooling only, input ", graph::ShapeString(x)));
  }
  const size_t n = x.size() - 2;
  const std::vector<int64_t> kernel = v.op().GetInts("kernel_shape");
  if (kernel.size() != n) return v.Error("kernel_shape must have one entry per spatial dim");
  const std::vector<int64_t> strides = IntsOr(v.op(), "strides", n, 1);
  const std::vector<int64_t> dilations = IntsOr(v.op(), "dilations", n, 1);
  for (int64_t d : dilations) {
    if (d != 1) return v.Unsupported("cuDNN pooling has no dilations");
  }
  std::vector<int64_t> out_sp;
  if (y_graph.size() == x.size()) out_sp.assign(y_graph.begin() + 2, y_graph.end());
  const std::vector<int64_t> pads =
      ResolvePads(v.op(), {x.begin() + 2, x.end()}, out_sp, kernel, strides, dilations);
  std::optional<std::vector<int64_t>> sym = SymmetricPads(pads);
  if (!sym) return v.Unsupported("begin != end pads: cuDNN pads symmetrically");
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  if (t == K::kAveragePool || t == K::kAveragePoolGrad) {
    // ONNX's count_include_pad defaults to 0.
    mode = v.op().GetInt("count_include_pad", 0) != 0 ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                      : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  }
  absl::StatusOr<std::vector<int>> k = ToIntDims(kernel), p = ToIntDims(*sym),
                                   s = ToIntDims(strides);
  if (!k.ok() || !p.ok() || !s.ok()) return v.Unsupported("window does not fit cuDNN's int");
  absl::StatusOr<PoolDesc> pd = MakePoolDesc(mode, *k, *p, *s);
  absl::StatusOr<TensorDesc> xd = MakeTensorDesc(x, CudnnType(dt));
  if (!pd.ok()) return v.Wrap(pd.status());
  if (!xd.ok()) return v.Wrap(xd.status());
  std::vector<int> yd(x.size());
  RETURN_IF_ERROR(
      v.Wrap(CudnnStatus(cudnnGetPoolingNdForwardOutputDim(pd->get(), xd->get(),
                                                           static_cast<int>(yd.size()), yd.data()),
                         "cudnnGetPoolingNdForwardOutputDim")));
  const std::vector<int64_t> y(yd.begin(), yd.end());
  if (y != y_graph) {
    if (v.op().GetInt("ceil_mode", 0) != 0) {
      return v.Unsupported(absl::StrCat("ceil_mode: cuDNN rounds down to ", graph::ShapeString(y),
                                        ", the graph has ", graph::ShapeString(y_graph)));
    }
    return v.Error(absl::StrCat("cuDNN pools ", graph::ShapeString(x), " to ",
                                graph::ShapeString(y), " but the graph has ",
                                graph::ShapeString(y_graph)));
  }
  absl::StatusOr<TensorDesc> ydesc = MakeTensorDesc(yd, CudnnType(dt));
  if (!ydesc.ok()) return v.Wrap(ydesc.status());
  return PoolGeom{*pd, *xd, *ydesc};
}

// (X) -> Y [, Indices (allocated, not written: cuDNN has no argmax output)].
absl::StatusOr<CudaOp> Forward(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(1, 1));
  RETURN_IF_ERROR(v.SameFloatDtype());
  ASSIGN_OR_RETURN(PoolGeom g, Geometry(v, v.in(0).shape, v.out(0).shape, v.dtype()));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const void* x = op.inputs[0].data();
  void* y = op.outputs[0].data();
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  op.run = [=] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(cudnnPoolingForward(ctx->cudnn(), g.pool.get(), one.ptr(), g.x.get(), x,
                                           zero.ptr(), g.y.get(), y),
                       "cudnnPoolingForward");
  };
  op.calls = "cudnnPoolingForward";
  return op;
}

// MaxPoolGrad (dY, X) -> dX: prepare() pools X again for the Y cuDNN's
// backward compares against. AveragePoolGrad (dY) -> dX reads neither X nor
// Y, but cuDNN still takes them: scratch tensors of their shapes.
absl::StatusOr<CudaOp> Backward(const OpView& v) {
  const bool max = v.op().kind == K::kMaxPoolGrad;
  RETURN_IF_ERROR(v.Arity(1, max ? 3 : 2));
  const graph::DType dt = v.dtype();
  if (absl::StatusOr<ElemType> e = ElemTypeOf(dt); !e.ok()) return v.Wrap(e.status());
  if (v.in(0).dtype != dt) return v.Unsupported("dY and dX differ in dtype");
  ASSIGN_OR_RETURN(PoolGeom g, Geometry(v, v.out(0).shape, v.in(0).shape, dt));
  const bool has_x = max && v.num_inputs() >= 2;
  if (has_x && (v.in(1).shape != v.out(0).shape || v.in(1).dtype != dt)) {
    return v.Error(absl::StrCat("X '", v.in(1).name, "' must be like dX ",
                                graph::ShapeString(v.out(0).shape)));
  }
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  ASSIGN_OR_RETURN(DeviceTensor yt, v.Scratch(v.in(0).shape, dt, "forward y"));
  void* y = yt.data();
  op.scratch.push_back(std::move(yt));
  const void* x = nullptr;
  if (has_x) {
    x = op.inputs[1].data();
  } else {
    ASSIGN_OR_RETURN(DeviceTensor xt, v.Scratch(v.out(0).shape, dt, "forward x"));
    if (auto s = v.ctx().FillNormal(xt, 23); !s.ok()) return v.Wrap(s);
    x = xt.data();
    op.scratch.push_back(std::move(xt));
  }
  const void* dy = op.inputs[0].data();
  void* dx = op.outputs[0].data();
  const CudaContext* ctx = &v.ctx();
  op.prepare = [=] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(cudnnPoolingForward(ctx->cudnn(), g.pool.get(), one.ptr(), g.x.get(), x,
                                           zero.ptr(), g.y.get(), y),
                       "cudnnPoolingForward (saved Y)");
  };
  op.run = [=] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(cudnnPoolingBackward(ctx->cudnn(), g.pool.get(), one.ptr(), g.y.get(), y,
                                            g.y.get(), dy, g.x.get(), x, zero.ptr(), g.x.get(), dx),
                       "cudnnPoolingBackward");
  };
  op.calls = "cudnnPoolingBackward";
  return op;
}

}  // namespace

bool PoolSupports(graph::OpKind t) {
  return t == K::kMaxPool || t == K::kAveragePool || t == K::kMaxPoolGrad ||
         t == K::kAveragePoolGrad;
}

BuildResult BuildPool(const OpView& v) {
  const graph::OpKind t = v.op().kind;
  if (t == K::kMaxPool || t == K::kAveragePool) return Forward(v);
  if (t == K::kMaxPoolGrad || t == K::kAveragePoolGrad) return Backward(v);
  return std::nullopt;
}

}  // namespace braid::worker::cuda_internal
