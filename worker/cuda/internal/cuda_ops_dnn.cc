// Elementwise ops, softmax and reductions -> cuDNN (activations, OpTensor,
// softmax, ReduceTensor, AddTensor for broadcasts) and the GELU kernels.
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/cuda/internal/op_geometry.h"

namespace braid::worker::cuda_internal {
namespace {

using K = graph::OpKind;

absl::StatusOr<TensorDesc> FlatDesc(const OpView& v, int64_t n) {
  absl::StatusOr<TensorDesc> d = MakeTensorDesc(std::vector<int64_t>{n}, CudnnType(v.dtype()));
  if (!d.ok()) return v.Wrap(d.status());
  return d;
}

struct Activation {
  cudnnActivationMode_t mode;
  const char* coef_attr;  // nullptr: no coefficient
  double coef_default;
};

const std::map<graph::OpKind, Activation>& Activations() {
  static const auto* m = new std::map<graph::OpKind, Activation>{
      {K::kRelu, {CUDNN_ACTIVATION_RELU, nullptr, 0}},
      {K::kSigmoid, {CUDNN_ACTIVATION_SIGMOID, nullptr, 0}},
      {K::kTanh, {CUDNN_ACTIVATION_TANH, nullptr, 0}},
      {K::kElu, {CUDNN_ACTIVATION_ELU, "alpha", 1.0}},
  };
  return *m;
}

// Forward activations: (X) -> Y.
absl::StatusOr<CudaOp> ActivationForward(const OpView& v, const Activation& a) {
  RETURN_IF_ERROR(v.Arity(1, 1));
  RETURN_IF_ERROR(v.SameFloatDtype());
  RETURN_IF_ERROR(v.CheckOutput(0, v.in(0).shape, "cudnnActivationForward"));
  absl::StatusOr<ActivationDesc> ad =
      MakeActivationDesc(a.mode, a.coef_attr ? v.op().GetFloat(a.coef_attr, a.coef_default) : 0.0);
  if (!ad.ok()) return v.Wrap(ad.status());
  ASSIGN_OR_RETURN(TensorDesc td, FlatDesc(v, v.in(0).NumElements()));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const void* x = op.inputs[0].data();
  void* y = op.outputs[0].data();
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  op.run = [=, ad = *ad] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(cudnnActivationForward(ctx->cudnn(), ad.get(), one.ptr(), td.get(), x,
                                              zero.ptr(), td.get(), y),
                       "cudnnActivationForward");
  };
  op.calls = "cudnnActivationForward";
  return op;
}

// <Act>Grad(dY, saved) -> dX. Relu, Sigmoid and Tanh save their output Y
// (graph/training_rules.cc), which is all cuDNN reads for them; Elu saves X,
// so prepare() derives Y = Elu(X) for cuDNN's backward.
absl::StatusOr<CudaOp> ActivationBackward(const OpView& v, const Activation& a, bool saved_is_x) {
  RETURN_IF_ERROR(v.Arity(2, 2));
  RETURN_IF_ERROR(v.SameFloatDtype());
  if (v.in(1).shape != v.in(0).shape) return v.Error("dY and the saved tensor differ in shape");
  RETURN_IF_ERROR(v.CheckOutput(0, v.in(0).shape, "cudnnActivationBackward"));
  absl::StatusOr<ActivationDesc> ad =
      MakeActivationDesc(a.mode, a.coef_attr ? v.op().GetFloat(a.coef_attr, a.coef_default) : 0.0);
  if (!ad.ok()) return v.Wrap(ad.status());
  ASSIGN_OR_RETURN(TensorDesc td, FlatDesc(v, v.in(0).NumElements()));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const void* dy = op.inputs[0].data();
  const void* saved = op.inputs[1].data();
  const void* x = saved;
  const void* y = saved;
  void* dx = op.outputs[0].data();
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  if (saved_is_x) {
    ASSIGN_OR_RETURN(DeviceTensor yt, v.Scratch(v.in(1).shape, dt, "y"));
    void* yp = yt.data();
    y = yp;
    op.scratch.push_back(std::move(yt));
    op.prepare = [=, ad = *ad] {
      const Scale one(dt, 1.0), zero(dt, 0.0);
      return CudnnStatus(cudnnActivationForward(ctx->cudnn(), ad.get(), one.ptr(), td.get(), x,
                                                zero.ptr(), td.get(), yp),
                         "cudnnActivationForward (saved Y)");
    };
  }
  op.run = [=, ad = *ad] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(cudnnActivationBackward(ctx->cudnn(), ad.get(), one.ptr(), td.get(), y,
                                               td.get(), dy, td.get(), x, zero.ptr(), td.get(), dx),
                       "cudnnActivationBackward");
  };
  op.calls = "cudnnActivationBackward";
  return op;
}

