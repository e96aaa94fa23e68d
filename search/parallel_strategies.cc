#include "search/parallel_strategies.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/op_kind.h"
#include "search/parallel_memory.h"

namespace braid::search {
namespace {

using graph::Graph;
using graph::OpId;
using graph::OpKind;
using graph::TensorId;
using graph::TensorRole;

using Filter = std::function<bool(const Graph&, OpId, const ParallelConfig&)>;

// Frontier bound of braid's unrestricted DP run (ParallelizeOptions::
// max_frontier_states, and the state bound with it) unless the caller sets
// one. Measured peaks on summit: resnext50 2.0e3 states at 48 devices,
// bert_large 1.1e6 at 96, inception_v3 4.5e6 at 24 and 2.0e7 at 96 (its
// four-branch blocks keep four tensors live: 3 s, 130 MB). Past the bound
// the unrestricted run is skipped and the per-data-degree runs remain.
constexpr double kUnrestrictedFrontier = 3e7;

bool IsParam(const Graph& g, TensorId t) { return g.tensor(t).role == TensorRole::kParameter; }

bool IsWeightMatMul(const Graph& g, OpId op) {
  const graph::Op& o = g.op(op);
  if (o.kind != OpKind::kMatMul && o.kind != OpKind::kGemm) return false;
  for (TensorId t : o.inputs)
    if (IsParam(g, t)) return true;
  return false;
}

// A MatMul of two activations with a batch dim ([B, heads, S, S] scores).
bool IsBatchedActivationMatMul(const Graph& g, OpId op) {
  const graph::Op& o = g.op(op);
  if (o.kind != OpKind::kMatMul || o.inputs.size() != 2 || o.outputs.size() != 1) return false;
  if (IsParam(g, o.inputs[0]) || IsParam(g, o.inputs[1])) return false;
  return g.tensor(o.outputs[0]).shape.size() >= 3;
}

bool IsEmbedding(const Graph& g, OpId op) {
  const graph::Op& o = g.op(op);
  return o.kind == OpKind::kGather && !o.inputs.empty() && IsParam(g, o.inputs[0]);
}

bool IsBagReduction(OpKind k) { return k == OpKind::kReduceSum || k == OpKind::kReduceMean; }

// An embedding bag: a table lookup whose rows are pooled (DLRM's sparse
// features), as opposed to a token embedding (BERT), whose rows are not.
bool IsEmbeddingBag(const Graph& g, OpId op) {
  if (!IsEmbedding(g, op) || g.op(op).outputs.size() != 1) return false;
  for (OpId c : g.tensor(g.op(op).outputs[0]).consumers)
    if (IsBagReduction(g.op(c).kind)) return true;
  return false;
}

// Follows single-activation elementwise ops (Scale, Dropout, a mask Add) from
// `t` up to its first non-elementwise producer.
OpId ProducerThroughElementwise(const Graph& g, TensorId t) {
  for (int hops = 0; hops < 8; ++hops) {
    const OpId p = g.tensor(t).producer;
    if (p == graph::kNoId) return p;
    const graph::Op& o = g.op(p);
    if (!graph::IsElementwiseKind(o.kind) || o.inputs.empty()) return p;
    // Follow the activation: the input an op made at the output's shape
    // (Where(mask, fill, scores) reads the scores third).
    TensorId next = o.inputs[0];
    for (TensorId in : o.inputs) {
      if (g.tensor(in).producer != graph::kNoId &&
          g.tensor(in).shape == g.tensor(o.outputs[0]).shape) {
        next = in;
        break;
      }
    }
    t = next;
  }
  return graph::kNoId;
}

// Whether a batched activation MatMul reads `t` through elementwise ops.
bool FeedsBatchedMatMul(const Graph& g, TensorId t, int depth = 0) {
  if (depth > 8) return false;
  for (OpId c : g.tensor(t).consumers) {
    if (IsBatchedActivationMatMul(g, c)) return true;
    const graph::Op& o = g.op(c);
    // Elementwise ops with several outputs (training Dropout's y and mask)
    // pass output 0 on.
    if (graph::IsElementwiseKind(o.kind) && !o.outputs.empty() &&
        FeedsBatchedMatMul(g, o.outputs[0], depth + 1)) {
      return true;
    }
  }
  return false;
}

int DataDegreeOf(const ParallelConfig& c) {
  return c.output_degrees.empty() ? 1 : c.output_degrees[0];
}

// Every degree of `c` but dim 0's sits on output dim `dim` (-1: the
// reduction split).
bool OnlyModelDim(const ParallelConfig& c, int dim) {
  for (int j = 1; j < static_cast<int>(c.output_degrees.size()); ++j)
    if (j != dim && c.output_degrees[j] != 1) return false;
  return dim == -1 || c.reduction_degree == 1;
}

// Megatron-LM's pairs (Shoeybi et al. §3): every weight MatMul whose nearest
// weight MatMuls upstream (through the other ops' activation inputs, the
// attention MatMuls included) include a column-parallel one is row
// parallel, every other one column parallel -- column then row per MLP
// block, Q/K/V column and the output projection row per attention block.
// Returns per op: 1 column, 2 row, 0 not a weight MatMul.
std::vector<char> MegatronPairs(const Graph& g) {
  std::vector<char> role(g.num_ops(), 0);
  absl::StatusOr<std::vector<OpId>> order = g.TopologicalOrder();
  if (!order.ok()) return role;
  for (OpId op : *order) {
    if (!IsWeightMatMul(g, op)) continue;
    bool after_column = false;
    std::vector<char> seen(g.num_ops(), 0);
    std::vector<TensorId> stack;
    for (TensorId t : g.op(op).inputs)
      if (!IsParam(g, t)) stack.push_back(t);
    while (!stack.empty() && !after_column) {
      const OpId p = g.tensor(stack.back()).producer;
      stack.pop_back();
      if (p == graph::kNoId || seen[p]) continue;
      seen[p] = 1;
      if (role[p] != 0) {  // a weight MatMul: the nearest on this path
        after_column = role[p] == 1;
        continue;
      }
      for (TensorId t : g.op(p).inputs)
        if (!IsParam(g, t)) stack.push_back(t);
    }
    role[op] = after_column ? 2 : 1;
  }
  return role;
}

// Megatron-LM at data degree d, model degree m (m > 1): every weight MatMul
// column or row parallel as MegatronPairs fixes it (a transformer layer's
// Q/K/V and first MLP Linear column, its output projection and second MLP
// Linear row), attention MatMuls head parallel.
Filter MegatronFilter(const Graph& g, int d, int m) {
  enum Role : char { kOther, kAttention, kColumn, kRow };
  auto roles = std::make_shared<std::vector<char>>(g.num_ops(), kOther);
  const std::vector<char> pair_roles = MegatronPairs(g);
  for (OpId op = 0; op < g.num_ops(); ++op) {
    if (IsWeightMatMul(g, op)) (*roles)[op] = pair_roles[op] == 2 ? kRow : kColumn;
    if (IsBatchedActivationMatMul(g, op) && g.tensor(g.op(op).outputs[0]).shape.size() >= 4)
      (*roles)[op] = kAttention;
  }
  return [roles, d, m](const Graph&, OpId op, const ParallelConfig& c) {
    if (DataDegreeOf(c) != d) return false;
    const int r = static_cast<int>(c.output_degrees.size());
    switch ((*roles)[op]) {
      case kColumn:
        return c.output_degrees.back() == m && OnlyModelDim(c, r - 1);
      case kRow:
        return c.reduction_degree == m && OnlyModelDim(c, -1);
      case kAttention:  // head parallel: a batch dim other than 0
        for (int j = 1; j + 2 < r; ++j)
          if (c.output_degrees[j] == m && OnlyModelDim(c, j)) return true;
        return false;
      default:
        return true;
    }
  };
}

// Neo's DLRM strategy on `degree` devices: embedding bags (the tables and the
// reductions pooling them) model parallel, the rest data parallel. A table
// whose rows and columns no degree-`degree` split divides (1,000,000 x 64 at
// 24 devices) takes the smallest data degree that leaves it a single model
// split (D = 3 x column 8): each op spans every device here, so Neo's
// table-wise placement (whole tables on different devices) is out of reach.
// `table_degrees` gets the data degree chosen per table.
Filter DlrmFilter(const Graph& g, int degree, int max_model_dims,
                  std::map<int, int>* table_degrees) {
  auto want = std::make_shared<std::vector<int>>(g.num_ops(), degree);
  for (OpId op = 0; op < g.num_ops(); ++op) {
    if (!IsEmbeddingBag(g, op)) continue;
    absl::StatusOr<std::vector<ParallelConfig>> cs = CandidateConfigs(g, op, degree);
    int d = degree;
    if (cs.ok()) {
      for (const ParallelConfig& c : *cs) {
        int model_dims = c.reduction_degree > 1 ? 1 : 0;
        for (size_t j = 1; j < c.output_degrees.size(); ++j) model_dims += c.output_degrees[j] > 1;
        if (max_model_dims > 0 && model_dims > max_model_dims) continue;
        d = std::min(d, DataDegreeOf(c));
      }
    }
    ++(*table_degrees)[d];
    (*want)[op] = d;
    for (OpId c : g.tensor(g.op(op).outputs[0]).consumers)
      if (IsBagReduction(g.op(c).kind)) (*want)[c] = d;
  }
  return [want](const Graph&, OpId op, const ParallelConfig& c) {
    return DataDegreeOf(c) == (*want)[op];
  };
}

Filter DataParallelFilter(int degree) {
  return [degree](const Graph&, OpId, const ParallelConfig& c) {
    return DataDegreeOf(c) == degree && c.TotalDegree() == degree;
  };
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Whether `s` is `stop`'s doing (StopToken::ToStatus) rather than a failure.
bool Stopped(const absl::Status& s, const StopToken& stop) {
  return StopToken::IsStop(s) && stop.StopRequested();
}

// The plan's per-device memory (into r.memory) and whether it fits.
absl::Status CheckPlanMemory(const Graph& g, const costmodel::ClusterSpec& cluster,
                             const ParallelizeOptions& o, ParallelizeResult& r) {
  ASSIGN_OR_RETURN(r.memory, PlanDeviceMemory(g, r.ops, o));
  return CheckFitsDevice(r.memory, cluster);
}

// One restricted DP run, memory checked afterwards.
struct Attempt {
  absl::Status status;
  bool has_plan = false;
  ParallelizeResult result;
};
absl::StatusOr<Attempt> RunRestricted(const Graph& g, const costmodel::ClusterSpec& cluster,
                                      costmodel::CostModel& cm, ParallelizeOptions o,
                                      Filter filter) {
  o.check_memory = false;
  o.filter = std::move(filter);
  Attempt a;
  absl::StatusOr<ParallelizeResult> r = ParallelizeForward(g, cluster, cm, o);
  if (!r.ok()) {
    // A stop leaves the row without a plan, saying why.
    if (r.status().code() != absl::StatusCode::kNotFound && !Stopped(r.status(), o.stop))
      return r.status();
    a.status = r.status();
    return a;
  }
  a.result = *std::move(r);
  a.has_plan = true;
  a.status = CheckPlanMemory(g, cluster, o, a.result);
  if (a.status.code() == absl::StatusCode::kInvalidArgument) return a.status;
  return a;
}

// Fits beats over-memory; then faster.
bool Better(const Attempt& a, const Attempt& b) {
  if (!a.has_plan) return false;
  if (!b.has_plan) return true;
  if (a.status.ok() != b.status.ok()) return a.status.ok();
  return a.result.time_s < b.result.time_s;
}

StrategyRow ToRow(std::string name, std::string description, Attempt a, double search_s) {
  StrategyRow row;
  row.name = std::move(name);
  row.description = std::move(description);
  row.status = std::move(a.status);
  row.has_plan = a.has_plan;
  row.result = std::move(a.result);
  row.search_s = search_s;
  return row;
}

}  // namespace

absl::StatusOr<StrategyRow> DataParallelRow(const Graph& forward,
                                            const costmodel::ClusterSpec& cluster,
                                            costmodel::CostModel& cm,
                                            const ParallelizeOptions& base) {
  RETURN_IF_ERROR(costmodel::ValidateCluster(cluster));
  const int degree = base.degree == 0 ? cluster.num_ranks : base.degree;
  if (degree < 1 || degree > cluster.num_ranks) {
    return absl::InvalidArgumentError(absl::StrCat("strategy table: degree ", degree,
                                                   " outside [1, ", cluster.num_ranks, "]"));
  }
  // Every plan the service returns is at least this one, so the budget never
  // cuts it short (one config per op: the cheapest DP); a cancel does.
  const auto start = std::chrono::steady_clock::now();
  ParallelizeOptions dp = base;
  dp.parallel_strands = false;  // every op on every device
  dp.filtered_fallback = true;   // ops without a batch dim run whole, as under DDP
  dp.stop = base.stop.FlagsOnly();
  ASSIGN_OR_RETURN(Attempt a,
                   RunRestricted(forward, cluster, cm, dp, DataParallelFilter(degree)));
  return ToRow("data_parallel",
               absl::StrCat("every op data parallel over ", degree,
                            " devices, weights replicated, gradients all-reduced"),
               std::move(a), Seconds(start));
}

bool HasAttention(const Graph& g) {
  for (OpId op = 0; op < g.num_ops(); ++op) {
    const graph::Op& o = g.op(op);
    if (o.phase != graph::Phase::kForward) continue;
    if (o.kind != OpKind::kSoftmax || o.inputs.empty() || o.outputs.size() != 1) continue;
    const OpId p = ProducerThroughElementwise(g, o.inputs[0]);
    if (p != graph::kNoId && IsBatchedActivationMatMul(g, p) && FeedsBatchedMatMul(g, o.outputs[0]))
      return true;
  }
  return false;
}

bool HasLinearStack(const Graph& g) {
  int weights = 0;
  for (OpId op = 0; op < g.num_ops(); ++op) {
    const graph::Op& o = g.op(op);
    if (o.phase != graph::Phase::kForward) continue;
    if (o.kind == OpKind::kConv || IsEmbedding(g, op) || IsBatchedActivationMatMul(g, op))
      return false;
    weights += IsWeightMatMul(g, op);
  }
  return weights >= 2;
}

bool HasEmbeddingTables(const Graph& g) {
  for (OpId op = 0; op < g.num_ops(); ++op)
    if (g.op(op).phase == graph::Phase::kForward && IsEmbeddingBag(g, op)) return true;
  return false;
}

absl::StatusOr<std::vector<StrategyRow>> ParallelStrategyTable(
    const Graph& forward, const costmodel::ClusterSpec& cluster, costmodel::CostModel& cm,
    const StrategyTableOptions& options) {
  RETURN_IF_ERROR(costmodel::ValidateCluster(cluster));
  const ParallelizeOptions& base = options.base;
  const int degree = base.degree == 0 ? cluster.num_ranks : base.degree;
  if (degree < 1 || degree > cluster.num_ranks) {
    return absl::InvalidArgumentError(absl::StrCat("strategy table: degree ", degree,
                                                   " outside [1, ", cluster.num_ranks, "]"));
  }
  std::vector<StrategyRow> rows;
  using Clock = std::chrono::steady_clock;
  // Data parallelism and Megatron put every op on every device.
  ParallelizeOptions everywhere = base;
  everywhere.parallel_strands = false;

  if (options.include_data_parallel) {
    ASSIGN_OR_RETURN(StrategyRow dp, DataParallelRow(forward, cluster, cm, base));
    rows.push_back(std::move(dp));
  }

  const bool attention = HasAttention(forward);
  const bool linear_stack = !attention && HasLinearStack(forward);
  if (options.include_expert && (attention || linear_stack)) {
    // Megatron-LM: model degree m inside a node, data degree across; the
    // best m that fits, as users sweep it.
    const auto start = Clock::now();
    Attempt best;
    best.status = absl::NotFoundError(
        absl::StrCat("no model degree 1 < m <= ", cluster.devices_per_node,
                     " (a node) divides the degree ", degree));
    int best_m = 0;
    std::vector<std::string> tried;
    for (int m = 2; m <= degree && m <= cluster.devices_per_node; ++m) {
      if (degree % m != 0) continue;
      ASSIGN_OR_RETURN(Attempt a, RunRestricted(forward, cluster, cm, everywhere,
                                                MegatronFilter(forward, degree / m, m)));
      if (!a.has_plan) {
        if (best_m == 0) best.status = a.status;
        if (Stopped(a.status, base.stop)) break;  // the best m so far
        continue;
      }
      tried.push_back(absl::StrCat(m));
      if (Better(a, best) || best_m == 0) {
        best = std::move(a);
        best_m = m;
      }
    }
    rows.push_back(ToRow(
        "expert:megatron",
        best_m == 0
            ? "Megatron-LM: no model degree inside a node gives every weight MatMul a "
              "column/row split and attention a head split"
            : absl::StrCat(linear_stack
                               ? "Megatron-LM's MLP blocks: Linears column then row parallel in "
                                 "pairs over M="
                               : "Megatron-LM: weight MatMuls column then row in pairs, attention "
                                 "head-parallel over M=",
                           best_m, " in a node, data parallel D=", degree / best_m,
                           " across (best of M in {", absl::StrJoin(tried, ","), "})"),
        std::move(best), Seconds(start)));
  }

  if (options.include_expert && HasEmbeddingTables(forward)) {
    const auto start = Clock::now();
    std::map<int, int> table_degrees;  // data degree -> tables
    Filter f = DlrmFilter(forward, degree, base.max_model_dims, &table_degrees);
    // Neo's sharding planner picks per table among table-wise (a whole
    // table on one device), row-wise and column-wise: the DP keeps the faster
    // of the tables sharded over every device and the tables whole, side by
    // side (strands on one device each).
    ParallelizeOptions neo = base;
    neo.strand_devices = {1};
    ASSIGN_OR_RETURN(Attempt a, RunRestricted(forward, cluster, cm, neo, std::move(f)));
    std::string how;
    if (a.has_plan && !a.result.strand_blocks.empty()) {
      const StrandPlacement& b = a.result.strand_blocks[0];
      how = absl::StrCat("table-wise: ", b.strands, " embedding bags whole, ", b.per_group,
                         " per device on ", std::min(b.strands, b.groups), " of ", degree,
                         " devices");
    } else {
      std::vector<std::string> tables;
      for (const auto& [d, n] : table_degrees)
        tables.push_back(absl::StrCat(n, " at D=", d, " x M=", degree / d));
      how = absl::StrCat("embedding bags row/column split (tables: ", absl::StrJoin(tables, ", "),
                         ")");
    }
    rows.push_back(ToRow("expert:dlrm",
                         absl::StrCat("Neo (DLRM): ", how, ", every other op data parallel over ",
                                      degree, " (the faster of table-wise and sharded)"),
                         std::move(a), Seconds(start)));
  }

  // braid: the DP over every op's configs. When its plan runs strands side
  // by side, the best plan with every op on every device is a row as well:
  // per-device graphs (the fusion search, the simulator, the executor) are
  // one program for all the devices and can only take that one.
  auto braid_row = [&](const ParallelizeOptions& base, std::string name,
                       std::string what) -> absl::StatusOr<StrategyRow> {
    const auto start = Clock::now();
    Attempt per_degree;
    absl::StatusOr<ParallelizeResult> r = ParallelizeForward(forward, cluster, cm, base);
    if (r.ok()) {
      per_degree.has_plan = true;
      per_degree.result = *std::move(r);
    } else if (r.status().code() == absl::StatusCode::kResourceExhausted ||
               r.status().code() == absl::StatusCode::kNotFound || Stopped(r.status(), base.stop)) {
      per_degree.status = r.status();
    } else {
      return r.status();
    }
    std::string picked = base.check_memory ? "one data degree on every op" : "unrestricted";
    std::string note;
    Attempt chosen = std::move(per_degree);
    if (!base.check_memory && chosen.has_plan) {
      chosen.status = CheckPlanMemory(forward, cluster, base, chosen.result);
    }
    if (base.check_memory && !base.stop.StopRequested()) {
      // The unrestricted DP (ops may mix data degrees, as the expert:dlrm
      // plan does): kept when it fits and is faster. Its frontier grows with
      // every data degree allowed on every op; on branchy graphs (Inception)
      // it is bounded and skipped past the bound.
      ParallelizeOptions fo = base;
      if (fo.max_frontier_states <= 0) {
        fo.max_frontier_states = kUnrestrictedFrontier;
        fo.max_boundary_choices =
            std::max<int64_t>(fo.max_boundary_choices, static_cast<int64_t>(kUnrestrictedFrontier));
      }
      absl::StatusOr<Attempt> free = RunRestricted(forward, cluster, cm, fo, base.filter);
      if (!free.ok()) {
        if (free.status().code() != absl::StatusCode::kResourceExhausted) return free.status();
        note = absl::StrCat("; unrestricted DP skipped: ", free.status().message());
      } else if (free->has_plan && free->status.ok() &&
                 (!chosen.has_plan || !chosen.status.ok() ||
                  free->result.time_s < chosen.result.time_s)) {
        free->result.candidates = std::move(chosen.result.candidates);
        chosen = *std::move(free);
        picked = "unrestricted";
      } else if (!chosen.has_plan && free->has_plan) {
        chosen = *std::move(free);  // nothing fits: report the unrestricted plan, over memory
        picked = "unrestricted";
      }
    }
    std::string strands;
    for (const StrandPlacement& b : chosen.result.strand_blocks)
      absl::StrAppend(&strands, "; ", b.strands, " strands into ", b.sink, " side by side on ",
                      b.devices_per_strand, " device(s) each");
    return ToRow(std::move(name),
                 absl::StrCat(what, " (", picked, " plan), memory checked", strands, note),
                 std::move(chosen), Seconds(start));
  };
  ASSIGN_OR_RETURN(StrategyRow braid,
                   braid_row(base, "braid", "Unity machine-mapping DP over every op's configs"));
  const bool side_by_side = braid.has_plan && !braid.result.strand_blocks.empty();
  rows.push_back(std::move(braid));
  if (side_by_side) {
    ASSIGN_OR_RETURN(StrategyRow all,
                     braid_row(everywhere, "braid:all-devices",
                               "braid's DP with every op on every device, the plan per-device "
                               "graphs can express"));
    rows.push_back(std::move(all));
  }
  return rows;
}

}  // namespace braid::search
