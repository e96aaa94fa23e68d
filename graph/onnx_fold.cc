#include "graph/onnx_fold.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace braid::graph {
namespace {

using Folded = absl::StatusOr<std::optional<ConstValue>>;

// Saturates at INT64_MAX so absurd dims read as "too large to fold".
int64_t Product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return INT64_MAX;
    if (d != 0 && n > INT64_MAX / d) return INT64_MAX;
    n *= d;
  }
  return n;
}

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

absl::Status Bad(std::string_view type, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(type), ": ", std::string(what)));
}

absl::StatusOr<int64_t> NormAxis(std::string_view type, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) {
    return Bad(type, absl::StrCat("axis ", axis, " out of range for rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

// out[k] = src[index[k]].
ConstValue Pick(const ConstValue& src, std::vector<int64_t> dims,
                const std::vector<int64_t>& index) {
  ConstValue out;
  out.elem_type = src.elem_type;
  out.dims = std::move(dims);
  if (src.IsFloat()) {
    out.floats.reserve(index.size());
    for (int64_t i : index) out.floats.push_back(src.floats[i]);
  } else {
    out.ints.reserve(index.size());
    for (int64_t i : index) out.ints.push_back(src.ints[i]);
  }
  return out;
}

// For every element of `out` (row-major), the offset of the element of a
// tensor of shape `in` that numpy broadcasting reads.
std::vector<int64_t> BroadcastIndex(const std::vector<int64_t>& out, const std::vector<int64_t>& in) {
  const int64_t n = Product(out);
  const size_t lead = out.size() - in.size();
  const std::vector<int64_t> in_strides = Strides(in);
  std::vector<int64_t> index(n);
  std::vector<int64_t> pos(out.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = 0;
    for (size_t d = 0; d < in.size(); ++d) {
      if (in[d] != 1) off += pos[lead + d] * in_strides[d];
    }
    index[k] = off;
    for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
      if (++pos[d] < out[d]) break;
      pos[d] = 0;
    }
  }
  return index;
}

absl::StatusOr<std::vector<int64_t>> BroadcastDims(std::string_view type,
                                                   std::vector<const ConstValue*> ins) {
  size_t rank = 0;
  for (const ConstValue* v : ins) rank = std::max(rank, v->dims.size());
  std::vector<int64_t> out(rank, 1);
  for (const ConstValue* v : ins) {
    const size_t lead = rank - v->dims.size();
    for (size_t d = 0; d < v->dims.size(); ++d) {
      const int64_t a = out[lead + d], b = v->dims[d];
      if (a == b || b == 1) continue;
      if (a != 1) return Bad(type, absl::StrCat("cannot broadcast ", ShapeString(v->dims)));
      out[lead + d] = b;
    }
  }
  return out;
}

ConstValue Convert(const ConstValue& v, int32_t to) {
  ConstValue out;
  out.elem_type = to;
  out.dims = v.dims;
  const int64_t n = v.NumElements();
  if (IsOnnxFloatType(to)) {
    for (int64_t i = 0; i < n; ++i) out.floats.push_back(v.AsDouble(i));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t x = v.AsInt(i);
      out.ints.push_back(to == kOnnxBool ? (v.AsDouble(i) != 0 ? 1 : 0) : x);
    }
  }
  return out;
}

const std::set<std::string, std::less<>>& ComparisonTypes() {
  static const auto* s = new std::set<std::string, std::less<>>{
      "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"};
  return *s;
}

// Binary pointwise ops; std::nullopt when not defined (integer division by 0).
std::optional<double> ApplyBinary(std::string_view t, double a, double b, bool is_float,
                                  int64_t fmod) {
  if (t == "Add" || t == "Sum") return a + b;
  if (t == "Sub") return a - b;
  if (t == "Mul") return a * b;
  if (t == "Div") {
    if (is_float) return a / b;
    if (b == 0) return std::nullopt;
    // INT64_MIN / -1 traps (SIGFPE) in integer arithmetic.
    if (b == -1) return -a;
    return static_cast<double>(static_cast<int64_t>(a) / static_cast<int64_t>(b));
  }
  if (t == "Mod") {
    if (b == 0) return std::nullopt;
    if (is_float || fmod != 0) return std::fmod(a, b);
    if (b == -1 || b == 1) return 0.0;  // INT64_MIN % -1 traps
    int64_t r = static_cast<int64_t>(a) % static_cast<int64_t>(b);
    if (r != 0 && ((r < 0) != (b < 0))) r += static_cast<int64_t>(b);
    return static_cast<double>(r);
  }
  if (t == "Pow") return std::pow(a, b);
  if (t == "Max") return std::max(a, b);
  if (t == "Min") return std::min(a, b);
  if (t == "Equal") return a == b;
  if (t == "Less") return a < b;
  if (t == "Greater") return a > b;
  if (t == "LessOrEqual") return a <= b;
  if (t == "GreaterOrEqual") return a >= b;
  if (t == "And") return (a != 0) && (b != 0);
  if (t == "Or") return (a != 0) || (b != 0);
  if (t == "Xor") return (a != 0) != (b != 0);
  return std::nullopt;
}

std::optional<double> ApplyUnary(std::string_view t, double a) {
  if (t == "Neg") return -a;
  if (t == "Abs") return std::fabs(a);
  if (t == "Sqrt") return std::sqrt(a);
  if (t == "Floor") return std::floor(a);
  if (t == "Ceil") return std::ceil(a);
  if (t == "Reciprocal") return 1.0 / a;
  if (t == "Not") return a == 0 ? 1.0 : 0.0;
  if (t == "Exp") return std::exp(a);
  if (t == "Relu") return std::max(a, 0.0);
  return std::nullopt;
}

ConstValue Store(int32_t elem_type, std::vector<int64_t> dims, const std::vector<double>& v) {
  ConstValue out;
  out.elem_type = elem_type;
  out.dims = std::move(dims);
  if (out.IsFloat()) {
    out.floats = v;
  } else {
    out.ints.reserve(v.size());
    for (double x : v) out.ints.push_back(static_cast<int64_t>(x));
  }
  return out;
}

Folded FoldPointwise(std::string_view type, const Attrs& attrs,
                     const std::vector<const ConstValue*>& in, int64_t max_elements) {
  if (in.size() == 1) {
    const ConstValue& a = *in[0];
    std::vector<double> v(a.NumElements());
    for (int64_t i = 0; i < a.NumElements(); ++i) {
      std::optional<double> r = ApplyUnary(type, a.AsDouble(i));
      if (!r) return std::nullopt;
      v[i] = *r;
    }
    return Store(a.elem_type, a.dims, v);
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, BroadcastDims(type, in));
  if (Product(dims) > max_elements) return std::nullopt;
  const bool is_float = in[0]->IsFloat();
  auto it = attrs.find("fmod");
  const int64_t fmod = it != attrs.end() && std::holds_alternative<int64_t>(it->second)
                           ? std::get<int64_t>(it->second)
                           : 0;
  std::vector<int64_t> ia = BroadcastIndex(dims, in[0]->dims);
  std::vector<double> acc(ia.size());
  for (size_t k = 0; k < ia.size(); ++k) acc[k] = in[0]->AsDouble(ia[k]);
  for (size_t j = 1; j < in.size(); ++j) {
    std::vector<int64_t> ib = BroadcastIndex(dims, in[j]->dims);
    for (size_t k = 0; k < ib.size(); ++k) {
      std::optional<double> r = ApplyBinary(type, acc[k], in[j]->AsDouble(ib[k]), is_float, fmod);
      if (!r) return std::nullopt;
      acc[k] = *r;
    }
  }
  const int32_t out_type = ComparisonTypes().count(type) ? kOnnxBool : in[0]->elem_type;
  return Store(out_type, std::move(dims), acc);
}

Folded FoldWhere(const std::vector<const ConstValue*>& in, int64_t max_elements) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, BroadcastDims("Where", in));
  if (Product(dims) > max_elements) return std::nullopt;
  std::vector<int64_t> ic = BroadcastIndex(dims, in[0]->dims);
  std::vector<int64_t> ix = BroadcastIndex(dims, in[1]->dims);
  std::vector<int64_t> iy = BroadcastIndex(dims, in[2]->dims);
  std::vector<double> v(ic.size());
  for (size_t k = 0; k < ic.size(); ++k) {
    v[k] = in[0]->AsDouble(ic[k]) != 0 ? in[1]->AsDouble(ix[k]) : in[2]->AsDouble(iy[k]);
  }
  // Where's x and y share one type; keep ints exact by picking from them.
  if (!in[1]->IsFloat()) {
    ConstValue out;
    out.elem_type = in[1]->elem_type;
    out.dims = dims;
    for (size_t k = 0; k < ic.size(); ++k) {
      out.ints.push_back(in[0]->AsDouble(ic[k]) != 0 ? in[1]->ints[ix[k]] : in[2]->ints[iy[k]]);
    }
    return out;
  }
  return Store(in[1]->elem_type, std::move(dims), v);
}

