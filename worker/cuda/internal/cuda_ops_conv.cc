// Conv, ConvGradData and ConvGradFilter -> cuDNN convolutions. The algorithm
// is the fastest one cudnnFind*AlgorithmEx measures on the op's own buffers,
// which is what a training job with torch.backends.cudnn.benchmark = True
// runs. fp32 convolutions may use TF32 tensor cores (PyTorch's default
// torch.backends.cudnn.allow_tf32 = True); f16/bf16 accumulate in fp32.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/cuda/internal/op_geometry.h"

namespace braid::worker::cuda_internal {
namespace {

using K = graph::OpKind;

// Largest workspace an algorithm may use (and the search may try).
constexpr int64_t kMaxWorkspace = int64_t{1} << 30;

struct ConvGeom {
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;
  int64_t out_channels = 0;
};

std::vector<int> Narrow(const std::vector<int64_t>& v) {
  return std::vector<int>(v.begin(), v.end());
}

// Descriptors for forward input `x` and weight `w`. `y_graph` is the forward
// output as the graph has it, checked against cuDNN's: output `y_index` of
// the op when `y_is_output` (Conv), else input `y_index` (the gradient ops' dY).
absl::StatusOr<ConvGeom> Geometry(const OpView& v, std::vector<int64_t> x, std::vector<int64_t> w,
                                  const std::vector<int64_t>& y_graph, bool y_is_output,
                                  int y_index) {
  if (x.size() < 3 || x.size() > 5 || w.size() != x.size()) {
    return v.Error("needs X [N,C,spatial...] (1-3 spatial dims) and W of equal rank");
  }
  const size_t n = x.size() - 2;
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  std::vector<int64_t> strides = IntsOr(v.op(), "strides", n, 1);
  std::vector<int64_t> dilations = IntsOr(v.op(), "dilations", n, 1);
  std::vector<int64_t> out_sp;
  if (y_graph.size() == x.size()) out_sp.assign(y_graph.begin() + 2, y_graph.end());
  std::vector<int64_t> pads =
      ResolvePads(v.op(), {x.begin() + 2, x.end()}, out_sp, kernel, strides, dilations);
  std::optional<std::vector<int64_t>> sym = SymmetricPads(pads);
  if (!sym) {
    return v.Unsupported(
        "begin != end pads: cuDNN pads symmetrically (the CPU backend pads explicitly)");
  }
  std::vector<int64_t> p = *sym;
  const bool one_d = n == 1;
  if (one_d) {  // cuDNN convolves 2-D and 3-D: give 1-D a unit height
    x.insert(x.begin() + 2, 1);
    w.insert(w.begin() + 2, 1);
    p.insert(p.begin(), 0);
    strides.insert(strides.begin(), 1);
    dilations.insert(dilations.begin(), 1);
  }
  const int64_t groups = v.op().GetInt("group", 1);
  const graph::DType dt = v.dtype();
  for (const auto* vec : {&x, &w, &p, &strides, &dilations}) {
    if (absl::StatusOr<std::vector<int>> ok = ToIntDims(*vec); !ok.ok()) {
      return v.Unsupported(std::string(ok.status().message()));
    }
  }
  ConvGeom g;
  g.out_channels = w[0];
  absl::StatusOr<TensorDesc> xd = MakeTensorDesc(Narrow(x), CudnnType(dt));
  absl::StatusOr<FilterDesc> wd = MakeFilterDesc(Narrow(w), CudnnType(dt));
  const cudnnMathType_t math = dt == graph::DType::kF16 || dt == graph::DType::kBF16
                                   ? CUDNN_TENSOR_OP_MATH
                                   : CUDNN_DEFAULT_MATH;
  absl::StatusOr<ConvDesc> cd = MakeConvDesc(Narrow(p), Narrow(strides), Narrow(dilations),
                                             static_cast<int>(groups), CudnnComputeType(dt), math);
  if (!xd.ok()) return v.Wrap(xd.status());
  if (!wd.ok()) return v.Wrap(wd.status());
  if (!cd.ok()) return v.Wrap(cd.status());
  std::vector<int> yd(x.size());
  absl::Status s =
      CudnnStatus(cudnnGetConvolutionNdForwardOutputDim(cd->get(), xd->get(), wd->get(),
                                                        static_cast<int>(yd.size()), yd.data()),
                  "cudnnGetConvolutionNdForwardOutputDim");
  if (!s.ok())
    return v.Error(absl::StrCat("X ", graph::ShapeString(x), ", W ", graph::ShapeString(w), ": ",
                                s.message()));
  std::vector<int64_t> y(yd.begin(), yd.end());
  if (one_d) y.erase(y.begin() + 2);
  if (y_is_output) {
    RETURN_IF_ERROR(v.CheckOutput(y_index, y, "cuDNN"));
  } else if (y != y_graph) {
    return v.Error(absl::StrCat("cuDNN computes the forward output ", graph::ShapeString(y),
                                " but dY '", v.in(y_index).name, "' is ",
                                graph::ShapeString(y_graph)));
  }
  absl::StatusOr<TensorDesc> ydesc = MakeTensorDesc(yd, CudnnType(dt));
  if (!ydesc.ok()) return v.Wrap(ydesc.status());
  std::vector<int> bias_dims(yd.size(), 1);
  bias_dims[1] = yd[1];
  absl::StatusOr<TensorDesc> bd = MakeTensorDesc(bias_dims, CudnnType(dt));
  if (!bd.ok()) return v.Wrap(bd.status());
  g.x = *xd;
  g.w = *wd;
  g.conv = *cd;
  g.y = *ydesc;
  g.bias = *bd;
  return g;
}

// The algorithm search's workspace: as much as fits, up to kMaxWorkspace.
absl::StatusOr<DeviceTensor> SearchWorkspace(const OpView& v) {
  const int64_t bytes = std::min(kMaxWorkspace, v.ctx().FreeBytes() / 2);
  return v.Scratch({std::max<int64_t>(bytes, 0)}, graph::DType::kU8, "search workspace");
}

template <typename Perf>
absl::StatusOr<Perf> Fastest(const OpView& v, const Perf* perf, int n, std::string_view what) {
  // Results come sorted by time; failed algorithms carry their status.
  for (int i = 0; i < n; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS &&
        static_cast<int64_t>(perf[i].memory) <= kMaxWorkspace) {
      return perf[i];
    }
  }
  return v.Unsupported(absl::StrCat(std::string(what), ": no algorithm succeeded"));
}

// Sets the chosen algorithm's math type on the convolution and allocates its
// workspace, kept in op.scratch; returns the workspace pointer.
template <typename Perf>
absl::StatusOr<void*> UseAlgorithm(const OpView& v, const ConvGeom& g, const Perf& best,
                                   CudaOp& op) {
  RETURN_IF_ERROR(v.Wrap(CudnnStatus(cudnnSetConvolutionMathType(g.conv.get(), best.mathType),
                                     "cudnnSetConvolutionMathType")));
  ASSIGN_OR_RETURN(DeviceTensor ws,
                   v.Scratch({static_cast<int64_t>(best.memory)}, graph::DType::kU8, "workspace"));
  void* wsp = ws.data();
  op.scratch.push_back(std::move(ws));
  return wsp;
}

absl::StatusOr<CudaOp> Forward(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(2, 3));
  RETURN_IF_ERROR(v.SameFloatDtype());
  ASSIGN_OR_RETURN(ConvGeom g, Geometry(v, v.in(0).shape, v.in(1).shape, v.out(0).shape, true, 0));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const void* x = op.inputs[0].data();
  const void* w = op.inputs[1].data();
  const void* b = v.num_inputs() == 3 ? op.inputs[2].data() : nullptr;
  void* y = op.outputs[0].data();
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int found = 0;
  {
    ASSIGN_OR_RETURN(DeviceTensor ws, SearchWorkspace(v));
    absl::Status s = CudnnStatus(cudnnFindConvolutionForwardAlgorithmEx(
                                     v.ctx().cudnn(), g.x.get(), x, g.w.get(), w, g.conv.get(),
                                     g.y.get(), y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf,
                                     ws.data(), static_cast<size_t>(ws.bytes())),
                                 "cudnnFindConvolutionForwardAlgorithmEx");
    if (!s.ok()) return v.Wrap(s);
  }
  ASSIGN_OR_RETURN(cudnnConvolutionFwdAlgoPerf_t best,
                   Fastest(v, perf, found, "forward convolution"));
  ASSIGN_OR_RETURN(void* wsp, UseAlgorithm(v, g, best, op));
  const size_t ws_bytes = best.memory;
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  const cudnnConvolutionFwdAlgo_t algo = best.algo;
  op.run = [=]() -> absl::Status {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    RETURN_IF_ERROR(CudnnStatus(
        cudnnConvolutionForward(ctx->cudnn(), one.ptr(), g.x.get(), x, g.w.get(), w, g.conv.get(),
                                algo, wsp, ws_bytes, zero.ptr(), g.y.get(), y),
        "cudnnConvolutionForward"));
    if (b == nullptr) return absl::OkStatus();
    return CudnnStatus(
        cudnnAddTensor(ctx->cudnn(), one.ptr(), g.bias.get(), b, one.ptr(), g.y.get(), y),
        "cudnnAddTensor (bias)");
  };
  op.calls = absl::StrCat("cudnnConvolutionForward(algo=", static_cast<int>(algo), ")",
                           b != nullptr ? " + cudnnAddTensor" : "");
  return op;
}

