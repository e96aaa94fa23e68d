#include "search/parallel_config.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/op_kind.h"
#include "graph/ops.h"

namespace braid::search {
namespace {

using graph::Graph;
using graph::OpId;
using graph::OpKind;
using graph::ParallelDim;
using graph::ParallelOp;
using graph::ParallelTensorShape;
using graph::TensorId;

bool IsContraction(OpKind k) { return k == OpKind::kMatMul || k == OpKind::kGemm; }

// Ops normalizing over the last dim (softmax over axis -1, LayerNorm): they
// split like elementwise ops on every other dim; the last stays whole.
bool IsRowWise(OpKind k) {
  return k == OpKind::kSoftmax || k == OpKind::kLogSoftmax || k == OpKind::kLayerNormalization;
}

// Conv (NCHW): output [N, C_out, H, W...].
bool IsConv(OpKind k) { return k == OpKind::kConv; }
// Windowed and global pooling: [N, C, spatial...] -> [N, C, spatial'...].
bool IsPool(OpKind k) {
  return k == OpKind::kMaxPool || k == OpKind::kAveragePool || k == OpKind::kGlobalAveragePool;
}
// Linear reductions over `axes` (ReduceSum, ReduceMean): split the kept dims.
bool IsLinearReduce(OpKind k) { return k == OpKind::kReduceSum || k == OpKind::kReduceMean; }

// The size of the dim a config's reduction_degree splits, 0 when the op has
// none: MatMul/Gemm's contraction dim, an ungrouped Conv's input channels
// (FlexFlow's Conv2D has no such split; Unity's reduction parallelism covers
// it: the output holds partial sums, like a row-parallel MatMul), and a
// Gather reading a parameter table (the vocabulary rows: every device looks up
// the rows it owns and writes zeros elsewhere, the output holds partial sums).
int64_t ReductionSize(const Graph& g, const graph::Op& o);

// Reduced axes of a ReduceSum/ReduceMean, normalized; keepdims.
std::vector<bool> ReducedAxes(const Graph& g, const graph::Op& o) {
  const int64_t rank = static_cast<int64_t>(g.tensor(o.inputs[0]).shape.size());
  std::vector<bool> r(rank, false);
  std::vector<int64_t> axes = o.GetInts("axes");
  if (axes.empty()) std::fill(r.begin(), r.end(), true);
  for (int64_t a : axes) {
    if (a < 0) a += rank;
    if (a >= 0 && a < rank) r[a] = true;
  }
  return r;
}

// Input degrees of a Reshape: dims are grouped into the smallest runs of
// equal element count (in[a..b) <-> out[c..d)); a run's degree may sit only on
// the first out dim of the run and goes to the first in dim (a contiguous
// split of the merged/split dim, e.g. H/8 <-> heads/8 x dh). Empty when the
// degrees do not fit that rule.
std::vector<int> ReshapeInput(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                              const std::vector<int>& od) {
  std::vector<int> d(in.size(), 1);
  size_t i = 0, j = 0;
  while (i < in.size() || j < out.size()) {
    const size_t i0 = i, j0 = j;
    int64_t pi = i < in.size() ? in[i++] : 1, pj = j < out.size() ? out[j++] : 1;
    while (pi != pj) {
      if (pi < pj && i < in.size()) {
        pi *= in[i++];
      } else if (pj < pi && j < out.size()) {
        pj *= out[j++];
      } else {
        return {};
      }
    }
    for (size_t k = j0 + 1; k < j; ++k) {
      if (od[k] != 1) return {};
    }
    if (j0 < out.size() && od[j0] != 1) {
      if (i0 >= in.size() || in[i0] % od[j0] != 0) return {};
      d[i0] = od[j0];
    }
  }
  return d;
}

// Split's axis, normalized against the input's rank (-1 when out of range).
int64_t SplitAxis(const Graph& g, const graph::Op& o) {
  if (o.inputs.empty()) return -1;
  const int64_t rank = static_cast<int64_t>(g.tensor(o.inputs[0]).shape.size());
  int64_t axis = o.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  return axis >= 0 && axis < rank ? axis : -1;
}

// The op kinds whose several outputs have exact configs, and the shapes
// those configs assume: Split's outputs are slices of its input along the
// axis; an elementwise op's outputs (Dropout's y and mask) all have output
// 0's shape; BatchNormalization's outputs after Y (training mode: running
// or saved mean and variance) are per-channel [C].
absl::Status CheckOutputs(const Graph& g, const graph::Op& o) {
  const std::vector<int64_t>& y = g.tensor(o.outputs[0]).shape;
  auto bad = [&](const std::string& why) {
    return absl::UnimplementedError(absl::StrCat("op ", o.name, " (", o.type, ") with ",
                                                 o.outputs.size(), " outputs: ", why));
  };
  if (o.kind == OpKind::kSplit) {
    if (o.inputs.empty()) return bad("no input");
    const std::vector<int64_t>& x = g.tensor(o.inputs[0]).shape;
    const int64_t axis = SplitAxis(g, o);
    if (axis < 0) return bad("axis out of range");
    for (graph::TensorId t : o.outputs) {
      const std::vector<int64_t>& s = g.tensor(t).shape;
      if (s.size() != x.size()) return bad("an output's rank differs from the input's");
      for (size_t j = 0; j < s.size(); ++j)
        if (static_cast<int64_t>(j) != axis && s[j] != x[j])
          return bad("an output differs from the input off the split axis");
    }
    return absl::OkStatus();
  }
  if (graph::IsElementwiseKind(o.kind)) {
    for (graph::TensorId t : o.outputs)
      if (g.tensor(t).shape != y) return bad("outputs of different shapes");
    return absl::OkStatus();
  }
  if (o.kind == OpKind::kBatchNormalization) {
    if (y.size() < 2) return bad("needs an [N, C, ...] output");
    for (size_t k = 1; k < o.outputs.size(); ++k) {
      const std::vector<int64_t>& s = g.tensor(o.outputs[k]).shape;
      if (s.size() != 1 || s[0] != y[1]) return bad("statistics outputs are not [C]");
    }
    return absl::OkStatus();
  }
  return bad("no parallel configs for several outputs of this kind");
}

// Shape checks of the ops this file can split; the error names the op.
absl::Status CheckSupported(const Graph& g, OpId op) {
  if (op < 0 || op >= g.num_ops()) return absl::InvalidArgumentError(absl::StrCat("no op ", op));
  const graph::Op& o = g.op(op);
  if (o.outputs.empty()) {
    return absl::UnimplementedError(absl::StrCat("op ", o.name, ": no outputs to split"));
  }
  if (o.outputs.size() > 1) RETURN_IF_ERROR(CheckOutputs(g, o));
  if (o.kind == OpKind::kSplit) {
    if (SplitAxis(g, o) < 0) {
      return absl::UnimplementedError(absl::StrCat("op ", o.name, ": Split axis out of range"));
    }
    return absl::OkStatus();
  }
  if (IsContraction(o.kind)) {
    if (o.inputs.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat("op ", o.name, ": needs two inputs"));
    }
    for (int i = 0; i < 2; ++i) {
      if (g.tensor(o.inputs[i]).shape.size() < 2) {
        return absl::UnimplementedError(
            absl::StrCat("op ", o.name, ": 1-D MatMul operands are not split"));
      }
    }
    if (o.kind == OpKind::kGemm && g.tensor(o.outputs[0]).shape.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("op ", o.name, ": Gemm output is not 2-D"));
    }
    return absl::OkStatus();
  }
  if (graph::IsElementwiseKind(o.kind)) return absl::OkStatus();
  const size_t in_rank = o.inputs.empty() ? 0 : g.tensor(o.inputs[0]).shape.size();
  if (IsConv(o.kind) || IsPool(o.kind) || o.kind == OpKind::kBatchNormalization) {
    if (o.inputs.empty() || in_rank < 3 || g.tensor(o.outputs[0]).shape.size() != in_rank) {
      return absl::UnimplementedError(
          absl::StrCat("op ", o.name, " (", o.type, "): needs an [N, C, spatial...] input"));
    }
    if (IsConv(o.kind) && (o.inputs.size() < 2 || g.tensor(o.inputs[1]).shape.size() != in_rank)) {
      return absl::InvalidArgumentError(absl::StrCat("op ", o.name, ": Conv needs a weight of rank ",
                                                     in_rank));
    }
    return absl::OkStatus();
  }
  if (o.kind == OpKind::kConcat || IsLinearReduce(o.kind) || o.kind == OpKind::kFlatten) {
    if (o.inputs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("op ", o.name, ": no inputs"));
    }
    return absl::OkStatus();
  }
  if (o.kind == OpKind::kGather) {
    if (o.inputs.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("op ", o.name, ": Gather needs 2 inputs"));
    }
    const int64_t axis = o.GetInt("axis", 0);
    if (axis < 0 || axis >= static_cast<int64_t>(in_rank)) {
      return absl::UnimplementedError(absl::StrCat("op ", o.name, ": Gather axis ", axis,
                                                   " is not normalized"));
    }
    return absl::OkStatus();
  }
  if (IsRowWise(o.kind) || o.kind == OpKind::kTranspose || o.kind == OpKind::kReshape) {
    if (o.kind == OpKind::kSoftmax || o.kind == OpKind::kLogSoftmax) {
      const int64_t rank = static_cast<int64_t>(g.tensor(o.outputs[0]).shape.size());
      const int64_t axis = o.GetInt("axis", -1);
      if (axis != -1 && axis != rank - 1) {
        return absl::UnimplementedError(
            absl::StrCat("op ", o.name, ": only a softmax over the last dim is split"));
      }
    }
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat("op ", o.name, " (", o.type,
                                               "): no parallel configs for this kind"));
}

