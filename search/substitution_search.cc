#include "search/substitution_search.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "graph/builder.h"
#include "graph/fingerprint.h"
#include "graph/ops.h"

namespace braid::search {
namespace {

using graph::DType;
using graph::Graph;
using graph::OpId;
using graph::OpKind;
using graph::TensorId;

using Shape = std::vector<int64_t>;

// The braid kind a rule op name stands for.
absl::StatusOr<OpKind> KindOfRuleOp(const std::string& op) {
  static const auto* kinds = new std::map<std::string, OpKind>{
      {"MatMul", OpKind::kMatMul}, {"BatchMatMul", OpKind::kMatMul}, {"Add", OpKind::kAdd},
      {"Relu", OpKind::kRelu},     {"GeLU", OpKind::kGelu},          {"Softmax", OpKind::kSoftmax},
      {"Concat", OpKind::kConcat}, {"Split", OpKind::kSplit},        {"Conv2D", OpKind::kConv},
  };
  auto it = kinds->find(op);
  if (it == kinds->end()) {
    return absl::InvalidArgumentError(absl::StrCat("rule op '", op, "' has no braid op kind"));
  }
  return it->second;
}

// Ranks of a rule side's variables: the inputs' declared ranks, then each op's
// outputs (MatMul/Add: the larger input rank; the rest: the first input's).
absl::StatusOr<std::map<std::string, int>> SideRanks(const std::string& rule,
                                                     const std::vector<RuleInput>& inputs,
                                                     const RuleGraph& side) {
  std::map<std::string, int> ranks;
  for (const RuleInput& in : inputs) ranks[in.name] = static_cast<int>(in.shape.size());
  for (const RuleOp& op : side.ops) {
    int rank = -1;
    for (const std::string& in : op.inputs) {
      auto it = ranks.find(in);
      if (it == ranks.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("rule ", rule, " line ", op.line, ": '", in, "' is not defined"));
      }
      if (rank < 0 || op.op == "MatMul" || op.op == "BatchMatMul" || op.op == "Add") {
        rank = std::max(rank, it->second);
      }
    }
    for (const std::string& out : op.outputs) ranks[out] = rank;
  }
  return ranks;
}

// The graph axis a rule axis `a` (on a rule tensor of rank `rule_rank`)
// stands for on a graph tensor of rank `graph_rank`: counted from the end.
int64_t MapAxis(int64_t a, int rule_rank, int graph_rank) {
  return a - rule_rank + graph_rank;
}

int64_t NormalizeAxis(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

bool IsInputVar(const RewriteRule& r, const std::string& v) {
  for (const RuleInput& in : r.inputs) {
    if (in.name == v) return true;
  }
  return false;
}

// Inputs the ops of `side` read.
std::set<std::string> InputsRead(const RewriteRule& r, const RuleGraph& side) {
  std::set<std::string> out;
  for (const RuleOp& op : side.ops) {
    for (const std::string& in : op.inputs) {
      if (IsInputVar(r, in)) out.insert(in);
    }
  }
  return out;
}

// Why `r` cannot be applied as a rewrite; "" when it can.
std::string NotRewritable(const RewriteRule& r) {
  if (r.pattern.ops.empty()) return "its pattern has no op";
  std::set<std::string> computed;
  for (const RuleOp& op : r.pattern.ops) computed.insert(op.outputs.begin(), op.outputs.end());
  for (const std::string& o : r.pattern.outputs) {
    if (!computed.count(o)) return absl::StrCat("pattern output '", o, "' is not computed");
  }
  const std::set<std::string> bound = InputsRead(r, r.pattern);
  for (const std::string& in : InputsRead(r, r.replacement)) {
    if (!bound.count(in)) return absl::StrCat("the pattern does not bind input '", in, "'");
  }
  for (const std::string& o : r.replacement.outputs) {
    bool known = IsInputVar(r, o) && bound.count(o);
    for (const RuleOp& op : r.replacement.ops) {
      if (std::find(op.outputs.begin(), op.outputs.end(), o) != op.outputs.end()) known = true;
    }
    if (!known) return absl::StrCat("replacement output '", o, "' is not defined");
  }
  return "";
}

absl::StatusOr<RewriteRule> Orient(const Rule& rule, bool reverse) {
  RewriteRule r;
  r.name = reverse ? absl::StrCat(rule.name, ".reverse") : rule.name;
  r.inputs = rule.inputs;
  r.pattern = reverse ? rule.dst : rule.src;
  r.replacement = reverse ? rule.src : rule.dst;
  for (const RuleGraph* side : {&r.pattern, &r.replacement}) {
    for (const RuleOp& op : side->ops) RETURN_IF_ERROR(KindOfRuleOp(op.op).status());
  }
  ASSIGN_OR_RETURN(r.pattern_ranks, SideRanks(rule.name, r.inputs, r.pattern));
  ASSIGN_OR_RETURN(r.replacement_ranks, SideRanks(rule.name, r.inputs, r.replacement));
  return r;
}

// --- matching ---------------------------------------------------------------

int Rank(const Graph& g, TensorId t) { return static_cast<int>(g.tensor(t).shape.size()); }

// The integer value of a rule attribute on an algebraic rule (no `d`, no `r`).
bool IntAttr(const RuleOp& op, const std::string& name, int64_t* v) {
  auto it = op.attrs.find(name);
  if (it == op.attrs.end() || it->second.kind != RuleAttr::Kind::kInt) return false;
  *v = it->second.value;
  return true;
}

class Matcher {
 public:
  Matcher(const Graph& g, const RewriteRule& r) : g_(g), r_(r) {}

  std::vector<RuleMatch> Run() {
    Recurse(0);
    return std::move(matches_);
  }

 private:
  void Recurse(size_t i) {
    if (i == r_.pattern.ops.size()) {
      if (Complete()) matches_.push_back(RuleMatch{ops_, vars_});
      return;
    }
    const RuleOp& p = r_.pattern.ops[i];
    std::vector<OpId> candidates;
    bool anchored = false;
    for (const std::string& in : p.inputs) {
      auto it = vars_.find(in);
      if (it == vars_.end()) continue;
      candidates = g_.tensor(it->second).consumers;
      std::sort(candidates.begin(), candidates.end());
      candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
      anchored = true;
      break;
    }
    if (!anchored) {
      for (OpId o = 0; o < g_.num_ops(); ++o) candidates.push_back(o);
    }
    for (OpId c : candidates) {
      if (std::find(ops_.begin(), ops_.end(), c) != ops_.end()) continue;
      const std::map<std::string, TensorId> saved = vars_;
      if (Bind(p, c)) {
        ops_.push_back(c);
        Recurse(i + 1);
        ops_.pop_back();
      }
      vars_ = saved;
    }
  }

  bool AxisMatches(const RuleOp& p, const graph::Op& op, int64_t graph_default) {
    int64_t a = 0;
    if (!IntAttr(p, "axis", &a)) return false;
    const TensorId in0 = op.inputs[0];
    const int rule_rank = r_.pattern_ranks.at(p.inputs[0]);
    const int64_t want = MapAxis(a, rule_rank, Rank(g_, in0));
    return NormalizeAxis(op.GetInt("axis", graph_default), Rank(g_, in0)) == want;
  }

  // Binds pattern op `p` to graph op `c` (variables updated); false when it
  // does not fit.
  bool Bind(const RuleOp& p, OpId c) {
    const graph::Op& op = g_.op(c);
    if (op.phase != graph::Phase::kForward || op.opaque) return false;
    absl::StatusOr<OpKind> kind = KindOfRuleOp(p.op);
    if (!kind.ok() || op.kind != *kind) return false;
    if (op.inputs.size() != p.inputs.size()) return false;
    if (static_cast<int>(op.outputs.size()) != NumOutputs(p)) return false;
    for (size_t k = 0; k < p.inputs.size(); ++k) {
      const TensorId t = op.inputs[k];
      auto it = vars_.find(p.inputs[k]);
      if (it != vars_.end()) {
        if (it->second != t) return false;
        continue;
      }
      if (Rank(g_, t) < r_.pattern_ranks.at(p.inputs[k])) return false;
      vars_[p.inputs[k]] = t;
    }
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      if (Rank(g_, op.outputs[k]) < r_.pattern_ranks.at(p.outputs[k])) return false;
      vars_[p.outputs[k]] = op.outputs[k];
    }
    switch (op.kind) {
      case OpKind::kMatMul:
        return op.GetInt("transA", 0) == 0 && op.GetInt("transB", 0) == 0;
      case OpKind::kConcat:
        return AxisMatches(p, op, 0);
      case OpKind::kSplit:
        return AxisMatches(p, op, 0);
      case OpKind::kSoftmax:
        return AxisMatches(p, op, -1);
      case OpKind::kConv: {
        int64_t pad = 0;
        if (!IntAttr(p, "padding", &pad) || Rank(g_, op.inputs[0]) != 4) return false;
        if (op.GetInt("group", 1) != 1) return false;
        for (int64_t v : op.GetInts("pads")) {
          if (v != pad) return false;
        }
        if (pad != 0 && op.GetInts("pads").size() != 4) return false;
        for (int64_t v : op.GetInts("strides")) {
          if (v != 1) return false;
        }
        for (int64_t v : op.GetInts("dilations")) {
          if (v != 1) return false;
        }
        return true;
      }
      default:
        return true;
    }
  }

  // Checks that need the whole match: inputs come from outside it, and
  // intermediate tensors are read only inside it.
  bool Complete() const {
    std::set<TensorId> produced;
    for (OpId o : ops_) produced.insert(g_.op(o).outputs.begin(), g_.op(o).outputs.end());
    for (const RuleInput& in : r_.inputs) {
      auto it = vars_.find(in.name);
      if (it != vars_.end() && produced.count(it->second)) return false;
    }
    const std::set<std::string> outputs(r_.pattern.outputs.begin(), r_.pattern.outputs.end());
    for (const RuleOp& p : r_.pattern.ops) {
      for (const std::string& v : p.outputs) {
        if (outputs.count(v)) continue;
        const TensorId t = vars_.at(v);
        if (std::find(g_.outputs().begin(), g_.outputs().end(), t) != g_.outputs().end()) {
          return false;
        }
        for (OpId reader : g_.tensor(t).consumers) {
          if (std::find(ops_.begin(), ops_.end(), reader) == ops_.end()) return false;
        }
      }
    }
    return true;
  }

  const Graph& g_;
  const RewriteRule& r_;
  std::vector<OpId> ops_;
  std::map<std::string, TensorId> vars_;
  std::vector<RuleMatch> matches_;
};

// --- rewriting --------------------------------------------------------------

struct VarInfo {
  Shape shape;
  DType dtype = DType::kF32;
};

// A replacement op as it will be added: braid type, attributes, output shapes.
struct NewOp {
  std::string type;
  graph::Attrs attrs;
  std::vector<VarInfo> outputs;
};

absl::StatusOr<NewOp> InferReplacementOp(const RewriteRule& r, const RuleOp& p,
                                         const std::map<std::string, VarInfo>& vars,
                                         const std::string& what) {
  ASSIGN_OR_RETURN(OpKind kind, KindOfRuleOp(p.op));
  std::vector<const VarInfo*> in;
  for (const std::string& v : p.inputs) in.push_back(&vars.at(v));
  NewOp out;
  out.type = std::string(graph::OpKindName(kind));
  const DType dtype = in[0]->dtype;
  const int rank = static_cast<int>(in[0]->shape.size());
  auto axis_of = [&]() -> absl::StatusOr<int64_t> {
    int64_t a = 0;
    if (!IntAttr(p, "axis", &a)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", p.op, " needs an integer axis"));
    }
    const int64_t axis = MapAxis(a, r.replacement_ranks.at(p.inputs[0]), rank);
    if (axis < 0 || axis >= rank) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": axis ", a, " does not fit ", graph::ShapeString(in[0]->shape)));
    }
    return axis;
  };
  switch (kind) {
    case OpKind::kMatMul: {
      ASSIGN_OR_RETURN(Shape s, graph::MatMulShape(in[0]->shape, in[1]->shape, what));
      out.outputs.push_back({s, dtype});
      return out;
    }
    case OpKind::kAdd: {
      ASSIGN_OR_RETURN(Shape s, graph::BroadcastShapes(in[0]->shape, in[1]->shape, what));
      out.outputs.push_back({s, dtype});
      return out;
    }
    case OpKind::kRelu:
    case OpKind::kGelu:
      out.outputs.push_back({in[0]->shape, dtype});
      return out;
    case OpKind::kSoftmax: {
      ASSIGN_OR_RETURN(int64_t axis, axis_of());
      out.attrs["axis"] = axis;
      out.outputs.push_back({in[0]->shape, dtype});
      return out;
    }
    case OpKind::kConcat: {
      ASSIGN_OR_RETURN(int64_t axis, axis_of());
      Shape s = in[0]->shape;
      for (size_t k = 1; k < in.size(); ++k) {
        const Shape& o = in[k]->shape;
        bool fits = o.size() == s.size() && in[k]->dtype == dtype;
        for (size_t d = 0; fits && d < s.size(); ++d) {
          if (static_cast<int64_t>(d) != axis && o[d] != s[d]) fits = false;
        }
        if (!fits) {
          return absl::FailedPreconditionError(
              absl::StrCat(what, ": Concat of ", graph::ShapeString(in[0]->shape), " and ",
                           graph::ShapeString(o), " on axis ", axis));
        }
        s[axis] += o[axis];
      }
      out.attrs["axis"] = axis;
      out.outputs.push_back({s, dtype});
      return out;
    }
    case OpKind::kSplit: {
      ASSIGN_OR_RETURN(int64_t axis, axis_of());
      const int parts = NumOutputs(p);
      if (in[0]->shape[axis] % parts != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, ": Split of ", graph::ShapeString(in[0]->shape), " into ", parts, " on axis ", axis));
      }
      Shape s = in[0]->shape;
      s[axis] /= parts;
      out.attrs["axis"] = axis;
      out.attrs["split"] = std::vector<int64_t>(parts, s[axis]);
      for (int k = 0; k < parts; ++k) out.outputs.push_back({s, dtype});
      return out;
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat(what, ": no shape rule for a replacement ", p.op));
  }
}