absl::StatusOr<CudaOp> Gelu(const OpView& v, bool grad) {
  RETURN_IF_ERROR(v.Arity(grad ? 2 : 1, grad ? 2 : 1));
  RETURN_IF_ERROR(v.SameFloatDtype());
  if (grad && v.in(1).shape != v.in(0).shape) return v.Error("dY and X differ in shape");
  RETURN_IF_ERROR(v.CheckOutput(0, v.in(0).shape, "GELU kernel"));
  const std::string approx = v.op().GetString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return v.Error(absl::StrCat("approximate='", approx, "'"));
  const bool tanh_approx = approx == "tanh";
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const ElemType et = *ElemTypeOf(v.dtype());
  const int64_t n = v.in(0).NumElements();
  const CudaContext* ctx = &v.ctx();
  const void* a = op.inputs[0].data();
  const void* b = grad ? op.inputs[1].data() : nullptr;
  void* out = op.outputs[0].data();
  if (grad) {
    op.run = [=] {
      return CudaStatus(GeluBackward(et, a, b, out, n, tanh_approx, ctx->stream()),
                        "GeluBackward kernel");
    };
    op.calls = "braid GeluBackward kernel";
  } else {
    op.run = [=] {
      return CudaStatus(GeluForward(et, a, out, n, tanh_approx, ctx->stream()),
                        "GeluForward kernel");
    };
    op.calls = "braid GeluForward kernel";
  }
  return op;
}

// C = op(A, B) with numpy broadcasting, through cudnnOpTensor.
absl::StatusOr<CudaOp> Binary(const OpView& v, cudnnOpTensorOp_t mode, bool subtract) {
  RETURN_IF_ERROR(v.Arity(2, 2));
  RETURN_IF_ERROR(v.SameFloatDtype());
  absl::StatusOr<BinaryPlan> p = PlanBinary(v.in(0).shape, v.in(1).shape, v.out(0).shape);
  if (!p.ok()) return v.Wrap(p.status());
  absl::StatusOr<OpTensorDesc> od = MakeOpTensorDesc(mode, CudnnComputeType(v.dtype()));
  absl::StatusOr<TensorDesc> cd = MakeTensorDesc(p->c_dims, CudnnType(v.dtype()));
  absl::StatusOr<TensorDesc> bd = MakeTensorDesc(p->b_dims, CudnnType(v.dtype()));
  if (!od.ok()) return v.Wrap(od.status());
  if (!cd.ok()) return v.Wrap(cd.status());
  if (!bd.ok()) return v.Wrap(bd.status());
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  // cuDNN wants the full-shape operand first: swap, and for Sub move the sign.
  const void* full = op.inputs[p->swapped ? 1 : 0].data();
  const void* bcast = op.inputs[p->swapped ? 0 : 1].data();
  const double a1 = subtract && p->swapped ? -1.0 : 1.0;
  const double a2 = subtract && !p->swapped ? -1.0 : 1.0;
  void* c = op.outputs[0].data();
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  op.run = [=, od = *od, cd = *cd, bd = *bd] {
    const Scale s1(dt, a1), s2(dt, a2), zero(dt, 0.0);
    return CudnnStatus(cudnnOpTensor(ctx->cudnn(), od.get(), s1.ptr(), cd.get(), full, s2.ptr(),
                                     bd.get(), bcast, zero.ptr(), cd.get(), c),
                       "cudnnOpTensor");
  };
  op.calls = "cudnnOpTensor";
  return op;
}

// Softmax over one axis as cuDNN's channel mode on [outer, axis, inner, 1].
absl::StatusOr<TensorDesc> SoftmaxDesc(const OpView& v, const std::vector<int64_t>& shape) {
  int64_t axis = v.op().GetInt("axis", -1);
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank)
    return v.Error(absl::StrCat("axis out of range for ", graph::ShapeString(shape)));
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  for (int64_t i = axis + 1; i < rank; ++i) inner *= shape[i];
  absl::StatusOr<TensorDesc> d =
      MakeTensorDesc(std::vector<int64_t>{outer, shape[axis], inner, 1}, CudnnType(v.dtype()));
  if (!d.ok()) return v.Wrap(d.status());
  return d;
}

