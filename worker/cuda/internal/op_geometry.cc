#include "worker/cuda/internal/op_geometry.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace braid::worker::cuda_internal {
namespace {

std::vector<int64_t> AlignTo(const std::vector<int64_t>& v, size_t rank) {
  std::vector<int64_t> out(rank - std::min(rank, v.size()), 1);
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

std::vector<int64_t> StripLeadingOnes(std::vector<int64_t> v) {
  auto it = std::find_if(v.begin(), v.end(), [](int64_t d) { return d != 1; });
  return {it, v.end()};
}

absl::StatusOr<std::vector<int64_t>> Broadcast(const std::vector<int64_t>& a,
                                               const std::vector<int64_t>& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> x = AlignTo(a, r), y = AlignTo(b, r), out(r);
  for (size_t i = 0; i < r; ++i) {
    if (x[i] != y[i] && x[i] != 1 && y[i] != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(graph::ShapeString(a), " and ", graph::ShapeString(b), " do not broadcast"));
    }
    out[i] = x[i] == 1 ? y[i] : x[i];
  }
  return out;
}

// Merges runs of dims whose flag is equal; dims of size 1 are dropped (they
// broadcast either way). Returns the merged sizes of `full` and of the
// flagged-as-kept view.
void MergeRuns(const std::vector<int64_t>& full, const std::vector<bool>& kept,
               std::vector<int64_t>* full_out, std::vector<int64_t>* other_out) {
  int prev = -1;
  for (size_t i = 0; i < full.size(); ++i) {
    if (full[i] == 1) continue;
    const int flag = kept[i] ? 1 : 0;
    if (flag != prev) {
      full_out->push_back(1);
      other_out->push_back(1);
      prev = flag;
    }
    full_out->back() *= full[i];
    if (kept[i]) other_out->back() *= full[i];
  }
}

absl::StatusOr<std::vector<int>> PaddedDims(const std::vector<int64_t>& v, size_t min_rank) {
  return ToIntDims(AlignTo(v, std::max(min_rank, v.size())));
}

}  // namespace

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}

absl::StatusOr<std::vector<int>> ToIntDims(const std::vector<int64_t>& v) {
  std::vector<int> out;
  for (int64_t d : v) {
    if (d < 0 || d > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("dimension ", d, " does not fit cuDNN's int"));
    }
    out.push_back(static_cast<int>(d));
  }
  return out;
}

absl::StatusOr<GemmPlan> PlanMatMul(std::vector<int64_t> a, std::vector<int64_t> b, bool trans_a,
                                    bool trans_b) {
  if (a.empty() || b.empty()) return absl::InvalidArgumentError("MatMul of a scalar");
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) {
    a = {1, a[0]};
    trans_a = false;
  }
  if (b_vec) {
    b = {b[0], 1};
    trans_b = false;
  }
  const size_t ra = a.size(), rb = b.size();
  GemmPlan p;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  const int64_t m = trans_a ? a[ra - 1] : a[ra - 2];
  const int64_t k = trans_a ? a[ra - 2] : a[ra - 1];
  const int64_t kb = trans_b ? b[rb - 1] : b[rb - 2];
  const int64_t n = trans_b ? b[rb - 2] : b[rb - 1];
  if (k != kb) {
    return absl::InvalidArgumentError(absl::StrCat("contracted dims differ: A ",
                                                   graph::ShapeString(a), " gives K=", k, ", B ",
                                                   graph::ShapeString(b), " gives K=", kb));
  }
  const std::vector<int64_t> batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  absl::StatusOr<std::vector<int64_t>> batch = Broadcast(batch_a, batch_b);
  if (!batch.ok())
    return absl::InvalidArgumentError(absl::StrCat("batch dims: ", batch.status().message()));
  const int64_t pa = Product(batch_a), pb = Product(batch_b);
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = a.back();
  p.ldb = b.back();
  if (pb == 1 && !trans_a) {
    p.m = pa * m;  // rows of every batch are contiguous: one GEMM
  } else if (pb == 1) {
    p.batch = pa;
    p.stride_a = m * k;
  } else if (pa == 1) {
    p.batch = pb;
    p.stride_b = k * n;
  } else if (StripLeadingOnes(batch_a) == StripLeadingOnes(batch_b)) {
    p.batch = pa;
    p.stride_a = m * k;
    p.stride_b = k * n;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "batch dims ", graph::ShapeString(batch_a), " and ", graph::ShapeString(batch_b),
        " broadcast partially (PyTorch materializes the expanded operand; not mapped)"));
  }
  p.stride_c = p.batch > 1 ? m * n : 0;
  p.out_shape = *batch;
  if (!a_vec) p.out_shape.push_back(m);
  if (!b_vec) p.out_shape.push_back(n);
  return p;
}

