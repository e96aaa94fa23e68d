// Reductions (ReduceSum/Mean/Max/Min, global pooling) -> cudnnReduceTensor;
// their gradients, which broadcast dY back over the reduced axes ->
// cudnnAddTensor (scaled by 1/count for the means).
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/cuda/internal/op_geometry.h"

namespace braid::worker::cuda_internal {
namespace {

using K = graph::OpKind;

// cudnnReduceTensor takes up to 8 dims, cudnnAddTensor up to 5.
constexpr int kReduceMaxRank = 8;
constexpr int kAddTensorMaxRank = 5;

// Reduces X (input 0) to `keep` (X's shape with 1 on reduced axes), which
// must have output 0's element count (keepdims=0 drops the 1s).
absl::StatusOr<CudaOp> Reduce(const OpView& v, cudnnReduceTensorOp_t mode,
                              const std::vector<int64_t>& keep) {
  RETURN_IF_ERROR(v.SameFloatDtype());
  if (Product(keep) != v.out(0).NumElements()) {
    return v.Error(absl::StrCat("reducing ", graph::ShapeString(v.in(0).shape), " gives ",
                                graph::ShapeString(keep), " but the graph's output '",
                                v.out(0).name, "' is ", graph::ShapeString(v.out(0).shape)));
  }
  const graph::DType dt = v.dtype();
  if (Product(keep) == v.in(0).NumElements()) {
    // Only size-1 axes reduced (a batch of one): every reduction is the
    // identity, which cuDNN refuses (CUDNN_STATUS_BAD_PARAM). A device copy.
    ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
    const void* x = op.inputs[0].data();
    void* y = op.outputs[0].data();
    const size_t bytes = static_cast<size_t>(op.inputs[0].bytes());
    const CudaContext* ctx = &v.ctx();
    op.run = [=] {
      return CudaStatus(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, ctx->stream()),
                        "cudaMemcpyAsync");
    };
    op.calls = "cudaMemcpyAsync";
    return op;
  }
  absl::StatusOr<ReducePlan> p = PlanReduce(v.in(0).shape, keep, kReduceMaxRank);
  if (!p.ok()) return v.Wrap(p.status());
  absl::StatusOr<ReduceDesc> rd = MakeReduceDesc(mode, CudnnComputeType(dt));
  absl::StatusOr<TensorDesc> ad = MakeTensorDesc(p->full_dims, CudnnType(dt));
  absl::StatusOr<TensorDesc> cd = MakeTensorDesc(p->reduced_dims, CudnnType(dt));
  if (!rd.ok()) return v.Wrap(rd.status());
  if (!ad.ok()) return v.Wrap(ad.status());
  if (!cd.ok()) return v.Wrap(cd.status());
  size_t ws_bytes = 0;
  RETURN_IF_ERROR(v.Wrap(CudnnStatus(
      cudnnGetReductionWorkspaceSize(v.ctx().cudnn(), rd->get(), ad->get(), cd->get(), &ws_bytes),
      "cudnnGetReductionWorkspaceSize")));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  ASSIGN_OR_RETURN(DeviceTensor ws,
                   v.Scratch({static_cast<int64_t>(ws_bytes)}, graph::DType::kU8, "workspace"));
  void* wsp = ws.data();
  op.scratch.push_back(std::move(ws));
  const void* x = op.inputs[0].data();
  void* y = op.outputs[0].data();
  const CudaContext* ctx = &v.ctx();
  op.run = [=, rd = *rd, ad = *ad, cd = *cd] {
    const Scale one(dt, 1.0), zero(dt, 0.0);
    return CudnnStatus(cudnnReduceTensor(ctx->cudnn(), rd.get(), nullptr, 0, wsp, ws_bytes,
                                         one.ptr(), ad.get(), x, zero.ptr(), cd.get(), y),
                       "cudnnReduceTensor");
  };
  op.calls = "cudnnReduceTensor";
  return op;
}

// dX = scale * dY broadcast from `keep` (dX's shape with 1 on reduced axes).
absl::StatusOr<CudaOp> Broadcast(const OpView& v, const std::vector<int64_t>& keep, bool mean) {
  RETURN_IF_ERROR(v.SameFloatDtype());
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
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const double scale =
      mean ? static_cast<double>(Product(keep)) / static_cast<double>(Product(dx)) : 1.0;
  const void* dy = op.inputs[0].data();
  void* out = op.outputs[0].data();
  const CudaContext* ctx = &v.ctx();
  op.run = [=, ad = *ad, cd = *cd] {
    const Scale alpha(dt, scale), zero(dt, 0.0);
    return CudnnStatus(
        cudnnAddTensor(ctx->cudnn(), alpha.ptr(), ad.get(), dy, zero.ptr(), cd.get(), out),
        "cudnnAddTensor (broadcast dY)");
  };
  op.calls = "cudnnAddTensor";
  return op;
}

std::vector<int64_t> GlobalKeep(const std::vector<int64_t>& shape) {
  std::vector<int64_t> keep = shape;
  for (size_t i = 2; i < keep.size(); ++i) keep[i] = 1;
  return keep;
}

absl::StatusOr<CudaOp> ReduceOp(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(1, 2));  // opset 13+ passes axes as input 1
  const graph::OpKind t = v.op().kind;
  const cudnnReduceTensorOp_t mode = t == K::kReduceSum    ? CUDNN_REDUCE_TENSOR_ADD
                                     : t == K::kReduceMean ? CUDNN_REDUCE_TENSOR_AVG
                                     : t == K::kReduceMax  ? CUDNN_REDUCE_TENSOR_MAX
                                                         : CUDNN_REDUCE_TENSOR_MIN;
  const std::vector<int64_t> axes = ReduceAxes(v.op(), v.in(0).shape, v.out(0).shape);
  for (int64_t ax : axes) {
    if (ax < 0 || ax >= static_cast<int64_t>(v.in(0).shape.size()))
      return v.Error("axis out of range");
  }
  return Reduce(v, mode, KeepDimsShape(v.in(0).shape, axes));
}

