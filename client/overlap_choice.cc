#include "client/overlap_choice.h"

#include <algorithm>
#include <set>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/stats.h"
#include "base/status_macros.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "graph/ops.h"

namespace braid::client {

using worker::CollectiveMatMulResult;
using worker::CollectiveMatMulSpec;
using worker::MethodMeasurement;
using worker::RunCollectiveMatMul;
namespace {

using graph::DType;
using graph::Graph;
using graph::Phase;
using graph::TensorId;
using graph::TensorRole;

// Builds the per-device graph: a tensor / op helper with the rank's shapes.
class GraphMaker {
 public:
  GraphMaker(const OverlapTrainSpec& s) : s_(s), g_("overlap_train"), n_(s.ranks) {}

  TensorId T(const std::string& name, std::vector<int64_t> shape,
             TensorRole role = TensorRole::kActivation) {
    return g_.AddTensor(name, std::move(shape), DType::kF32, role);
  }
  TensorId Op(const std::string& name, const std::string& type, std::vector<TensorId> in,
              std::vector<int64_t> out_shape, Phase phase, graph::Attrs attrs = {},
              TensorRole role = TensorRole::kActivation) {
    TensorId out = T(name + ".out", std::move(out_shape), role);
    g_.AddOp(name, type, std::move(in), {out}, std::move(attrs), phase);
    return out;
  }
  graph::Attrs Group() const { return {{"group_size", int64_t{n_}}}; }

  // AllGather of rows, its pair MatMul (w: [k, nout/n] or transposed
  // storage [nout/n, k] with transB), and the gathered rows the weight
  // gradient reads.
  struct Gathered {
    TensorId out, kept;
  };
  Gathered AgMatMul(const std::string& pair, const std::string& mm, TensorId x, TensorId w,
                    bool trans_w, int64_t k, int64_t nout_local, Phase phase) {
    TensorId xg = Op(pair, "AllGather", {x}, {s_.rows, k}, phase, Group());
    graph::Attrs a;
    if (trans_w) a["transB"] = int64_t{1};
    TensorId out = Op(mm, "MatMul", {xg, w}, {s_.rows, nout_local}, phase, a);
    // The weight gradient reads the gathered rows themselves (transposed):
    // every method fills the gathered buffer (collective_matmul_ops.h).
    return {out, xg};
  }
  // The pair MatMul (x [m, k/n] @ w) and its ReduceScatter to [m/n, nout].
  TensorId MatMulRs(const std::string& pair, const std::string& mm, TensorId x, TensorId w,
                    bool trans_w, int64_t nout, Phase phase) {
    graph::Attrs a;
    if (trans_w) a["transB"] = int64_t{1};
    TensorId part = Op(mm, "MatMul", {x, w}, {s_.rows, nout}, phase, a);
    return Op(pair, "ReduceScatter", {part}, {s_.rows / n_, nout}, phase, Group());
  }
  // A weight gradient: kept^T @ dy.
  void WeightGrad(const std::string& name, TensorId kept, TensorId dy, std::vector<int64_t> shape) {
    Op(name, "MatMul", {kept, dy}, std::move(shape), Phase::kBackward, {{"transA", int64_t{1}}},
       TensorRole::kGradient);
  }