absl::StatusOr<CudaOp> GradData(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(2, 3));
  RETURN_IF_ERROR(v.SameFloatDtype());
  // (dY, W) -> dX
  ASSIGN_OR_RETURN(ConvGeom g, Geometry(v, v.out(0).shape, v.in(1).shape, v.in(0).shape, false, 0));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const void* dy = op.inputs[0].data();
  const void* w = op.inputs[1].data();
  void* dx = op.outputs[0].data();
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int found = 0;
  {
    ASSIGN_OR_RETURN(DeviceTensor ws, SearchWorkspace(v));
    absl::Status s = CudnnStatus(cudnnFindConvolutionBackwardDataAlgorithmEx(
                                     v.ctx().cudnn(), g.w.get(), w, g.y.get(), dy, g.conv.get(),
                                     g.x.get(), dx, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found,
                                     perf, ws.data(), static_cast<size_t>(ws.bytes())),
                                 "cudnnFindConvolutionBackwardDataAlgorithmEx");
    if (!s.ok()) return v.Wrap(s);
  }
  ASSIGN_OR_RETURN(cudnnConvolutionBwdDataAlgoPerf_t best,
                   Fastest(v, perf, found, "backward-data convolution"));
  ASSIGN_OR_RETURN(void* wsp, UseAlgorithm(v, g, best, op));
  const size_t ws_bytes = best.memory;
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  const cudnnConvolutionBwdDataAlgo_t algo = best.algo;
  op.run = [=]() -> absl::Status {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(
        cudnnConvolutionBackwardData(ctx->cudnn(), one.ptr(), g.w.get(), w, g.y.get(), dy,
                                     g.conv.get(), algo, wsp, ws_bytes, zero.ptr(), g.x.get(), dx),
        "cudnnConvolutionBackwardData");
  };
  op.calls = absl::StrCat("cudnnConvolutionBackwardData(algo=", static_cast<int>(algo), ")");
  return op;
}