absl::StatusOr<CudaOp> Softmax(const OpView& v, bool log, bool grad) {
  RETURN_IF_ERROR(v.Arity(grad ? 2 : 1, grad ? 2 : 1));
  RETURN_IF_ERROR(v.SameFloatDtype());
  if (grad && v.in(1).shape != v.in(0).shape) return v.Error("dY and Y differ in shape");
  RETURN_IF_ERROR(v.CheckOutput(0, v.in(0).shape, "cuDNN softmax"));
  ASSIGN_OR_RETURN(TensorDesc d, SoftmaxDesc(v, v.in(0).shape));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const cudnnSoftmaxAlgorithm_t algo = log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  const void* a = op.inputs[0].data();
  const void* b = grad ? op.inputs[1].data() : nullptr;
  void* out = op.outputs[0].data();
  if (grad) {  // (dY, Y) -> dX
    op.run = [=] {
      const Scale one(dt, 1.0), zero(dt, 0.0);
      return CudnnStatus(
          cudnnSoftmaxBackward(ctx->cudnn(), algo, CUDNN_SOFTMAX_MODE_CHANNEL, one.ptr(), d.get(),
                               b, d.get(), a, zero.ptr(), d.get(), out),
          "cudnnSoftmaxBackward");
    };
    op.calls = "cudnnSoftmaxBackward";
  } else {
    op.run = [=] {
      const Scale one(dt, 1.0), zero(dt, 0.0);
      return CudnnStatus(cudnnSoftmaxForward(ctx->cudnn(), algo, CUDNN_SOFTMAX_MODE_CHANNEL,
                                             one.ptr(), d.get(), a, zero.ptr(), d.get(), out),
                         "cudnnSoftmaxForward");
    };
    op.calls = "cudnnSoftmaxForward";
  }
  return op;
}

}  // namespace

bool ElementwiseSupports(graph::OpKind t) {
  static const auto* kinds = new std::set<graph::OpKind>{
      K::kRelu, K::kSigmoid, K::kTanh, K::kElu, K::kReluGrad, K::kSigmoidGrad, K::kTanhGrad,
      K::kEluGrad, K::kGelu, K::kGeluGrad, K::kAdd, K::kSub, K::kMul, K::kMax, K::kMin,
      K::kSoftmax, K::kLogSoftmax, K::kSoftmaxGrad, K::kLogSoftmaxGrad};
  return kinds->count(t) > 0;
}

BuildResult BuildElementwise(const OpView& v) {
  const graph::OpKind t = v.op().kind;
  if (auto it = Activations().find(t); it != Activations().end())
    return ActivationForward(v, it->second);
  if (graph::IsGradientKind(t)) {
    if (auto it = Activations().find(graph::GradOf(t)); it != Activations().end()) {
      return ActivationBackward(v, it->second, /*saved_is_x=*/t == K::kEluGrad);
    }
  }
  if (t == K::kGelu || t == K::kGeluGrad) return Gelu(v, t == K::kGeluGrad);
  if (t == K::kAdd) return Binary(v, CUDNN_OP_TENSOR_ADD, false);
  if (t == K::kSub) return Binary(v, CUDNN_OP_TENSOR_ADD, true);
  if (t == K::kMul) return Binary(v, CUDNN_OP_TENSOR_MUL, false);
  // ONNX's variadic Max/Min with two inputs, the common case.
  if ((t == K::kMax || t == K::kMin) && v.num_inputs() == 2) {
    return Binary(v, t == K::kMax ? CUDNN_OP_TENSOR_MAX : CUDNN_OP_TENSOR_MIN, false);
  }
  if (t == K::kMax || t == K::kMin) return v.Unsupported("mapped for two inputs only");
  if (t == K::kSoftmax || t == K::kLogSoftmax) return Softmax(v, t == K::kLogSoftmax, false);
  if (t == K::kSoftmaxGrad || t == K::kLogSoftmaxGrad) {
    return Softmax(v, t == K::kLogSoftmaxGrad, true);
  }
  return std::nullopt;
}

}  // namespace braid::worker::cuda_internal
