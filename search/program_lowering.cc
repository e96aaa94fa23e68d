#include "search/program_lowering.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/fingerprint.h"
#include "graph/ops.h"
#include "graph/parallel_shape.h"

namespace braid::search {
namespace {

using graph::Graph;
using graph::OpId;
using graph::OpKind;
using graph::TensorId;
using graph::TensorRole;

using Axes = std::vector<int>;

// Where a tensor's pieces sit on the mesh.
struct Placement {
  std::vector<Axes> dims;  // per dim: mesh axes, major first
  Axes partial;            // partial sums over these axes (outputs only)
  // Split dims held in segments (graph::LoadSpec::segments): dim -> count.
  std::map<int, int64_t> segments;

  bool operator==(const Placement&) const = default;
  std::string Key() const {
    std::string s;
    for (const Axes& a : dims) absl::StrAppend(&s, "[", absl::StrJoin(a, ","), "]");
    if (!partial.empty()) absl::StrAppend(&s, "p", absl::StrJoin(partial, ","));
    for (const auto& [d, n] : segments) absl::StrAppend(&s, "s", d, ":", n);
    return s;
  }
  // LoadSpec::segments: one count per dim, or empty when none is segmented.
  std::vector<int64_t> SegmentsPerDim() const {
    if (segments.empty()) return {};
    std::vector<int64_t> out(dims.size(), 1);
    for (const auto& [d, n] : segments) out[static_cast<size_t>(d)] = n;
    return out;
  }
};

std::vector<int> PrimeFactors(int n) {
  std::vector<int> f;
  for (int p = 2; p * p <= n; ++p) {
    while (n % p == 0) {
      f.push_back(p);
      n /= p;
    }
  }
  if (n > 1) f.push_back(n);
  return f;
}

// The mesh of a set of views: axes are prime factors of the segments between
// consecutive boundaries (the model degrees m of the views), major first.
struct Mesh {
  std::vector<int> sizes;   // major first
  std::vector<int> stride;  // product of the sizes after each axis
  int world = 1;

  // Axes with stride < m (product m): the model part of a view.
  Axes ModelAxes(int m) const {
    Axes a;
    for (size_t i = 0; i < sizes.size(); ++i)
      if (stride[i] < m) a.push_back(static_cast<int>(i));
    return a;
  }
  Axes DataAxes(int m) const {
    Axes a;
    for (size_t i = 0; i < sizes.size(); ++i)
      if (stride[i] >= m) a.push_back(static_cast<int>(i));
    return a;
  }
  int64_t Product(const Axes& a) const {
    int64_t p = 1;
    for (int x : a) p *= sizes[x];
    return p;
  }
};

absl::StatusOr<Mesh> MakeMesh(int world, const std::set<int>& model_degrees) {
  std::set<int> b = model_degrees;
  b.insert(1);
  b.insert(world);
  std::vector<int> bounds(b.begin(), b.end());  // ascending
  Mesh mesh;
  mesh.world = world;
  std::vector<int> minor_first;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    if (bounds[i + 1] % bounds[i] != 0) {
      return absl::UnimplementedError(absl::StrCat(
          "the plan's model degrees ", absl::StrJoin(model_degrees, ", "), " over ", world,
          " devices do not nest (", bounds[i], " does not divide ", bounds[i + 1],
          "): no one device mesh holds every op's view"));
    }
    for (int p : PrimeFactors(bounds[i + 1] / bounds[i])) minor_first.push_back(p);
  }
  mesh.sizes.assign(minor_first.rbegin(), minor_first.rend());
  mesh.stride.resize(mesh.sizes.size());
  int s = 1;
  for (int i = static_cast<int>(mesh.sizes.size()) - 1; i >= 0; --i) {
    mesh.stride[i] = s;
    s *= mesh.sizes[i];
  }
  return mesh;
}

// Takes from `avail` (in order) axes whose sizes multiply to `degree`.
std::optional<Axes> TakeAxes(const Mesh& mesh, Axes& avail, int64_t degree) {
  Axes got, rest;
  int64_t left = degree;
  for (int a : avail) {
    if (left > 1 && left % mesh.sizes[a] == 0) {
      got.push_back(a);
      left /= mesh.sizes[a];
    } else {
      rest.push_back(a);
    }
  }
  if (left != 1) return std::nullopt;
  avail = std::move(rest);
  return got;
}

constexpr int kNone = -1;
constexpr int kReduction = -2;

// Runs of a reshape: for each input dim that starts a run of equal element
// count, the output dim that starts the same run; other dims kNone.
std::vector<int> ReshapeRuns(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<int> map(in.size(), kNone);
  size_t i = 0, o = 0;
  while (i < in.size() && o < out.size()) {
    // Size-1 dims hold no split: skip them on both sides.
    if (in[i] == 1) { ++i; continue; }
    if (out[o] == 1) { ++o; continue; }
    const size_t i0 = i, o0 = o;
    int64_t pi = in[i++], po = out[o++];
    while (pi != po) {
      if (pi < po && i < in.size()) pi *= in[i++];
      else if (po < pi && o < out.size()) po *= out[o++];
      else break;
    }
    if (pi != po) break;
    map[i0] = static_cast<int>(o0);
  }
  return map;
}

// The output dim (or kReduction, kNone) input `i`'s dim `j` corresponds to.
int Correspond(const Graph& g, const graph::Op& op, int i, int j) {
  const std::vector<int64_t>& x = g.tensor(op.inputs[i]).shape;
  const std::vector<int64_t>& y = g.tensor(op.outputs[0]).shape;
  const int rx = static_cast<int>(x.size()), ry = static_cast<int>(y.size());
  auto aligned = [&]() {
    const int t = ry - rx + j;
    if (t < 0 || t >= ry) return kNone;
    if (x[j] == 1 && y[t] != 1) return kNone;
    return t;
  };
  switch (op.kind) {
    case OpKind::kMatMul: {
      if (rx < 2 || ry < 2) return kNone;
      if (i == 0) {
        if (j == rx - 1) return kReduction;
        if (j == rx - 2) return ry - 2;
        return aligned();
      }
      if (i == 1) {
        if (j == rx - 2) return kReduction;
        if (j == rx - 1) return ry - 1;
        return aligned();
      }
      return kNone;
    }
    case OpKind::kGemm: {
      const bool ta = op.GetInt("transA", 0) != 0, tb = op.GetInt("transB", 0) != 0;
      if (i == 0) return (j == 0) != ta ? 0 : kReduction;
      if (i == 1) return (j == 1) != tb ? 1 : kReduction;
      return aligned();
    }
    case OpKind::kTranspose: {
      std::vector<int64_t> perm = op.GetInts("perm");
      if (perm.empty()) {
        for (int k = rx - 1; k >= 0; --k) perm.push_back(k);
      }
      for (int t = 0; t < static_cast<int>(perm.size()); ++t)
        if (perm[t] == j) return t;
      return kNone;
    }
    case OpKind::kReshape:
    case OpKind::kFlatten:
    case OpKind::kSqueeze:
    case OpKind::kUnsqueeze:
      if (i != 0) return kNone;
      return ReshapeRuns(x, y)[j];
    case OpKind::kConv:
      if (i == 0) {
        if (j == 0) return 0;
        if (j == 1) return kReduction;  // C_in; a channel split of a grouped conv: see below
        return j;
      }
      if (i == 1) return j == 0 ? 1 : (j == 1 ? kReduction : kNone);
      return 1;  // bias
    case OpKind::kBatchNormalization:
      if (i == 0) return j;
      return 1;
    case OpKind::kLayerNormalization:
      if (i == 0) return j;
      return aligned();
    case OpKind::kGather: {
      int64_t axis = op.GetInt("axis", 0);
      if (axis < 0) axis += rx;
      if (i == 0) {
        if (j < axis) return j;
        if (j == axis) return kReduction;
        const int ri = static_cast<int>(g.tensor(op.inputs[1]).shape.size());
        return j + ri - 1;
      }
      return static_cast<int>(axis) + j;
    }
    case OpKind::kReduceSum:
    case OpKind::kReduceMean:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kReduceSumSquare: {
      if (i != 0) return kNone;
      if (op.GetInt("keepdims", 1) != 0) return j;
      std::vector<int64_t> axes = op.GetInts("axes");
      for (int64_t& a : axes)
        if (a < 0) a += rx;
      if (std::find(axes.begin(), axes.end(), j) != axes.end()) return kNone;
      int t = 0;
      for (int k = 0; k < j; ++k)
        if (std::find(axes.begin(), axes.end(), k) == axes.end()) ++t;
      return t;
    }
    default:
      return aligned();
  }
}

std::vector<int64_t> PieceOf(const Mesh& mesh, const std::vector<int64_t>& full,
                             const Placement& p) {
  std::vector<int64_t> s = full;
  for (size_t d = 0; d < s.size(); ++d) s[d] /= mesh.Product(p.dims[d]);
  return s;
}

class Lowerer {
 public:
  Lowerer(const Graph& fwd, const Mesh& mesh, graph::Program& prog)
      : fwd_(fwd), mesh_(mesh), prog_(prog), g_(absl::StrCat(fwd.name(), ".program")) {}