// The replacement's ops with their shapes, given the match's tensors.
struct Replacement {
  std::map<std::string, VarInfo> vars;  // inputs and replacement variables
  std::vector<NewOp> ops;
  std::map<std::string, int> produced_by;  // replacement var -> op index
};

absl::StatusOr<Replacement> InferReplacement(const Graph& g, const RewriteRule& rule,
                                             const RuleMatch& match, const std::string& what) {
  Replacement rep;
  for (const RuleInput& in : rule.inputs) {
    auto it = match.vars.find(in.name);
    if (it == match.vars.end()) continue;
    rep.vars[in.name] = {g.tensor(it->second).shape, g.tensor(it->second).dtype};
  }
  for (size_t i = 0; i < rule.replacement.ops.size(); ++i) {
    const RuleOp& p = rule.replacement.ops[i];
    ASSIGN_OR_RETURN(NewOp op, InferReplacementOp(rule, p, rep.vars, what));
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      rep.vars[p.outputs[k]] = op.outputs[k];
      rep.produced_by[p.outputs[k]] = static_cast<int>(i);
    }
    rep.ops.push_back(std::move(op));
  }
  return rep;
}

// What happens to the matched ops' output tensors: a pattern output the
// replacement computes keeps its tensor (`reused`), one the replacement maps
// to an existing tensor has its readers moved there (`redirect`); the rest
// are `removed`.
struct OutputPlan {
  std::set<TensorId> removed;
  std::map<std::string, TensorId> reused;  // replacement var -> old tensor it writes
  std::map<TensorId, TensorId> redirect;   // old tensor -> old tensor
};

