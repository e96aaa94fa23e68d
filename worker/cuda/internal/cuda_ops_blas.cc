// MatMul (including braid's transposed backward MatMuls) and Gemm -> cuBLAS.
//
// cuBLAS is column-major; a row-major matrix is the transpose of the same
// memory read column-major. So row-major C = op(A) op(B) is computed as
// column-major C^T = op(B)^T op(A)^T: cuBLAS gets B's memory first, m = N,
// n = M, the transpose flags unchanged and each operand's last dim as its
// leading dimension.
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/cuda/internal/op_geometry.h"

namespace braid::worker::cuda_internal {
namespace {

using K = graph::OpKind;

bool FitsInt(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

// fp32 accumulation for f32/f16/bf16 without TF32 (PyTorch's defaults:
// allow_tf32 = False for matmul, fp32 accumulate for reduced precision).
cublasComputeType_t ComputeType(graph::DType d) {
  return d == graph::DType::kF64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
}

// Enqueues C = alpha * op(A) op(B) + beta * C for `p` on ctx's stream.
absl::Status Gemm(const CudaContext& ctx, const GemmPlan& p, graph::DType dtype, const void* a,
                  const void* b, void* c, double alpha, double beta) {
  const Scale al(dtype, alpha), be(dtype, beta);
  const cudaDataType_t t = CublasType(dtype);
  const cublasOperation_t op_a = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(p.n), n = static_cast<int>(p.m), k = static_cast<int>(p.k);
  if (p.batch == 1) {
    return CublasStatus(cublasGemmEx(ctx.cublas(), op_b, op_a, m, n, k, al.ptr(), b, t,
                                     static_cast<int>(p.ldb), a, t, static_cast<int>(p.lda),
                                     be.ptr(), c, t, m, ComputeType(dtype), CUBLAS_GEMM_DEFAULT),
                        "cublasGemmEx");
  }
  return CublasStatus(cublasGemmStridedBatchedEx(ctx.cublas(), op_b, op_a, m, n, k, al.ptr(), b, t,
                                                 static_cast<int>(p.ldb), p.stride_b, a, t,
                                                 static_cast<int>(p.lda), p.stride_a, be.ptr(), c,
                                                 t, m, p.stride_c, static_cast<int>(p.batch),
                                                 ComputeType(dtype), CUBLAS_GEMM_DEFAULT),
                      "cublasGemmStridedBatchedEx");
}

absl::StatusOr<GemmPlan> Plan(const OpView& v) {
  const bool ta = v.op().GetInt("transA", 0) != 0, tb = v.op().GetInt("transB", 0) != 0;
  absl::StatusOr<GemmPlan> p = PlanMatMul(v.in(0).shape, v.in(1).shape, ta, tb);
  if (!p.ok()) return v.Wrap(p.status());
  for (int64_t x : {p->m, p->n, p->k, p->lda, p->ldb, p->batch}) {
    if (!FitsInt(x)) return v.Unsupported(absl::StrCat("GEMM size ", x, " exceeds cuBLAS's int"));
  }
  RETURN_IF_ERROR(v.CheckOutput(0, p->out_shape, "cuBLAS"));
  return p;
}

absl::StatusOr<CudaOp> MatMul(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(2, 2));
  RETURN_IF_ERROR(v.SameFloatDtype());
  ASSIGN_OR_RETURN(GemmPlan p, Plan(v));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const void* a = op.inputs[0].data();
  const void* b = op.inputs[1].data();
  void* c = op.outputs[0].data();
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  op.run = [ctx, p, dt, a, b, c] { return Gemm(*ctx, p, dt, a, b, c, 1.0, 0.0); };
  op.calls = p.batch == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx";
  return op;
}

// ONNX Gemm: Y = alpha * op(A) op(B) + beta * C, C broadcast to [M, N]. As
// PyTorch's addmm: C is first broadcast into Y, then the GEMM adds to it.
absl::StatusOr<CudaOp> GemmOp(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(2, 3));
  RETURN_IF_ERROR(v.SameFloatDtype());
  if (v.in(0).shape.size() != 2 || v.in(1).shape.size() != 2) return v.Error("A and B must be 2-D");
  ASSIGN_OR_RETURN(GemmPlan p, Plan(v));
  const double alpha = v.op().GetFloat("alpha", 1.0);
  const double beta = v.num_inputs() == 3 ? v.op().GetFloat("beta", 1.0) : 0.0;
  TensorDesc c_desc, y_desc;
  if (v.num_inputs() == 3) {
    std::vector<int64_t> c = v.in(2).shape;
    if (c.size() > 2) return v.Error("C must be at most 2-D");
    while (c.size() < 2) c.insert(c.begin(), 1);
    absl::StatusOr<ReducePlan> bc = PlanReduce(p.out_shape, c, 5);
    if (!bc.ok()) return v.Wrap(bc.status());
    absl::StatusOr<TensorDesc> cd = MakeTensorDesc(bc->reduced_dims, CudnnType(v.dtype()));
    absl::StatusOr<TensorDesc> yd = MakeTensorDesc(bc->full_dims, CudnnType(v.dtype()));
    if (!cd.ok()) return v.Wrap(cd.status());
    if (!yd.ok()) return v.Wrap(yd.status());
    c_desc = *cd;
    y_desc = *yd;
  }
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const void* a = op.inputs[0].data();
  const void* b = op.inputs[1].data();
  const void* c = v.num_inputs() == 3 ? op.inputs[2].data() : nullptr;
  void* y = op.outputs[0].data();
  const graph::DType dt = v.dtype();
  const CudaContext* ctx = &v.ctx();
  op.run = [=]() -> absl::Status {
    if (c != nullptr && beta != 0.0) {
      const Scale one(dt, 1.0), zero(dt, 0.0);
      RETURN_IF_ERROR(CudnnStatus(
          cudnnAddTensor(ctx->cudnn(), one.ptr(), c_desc.get(), c, zero.ptr(), y_desc.get(), y),
          "cudnnAddTensor (broadcast C)"));
      return Gemm(*ctx, p, dt, a, b, y, alpha, beta);
    }
    return Gemm(*ctx, p, dt, a, b, y, alpha, 0.0);
  };
  op.calls = c != nullptr && beta != 0.0 ? "cudnnAddTensor + cublasGemmEx" : "cublasGemmEx";
  return op;
}

}  // namespace

bool MatMulSupports(graph::OpKind t) { return t == K::kMatMul || t == K::kGemm; }

BuildResult BuildMatMul(const OpView& v) {
  if (v.op().kind == K::kMatMul) return MatMul(v);
  if (v.op().kind == K::kGemm) return GemmOp(v);
  return std::nullopt;
}

}  // namespace braid::worker::cuda_internal