// Reshape semantics: 0 copies the input dim (unless allowzero), -1 is inferred.
absl::StatusOr<std::vector<int64_t>> ReshapeDims(const std::vector<int64_t>& in,
                                                 const std::vector<int64_t>& shape,
                                                 bool allowzero) {
  std::vector<int64_t> out = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0 && !allowzero) {
      if (i >= in.size()) return Bad("Reshape", "0 in shape past the input rank");
      out[i] = in[i];
    }
    if (out[i] == -1) {
      if (infer >= 0) return Bad("Reshape", "more than one -1 in shape");
      infer = static_cast<int>(i);
      continue;
    }
    if (out[i] < 0) return Bad("Reshape", absl::StrCat("negative dim ", out[i]));
    known *= out[i];
  }
  const int64_t total = Product(in);
  if (infer >= 0) {
    if (known == 0 || total % known != 0) return Bad("Reshape", "cannot infer -1");
    out[infer] = total / known;
  } else if (known != total) {
    return Bad("Reshape", absl::StrCat("shape ", ShapeString(out), " does not match ", total,
                                       " elements"));
  }
  return out;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

int64_t IntAttr(const Attrs& attrs, std::string_view key, int64_t def) {
  auto it = attrs.find(key);
  if (it == attrs.end() || !std::holds_alternative<int64_t>(it->second)) return def;
  return std::get<int64_t>(it->second);
}