absl::StatusOr<OutputPlan> PlanOutputs(const Graph& g, const RewriteRule& rule,
                                       const RuleMatch& match, const Replacement& rep,
                                       const std::string& what) {
  OutputPlan plan;
  for (OpId o : match.ops) plan.removed.insert(g.op(o).outputs.begin(), g.op(o).outputs.end());
  const auto& outs = g.outputs();
  auto is_output = [&](TensorId t) { return std::find(outs.begin(), outs.end(), t) != outs.end(); };
  for (size_t k = 0; k < rule.pattern.outputs.size(); ++k) {
    const TensorId old = match.vars.at(rule.pattern.outputs[k]);
    const std::string& rvar = rule.replacement.outputs[k];
    const VarInfo& info = rep.vars.at(rvar);
    const graph::Tensor& t = g.tensor(old);
    if (info.shape != t.shape || info.dtype != t.dtype) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": the replacement computes ", graph::ShapeString(info.shape), " ",
          std::string(graph::DTypeName(info.dtype)), " for '", t.name, "' ",
          graph::ShapeString(t.shape), " ", std::string(graph::DTypeName(t.dtype))));
    }
    const bool computed = rep.produced_by.count(rvar) > 0;
    if (computed && !plan.reused.count(rvar)) {
      plan.reused[rvar] = old;
      plan.removed.erase(old);
      continue;
    }
    const TensorId target = computed ? plan.reused.at(rvar) : match.vars.at(rvar);
    if (is_output(old)) {
      const graph::Tensor& tt = g.tensor(target);
      const bool source = !computed && tt.producer == graph::kNoId;
      if (source || is_output(target)) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, ": graph output '", t.name, "' would become '", tt.name, "', which is ",
            source ? "a graph source" : "already a graph output"));
      }
    }
    plan.redirect[old] = target;
  }
  return plan;
}