  Graph Build() {
    const int64_t d = s_.d_model, ml = s_.rows / n_, fl = s_.d_ff / n_, dl = d / n_;
    const bool tf = s_.model == OverlapModel::kTransformer;
    const Phase F = Phase::kForward, B = Phase::kBackward;
    struct Saved {
      TensorId w1, w2, wqkv, wo, h, z, kept_fc1, x, ln1, ln2, q, k, v, p, o, kept_qkv;
    };
    std::vector<Saved> saved(s_.blocks);
    TensorId a = T("x", {ml, d}, TensorRole::kInput);
    for (int b = 0; b < s_.blocks; ++b) {
      const std::string p = absl::StrCat("b", b, ".");
      Saved& sv = saved[b];
      sv.x = a;
      TensorId mlp_in = a, res = a;
      if (tf) {
        const int64_t hl = s_.heads / n_, dh = d / s_.heads, bs = s_.rows / s_.seq;
        sv.wqkv = T(p + "wqkv", {d, 3 * dl}, TensorRole::kParameter);
        sv.wo = T(p + "wo", {dl, d}, TensorRole::kParameter);
        sv.ln1 = Op(p + "ln1", "LayerNormalization", {a}, {ml, d}, F);
        Gathered qkv = AgMatMul(p + "qkv.ag", p + "qkv", sv.ln1, sv.wqkv, false, d, 3 * dl, F);
        sv.kept_qkv = qkv.kept;
        sv.q = Op(p + "q", "Reshape", {qkv.out}, {bs, hl, s_.seq, dh}, F);
        sv.k = Op(p + "k", "Reshape", {qkv.out}, {bs, hl, s_.seq, dh}, F);
        sv.v = Op(p + "v", "Reshape", {qkv.out}, {bs, hl, s_.seq, dh}, F);
        TensorId sc = Op(p + "scores", "MatMul", {sv.q, sv.k}, {bs, hl, s_.seq, s_.seq}, F,
                         {{"transB", int64_t{1}}});
        sv.p = Op(p + "softmax", "Softmax", {sc}, {bs, hl, s_.seq, s_.seq}, F);
        TensorId o4 = Op(p + "pv", "MatMul", {sv.p, sv.v}, {bs, hl, s_.seq, dh}, F);
        sv.o = Op(p + "merge", "Reshape", {o4}, {s_.rows, dl}, F);
        TensorId y = MatMulRs(p + "o.rs", p + "o", sv.o, sv.wo, false, d, F);
        res = Op(p + "res1", "Add", {a, y}, {ml, d}, F);
        sv.ln2 = Op(p + "ln2", "LayerNormalization", {res}, {ml, d}, F);
        mlp_in = sv.ln2;
      }
      sv.w1 = T(p + "w1", {d, fl}, TensorRole::kParameter);
      sv.w2 = T(p + "w2", {fl, d}, TensorRole::kParameter);
      Gathered h = AgMatMul(p + "fc1.ag", p + "fc1", mlp_in, sv.w1, false, d, fl, F);
      sv.h = h.out;
      sv.kept_fc1 = h.kept;
      sv.z = Op(p + "relu", "Relu", {sv.h}, {s_.rows, fl}, F);
      TensorId y = MatMulRs(p + "fc2.rs", p + "fc2", sv.z, sv.w2, false, d, F);
      a = Op(p + (tf ? "res2" : "res"), "Add", {res, y}, {ml, d}, F);
    }
    TensorId target = T("target", {ml, d}, TensorRole::kInput);
    TensorId diff = Op("loss.diff", "Sub", {a, target}, {ml, d}, F);
    g_.AddOutput(diff);
    TensorId g = Op("loss.grad", "MSELossGrad", {diff}, {ml, d}, B);
    for (int b = s_.blocks - 1; b >= 0; --b) {
      const std::string p = absl::StrCat("b", b, ".");
      const Saved& sv = saved[b];
      Gathered dz = AgMatMul(p + "fc2.grad.ag", p + "fc2.dx", g, sv.w2, true, d, fl, B);
      WeightGrad(p + "fc2.dw", sv.z, dz.kept, {fl, d});
      TensorId dh = Op(p + "relu.grad", "ReluGrad", {dz.out, sv.h}, {s_.rows, fl}, B);
      WeightGrad(p + "fc1.dw", sv.kept_fc1, dh, {d, fl});
      TensorId dx = MatMulRs(p + "fc1.grad.rs", p + "fc1.dx", dh, sv.w1, true, d, B);
      if (tf) dx = Op(p + "ln2.grad", "LayerNormalizationGrad", {dx, sv.ln2}, {ml, d}, B);
      g = Op(p + (tf ? "res2.grad" : "res.grad"), "Add", {g, dx}, {ml, d}, B);
      if (!tf) continue;
      const int64_t hl = s_.heads / n_, dh_ = d / s_.heads, bs = s_.rows / s_.seq;
      Gathered dO = AgMatMul(p + "o.grad.ag", p + "o.dx", g, sv.wo, true, d, dl, B);
      WeightGrad(p + "o.dw", sv.o, dO.kept, {dl, d});
      TensorId dO4 = Op(p + "merge.grad", "Reshape", {dO.out}, {bs, hl, s_.seq, dh_}, B);
      TensorId dP = Op(p + "pv.dp", "MatMul", {dO4, sv.v}, {bs, hl, s_.seq, s_.seq}, B,
                       {{"transB", int64_t{1}}});
      TensorId dV = Op(p + "pv.dv", "MatMul", {sv.p, dO4}, {bs, hl, s_.seq, dh_}, B,
                       {{"transA", int64_t{1}}});
      TensorId dS = Op(p + "softmax.grad", "SoftmaxGrad", {dP, sv.p}, {bs, hl, s_.seq, s_.seq}, B);
      TensorId dQ = Op(p + "scores.dq", "MatMul", {dS, sv.k}, {bs, hl, s_.seq, dh_}, B);
      TensorId dK = Op(p + "scores.dk", "MatMul", {dS, sv.q}, {bs, hl, s_.seq, dh_}, B,
                       {{"transA", int64_t{1}}});
      TensorId dqkv = Op(p + "qkv.concat", "Concat", {dQ, dK, dV}, {s_.rows, 3 * dl}, B);
      WeightGrad(p + "qkv.dw", sv.kept_qkv, dqkv, {d, 3 * dl});
      TensorId dln = MatMulRs(p + "qkv.grad.rs", p + "qkv.dx", dqkv, sv.wqkv, true, d, B);
      dln = Op(p + "ln1.grad", "LayerNormalizationGrad", {dln, sv.ln1}, {ml, d}, B);
      g = Op(p + "res1.grad", "Add", {g, dln}, {ml, d}, B);
    }
    g_.AddOutput(g);
    graph::AnnotateCosts(g_);
    return std::move(g_);
  }