absl::StatusOr<CudaOp> GlobalPool(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(1, 1));
  if (v.in(0).shape.size() < 3) return v.Error("X must be [N,C,spatial...]");
  const std::vector<int64_t> keep = GlobalKeep(v.in(0).shape);
  RETURN_IF_ERROR(v.CheckOutput(0, keep, "cudnnReduceTensor"));
  return Reduce(
      v, v.op().kind == K::kGlobalMaxPool ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_AVG, keep);
}

// As the CPU backend: dY's keepdims shape from dY itself when it kept the
// dims, else from `axes`, else a scalar dY.
absl::StatusOr<CudaOp> ReduceGrad(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(1, 2));
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
  return Broadcast(v, keep, v.op().kind == K::kReduceMeanGrad);
}

absl::StatusOr<CudaOp> GlobalAveragePoolGrad(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(1, 2));
  if (v.out(0).shape.size() < 3) return v.Error("output dX must be [N,C,spatial...]");
  return Broadcast(v, GlobalKeep(v.out(0).shape), /*mean=*/true);
}

}  // namespace

bool ReduceSupports(graph::OpKind t) {
  static const auto* kinds = new std::set<graph::OpKind>{
      K::kReduceSum, K::kReduceMean, K::kReduceMax, K::kReduceMin, K::kGlobalAveragePool,
      K::kGlobalMaxPool, K::kReduceSumGrad, K::kReduceMeanGrad, K::kGlobalAveragePoolGrad};
  return kinds->count(t) > 0;
}

BuildResult BuildReduce(const OpView& v) {
  const graph::OpKind t = v.op().kind;
  if (t == K::kReduceSum || t == K::kReduceMean || t == K::kReduceMax || t == K::kReduceMin)
    return ReduceOp(v);
  if (t == K::kGlobalAveragePool || t == K::kGlobalMaxPool) return GlobalPool(v);
  if (t == K::kReduceSumGrad || t == K::kReduceMeanGrad) return ReduceGrad(v);
  if (t == K::kGlobalAveragePoolGrad) return GlobalAveragePoolGrad(v);
  return std::nullopt;
}

}  // namespace braid::worker::cuda_internal
