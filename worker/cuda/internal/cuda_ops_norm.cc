// BatchNormalization (+Grad) -> cuDNN's spatial batch norm in training mode
// (braid profiles the training step, as the CPU backend does);
// LayerNormalization (+Grad) -> the kernels in kernels.cu.
#include <array>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/cuda/internal/op_geometry.h"

namespace braid::worker::cuda_internal {
namespace {

using K = graph::OpKind;

// X as cuDNN's [N, C, spatial...] (4-D or 5-D); more spatial dims are merged.
absl::StatusOr<std::vector<int64_t>> BnDims(const OpView& v, const std::vector<int64_t>& x) {
  if (x.size() < 2) return v.Error("X must be [N,C,...]");
  std::vector<int64_t> d = {x[0], x[1]};
  if (x.size() > 5) {
    d.push_back(Product({x.begin() + 2, x.end()}));
  } else {
    d.insert(d.end(), x.begin() + 2, x.end());
  }
  while (d.size() < 4) d.push_back(1);
  return d;
}

// cuDNN keeps scale, bias and statistics in float for f16/bf16 inputs.
graph::DType BnParamType(graph::DType x) {
  return x == graph::DType::kF64 ? graph::DType::kF64 : graph::DType::kF32;
}

struct BnDescs {
  TensorDesc x, param;
  int64_t channels = 0;
};

absl::StatusOr<BnDescs> MakeBnDescs(const OpView& v, const std::vector<int64_t>& x_shape,
                                    graph::DType dt) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, BnDims(v, x_shape));
  absl::StatusOr<TensorDesc> xd = MakeTensorDesc(dims, CudnnType(dt));
  if (!xd.ok()) return v.Wrap(xd.status());
  cudnnTensorDescriptor_t raw = nullptr;
  RETURN_IF_ERROR(
      v.Wrap(CudnnStatus(cudnnCreateTensorDescriptor(&raw), "cudnnCreateTensorDescriptor")));
  TensorDesc pd(raw, cudnnDestroyTensorDescriptor);
  RETURN_IF_ERROR(
      v.Wrap(CudnnStatus(cudnnDeriveBNTensorDescriptor(raw, xd->get(), CUDNN_BATCHNORM_SPATIAL),
                         "cudnnDeriveBNTensorDescriptor")));
  return BnDescs{*xd, pd, x_shape[1]};
}

absl::Status CheckParam(const OpView& v, const graph::Tensor& t, int64_t channels,
                        graph::DType want) {
  if (t.shape != std::vector<int64_t>{channels}) {
    return v.Error(
        absl::StrCat("'", t.name, "' must be [", channels, "], is ", graph::ShapeString(t.shape)));
  }
  if (t.dtype != want) {
    return v.Unsupported(absl::StrCat("'", t.name, "' is ", std::string(graph::DTypeName(t.dtype)),
                                      "; cuDNN keeps batch-norm parameters in ",
                                      std::string(graph::DTypeName(want))));
  }
  return absl::OkStatus();
}

// (X, scale, B, running_mean, running_var) -> Y, batch statistics.
absl::StatusOr<CudaOp> BatchNorm(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(5, 5));
  const graph::DType dt = v.in(0).dtype;
  if (absl::StatusOr<ElemType> e = ElemTypeOf(dt); !e.ok()) return v.Wrap(e.status());
  RETURN_IF_ERROR(v.CheckOutput(0, v.in(0).shape, "cuDNN batch norm"));
  ASSIGN_OR_RETURN(BnDescs d, MakeBnDescs(v, v.in(0).shape, dt));
  const graph::DType pt = BnParamType(dt);
  for (int i = 1; i < 5; ++i) {
    RETURN_IF_ERROR(CheckParam(v, v.in(i), d.channels, pt));
  }
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  ASSIGN_OR_RETURN(DeviceTensor mean, v.Scratch({d.channels}, pt, "saved mean"));
  ASSIGN_OR_RETURN(DeviceTensor inv, v.Scratch({d.channels}, pt, "saved inv var"));
  void* sm = mean.data();
  void* si = inv.data();
  op.scratch.push_back(std::move(mean));
  op.scratch.push_back(std::move(inv));
  const void* x = op.inputs[0].data();
  const void* scale = op.inputs[1].data();
  const void* bias = op.inputs[2].data();
  void* rm = op.inputs[3].data();
  void* rv = op.inputs[4].data();
  void* y = op.outputs[0].data();
  const double factor =
      1.0 - v.op().GetFloat("momentum", 0.9);  // ONNX momentum weighs the old value
  const double eps = v.op().GetFloat("epsilon", 1e-5);
  const CudaContext* ctx = &v.ctx();
  op.run = [=] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(cudnnBatchNormalizationForwardTraining(ctx->cudnn(), CUDNN_BATCHNORM_SPATIAL,
                                                              one.ptr(), zero.ptr(), d.x.get(), x,
                                                              d.x.get(), y, d.param.get(), scale,
                                                              bias, factor, rm, rv, eps, sm, si),
                       "cudnnBatchNormalizationForwardTraining");
  };
  op.calls = "cudnnBatchNormalizationForwardTraining";
  return op;
}

