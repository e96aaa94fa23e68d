// The group analysis shared by both lowerings, and the op -> EwCode mapping.
#include "worker/fused_kernels.h"

#include <algorithm>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "costmodel/fusion_backend.h"
#include "graph/op_kind.h"

namespace braid::worker {
namespace {

using graph::OpId;
using graph::TensorId;
using kernels::EwCode;
using K = graph::OpKind;

}  // namespace

namespace internal {

std::string OpLabel(const graph::Op& op) {
  return absl::StrCat("op '", op.name, "' (", op.type, ")");
}

void SetRun(const graph::Graph& g, std::function<absl::StatusOr<std::vector<at::Tensor>>()> compute,
            FusedCpuKernel* k) {
  std::vector<std::vector<int64_t>> shapes;
  for (TensorId t : k->outputs) shapes.push_back(g.tensor(t).shape);
  // The results of the last run, shared by `run` and `output`.
  auto results = std::make_shared<std::vector<at::Tensor>>(shapes.size());
  k->run = [compute = std::move(compute), shapes, results]() -> absl::Status {
    try {
      ASSIGN_OR_RETURN(std::vector<at::Tensor> out, compute());
      if (out.size() != shapes.size()) {
        return absl::InternalError(absl::StrCat("fused CPU kernel: ", out.size(), " results for ",
                                                shapes.size(), " outputs"));
      }
      // Same element count, other shape (a reduction's keepdims shape, a
      // reshape's input shape): a view of the contiguous result.
      for (size_t i = 0; i < out.size(); ++i) (*results)[i] = out[i].reshape(shapes[i]);
      return absl::OkStatus();
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("fused CPU kernel: LibTorch: ", e.what_without_backtrace()));
    }
  };
  k->output = [results](size_t i) -> const at::Tensor& { return results->at(i); };
}

}  // namespace internal

absl::StatusOr<FusedCpuKernel> MakeFusedCpuKernel(const graph::Graph& g,
                                                  std::span<const graph::OpId> ops,
                                                  TensorSlots* slots) {
  std::vector<OpId> sorted(ops.begin(), ops.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  if (sorted.empty()) return absl::InvalidArgumentError("fused CPU kernel: empty group");
  for (OpId o : sorted) {
    if (o < 0 || o >= g.num_ops()) {
      return absl::InvalidArgumentError(absl::StrCat("fused CPU kernel: no op with id ", o));
    }
  }
  // The backend's verdict is the contract: a plan for a CPU cluster holds
  // only groups it accepts, and the executor runs exactly those.
  if (absl::Status s = costmodel::CpuFusionBackend().CanImplement(g, sorted); !s.ok()) {
    return absl::UnimplementedError(std::string(s.message()));
  }
  // CanImplement accepts any single op (it runs as its own kernel); only the
  // kinds the fused executor has a form for get one here, and the dtype
  // check the backend makes for larger groups is made for them too.
  for (OpId o : sorted) {
    const graph::Op& op = g.op(o);
    for (const std::vector<TensorId>* ts : {&op.inputs, &op.outputs}) {
      for (TensorId t : *ts) {
        if (g.tensor(t).dtype != graph::DType::kF32) {
          return absl::UnimplementedError(
              absl::StrCat("fused CPU kernel: ", internal::OpLabel(op), " has the ",
                           std::string(graph::DTypeName(g.tensor(t).dtype)), " tensor '",
                           g.tensor(t).name, "'; the fused executor runs fp32 only"));
        }
      }
    }
  }
  OpId lib = graph::kNoId;
  for (OpId o : sorted) {
    if (graph::IsLibraryKind(g.op(o).kind)) lib = o;
  }
  if (sorted.size() == 1) {
    const graph::Op& op = g.op(sorted[0]);
    const bool fusible = graph::IsOneOf(op.kind, {K::kMatMul, K::kGemm, K::kConv}) ||
                         costmodel::CpuElementwiseKind(op) || costmodel::CpuReshapeKind(op) ||
                         costmodel::CpuReduceSinkKind(op);
    if (!fusible) {
      return absl::UnimplementedError(
          absl::StrCat("fused CPU kernel: ", internal::OpLabel(op),
                       " has no fused form; run it with MakeCpuKernel"));
    }
  }
  ASSIGN_OR_RETURN(FusedGroup grp, AnalyzeGroup(g, sorted));
  // With no slots the kernel keeps its own (random inputs, as MakeCpuKernel
  // makes without them), alive as long as the closure.
  std::shared_ptr<TensorSlots> owned;
  if (slots == nullptr) {
    owned = std::make_shared<TensorSlots>();
    slots = owned.get();
  }
  try {
    if (lib != graph::kNoId) return internal::MakeLibraryKernel(g, grp, owned, slots);
    return internal::MakeElementwiseKernel(g, grp, owned, slots);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("fused CPU kernel: LibTorch: ", e.what_without_backtrace()));
  }
}

}  // namespace braid::worker