absl::StatusOr<CudaOp> GradFilter(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(2, 3));
  RETURN_IF_ERROR(v.SameFloatDtype());
  // (X, dY) -> dW [, dB when the builder fused the bias gradient]
  ASSIGN_OR_RETURN(ConvGeom g, Geometry(v, v.in(0).shape, v.out(0).shape, v.in(1).shape, false, 1));
  const bool bias = v.num_outputs() >= 2;
  if (bias && v.out(1).shape != std::vector<int64_t>{g.out_channels}) {
    return v.Error(
        absl::StrCat("bias gradient '", v.out(1).name, "' must be [", g.out_channels, "]"));
  }
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const void* x = op.inputs[0].data();
  const void* dy = op.inputs[1].data();
  void* dw = op.outputs[0].data();
  void* db = bias ? op.outputs[1].data() : nullptr;
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int found = 0;
  {
    ASSIGN_OR_RETURN(DeviceTensor ws, SearchWorkspace(v));
    absl::Status s = CudnnStatus(cudnnFindConvolutionBackwardFilterAlgorithmEx(
                                     v.ctx().cudnn(), g.x.get(), x, g.y.get(), dy, g.conv.get(),
                                     g.w.get(), dw, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                     &found, perf, ws.data(), static_cast<size_t>(ws.bytes())),
                                 "cudnnFindConvolutionBackwardFilterAlgorithmEx");
    if (!s.ok()) return v.Wrap(s);
  }
  ASSIGN_OR_RETURN(cudnnConvolutionBwdFilterAlgoPerf_t best,
                   Fastest(v, perf, found, "backward-filter convolution"));
  ASSIGN_OR_RETURN(void* wsp, UseAlgorithm(v, g, best, op));
  const size_t ws_bytes = best.memory;
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  const cudnnConvolutionBwdFilterAlgo_t algo = best.algo;
  op.run = [=]() -> absl::Status {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    RETURN_IF_ERROR(CudnnStatus(cudnnConvolutionBackwardFilter(
                                    ctx->cudnn(), one.ptr(), g.x.get(), x, g.y.get(), dy,
                                    g.conv.get(), algo, wsp, ws_bytes, zero.ptr(), g.w.get(), dw),
                                "cudnnConvolutionBackwardFilter"));
    if (db == nullptr) return absl::OkStatus();
    return CudnnStatus(cudnnConvolutionBackwardBias(ctx->cudnn(), one.ptr(), g.y.get(), dy,
                                                    zero.ptr(), g.bias.get(), db),
                       "cudnnConvolutionBackwardBias");
  };
  op.calls = absl::StrCat("cudnnConvolutionBackwardFilter(algo=", static_cast<int>(algo), ")",
                           bias ? " + cudnnConvolutionBackwardBias" : "");
  return op;
}

}  // namespace

bool ConvSupports(graph::OpKind t) {
  return t == K::kConv || t == K::kConvGradData || t == K::kConvGradFilter;
}

BuildResult BuildConv(const OpView& v) {
  const graph::OpKind t = v.op().kind;
  if (t == K::kConv) return Forward(v);
  if (t == K::kConvGradData) return GradData(v);
  if (t == K::kConvGradFilter) return GradFilter(v);
  return std::nullopt;
}

}  // namespace braid::worker::cuda_internal
