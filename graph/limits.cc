#include "graph/limits.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/text.h"

namespace braid::graph {
namespace {

// absl 20220623 has its own string_view type: StrCat takes that one.
absl::string_view A(std::string_view v) { return {v.data(), v.size()}; }

absl::Status Bad(std::string_view label, std::string_view attr, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(A(label), ": attribute '", A(attr), "' ", A(why)));
}

const std::vector<int64_t>* IntsAttr(const Attrs& attrs, std::string_view key) {
  auto it = attrs.find(key);
  if (it == attrs.end()) return nullptr;
  return std::get_if<std::vector<int64_t>>(&it->second);
}

const int64_t* IntAttr(const Attrs& attrs, std::string_view key) {
  auto it = attrs.find(key);
  if (it == attrs.end()) return nullptr;
  return std::get_if<int64_t>(&it->second);
}

// Every value of an int or ints attribute within [lo, hi].
absl::Status InRange(const Attrs& attrs, std::string_view key, int64_t lo, int64_t hi,
                     std::string_view label) {
  auto check = [&](int64_t v) -> absl::Status {
    if (v < lo || v > hi) {
      return Bad(label, key, absl::StrCat("must be in [", lo, ", ", hi, "], got ", v));
    }
    return absl::OkStatus();
  };
  if (const int64_t* v = IntAttr(attrs, key)) return check(*v);
  if (const std::vector<int64_t>* vs = IntsAttr(attrs, key)) {
    for (int64_t v : *vs) {
      RETURN_IF_ERROR(check(v));
    }
  }
  return absl::OkStatus();
}

// Convolutions and pools (and braid's gradients of them: ConvGradData,
// MaxPoolGrad, ...), whose ONNX shape inference and cost formulas divide by
// strides and multiply by kernel sizes and dilations.
bool IsWindowOp(OpKind kind) {
  const OpCategory c = CategoryOf(kind);
  if (c == OpCategory::kConv || c == OpCategory::kPool) return true;
  const OpKind forward = IsGradientKind(kind) ? GradOf(kind) : kind;
  return IsOneOf(forward, {OpKind::kGlobalMaxPool, OpKind::kGlobalAveragePool, OpKind::kConvInteger,
                          OpKind::kQLinearConv, OpKind::kDeformConv, OpKind::kMaxUnpool,
                          OpKind::kMaxRoiPool});
}

// Ops whose `axis` indexes their first input's dims, and the largest axis
// (relative to the rank r) ONNX allows: r - 1, or r for Flatten.
bool AxisBound(OpKind kind, int64_t* extra) {
  *extra = kind == OpKind::kFlatten ? 1 : 0;
  return kind == OpKind::kFlatten ||
         IsOneOf(kind, {OpKind::kConcat, OpKind::kSplit, OpKind::kGather, OpKind::kGatherElements,
                        OpKind::kSoftmax, OpKind::kLogSoftmax, OpKind::kHardmax, OpKind::kArgMax,
                        OpKind::kArgMin, OpKind::kLayerNormalization, OpKind::kCompress,
                        OpKind::kScatterElements, OpKind::kConcatFromSequence});
}

// Inputs an op must have, for the op types whose cost formulas and backward
// rules read their second (or third) input. Counted on braid's op, whose
// constant shape-like inputs the importer may have turned into attributes
// (graph/onnx_proto_util.h): none of these types has such an input.
size_t MinInputs(OpKind kind) {
  switch (kind) {
    case OpKind::kEinsum:
      return 1;
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
    case OpKind::kPow:
    case OpKind::kMatMul:
    case OpKind::kGemm:
    case OpKind::kConv:
    case OpKind::kConvTranspose:
    case OpKind::kGather:
    case OpKind::kGatherElements:
    case OpKind::kGatherND:
    case OpKind::kSoftmaxCrossEntropyLoss:
    case OpKind::kNegativeLogLikelihoodLoss:
      return 2;
    case OpKind::kWhere:
      return 3;
    default:
      return 0;
  }
}

// Reduce* ops (and their gradients) and Squeeze, whose `axes` index their
// first input's dims.
bool HasReduceAxes(OpKind kind) {
  return IsOneOf(IsGradientKind(kind) ? GradOf(kind) : kind,
                 {OpKind::kReduceSum, OpKind::kReduceMean, OpKind::kReduceMax, OpKind::kReduceMin,
                  OpKind::kReduceProd, OpKind::kReduceL1, OpKind::kReduceL2,
                  OpKind::kReduceSumSquare, OpKind::kReduceLogSum, OpKind::kReduceLogSumExp,
                  OpKind::kSqueeze});
}

absl::Status CheckShapedAttrs(OpKind kind, const Attrs& attrs,
                              const std::vector<std::vector<int64_t>>& shapes,
                              std::string_view label) {
  if (shapes.empty()) return absl::OkStatus();
  const int64_t rank = static_cast<int64_t>(shapes[0].size());
  int64_t extra = 0;
  if (AxisBound(kind, &extra)) {
    if (const int64_t* axis = IntAttr(attrs, "axis")) {
      if (*axis < -rank || *axis > rank - 1 + extra) {
        return Bad(label, "axis",
                   absl::StrCat("is ", *axis, ", outside [", -rank, ", ", rank - 1 + extra,
                                "] for an input of rank ", rank));
      }
    }
  }
  if (HasReduceAxes(kind)) {
    if (const std::vector<int64_t>* axes = IntsAttr(attrs, "axes")) {
      for (int64_t a : *axes) {
        if (a < -rank || a > rank - 1) {
          return Bad(label, "axes",
                     absl::StrCat("holds ", a, ", outside [", -rank, ", ", rank - 1,
                                  "] for an input of rank ", rank));
        }
      }
    }
  }
  if (kind == OpKind::kTranspose) {
    if (const std::vector<int64_t>* perm = IntsAttr(attrs, "perm")) {
      std::vector<int64_t> sorted = *perm;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> iota(static_cast<size_t>(rank));
      std::iota(iota.begin(), iota.end(), 0);
      if (sorted != iota) {
        return Bad(label, "perm",
                   absl::StrCat("[", absl::StrJoin(*perm, ","), "] is not a permutation of 0..",
                                rank - 1, " (input rank ", rank, ")"));
      }
    }
  }
  if (kind == OpKind::kSplit) {
    if (const std::vector<int64_t>* split = IntsAttr(attrs, "split")) {
      const int64_t* a = IntAttr(attrs, "axis");
      int64_t axis = a != nullptr ? *a : 0;
      if (axis < 0) axis += rank;
      if (axis < 0 || axis >= rank) return Bad(label, "axis", "is outside the input's rank");
      int64_t sum = 0;
      for (int64_t v : *split) {
        if (v < 0 || v > kMaxDim) {
          return Bad(label, "split", absl::StrCat("holds ", v, ": sizes must be in [0, ", kMaxDim, "]"));
        }
        sum += v;
      }
      if (sum != shapes[0][static_cast<size_t>(axis)]) {
        return Bad(label, "split",
                   absl::StrCat("[", absl::StrJoin(*split, ","), "] sums to ", sum,
                                ", but the input's dim ", axis, " is ",
                                shapes[0][static_cast<size_t>(axis)]));
      }
    }
  }
  if (kind == OpKind::kConcat) {
    for (size_t i = 1; i < shapes.size(); ++i) {
      if (static_cast<int64_t>(shapes[i].size()) != rank) {
        return absl::InvalidArgumentError(absl::StrCat(A(label), ": Concat input ", i, " has rank ",
                                                       shapes[i].size(), ", input 0 has rank ",
                                                       rank));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDims(const std::vector<int64_t>& dims, std::string_view what) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(A(what), " has a negative dimension: ", ShapeString(dims)));
    }
    if (d > kMaxDim) {
      return absl::InvalidArgumentError(absl::StrCat(A(what), ": dimension ", d, " in ",
                                                     ShapeString(dims), " is outside [0, 2^32]"));
    }
    if (d != 0 && n > kMaxTensorElements / d) {
      return absl::InvalidArgumentError(absl::StrCat(
          A(what), ": shape ", ShapeString(dims), " has more than 2^40 elements"));
    }
    n *= d;
  }
  return absl::OkStatus();
}

absl::Status CheckOpAttrs(std::string_view type, const Attrs& attrs,
                          const std::vector<std::vector<int64_t>>* input_shapes,
                          std::string_view label) {
  return CheckOpAttrs(OpKindFromName(type), attrs, input_shapes, label);
}

absl::Status CheckOpAttrs(OpKind kind, const Attrs& attrs,
                          const std::vector<std::vector<int64_t>>* input_shapes,
                          std::string_view label) {
  if (IsWindowOp(kind)) {
    for (std::string_view key : {"strides", "dilations", "kernel_shape", "group"}) {
      RETURN_IF_ERROR(InRange(attrs, key, 1, kMaxDim, label));
    }
    for (std::string_view key : {"pads", "output_padding", "output_shape"}) {
      RETURN_IF_ERROR(InRange(attrs, key, 0, kMaxDim, label));
    }
  }
  if (kind == OpKind::kTranspose) {
    RETURN_IF_ERROR(InRange(attrs, "perm", 0, 4096, label));
  }
  if (kind == OpKind::kSpaceToDepth || kind == OpKind::kDepthToSpace) {
    RETURN_IF_ERROR(InRange(attrs, "blocksize", 1, kMaxDim, label));
  }
  if (kind == OpKind::kSplit) {
    RETURN_IF_ERROR(InRange(attrs, "split", 0, kMaxDim, label));
  }
  if (input_shapes != nullptr) return CheckShapedAttrs(kind, attrs, *input_shapes, label);
  return absl::OkStatus();
}

absl::Status CheckGraphLimits(const Graph& g) {
  auto check_name = [](std::string_view name, std::string_view what) -> absl::Status {
    if (name.size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(A(what), " '",
                                                     base::EscapeForDisplay(name.substr(0, 64)),
                                                     "...' is longer than ", kMaxNameBytes,
                                                     " bytes"));
    }
    if (!base::IsValidUtf8(name)) {
      return absl::InvalidArgumentError(absl::StrCat(A(what), " '", base::EscapeForDisplay(name),
                                                     "' is not valid UTF-8"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check_name(g.name(), "graph name"));
  for (const Tensor& t : g.tensors()) {
    RETURN_IF_ERROR(check_name(t.name, "tensor name"));
    RETURN_IF_ERROR(CheckDims(t.shape, absl::StrCat("tensor '", t.name, "'")));
  }
  std::vector<std::vector<int64_t>> shapes;
  for (const Op& op : g.ops()) {
    RETURN_IF_ERROR(check_name(op.name, "op name"));
    RETURN_IF_ERROR(check_name(op.type, "op type"));
    shapes.clear();
    bool ids_ok = true;
    for (TensorId t : op.inputs) {
      if (t < 0 || t >= g.num_tensors()) {
        ids_ok = false;
        break;
      }
      shapes.push_back(g.tensor(t).shape);
    }
    const std::string label = absl::StrCat("op '", op.name, "' (", op.type, ")");
    if (op.inputs.size() < MinInputs(op.kind)) {
      return absl::InvalidArgumentError(absl::StrCat(label, " has ", op.inputs.size(),
                                                     " inputs; it needs at least ",
                                                     MinInputs(op.kind)));
    }
    for (const auto& [key, value] : op.attrs) {
      RETURN_IF_ERROR(check_name(key, absl::StrCat(label, " attribute name")));
      if (const std::string* str = std::get_if<std::string>(&value);
          str != nullptr && !base::IsValidUtf8(*str)) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": attribute '", key, "' is a string that is not valid UTF-8"));
      }
    }
    RETURN_IF_ERROR(CheckOpAttrs(op.kind, op.attrs, ids_ok ? &shapes : nullptr, label));
    if (!std::isfinite(op.flops) || op.flops < 0 || op.bytes_read < 0 || op.bytes_written < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: cost annotation out of range (flops %g, bytes read %d, written %d)", label,
          op.flops, op.bytes_read, op.bytes_written));
    }
  }
  return absl::OkStatus();
}

}  // namespace braid::graph
