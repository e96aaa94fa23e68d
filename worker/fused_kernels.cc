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

bool ReshapeLike(const graph::Op& op) {
  return graph::IsOneOf(op.kind,
                        {K::kReshape, K::kFlatten, K::kSqueeze, K::kUnsqueeze, K::kIdentity});
}

bool ReduceSink(const graph::Op& op) {
  return graph::IsOneOf(op.kind, {K::kReduceSum, K::kReduceMean, K::kReduceMax});
}

// Members in topological order: Kahn's algorithm over the in-group edges,
// ties by id, so the order (and the outputs' order) is deterministic.
absl::StatusOr<std::vector<OpId>> TopoOrder(const graph::Graph& g, const std::vector<OpId>& ops) {
  std::map<OpId, int> indegree;
  for (OpId o : ops) indegree[o] = 0;
  for (OpId o : ops) {
    for (OpId p : g.Predecessors(o)) {
      if (indegree.count(p)) ++indegree[o];
    }
  }
  std::vector<OpId> ready, order;
  for (auto& [o, d] : indegree) {
    if (d == 0) ready.push_back(o);
  }
  while (!ready.empty()) {
    std::sort(ready.begin(), ready.end(), std::greater<>());
    const OpId o = ready.back();
    ready.pop_back();
    order.push_back(o);
    for (OpId s : g.Successors(o)) {
      auto it = indegree.find(s);
      if (it != indegree.end() && --it->second == 0) ready.push_back(s);
    }
  }
  if (order.size() != ops.size()) {
    return absl::InvalidArgumentError("fused CPU kernel: the group's members form a cycle");
  }
  return order;
}

// Whether the executor must write `t`: read outside the group, a graph
// output, or read by nobody (the value is the op's result).
bool Escapes(const graph::Graph& g, TensorId t, const std::vector<OpId>& sorted_ops) {
  const graph::Tensor& tensor = g.tensor(t);
  if (tensor.consumers.empty()) return true;
  if (std::find(g.outputs().begin(), g.outputs().end(), t) != g.outputs().end()) return true;
  for (OpId c : tensor.consumers) {
    if (!std::binary_search(sorted_ops.begin(), sorted_ops.end(), c)) return true;
  }
  return false;
}

}  // namespace