// Which graph output holds the gradient of forward input slot 0 (X), 1
// (scale), 2 (B); -1 when not asked for. From "grad_inputs" (the training
// builder's), else outputs 0.. in slot order.
absl::StatusOr<std::array<int, 3>> GradSlots(const OpView& v) {
  std::vector<int64_t> slots = v.op().GetInts("grad_inputs");
  if (slots.empty()) {
    for (int i = 0; i < std::min(v.num_outputs(), 3); ++i) slots.push_back(i);
  }
  if (static_cast<int>(slots.size()) != v.num_outputs()) {
    return v.Error(absl::StrCat("grad_inputs lists ", slots.size(), " slots for ", v.num_outputs(),
                                " outputs"));
  }
  std::array<int, 3> where = {-1, -1, -1};
  for (size_t k = 0; k < slots.size(); ++k) {
    if (slots[k] < 0 || slots[k] > 2) return v.Error(absl::StrCat("grad_inputs slot ", slots[k]));
    where[slots[k]] = static_cast<int>(k);
  }
  return where;
}

// Output `slot`'s device pointer, or a scratch tensor when not asked for.
absl::StatusOr<void*> SlotBuffer(const OpView& v, CudaOp& op, const std::array<int, 3>& where,
                                 int slot, const std::vector<int64_t>& shape, graph::DType dtype) {
  if (where[slot] >= 0) {
    const graph::Tensor& t = v.out(where[slot]);
    if (t.shape != shape) {
      return v.Error(absl::StrCat("gradient '", t.name, "' must be ", graph::ShapeString(shape)));
    }
    if (t.dtype != dtype) {
      return v.Unsupported(
          absl::StrCat("gradient '", t.name, "' is ", std::string(graph::DTypeName(t.dtype)),
                       "; the library writes ", std::string(graph::DTypeName(dtype))));
    }
    return op.outputs[where[slot]].data();
  }
  ASSIGN_OR_RETURN(DeviceTensor t, v.Scratch(shape, dtype, absl::StrCat("unused grad ", slot)));
  void* p = t.data();
  op.scratch.push_back(std::move(t));
  return p;
}

// (dY, X, scale) -> gradients per "grad_inputs". prepare() recomputes the
// batch statistics of X that the forward pass would have saved.
absl::StatusOr<CudaOp> BatchNormGrad(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(2, 6));
  const graph::DType dt = v.in(1).dtype;
  if (absl::StatusOr<ElemType> e = ElemTypeOf(dt); !e.ok()) return v.Wrap(e.status());
  if (v.in(0).shape != v.in(1).shape || v.in(0).dtype != dt) return v.Error("dY and X differ");
  ASSIGN_OR_RETURN(BnDescs d, MakeBnDescs(v, v.in(1).shape, dt));
  const graph::DType pt = BnParamType(dt);
  if (v.num_inputs() >= 3) {
    RETURN_IF_ERROR(CheckParam(v, v.in(2), d.channels, pt));
  }
  ASSIGN_OR_RETURN(auto where, GradSlots(v));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  ASSIGN_OR_RETURN(void* dx, SlotBuffer(v, op, where, 0, v.in(1).shape, dt));
  ASSIGN_OR_RETURN(void* dscale, SlotBuffer(v, op, where, 1, {d.channels}, pt));
  ASSIGN_OR_RETURN(void* dbias, SlotBuffer(v, op, where, 2, {d.channels}, pt));
  const void* scale = nullptr;
  if (v.num_inputs() >= 3) {
    scale = op.inputs[2].data();
  } else {
    ASSIGN_OR_RETURN(DeviceTensor s, v.Scratch({d.channels}, pt, "scale"));
    if (auto st = v.ctx().FillNormal(s, 17); !st.ok()) return v.Wrap(st);
    scale = s.data();
    op.scratch.push_back(std::move(s));
  }
  std::vector<void*> tmp;
  for (const auto& [shape, type, what] :
       std::vector<std::tuple<std::vector<int64_t>, graph::DType, const char*>>{
           {{d.channels}, pt, "saved mean"},
           {{d.channels}, pt, "saved inv var"},
           {{d.channels}, pt, "bias"},
           {v.in(1).shape, dt, "forward y"}}) {
    ASSIGN_OR_RETURN(DeviceTensor t, v.Scratch(shape, type, what));
    tmp.push_back(t.data());
    op.scratch.push_back(std::move(t));
  }
  void *sm = tmp[0], *si = tmp[1], *bias = tmp[2], *fy = tmp[3];
  const void* dy = op.inputs[0].data();
  const void* x = op.inputs[1].data();
  const double eps = v.op().GetFloat("epsilon", 1e-5);
  const CudaContext* ctx = &v.ctx();
  op.prepare = [=] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(
        cudnnBatchNormalizationForwardTraining(
            ctx->cudnn(), CUDNN_BATCHNORM_SPATIAL, one.ptr(), zero.ptr(), d.x.get(), x, d.x.get(),
            fy, d.param.get(), scale, bias, 0.0, nullptr, nullptr, eps, sm, si),
        "cudnnBatchNormalizationForwardTraining (saved statistics)");
  };
  op.run = [=] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(cudnnBatchNormalizationBackward(
                           ctx->cudnn(), CUDNN_BATCHNORM_SPATIAL, one.ptr(), zero.ptr(), one.ptr(),
                           zero.ptr(), d.x.get(), x, d.x.get(), dy, d.x.get(), dx, d.param.get(),
                           scale, dscale, dbias, eps, sm, si),
                       "cudnnBatchNormalizationBackward");
  };
  op.calls = "cudnnBatchNormalizationBackward";
  return op;
}