// Size of the contraction dim of a MatMul/Gemm.
int64_t ContractionSize(const Graph& g, const graph::Op& o) {
  const auto& a = g.tensor(o.inputs[0]).shape;
  if (o.kind == OpKind::kGemm && o.GetInt("transA", 0) != 0) return a[0];
  return a.back();
}

int64_t ReductionSize(const Graph& g, const graph::Op& o) {
  if (IsContraction(o.kind)) return ContractionSize(g, o);
  if (IsConv(o.kind) && o.GetInt("group", 1) == 1) return g.tensor(o.inputs[0]).shape[1];
  if (o.kind == OpKind::kGather &&
      g.tensor(o.inputs[0]).role == graph::TensorRole::kParameter) {
    return g.tensor(o.inputs[0]).shape[o.GetInt("axis", 0)];
  }
  return 0;
}

// The output dims a config may split, as sizes (a dim that must stay whole
// has size 1, so only degree 1 divides it).
std::vector<int64_t> SplittableSizes(const Graph& g, const graph::Op& o) {
  std::vector<int64_t> sizes = g.tensor(o.outputs[0]).shape;
  if (sizes.empty()) return sizes;
  if (IsRowWise(o.kind)) sizes.back() = 1;  // the normalized last dim stays whole
  if (IsConv(o.kind)) {
    // N, C_out and the first spatial dim (H); the other spatial dims stay whole.
    for (size_t j = 3; j < sizes.size(); ++j) sizes[j] = 1;
  }
  if (IsPool(o.kind) || o.kind == OpKind::kBatchNormalization) {
    // N and C: the window (pooling) or the statistics (BN) span the spatial dims.
    for (size_t j = 2; j < sizes.size(); ++j) sizes[j] = 1;
  }
  if (o.kind == OpKind::kConcat) {
    const int64_t axis = o.GetInt("axis", 0);
    if (axis >= 0 && axis < static_cast<int64_t>(sizes.size())) sizes[axis] = 1;
  }
  if (o.kind == OpKind::kSplit) {
    // A segmented split: a degree on the axis must divide every output's
    // size there (each device holds the same share of every segment).
    const int64_t axis = SplitAxis(g, o);
    if (axis >= 0 && axis < static_cast<int64_t>(sizes.size())) {
      int64_t common = 0;
      for (graph::TensorId t : o.outputs) common = std::gcd(common, g.tensor(t).shape[axis]);
      sizes[axis] = common;
    }
  }
  return sizes;
}