std::optional<EwMapping> EwMappingOf(const graph::Op& op) {
  // The backend's predicate decides which ops are elementwise members (and
  // with which arity): this function only says how each one is computed.
  if (!costmodel::CpuElementwiseKind(op)) return std::nullopt;
  auto m = [](EwCode code, std::vector<int> operands, float p0 = 0,
              float p1 = 0) -> std::optional<EwMapping> {
    return EwMapping{code, p0, p1, std::move(operands)};
  };
  // Defaults as the single-op kernels read them (cpu_kernels_forward.cc,
  // cpu_kernels_backward.cc).
  const float leaky_alpha = static_cast<float>(op.GetFloat("alpha", 0.01));
  const float elu_alpha = static_cast<float>(op.GetFloat("alpha", 1.0));
  const bool gelu_tanh = op.GetString("approximate", "none") == "tanh";
  switch (op.kind) {
    case K::kAdd: return m(EwCode::kAdd, {0, 1});
    case K::kSub: return m(EwCode::kSub, {0, 1});
    case K::kMul: return m(EwCode::kMul, {0, 1});
    case K::kDiv: return m(EwCode::kDiv, {0, 1});
    case K::kPow: return m(EwCode::kPow, {0, 1});
    case K::kMin: return m(EwCode::kMin, {0, 1});
    case K::kMax: return m(EwCode::kMax, {0, 1});
    case K::kPRelu: return m(EwCode::kPRelu, {0, 1});
    case K::kNeg: return m(EwCode::kNeg, {0});
    case K::kAbs: return m(EwCode::kAbs, {0});
    case K::kRelu: return m(EwCode::kRelu, {0});
    case K::kLeakyRelu: return m(EwCode::kLeakyRelu, {0}, leaky_alpha);
    case K::kSqrt: return m(EwCode::kSqrt, {0});
    case K::kReciprocal: return m(EwCode::kReciprocal, {0});
    case K::kExp: return m(EwCode::kExp, {0});
    case K::kLog: return m(EwCode::kLog, {0});
    case K::kTanh: return m(EwCode::kTanh, {0});
    case K::kSigmoid: return m(EwCode::kSigmoid, {0});
    case K::kErf: return m(EwCode::kErf, {0});
    case K::kSoftplus: return m(EwCode::kSoftplus, {0});
    case K::kSin: return m(EwCode::kSin, {0});
    case K::kCos: return m(EwCode::kCos, {0});
    case K::kElu: return m(EwCode::kElu, {0}, elu_alpha);
    case K::kSelu: return m(EwCode::kSelu, {0});
    case K::kHardSwish: return m(EwCode::kHardSwish, {0});
    case K::kSoftsign: return m(EwCode::kSoftsign, {0});
    case K::kFloor: return m(EwCode::kFloor, {0});
    case K::kCeil: return m(EwCode::kCeil, {0});
    case K::kRound: return m(EwCode::kRound, {0});
    case K::kSign: return m(EwCode::kSign, {0});
    case K::kGelu: return m(gelu_tanh ? EwCode::kGeluTanh : EwCode::kGelu, {0});
    // Gradients (dY, saved): a = dY, b = the saved tensor, whichever the
    // training builder saved (graph/training_rules.cc UnaryGradRule); the
    // formulas take the same argument the single-op kernels take.
    case K::kReluGrad: return m(EwCode::kReluGrad, {0, 1});
    case K::kLeakyReluGrad: return m(EwCode::kLeakyReluGrad, {0, 1}, leaky_alpha);
    case K::kGeluGrad: return m(gelu_tanh ? EwCode::kGeluTanhGrad : EwCode::kGeluGrad, {0, 1});
    case K::kSigmoidGrad: return m(EwCode::kSigmoidGrad, {0, 1});
    case K::kTanhGrad: return m(EwCode::kTanhGrad, {0, 1});
    case K::kEluGrad: return m(EwCode::kEluGrad, {0, 1}, elu_alpha);
    case K::kSoftplusGrad: return m(EwCode::kSoftplusGrad, {0, 1});
    case K::kHardSwishGrad: return m(EwCode::kHardSwishGrad, {0, 1});
    case K::kExpGrad: return m(EwCode::kMul, {0, 1});  // dY * Y
    case K::kLogGrad: return m(EwCode::kDiv, {0, 1});  // dY / X
    case K::kSqrtGrad: return m(EwCode::kSqrtGrad, {0, 1});
    case K::kReciprocalGrad: return m(EwCode::kReciprocalGrad, {0, 1});
    case K::kAbsGrad: return m(EwCode::kAbsGrad, {0, 1});
    case K::kErfGrad: return m(EwCode::kErfGrad, {0, 1});
    case K::kSinGrad: return m(EwCode::kSinGrad, {0, 1});
    case K::kCosGrad: return m(EwCode::kCosGrad, {0, 1});
    case K::kNegGrad: return m(EwCode::kNeg, {0});             // -dY; a saved input is unused
    case K::kDivGrad: return m(EwCode::kDivGradB, {0, 1, 2});  // (dY, Y, B)
    case K::kMinGrad:                                          // (dY, X_i, Y)
    case K::kMaxGrad: return m(EwCode::kEqualMask, {0, 1, 2});
    case K::kMeanGrad:  // dY / count, as dY * (1 / count): within an ulp
      return m(EwCode::kAffine, {0},
               static_cast<float>(
                   1.0 / static_cast<double>(std::max<int64_t>(op.GetInt("count", 2), 1))));
    default: return std::nullopt;
  }
}

std::optional<kernels::EwCode> EwCodeOf(const graph::Op& op) {
  std::optional<EwMapping> m = EwMappingOf(op);
  if (!m) return std::nullopt;
  return m->code;
}

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
                         costmodel::CpuElementwiseKind(op) || ReshapeLike(op) || ReduceSink(op);
    if (!fusible) {
      return absl::UnimplementedError(
          absl::StrCat("fused CPU kernel: ", internal::OpLabel(op),
                       " has no fused form; run it with MakeCpuKernel"));
    }
  }
  internal::FusedGroup grp;
  ASSIGN_OR_RETURN(grp.members, TopoOrder(g, sorted));
  for (OpId o : grp.members) {
    for (TensorId t : g.op(o).outputs) {
      if (Escapes(g, t, sorted)) grp.escaping.push_back(t);
    }
  }
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