struct LnShape {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> normalized;
};

absl::StatusOr<LnShape> LayerNormShape(const OpView& v, const std::vector<int64_t>& x) {
  int64_t axis = v.op().GetInt("axis", -1);
  const int64_t rank = static_cast<int64_t>(x.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return v.Error("axis out of range");
  LnShape s;
  s.normalized.assign(x.begin() + axis, x.end());
  s.cols = Product(s.normalized);
  s.rows = Product(x) / std::max<int64_t>(s.cols, 1);
  if (s.rows > 0x7fffffff) return v.Unsupported("more than 2^31 rows");
  return s;
}

// (X, [scale], [B]) -> Y [, Mean, InvStdDev].
absl::StatusOr<CudaOp> LayerNorm(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(1, 3));
  RETURN_IF_ERROR(v.SameFloatDtype());
  RETURN_IF_ERROR(v.CheckOutput(0, v.in(0).shape, "the layer-norm kernel"));
  ASSIGN_OR_RETURN(LnShape ln, LayerNormShape(v, v.in(0).shape));
  for (int i = 1; i < v.num_inputs(); ++i) {
    if (v.in(i).NumElements() != ln.cols) {
      return v.Error(absl::StrCat("'", v.in(i).name, "' must have ", ln.cols, " elements (",
                                  graph::ShapeString(ln.normalized), ")"));
    }
  }
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  ASSIGN_OR_RETURN(DeviceTensor mean, v.Scratch({ln.rows}, graph::DType::kF32, "mean"));
  ASSIGN_OR_RETURN(DeviceTensor rstd, v.Scratch({ln.rows}, graph::DType::kF32, "rstd"));
  float* m = static_cast<float*>(mean.data());
  float* r = static_cast<float*>(rstd.data());
  op.scratch.push_back(std::move(mean));
  op.scratch.push_back(std::move(rstd));
  const ElemType et = *ElemTypeOf(v.dtype());
  const void* x = op.inputs[0].data();
  const void* gamma = v.num_inputs() > 1 ? op.inputs[1].data() : nullptr;
  const void* beta = v.num_inputs() > 2 ? op.inputs[2].data() : nullptr;
  void* y = op.outputs[0].data();
  const float eps = static_cast<float>(v.op().GetFloat("epsilon", 1e-5));
  const CudaContext* ctx = &v.ctx();
  op.run = [=] {
    return CudaStatus(
        LayerNormForward(et, x, gamma, beta, y, m, r, ln.rows, ln.cols, eps, ctx->stream()),
        "LayerNormForward kernel");
  };
  op.calls = "braid LayerNormForward kernel";
  return op;
}

