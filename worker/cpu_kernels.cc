#include "worker/cpu_kernels.h"
#include "worker/runtime/cpu_tensor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace braid::worker {
namespace internal {

at::ScalarType ToScalarType(graph::DType d) { return runtime::ScalarTypeOf(d); }

bool OpArgs::InputIsInteger(int i) const {
  switch (in(i).dtype) {
    case graph::DType::kI64:
    case graph::DType::kI32:
    case graph::DType::kI8:
    case graph::DType::kU8:
      return true;
    default:
      return false;
  }
}

absl::Status OpArgs::Error(std::string_view what) const {
  return absl::InvalidArgumentError(
      absl::StrCat("cpu profiler: op '", op_.name, "' (", op_.type, "): ", std::string(what)));
}

absl::Status OpArgs::Arity(int min_inputs, int max_inputs) const {
  if (num_inputs() < min_inputs || num_inputs() > max_inputs) {
    return Error(absl::StrCat("expects ", min_inputs, "..", max_inputs, " inputs, has ",
                              num_inputs()));
  }
  if (num_outputs() < 1) return Error("has no output");
  return absl::OkStatus();
}

at::Tensor OpArgs::Random(const std::vector<int64_t>& shape, graph::DType dtype) const {
  auto options = at::TensorOptions().dtype(ToScalarType(dtype));
  switch (dtype) {
    case graph::DType::kF32:
    case graph::DType::kF64:
    case graph::DType::kF16:
    case graph::DType::kBF16:
      return at::randn(shape, options);
    case graph::DType::kBool:
      return at::rand(shape) < 0.5;
    default:
      return at::randint(0, 16, shape, options);
  }
}

bool IsFloating(graph::DType d) {
  switch (d) {
    case graph::DType::kF32:
    case graph::DType::kF64:
    case graph::DType::kF16:
    case graph::DType::kBF16:
      return true;
    default:
      return false;
  }
}

at::Tensor OpArgs::In(int i) const {
  if (slots_ != nullptr && IsFloating(in(i).dtype)) return slots_->Get(op_.inputs[i], in(i));
  return Random(in(i).shape, in(i).dtype);
}

at::Tensor OpArgs::Indices(const std::vector<int64_t>& shape, graph::DType dtype,
                           int64_t high) const {
  return at::randint(0, std::max<int64_t>(high, 1), shape,
                     at::TensorOptions().dtype(ToScalarType(dtype)));
}

std::optional<std::vector<int64_t>> SymmetricPads(const std::vector<int64_t>& pads,
                                                  std::vector<int64_t>* torch_pad) {
  const size_t n = pads.size() / 2;
  bool symmetric = true;
  for (size_t i = 0; i < n; ++i) symmetric = symmetric && pads[i] == pads[i + n];
  if (symmetric) return std::vector<int64_t>(pads.begin(), pads.begin() + n);
  torch_pad->clear();
  for (size_t i = n; i-- > 0;) {
    torch_pad->push_back(pads[i]);
    torch_pad->push_back(pads[i + n]);
  }
  return std::nullopt;
}

at::Tensor CropPadded(const at::Tensor& t, const std::vector<int64_t>& torch_pad) {
  at::Tensor out = t;
  const int64_t n = static_cast<int64_t>(torch_pad.size() / 2);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t dim = t.dim() - 1 - i;
    out = out.narrow(dim, torch_pad[2 * i], t.size(dim) - torch_pad[2 * i] - torch_pad[2 * i + 1]);
  }
  return out;
}

}  // namespace internal

at::Tensor TensorSlots::Get(graph::TensorId id, const graph::Tensor& t) {
  auto it = slots_.find(id);
  if (it != slots_.end()) return it->second;
  at::Tensor v = at::randn(t.shape, at::TensorOptions().dtype(internal::ToScalarType(t.dtype)));
  slots_.emplace(id, v);
  return v;
}

bool TensorSlots::Bind(graph::TensorId id, const at::Tensor& value) {
  auto it = slots_.find(id);
  if (it == slots_.end() || !value.defined()) return false;
  at::Tensor& slot = it->second;
  if (value.scalar_type() != slot.scalar_type() || value.sizes() != slot.sizes()) return false;
  if (value.unsafeGetTensorImpl() == slot.unsafeGetTensorImpl()) return true;
  at::NoGradGuard no_grad;
  slot.set_(value.detach());
  return true;
}

bool CpuKernelSupports(std::string_view op_type) {
  const graph::OpKind kind = graph::OpKindFromName(op_type);
  return internal::ForwardSupports(kind) || internal::BackwardSupports(kind) ||
         internal::PoolSupports(kind);
}

absl::StatusOr<CpuKernel> MakeCpuKernel(const graph::Graph& g, graph::OpId op,
                                        TensorSlots* slots) {
  if (op < 0 || op >= g.num_ops()) {
    return absl::InvalidArgumentError(absl::StrCat("cpu profiler: no op with id ", op));
  }
  internal::OpArgs args(g, op, slots);
  const std::string& type = args.op().type;
  if (graph::IsCollectiveKind(args.op().kind)) {
    return absl::UnimplementedError(absl::StrCat(
        "cpu profiler: ", type, " is a collective; the collective benchmark measures it"));
  }
  if (auto k = internal::MakeForwardKernel(args)) return *std::move(k);
  if (auto k = internal::MakeBackwardKernel(args)) return *std::move(k);
  if (auto k = internal::MakePoolKernel(args)) return *std::move(k);
  return absl::UnimplementedError(
      absl::StrCat("cpu profiler: no LibTorch mapping for op type ", type));
}

}  // namespace braid::worker