// A name not in `used` (adding it): `base`, else `base#2`, `base#3`, ...
std::string UniqueName(const std::string& base, std::set<std::string>& used) {
  std::string name = base;
  for (int k = 2; used.count(name); ++k) name = absl::StrCat(base, "#", k);
  used.insert(name);
  return name;
}

// One op of the rewritten graph before it is added: a kept op (`old` its id)
// or a replacement op.
struct OpSpec {
  OpId old = graph::kNoId;
  std::string name, type;
  graph::Attrs attrs;
  std::vector<TensorId> inputs, outputs;  // ids in the new graph
};

// The order to add `specs` in: topological (Kahn), ties by list position.
// FailedPrecondition on a cycle.
absl::StatusOr<std::vector<int>> SpecOrder(const std::vector<OpSpec>& specs, int num_tensors,
                                           const std::string& what) {
  std::vector<int> producer(num_tensors, -1);
  for (size_t i = 0; i < specs.size(); ++i) {
    for (TensorId t : specs[i].outputs) producer[t] = static_cast<int>(i);
  }
  std::vector<int> pending(specs.size(), 0);
  std::vector<std::vector<int>> readers(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    std::set<int> preds;
    for (TensorId t : specs[i].inputs) {
      if (producer[t] >= 0) preds.insert(producer[t]);
    }
    pending[i] = static_cast<int>(preds.size());
    for (int p : preds) readers[p].push_back(static_cast<int>(i));
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (pending[i] == 0) ready.push(static_cast<int>(i));
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int r : readers[i]) {
      if (--pending[r] == 0) ready.push(r);
    }
  }
  if (order.size() != specs.size()) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": the rewrite has a cycle"));
  }
  return order;
}

}  // namespace