// Degrees of an input broadcast numpy-style to the output: a dim of the same
// size as the output's (right-aligned) follows the output's degree, a
// broadcast dim is not split.
std::vector<int> FollowOutput(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                              const std::vector<int>& out_degrees) {
  std::vector<int> d(in.size(), 1);
  const size_t shift = out.size() >= in.size() ? out.size() - in.size() : 0;
  for (size_t j = 0; j < in.size(); ++j) {
    const size_t oj = j + shift;
    if (oj < out.size() && in[j] == out[oj]) d[j] = out_degrees[oj];
  }
  return d;
}

// Input degrees of a MatMul operand [batch..., rows, cols]: batch dims follow
// the output's, the last two dims get the given degrees.
std::vector<int> MatMulOperand(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                               const std::vector<int>& out_degrees, int rows, int cols) {
  std::vector<int> d(in.size(), 1);
  const size_t r = out.size();
  for (size_t j = 0; j + 2 < in.size(); ++j) {
    const size_t oj = (r - 2) - (in.size() - 2) + j;
    if (in[j] == out[oj]) d[j] = out_degrees[oj];
  }
  d[in.size() - 2] = rows;
  d[in.size() - 1] = cols;
  return d;
}

absl::StatusOr<ParallelTensorShape> MakeShape(const graph::Tensor& t, const std::vector<int>& deg,
                                              int total, const std::string& what) {
  ParallelTensorShape s;
  s.dtype = t.dtype;
  int prod = 1;
  for (size_t j = 0; j < t.shape.size(); ++j) {
    s.dims.push_back(ParallelDim{t.shape[j], deg[j]});
    prod *= deg[j];
  }
  if (prod < 1 || total % prod != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", t.name, ": dim degrees do not divide the total degree"));
  }
  s.replica_degree = total / prod;
  absl::Status st = graph::ValidateParallelShape(s);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", t.name, ": ", std::string(st.message())));
  }
  return s;
}

// Positive divisors of n, ascending.
std::vector<int> Divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

