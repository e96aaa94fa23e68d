#include "worker/cuda/internal/cuda_ops.h"

#include "absl/strings/str_cat.h"
#include "graph/ops.h"

namespace braid::worker::cuda_internal {
absl::Status OpView::Error(std::string_view what) const {
  return absl::InvalidArgumentError(
      absl::StrCat("cuda profiler: op '", op_.name, "' (", op_.type, "): ", std::string(what)));
}

absl::Status OpView::Unsupported(std::string_view what) const {
  return absl::UnimplementedError(
      absl::StrCat("cuda profiler: op '", op_.name, "' (", op_.type, "): ", std::string(what)));
}

absl::Status OpView::Wrap(const absl::Status& s) const {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("cuda profiler: op '", op_.name, "' (", op_.type,
                                             "): ", std::string(s.message())));
}

absl::Status OpView::Arity(int min_inputs, int max_inputs) const {
  if (num_inputs() < min_inputs || num_inputs() > max_inputs) {
    return Error(
        absl::StrCat("expects ", min_inputs, "..", max_inputs, " inputs, has ", num_inputs()));
  }
  if (num_outputs() < 1) return Error("has no output");
  return absl::OkStatus();
}

absl::Status OpView::CheckOutput(int i, const std::vector<int64_t>& computed,
                                 std::string_view library) const {
  if (i < num_outputs() && computed == out(i).shape) return absl::OkStatus();
  return Error(absl::StrCat(std::string(library), " computes ", graph::ShapeString(computed),
                            " but the graph's output '", i < num_outputs() ? out(i).name : "?",
                            "' is ",
                            i < num_outputs() ? graph::ShapeString(out(i).shape) : "missing"));
}

absl::Status OpView::SameFloatDtype() const {
  if (absl::StatusOr<ElemType> e = ElemTypeOf(dtype()); !e.ok()) return Wrap(e.status());
  for (int i = 0; i < num_inputs(); ++i) {
    if (in(i).dtype != dtype()) {
      return Unsupported(absl::StrCat("input '", in(i).name, "' is ",
                                      std::string(graph::DTypeName(in(i).dtype)), ", output is ",
                                      std::string(graph::DTypeName(dtype())),
                                      " (mixed dtypes are not mapped)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CudaOp> OpView::AllocateIo() const {
  CudaOp op;
  for (int i = 0; i < num_inputs(); ++i) {
    absl::StatusOr<DeviceTensor> t = ctx_.NewTensor(in(i).shape, in(i).dtype, in(i).name);
    if (!t.ok()) return Wrap(t.status());
    op.inputs.push_back(*std::move(t));
  }
  for (int i = 0; i < num_outputs(); ++i) {
    absl::StatusOr<DeviceTensor> t = ctx_.NewTensor(out(i).shape, out(i).dtype, out(i).name);
    if (!t.ok()) return Wrap(t.status());
    op.outputs.push_back(*std::move(t));
  }
  return op;
}

absl::StatusOr<DeviceTensor> OpView::Scratch(const std::vector<int64_t>& shape, graph::DType dtype,
                                             std::string_view what) const {
  absl::StatusOr<DeviceTensor> t =
      ctx_.NewTensor(shape, dtype, absl::StrCat(op_.name, ".", std::string(what)));
  if (!t.ok()) return Wrap(t.status());
  return t;
}

bool CudaOpSupports(graph::OpKind kind) {
  return MatMulSupports(kind) || ConvSupports(kind) || ElementwiseSupports(kind) ||
         ReduceSupports(kind) || NormSupports(kind) || PoolSupports(kind) ||
         DataSupports(kind) || UpdateSupports(kind);
}

absl::StatusOr<CudaOp> MakeCudaOp(const CudaContext& ctx, const graph::Graph& g, graph::OpId id) {
  if (id < 0 || id >= g.num_ops()) {
    return absl::InvalidArgumentError(absl::StrCat("cuda profiler: no op with id ", id));
  }
  OpView v(ctx, g, id);
  const std::string& type = v.op().type;
  if (graph::IsCollectiveKind(v.op().kind)) {
    return absl::UnimplementedError(
        absl::StrCat("cuda profiler: ", type, " is a collective; the NCCL benchmark measures it"));
  }
  if (v.num_outputs() < 1) return v.Error("has no output");
  for (auto build : {BuildMatMul, BuildConv, BuildElementwise, BuildReduce, BuildNorm, BuildPool,
                     BuildData, BuildUpdate}) {
    if (BuildResult r = build(v)) return *std::move(r);
  }
  return absl::UnimplementedError(
      absl::StrCat("cuda profiler: no cuBLAS/cuDNN mapping for op type ", type));
}

}  // namespace braid::worker::cuda_internal