bool IsParallelRuleOp(const std::string& op) {
  return op == "Partition" || op == "Combine" || op == "Replicate" || op == "Reduce";
}

bool IsParallelRule(const Rule& rule) {
  for (const RuleGraph* side : {&rule.src, &rule.dst}) {
    for (const RuleOp& op : side->ops) {
      if (IsParallelRuleOp(op.op)) return true;
      for (const auto& [name, attr] : op.attrs) {
        if (attr.kind == RuleAttr::Kind::kReplicaAxis) return true;
      }
    }
  }
  for (const RuleInput& in : rule.inputs) {
    if (in.replica.kind != RuleAttr::Kind::kInt || in.replica.value != 1) return true;
  }
  return false;
}

absl::StatusOr<std::vector<RewriteRule>> AlgebraicRewriteRules(const std::vector<Rule>& rules,
                                                              bool reverse) {
  std::vector<RewriteRule> out;
  for (const Rule& rule : rules) {
    if (IsParallelRule(rule)) continue;
    ASSIGN_OR_RETURN(RewriteRule fwd, Orient(rule, /*reverse=*/false));
    if (std::string why = NotRewritable(fwd); !why.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rule ", rule.name, " cannot be applied as a rewrite: ", why));
    }
    out.push_back(std::move(fwd));
    if (!reverse) continue;
    ASSIGN_OR_RETURN(RewriteRule rev, Orient(rule, /*reverse=*/true));
    if (NotRewritable(rev).empty()) out.push_back(std::move(rev));
  }
  return out;
}