  Graph& graph() { return g_; }

  // The per-device tensor holding forward tensor `t` in placement `want`.
  absl::StatusOr<TensorId> Need(TensorId t, const Placement& want, const graph::Op& reader) {
    const graph::Tensor& src = fwd_.tensor(t);
    if (auto it = avail_.find({t, want.Key()}); it != avail_.end()) return it->second;
    if (src.producer == graph::kNoId) {
      // Loaded: parameters once (one gradient each), other tensors per placement.
      if (src.role != TensorRole::kParameter || !held_.contains(t)) {
        std::string name = src.name;
        if (loaded_names_.contains(name)) name = absl::StrCat(src.name, "@", ++counter_);
        loaded_names_.insert(name);
        TensorId id = g_.AddTensor(name, PieceOf(mesh_, src.shape, want), src.dtype, src.role);
        graph::LoadSpec l;
        l.source = src.name;
        l.full_shape = src.shape;
        l.dim_axes = want.dims;
        l.segments = want.SegmentsPerDim();
        Init(t, reader, l);
        prog_.loads[name] = std::move(l);
        avail_[{t, want.Key()}] = id;
        if (!held_.contains(t)) held_[t] = {id, want};
        return id;
      }
    }
    auto h = held_.find(t);
    if (h == held_.end()) {
      return absl::InternalError(absl::StrCat("lowering: ", src.name, " read before it is made"));
    }
    ASSIGN_OR_RETURN(TensorId id, Redistribute(src, h->second.id, h->second.placement, want));
    avail_[{t, want.Key()}] = id;
    return id;
  }

  void Produced(TensorId t, TensorId id, const Placement& p) {
    held_[t] = {id, p};
    if (p.partial.empty()) avail_[{t, p.Key()}] = id;
  }


  // An AllReduce (dim < 0, over `axes`) or AllGather (of `axes` along dim)
  // of `in`, with the attributes graph/program.h names.
  TensorId AddCollective(const graph::Tensor& src, TensorId in, const std::string& type,
                         std::vector<int64_t> shape, const Axes& axes, int64_t dim) {
    const std::string name = absl::StrCat(src.name, ".", type, ".", ++counter_);
    TensorId y = g_.AddTensor(name, std::move(shape), src.dtype, TensorRole::kActivation);
    graph::Attrs a = {{"mesh_axes", std::vector<int64_t>(axes.begin(), axes.end())},
                      {"group_size", mesh_.Product(axes)},
                      {"comm_time_s", 0.0}};
    if (dim >= 0) a["dim"] = dim;
    if (type == "AllReduce") a["reduce"] = std::string("sum");
    OpId op = g_.AddOp(name, std::string(type), {in}, {y}, std::move(a), graph::Phase::kForward);
    graph::AnnotateCost(g_, op);
    return y;
  }

  absl::StatusOr<Placement> HeldPlacement(TensorId t) const {
    auto h = held_.find(t);
    if (h == held_.end()) return absl::InternalError("lowering: output not made");
    return h->second.placement;
  }

 private:
  struct Held {
    TensorId id = graph::kNoId;
    Placement placement;
  };

  // How the full value of a loaded tensor is made, from how it is read.
  void Init(TensorId t, const graph::Op& reader, graph::LoadSpec& l) {
    const graph::Tensor& x = fwd_.tensor(t);
    if (!x.value.empty()) {
      l.init = graph::InitKind::kValue;
      l.values = x.value;
      return;
    }
    int slot = 0;
    for (size_t k = 0; k < reader.inputs.size(); ++k)
      if (reader.inputs[k] == t) { slot = static_cast<int>(k); break; }
    const bool integer = x.dtype == graph::DType::kI64 || x.dtype == graph::DType::kI32;
    if (integer) {
      l.init = graph::InitKind::kIntegers;
      l.high = 2;
      if (reader.kind == OpKind::kGather && slot == 1) {
        int64_t axis = reader.GetInt("axis", 0);
        const std::vector<int64_t>& ds = fwd_.tensor(reader.inputs[0]).shape;
        if (axis < 0) axis += static_cast<int64_t>(ds.size());
        if (axis >= 0 && axis < static_cast<int64_t>(ds.size())) l.high = std::max<int64_t>(1, ds[axis]);
      }
      l.per_step = x.role == TensorRole::kInput;
      return;
    }
    if (x.role == TensorRole::kInput) {
      l.init = graph::InitKind::kNormal;
      l.per_step = true;
      return;
    }
    const bool norm = graph::IsOneOf(reader.kind, {OpKind::kLayerNormalization,
                                                   OpKind::kBatchNormalization,
                                                   OpKind::kInstanceNormalization,
                                                   OpKind::kGroupNormalization});
    if (norm && slot >= 1) {
      // scale, bias; BatchNorm's running mean and variance.
      l.init = (slot == 1 || slot == 4) ? graph::InitKind::kOnes : graph::InitKind::kZeros;
      return;
    }
    if (x.role == TensorRole::kConstant) {
      l.init = graph::InitKind::kNormal;
      return;
    }
    int64_t fan_in = 1;
    const std::vector<int64_t>& s = x.shape;
    const int64_t numel = std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
    if (s.size() <= 1) {
      fan_in = std::max<int64_t>(1, numel);
    } else if (reader.kind == OpKind::kMatMul && slot == 1) {
      fan_in = s[s.size() - 2];
    } else if (reader.kind == OpKind::kGemm && slot == 1) {
      fan_in = reader.GetInt("transB", 0) != 0 ? s[1] : s[0];
    } else if (reader.kind == OpKind::kGather) {
      fan_in = 1;
    } else {
      fan_in = std::max<int64_t>(1, numel / std::max<int64_t>(1, s[0]));
    }
    l.init = graph::InitKind::kUniform;
    l.bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  }

