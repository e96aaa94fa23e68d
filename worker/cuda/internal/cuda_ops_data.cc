// Data movement and dropout: Transpose -> braid's permute kernel; Concat and
// Split -> one cudaMemcpy2DAsync per piece (a strided copy of `outer` rows);
// Dropout and DropoutGrad -> braid's hash-keyed dropout kernels (kernels.h).
// Reshape, Flatten, Squeeze and Unsqueeze stay unmapped: on a contiguous
// tensor they are views and launch nothing.
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/cuda/internal/op_geometry.h"

namespace braid::worker::cuda_internal {
namespace {

using K = graph::OpKind;

absl::StatusOr<CudaOp> Transpose(const OpView& v) {
  RETURN_IF_ERROR(v.Arity(1, 1));
  RETURN_IF_ERROR(v.SameFloatDtype());
  const std::vector<int64_t>& in = v.in(0).shape;
  const int rank = static_cast<int>(in.size());
  if (rank > kMaxPermuteRank) return v.Unsupported(absl::StrCat("rank ", rank, " > 8"));
  std::vector<int64_t> perm = v.op().GetInts("perm");
  if (perm.empty()) {
    for (int k = rank - 1; k >= 0; --k) perm.push_back(k);
  }
  if (static_cast<int>(perm.size()) != rank) return v.Error("perm has the wrong length");
  std::vector<int> p(rank);
  std::vector<bool> seen(rank, false);
  std::vector<int64_t> out(rank);
  for (int k = 0; k < rank; ++k) {
    if (perm[k] < 0 || perm[k] >= rank || seen[perm[k]]) return v.Error("perm is not a permutation");
    seen[perm[k]] = true;
    p[k] = static_cast<int>(perm[k]);
    out[k] = in[p[k]];
  }
  RETURN_IF_ERROR(v.CheckOutput(0, out, "the permute kernel"));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const ElemType et = *ElemTypeOf(v.dtype());
  const void* x = op.inputs[0].data();
  void* y = op.outputs[0].data();
  const CudaContext* ctx = &v.ctx();
  op.run = [=] {
    return CudaStatus(Permute(et, x, y, rank, in.data(), p.data(), ctx->stream()),
                      "Permute kernel");
  };
  op.calls = "braid Permute kernel";
  return op;
}

// Concat (pieces = inputs, whole = output 0) or Split (whole = input 0,
// pieces = outputs) along `axis`: piece i is `outer` rows of inner_i
// elements at column offset sum(inner_j, j < i) of the whole's rows.
absl::StatusOr<CudaOp> ConcatOrSplit(const OpView& v, bool concat) {
  RETURN_IF_ERROR(concat ? v.Arity(1, 1 << 16) : v.Arity(1, 2));
  const graph::Tensor& whole = concat ? v.out(0) : v.in(0);
  const int pieces = concat ? v.num_inputs() : v.num_outputs();
  auto piece = [&](int i) -> const graph::Tensor& { return concat ? v.in(i) : v.out(i); };
  const int rank = static_cast<int>(whole.shape.size());
  int64_t axis = v.op().GetInt("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return v.Error("axis out of range");
  const int64_t es = graph::DTypeSize(whole.dtype);
  int64_t outer = 1, after = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= whole.shape[k];
  for (int64_t k = axis + 1; k < rank; ++k) after *= whole.shape[k];
  std::vector<int64_t> inner(pieces);
  int64_t along = 0;
  for (int i = 0; i < pieces; ++i) {
    const graph::Tensor& t = piece(i);
    if (t.dtype != whole.dtype) return v.Unsupported("mixed dtypes");
    if (static_cast<int>(t.shape.size()) != rank) return v.Error("ranks differ");
    for (int k = 0; k < rank; ++k) {
      if (k != axis && t.shape[k] != whole.shape[k]) {
        return v.Error(absl::StrCat("'", t.name, "' ", graph::ShapeString(t.shape),
                                    " differs from ", graph::ShapeString(whole.shape),
                                    " off the axis"));
      }
    }
    along += t.shape[axis];
    inner[i] = t.shape[axis] * after;
  }
  if (along != whole.shape[axis]) {
    return v.Error(absl::StrCat("the pieces add up to ", along, " along axis ", axis, ", not ",
                                whole.shape[axis]));
  }
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const int64_t row = whole.shape[axis] * after;
  std::vector<char*> piece_ptrs;
  for (int i = 0; i < pieces; ++i) {
    piece_ptrs.push_back(static_cast<char*>(concat ? op.inputs[i].data() : op.outputs[i].data()));
  }
  char* whole_ptr = static_cast<char*>(concat ? op.outputs[0].data() : op.inputs[0].data());
  const CudaContext* ctx = &v.ctx();
  op.run = [=] {
    int64_t offset = 0;
    for (int i = 0; i < pieces; ++i) {
      if (inner[i] > 0 && outer > 0) {
        char* w = whole_ptr + offset * es;
        const size_t width = static_cast<size_t>(inner[i] * es);
        const size_t wpitch = static_cast<size_t>(row * es);
        const cudaError_t e =
            concat ? cudaMemcpy2DAsync(w, wpitch, piece_ptrs[i], width, width, outer,
                                       cudaMemcpyDeviceToDevice, ctx->stream())
                   : cudaMemcpy2DAsync(piece_ptrs[i], width, w, wpitch, width, outer,
                                       cudaMemcpyDeviceToDevice, ctx->stream());
        RETURN_IF_ERROR(CudaStatus(e, "cudaMemcpy2DAsync"));
      }
      offset += inner[i];
    }
    return absl::OkStatus();
  };
  op.calls = absl::StrCat(pieces, " x cudaMemcpy2DAsync");
  return op;
}

absl::StatusOr<CudaOp> Dropout(const OpView& v, bool grad) {
  // Dropout (x[, ratio, training_mode]) -> (y[, mask]);
  // DropoutGrad (dy[, mask]) -> (dx).
  RETURN_IF_ERROR(grad ? v.Arity(1, 2) : v.Arity(1, 3));
  const graph::DType dt = v.dtype();
  if (!ElemTypeOf(dt).ok() || v.in(0).dtype != dt) return v.Unsupported("a non-float tensor");
  if (v.in(0).shape != v.out(0).shape) return v.Error("input and output shapes differ");
  const bool has_mask = grad ? v.num_inputs() == 2 : v.num_outputs() >= 2;
  if (has_mask) {
    const graph::Tensor& m = grad ? v.in(1) : v.out(1);
    if (m.dtype != graph::DType::kBool && m.dtype != graph::DType::kU8) {
      return v.Unsupported(absl::StrCat("a mask of ", std::string(graph::DTypeName(m.dtype))));
    }
    if (m.shape != v.in(0).shape) return v.Error("the mask's shape differs");
  }
  const double ratio = v.op().GetFloat("ratio", 0.5);
  if (!(ratio >= 0 && ratio < 1)) return v.Error(absl::StrCat("ratio ", ratio, " not in [0, 1)"));
  const uint64_t seed = static_cast<uint64_t>(v.op().GetInt("seed", 0));
  ASSIGN_OR_RETURN(CudaOp op, v.AllocateIo());
  const ElemType et = *ElemTypeOf(dt);
  const int64_t n = v.in(0).NumElements();
  const void* a = op.inputs[0].data();
  void* out = op.outputs[0].data();
  const CudaContext* ctx = &v.ctx();
  const float r = static_cast<float>(ratio);
  if (grad) {
    const uint8_t* mask = has_mask ? static_cast<const uint8_t*>(op.inputs[1].data()) : nullptr;
    op.run = [=] {
      return CudaStatus(DropoutBackward(et, a, mask, out, n, r, seed, ctx->stream()),
                        "DropoutBackward kernel");
    };
    op.calls = has_mask ? "braid DropoutBackward kernel (mask)" : "braid DropoutBackward kernel (seed)";
  } else {
    uint8_t* mask = has_mask ? static_cast<uint8_t*>(op.outputs[1].data()) : nullptr;
    op.run = [=] {
      return CudaStatus(DropoutForward(et, a, out, mask, n, r, seed, ctx->stream()),
                        "DropoutForward kernel");
    };
    op.calls = "braid DropoutForward kernel";
  }
  return op;
}

}  // namespace

bool DataSupports(graph::OpKind k) {
  return k == K::kTranspose || k == K::kConcat || k == K::kSplit || k == K::kDropout ||
         k == K::kDropoutGrad;
}

BuildResult BuildData(const OpView& v) {
  switch (v.op().kind) {
    case K::kTranspose:
      return Transpose(v);
    case K::kConcat:
      return ConcatOrSplit(v, /*concat=*/true);
    case K::kSplit:
      return ConcatOrSplit(v, /*concat=*/false);
    case K::kDropout:
      return Dropout(v, /*grad=*/false);
    case K::kDropoutGrad:
      return Dropout(v, /*grad=*/true);
    default:
      return std::nullopt;
  }
}

}  // namespace braid::worker::cuda_internal