std::optional<std::vector<int64_t>> IntsAttr(const Attrs& attrs, std::string_view key) {
  auto it = attrs.find(key);
  if (it == attrs.end() || !std::holds_alternative<std::vector<int64_t>>(it->second)) {
    return std::nullopt;
  }
  return std::get<std::vector<int64_t>>(it->second);
}

// Generic gather along `axis` with integer `indices` (negative wrap).
Folded FoldGather(const ConstValue& data, const ConstValue& indices, int64_t axis_attr,
                  int64_t max_elements) {
  const int64_t rank = static_cast<int64_t>(data.dims.size());
  ASSIGN_OR_RETURN(int64_t axis, NormAxis("Gather", axis_attr, rank));
  std::vector<int64_t> out_dims(data.dims.begin(), data.dims.begin() + axis);
  out_dims.insert(out_dims.end(), indices.dims.begin(), indices.dims.end());
  out_dims.insert(out_dims.end(), data.dims.begin() + axis + 1, data.dims.end());
  if (Product(out_dims) > max_elements) return std::nullopt;
  const int64_t outer = Product({data.dims.begin(), data.dims.begin() + axis});
  const int64_t inner = Product({data.dims.begin() + axis + 1, data.dims.end()});
  const int64_t n = data.dims[axis];
  std::vector<int64_t> index;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < indices.NumElements(); ++k) {
      int64_t j = indices.AsInt(k);
      if (j < -n || j >= n) return Bad("Gather", absl::StrCat("index ", j, " out of range"));
      if (j < 0) j += n;
      for (int64_t i = 0; i < inner; ++i) index.push_back((o * n + j) * inner + i);
    }
  }
  return Pick(data, std::move(out_dims), index);
}