  absl::StatusOr<TensorId> Redistribute(const graph::Tensor& src, TensorId id, Placement from,
                                        const Placement& to) {
    if (!to.partial.empty()) return absl::InternalError("lowering: a read of partial sums");
    // A segmented dim keeps its axes: other dims may be gathered or sliced
    // (each rank's segmented dim stays laid out alike), it may not.
    bool segments_kept = from.segments == to.segments;
    for (const auto& [d, n] : from.segments) {
      segments_kept = segments_kept && static_cast<size_t>(d) < from.dims.size() &&
                      static_cast<size_t>(d) < to.dims.size() && from.dims[d] == to.dims[d];
    }
    if (!segments_kept) {
      return absl::UnimplementedError(absl::StrCat(
          "lowering: ", src.name, " is held in segments (", from.Key(), ") and read as ", to.Key(),
          "; a segmented dim is never redistributed"));
    }
    if (from.dims.size() != to.dims.size()) {
      return absl::InternalError(absl::StrCat("lowering: ", src.name, " changes rank"));
    }
    std::vector<int64_t> shape = g_.tensor(id).shape;
    if (!from.partial.empty()) {
      id = AddCollective(src, id, "AllReduce", shape, from.partial, -1);
      from.partial.clear();
    }
    const size_t r = from.dims.size();
    std::vector<size_t> keep(r);
    for (size_t d = 0; d < r; ++d) {
      size_t k = 0;
      while (k < from.dims[d].size() && k < to.dims[d].size() && from.dims[d][k] == to.dims[d][k]) ++k;
      keep[d] = k;
    }
    // An axis the target puts on a dim must be free: gather it off any dim
    // that keeps it.
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t d = 0; d < r; ++d) {
        for (size_t k = keep[d]; k < to.dims[d].size(); ++k) {
          const int a = to.dims[d][k];
          for (size_t e = 0; e < r; ++e) {
            auto it = std::find(from.dims[e].begin(), from.dims[e].begin() + keep[e], a);
            if (it != from.dims[e].begin() + keep[e]) {
              keep[e] = static_cast<size_t>(it - from.dims[e].begin());
              changed = true;
            }
          }
        }
      }
    }
    for (size_t d = 0; d < r; ++d) {
      for (size_t k = from.dims[d].size(); k-- > keep[d];) {
        const int a = from.dims[d][k];
        shape[d] *= mesh_.sizes[a];
        id = AddCollective(src, id, "AllGather", shape, {a}, static_cast<int64_t>(d));
      }
    }
    for (size_t d = 0; d < r; ++d) {
      if (keep[d] >= to.dims[d].size()) continue;
      const Axes fresh(to.dims[d].begin() + keep[d], to.dims[d].end());
      const int64_t n = mesh_.Product(fresh);
      if (shape[d] % n != 0) {
        return absl::InternalError(absl::StrCat("lowering: ", src.name, " dim ", d, " of ",
                                                shape[d], " does not split ", n, " ways"));
      }
      shape[d] /= n;
      const std::string name = absl::StrCat(src.name, ".shard.", ++counter_);
      TensorId y = g_.AddTensor(name, shape, src.dtype, TensorRole::kActivation);
      OpId op = g_.AddOp(name, "Slice", {id}, {y},
                         {{"starts", std::vector<int64_t>{0}},
                          {"ends", std::vector<int64_t>{shape[d]}},
                          {"axes", std::vector<int64_t>{static_cast<int64_t>(d)}},
                          {"shard_axes", std::vector<int64_t>(fresh.begin(), fresh.end())}},
                         graph::Phase::kForward);
      graph::AnnotateCost(g_, op);
      id = y;
    }
    return id;
  }

  const Graph& fwd_;
  const Mesh& mesh_;
  graph::Program& prog_;
  Graph g_;
  std::map<TensorId, Held> held_;
  std::map<std::pair<TensorId, std::string>, TensorId> avail_;
  std::set<std::string> loaded_names_;
  int counter_ = 0;
};

// Axes of one op: its output dims, its partial sums, and per input dim.
struct OpAxes {
  Placement out;               // output 0
  std::vector<Placement> outs; // every output (outs[0] == out)
  std::vector<Placement> in;
  // A Split on its own axis (a segmented layout): the input is gathered
  // whole along the axis, split, and each output sliced to its piece.
  bool segmented_split = false;
};