 private:
  const OverlapTrainSpec& s_;
  Graph g_;
  int n_;
};

// GEMM and Add times from the measurements; SendRecv from the fitted line.
class MeasuredOverlapCostModel : public costmodel::CostModel {
 public:
  explicit MeasuredOverlapCostModel(const OverlapMeasurements& m) : m_(m) {}
  using CostModel::ComputeTime;
  costmodel::OpTime ComputeTime(const Graph& g, std::span<const graph::OpId> ops) override {
    double s = 0;
    for (graph::OpId id : ops) {
      const graph::Op& op = g.op(id);
      const std::vector<int64_t>& a = g.tensor(op.inputs.at(0)).shape;
      const std::vector<int64_t>& o = g.tensor(op.outputs.at(0)).shape;
      if (op.kind == graph::OpKind::kMatMul && a.size() == 2 && o.size() == 2) {
        auto it = m_.gemm_s.find({a[0], a[1], o[1]});
        if (it != m_.gemm_s.end()) {
          s += it->second;
          continue;
        }
        missing_.insert(absl::StrCat("MatMul ", a[0], "x", a[1], "x", o[1]));
      } else if (op.kind == graph::OpKind::kAdd && o.size() == 2) {
        auto it = m_.add_s.find({o[0], o[1]});
        if (it != m_.add_s.end()) {
          s += it->second;
          continue;
        }
        missing_.insert(absl::StrCat("Add ", o[0], "x", o[1]));
      } else {
        missing_.insert(absl::StrCat(op.type, " (no measurement of that kind)"));
      }
    }
    return {s, costmodel::TimeSource::kMeasured};
  }
  double CollectiveTime(costmodel::Collective c, int64_t bytes, int group) override {
    if (group <= 1) return 0;
    if (c == costmodel::Collective::kSendRecv) return m_.transfer_line.At(bytes);
    // AllGather / ReduceScatter: the ring of group - 1 steps of bytes / group
    // each (ChooseOverlaps uses the measured comm_time_s the graph's
    // collectives carry instead).
    return (group - 1) * m_.transfer_line.At(bytes / group);
  }
  std::string Generation() const override { return "overlap-measured"; }
  const std::set<std::string>& missing() const { return missing_; }