Folded FoldConcat(const std::vector<const ConstValue*>& in, int64_t axis_attr,
                  int64_t max_elements) {
  const std::vector<int64_t>& d0 = in[0]->dims;
  ASSIGN_OR_RETURN(int64_t axis, NormAxis("Concat", axis_attr, d0.size()));
  std::vector<int64_t> out_dims = d0;
  out_dims[axis] = 0;
  for (const ConstValue* v : in) {
    if (v->dims.size() != d0.size()) return Bad("Concat", "inputs of different ranks");
    for (size_t d = 0; d < d0.size(); ++d) {
      if (static_cast<int64_t>(d) != axis && v->dims[d] != d0[d]) {
        return Bad("Concat", "inputs differ outside the concat axis");
      }
    }
    out_dims[axis] += v->dims[axis];
  }
  if (Product(out_dims) > max_elements) return std::nullopt;
  const int64_t outer = Product({d0.begin(), d0.begin() + axis});
  ConstValue out;
  out.elem_type = in[0]->elem_type;
  out.dims = out_dims;
  for (int64_t o = 0; o < outer; ++o) {
    for (const ConstValue* v : in) {
      const int64_t chunk = Product({v->dims.begin() + axis, v->dims.end()});
      for (int64_t i = o * chunk; i < (o + 1) * chunk; ++i) {
        if (out.IsFloat()) {
          out.floats.push_back(v->AsDouble(i));
        } else {
          out.ints.push_back(v->AsInt(i));
        }
      }
    }
  }
  return out;
}

Folded FoldSlice(const ConstValue& data, std::vector<int64_t> starts, std::vector<int64_t> ends,
                 std::vector<int64_t> axes, std::vector<int64_t> steps, int64_t max_elements) {
  const int64_t rank = static_cast<int64_t>(data.dims.size());
  if (axes.empty()) axes = Iota(static_cast<int64_t>(starts.size()));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    return Bad("Slice", "starts, ends, axes and steps differ in length");
  }
  std::vector<int64_t> lo(rank, 0), step(rank, 1), count = data.dims;
  for (size_t i = 0; i < starts.size(); ++i) {
    ASSIGN_OR_RETURN(int64_t a, NormAxis("Slice", axes[i], rank));
    const int64_t n = data.dims[a], s = steps[i];
    if (s == 0) return Bad("Slice", "step 0");
    auto clamp = [&](int64_t v, int64_t lo_v, int64_t hi_v) {
      if (v < 0) v += n;
      return std::clamp(v, lo_v, hi_v);
    };
    const int64_t b = s > 0 ? clamp(starts[i], 0, n) : clamp(starts[i], 0, n - 1);
    const int64_t e = s > 0 ? clamp(ends[i], 0, n) : clamp(ends[i], -1, n - 1);
    const int64_t c = s > 0 ? (e > b ? (e - b + s - 1) / s : 0) : (b > e ? (b - e - s - 1) / (-s) : 0);
    lo[a] = b;
    step[a] = s;
    count[a] = c;
  }
  if (Product(count) > max_elements) return std::nullopt;
  const std::vector<int64_t> strides = Strides(data.dims);
  std::vector<int64_t> index;
  std::vector<int64_t> pos(rank, 0);
  const int64_t total = Product(count);
  for (int64_t k = 0; k < total; ++k) {
    int64_t off = 0;
    for (int64_t d = 0; d < rank; ++d) off += (lo[d] + pos[d] * step[d]) * strides[d];
    index.push_back(off);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++pos[d] < count[d]) break;
      pos[d] = 0;
    }
  }
  return Pick(data, count, index);
}

