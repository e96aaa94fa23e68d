#include "graph/limits.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

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
      if (absl::Status s = check(v); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// Convolutions and pools (and braid's gradients of them: ConvGradData,
// MaxPoolGrad, ...), whose ONNX shape inference and cost formulas divide by
// strides and multiply by kernel sizes and dilations.
bool IsWindowOp(std::string_view type) {
  for (std::string_view p : {"Conv", "QLinearConv", "DeformConv", "MaxPool", "AveragePool",
                             "LpPool", "MaxUnpool", "MaxRoiPool", "GlobalMaxPool",
                             "GlobalAveragePool"}) {
    if (type.substr(0, p.size()) == p) return true;
  }
  return false;
}

// Ops whose `axis` indexes their first input's dims, and the largest axis
// (relative to the rank r) ONNX allows: r - 1, or r for Flatten.
bool AxisBound(std::string_view type, int64_t* extra) {
  *extra = 0;
  if (type == "Flatten") {
    *extra = 1;
    return true;
  }
  for (std::string_view t : {"Concat", "Split", "Gather", "GatherElements", "Softmax",
                             "LogSoftmax", "Hardmax", "ArgMax", "ArgMin", "LayerNormalization",
                             "Compress", "ScatterElements", "ConcatFromSequence"}) {
    if (type == t) return true;
  }
  return false;
}

// Inputs an op must have, for the op types whose cost formulas and backward
// rules read their second (or third) input. Counted on braid's op, whose
// constant shape-like inputs the importer may have turned into attributes
// (graph/onnx_proto_util.h): none of these types has such an input.
size_t MinInputs(std::string_view type) {
  for (std::string_view t : {"Sub", "Mul", "Div", "Pow", "MatMul", "Gemm", "Conv",
                             "ConvTranspose", "Gather", "GatherElements", "GatherND",
                             "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "Einsum"}) {
    if (type == t) return t == "Einsum" ? 1 : 2;
  }
  if (type == "Where") return 3;
  return 0;
}

bool HasReduceAxes(std::string_view type) {
  return type.substr(0, 6) == "Reduce" || type == "Squeeze";
}

absl::Status CheckShapedAttrs(std::string_view type, const Attrs& attrs,
                              const std::vector<std::vector<int64_t>>& shapes,
                              std::string_view label) {
  if (shapes.empty()) return absl::OkStatus();
  const int64_t rank = static_cast<int64_t>(shapes[0].size());
  int64_t extra = 0;
  if (AxisBound(type, &extra)) {
    if (const int64_t* axis = IntAttr(attrs, "axis")) {
      if (*axis < -rank || *axis > rank - 1 + extra) {
        return Bad(label, "axis",
                   absl::StrCat("is ", *axis, ", outside [", -rank, ", ", rank - 1 + extra,
                                "] for an input of rank ", rank));
      }
    }
  }
  if (HasReduceAxes(type)) {
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
  if (type == "Transpose") {
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
  if (type == "Split") {
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
  if (type == "Concat") {
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
  if (IsWindowOp(type)) {
    for (std::string_view key : {"strides", "dilations", "kernel_shape", "group"}) {
      if (absl::Status s = InRange(attrs, key, 1, kMaxDim, label); !s.ok()) return s;
    }
    for (std::string_view key : {"pads", "output_padding", "output_shape"}) {
      if (absl::Status s = InRange(attrs, key, 0, kMaxDim, label); !s.ok()) return s;
    }
  }
  if (type == "Transpose") {
    if (absl::Status s = InRange(attrs, "perm", 0, 4096, label); !s.ok()) return s;
  }
  if (type == "SpaceToDepth" || type == "DepthToSpace") {
    if (absl::Status s = InRange(attrs, "blocksize", 1, kMaxDim, label); !s.ok()) return s;
  }
  if (type == "Split") {
    if (absl::Status s = InRange(attrs, "split", 0, kMaxDim, label); !s.ok()) return s;
  }
  if (input_shapes != nullptr) return CheckShapedAttrs(type, attrs, *input_shapes, label);
  return absl::OkStatus();
}

absl::Status CheckGraphLimits(const Graph& g) {
  auto check_name = [](std::string_view name, std::string_view what) -> absl::Status {
    if (name.size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(A(what), " '", EscapeForDisplay(name.substr(0, 64)),
                                                     "...' is longer than ", kMaxNameBytes,
                                                     " bytes"));
    }
    if (!IsValidUtf8(name)) {
      return absl::InvalidArgumentError(absl::StrCat(A(what), " '", EscapeForDisplay(name),
                                                     "' is not valid UTF-8"));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = check_name(g.name(), "graph name"); !s.ok()) return s;
  for (const Tensor& t : g.tensors()) {
    if (absl::Status s = check_name(t.name, "tensor name"); !s.ok()) return s;
    if (absl::Status s = CheckDims(t.shape, absl::StrCat("tensor '", t.name, "'")); !s.ok()) {
      return s;
    }
  }
  std::vector<std::vector<int64_t>> shapes;
  for (const Op& op : g.ops()) {
    if (absl::Status s = check_name(op.name, "op name"); !s.ok()) return s;
    if (absl::Status s = check_name(op.type, "op type"); !s.ok()) return s;
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
    if (op.inputs.size() < MinInputs(op.type)) {
      return absl::InvalidArgumentError(absl::StrCat(label, " has ", op.inputs.size(),
                                                     " inputs; it needs at least ",
                                                     MinInputs(op.type)));
    }
    for (const auto& [key, value] : op.attrs) {
      if (absl::Status s = check_name(key, absl::StrCat(label, " attribute name")); !s.ok()) {
        return s;
      }
      if (const std::string* str = std::get_if<std::string>(&value); str != nullptr && !IsValidUtf8(*str)) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": attribute '", key, "' is a string that is not valid UTF-8"));
      }
    }
    if (absl::Status s = CheckOpAttrs(op.type, op.attrs, ids_ok ? &shapes : nullptr, label);
        !s.ok()) {
      return s;
    }
    if (!std::isfinite(op.flops) || op.flops < 0 || op.bytes_read < 0 || op.bytes_written < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: cost annotation out of range (flops %g, bytes read %d, written %d)", label,
          op.flops, op.bytes_read, op.bytes_written));
    }
  }
  return absl::OkStatus();
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string EscapeForDisplay(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\\\";
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7F) {
      out += absl::StrFormat("\\x%02x", c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A multi-byte sequence: keep it when it is valid and not a C1 control.
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len != 0 && i + len <= s.size() && IsValidUtf8(s.substr(i, len))) {
      const bool c1 = len == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0;
      if (!c1) {
        out.append(s.substr(i, len));
        i += len;
        continue;
      }
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(s[i + 1]));
      i += len;
      continue;
    }
    out += absl::StrFormat("\\x%02x", c);
    ++i;
  }
  return out;
}

}  // namespace braid::graph
