#include "search/overlap_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace braid::search {
namespace {

using costmodel::OverlapMethod;
using costmodel::OverlapPattern;
using graph::Graph;
using graph::Op;
using graph::OpId;
using graph::OpKind;
using graph::TensorId;

// The one dim in which `big` is `n` times `small` (all others equal); -1 if none.
int ScaledDim(const std::vector<int64_t>& small, const std::vector<int64_t>& big, int64_t n) {
  if (small.size() != big.size()) return -1;
  int dim = -1;
  for (size_t i = 0; i < small.size(); ++i) {
    if (small[i] == big[i]) continue;
    if (dim >= 0 || big[i] != small[i] * n) return -1;
    dim = static_cast<int>(i);
  }
  return dim;
}

int64_t LeadingProduct(const std::vector<int64_t>& shape) {
  int64_t m = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) m *= shape[i];
  return m;
}

// k of a MatMul from its flops (2 m k n): transposed operands and batched
// forms need no case analysis. 0 when it does not divide.
int64_t ContractionOf(const Op& op, int64_t m, int64_t nout) {
  if (m <= 0 || nout <= 0 || op.flops <= 0) return 0;
  const double k = op.flops / (2.0 * static_cast<double>(m) * static_cast<double>(nout));
  const int64_t kr = std::llround(k);
  return kr >= 1 && std::abs(k - static_cast<double>(kr)) < 1e-6 * k ? kr : 0;
}

OpId ProducerOf(const Graph& g, TensorId t) { return g.tensor(t).producer; }

struct Pair {
  OpId collective = graph::kNoId;
  std::vector<OpId> matmuls;
  costmodel::OverlapShape shape;
};

