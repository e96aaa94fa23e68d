// Elementwise ops, softmax and reductions -> cuDNN (activations, OpTensor,
// softmax, ReduceTensor, AddTensor for broadcasts) and the GELU kernels.
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/cuda/internal/op_geometry.h"

namespace braid::worker::cuda_internal {
namespace {

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

const std::map<std::string_view, Activation>& Activations() {
  static const auto* m = new std::map<std::string_view, Activation>{
      {"Relu", {CUDNN_ACTIVATION_RELU, nullptr, 0}},
      {"Sigmoid", {CUDNN_ACTIVATION_SIGMOID, nullptr, 0}},
      {"Tanh", {CUDNN_ACTIVATION_TANH, nullptr, 0}},
      {"Elu", {CUDNN_ACTIVATION_ELU, "alpha", 1.0}},
  };
  return *m;
}

// Forward activations: (X) -> Y.
absl::StatusOr<CudaOp> ActivationForward(const OpView& v, const Activation& a) {
  if (auto s = v.Arity(1, 1); !s.ok()) return s;
  if (auto s = v.SameFloatDtype(); !s.ok()) return s;
  if (auto s = v.CheckOutput(0, v.in(0).shape, "cudnnActivationForward"); !s.ok()) return s;
  absl::StatusOr<ActivationDesc> ad =
      MakeActivationDesc(a.mode, a.coef_attr ? v.op().GetFloat(a.coef_attr, a.coef_default) : 0.0);
  if (!ad.ok()) return v.Wrap(ad.status());
  absl::StatusOr<TensorDesc> td = FlatDesc(v, v.in(0).NumElements());
  if (!td.ok()) return td.status();
  absl::StatusOr<CudaOp> op = v.AllocateIo();
  if (!op.ok()) return op.status();
  const void* x = op->inputs[0].data();
  void* y = op->outputs[0].data();
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  op->run = [=, ad = *ad, td = *td] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(cudnnActivationForward(ctx->cudnn(), ad.get(), one.ptr(), td.get(), x,
                                              zero.ptr(), td.get(), y),
                       "cudnnActivationForward");
  };
  op->calls = "cudnnActivationForward";
  return op;
}

// <Act>Grad(dY, saved) -> dX. Relu, Sigmoid and Tanh save their output Y
// (graph/training_rules.cc), which is all cuDNN reads for them; Elu saves X,
// so prepare() derives Y = Elu(X) for cuDNN's backward.
absl::StatusOr<CudaOp> ActivationBackward(const OpView& v, const Activation& a, bool saved_is_x) {
  if (auto s = v.Arity(2, 2); !s.ok()) return s;
  if (auto s = v.SameFloatDtype(); !s.ok()) return s;
  if (v.in(1).shape != v.in(0).shape) return v.Error("dY and the saved tensor differ in shape");
  if (auto s = v.CheckOutput(0, v.in(0).shape, "cudnnActivationBackward"); !s.ok()) return s;
  absl::StatusOr<ActivationDesc> ad =
      MakeActivationDesc(a.mode, a.coef_attr ? v.op().GetFloat(a.coef_attr, a.coef_default) : 0.0);
  if (!ad.ok()) return v.Wrap(ad.status());
  absl::StatusOr<TensorDesc> td = FlatDesc(v, v.in(0).NumElements());
  if (!td.ok()) return td.status();
  absl::StatusOr<CudaOp> op = v.AllocateIo();
  if (!op.ok()) return op.status();
  const void* dy = op->inputs[0].data();
  const void* saved = op->inputs[1].data();
  const void* x = saved;
  const void* y = saved;
  void* dx = op->outputs[0].data();
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  if (saved_is_x) {
    absl::StatusOr<DeviceTensor> yt = v.Scratch(v.in(1).shape, dt, "y");
    if (!yt.ok()) return yt.status();
    void* yp = yt->data();
    y = yp;
    op->scratch.push_back(*std::move(yt));
    op->prepare = [=, ad = *ad, td = *td] {
      const Scale one(dt, 1.0), zero(dt, 0.0);
      return CudnnStatus(cudnnActivationForward(ctx->cudnn(), ad.get(), one.ptr(), td.get(), x,
                                                zero.ptr(), td.get(), yp),
                         "cudnnActivationForward (saved Y)");
    };
  }
  op->run = [=, ad = *ad, td = *td] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(cudnnActivationBackward(ctx->cudnn(), ad.get(), one.ptr(), td.get(), y,
                                               td.get(), dy, td.get(), x, zero.ptr(), td.get(), dx),
                       "cudnnActivationBackward");
  };
  op->calls = "cudnnActivationBackward";
  return op;
}