absl::StatusOr<OpAxes> AssignAxes(const Graph& fwd, const Mesh& mesh, const OpParallelization& p) {
  const graph::Op& op = fwd.op(p.op);
  const OpLayouts& l = p.layouts;
  const int d = p.data_degree;
  const int m = mesh.world / std::max(1, d);
  auto fail = [&](const std::string& why) {
    return absl::UnimplementedError(absl::StrCat(
        "lowering: op ", op.name, " (", op.type, ") under ", ParallelConfigString(p.config),
        (p.opaque ? " (opaque fallback)" : ""), ": ", why));
  };
  OpAxes a;
  Axes model = mesh.ModelAxes(m);
  const Axes data = mesh.DataAxes(m);
  a.out.dims.resize(l.output.dims.size());
  for (size_t j = 0; j < l.output.dims.size(); ++j) {
    const int k = l.output.dims[j].degree;
    if (k == 1) continue;
    if (j == 0) {
      if (k != mesh.Product(data)) {
        return fail(absl::StrCat("output dim 0 has degree ", k, ", the view's data degree is ",
                                 mesh.Product(data)));
      }
      a.out.dims[0] = data;
      continue;
    }
    std::optional<Axes> got = TakeAxes(mesh, model, k);
    if (!got) return fail(absl::StrCat("output dim ", j, " degree ", k, " fits no model axes"));
    a.out.dims[j] = *got;
  }
  Axes reduction;
  if (p.config.reduction_degree > 1) {
    std::optional<Axes> got = TakeAxes(mesh, model, p.config.reduction_degree);
    if (!got) return fail("its reduction degree fits no model axes");
    reduction = *got;
    if (l.output_partial_sums) a.out.partial = reduction;
  }
  // Outputs after the first: the same dims as output 0 where the ranks
  // agree (a Split's pieces, Dropout's mask), else BatchNormalization's
  // per-channel statistics on output 0's channel dim.
  a.outs.push_back(a.out);
  for (size_t k = 1; k < l.outputs.size(); ++k) {
    const graph::ParallelTensorShape& o = l.outputs[k];
    Placement pk;
    pk.dims.resize(o.dims.size());
    for (size_t j = 0; j < o.dims.size(); ++j) {
      if (o.dims[j].degree == 1) continue;
      size_t t = j;
      if (o.dims.size() != a.out.dims.size()) {
        t = op.kind == OpKind::kBatchNormalization ? 1 : a.out.dims.size() - o.dims.size() + j;
      }
      if (t >= a.out.dims.size() || mesh.Product(a.out.dims[t]) != o.dims[j].degree) {
        return fail(absl::StrCat("output ", k, " dim ", j, " corresponds to no split of output 0"));
      }
      pk.dims[j] = a.out.dims[t];
    }
    a.outs.push_back(std::move(pk));
  }
  int64_t split_axis = -1;
  if (op.kind == OpKind::kSplit && !l.inputs.empty()) {
    split_axis = op.GetInt("axis", 0);
    if (split_axis < 0) split_axis += static_cast<int64_t>(l.inputs[0].dims.size());
    a.segmented_split = split_axis >= 0 &&
                        split_axis < static_cast<int64_t>(l.inputs[0].dims.size()) &&
                        l.inputs[0].dims[split_axis].degree > 1;
  }
  for (size_t i = 0; i < l.inputs.size(); ++i) {
    Placement in;
    in.dims.resize(l.inputs[i].dims.size());
    for (size_t j = 0; j < l.inputs[i].dims.size(); ++j) {
      const int k = l.inputs[i].dims[j].degree;
      if (k == 1) continue;
      if (a.segmented_split && i == 0 && static_cast<int64_t>(j) == split_axis) continue;
      int t = Correspond(fwd, op, static_cast<int>(i), static_cast<int>(j));
      // A grouped conv's channel split takes the input channels along.
      if (op.kind == OpKind::kConv && i == 0 && j == 1 && p.config.reduction_degree == 1) t = 1;
      Axes axes;
      if (t == kReduction) axes = reduction;
      else if (t >= 0 && t < static_cast<int>(a.out.dims.size())) axes = a.out.dims[t];
      if (mesh.Product(axes) != k) {
        return fail(absl::StrCat("input ", i, " dim ", j, " (degree ", k,
                                 ") corresponds to no output dim or reduction of that degree"));
      }
      in.dims[j] = axes;
    }
    a.in.push_back(std::move(in));
  }
  return a;
}

// Restates attributes that give a full size along a split dim.
// A fused projection split into equal segments: a column-parallel MatMul
// (or Gemm), bias Adds, then a Split on the same dim (GPT-2's c_attn into q,
// k and v). Holding that dim in segments (graph::LoadSpec::segments) gives
// each rank its share of every segment (its heads of q, k and v), so the
// Split runs on the rank's piece with no gather. Per forward tensor on such a
// chain: the segmented dim and the segment count; and the Splits that run
// locally.
struct SegmentedChains {
  std::map<TensorId, std::pair<int, int64_t>> tensors;
  std::set<OpId> local_splits;
};

SegmentedChains FindSegmentedChains(const Graph& fwd, const Mesh& mesh,
                                    const std::map<OpId, const OpParallelization*>& by_op) {
  SegmentedChains out;
  auto is_param = [&](TensorId t) {
    const graph::Tensor& x = fwd.tensor(t);
    return x.producer == graph::kNoId && x.role == TensorRole::kParameter && x.consumers.size() == 1;
  };
  auto is_output = [&](TensorId t) {
    return std::find(fwd.outputs().begin(), fwd.outputs().end(), t) != fwd.outputs().end();
  };
  for (OpId sid = 0; sid < fwd.num_ops(); ++sid) {
    const graph::Op& split = fwd.op(sid);
    auto cfg = by_op.find(sid);
    if (split.kind != OpKind::kSplit || cfg == by_op.end() || split.inputs.empty()) continue;
    const OpParallelization& sp = *cfg->second;
    const int rank = static_cast<int>(fwd.tensor(split.inputs[0]).shape.size());
    int axis = static_cast<int>(split.GetInt("axis", 0));
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank || sp.layouts.inputs.empty() ||
        sp.layouts.inputs[0].dims[axis].degree <= 1) {
      continue;
    }
    const int64_t segs = static_cast<int64_t>(split.outputs.size());
    bool equal = segs > 1;
    for (TensorId o : split.outputs)
      equal = equal && fwd.tensor(o).shape[axis] * segs == fwd.tensor(split.inputs[0]).shape[axis];
    if (!equal) continue;
    // Walk back from the Split's input to the projection.
    std::vector<std::pair<TensorId, int>> chain;  // tensors and their segmented dim
    std::vector<OpId> ops;
    TensorId cur = split.inputs[0];
    int dim = axis;
    bool found = false;
    for (int step = 0; step < 8 && !found; ++step) {
      const graph::Tensor& t = fwd.tensor(cur);
      if (t.consumers.size() != 1 || is_output(cur) || t.producer == graph::kNoId) break;
      const graph::Op& p = fwd.op(t.producer);
      const int tr = static_cast<int>(t.shape.size());
      chain.push_back({cur, dim});
      ops.push_back(t.producer);
      if (p.kind == OpKind::kAdd && p.inputs.size() == 2) {
        const int pi = is_param(p.inputs[0]) ? 0 : is_param(p.inputs[1]) ? 1 : -1;
        if (pi < 0) break;
        const TensorId bias = p.inputs[pi], other = p.inputs[1 - pi];
        const int bd = dim - (tr - static_cast<int>(fwd.tensor(bias).shape.size()));
        const int od = dim - (tr - static_cast<int>(fwd.tensor(other).shape.size()));
        if (bd < 0 || od < 0 || fwd.tensor(bias).shape[bd] != t.shape[dim] ||
            fwd.tensor(other).shape[od] != t.shape[dim]) {
          break;
        }
        chain.push_back({bias, bd});
        cur = other;
        dim = od;
        continue;
      }
      // The weight [K, N] of a MatMul: a parameter, or (as exporters write
      // nn.Linear) the transpose of a parameter [N, K].
      auto transposed_param = [&](TensorId w) -> OpId {
        const graph::Tensor& x = fwd.tensor(w);
        if (x.producer == graph::kNoId || x.consumers.size() != 1 || x.shape.size() != 2) return graph::kNoId;
        const graph::Op& tp = fwd.op(x.producer);
        if (tp.kind != OpKind::kTranspose || tp.GetInts("perm") != std::vector<int64_t>{1, 0} ||
            !is_param(tp.inputs[0])) {
          return graph::kNoId;
        }
        return x.producer;
      };
      if (p.kind == OpKind::kMatMul && p.inputs.size() == 2 && dim == tr - 1 &&
          fwd.tensor(p.inputs[1]).shape.size() == 2) {
        if (is_param(p.inputs[1])) {
          chain.push_back({p.inputs[1], 1});
          found = true;
        } else if (OpId tp = transposed_param(p.inputs[1]); tp != graph::kNoId) {
          chain.push_back({p.inputs[1], 1});
          chain.push_back({fwd.op(tp).inputs[0], 0});
          ops.push_back(tp);
          found = true;
        }
      } else if (p.kind == OpKind::kGemm && dim == 1 && p.inputs.size() >= 2 && is_param(p.inputs[1]) &&
                 p.GetInt("transA", 0) == 0) {
        chain.push_back({p.inputs[1], p.GetInt("transB", 0) != 0 ? 0 : 1});
        if (p.inputs.size() == 3) {
          const graph::Tensor& c = fwd.tensor(p.inputs[2]);
          if (!is_param(p.inputs[2]) || c.shape.empty() || c.shape.back() != t.shape[1]) break;
          chain.push_back({p.inputs[2], static_cast<int>(c.shape.size()) - 1});
        }
        found = true;
      }
      if (!found) break;
    }
    if (!found) continue;
    // The chain's ops must split that dim over the same axes as the Split's
    // outputs: what each op's placement assigns.
    absl::StatusOr<OpAxes> sa = AssignAxes(fwd, mesh, sp);
    if (!sa.ok() || sa->outs.empty() || sa->outs[0].dims[axis].empty()) continue;
    const Axes want = sa->outs[0].dims[axis];
    bool agree = true;
    for (size_t k = 0; k < ops.size() && agree; ++k) {
      auto c = by_op.find(ops[k]);
      if (c == by_op.end()) { agree = false; break; }
      absl::StatusOr<OpAxes> oa = AssignAxes(fwd, mesh, *c->second);
      const graph::Op& o = fwd.op(ops[k]);
      if (!oa.ok()) { agree = false; break; }
      for (const auto& [t, d] : chain) {
        if (fwd.tensor(t).producer == ops[k] && oa->out.dims[d] != want) agree = false;
        for (size_t i = 0; i < o.inputs.size(); ++i)
          if (o.inputs[i] == t && oa->in[i].dims[d] != want) agree = false;
      }
    }
    if (!agree) continue;
    for (const auto& [t, d] : chain) out.tensors[t] = {d, segs};
    out.local_splits.insert(sid);
  }
  return out;
}