std::vector<Pair> FindPairs(const Graph& g) {
  std::vector<Pair> out;
  for (OpId id = 0; id < static_cast<OpId>(g.num_ops()); ++id) {
    const Op& op = g.op(id);
    if (op.inputs.size() != 1 || op.outputs.size() != 1) continue;
    const int64_t n = op.GetInt("group_size", 0);
    if (n < 2) continue;
    const graph::Tensor& in = g.tensor(op.inputs[0]);
    const graph::Tensor& outt = g.tensor(op.outputs[0]);
    if (op.kind == OpKind::kAllGather) {
      const int dim = ScaledDim(in.shape, outt.shape, n);
      if (dim < 0 || dim + 1 == static_cast<int>(outt.shape.size())) continue;
      Pair p;
      p.collective = id;
      p.shape.pattern = OverlapPattern::kAllGatherMatMul;
      p.shape.ranks = static_cast<int>(n);
      p.shape.dtype = outt.dtype;
      // The MatMuls that read the gathered rows as their left operand are
      // the pair; other readers (the weight gradient's transposed MatMul,
      // ...) read the gathered tensor after the loop, which every method
      // still fills.
      bool ok = true;
      int64_t k = 0, nout_local = 0, m = 0;
      for (OpId c : outt.consumers) {
        const Op& mm = g.op(c);
        if (mm.kind != OpKind::kMatMul || mm.inputs.empty() || mm.inputs[0] != op.outputs[0] ||
            mm.GetInt("transA", 0) != 0 || mm.outputs.size() != 1) {
          continue;
        }
        const std::vector<int64_t>& os = g.tensor(mm.outputs[0]).shape;
        const int64_t mi = LeadingProduct(os), ni = os.empty() ? 0 : os.back();
        const int64_t ki = ContractionOf(mm, mi, ni);
        if (ki == 0 || (k != 0 && ki != k) || (m != 0 && mi != m)) {
          ok = false;
          break;
        }
        k = ki;
        m = mi;
        nout_local += ni;
        p.matmuls.push_back(c);
      }
      ok = ok && !p.matmuls.empty();
      if (!ok) continue;
      p.shape.m = m;
      p.shape.k = k;
      p.shape.nout = nout_local * n;
      out.push_back(std::move(p));
    } else if (op.kind == OpKind::kReduceScatter) {
      const int dim = ScaledDim(outt.shape, in.shape, n);
      if (dim < 0 || dim + 1 == static_cast<int>(in.shape.size())) continue;
      const OpId prod = ProducerOf(g, op.inputs[0]);
      if (prod == graph::kNoId) continue;
      const Op& mm = g.op(prod);
      if (mm.kind != OpKind::kMatMul || in.consumers.size() != 1) continue;
      const int64_t m = LeadingProduct(in.shape), nout = in.shape.back();
      const int64_t k_local = ContractionOf(mm, m, nout);
      if (k_local == 0) continue;
      Pair p;
      p.collective = id;
      p.matmuls = {prod};
      p.shape = {.pattern = OverlapPattern::kMatMulReduceScatter, .m = m, .k = k_local * n,
                 .nout = nout, .ranks = static_cast<int>(n), .dtype = in.dtype};
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<OverlapChoice>> ChooseOverlaps(const Graph& g,
                                                          const costmodel::ClusterSpec& cluster,
                                                          costmodel::CostModel& cm,
                                                          const OverlapSearchOptions& options) {
  std::vector<OverlapChoice> out;
  for (const Pair& pair : FindPairs(g)) {
    const Op& coll = g.op(pair.collective);
    if (!costmodel::CanOverlap(pair.shape, OverlapMethod::kLooped).ok()) continue;
    costmodel::OverlapCostOptions co;
    co.transfer_cpu_fraction = options.transfer_cpu_fraction;
    ASSIGN_OR_RETURN(costmodel::OverlapParts parts,
                     costmodel::OverlapPartsFromCostModel(cm, cluster, pair.shape, co));
    // The collective as the simulator charges it (the view-aware time the
    // per-device graph carries), else the cost model's.
    const double coll_s = coll.GetFloat("comm_time_s", -1);
    if (coll_s >= 0) parts.collective_s = coll_s;
    OverlapChoice c;
    c.shape = pair.shape;
    c.collective_op = coll.name;
    for (OpId m : pair.matmuls) c.matmul_ops.push_back(g.op(m).name);
    c.phase = g.op(pair.matmuls.front()).phase;
    c.gemm_s = parts.gemm_s;
    c.gemm_source = parts.gemm_source;
    c.comm_source = parts.comm_source;
    c.none_s = costmodel::PredictOverlapTime(pair.shape.pattern, OverlapMethod::kNone, parts);
    c.candidates.push_back({OverlapMethod::kNone, 0, c.none_s});
    c.method = OverlapMethod::kNone;
    c.chosen_s = c.none_s;
    auto consider = [&](OverlapMethod m, int64_t tile, double t) {
      c.candidates.push_back({m, tile, t});
      // Candidates come simplest first (fewest messages): a method replaces
      // the current choice only when predicted min_gain faster than it.
      if (t <= c.chosen_s * (1.0 - options.min_gain)) {
        c.method = m;
        c.tile_rows = tile;
        c.chosen_s = t;
      }
    };
    if (options.decompositions) {
      for (OverlapMethod m :
           {OverlapMethod::kLooped, OverlapMethod::kUnrolled, OverlapMethod::kBidirectional}) {
        if (!costmodel::CanOverlap(pair.shape, m).ok()) continue;
        consider(m, 0, costmodel::PredictOverlapTime(pair.shape.pattern, m, parts));
      }
    }
    if (options.fused_tiles) {
      for (int64_t tile : options.tile_rows) {
        if (!costmodel::CanOverlap(pair.shape, OverlapMethod::kFusedTiles, tile).ok()) continue;
        co.tile_rows = tile;
        ASSIGN_OR_RETURN(costmodel::OverlapParts tp,
                         costmodel::OverlapPartsFromCostModel(cm, cluster, pair.shape, co));
        consider(OverlapMethod::kFusedTiles, tile,
                 costmodel::PredictOverlapTime(pair.shape.pattern, OverlapMethod::kFusedTiles, tp));
      }
    }
    c.steps = c.method == OverlapMethod::kNone || c.method == OverlapMethod::kFusedTiles
                  ? 0
                  : pair.shape.ranks;
    const double e = costmodel::OverlapEfficiencyOf(c.chosen_s, c.none_s, c.gemm_s);
    c.efficiency = std::isnan(e) ? 0 : e;
    out.push_back(std::move(c));
  }
  return out;
}

absl::Status ApplyOverlaps(const std::vector<OverlapChoice>& choices, Graph& g) {
  for (const OverlapChoice& c : choices) {
    OpId id = graph::kNoId;
    for (OpId o = 0; o < static_cast<OpId>(g.num_ops()); ++o) {
      if (g.op(o).name == c.collective_op) {
        id = o;
        break;
      }
    }
    if (id == graph::kNoId) {
      return absl::NotFoundError(
          absl::StrCat("overlap choice names collective '", c.collective_op, "', not in the graph"));
    }
    if (c.method == OverlapMethod::kNone) continue;
    graph::Op& op = g.mutable_op(id);
    op.attrs["comm_time_s"] = std::max(0.0, c.chosen_s - c.gemm_s);
    op.attrs["overlap_method"] = std::string(costmodel::OverlapMethodName(c.method));
    if (c.tile_rows > 0) op.attrs["overlap_tile_rows"] = c.tile_rows;
  }
  return absl::OkStatus();
}

nlohmann::json OverlapChoicesJson(const std::vector<OverlapChoice>& choices) {
  nlohmann::json out = nlohmann::json::array();
  for (const OverlapChoice& c : choices) {
    nlohmann::json cands = nlohmann::json::array();
    for (const OverlapCandidateTime& t : c.candidates) {
      nlohmann::json j = {{"method", std::string(costmodel::OverlapMethodName(t.method))},
                          {"time_ms", t.time_s * 1e3}};
      if (t.tile_rows > 0) j["tile_rows"] = t.tile_rows;
      cands.push_back(std::move(j));
    }
    out.push_back({{"pattern", std::string(costmodel::OverlapPatternName(c.shape.pattern))},
                   {"collective", c.collective_op},
                   {"matmuls", c.matmul_ops},
                   {"phase", std::string(graph::PhaseName(c.phase))},
                   {"m", c.shape.m},
                   {"k", c.shape.k},
                   {"n", c.shape.nout},
                   {"ranks", c.shape.ranks},
                   {"method", std::string(costmodel::OverlapMethodName(c.method))},
                   {"steps", c.steps},
                   {"tile_rows", c.tile_rows},
                   {"gemm_ms", c.gemm_s * 1e3},
                   {"none_ms", c.none_s * 1e3},
                   {"chosen_ms", c.chosen_s * 1e3},
                   {"gain_ms", c.gain_s() * 1e3},
                   {"efficiency", c.efficiency},
                   {"gemm_source", std::string(costmodel::TimeSourceName(c.gemm_source))},
                   {"comm_source", std::string(costmodel::TimeSourceName(c.comm_source))},
                   {"candidates", std::move(cands)}});
  }
  return out;
}

absl::StatusOr<std::vector<OverlapChoice>> OverlapChoicesFromJson(const nlohmann::json& j) {
  if (!j.is_array()) return absl::InvalidArgumentError("overlap: not an array");
  std::vector<OverlapChoice> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& o = j[i];
    try {
      OverlapChoice c;
      ASSIGN_OR_RETURN(c.shape.pattern,
                       costmodel::ParseOverlapPattern(o.at("pattern").get<std::string>()));
      ASSIGN_OR_RETURN(c.method, costmodel::ParseOverlapMethod(o.at("method").get<std::string>()));
      c.collective_op = o.at("collective").get<std::string>();
      c.matmul_ops = o.value("matmuls", std::vector<std::string>{});
      c.shape.m = o.at("m").get<int64_t>();
      c.shape.k = o.at("k").get<int64_t>();
      c.shape.nout = o.at("n").get<int64_t>();
      c.shape.ranks = o.at("ranks").get<int>();
      c.steps = o.value("steps", 0);
      c.tile_rows = o.value("tile_rows", int64_t{0});
      c.gemm_s = o.at("gemm_ms").get<double>() / 1e3;
      c.none_s = o.at("none_ms").get<double>() / 1e3;
      c.chosen_s = o.at("chosen_ms").get<double>() / 1e3;
      c.efficiency = o.value("efficiency", 0.0);
      out.push_back(std::move(c));
    } catch (const nlohmann::json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("overlap[", i, "]: ", e.what()));
    }
  }
  return out;
}

}  // namespace braid::search
