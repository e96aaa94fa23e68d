#include "graph/parallel_ops.h"

#include <charconv>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace braid::graph {
namespace {

// This Abseil's string_view is not std::string_view.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::pair<ParallelOpKind, std::string_view> kNames[] = {
    {ParallelOpKind::kPartition, "Partition"}, {ParallelOpKind::kCombine, "Combine"},
    {ParallelOpKind::kReplicate, "Replicate"}, {ParallelOpKind::kReduce, "Reduce"},
    {ParallelOpKind::kPipeline, "Pipeline"},   {ParallelOpKind::kBatch, "Batch"}};

absl::Status Violation(const ParallelOp& op, const ParallelTensorShape& in,
                       std::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(ParallelOpString(op), " on ",
                                                 ParallelShapeString(in), ": ", AV(rule)));
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view ParallelOpKindName(ParallelOpKind k) {
  for (const auto& [kind, name] : kNames) {
    if (kind == k) return name;
  }
  return "unknown";
}

absl::StatusOr<ParallelOpKind> ParseParallelOpKind(std::string_view name) {
  for (const auto& [kind, n] : kNames) {
    if (n == name) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown parallel op '", AV(name),
                   "' (Partition, Combine, Replicate, Reduce, Pipeline, Batch)"));
}

bool TakesDim(ParallelOpKind k) {
  return k != ParallelOpKind::kReplicate && k != ParallelOpKind::kReduce;
}

std::string ParallelOpString(const ParallelOp& op) {
  if (TakesDim(op.kind)) {
    return absl::StrCat(AV(ParallelOpKindName(op.kind)), "(", op.dim, ",", op.degree, ")");
  }
  return absl::StrCat(AV(ParallelOpKindName(op.kind)), "(", op.degree, ")");
}

absl::StatusOr<ParallelOp> ParseParallelOp(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("parallel op '", AV(text), "': ", AV(why)));
  };
  const size_t open = text.find('(');
  if (open == std::string_view::npos || text.empty() || text.back() != ')') {
    return bad("expected <Kind>(<dim>,<degree>) or <Kind>(<degree>)");
  }
  ParallelOp op;
  ASSIGN_OR_RETURN(op.kind, ParseParallelOpKind(Trim(text.substr(0, open))));
  std::string_view args = text.substr(open + 1, text.size() - open - 2);
  std::vector<int> values;
  while (true) {
    const size_t comma = args.find(',');
    std::string_view arg = Trim(args.substr(0, comma));
    int v = 0;
    auto [ptr, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), v);
    if (arg.empty() || ec != std::errc() || ptr != arg.data() + arg.size()) {
      return bad(absl::StrCat("bad integer '", AV(arg), "'"));
    }
    values.push_back(v);
    if (comma == std::string_view::npos) break;
    args.remove_prefix(comma + 1);
  }
  const size_t want = TakesDim(op.kind) ? 2 : 1;
  if (values.size() != want) {
    return bad(absl::StrCat(AV(ParallelOpKindName(op.kind)), " takes ", want, " argument",
                            want == 1 ? "" : "s"));
  }
  if (want == 2) op.dim = values[0];
  op.degree = values.back();
  return op;
}

ParallelOp BackwardOf(const ParallelOp& op) {
  ParallelOp b = op;
  switch (op.kind) {
    case ParallelOpKind::kPartition: b.kind = ParallelOpKind::kCombine; break;
    case ParallelOpKind::kCombine: b.kind = ParallelOpKind::kPartition; break;
    case ParallelOpKind::kReplicate: b.kind = ParallelOpKind::kReduce; break;
    case ParallelOpKind::kReduce: b.kind = ParallelOpKind::kReplicate; break;
    case ParallelOpKind::kPipeline: b.kind = ParallelOpKind::kBatch; break;
    case ParallelOpKind::kBatch: b.kind = ParallelOpKind::kPipeline; break;
  }
  return b;
}

absl::StatusOr<ParallelTensorShape> ApplyParallelOp(const ParallelOp& op,
                                                    const ParallelTensorShape& in) {
  if (absl::Status s = ValidateParallelShape(in); !s.ok()) {
    return Violation(op, in, absl::StrCat("invalid input: ", s.message()));
  }
  const int d = op.degree;
  if (d < 2) return Violation(op, in, absl::StrCat("degree ", d, " must be >= 2"));
  if (TakesDim(op.kind)) {
    if (op.dim < 0 || op.dim >= in.num_dims()) {
      return Violation(op, in, absl::StrCat("dim ", op.dim, " is not in [0, ", in.num_dims(), ")"));
    }
  } else if (op.dim != ParallelOp::kNoDim) {
    return Violation(op, in, "takes no dim (it acts on the replica dimension)");
  }
  ParallelTensorShape out = in;
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  switch (op.kind) {
    case ParallelOpKind::kPartition: {
      ParallelDim& pd = out.dims[op.dim];
      const int64_t degree = int64_t{pd.degree} * d;
      if (degree > kMaxInt || pd.size % degree != 0) {
        return Violation(op, in, absl::StrCat("new degree ", degree, " does not divide size ",
                                              pd.size));
      }
      pd.degree = static_cast<int>(degree);
      break;
    }
    case ParallelOpKind::kCombine: {
      ParallelDim& pd = out.dims[op.dim];
      if (pd.degree % d != 0) {
        return Violation(op, in, absl::StrCat(d, " does not divide degree ", pd.degree));
      }
      pd.degree /= d;
      break;
    }
    case ParallelOpKind::kReplicate: {
      const int64_t r = int64_t{out.replica_degree} * d;
      if (r > kMaxInt) return Violation(op, in, "replica degree overflows");
      out.replica_degree = static_cast<int>(r);
      break;
    }
    case ParallelOpKind::kReduce:
      if (out.replica_degree % d != 0) {
        return Violation(op, in, absl::StrCat(d, " does not divide replica degree ",
                                              out.replica_degree));
      }
      out.replica_degree /= d;
      break;
    case ParallelOpKind::kPipeline: {
      ParallelDim& pd = out.dims[op.dim];
      if (pd.size % (int64_t{pd.degree} * d) != 0) {
        return Violation(op, in, absl::StrCat(d, " micro-batches of ", pd.degree,
                                              " pieces do not divide size ", pd.size));
      }
      pd.size /= d;
      break;
    }
    case ParallelOpKind::kBatch: {
      ParallelDim& pd = out.dims[op.dim];
      if (__builtin_mul_overflow(pd.size, int64_t{d}, &pd.size)) {
        return Violation(op, in, "size overflows");
      }
      break;
    }
  }
  if (absl::Status s = ValidateParallelShape(out); !s.ok()) {
    return Violation(op, in, std::string(s.message()));
  }
  return out;
}

absl::StatusOr<ParallelTensorShape> ApplyParallelOps(std::span<const ParallelOp> ops,
                                                     const ParallelTensorShape& in) {
  ParallelTensorShape s = in;
  for (size_t i = 0; i < ops.size(); ++i) {
    absl::StatusOr<ParallelTensorShape> next = ApplyParallelOp(ops[i], s);
    if (!next.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel op #", i, ": ", next.status().message()));
    }
    s = *std::move(next);
  }
  return s;
}

}  // namespace braid::graph