 private:
  const OverlapMeasurements& m_;
  std::set<std::string> missing_;
};

double Median(const std::vector<double>& v) { return Summarize(v).median_s; }

}  // namespace

absl::StatusOr<graph::Graph> OverlapTrainingGraph(const OverlapTrainSpec& spec) {
  RETURN_IF_ERROR(ValidateOverlapTrainSpec(spec));
  return GraphMaker(spec).Build();
}

absl::StatusOr<OverlapMeasurements> MeasureOverlapPrimitives(
    const OverlapTrainSpec& spec, int repetitions, const CollectiveMatMulOptions& options) {
  RETURN_IF_ERROR(ValidateOverlapTrainSpec(spec));
  if (repetitions < 1) {
    return absl::InvalidArgumentError(absl::StrCat("overlap measure: repetitions=", repetitions));
  }
  OverlapMeasurements out;
  out.ranks = spec.ranks;
  std::set<PairShapeKey> shapes;
  for (const OverlapPair& p : OverlapPairs(spec)) shapes.insert({p.pattern, p.m, p.k, p.nout});
  // Transfer sweep: AllGather chunks of other widths (k) at the same rows.
  std::set<PairShapeKey> sweep;
  for (int64_t k : {spec.d_model / 4, spec.d_model / 2, 2 * spec.d_model, 4 * spec.d_model}) {
    if (k >= 1) sweep.insert({CollectivePattern::kAllGatherMatMul, spec.rows, k, spec.ranks});
  }
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<double>> gemm;
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> add;
  std::vector<double> rho;
  const int n = spec.ranks;
  auto run = [&](const PairShapeKey& key, bool all_methods) -> absl::Status {
    CollectiveMatMulSpec cs;
    cs.pattern = key.pattern;
    cs.m = key.m;
    cs.k = key.k;
    cs.nout = key.nout;
    cs.ranks = n;
    cs.repetitions = repetitions;
    cs.warmup = 1;
    cs.seed = spec.seed;
    cs.parts = true;
    cs.pin_cores = spec.pin_cores;
    cs.methods = {DecomposeMethod::kNone};
    if (all_methods) {
      cs.methods = {DecomposeMethod::kNone, DecomposeMethod::kLooped,
                    DecomposeMethod::kLoopedUnrolled, DecomposeMethod::kBidirectional};
    }
    ASSIGN_OR_RETURN(CollectiveMatMulResult r, RunCollectiveMatMul(cs, options));
    const bool ag = key.pattern == CollectivePattern::kAllGatherMatMul;
    const int64_t rows = key.m / n, half = rows / 2;
    const int64_t gk = ag ? key.k : key.k / n, gn = ag ? key.nout / n : key.nout;
    const int64_t cols = ag ? key.k : key.nout;
    if (all_methods) {
      auto& g = gemm;
      auto append = [](std::vector<double>& to, const std::vector<double>& from) {
        to.insert(to.end(), from.begin(), from.end());
      };
      append(g[{key.m, gk, gn}], r.gemm_s);
      append(g[{rows, gk, gn}], r.parts.at("gemm_chunk"));
      append(g[{std::max<int64_t>(half, 1), gk, gn}], r.parts.at("gemm_half"));
      if (!ag) {
        append(add[{rows, key.nout}], r.parts.at("add_chunk"));
        append(add[{rows - half, key.nout}], r.parts.at("add_half"));
      }
      out.collective_s[key] = Median(r.comm_s);
      for (const MethodMeasurement& mm : r.methods) out.method_s[key][mm.method] = Median(mm.seconds);
    }
    for (double t : r.parts.at("xfer_chunk")) {
      out.transfer_samples.push_back({static_cast<double>(rows * cols * 4), t});
    }
    for (double t : r.parts.at("xfer_half")) {
      out.transfer_samples.push_back({static_cast<double>((rows - half) * cols * 4), t});
    }
    const std::vector<double>& f = r.parts.at("xfer_cpu_fraction");
    rho.insert(rho.end(), f.begin(), f.end());
    return absl::OkStatus();
  };
  for (const PairShapeKey& k : shapes) RETURN_IF_ERROR(run(k, true));
  for (const PairShapeKey& k : sweep) {
    if (!shapes.count(k)) RETURN_IF_ERROR(run(k, false));
  }
  for (const auto& [k, v] : gemm) out.gemm_s[k] = Median(v);
  for (const auto& [k, v] : add) out.add_s[k] = Median(v);
  out.transfer_cpu_fraction = Median(rho);
  // The line through each size's median (robust to the outliers a shared
  // host's transfers have).
  std::map<double, std::vector<double>> by_size;
  for (const auto& [bytes, t] : out.transfer_samples) by_size[bytes].push_back(t);
  std::vector<std::pair<double, double>> medians;
  for (const auto& [bytes, ts] : by_size) medians.push_back({bytes, Median(ts)});
  absl::StatusOr<costmodel::LinearCost> line = costmodel::FitLinear(medians);
  if (!line.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("overlap measure: the transfer line over ", medians.size(),
                     " sizes could not be fitted (", std::string(line.status().message()),
                     "): measure on a quieter host or with more repetitions"));
  }
  out.transfer_line = *line;
  return out;
}