Folded FoldTranspose(const ConstValue& data, std::vector<int64_t> perm, int64_t max_elements) {
  const int64_t rank = static_cast<int64_t>(data.dims.size());
  if (perm.empty()) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != rank) return Bad("Transpose", "perm length != rank");
  if (data.NumElements() > max_elements) return std::nullopt;
  std::vector<int64_t> out_dims(rank);
  std::vector<bool> used(rank, false);
  for (int64_t i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= rank || used[perm[i]]) return Bad("Transpose", "bad perm");
    used[perm[i]] = true;
    out_dims[i] = data.dims[perm[i]];
  }
  const std::vector<int64_t> in_strides = Strides(data.dims);
  std::vector<int64_t> index, pos(rank, 0);
  for (int64_t k = 0; k < data.NumElements(); ++k) {
    int64_t off = 0;
    for (int64_t d = 0; d < rank; ++d) off += pos[d] * in_strides[perm[d]];
    index.push_back(off);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++pos[d] < out_dims[d]) break;
      pos[d] = 0;
    }
  }
  return Pick(data, out_dims, index);
}

Folded FoldTrilu(const ConstValue& data, int64_t k, bool upper) {
  if (data.dims.size() < 2) return Bad("Trilu", "input rank < 2");
  ConstValue out = data;
  const int64_t rows = data.dims[data.dims.size() - 2], cols = data.dims.back();
  for (int64_t i = 0; i < data.NumElements(); ++i) {
    const int64_t r = (i / cols) % rows, c = i % cols;
    const bool keep = upper ? (c - r >= k) : (c - r <= k);
    if (keep) continue;
    if (out.IsFloat()) {
      out.floats[i] = 0;
    } else {
      out.ints[i] = 0;
    }
  }
  return out;
}

Folded FoldRange(const ConstValue& start, const ConstValue& limit, const ConstValue& delta,
                 int64_t max_elements) {
  const double s = start.AsDouble(0), l = limit.AsDouble(0), d = delta.AsDouble(0);
  if (d == 0) return Bad("Range", "delta 0");
  if (!std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d) ||
      std::fabs((l - s) / d) > static_cast<double>(max_elements)) {
    return std::nullopt;
  }
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((l - s) / d)));
  if (n > max_elements) return std::nullopt;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = s + static_cast<double>(i) * d;
  return Store(start.elem_type, {n}, v);
}

Folded FoldUnsqueeze(const ConstValue& data, std::vector<int64_t> axes) {
  const int64_t rank = static_cast<int64_t>(data.dims.size() + axes.size());
  std::vector<bool> inserted(rank, false);
  for (int64_t a : axes) {
    ASSIGN_OR_RETURN(int64_t n, NormAxis("Unsqueeze", a, rank));
    if (inserted[n]) return Bad("Unsqueeze", "repeated axis");
    inserted[n] = true;
  }
  ConstValue out = data;
  out.dims.clear();
  size_t j = 0;
  for (int64_t i = 0; i < rank; ++i) out.dims.push_back(inserted[i] ? 1 : data.dims[j++]);
  return out;
}

Folded FoldSqueeze(const ConstValue& data, const std::vector<int64_t>& axes) {
  const int64_t rank = static_cast<int64_t>(data.dims.size());
  std::vector<bool> drop(rank, false);
  for (int64_t a : axes) {
    ASSIGN_OR_RETURN(int64_t n, NormAxis("Squeeze", a, rank));
    if (data.dims[n] != 1) return Bad("Squeeze", "squeezed dim is not 1");
    drop[n] = true;
  }
  ConstValue out = data;
  out.dims.clear();
  for (int64_t i = 0; i < rank; ++i) {
    if (axes.empty() ? data.dims[i] != 1 : !drop[i]) out.dims.push_back(data.dims[i]);
  }
  return out;
}

}  // namespace