absl::StatusOr<BinaryPlan> PlanBinary(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                      const std::vector<int64_t>& c) {
  ASSIGN_OR_RETURN(std::vector<int64_t> bc, Broadcast(a, b));
  if (AlignTo(bc, c.size()) != c && bc != c) {
    return absl::InvalidArgumentError(absl::StrCat("inputs broadcast to ", graph::ShapeString(bc),
                                                   ", not the output's ", graph::ShapeString(c)));
  }
  const size_t r = std::max(c.size(), bc.size());
  const std::vector<int64_t> cf = AlignTo(c, r), af = AlignTo(a, r), bf = AlignTo(b, r);
  BinaryPlan p;
  const std::vector<int64_t>* other = nullptr;
  if (af == cf) {
    other = &bf;
  } else if (bf == cf) {
    other = &af;
    p.swapped = true;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "both operands broadcast (", graph::ShapeString(a), ", ", graph::ShapeString(b),
        "): cuDNN OpTensor needs one of them at the output's shape"));
  }
  std::vector<bool> kept(r);
  for (size_t i = 0; i < r; ++i) kept[i] = (*other)[i] == cf[i];
  std::vector<int64_t> cm, om;
  MergeRuns(cf, kept, &cm, &om);
  if (cm.size() > 5) {
    return absl::UnimplementedError(absl::StrCat("broadcast pattern of ", graph::ShapeString(a),
                                                 " and ", graph::ShapeString(b),
                                                 " needs more than 5 dims"));
  }
  ASSIGN_OR_RETURN(p.c_dims, PaddedDims(cm, 4));
  ASSIGN_OR_RETURN(p.b_dims, PaddedDims(om, 4));
  return p;
}

absl::StatusOr<ReducePlan> PlanReduce(const std::vector<int64_t>& full,
                                      const std::vector<int64_t>& reduced, int max_rank) {
  if (full.size() != reduced.size()) {
    return absl::InvalidArgumentError(absl::StrCat(graph::ShapeString(reduced), " is not ",
                                                   graph::ShapeString(full), " with reduced dims"));
  }
  std::vector<bool> kept(full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    if (reduced[i] != full[i] && reduced[i] != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          graph::ShapeString(reduced), " is not ", graph::ShapeString(full), " with reduced dims"));
    }
    kept[i] = reduced[i] == full[i];
  }
  std::vector<int64_t> fm, rm;
  MergeRuns(full, kept, &fm, &rm);
  if (static_cast<int>(fm.size()) > max_rank) {
    return absl::UnimplementedError(absl::StrCat("reducing ", graph::ShapeString(full), " to ",
                                                 graph::ShapeString(reduced), " needs more than ",
                                                 max_rank, " dims"));
  }
  ASSIGN_OR_RETURN(std::vector<int> fd, PaddedDims(fm, 4));
  ASSIGN_OR_RETURN(std::vector<int> rd, PaddedDims(rm, 4));
  return ReducePlan{std::move(fd), std::move(rd)};
}

std::vector<int64_t> KeepDimsShape(const std::vector<int64_t>& in,
                                   const std::vector<int64_t>& axes) {
  std::vector<int64_t> keep = in;
  for (int64_t ax : axes) {
    if (ax >= 0 && ax < static_cast<int64_t>(keep.size())) keep[ax] = 1;
  }
  return keep;
}

std::optional<std::vector<int64_t>> SymmetricPads(const std::vector<int64_t>& pads) {
  const size_t n = pads.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    if (pads[i] != pads[i + n]) return std::nullopt;
  }
  return std::vector<int64_t>(pads.begin(), pads.begin() + n);
}

}  // namespace braid::worker::cuda_internal