std::vector<RuleMatch> FindMatches(const Graph& g, const RewriteRule& rule) {
  return Matcher(g, rule).Run();
}

absl::StatusOr<Graph> ApplyMatch(const Graph& g, const RewriteRule& rule, const RuleMatch& match) {
  if (match.ops.size() != rule.pattern.ops.size() || match.ops.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("match of ", match.ops.size(),
                                                   " ops for rule ", rule.name, " with ",
                                                   rule.pattern.ops.size()));
  }
  const OpId root = match.ops.back();
  const std::string& root_name = g.op(root).name;
  const std::string what = absl::StrCat("rule ", rule.name, " at ", root_name);

  ASSIGN_OR_RETURN(Replacement rep, InferReplacement(g, rule, match, what));
  const std::vector<NewOp>& new_ops = rep.ops;

  std::set<OpId> matched(match.ops.begin(), match.ops.end());
  ASSIGN_OR_RETURN(OutputPlan plan, PlanOutputs(g, rule, match, rep, what));
  const std::set<TensorId>& removed = plan.removed;
  const std::map<std::string, TensorId>& reused = plan.reused;
  const std::map<TensorId, TensorId>& redirect = plan.redirect;

  // Tensor ids of the new graph: the kept tensors in order, then the
  // replacement's new ones.
  std::vector<TensorId> remap(g.num_tensors(), graph::kNoId);
  std::vector<TensorId> kept_tensors;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (removed.count(t)) continue;
    remap[t] = static_cast<TensorId>(kept_tensors.size());
    kept_tensors.push_back(t);
  }
  auto map_tensor = [&](TensorId t) {
    auto it = redirect.find(t);
    return remap[it == redirect.end() ? t : it->second];
  };

  std::set<std::string> op_names, tensor_names;
  for (const graph::Op& op : g.ops()) op_names.insert(op.name);
  for (const graph::Tensor& t : g.tensors()) tensor_names.insert(t.name);
  struct NewTensor {
    std::string name;
    VarInfo info;
  };
  std::vector<NewTensor> new_tensors;
  std::map<std::string, TensorId> rvar_id;  // replacement var -> new-graph id
  for (const RuleInput& in : rule.inputs) {
    auto it = match.vars.find(in.name);
    if (it != match.vars.end()) rvar_id[in.name] = map_tensor(it->second);
  }
  std::vector<OpSpec> replacement;
  for (size_t i = 0; i < rule.replacement.ops.size(); ++i) {
    const RuleOp& p = rule.replacement.ops[i];
    OpSpec spec;
    spec.name = UniqueName(absl::StrCat(root_name, "/", rule.name, "/", i), op_names);
    spec.type = new_ops[i].type;
    spec.attrs = new_ops[i].attrs;
    for (const std::string& v : p.inputs) spec.inputs.push_back(rvar_id.at(v));
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      const std::string& v = p.outputs[k];
      TensorId id;
      if (auto it = reused.find(v); it != reused.end()) {
        id = remap[it->second];
      } else {
        id = static_cast<TensorId>(kept_tensors.size() + new_tensors.size());
        const std::string base = p.outputs.size() == 1 ? spec.name : absl::StrCat(spec.name, ":", k);
        new_tensors.push_back({UniqueName(base, tensor_names), new_ops[i].outputs[k]});
      }
      rvar_id[v] = id;
      spec.outputs.push_back(id);
    }
    replacement.push_back(std::move(spec));
  }

  // The op list: kept ops in order, the replacement where the root was.
  std::vector<OpSpec> specs;
  for (OpId o = 0; o < g.num_ops(); ++o) {
    if (o == root) {
      for (OpSpec& s : replacement) specs.push_back(std::move(s));
      continue;
    }
    if (matched.count(o)) continue;
    const graph::Op& op = g.op(o);
    OpSpec s;
    s.old = o;
    s.name = op.name;
    s.type = op.type;
    s.attrs = op.attrs;
    for (TensorId t : op.inputs) s.inputs.push_back(map_tensor(t));
    for (TensorId t : op.outputs) s.outputs.push_back(map_tensor(t));
    specs.push_back(std::move(s));
  }

  ASSIGN_OR_RETURN(std::vector<int> order,
                   SpecOrder(specs, static_cast<int>(kept_tensors.size() + new_tensors.size()), what));
  Graph out(g.name());
  for (TensorId t : kept_tensors) {
    const graph::Tensor& src = g.tensor(t);
    out.AddTensor(src.name, src.shape, src.dtype, src.role);
  }
  for (const NewTensor& t : new_tensors) {
    out.AddTensor(t.name, t.info.shape, t.info.dtype, graph::TensorRole::kActivation);
  }
  for (TensorId t : kept_tensors) {
    if (g.tensor(t).grad_of != graph::kNoId) {
      out.mutable_tensor(remap[t]).grad_of = remap[g.tensor(t).grad_of];
    }
  }
  for (int i : order) {
    OpSpec& s = specs[i];
    const graph::Phase phase = s.old == graph::kNoId ? graph::Phase::kForward : g.op(s.old).phase;
    const OpId id = out.AddOp(s.name, s.type, s.inputs, s.outputs, s.attrs, phase);
    if (s.old == graph::kNoId) {
      graph::AnnotateCost(out, id);
    } else {
      const graph::Op& src = g.op(s.old);
      graph::Op& dst = out.mutable_op(id);
      dst.flops = src.flops;
      dst.bytes_read = src.bytes_read;
      dst.bytes_written = src.bytes_written;
      dst.opaque = src.opaque;
    }
  }
  for (TensorId o : g.outputs()) out.AddOutput(map_tensor(o));
  if (absl::Status s = out.Validate(); !s.ok()) {
    return absl::InternalError(absl::StrCat(what, ": the rewritten graph is invalid: ", s.message()));
  }
  return out;
}