bool IsOnnxFloatType(int32_t t) {
  return t == kOnnxFloat || t == kOnnxFloat16 || t == kOnnxDouble || t == kOnnxBFloat16;
}

bool IsOnnxFoldableType(int32_t t) {
  switch (t) {
    case kOnnxFloat: case kOnnxUint8: case kOnnxInt8: case kOnnxUint16: case kOnnxInt16:
    case kOnnxInt32: case kOnnxInt64: case kOnnxBool: case kOnnxFloat16: case kOnnxDouble:
    case kOnnxUint32: case kOnnxUint64: case kOnnxBFloat16:
      return true;
    default:
      return false;
  }
}

ConstValue ConstValue::Ints(std::vector<int64_t> dims, std::vector<int64_t> values,
                            int32_t elem_type) {
  ConstValue v;
  v.elem_type = elem_type;
  v.dims = std::move(dims);
  v.ints = std::move(values);
  return v;
}

ConstValue ConstValue::Floats(std::vector<int64_t> dims, std::vector<double> values,
                              int32_t elem_type) {
  ConstValue v;
  v.elem_type = elem_type;
  v.dims = std::move(dims);
  v.floats = std::move(values);
  return v;
}

ConstValue ConstValue::Scalar(int32_t elem_type, double value) {
  return Store(elem_type, {}, {value});
}

int64_t ConstValue::NumElements() const { return Product(dims); }

std::vector<int64_t> ConstValue::ToInts() const {
  std::vector<int64_t> v(NumElements());
  for (int64_t i = 0; i < NumElements(); ++i) v[i] = AsInt(i);
  return v;
}

bool IsFoldableOpType(std::string_view type) {
  static const auto* s = new std::set<std::string, std::less<>>{
      "Add", "Sub", "Mul", "Div", "Mod", "Pow", "Max", "Min", "Sum", "Equal", "Less", "Greater",
      "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Neg", "Abs", "Sqrt", "Floor", "Ceil",
      "Reciprocal", "Not", "Exp", "Relu", "Where", "Cast", "Reshape", "Flatten", "Squeeze",
      "Unsqueeze", "Concat", "Gather", "Slice", "Expand", "Transpose", "Trilu", "Range"};
  return s->count(type) != 0;
}

absl::StatusOr<std::optional<ConstValue>> FillConst(const std::vector<int64_t>& dims,
                                                    const ConstValue& value,
                                                    int64_t max_elements) {
  for (int64_t d : dims) {
    if (d < 0) return Bad("ConstantOfShape", absl::StrCat("negative dim ", d));
  }
  if (Product(dims) > max_elements) return std::nullopt;
  if (value.NumElements() != 1) return Bad("ConstantOfShape", "value must have one element");
  return Pick(value, dims, std::vector<int64_t>(Product(dims), 0));
}