// (dY, X, scale) -> gradients per "grad_inputs".
absl::StatusOr<CudaOp> LayerNormGrad(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(2, 6));
  const graph::DType dt = v.in(1).dtype;
  absl::StatusOr<ElemType> et = ElemTypeOf(dt);
  if (!et.ok()) return v.Wrap(et.status());
  if (v.in(0).shape != v.in(1).shape || v.in(0).dtype != dt) return v.Error("dY and X differ");
  ASSIGN_OR_RETURN(LnShape ln, LayerNormShape(v, v.in(1).shape));
  if (v.num_inputs() >= 3 && (v.in(2).NumElements() != ln.cols || v.in(2).dtype != dt)) {
    return v.Error(absl::StrCat("scale '", v.in(2).name, "' must be ",
                                std::string(graph::DTypeName(dt)),
                                graph::ShapeString(ln.normalized)));
  }
  ASSIGN_OR_RETURN(auto where, GradSlots(v));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const bool want_dx = where[0] >= 0, want_params = where[1] >= 0 || where[2] >= 0;
  void* dx = nullptr;
  void* dgamma = nullptr;
  void* dbeta = nullptr;
  if (want_dx) {
    ASSIGN_OR_RETURN(void* p, SlotBuffer(v, op, where, 0, v.in(1).shape, dt));
    dx = p;
  }
  for (int slot : {1, 2}) {
    if (where[slot] < 0) continue;
    ASSIGN_OR_RETURN(void* p, SlotBuffer(v, op, where, slot, v.out(where[slot]).shape, dt));
    if (v.out(where[slot]).NumElements() != ln.cols)
      return v.Error("parameter gradient has the wrong size");
    (slot == 1 ? dgamma : dbeta) = p;
  }
  std::vector<void*> tmp;
  for (const auto& [shape, type, what] :
       std::vector<std::tuple<std::vector<int64_t>, graph::DType, const char*>>{
           {{ln.rows}, graph::DType::kF32, "mean"},
           {{ln.rows}, graph::DType::kF32, "rstd"},
           {v.in(1).shape, dt, "forward y"},
           {{want_params ? 2 * LayerNormPartialRows(ln.rows) * ln.cols : 0},
            graph::DType::kF32,
            "partial sums"}}) {
    ASSIGN_OR_RETURN(DeviceTensor t, v.Scratch(shape, type, what));
    tmp.push_back(t.data());
    op.scratch.push_back(std::move(t));
  }
  float* m = static_cast<float*>(tmp[0]);
  float* r = static_cast<float*>(tmp[1]);
  void* fy = tmp[2];
  float* partial = static_cast<float*>(tmp[3]);
  const void* dy = op.inputs[0].data();
  const void* x = op.inputs[1].data();
  const void* gamma = v.num_inputs() >= 3 ? op.inputs[2].data() : nullptr;
  const float eps = static_cast<float>(v.op().GetFloat("epsilon", 1e-5));
  const CudaContext* ctx = &v.ctx();
  const ElemType e = *et;
  op.prepare = [=] {
    return CudaStatus(
        LayerNormForward(e, x, gamma, nullptr, fy, m, r, ln.rows, ln.cols, eps, ctx->stream()),
        "LayerNormForward kernel (saved statistics)");
  };
  op.run = [=]() -> absl::Status {
    if (dx != nullptr) {
      RETURN_IF_ERROR(CudaStatus(
          LayerNormBackwardData(e, dy, x, gamma, m, r, dx, ln.rows, ln.cols, ctx->stream()),
          "LayerNormBackwardData kernel"));
    }
    if (dgamma == nullptr && dbeta == nullptr) return absl::OkStatus();
    return CudaStatus(LayerNormBackwardParams(e, dy, x, m, r, dgamma, dbeta, partial, ln.rows,
                                              ln.cols, ctx->stream()),
                      "LayerNormBackwardParams kernels");
  };
  op.calls = absl::StrCat(want_dx ? "braid LayerNormBackwardData kernel" : "",
                           want_dx && want_params ? " + " : "",
                           want_params ? "braid LayerNormBackwardParams kernels" : "");
  return op;
}

}  // namespace

bool NormSupports(graph::OpKind t) {
  return t == K::kBatchNormalization || t == K::kBatchNormalizationGrad ||
         t == K::kLayerNormalization || t == K::kLayerNormalizationGrad;
}

BuildResult BuildNorm(const OpView& v) {
  const graph::OpKind t = v.op().kind;
  if (t == K::kBatchNormalization) return BatchNorm(v);
  if (t == K::kBatchNormalizationGrad) return BatchNormGrad(v);
  if (t == K::kLayerNormalization) return LayerNorm(v);
  if (t == K::kLayerNormalizationGrad) return LayerNormGrad(v);
  return std::nullopt;
}

}  // namespace braid::worker::cuda_internal
