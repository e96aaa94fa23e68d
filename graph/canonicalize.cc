#include "graph/canonicalize.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/ops.h"

namespace braid::graph {
namespace {

// A dim of a tensor's original shape held as two dims (outer, inner).
struct Expansion {
  int dim = -1;
  int64_t outer = 1;
  int64_t inner = 1;

  bool operator==(const Expansion&) const = default;
};

std::vector<int64_t> Expanded(const std::vector<int64_t>& s, const Expansion& e) {
  std::vector<int64_t> out(s.begin(), s.begin() + e.dim);
  out.push_back(e.outer);
  out.push_back(e.inner);
  out.insert(out.end(), s.begin() + e.dim + 1, s.end());
  return out;
}

// The row-major strides at which `s`'s dims begin and end.
std::set<int64_t> Boundaries(const std::vector<int64_t>& s) {
  std::set<int64_t> b = {1};
  int64_t p = 1;
  for (size_t i = s.size(); i-- > 0;) {
    p *= s[i];
    b.insert(p);
  }
  return b;
}

// A Reshape x -> y whose output dim starts or ends inside an input dim and
// spans exactly one input dim boundary ([S, B, E] -> [S, B*heads, dh]: the
// dim B*heads): that dim split at the boundary.
std::optional<Expansion> PartialMerge(const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
  const std::set<int64_t> bx = Boundaries(x);
  int64_t inner = 1;
  for (size_t o = y.size(); o-- > 0;) {
    const int64_t outer = inner * y[o];
    std::vector<int64_t> interior;
    for (auto it = bx.upper_bound(inner); it != bx.end() && *it < outer; ++it) interior.push_back(*it);
    if (interior.size() == 1 && (!bx.contains(inner) || !bx.contains(outer))) {
      return Expansion{static_cast<int>(o), outer / interior[0], interior[0] / inner};
    }
    inner = outer;
  }
  return std::nullopt;
}

int Normalize(int64_t axis, int rank) {
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Equal Slices of one tensor along one axis that tile it, in order.
struct SliceGroup {
  TensorId input = kNoId;
  int axis = 0;
  std::vector<OpId> slices;  // by start
};

std::optional<SliceGroup> EqualSlices(const Graph& g, TensorId t) {
  const Tensor& x = g.tensor(t);
  if (x.consumers.size() < 2) return std::nullopt;
  const int rank = static_cast<int>(x.shape.size());
  SliceGroup grp;
  grp.input = t;
  std::vector<std::pair<int64_t, OpId>> starts;
  int64_t piece = -1;
  for (OpId c : x.consumers) {
    const Op& s = g.op(c);
    if (s.kind != OpKind::kSlice || s.inputs.size() != 1 || s.outputs.size() != 1) return std::nullopt;
    const std::vector<int64_t> axes = s.GetInts("axes"), st = s.GetInts("starts"),
                               en = s.GetInts("ends"), steps = s.GetInts("steps");
    if (axes.size() != 1 || st.size() != 1 || en.size() != 1) return std::nullopt;
    if (!steps.empty() && steps != std::vector<int64_t>{1}) return std::nullopt;
    const int a = Normalize(axes[0], rank);
    if (a < 0 || a >= rank) return std::nullopt;
    if (starts.empty()) grp.axis = a;
    if (a != grp.axis) return std::nullopt;
    const int64_t n = x.shape[a];
    auto clamp = [n](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
    const int64_t b = clamp(st[0]), e = clamp(en[0]);
    if (e <= b || g.tensor(s.outputs[0]).shape.size() != x.shape.size() ||
        g.tensor(s.outputs[0]).shape[a] != e - b) {
      return std::nullopt;
    }
    if (piece < 0) piece = e - b;
    if (e - b != piece) return std::nullopt;
    starts.push_back({b, c});
  }
  std::sort(starts.begin(), starts.end());
  for (size_t k = 0; k < starts.size(); ++k) {
    if (starts[k].first != static_cast<int64_t>(k) * piece) return std::nullopt;
    grp.slices.push_back(starts[k].second);
  }
  if (piece * static_cast<int64_t>(starts.size()) != x.shape[grp.axis]) return std::nullopt;
  return grp;
}

class Rewriter {
 public:
  explicit Rewriter(const Graph& g) : g_(g), out_(g.name()), exp_(g.num_tensors()) {
    for (const Tensor& t : g.tensors()) {
      TensorId id = out_.AddTensor(t.name, t.shape, t.dtype, t.role);
      out_.mutable_tensor(id).value = t.value;
      out_.mutable_tensor(id).grad_of = t.grad_of;
    }
  }

  absl::StatusOr<Graph> Run() {
    ASSIGN_OR_RETURN(std::vector<OpId> order, g_.TopologicalOrder());
    std::map<OpId, SliceGroup> split_at;  // first Slice of a group -> the group
    std::set<OpId> replaced;
    for (TensorId t = 0; t < g_.num_tensors(); ++t) {
      std::optional<SliceGroup> grp = EqualSlices(g_, t);
      if (!grp) continue;
      replaced.insert(grp->slices.begin(), grp->slices.end());
      OpId first = *std::min_element(grp->slices.begin(), grp->slices.end(), [&](OpId a, OpId b) {
        return std::find(order.begin(), order.end(), a) < std::find(order.begin(), order.end(), b);
      });
      split_at[first] = std::move(*grp);
    }
    for (OpId id : order) {
      if (auto s = split_at.find(id); s != split_at.end()) {
        AddSplit(s->second);
        continue;
      }
      if (replaced.contains(id)) continue;
      Copy(g_.op(id));
    }
    for (TensorId t : g_.outputs()) out_.AddOutput(Merged(t));
    AnnotateCosts(out_);
    RETURN_IF_ERROR(out_.Validate());
    return std::move(out_);
  }

 private:
  void AddSplit(const SliceGroup& grp) {
    std::vector<TensorId> outs;
    std::vector<int64_t> sizes;
    for (OpId s : grp.slices) {
      outs.push_back(g_.op(s).outputs[0]);
      sizes.push_back(g_.tensor(outs.back()).shape[grp.axis]);
    }
    const Op& first = g_.op(grp.slices[0]);
    out_.AddOp(absl::StrCat(first.name, ".split"), "Split", {Merged(grp.input)}, outs,
               {{"axis", int64_t{grp.axis}}, {"split", sizes}}, first.phase);
  }

  // `t` with its original shape: itself, or a Reshape merging its expansion.
  TensorId Merged(TensorId t) {
    if (!exp_[t]) return t;
    if (auto it = merged_.find(t); it != merged_.end()) return it->second;
    const Tensor& x = g_.tensor(t);
    TensorId m = out_.AddTensor(absl::StrCat(x.name, ".merged"), x.shape, x.dtype, TensorRole::kActivation);
    out_.AddOp(absl::StrCat(x.name, ".merged"), "Reshape", {t}, {m}, {{"shape", x.shape}},
               out_.op(out_.tensor(t).producer).phase);
    merged_[t] = m;
    return m;
  }

  // A tensor `t` (not expanded) with its dim `d` held as (outer, inner).
  TensorId SplitDim(TensorId t, int d, int64_t outer, int64_t inner, Phase phase) {
    const auto key = std::make_tuple(t, d, outer);
    if (auto it = split_.find(key); it != split_.end()) return it->second;
    const Tensor& x = g_.tensor(t);
    const std::vector<int64_t> shape = Expanded(x.shape, Expansion{d, outer, inner});
    TensorId s = out_.AddTensor(absl::StrCat(x.name, ".split.", d), shape, x.dtype,
                                TensorRole::kActivation);
    out_.AddOp(absl::StrCat(x.name, ".split.", d), "Reshape", {t}, {s}, {{"shape", shape}}, phase);
    split_[key] = s;
    return s;
  }

  void Emit(const Op& op, std::vector<TensorId> ins, Attrs attrs) {
    OpId id = out_.AddOp(op.name, op.type, std::move(ins), op.outputs, std::move(attrs), op.phase);
    out_.mutable_op(id).opaque = op.opaque;
  }

  // The output dim `o` of an op whose inputs broadcast against its output
  // (rank r) that every expanded input expands, or nullopt when they
  // disagree. `batch_only`: inputs' last two dims may not be expanded.
  std::optional<Expansion> AlignedExpansion(const Op& op, int r, bool batch_only) {
    std::optional<Expansion> e;
    for (TensorId t : op.inputs) {
      if (!exp_[t]) continue;
      const int ri = static_cast<int>(g_.tensor(t).shape.size());
      if (batch_only && exp_[t]->dim >= ri - 2) return std::nullopt;
      Expansion at = *exp_[t];
      at.dim += r - ri;
      if (e && !(*e == at)) return std::nullopt;
      e = at;
    }
    return e;
  }

  // Inputs of a broadcasting op expanded at output dim e.dim: non-expanded
  // inputs that cover that dim get it split (size 1 -> 1 x 1). False when
  // one covers it with another size.
  bool AlignInputs(const Op& op, int r, const Expansion& e, bool batch_only,
                   std::vector<TensorId>& ins) {
    for (TensorId t : op.inputs) {
      if (exp_[t]) {
        ins.push_back(t);
        continue;
      }
      const std::vector<int64_t>& s = g_.tensor(t).shape;
      const int ri = static_cast<int>(s.size());
      const int d = e.dim - (r - ri);
      if (d < 0 || (batch_only && ri < 3)) {
        ins.push_back(t);
        continue;
      }
      if (batch_only && d >= ri - 2) return false;
      if (s[d] == 1) {
        ins.push_back(SplitDim(t, d, 1, 1, op.phase));
      } else if (s[d] == e.outer * e.inner) {
        ins.push_back(SplitDim(t, d, e.outer, e.inner, op.phase));
      } else {
        return false;
      }
    }
    return true;
  }

  void ExpandOutputs(const Op& op, const Expansion& e) {
    for (TensorId y : op.outputs) {
      out_.mutable_tensor(y).shape = Expanded(g_.tensor(y).shape, e);
      exp_[y] = e;
    }
  }

  void Copy(const Op& op) {
    const bool any = std::any_of(op.inputs.begin(), op.inputs.end(), [&](TensorId t) { return exp_[t].has_value(); });
    if (op.kind == OpKind::kReshape && op.inputs.size() == 1 && op.outputs.size() == 1) {
      // Reads an expanded input as it is (same elements in the same order);
      // its own output may merge part of a dim.
      const TensorId y = op.outputs[0];
      const std::vector<int64_t>& x = out_.tensor(op.inputs[0]).shape;
      std::vector<int64_t> ys = g_.tensor(y).shape;
      std::optional<Expansion> e = PartialMerge(x, ys);
      if (!any && !e) {
        Emit(op, op.inputs, op.attrs);
        return;
      }
      if (e) {
        ys = Expanded(ys, *e);
        out_.mutable_tensor(y).shape = ys;
        exp_[y] = e;
      }
      Attrs attrs = op.attrs;
      attrs["shape"] = ys;  // static: an entry of 0 or -1 would refer to the input's dims
      attrs.erase("allowzero");
      Emit(op, op.inputs, std::move(attrs));
      return;
    }
    if (!any || op.outputs.empty()) {
      EmitMerged(op);
      return;
    }
    const int r = static_cast<int>(g_.tensor(op.outputs[0]).shape.size());
    const bool same_shapes = std::all_of(op.outputs.begin(), op.outputs.end(), [&](TensorId y) {
      return g_.tensor(y).shape == g_.tensor(op.outputs[0]).shape;
    });
    if (IsElementwiseKind(op.kind) && !IsGradientKind(op.kind) && same_shapes) {
      std::optional<Expansion> e = AlignedExpansion(op, r, op.kind == OpKind::kTrilu);
      std::vector<TensorId> ins;
      if (e && AlignInputs(op, r, *e, op.kind == OpKind::kTrilu, ins)) {
        ExpandOutputs(op, *e);
        Emit(op, std::move(ins), op.attrs);
        return;
      }
    } else if (IsOneOf(op.kind, {OpKind::kSoftmax, OpKind::kLogSoftmax}) && op.inputs.size() == 1) {
      const Expansion e = *exp_[op.inputs[0]];
      const int axis = Normalize(op.GetInt("axis", -1), r);
      if (axis != e.dim && axis >= 0 && axis < r) {
        Attrs attrs = op.attrs;
        attrs["axis"] = int64_t{axis > e.dim ? axis + 1 : axis};
        ExpandOutputs(op, e);
        Emit(op, op.inputs, std::move(attrs));
        return;
      }
    } else if (op.kind == OpKind::kTranspose && op.inputs.size() == 1 && op.outputs.size() == 1) {
      const Expansion e = *exp_[op.inputs[0]];
      std::vector<int64_t> perm = op.GetInts("perm");
      if (perm.empty()) {
        for (int k = r - 1; k >= 0; --k) perm.push_back(k);
      }
      std::vector<int64_t> np;
      Expansion oe = e;
      for (size_t t = 0; t < perm.size(); ++t) {
        const int64_t p = perm[t];
        if (p == e.dim) {
          oe.dim = static_cast<int>(t);
          np.push_back(p);
          np.push_back(p + 1);
        } else {
          np.push_back(p > e.dim ? p + 1 : p);
        }
      }
      Attrs attrs = op.attrs;
      attrs["perm"] = np;
      ExpandOutputs(op, oe);
      Emit(op, op.inputs, std::move(attrs));
      return;
    } else if (op.kind == OpKind::kMatMul && op.inputs.size() == 2 && op.outputs.size() == 1) {
      std::optional<Expansion> e = AlignedExpansion(op, r, /*batch_only=*/true);
      std::vector<TensorId> ins;
      if (e && e->dim < r - 2 && AlignInputs(op, r, *e, /*batch_only=*/true, ins)) {
        ExpandOutputs(op, *e);
        Emit(op, std::move(ins), op.attrs);
        return;
      }
    }
    EmitMerged(op);
  }

  void EmitMerged(const Op& op) {
    std::vector<TensorId> ins;
    for (TensorId t : op.inputs) ins.push_back(Merged(t));
    Emit(op, std::move(ins), op.attrs);
  }

  const Graph& g_;
  Graph out_;
  std::vector<std::optional<Expansion>> exp_;  // by tensor id of g_
  std::map<TensorId, TensorId> merged_;
  std::map<std::tuple<TensorId, int, int64_t>, TensorId> split_;
};

}  // namespace

absl::StatusOr<Graph> CanonicalizeForSharding(const Graph& g) {
  for (const Op& op : g.ops()) {
    if (op.phase != Phase::kForward) return g;
  }
  for (const Tensor& t : g.tensors()) {
    for (int64_t d : t.shape)
      if (d <= 0) return g;
  }
  return Rewriter(g).Run();
}

}  // namespace braid::graph
