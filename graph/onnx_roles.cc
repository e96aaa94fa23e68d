#include "graph/onnx_roles.h"

#include <deque>
#include <set>
#include <string>
#include <vector>

namespace braid::graph {
namespace {

bool IsFloat(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64;
}

// Ops that reshape or replicate one tensor without mixing in another.
bool IsTransparent(OpKind kind) {
  return IsOneOf(kind, {OpKind::kExpand, OpKind::kReshape, OpKind::kTranspose,
                        OpKind::kUnsqueeze, OpKind::kSqueeze, OpKind::kCast, OpKind::kFlatten,
                        OpKind::kTile, OpKind::kIdentity});
}

// Ops through which a parameter meets the activations it scales or shifts.
bool IsCombining(OpKind kind) {
  return IsOneOf(kind, {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kConcat,
                        OpKind::kWhere, OpKind::kSum, OpKind::kMax, OpKind::kMin});
}

// `src` and every tensor made from it by transparent ops alone.
std::set<TensorId> TransparentCopies(const Graph& g, TensorId src) {
  std::set<TensorId> copies = {src};
  std::vector<TensorId> frontier = {src};
  while (!frontier.empty()) {
    const TensorId t = frontier.back();
    frontier.pop_back();
    for (OpId o : g.tensor(t).consumers) {
      const Op& op = g.op(o);
      if (!IsTransparent(op.kind) || op.inputs[0] != t) continue;
      for (TensorId out : op.outputs) {
        if (copies.insert(out).second) frontier.push_back(out);
      }
    }
  }
  return copies;
}

}  // namespace

SourceUse UseOfInput(OpKind kind, int slot, bool indices_are_integer) {
  switch (kind) {
    case OpKind::kConv:
    case OpKind::kConvTranspose:
    case OpKind::kGemm:
    case OpKind::kMatMul:
    case OpKind::kLayerNormalization:
    case OpKind::kInstanceNormalization:
    case OpKind::kGroupNormalization:
    case OpKind::kPRelu:
      return slot == 0 ? SourceUse::kData : SourceUse::kWeight;
    case OpKind::kLSTM:
    case OpKind::kGRU:
    case OpKind::kRNN:
      if (slot == 0) return SourceUse::kData;
      if (slot <= 3) return SourceUse::kWeight;
      return SourceUse::kNone;  // sequence_lens, initial states
    case OpKind::kBatchNormalization:
      if (slot == 0) return SourceUse::kData;
      return slot <= 2 ? SourceUse::kWeight : SourceUse::kConstant;
    case OpKind::kGather:
      if (slot == 1) return SourceUse::kData;
      return indices_are_integer ? SourceUse::kWeight : SourceUse::kNone;
    default:
      return SourceUse::kNone;
  }
}

void RoleEvidence::AddSource(TensorId t, bool initializer) {
  sources_[t].initializer = initializer;
}

void RoleEvidence::RecordUse(TensorId t, std::string_view type, int slot,
                             bool indices_are_integer) {
  const SourceUse use = UseOfInput(OpKindFromName(type), slot, indices_are_integer);
  if (use != SourceUse::kNone) uses_[t].insert(use);
}

void RoleEvidence::AssignRoles(Graph& g) const {
  // A source's evidence includes the uses of its transparent copies (a weight
  // transposed before MatMul in a training-mode export).
  std::map<TensorId, Source> sources = sources_;
  for (auto& [src, s] : sources) {
    for (TensorId t : TransparentCopies(g, src)) {
      auto it = uses_.find(t);
      if (it == uses_.end()) continue;
      s.weight |= it->second.count(SourceUse::kWeight) != 0;
      s.constant |= it->second.count(SourceUse::kConstant) != 0;
      s.data |= it->second.count(SourceUse::kData) != 0;
    }
  }
  // Values computed from data inputs: forward closure of the sources used as
  // data (and of integer graph inputs such as token ids).
  std::vector<bool> tainted(g.num_tensors(), false);
  std::deque<TensorId> work;
  auto taint = [&](TensorId t) {
    if (!tainted[t]) {
      tainted[t] = true;
      work.push_back(t);
    }
  };
  for (const auto& [t, s] : sources) {
    if (s.data && !s.weight) taint(t);
    if (!s.initializer && !IsFloat(g.tensor(t).dtype)) taint(t);
  }
  if (work.empty()) {  // no evidence at all: the first graph input read by an op is the data
    for (const auto& [t, s] : sources) {
      if (!s.initializer) {
        taint(t);
        break;
      }
    }
  }
  while (!work.empty()) {
    const TensorId t = work.front();
    work.pop_front();
    for (OpId o : g.tensor(t).consumers) {
      for (TensorId out : g.op(o).outputs) taint(out);
    }
  }

  // A source with no telling use is a parameter when it (or a transparent copy
  // of it) is combined with a tainted value.
  auto combined_with_data = [&](TensorId src) {
    const std::set<TensorId> copies = TransparentCopies(g, src);
    for (TensorId t : copies) {
      for (OpId o : g.tensor(t).consumers) {
        const Op& op = g.op(o);
        if (!IsCombining(op.kind)) continue;
        for (TensorId other : op.inputs) {
          if (copies.count(other) == 0 && tainted[other]) return true;
        }
      }
    }
    return false;
  };

  for (const auto& [t, s] : sources) {
    Tensor& tensor = g.mutable_tensor(t);
    const TensorRole fallback = s.initializer ? TensorRole::kConstant : TensorRole::kInput;
    if (!IsFloat(tensor.dtype)) {
      tensor.role = fallback;
    } else if (s.weight) {
      tensor.role = TensorRole::kParameter;
    } else if (s.constant) {
      tensor.role = TensorRole::kConstant;
    } else if (s.data) {
      tensor.role = TensorRole::kInput;
    } else if (tensor.NumElements() > 1 && combined_with_data(t)) {
      tensor.role = TensorRole::kParameter;
    } else {
      tensor.role = fallback;
    }
  }
}

}  // namespace braid::graph
