#include "graph/parallel_shape.h"

#include <charconv>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace braid::graph {
namespace {

// This Abseil's string_view is not std::string_view.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::StatusOr<int64_t> ParseInt(std::string_view text, std::string_view what,
                                 std::string_view whole) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("parallel shape '", AV(whole), "': bad ",
                                                   AV(what), " '", AV(text), "'"));
  }
  return v;
}

absl::StatusOr<int> ParseDegree(std::string_view text, std::string_view what,
                                std::string_view whole) {
  ASSIGN_OR_RETURN(int64_t v, ParseInt(text, what, whole));
  if (v < 1 || v > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("parallel shape '", AV(whole), "': ", AV(what), " ",
                                                   v, " is not in [1, 2^31)"));
  }
  return static_cast<int>(v);
}

absl::StatusOr<int64_t> BytesOf(const std::vector<int64_t>& shape, DType dtype) {
  int64_t n = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel shape ", ShapeString(shape), ": byte count overflows int64"));
    }
  }
  return n;
}

}  // namespace

ParallelTensorShape UnpartitionedShape(const std::vector<int64_t>& shape, DType dtype) {
  ParallelTensorShape s;
  s.dtype = dtype;
  for (int64_t d : shape) s.dims.push_back({d, 1});
  return s;
}

absl::Status ValidateParallelShape(const ParallelTensorShape& s) {
  if (s.replica_degree < 1) {
    return absl::InvalidArgumentError(absl::StrCat("parallel shape ", ParallelShapeString(s),
                                                   ": replica degree ", s.replica_degree,
                                                   " must be >= 1"));
  }
  int64_t total = s.replica_degree;
  for (int i = 0; i < s.num_dims(); ++i) {
    const ParallelDim& d = s.dims[i];
    if (d.size < 0) {
      return absl::InvalidArgumentError(absl::StrCat("parallel shape ", ParallelShapeString(s),
                                                     ": dim ", i, " size ", d.size,
                                                     " is negative"));
    }
    if (d.degree < 1) {
      return absl::InvalidArgumentError(absl::StrCat("parallel shape ", ParallelShapeString(s),
                                                     ": dim ", i, " degree ", d.degree,
                                                     " must be >= 1"));
    }
    if (d.size % d.degree != 0) {
      return absl::InvalidArgumentError(absl::StrCat("parallel shape ", ParallelShapeString(s),
                                                     ": dim ", i, " degree ", d.degree,
                                                     " does not divide size ", d.size));
    }
    total *= d.degree;
    if (total > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parallel shape ", ParallelShapeString(s), ": total degree exceeds 2^31-1 tasks"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> TotalDegree(const ParallelTensorShape& s) {
  RETURN_IF_ERROR(ValidateParallelShape(s));
  int total = s.replica_degree;
  for (const ParallelDim& d : s.dims) total *= d.degree;
  return total;
}

std::vector<int64_t> LogicalShape(const ParallelTensorShape& s) {
  std::vector<int64_t> out;
  for (const ParallelDim& d : s.dims) out.push_back(d.size);
  return out;
}

absl::StatusOr<std::vector<int64_t>> PieceShape(const ParallelTensorShape& s) {
  RETURN_IF_ERROR(ValidateParallelShape(s));
  std::vector<int64_t> out;
  for (const ParallelDim& d : s.dims) out.push_back(d.size / d.degree);
  return out;
}

absl::StatusOr<int64_t> PieceBytes(const ParallelTensorShape& s) {
  ASSIGN_OR_RETURN(std::vector<int64_t> piece, PieceShape(s));
  return BytesOf(piece, s.dtype);
}

absl::StatusOr<int64_t> LogicalBytes(const ParallelTensorShape& s) {
  RETURN_IF_ERROR(ValidateParallelShape(s));
  return BytesOf(LogicalShape(s), s.dtype);
}

std::string ParallelShapeString(const ParallelTensorShape& s) {
  std::string out = absl::StrCat(AV(DTypeName(s.dtype)), "[");
  for (int i = 0; i < s.num_dims(); ++i) {
    if (i > 0) out += ",";
    absl::StrAppend(&out, s.dims[i].size);
    if (s.dims[i].degree != 1) absl::StrAppend(&out, "/", s.dims[i].degree);
  }
  out += "]";
  if (s.replica_degree != 1) absl::StrAppend(&out, "x", s.replica_degree);
  return out;
}

absl::StatusOr<ParallelTensorShape> ParseParallelShape(std::string_view text) {
  const size_t open = text.find('[');
  const size_t close = text.rfind(']');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel shape '", AV(text), "': expected <dtype>[<dims>][x<replica>]"));
  }
  ParallelTensorShape s;
  ASSIGN_OR_RETURN(s.dtype, ParseDType(text.substr(0, open)));
  std::string_view body = text.substr(open + 1, close - open - 1);
  if (!body.empty()) {
    for (absl::string_view piece : absl::StrSplit(AV(body), ',')) {
      std::string_view dim(piece.data(), piece.size());
      ParallelDim d;
      const size_t slash = dim.find('/');
      ASSIGN_OR_RETURN(d.size, ParseInt(dim.substr(0, slash), "size", text));
      if (slash != std::string_view::npos) {
        ASSIGN_OR_RETURN(d.degree, ParseDegree(dim.substr(slash + 1), "degree", text));
      }
      s.dims.push_back(d);
    }
  }
  std::string_view tail = text.substr(close + 1);
  if (!tail.empty()) {
    if (tail[0] != 'x') {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel shape '", AV(text), "': unexpected '", AV(tail),
                     "' after ']'"));
    }
    ASSIGN_OR_RETURN(s.replica_degree, ParseDegree(tail.substr(1), "replica degree", text));
  }
  RETURN_IF_ERROR(ValidateParallelShape(s));
  return s;
}

}  // namespace braid::graph