absl::StatusOr<CudaOp> Gelu(const OpView& v, bool grad) {
  if (auto s = v.Arity(grad ? 2 : 1, grad ? 2 : 1); !s.ok()) return s;
  if (auto s = v.SameFloatDtype(); !s.ok()) return s;
  if (grad && v.in(1).shape != v.in(0).shape) return v.Error("dY and X differ in shape");
  if (auto s = v.CheckOutput(0, v.in(0).shape, "GELU kernel"); !s.ok()) return s;
  const std::string approx = v.op().GetString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return v.Error(absl::StrCat("approximate='", approx, "'"));
  const bool tanh_approx = approx == "tanh";
  absl::StatusOr<CudaOp> op = v.AllocateIo();
  if (!op.ok()) return op.status();
  const ElemType et = *ElemTypeOf(v.dtype());
  const int64_t n = v.in(0).NumElements();
  const CudaContext* ctx = &v.ctx();
  const void* a = op->inputs[0].data();
  const void* b = grad ? op->inputs[1].data() : nullptr;
  void* out = op->outputs[0].data();
  if (grad) {
    op->run = [=] {
      return CudaStatus(GeluBackward(et, a, b, out, n, tanh_approx, ctx->stream()),
                        "GeluBackward kernel");
    };
    op->calls = "braid GeluBackward kernel";
  } else {
    op->run = [=] {
      return CudaStatus(GeluForward(et, a, out, n, tanh_approx, ctx->stream()),
                        "GeluForward kernel");
    };
    op->calls = "braid GeluForward kernel";
  }
  return op;
}

// C = op(A, B) with numpy broadcasting, through cudnnOpTensor.
absl::StatusOr<CudaOp> Binary(const OpView& v, cudnnOpTensorOp_t mode, bool subtract) {
  if (auto s = v.Arity(2, 2); !s.ok()) return s;
  if (auto s = v.SameFloatDtype(); !s.ok()) return s;
  absl::StatusOr<BinaryPlan> p = PlanBinary(v.in(0).shape, v.in(1).shape, v.out(0).shape);
  if (!p.ok()) return v.Wrap(p.status());
  absl::StatusOr<OpTensorDesc> od = MakeOpTensorDesc(mode, CudnnComputeType(v.dtype()));
  absl::StatusOr<TensorDesc> cd = MakeTensorDesc(p->c_dims, CudnnType(v.dtype()));
  absl::StatusOr<TensorDesc> bd = MakeTensorDesc(p->b_dims, CudnnType(v.dtype()));
  if (!od.ok()) return v.Wrap(od.status());
  if (!cd.ok()) return v.Wrap(cd.status());
  if (!bd.ok()) return v.Wrap(bd.status());
  absl::StatusOr<CudaOp> op = v.AllocateIo();
  if (!op.ok()) return op.status();
  // cuDNN wants the full-shape operand first: swap, and for Sub move the sign.
  const void* full = op->inputs[p->swapped ? 1 : 0].data();
  const void* bcast = op->inputs[p->swapped ? 0 : 1].data();
  const double a1 = subtract && p->swapped ? -1.0 : 1.0;
  const double a2 = subtract && !p->swapped ? -1.0 : 1.0;
  void* c = op->outputs[0].data();
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  op->run = [=, od = *od, cd = *cd, bd = *bd] {
    const Scale s1(dt, a1), s2(dt, a2), zero(dt, 0.0);
    return CudnnStatus(cudnnOpTensor(ctx->cudnn(), od.get(), s1.ptr(), cd.get(), full, s2.ptr(),
                                     bd.get(), bcast, zero.ptr(), cd.get(), c),
                       "cudnnOpTensor");
  };
  op->calls = "cudnnOpTensor";
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
  if (auto s = v.Arity(grad ? 2 : 1, grad ? 2 : 1); !s.ok()) return s;
  if (auto s = v.SameFloatDtype(); !s.ok()) return s;
  if (grad && v.in(1).shape != v.in(0).shape) return v.Error("dY and Y differ in shape");
  if (auto s = v.CheckOutput(0, v.in(0).shape, "cuDNN softmax"); !s.ok()) return s;
  absl::StatusOr<TensorDesc> d = SoftmaxDesc(v, v.in(0).shape);
  if (!d.ok()) return d.status();
  absl::StatusOr<CudaOp> op = v.AllocateIo();
  if (!op.ok()) return op.status();
  const cudnnSoftmaxAlgorithm_t algo = log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  const void* a = op->inputs[0].data();
  const void* b = grad ? op->inputs[1].data() : nullptr;
  void* out = op->outputs[0].data();
  if (grad) {  // (dY, Y) -> dX
    op->run = [=, d = *d] {
      const Scale one(dt, 1.0), zero(dt, 0.0);
      return CudnnStatus(
          cudnnSoftmaxBackward(ctx->cudnn(), algo, CUDNN_SOFTMAX_MODE_CHANNEL, one.ptr(), d.get(),
                               b, d.get(), a, zero.ptr(), d.get(), out),
          "cudnnSoftmaxBackward");
    };
    op->calls = "cudnnSoftmaxBackward";
  } else {
    op->run = [=, d = *d] {
      const Scale one(dt, 1.0), zero(dt, 0.0);
      return CudnnStatus(cudnnSoftmaxForward(ctx->cudnn(), algo, CUDNN_SOFTMAX_MODE_CHANNEL,
                                             one.ptr(), d.get(), a, zero.ptr(), d.get(), out),
                         "cudnnSoftmaxForward");
    };
    op->calls = "cudnnSoftmaxForward";
  }
  return op;
}

}  // namespace