absl::Status RestateAttrs(const graph::Op& op, const std::vector<int64_t>& out_piece,
                          const OpAxes& axes, graph::Attrs& attrs) {
  if (op.kind == OpKind::kReshape) {
    attrs["shape"] = out_piece;
    return absl::OkStatus();
  }
  if (op.kind == OpKind::kExpand) {
    attrs["shape"] = out_piece;
    return absl::OkStatus();
  }
  const bool split_somewhere = std::any_of(axes.out.dims.begin(), axes.out.dims.end(),
                                           [](const Axes& a) { return !a.empty(); });
  if (!split_somewhere) return absl::OkStatus();
  if (graph::IsOneOf(op.kind, {OpKind::kSlice, OpKind::kPad, OpKind::kTile,
                               OpKind::kConstantOfShape, OpKind::kRange})) {
    // Their attributes index the full tensor; a split dim they touch would
    // need rank offsets. Allowed only when they leave the split dims alone.
    std::vector<int64_t> touched = op.GetInts("axes");
    const std::vector<int64_t> pads = op.GetInts("pads");
    const size_t r = axes.out.dims.size();
    for (size_t j = 0; j < axes.out.dims.size(); ++j) {
      if (axes.out.dims[j].empty()) continue;
      // A Pad that leaves the split dim alone pads each piece alike.
      if (op.kind == OpKind::kPad && pads.size() == 2 * r && pads[j] == 0 && pads[j + r] == 0) continue;
      if (op.kind != OpKind::kSlice ||
          std::find(touched.begin(), touched.end(), static_cast<int64_t>(j)) != touched.end() ||
          touched.empty()) {
        return absl::UnimplementedError(absl::StrCat(
            "lowering: op ", op.name, " (", op.type, ") with a split dim ", j,
            ": its attributes index the full tensor"));
      }
    }
  }
  return absl::OkStatus();
}

// The plan's fusion groups that the program can run as groups: every
// member a compute op of the program's graph, in no earlier group, and the
// groups so far still schedulable (graph::ScheduleNodes); the others are
// left out (their ops run one by one).
void ProgramGroups(graph::Program& prog, const std::vector<std::vector<std::string>>& plan) {
  std::map<std::string, const graph::Op*> by_name;
  for (const graph::Op& op : prog.graph.ops()) by_name[op.name] = &op;
  std::set<std::string> taken;
  for (const std::vector<std::string>& group : plan) {
    bool ok = group.size() > 1;
    for (const std::string& n : group) {
      auto it = by_name.find(n);
      const graph::OpCategory c = it == by_name.end() ? graph::OpCategory::kOpaque
                                                      : graph::CategoryOf(it->second->kind);
      ok = ok && it != by_name.end() && !taken.contains(n) && c != graph::OpCategory::kCollective &&
           c != graph::OpCategory::kUpdate;
    }
    if (!ok) continue;
    prog.groups.push_back(group);
    if (!graph::ScheduleNodes(prog).ok()) {
      prog.groups.pop_back();
      continue;
    }
    taken.insert(group.begin(), group.end());
  }
}

// The plan's gradient buckets (gradient tensor names) as the program's:
// each bucket's gradient AllReduces that reduce over some mesh axis (an
// AllReduce over none is an identity), split where their groups or dtypes
// differ; a bucket of one stays a plain AllReduce.
std::vector<std::vector<std::string>> ProgramBuckets(
    const Graph& train, const std::vector<std::vector<std::string>>& plan) {
  std::map<std::string, const graph::Op*> by_grad;
  for (const graph::Op& op : train.ops()) {
    if (op.kind != OpKind::kAllReduce || op.inputs.size() != 1 || op.GetInts("mesh_axes").empty())
      continue;
    const graph::Tensor& in = train.tensor(op.inputs[0]);
    if (in.role == TensorRole::kGradient) by_grad[in.name] = &op;
  }
  std::vector<std::vector<std::string>> out;
  for (const std::vector<std::string>& bucket : plan) {
    std::map<std::pair<std::vector<int64_t>, graph::DType>, std::vector<std::string>> parts;
    std::vector<std::pair<std::vector<int64_t>, graph::DType>> order;
    for (const std::string& grad : bucket) {
      auto it = by_grad.find(grad);
      if (it == by_grad.end()) continue;
      const auto key = std::make_pair(it->second->GetInts("mesh_axes"),
                                      train.tensor(it->second->inputs[0]).dtype);
      if (!parts.contains(key)) order.push_back(key);
      parts[key].push_back(it->second->name);
    }
    for (const auto& key : order)
      if (parts[key].size() > 1) out.push_back(std::move(parts[key]));
  }
  return out;
}

