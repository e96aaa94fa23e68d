// Shape arithmetic of the CUDA profiler, kept apart from any CUDA call so it
// is unit-tested on machines without a GPU: how a graph op's shapes become a
// cuBLAS strided-batched GEMM, the <= 5-D tensors cuDNN's OpTensor/AddTensor
// and ReduceTensor accept, and ONNX padding. ONNX attribute semantics follow
// worker/cpu_kernels*.cc (the CPU backend), so both backends time the same op.
//
//   absl::StatusOr<GemmPlan> p = PlanMatMul({8, 128, 64}, {64, 32}, false, false);
//   // p->m == 1024 (batch folded into rows), p->batch == 1, p->out_shape == {8, 128, 32}
#ifndef BRAID_WORKER_CUDA_INTERNAL_OP_GEOMETRY_H_
#define BRAID_WORKER_CUDA_INTERNAL_OP_GEOMETRY_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/op_attrs.h"

namespace braid::worker::cuda_internal {

// Row-major C[batch] = op(A[batch]) * op(B[batch]) as one cuBLAS call. The
// cuBLAS (column-major) call computes C^T = op(B)^T op(A)^T, see cuda_matmul.cc.
struct GemmPlan {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0;  // last dim of A's and B's memory layout
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements; 0 = shared operand
  std::vector<int64_t> out_shape;                    // what the op's output must be
};

// ONNX/numpy MatMul with optional transposes of the last two dims (braid's
// backward MatMuls). 1-D operands are promoted as numpy does. A batched A
// times a 2-D B folds the batch into M (one GEMM), as PyTorch's matmul does.
// Unimplemented for batch dims that broadcast partially (PyTorch copies
// there); InvalidArgument when the contracted dims differ.
absl::StatusOr<GemmPlan> PlanMatMul(std::vector<int64_t> a, std::vector<int64_t> b, bool trans_a,
                                    bool trans_b);

// A binary elementwise op C = f(A, B) as cuDNN's OpTensor needs it: A has C's
// shape, B's dims are C's or 1, both at most 5-D after merging adjacent dims
// that broadcast alike. `swapped` says B and A trade places (only a
// commutative op, or Sub with negated scales, may be swapped).
struct BinaryPlan {
  std::vector<int> c_dims;  // also A's
  std::vector<int> b_dims;
  bool swapped = false;
};
// Unimplemented when both operands broadcast, InvalidArgument when the shapes
// do not broadcast to `c`.
absl::StatusOr<BinaryPlan> PlanBinary(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                      const std::vector<int64_t>& c);

// A full tensor `full` and a tensor `reduced` of the same rank with 1 where
// `full` is reduced (or broadcast), merged into at most `max_rank` dims and
// padded with leading 1s to at least 4 (cuDNN's minimum).
struct ReducePlan {
  std::vector<int> full_dims;
  std::vector<int> reduced_dims;
};
absl::StatusOr<ReducePlan> PlanReduce(const std::vector<int64_t>& full,
                                      const std::vector<int64_t>& reduced, int max_rank);

// Attribute resolution shared with the CPU kernels (graph/op_attrs.h).
using graph::IntsOr;
using graph::ReduceAxes;
using graph::ResolvePads;

// `in` with 1 at each axis in `axes` (the keepdims shape).
std::vector<int64_t> KeepDimsShape(const std::vector<int64_t>& in,
                                   const std::vector<int64_t>& axes);

// The begin pads when begin == end for every dim (what cuDNN can express).
std::optional<std::vector<int64_t>> SymmetricPads(const std::vector<int64_t>& pads);

// Narrowing to cuDNN's int dims; InvalidArgument naming the value when it
// does not fit.
absl::StatusOr<std::vector<int>> ToIntDims(const std::vector<int64_t>& v);

int64_t Product(const std::vector<int64_t>& v);

}  // namespace braid::worker::cuda_internal

#endif  // BRAID_WORKER_CUDA_INTERNAL_OP_GEOMETRY_H_