absl::StatusOr<SubstitutionSearchResult> SubstitutionSearch(const Graph& forward,
                                                            const std::vector<Rule>& rules,
                                                            const SubstitutionCostFn& cost_fn,
                                                            const SubstitutionSearchOptions& options) {
  if (!(options.alpha >= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("alpha ", options.alpha, " is below 1"));
  }
  if (options.budget < 1) {
    return absl::InvalidArgumentError(absl::StrCat("budget ", options.budget, " is below 1"));
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  ASSIGN_OR_RETURN(std::vector<RewriteRule> rewrite_rules,
                   AlgebraicRewriteRules(rules, options.reverse_rules));

  SubstitutionSearchResult result;
  result.rules_used = static_cast<int>(rewrite_rules.size());
  for (const Rule& r : rules) result.parallel_rules_skipped += IsParallelRule(r) ? 1 : 0;

  ASSIGN_OR_RETURN(uint64_t input_fp, graph::Fingerprint(forward));
  result.evaluated = 1;
  if (options.stop.StopRequested()) return options.stop.ToStatus("substitution search");
  absl::StatusOr<double> initial = cost_fn(forward);
  if (!initial.ok()) {
    return absl::Status(initial.status().code(),
                        absl::StrCat("substitution search: the cost of the input graph: ",
                                     initial.status().message()));
  }
  result.initial_cost = result.best_cost = *initial;
  result.best = forward;

  struct Candidate {
    double cost;
    int64_t seq;
    std::shared_ptr<const Graph> graph;
    std::vector<SubstitutionStep> steps;
  };
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.cost != b.cost ? a.cost > b.cost : a.seq > b.seq;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  std::set<uint64_t> seen = {input_fp};
  int64_t seq = 0;
  queue.push({*initial, seq++, std::make_shared<const Graph>(forward), {}});

  bool stop = false;
  while (!queue.empty() && !stop) {
    Candidate cur = queue.top();
    queue.pop();
    // The queue is ordered by cost: once its best is pruned, all are.
    if (cur.cost > options.alpha * result.best_cost) break;
    ++result.expanded;
    for (const RewriteRule& rule : rewrite_rules) {
      if (stop) break;
      if (options.stop.StopRequested()) {
        result.stopped = stop = true;
        break;
      }
      for (const RuleMatch& m : FindMatches(*cur.graph, rule)) {
        if (options.time_limit_s > 0 && elapsed() > options.time_limit_s) {
          result.timed_out = true;
          stop = true;
          break;
        }
        if (options.stop.StopRequested()) {
          result.stopped = stop = true;
          break;
        }
        absl::StatusOr<Graph> next = ApplyMatch(*cur.graph, rule, m);
        if (!next.ok()) {
          ++result.rewrite_failed;
          VLOG(1) << next.status();
          continue;
        }
        absl::StatusOr<uint64_t> fp = graph::Fingerprint(*next);
        if (!fp.ok()) {
          ++result.rewrite_failed;
          continue;
        }
        if (seen.count(*fp)) {
          ++result.duplicates;
          continue;
        }
        if (result.evaluated >= options.budget) {
          result.budget_exhausted = true;
          stop = true;
          break;
        }
        seen.insert(*fp);
        ++result.evaluated;
        absl::StatusOr<double> cost = cost_fn(*next);
        if (!cost.ok() && StopToken::IsStop(cost.status()) && options.stop.StopRequested()) {
          result.stopped = stop = true;  // not this graph's fault: left uncosted
          break;
        }
        if (!cost.ok()) {
          ++result.cost_rejected;
          VLOG(1) << rule.name << ": " << cost.status();
          continue;
        }
        SubstitutionStep step;
        step.rule = rule.name;
        for (OpId o : m.ops) step.matched_ops.push_back(cur.graph->op(o).name);
        std::vector<SubstitutionStep> steps = cur.steps;
        steps.push_back(std::move(step));
        if (*cost < result.best_cost) {
          result.best_cost = *cost;
          result.best = *next;
          result.steps = steps;
        }
        if (*cost < options.alpha * result.best_cost) {
          queue.push({*cost, seq++, std::make_shared<const Graph>(*std::move(next)),
                      std::move(steps)});
        }
      }
    }
  }
  result.search_s = elapsed();
  return result;
}

}  // namespace braid::search