// Every way to write `remaining` as a product over sizes[i..] with each factor
// dividing its size, lexicographically.
void Spread(const std::vector<int64_t>& sizes, size_t i, int remaining, std::vector<int>& cur,
            std::vector<std::vector<int>>& out) {
  if (i + 1 == sizes.size()) {
    if (sizes[i] % remaining == 0) {
      cur.push_back(remaining);
      out.push_back(cur);
      cur.pop_back();
    }
    return;
  }
  for (int v : Divisors(remaining)) {
    if (sizes[i] % v != 0) continue;
    cur.push_back(v);
    Spread(sizes, i + 1, remaining / v, cur, out);
    cur.pop_back();
  }
}

}  // namespace

int ParallelConfig::TotalDegree() const {
  int t = reduction_degree * replica_degree;
  for (int d : output_degrees) t *= d;
  return t;
}

std::string ParallelConfigString(const ParallelConfig& c) {
  std::string s = absl::StrCat("out[", absl::StrJoin(c.output_degrees, ","), "]");
  if (c.reduction_degree != 1) absl::StrAppend(&s, " red", c.reduction_degree);
  if (c.replica_degree != 1) absl::StrAppend(&s, " rep", c.replica_degree);
  return s;
}

namespace {
// Kind names of the CNN and lookup ops: "data" (dim 0), "channel" (dim 1 of
// Conv/BN/pooling: output channels), "spatial" (Conv's H), "reduction" (Conv's
// input channels), "row" / "column" (a Gather's table rows / its last output
// dims: the embedding dim).
std::string OtherKindName(const graph::Op& o, const ParallelConfig& c) {
  std::vector<std::string> kinds;
  const int r = static_cast<int>(c.output_degrees.size());
  for (int j = 0; j < r; ++j) {
    if (c.output_degrees[j] == 1) continue;
    if (j == 0) {
      kinds.push_back("data");
    } else if (o.kind == OpKind::kGather) {
      kinds.push_back(j == r - 1 ? "column" : "index");
    } else if (j == 1) {
      kinds.push_back("channel");
    } else {
      kinds.push_back("spatial");
    }
  }
  if (c.reduction_degree > 1) kinds.push_back(o.kind == OpKind::kGather ? "row" : "reduction");
  if (c.replica_degree > 1) kinds.push_back("replica");
  if (kinds.empty()) return "replicated";
  if (kinds.size() == 1) return kinds[0];
  return "mixed";
}
}  // namespace

std::string ConfigKindName(const Graph& g, OpId op, const ParallelConfig& c) {
  if (op < 0 || op >= g.num_ops()) return "elementwise";
  const OpKind k = g.op(op).kind;
  if (IsConv(k) || IsPool(k) || k == OpKind::kBatchNormalization || k == OpKind::kGather) {
    return OtherKindName(g.op(op), c);
  }
  if (k == OpKind::kSplit) {
    const int64_t axis = SplitAxis(g, g.op(op));
    const bool on_axis = axis >= 0 && axis < static_cast<int64_t>(c.output_degrees.size()) &&
                         c.output_degrees[axis] > 1;
    return on_axis ? "segmented" : "elementwise";
  }
  if (!IsContraction(k)) return "elementwise";
  const int r = static_cast<int>(c.output_degrees.size());
  std::vector<std::string> kinds;
  for (int j = 0; j < r; ++j) {
    if (c.output_degrees[j] == 1) continue;
    if (j == r - 1) {
      kinds.push_back("column");
    } else if (j == 0) {
      kinds.push_back("data");
    } else if (j == r - 2) {
      kinds.push_back("spatial");
    } else {
      kinds.push_back("head");
    }
  }
  if (c.reduction_degree > 1) kinds.push_back("row");
  if (c.replica_degree > 1) kinds.push_back("replica");
  if (kinds.empty()) return "replicated";
  if (kinds.size() == 1) return kinds[0];
  return "mixed";
}