absl::StatusOr<graph::Program> Lower(const Graph& forward, const std::vector<OpParallelization>& ops,
                                     const Mesh& mesh, const LoweringOptions& options) {
  graph::Program prog;
  prog.model = forward.name();
  prog.mesh = mesh.sizes;
  prog.seed = options.seed;
  prog.row = options.row;
  ASSIGN_OR_RETURN(prog.model_fingerprint, graph::FingerprintHex(forward));

  std::map<OpId, const OpParallelization*> by_op;
  for (const OpParallelization& o : ops) by_op[o.op] = &o;
  ASSIGN_OR_RETURN(std::vector<OpId> order, forward.TopologicalOrder());
  Lowerer b(forward, mesh, prog);
  Graph& g = b.graph();
  const SegmentedChains chains = FindSegmentedChains(forward, mesh, by_op);
  std::map<TensorId, int> out_data_view;  // graph output -> its producer's model degree
  for (OpId id : order) {
    if ((id & 1023) == 0 && options.stop.StopRequested()) return options.stop.ToStatus("lowering");
    const graph::Op& op = forward.op(id);
    auto it = by_op.find(id);
    if (it == by_op.end()) {
      return absl::InvalidArgumentError(absl::StrCat("the plan has no config for op ", op.name));
    }
    const OpParallelization& p = *it->second;
    if (p.num_devices > 0) {
      return absl::UnimplementedError(absl::StrCat(
          "lowering: op ", op.name, " runs side by side with other strands on ", p.num_devices,
          " devices; strand plans have no per-device program yet"));
    }
    if (p.layouts.outputs.size() != op.outputs.size() && op.outputs.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("op ", op.name, ": no layout per output"));
    }
    if (p.layouts.inputs.size() != op.inputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("op ", op.name, ": no layouts"));
    }
    ASSIGN_OR_RETURN(OpAxes axes, AssignAxes(forward, mesh, p));
    // Segmented chains (FindSegmentedChains): the dims they hold in segments.
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      if (auto c = chains.tensors.find(op.inputs[i]); c != chains.tensors.end()) {
        axes.in[i].segments[c->second.first] = c->second.second;
      }
    }
    if (auto c = chains.tensors.find(op.outputs[0]); c != chains.tensors.end()) {
      axes.out.segments[c->second.first] = c->second.second;
      axes.outs[0].segments = axes.out.segments;
    }
    const bool local_split = chains.local_splits.contains(id);
    if (local_split) {
      const int ax = chains.tensors.at(op.inputs[0]).first;
      axes.segmented_split = false;
      axes.in[0].dims[ax] = axes.outs[0].dims[ax];
    }
    std::vector<TensorId> ins;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      ASSIGN_OR_RETURN(TensorId t, b.Need(op.inputs[i], axes.in[i], op));
      ins.push_back(t);
    }
    const graph::Tensor& y = forward.tensor(op.outputs[0]);
    const std::vector<int64_t> piece = PieceOf(mesh, y.shape, axes.out);
    graph::Attrs attrs = op.attrs;
    RETURN_IF_ERROR(RestateAttrs(op, piece, axes, attrs));
    // A grouped Conv's group count under a channel split (PieceAttrs).
    if (op.kind == OpKind::kConv || local_split) {
      for (const auto& [k, v] : PieceAttrs(forward, id, p.config)) attrs[k] = v;
    }
    if (op.kind == OpKind::kDropout) {
      // Dropout's mask is keyed by the element's index in the full output
      // (worker/runtime/cpu_backend.h), so each rank needs where its piece lies.
      std::vector<int64_t> piece_axes;
      for (const Axes& a : axes.out.dims) {
        piece_axes.insert(piece_axes.end(), a.begin(), a.end());
        piece_axes.push_back(-1);
      }
      attrs["global_shape"] = y.shape;
      attrs["piece_axes"] = std::move(piece_axes);
    }
    const bool bn_training = op.kind == OpKind::kBatchNormalization &&
                             (op.GetInt("training_mode", 0) != 0 || op.outputs.size() > 1);
    if (options.sync_batch_norm && bn_training && !axes.out.dims.empty() &&
        !axes.out.dims[0].empty()) {
      // SyncBN: batch statistics over the whole batch. Only Y may be read.
      for (size_t k = 1; k < op.outputs.size(); ++k) {
        const graph::Tensor& yk = forward.tensor(op.outputs[k]);
        const bool out = std::find(forward.outputs().begin(), forward.outputs().end(),
                                   op.outputs[k]) != forward.outputs().end();
        if (!yk.consumers.empty() || out) {
          return absl::UnimplementedError(absl::StrCat(
              "lowering: op ", op.name, " with synchronized statistics: its output ", k,
              " (running or saved statistics) is read"));
        }
      }
      const std::vector<int64_t> xs = g.tensor(ins[0]).shape;
      if (xs.size() < 2 || ins.size() < 3) {
        return absl::UnimplementedError(absl::StrCat("lowering: op ", op.name, ": not [N, C, ...]"));
      }
      std::vector<int64_t> red = {0}, stat(xs.size(), 1);
      for (size_t d = 2; d < xs.size(); ++d) red.push_back(static_cast<int64_t>(d));
      stat[1] = xs[1];
      int64_t count = mesh.Product(axes.out.dims[0]);
      for (int64_t d : red) count *= xs[d];
      const graph::DType dt = y.dtype;
      auto scalar = [&](const std::string& suffix, double v) {
        const std::string name = absl::StrCat(op.name, ".sync.", suffix);
        TensorId t = g.AddTensor(name, {}, dt, TensorRole::kConstant);
        graph::LoadSpec l;
        l.source = name;
        l.init = graph::InitKind::kValue;
        l.values = {v};
        prog.loads[name] = std::move(l);
        return t;
      };
      auto emit = [&](const std::string& suffix, const std::string& type, std::vector<TensorId> in,
                      std::vector<int64_t> shape, graph::Attrs attrs = {}) {
        const std::string name = absl::StrCat(op.name, ".sync.", suffix);
        TensorId t = g.AddTensor(name, std::move(shape), dt, TensorRole::kActivation);
        OpId o = g.AddOp(name, type, std::move(in), {t}, std::move(attrs), op.phase);
        graph::AnnotateCost(g, o);
        return t;
      };
      const graph::Attrs sum_attrs = {{"axes", red}, {"keepdims", int64_t{1}}};
      TensorId inv = scalar("inv_count", 1.0 / static_cast<double>(count));
      TensorId eps = scalar("epsilon", op.GetFloat("epsilon", 1e-5));
      TensorId s1 = emit("sum", "ReduceSum", {ins[0]}, stat, sum_attrs);
      s1 = b.AddCollective(y, s1, "AllReduce", stat, axes.out.dims[0], -1);
      TensorId mean = emit("mean", "Mul", {s1, inv}, stat);
      TensorId dx = emit("centered", "Sub", {ins[0], mean}, xs);
      TensorId sq = emit("squared", "Mul", {dx, dx}, xs);
      TensorId s2 = emit("sum_squares", "ReduceSum", {sq}, stat, sum_attrs);
      s2 = b.AddCollective(y, s2, "AllReduce", stat, axes.out.dims[0], -1);
      TensorId var = emit("var", "Mul", {s2, inv}, stat);
      TensorId sd = emit("std", "Sqrt", {emit("var_eps", "Add", {var, eps}, stat)}, stat);
      TensorId xn = emit("normalized", "Div", {dx, sd}, xs);
      TensorId sc = emit("scale", "Reshape", {ins[1]}, stat, {{"shape", stat}});
      TensorId bi = emit("bias", "Reshape", {ins[2]}, stat, {{"shape", stat}});
      TensorId scaled = emit("scaled", "Mul", {xn, sc}, xs);
      TensorId yid = g.AddTensor(y.name, piece, y.dtype, y.role);
      OpId add = g.AddOp(op.name, "Add", {scaled, bi}, {yid}, {}, op.phase);
      graph::AnnotateCost(g, add);
      b.Produced(op.outputs[0], yid, axes.out);
      out_data_view[op.outputs[0]] = mesh.world / std::max(1, p.data_degree);
      continue;
    }
    if (axes.segmented_split) {
      // Split whole along the axis, then each output sliced to this rank's
      // piece (rank-relative): exact for a segmented layout whose producer
      // is not a chain FindSegmentedChains holds in segments, at the price
      // of gathering the input.
      std::vector<TensorId> full_outs;
      const int64_t axis = [&] {
        int64_t ax = op.GetInt("axis", 0);
        return ax < 0 ? ax + static_cast<int64_t>(forward.tensor(op.inputs[0]).shape.size()) : ax;
      }();
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        const graph::Tensor& yk = forward.tensor(op.outputs[k]);
        Placement whole = axes.outs[k];
        whole.dims[axis].clear();
        full_outs.push_back(g.AddTensor(absl::StrCat(yk.name, ".whole"), PieceOf(mesh, yk.shape, whole),
                                        yk.dtype, TensorRole::kActivation));
      }
      OpId sid = g.AddOp(op.name, op.type, ins, full_outs, op.attrs, op.phase);
      graph::AnnotateCost(g, sid);
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        const graph::Tensor& yk = forward.tensor(op.outputs[k]);
        const std::vector<int64_t> pk = PieceOf(mesh, yk.shape, axes.outs[k]);
        TensorId yid = g.AddTensor(yk.name, pk, yk.dtype, yk.role);
        const std::vector<int>& sa = axes.outs[k].dims[axis];
        OpId sl = g.AddOp(absl::StrCat(yk.name, ".shard"), "Slice", {full_outs[k]}, {yid},
                          {{"starts", std::vector<int64_t>{0}},
                           {"ends", std::vector<int64_t>{pk[axis]}},
                           {"axes", std::vector<int64_t>{axis}},
                           {"shard_axes", std::vector<int64_t>(sa.begin(), sa.end())}},
                          op.phase);
        graph::AnnotateCost(g, sl);
        b.Produced(op.outputs[k], yid, axes.outs[k]);
        out_data_view[op.outputs[k]] = mesh.world / std::max(1, p.data_degree);
      }
      continue;
    }
    if (op.outputs.size() > 1) {
      std::vector<TensorId> outs;
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        const graph::Tensor& yk = forward.tensor(op.outputs[k]);
        outs.push_back(g.AddTensor(yk.name, PieceOf(mesh, yk.shape, axes.outs[k]), yk.dtype, yk.role));
      }
      OpId nid = g.AddOp(op.name, op.type, ins, outs, std::move(attrs), op.phase);
      g.mutable_op(nid).opaque = op.opaque;
      graph::AnnotateCost(g, nid);
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        b.Produced(op.outputs[k], outs[k], axes.outs[k]);
        out_data_view[op.outputs[k]] = mesh.world / std::max(1, p.data_degree);
      }
      continue;
    }
    if (op.kind == OpKind::kGemm && ins.size() == 3 && !axes.out.partial.empty()) {
      // A Gemm split on its contraction with a bias C: every rank's partial
      // sum would add C. The partial products are reduced first and C added
      // once, after the AllReduce (Megatron's row-parallel bias).
      if (op.GetFloat("beta", 1.0) != 1.0) {
        return absl::UnimplementedError(absl::StrCat(
            "lowering: op ", op.name, " (Gemm) split on its contraction with beta != 1"));
      }
      attrs.erase("beta");
      const std::string pname = absl::StrCat(op.name, ".partial");
      TensorId part = g.AddTensor(pname, piece, y.dtype, TensorRole::kActivation);
      OpId mm = g.AddOp(pname, op.type, {ins[0], ins[1]}, {part}, std::move(attrs), op.phase);
      graph::AnnotateCost(g, mm);
      TensorId red = b.AddCollective(y, part, "AllReduce", piece, axes.out.partial, -1);
      TensorId yid = g.AddTensor(y.name, piece, y.dtype, y.role);
      OpId add = g.AddOp(op.name, "Add", {red, ins[2]}, {yid}, {}, op.phase);
      graph::AnnotateCost(g, add);
      Placement reduced = axes.out;
      reduced.partial.clear();
      b.Produced(op.outputs[0], yid, reduced);
      out_data_view[op.outputs[0]] = mesh.world / std::max(1, p.data_degree);
      continue;
    }
    TensorId yid = g.AddTensor(y.name, piece, y.dtype, y.role);
    OpId nid = g.AddOp(op.name, op.type, ins, {yid}, std::move(attrs), op.phase);
    g.mutable_op(nid).opaque = op.opaque;
    graph::AnnotateCost(g, nid);
    b.Produced(op.outputs[0], yid, axes.out);
    out_data_view[op.outputs[0]] = mesh.world / std::max(1, p.data_degree);
  }
  // Graph outputs: rows split over the producer's data axes, whole otherwise.
  std::map<std::string, Placement> output_placement;
  for (TensorId t : forward.outputs()) {
    const graph::Tensor& x = forward.tensor(t);
    Placement want;
    want.dims.resize(x.shape.size());
    auto v = out_data_view.find(t);
    if (v == out_data_view.end()) {
      return absl::InvalidArgumentError(absl::StrCat("graph output ", x.name, " has no producer"));
    }
    ASSIGN_OR_RETURN(Placement held, b.HeldPlacement(t));
    if (!want.dims.empty() && !held.dims.empty()) want.dims[0] = mesh.DataAxes(v->second);
    if (!want.dims.empty() && x.shape[0] % mesh.Product(want.dims[0]) != 0) want.dims[0].clear();
    ASSIGN_OR_RETURN(TensorId id, b.Need(t, want, forward.op(x.producer)));
    g.AddOutput(id);
    output_placement[x.name] = want;
  }
  RETURN_IF_ERROR(g.Validate());
  if (options.stop.StopRequested()) return options.stop.ToStatus("lowering");

  graph::TrainingOptions topts;
  topts.ranks = mesh.world;
  topts.optimizer = options.optimizer;
  ASSIGN_OR_RETURN(Graph train, graph::BuildTrainingGraph(g, topts));
  if (options.stop.StopRequested()) return options.stop.ToStatus("lowering");

  // Rank-relative adjoints of rank-relative slices: the Pad named
  // "<slice>.grad" (graph/training.h's naming).
  std::map<std::string, OpId> pads;
  for (OpId id = 0; id < train.num_ops(); ++id)
    if (train.op(id).kind == OpKind::kPad) pads[train.op(id).name] = id;
  for (OpId id = 0; id < train.num_ops(); ++id) {
    const graph::Op& op = train.op(id);
    if (!op.attrs.contains("shard_axes") || op.kind != OpKind::kSlice) continue;
    if (auto it = pads.find(absl::StrCat(op.name, ".grad")); it != pads.end()) {
      train.mutable_op(it->second).attrs["shard_axes"] = op.attrs.at("shard_axes");
    }
  }
  // Loads the training builder added, and every gradient's reduction group.
  const std::vector<TensorId> fwd_outputs = forward.outputs();
  for (TensorId t = 0; t < train.num_tensors(); ++t) {
    const graph::Tensor& x = train.tensor(t);
    if (x.producer != graph::kNoId || prog.loads.contains(x.name)) continue;
    graph::LoadSpec l;
    l.source = x.name;
    l.full_shape = x.shape;
    l.dim_axes.assign(x.shape.size(), {});
    if (x.role == TensorRole::kOptimizerState) {
      // p.momentum, p.adam_m, p.adam_v: placed like p.
      const graph::Op* upd = nullptr;
      for (OpId c : x.consumers)
        if (graph::CategoryOf(train.op(c).kind) == graph::OpCategory::kUpdate) upd = &train.op(c);
      if (upd == nullptr) {
        return absl::InternalError(absl::StrCat("lowering: optimizer state ", x.name, " has no update"));
      }
      const graph::LoadSpec& pl = prog.loads.at(train.tensor(upd->inputs[0]).name);
      l.full_shape = pl.full_shape;
      l.dim_axes = pl.dim_axes;
      l.segments = pl.segments;
      l.init = graph::InitKind::kZeros;
    } else if (x.name.ends_with(".grad_seed")) {
      l.init = graph::InitKind::kFill;
      l.value = 1.0 / static_cast<double>(mesh.world);
    } else if (x.role == TensorRole::kInput) {
      // labels / target of the loss on graph output k ("labels", "loss.k.labels").
      size_t k = 0;
      if (x.name.starts_with("loss.")) {
        k = static_cast<size_t>(std::atoi(x.name.c_str() + 5));
      }
      if (k >= fwd_outputs.size()) {
        return absl::InternalError(absl::StrCat("lowering: loss input ", x.name, " has no output"));
      }
      const graph::Tensor& out = forward.tensor(fwd_outputs[k]);
      const Placement& op = output_placement.at(out.name);
      if (!op.dims.empty() && !l.dim_axes.empty()) l.dim_axes[0] = op.dims[0];
      for (size_t d = 0; d < x.shape.size(); ++d) l.full_shape[d] = x.shape[d] * mesh.Product(l.dim_axes[d]);
      const bool integer = x.dtype == graph::DType::kI64 || x.dtype == graph::DType::kI32;
      l.per_step = true;
      if (integer) {
        l.init = graph::InitKind::kIntegers;
        l.high = out.shape.empty() ? 2 : std::max<int64_t>(1, out.shape.back());
      } else {
        l.init = graph::InitKind::kNormal;
      }
    } else {
      return absl::InternalError(absl::StrCat("lowering: no load for ", x.name, " (",
                                              std::string(graph::RoleName(x.role)), ")"));
    }
    prog.loads[x.name] = std::move(l);
  }
  for (OpId id = 0; id < train.num_ops(); ++id) {
    graph::Op& op = train.mutable_op(id);
    if (op.phase != graph::Phase::kCommunication || op.kind != OpKind::kAllReduce) continue;
    const graph::Tensor& gt = train.tensor(op.inputs[0]);
    if (gt.grad_of == graph::kNoId) continue;
    const graph::LoadSpec& pl = prog.loads.at(train.tensor(gt.grad_of).name);
    std::set<int> used;
    for (const Axes& a : pl.dim_axes) used.insert(a.begin(), a.end());
    std::vector<int64_t> replicated;
    for (int a = 0; a < static_cast<int>(mesh.sizes.size()); ++a)
      if (!used.contains(a)) replicated.push_back(a);
    int64_t n = 1;
    for (int64_t a : replicated) n *= mesh.sizes[a];
    op.attrs["mesh_axes"] = replicated;
    op.attrs["group_size"] = n;
    op.attrs["reduce"] = std::string("sum");
  }
  prog.graph = std::move(train);
  prog.buckets = ProgramBuckets(prog.graph, options.gradient_buckets);
  ProgramGroups(prog, options.fusion_groups);
  RETURN_IF_ERROR(graph::ValidateProgram(prog));
  prog.program_fingerprint = graph::ComputeProgramFingerprint(prog);
  return prog;
}

}  // namespace