bool ElementwiseSupports(std::string_view t) {
  static const auto* types = new std::set<std::string_view>{
      "Relu",    "Sigmoid", "Tanh",       "Elu",         "ReluGrad",      "SigmoidGrad", "TanhGrad",
      "EluGrad", "Gelu",    "GeluGrad",   "Add",         "Sub",           "Mul",         "Max",
      "Min",     "Softmax", "LogSoftmax", "SoftmaxGrad", "LogSoftmaxGrad"};
  return types->count(t) > 0;
}

BuildResult BuildElementwise(const OpView& v) {
  const std::string& t = v.op().type;
  if (auto it = Activations().find(t); it != Activations().end())
    return ActivationForward(v, it->second);
  if (t.size() > 4 && t.substr(t.size() - 4) == "Grad") {
    if (auto it = Activations().find(t.substr(0, t.size() - 4)); it != Activations().end()) {
      return ActivationBackward(v, it->second, /*saved_is_x=*/t == "EluGrad");
    }
  }
  if (t == "Gelu" || t == "GeluGrad") return Gelu(v, t == "GeluGrad");
  if (t == "Add") return Binary(v, CUDNN_OP_TENSOR_ADD, false);
  if (t == "Sub") return Binary(v, CUDNN_OP_TENSOR_ADD, true);
  if (t == "Mul") return Binary(v, CUDNN_OP_TENSOR_MUL, false);
  // ONNX's variadic Max/Min with two inputs, the common case.
  if ((t == "Max" || t == "Min") && v.num_inputs() == 2) {
    return Binary(v, t == "Max" ? CUDNN_OP_TENSOR_MAX : CUDNN_OP_TENSOR_MIN, false);
  }
  if (t == "Max" || t == "Min") return v.Unsupported("mapped for two inputs only");
  if (t == "Softmax" || t == "LogSoftmax") return Softmax(v, t == "LogSoftmax", false);
  if (t == "SoftmaxGrad" || t == "LogSoftmaxGrad") return Softmax(v, t == "LogSoftmaxGrad", true);
  return std::nullopt;
}

}  // namespace braid::worker::cuda_internal