std::optional<DroppedConfig> InexactConfig(const Graph& g, OpId op, const ParallelConfig& c) {
  if (op < 0 || op >= g.num_ops()) return std::nullopt;
  const graph::Op& o = g.op(op);
  if (IsConv(o.kind) && c.output_degrees.size() > 2 && c.output_degrees[2] > 1) {
    // A row block of the output reads the input rows it covers only when
    // the kernel is one row high, unstrided and unpadded along H.
    const std::vector<int64_t>& w = g.tensor(o.inputs[1]).shape;
    const std::vector<int64_t> strides = o.GetInts("strides");
    const std::vector<int64_t> pads = o.GetInts("pads");
    const std::vector<int64_t> dil = o.GetInts("dilations");
    const size_t sp = w.size() - 2;  // spatial dims
    const bool local = w.size() > 2 && w[2] == 1 && (strides.empty() || strides[0] == 1) &&
                       (pads.empty() || (pads[0] == 0 && pads.size() > sp && pads[sp] == 0)) &&
                       (dil.empty() || dil[0] == 1);
    if (!local) {
      return DroppedConfig{c, "spatial",
                           "a split of H needs each piece's halo rows from its neighbours, "
                           "which no per-device program moves"};
    }
  }
  if (o.kind == OpKind::kGather && c.reduction_degree > 1) {
    return DroppedConfig{c, "row",
                         "a vocabulary-parallel lookup must mask the ids outside each "
                         "device's rows, which no per-device program does"};
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<ParallelConfig>> CandidateConfigs(const Graph& g, OpId op,
                                                             int degree,
                                                             std::vector<DroppedConfig>* dropped) {
  if (degree < 1) return absl::InvalidArgumentError(absl::StrCat("degree ", degree, " < 1"));
  RETURN_IF_ERROR(CheckSupported(g, op));
  const graph::Op& o = g.op(op);
  std::vector<int64_t> sizes = SplittableSizes(g, o);
  const int64_t reduction = ReductionSize(g, o);
  const bool contraction = reduction > 0;
  if (sizes.empty()) {
    // A scalar output: only the whole op, at degree 1.
    if (degree == 1) return std::vector<ParallelConfig>{ParallelConfig{}};
    return std::vector<ParallelConfig>{};
  }
  if (contraction) sizes.push_back(reduction);
  std::vector<std::vector<int>> spreads;
  std::vector<int> cur;
  Spread(sizes, 0, degree, cur, spreads);
  std::vector<ParallelConfig> out;
  for (const std::vector<int>& s : spreads) {
    ParallelConfig c;
    c.output_degrees.assign(s.begin(), s.begin() + (contraction ? s.size() - 1 : s.size()));
    if (contraction) c.reduction_degree = s.back();
    if (!ConfigLayouts(g, op, c).ok()) continue;
    if (std::optional<DroppedConfig> d = InexactConfig(g, op, c)) {
      if (dropped != nullptr) dropped->push_back(*std::move(d));
      continue;
    }
    const bool data = c.output_degrees[0] == degree;
    if (data) {
      out.insert(out.begin(), std::move(c));
    } else {
      out.push_back(std::move(c));
    }
  }
  return out;
}

absl::StatusOr<OpLayouts> ConfigLayouts(const Graph& g, OpId op, const ParallelConfig& c) {
  RETURN_IF_ERROR(CheckSupported(g, op));
  const graph::Op& o = g.op(op);
  const graph::Tensor& out = g.tensor(o.outputs[0]);
  if (c.output_degrees.size() != out.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat("op ", o.name, ": config ",
                                                   ParallelConfigString(c), " has ",
                                                   c.output_degrees.size(), " dims, output has ",
                                                   out.shape.size()));
  }
  if (c.reduction_degree < 1 || c.replica_degree < 1 ||
      std::any_of(c.output_degrees.begin(), c.output_degrees.end(), [](int d) { return d < 1; })) {
    return absl::InvalidArgumentError(absl::StrCat("op ", o.name, ": config ",
                                                   ParallelConfigString(c),
                                                   " has a degree < 1"));
  }
  const bool contraction = IsContraction(o.kind);
  if (IsRowWise(o.kind) && !c.output_degrees.empty() && c.output_degrees.back() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("op ", o.name, ": the normalized last dim is not split"));
  }
  if (ReductionSize(g, o) == 0 && c.reduction_degree != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op ", o.name, ": only MatMul/Gemm, an ungrouped Conv and a Gather from a parameter "
                       "table split a reduction dim"));
  }
  {
    const std::vector<int64_t> splittable = SplittableSizes(g, o);
    for (size_t j = 0; j < splittable.size(); ++j) {
      if (splittable[j] == 1 && c.output_degrees[j] != 1) {
        return absl::InvalidArgumentError(absl::StrCat("op ", o.name, " (", o.type,
                                                       "): output dim ", j, " is not split"));
      }
    }
  }
  if (IsConv(o.kind)) {
    // A grouped conv (ResNeXt) splits its output channels by whole groups:
    // the input channels of those groups go with them.
    const int64_t group = o.GetInt("group", 1);
    if (group > 1 && group % c.output_degrees[1] != 0) {
      return absl::InvalidArgumentError(absl::StrCat("op ", o.name, ": channel degree ",
                                                     c.output_degrees[1], " does not divide ",
                                                     group, " groups"));
    }
  }
  const int total = c.TotalDegree();
  const int dk = c.reduction_degree;
  const std::vector<int>& od = c.output_degrees;
  OpLayouts l;
  for (size_t i = 0; i < o.inputs.size(); ++i) {
    const graph::Tensor& t = g.tensor(o.inputs[i]);
    std::vector<int> deg;
    if (contraction && i < 2) {
      const int rows = od[od.size() - 2];
      const int cols = od.back();
      if (o.kind == OpKind::kGemm) {
        const bool trans = o.GetInt(i == 0 ? "transA" : "transB", 0) != 0;
        deg = i == 0 ? (trans ? std::vector<int>{dk, rows} : std::vector<int>{rows, dk})
                     : (trans ? std::vector<int>{cols, dk} : std::vector<int>{dk, cols});
      } else {
        deg = i == 0 ? MatMulOperand(t.shape, out.shape, od, rows, dk)
                     : MatMulOperand(t.shape, out.shape, od, dk, cols);
      }
    } else if (o.kind == OpKind::kTranspose && i == 0) {
      const std::vector<int64_t> perm = o.GetInts("perm");
      deg.assign(t.shape.size(), 1);
      for (size_t j = 0; j < perm.size() && j < od.size(); ++j) {
        if (perm[j] >= 0 && perm[j] < static_cast<int64_t>(deg.size())) deg[perm[j]] = od[j];
      }
    } else if (o.kind == OpKind::kReshape && i == 0) {
      deg = ReshapeInput(t.shape, out.shape, od);
      if (deg.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("op ", o.name, ": config ",
                                                       ParallelConfigString(c),
                                                       " splits a reshaped dim off its lead"));
      }
    } else if (IsConv(o.kind)) {
      const int64_t group = o.GetInt("group", 1);
      deg.assign(t.shape.size(), 1);
      if (i == 0) {
        // X [N, C_in, H, W]: batch and H follow the output (halo rows of a
        // split H are ignored: not moved, not costed); C_in carries the
        // reduction split, or the group split of a grouped conv. An
        // output-channel split of an ungrouped conv replicates X.
        deg[0] = od[0];
        deg[2] = od[2];
        deg[1] = group > 1 ? od[1] : dk;
      } else if (i == 1) {
        // W [C_out, C_in/group, kh, kw]: FlexFlow's Conv2D output-channel
        // split partitions the kernel on dim 0.
        deg[0] = od[1];
        deg[1] = group > 1 ? 1 : dk;
      } else {
        deg[0] = od[1];  // bias [C_out]
      }
    } else if (IsPool(o.kind)) {
      deg.assign(t.shape.size(), 1);
      deg[0] = od[0];
      deg[1] = od[1];
    } else if (o.kind == OpKind::kBatchNormalization) {
      // X follows the output; scale, bias, running mean/var [C] follow C.
      // Under a data split each shard normalizes with its own batch
      // statistics (DDP without SyncBN; FlexFlow's BatchNorm does the same).
      if (i == 0) {
        deg = FollowOutput(t.shape, out.shape, od);
      } else {
        deg.assign(t.shape.size(), 1);
        if (!deg.empty() && t.shape[0] == out.shape[1]) deg[0] = od[1];
      }
    } else if (o.kind == OpKind::kSplit) {
      // The data input has the outputs' layout (a degree on the axis: a
      // segmented layout, each device holding its share of every segment);
      // a non-constant `split` sizes input is copied.
      if (i == 0) {
        deg = od;
      } else {
        deg.assign(t.shape.size(), 1);
      }
    } else if (o.kind == OpKind::kFlatten) {
      deg = ReshapeInput(t.shape, out.shape, od);
      if (deg.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("op ", o.name, ": config ",
                                                       ParallelConfigString(c),
                                                       " splits a flattened dim off its lead"));
      }
    } else if (IsLinearReduce(o.kind)) {
      // Kept dims carry the output's degrees; reduced dims stay whole.
      const std::vector<bool> reduced = ReducedAxes(g, o);
      const bool keep = o.GetInt("keepdims", 1) != 0;
      deg.assign(t.shape.size(), 1);
      size_t oj = 0;
      for (size_t j = 0; j < t.shape.size(); ++j) {
        if (!reduced[j]) {
          if (oj < od.size()) deg[j] = od[oj];
          ++oj;
        } else if (keep) {
          ++oj;
        }
      }
    } else if (o.kind == OpKind::kGather) {
      // out = data[:axis] + indices + data[axis+1:]. Data (an embedding
      // table): replicated under a batch split, its rows split by the
      // reduction degree (vocabulary parallelism, partial sums out), its
      // columns by the output's last dims (the embedding dim). Indices
      // follow the output dims they produce; replicated across a row split.
      const int64_t axis = o.GetInt("axis", 0);
      const size_t ri = g.tensor(o.inputs[1]).shape.size();
      deg.assign(t.shape.size(), 1);
      if (i == 0) {
        for (size_t j = 0; j < t.shape.size(); ++j) {
          if (static_cast<int64_t>(j) < axis) {
            deg[j] = od[j];
          } else if (static_cast<int64_t>(j) == axis) {
            deg[j] = dk;
          } else {
            deg[j] = od[j - 1 + ri];
          }
        }
      } else {
        for (size_t j = 0; j < ri; ++j) deg[j] = od[axis + j];
      }
    } else {
      // Elementwise operands, Gemm's bias C and Concat's inputs follow the
      // output (Concat: the concat axis itself is never split).
      deg = FollowOutput(t.shape, out.shape, od);
    }
    ASSIGN_OR_RETURN(ParallelTensorShape s,
                     MakeShape(t, deg, total, absl::StrCat("op ", o.name, " input")));
    l.inputs.push_back(std::move(s));
  }
  for (size_t k = 0; k < o.outputs.size(); ++k) {
    const graph::Tensor& t = g.tensor(o.outputs[k]);
    std::vector<int> deg = od;  // Split's and elementwise outputs: all alike
    if (k > 0 && o.kind == OpKind::kBatchNormalization) {
      // Per-channel statistics: split with C, copied under an N split.
      deg.assign(t.shape.size(), 1);
      deg[0] = od[1];
    }
    ASSIGN_OR_RETURN(ParallelTensorShape s,
                     MakeShape(t, deg, total, absl::StrCat("op ", o.name, " output")));
    l.outputs.push_back(std::move(s));
  }
  l.output = l.outputs[0];
  l.output_partial_sums = dk > 1;
  return l;
}

