// Reductions (ReduceSum/Mean/Max/Min, global pooling) -> cudnnReduceTensor;
// their gradients, which broadcast dY back over the reduced axes ->
// cudnnAddTensor (scaled by 1/count for the means).
#include <set>

#include "absl/strings/str_cat.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/cuda/internal/op_geometry.h"

namespace braid::worker::cuda_internal {
namespace {

// cudnnReduceTensor takes up to 8 dims, cudnnAddTensor up to 5.
constexpr int kReduceMaxRank = 8;
constexpr int kAddTensorMaxRank = 5;

// Reduces X (input 0) to `keep` (X's shape with 1 on reduced axes), which
// must have output 0's element count (keepdims=0 drops the 1s).
absl::StatusOr<CudaOp> Reduce(const OpView& v, cudnnReduceTensorOp_t mode,
                              const std::vector<int64_t>& keep) {
  if (auto s = v.SameFloatDtype(); !s.ok()) return s;
  if (Product(keep) != v.out(0).NumElements()) {
    return v.Error(absl::StrCat("reducing ", graph::ShapeString(v.in(0).shape), " gives ",
                                graph::ShapeString(keep), " but the graph's output '",
                                v.out(0).name, "' is ", graph::ShapeString(v.out(0).shape)));
  }
  absl::StatusOr<ReducePlan> p = PlanReduce(v.in(0).shape, keep, kReduceMaxRank);
  if (!p.ok()) return v.Wrap(p.status());
  const graph::DType dt = v.dtype();
  absl::StatusOr<ReduceDesc> rd = MakeReduceDesc(mode, CudnnComputeType(dt));
  absl::StatusOr<TensorDesc> ad = MakeTensorDesc(p->full_dims, CudnnType(dt));
  absl::StatusOr<TensorDesc> cd = MakeTensorDesc(p->reduced_dims, CudnnType(dt));
  if (!rd.ok()) return v.Wrap(rd.status());
  if (!ad.ok()) return v.Wrap(ad.status());
  if (!cd.ok()) return v.Wrap(cd.status());
  size_t ws_bytes = 0;
  if (auto s = v.Wrap(CudnnStatus(cudnnGetReductionWorkspaceSize(v.ctx().cudnn(), rd->get(),
                                                                 ad->get(), cd->get(), &ws_bytes),
                                  "cudnnGetReductionWorkspaceSize"));
      !s.ok()) {
    return s;
  }
  absl::StatusOr<CudaOp> op = v.AllocateIo();
  if (!op.ok()) return op.status();
  absl::StatusOr<DeviceTensor> ws =
      v.Scratch({static_cast<int64_t>(ws_bytes)}, graph::DType::kU8, "workspace");
  if (!ws.ok()) return ws.status();
  void* wsp = ws->data();
  op->scratch.push_back(*std::move(ws));
  const void* x = op->inputs[0].data();
  void* y = op->outputs[0].data();
  const CudaContext* ctx = &v.ctx();
  op->run = [=, rd = *rd, ad = *ad, cd = *cd] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(cudnnReduceTensor(ctx->cudnn(), rd.get(), nullptr, 0, wsp, ws_bytes,
                                         one.ptr(), ad.get(), x, zero.ptr(), cd.get(), y),
                       "cudnnReduceTensor");
  };
  op->calls = "cudnnReduceTensor";
  return op;
}

// dX = scale * dY broadcast from `keep` (dX's shape with 1 on reduced axes).
absl::StatusOr<CudaOp> Broadcast(const OpView& v, const std::vector<int64_t>& keep, bool mean) {
  if (auto s = v.SameFloatDtype(); !s.ok()) return s;
  const std::vector<int64_t>& dx = v.out(0).shape;
  if (Product(keep) != v.in(0).NumElements()) {
    return v.Error(absl::StrCat("dY '", v.in(0).name, "' ", graph::ShapeString(v.in(0).shape),
                                " does not reduce ", graph::ShapeString(dx)));
  }
  absl::StatusOr<ReducePlan> p = PlanReduce(dx, keep, kAddTensorMaxRank);
  if (!p.ok()) return v.Wrap(p.status());
  const graph::DType dt = v.dtype();
  absl::StatusOr<TensorDesc> ad = MakeTensorDesc(p->reduced_dims, CudnnType(dt));
  absl::StatusOr<TensorDesc> cd = MakeTensorDesc(p->full_dims, CudnnType(dt));
  if (!ad.ok()) return v.Wrap(ad.status());
  if (!cd.ok()) return v.Wrap(cd.status());
  absl::StatusOr<CudaOp> op = v.AllocateIo();
  if (!op.ok()) return op.status();
  const double scale =
      mean ? static_cast<double>(Product(keep)) / static_cast<double>(Product(dx)) : 1.0;
  const void* dy = op->inputs[0].data();
  void* out = op->outputs[0].data();
  const CudaContext* ctx = &v.ctx();
  op->run = [=, ad = *ad, cd = *cd] {
    const Scale alpha(dt, scale), zero(dt, 0.0);
    return CudnnStatus(
        cudnnAddTensor(ctx->cudnn(), alpha.ptr(), ad.get(), dy, zero.ptr(), cd.get(), out),
        "cudnnAddTensor (broadcast dY)");
  };
  op->calls = "cudnnAddTensor";
  return op;
}

std::vector<int64_t> GlobalKeep(const std::vector<int64_t>& shape) {
  std::vector<int64_t> keep = shape;
  for (size_t i = 2; i < keep.size(); ++i) keep[i] = 1;
  return keep;
}

absl::StatusOr<CudaOp> ReduceOp(const OpView& v) {
  if (auto s = v.Arity(1, 2); !s.ok()) return s;  // opset 13+ passes axes as input 1
  const std::string& t = v.op().type;
  const cudnnReduceTensorOp_t mode = t == "ReduceSum"    ? CUDNN_REDUCE_TENSOR_ADD
                                     : t == "ReduceMean" ? CUDNN_REDUCE_TENSOR_AVG
                                     : t == "ReduceMax"  ? CUDNN_REDUCE_TENSOR_MAX
                                                         : CUDNN_REDUCE_TENSOR_MIN;
  const std::vector<int64_t> axes = ReduceAxes(v.op(), v.in(0).shape, v.out(0).shape);
  for (int64_t ax : axes) {
    if (ax < 0 || ax >= static_cast<int64_t>(v.in(0).shape.size()))
      return v.Error("axis out of range");
  }
  return Reduce(v, mode, KeepDimsShape(v.in(0).shape, axes));
}

absl::StatusOr<CudaOp> GlobalPool(const OpView& v) {
  if (auto s = v.Arity(1, 1); !s.ok()) return s;
  if (v.in(0).shape.size() < 3) return v.Error("X must be [N,C,spatial...]");
  const std::vector<int64_t> keep = GlobalKeep(v.in(0).shape);
  if (auto s = v.CheckOutput(0, keep, "cudnnReduceTensor"); !s.ok()) return s;
  return Reduce(
      v, v.op().type == "GlobalMaxPool" ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_AVG, keep);
}

// As the CPU backend: dY's keepdims shape from dY itself when it kept the
// dims, else from `axes`, else a scalar dY.
absl::StatusOr<CudaOp> ReduceGrad(const OpView& v) {
  if (auto s = v.Arity(1, 2); !s.ok()) return s;
  const std::vector<int64_t>& dx = v.out(0).shape;
  const std::vector<int64_t>& dys = v.in(0).shape;
  std::vector<int64_t> keep(dx.size(), 1);
  std::vector<int64_t> axes = v.op().GetInts("axes");
  if (dys.size() == dx.size()) {
    keep = dys;
  } else if (!axes.empty()) {
    const int64_t rank = static_cast<int64_t>(dx.size());
    for (int64_t& ax : axes) {
      if (ax < 0) ax += rank;
      if (ax < 0 || ax >= rank) return v.Error("axis out of range");
    }
    keep = KeepDimsShape(dx, axes);
  } else if (v.in(0).NumElements() != 1) {
    return v.Error("cannot tell the reduced axes: give `axes` or a keepdims dY");
  }
  return Broadcast(v, keep, v.op().type == "ReduceMeanGrad");
}

absl::StatusOr<CudaOp> GlobalAveragePoolGrad(const OpView& v) {
  if (auto s = v.Arity(1, 2); !s.ok()) return s;
  if (v.out(0).shape.size() < 3) return v.Error("output dX must be [N,C,spatial...]");
  return Broadcast(v, GlobalKeep(v.out(0).shape), /*mean=*/true);
}

}  // namespace

bool ReduceSupports(std::string_view t) {
  static const auto* types =
      new std::set<std::string_view>{"ReduceSum",     "ReduceMean",        "ReduceMax",
                                     "ReduceMin",     "GlobalAveragePool", "GlobalMaxPool",
                                     "ReduceSumGrad", "ReduceMeanGrad",    "GlobalAveragePoolGrad"};
  return types->count(t) > 0;
}

BuildResult BuildReduce(const OpView& v) {
  const std::string& t = v.op().type;
  if (t == "ReduceSum" || t == "ReduceMean" || t == "ReduceMax" || t == "ReduceMin")
    return ReduceOp(v);
  if (t == "GlobalAveragePool" || t == "GlobalMaxPool") return GlobalPool(v);
  if (t == "ReduceSumGrad" || t == "ReduceMeanGrad") return ReduceGrad(v);
  if (t == "GlobalAveragePoolGrad") return GlobalAveragePoolGrad(v);
  return std::nullopt;
}

}  // namespace braid::worker::cuda_internal