absl::StatusOr<graph::Program> LowerProgram(const graph::Graph& forward,
                                            const std::vector<OpParallelization>& ops,
                                            const LoweringOptions& options) {
  if (ops.empty()) return absl::InvalidArgumentError("lowering: the plan has no ops");
  int world = 0;
  std::set<int> model_degrees;
  for (const OpParallelization& o : ops) {
    ASSIGN_OR_RETURN(int total, graph::TotalDegree(o.layouts.output));
    if (world == 0) world = total;
    if (total != world) {
      return absl::UnimplementedError(absl::StrCat(
          "lowering: op ", o.name, " spans ", total, " devices, others ", world));
    }
    if (o.data_degree < 1 || world % o.data_degree != 0) {
      return absl::InvalidArgumentError(absl::StrCat("op ", o.name, ": data degree ", o.data_degree));
    }
    model_degrees.insert(world / o.data_degree);
  }
  ASSIGN_OR_RETURN(Mesh mesh, MakeMesh(world, model_degrees));
  return Lower(forward, ops, mesh, options);
}

absl::StatusOr<graph::Program> LowerWorldOne(const graph::Graph& forward,
                                             const LoweringOptions& options) {
  std::vector<OpParallelization> ops;
  for (OpId id = 0; id < forward.num_ops(); ++id) {
    const graph::Op& op = forward.op(id);
    OpParallelization p;
    p.op = id;
    p.name = op.name;
    p.config.output_degrees.assign(op.outputs.empty() ? 0 : forward.tensor(op.outputs[0]).shape.size(), 1);
    for (TensorId t : op.inputs) {
      const graph::Tensor& x = forward.tensor(t);
      p.layouts.inputs.push_back(graph::UnpartitionedShape(x.shape, x.dtype));
    }
    for (TensorId t : op.outputs) {
      const graph::Tensor& y = forward.tensor(t);
      p.layouts.outputs.push_back(graph::UnpartitionedShape(y.shape, y.dtype));
    }
    if (!p.layouts.outputs.empty()) p.layouts.output = p.layouts.outputs[0];
    ops.push_back(std::move(p));
  }
  LoweringOptions o = options;
  if (o.row.empty()) o.row = "world-1";
  ASSIGN_OR_RETURN(Mesh mesh, MakeMesh(1, {}));
  return Lower(forward, ops, mesh, o);
}

}  // namespace braid::search