graph::Attrs PieceAttrs(const Graph& g, OpId op, const ParallelConfig& c) {
  const graph::Op& o = g.op(op);
  graph::Attrs attrs = o.attrs;
  if (IsConv(o.kind) && o.GetInt("group", 1) > 1 && c.output_degrees.size() > 1) {
    // Each device runs group / (channel degree) of the groups.
    attrs["group"] = o.GetInt("group", 1) / c.output_degrees[1];
  }
  if (o.kind == OpKind::kSplit) {
    const int64_t axis = SplitAxis(g, o);
    if (axis >= 0 && axis < static_cast<int64_t>(c.output_degrees.size()) &&
        c.output_degrees[axis] > 1 && o.attrs.contains("split")) {
      // Segmented: each device splits its share of every segment.
      std::vector<int64_t> sizes = o.GetInts("split");
      for (int64_t& v : sizes) v /= c.output_degrees[axis];
      attrs["split"] = std::move(sizes);
    }
  }
  return attrs;
}

absl::StatusOr<Graph> ShardGraph(const Graph& g, OpId op, const ParallelConfig& c) {
  ASSIGN_OR_RETURN(OpLayouts l, ConfigLayouts(g, op, c));
  const graph::Op& o = g.op(op);
  Graph s(absl::StrCat(g.name(), ".", o.name, ".shard"));
  std::map<TensorId, TensorId> ids;
  std::vector<TensorId> ins;
  for (size_t i = 0; i < o.inputs.size(); ++i) {
    auto it = ids.find(o.inputs[i]);
    if (it == ids.end()) {
      const graph::Tensor& t = g.tensor(o.inputs[i]);
      ASSIGN_OR_RETURN(std::vector<int64_t> piece, graph::PieceShape(l.inputs[i]));
      // An activation without its producer is a graph input of the shard.
      const graph::TensorRole role = t.role == graph::TensorRole::kActivation
                                         ? graph::TensorRole::kInput
                                         : t.role;
      it = ids.emplace(o.inputs[i], s.AddTensor(t.name, std::move(piece), t.dtype, role)).first;
    }
    ins.push_back(it->second);
  }
  std::vector<TensorId> ys;
  for (size_t k = 0; k < o.outputs.size(); ++k) {
    const graph::Tensor& out = g.tensor(o.outputs[k]);
    ASSIGN_OR_RETURN(std::vector<int64_t> piece, graph::PieceShape(l.outputs[k]));
    ys.push_back(s.AddTensor(out.name, std::move(piece), out.dtype, graph::TensorRole::kActivation));
  }
  graph::Attrs attrs = PieceAttrs(g, op, c);
  OpId id = s.AddOp(o.name, o.type, ins, ys, std::move(attrs), o.phase);
  for (TensorId y : ys) s.AddOutput(y);
  graph::AnnotateCost(s, id);
  return s;
}