absl::StatusOr<std::optional<ConstValue>> FoldOp(std::string_view type, const Attrs& attrs,
                                                 int opset,
                                                 const std::vector<const ConstValue*>& in,
                                                 int64_t max_elements) {
  if (!IsFoldableOpType(type) || in.empty() || in[0] == nullptr) return std::nullopt;
  for (const ConstValue* v : in) {
    if (v != nullptr && (!IsOnnxFoldableType(v->elem_type) ||
                         v->NumElements() != static_cast<int64_t>(v->IsFloat() ? v->floats.size()
                                                                               : v->ints.size()))) {
      return std::nullopt;
    }
  }
  auto input = [&](size_t i) -> const ConstValue* { return i < in.size() ? in[i] : nullptr; };
  auto ints_of = [&](size_t i) {
    return input(i) ? input(i)->ToInts() : std::vector<int64_t>{};
  };
  const ConstValue& x = *in[0];
  if (type == "Where") {
    if (in.size() != 3 || !in[1] || !in[2]) return Bad(type, "needs 3 inputs");
    if (in[1]->IsFloat() != in[2]->IsFloat()) return Bad(type, "X and Y differ in type");
    return FoldWhere(in, max_elements);
  }
  if (type == "Cast") {
    const int64_t to = IntAttr(attrs, "to", 0);
    if (!IsOnnxFoldableType(static_cast<int32_t>(to))) return std::nullopt;
    return Convert(x, static_cast<int32_t>(to));
  }
  if (type == "Reshape") {
    if (!input(1)) return Bad(type, "missing shape");
    ASSIGN_OR_RETURN(std::vector<int64_t> d,
                     ReshapeDims(x.dims, ints_of(1), IntAttr(attrs, "allowzero", 0) != 0));
    ConstValue out = x;
    out.dims = std::move(d);
    return out;
  }
  if (type == "Flatten") {
    ASSIGN_OR_RETURN(int64_t axis, NormAxis(type, IntAttr(attrs, "axis", 1),
                                            static_cast<int64_t>(x.dims.size()) + 1));
    ConstValue out = x;
    out.dims = {Product({x.dims.begin(), x.dims.begin() + axis}),
                Product({x.dims.begin() + axis, x.dims.end()})};
    return out;
  }
  if (type == "Unsqueeze" || type == "Squeeze") {
    std::vector<int64_t> axes =
        opset >= 13 ? ints_of(1) : IntsAttr(attrs, "axes").value_or(std::vector<int64_t>{});
    return type == "Unsqueeze" ? FoldUnsqueeze(x, std::move(axes)) : FoldSqueeze(x, axes);
  }
  if (type == "Concat") {
    for (const ConstValue* v : in) {
      if (v == nullptr) return Bad(type, "omitted input");
    }
    return FoldConcat(in, IntAttr(attrs, "axis", 0), max_elements);
  }
  if (type == "Gather") {
    if (!input(1)) return Bad(type, "missing indices");
    return FoldGather(x, *in[1], IntAttr(attrs, "axis", 0), max_elements);
  }
  if (type == "Slice") {
    if (opset < 10) {
      return FoldSlice(x, IntsAttr(attrs, "starts").value_or(std::vector<int64_t>{}),
                       IntsAttr(attrs, "ends").value_or(std::vector<int64_t>{}),
                       IntsAttr(attrs, "axes").value_or(std::vector<int64_t>{}), {},
                       max_elements);
    }
    return FoldSlice(x, ints_of(1), ints_of(2), ints_of(3), ints_of(4), max_elements);
  }
  if (type == "Expand") {
    if (!input(1)) return Bad(type, "missing shape");
    ConstValue shape = ConstValue::Ints({}, {});
    shape.dims = ints_of(1);
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, BroadcastDims(type, {&x, &shape}));
    if (Product(dims) > max_elements) return std::nullopt;
    return Pick(x, dims, BroadcastIndex(dims, x.dims));
  }
  if (type == "Transpose") {
    return FoldTranspose(x, IntsAttr(attrs, "perm").value_or(std::vector<int64_t>{}),
                         max_elements);
  }
  if (type == "Trilu") {
    if (input(1) && input(1)->NumElements() != 1) return Bad(type, "k must be a scalar");
    const int64_t k = input(1) ? input(1)->AsInt(0) : 0;
    return FoldTrilu(x, k, IntAttr(attrs, "upper", 1) != 0);
  }
  if (type == "Range") {
    if (!input(1) || !input(2)) return Bad(type, "needs 3 inputs");
    if (x.NumElements() != 1 || in[1]->NumElements() != 1 || in[2]->NumElements() != 1) {
      return Bad(type, "start, limit and delta must be scalars");
    }
    return FoldRange(x, *in[1], *in[2], max_elements);
  }
  for (const ConstValue* v : in) {
    if (v == nullptr) return std::nullopt;
  }
  return FoldPointwise(type, attrs, in, max_elements);
}

}  // namespace braid::graph