absl::StatusOr<DecomposeMethod> DecomposeMethodOf(costmodel::OverlapMethod m) {
  switch (m) {
    case costmodel::OverlapMethod::kNone:
      return DecomposeMethod::kNone;
    case costmodel::OverlapMethod::kLooped:
      return DecomposeMethod::kLooped;
    case costmodel::OverlapMethod::kUnrolled:
      return DecomposeMethod::kLoopedUnrolled;
    case costmodel::OverlapMethod::kBidirectional:
      return DecomposeMethod::kBidirectional;
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("overlap choice: method '",
                                                 std::string(costmodel::OverlapMethodName(m)),
                                                 "' has no CPU implementation"));
}

absl::StatusOr<TrainingOverlapChoice> ChooseTrainingOverlaps(const OverlapTrainSpec& spec,
                                                             const OverlapMeasurements& m) {
  ASSIGN_OR_RETURN(graph::Graph g, OverlapTrainingGraph(spec));
  const std::vector<OverlapPair> pairs = OverlapPairs(spec);
  // The measured undecomposed collective on each pair's collective op.
  for (const OverlapPair& p : pairs) {
    auto it = m.collective_s.find({p.pattern, p.m, p.k, p.nout});
    if (it == m.collective_s.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("overlap choice: no measured collective for pair '", p.name, "'"));
    }
    bool found = false;
    for (graph::OpId o = 0; o < static_cast<graph::OpId>(g.num_ops()); ++o) {
      if (g.op(o).name != p.name) continue;
      g.mutable_op(o).attrs["comm_time_s"] = it->second;
      found = true;
    }
    if (!found) {
      return absl::InternalError(absl::StrCat("overlap choice: graph has no op '", p.name, "'"));
    }
  }
  ASSIGN_OR_RETURN(costmodel::ClusterSpec local, costmodel::ClusterPreset("cpu-local"));
  ASSIGN_OR_RETURN(costmodel::ClusterSpec cluster, costmodel::WithRanks(local, spec.ranks));
  MeasuredOverlapCostModel cm(m);
  search::OverlapSearchOptions o;
  o.transfer_cpu_fraction = m.transfer_cpu_fraction;
  ASSIGN_OR_RETURN(std::vector<search::OverlapChoice> found,
                   search::ChooseOverlaps(g, cluster, cm, o));
  if (!cm.missing().empty()) {
    return absl::InternalError(
        absl::StrCat("overlap choice: the cost model had no measurement for: ",
                     absl::StrJoin(cm.missing(), ", ")));
  }
  TrainingOverlapChoice out;
  for (const OverlapPair& p : pairs) {
    auto it = std::find_if(found.begin(), found.end(), [&](const search::OverlapChoice& c) {
      return c.collective_op == p.name;
    });
    if (it == found.end()) {
      return absl::InternalError(
          absl::StrCat("overlap choice: braid's search found no pair at '", p.name, "'"));
    }
    ASSIGN_OR_RETURN(DecomposeMethod dm, DecomposeMethodOf(it->method));
    out.methods.push_back(dm);
    out.choices.push_back(*it);
  }
  return out;
}

}  // namespace braid::client