absl::StatusOr<costmodel::OpTime> OpTimeUnderConfig(costmodel::CostModel& cm, const Graph& g,
                                                    OpId op, const ParallelConfig& c) {
  ASSIGN_OR_RETURN(Graph s, ShardGraph(g, op, c));
  return cm.ComputeTime(s, OpId{0});
}

absl::StatusOr<Transition> LayoutTransition(const ParallelTensorShape& from,
                                            const ParallelTensorShape& to,
                                            ReplicaKind from_replicas) {
  RETURN_IF_ERROR(graph::ValidateParallelShape(from));
  RETURN_IF_ERROR(graph::ValidateParallelShape(to));
  if (graph::LogicalShape(from) != graph::LogicalShape(to) || from.dtype != to.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout transition between different tensors: ",
                     graph::ParallelShapeString(from), " -> ", graph::ParallelShapeString(to)));
  }
  Transition t{from, {}};
  ParallelTensorShape cur = from;
  std::vector<ParallelOp>& ops = t.ops;
  const int n = from.num_dims();
  if (from_replicas == ReplicaKind::kPartialSums && from.replica_degree > 1) {
    const int r = from.replica_degree;
    ops.push_back(ParallelOp::Reduce(r));
    cur.replica_degree = 1;
    // Fuse with the next step where there is one of the same degree:
    // a Partition (ReduceScatter) or, when no dim changes, a Replicate (AllReduce).
    bool fused = false;
    for (int d = 0; d < n && !fused; ++d) {
      if (to.dims[d].degree == cur.dims[d].degree * r) {
        ops.push_back(ParallelOp::Partition(d, r));
        cur.dims[d].degree *= r;
        fused = true;
      }
    }
    if (!fused && cur.dims == to.dims && to.replica_degree % r == 0) {
      ops.push_back(ParallelOp::Replicate(r));
      cur.replica_degree = r;
    }
  } else if (from.replica_degree > 1) {
    // Copies the target does not keep are dropped where they lie.
    const int keep = std::gcd(from.replica_degree, to.replica_degree);
    t.start.replica_degree = keep;
    cur.replica_degree = keep;
  }
  for (int d = 0; d < n; ++d) {
    const int have = cur.dims[d].degree;
    const int want = to.dims[d].degree;
    const int common = std::gcd(have, want);
    if (have / common > 1) {
      ops.push_back(ParallelOp::Combine(d, have / common));
      cur.dims[d].degree = common;
    }
  }
  for (int d = 0; d < n; ++d) {
    const int have = cur.dims[d].degree;
    const int want = to.dims[d].degree;
    if (want > have) {
      ops.push_back(ParallelOp::Partition(d, want / have));
      cur.dims[d].degree = want;
    }
  }
  if (to.replica_degree != cur.replica_degree) {
    if (to.replica_degree % cur.replica_degree != 0) {
      return absl::InternalError(absl::StrCat("layout transition ",
                                              graph::ParallelShapeString(from), " -> ",
                                              graph::ParallelShapeString(to),
                                              ": replica degrees do not divide"));
    }
    ops.push_back(ParallelOp::Replicate(to.replica_degree / cur.replica_degree));
  }
  ASSIGN_OR_RETURN(ParallelTensorShape end, graph::ApplyParallelOps(ops, t.start));
  if (!(end == to)) {
    return absl::InternalError(absl::StrCat("layout transition reached ",
                                            graph::ParallelShapeString(end), " instead of ",
                                            graph::ParallelShapeString(to)));
  }
  return t;
}

absl::StatusOr<std::vector<costmodel::CollectiveStep>> TransitionComm(const Transition& t) {
  return costmodel::ParallelOpsComm(t.ops, t.start);
}

absl::StatusOr<double> TransitionTime(const costmodel::CommModel& comm, const Transition& t) {
  return costmodel::ParallelOpsCommTime(comm, t.ops, t.start);
}

absl::StatusOr<std::vector<GradSync>> WeightGradSync(const Graph& g, OpId op,
                                                     const ParallelConfig& c) {
  ASSIGN_OR_RETURN(OpLayouts l, ConfigLayouts(g, op, c));
  const graph::Op& o = g.op(op);
  std::vector<GradSync> out;
  for (size_t i = 0; i < o.inputs.size(); ++i) {
    const TensorId w = o.inputs[i];
    if (g.tensor(w).role != graph::TensorRole::kParameter) continue;
    if (std::any_of(out.begin(), out.end(), [&](const GradSync& s) { return s.weight == w; })) {
      continue;
    }
    const int r = l.inputs[i].replica_degree;
    if (r <= 1) continue;
    out.push_back(GradSync{w, Transition{l.inputs[i],
                                         {ParallelOp::Reduce(r), ParallelOp::Replicate(r)}}});
  }
  return out;
}

absl::StatusOr<double> WeightGradSyncTime(const costmodel::CommModel& comm, const Graph& g,
                                          OpId op, const ParallelConfig& c) {
  ASSIGN_OR_RETURN(std::vector<GradSync> syncs, WeightGradSync(g, op, c));
  double t = 0;
  for (const GradSync& s : syncs) {
    ASSIGN_OR_RETURN(double x, TransitionTime(comm, s.transition));
    t += x;
  }
  return t;
}

}  // namespace braid::search
